"""The reports as a reader opens them: headless Chromium at 1400 px, driven over the DevTools
protocol (tests/chromium.py). Each page loads with no console error and no request beyond
the file itself and its embedded images; every section renders; the opening section shows
summary.json's and procurement.csv's figures; printing hides the interactive charts and shows
the static ones. A screenshot and a PDF of the plan report are left in pytest's temporary
folder, or in $FLEETPLAN_ARTIFACTS when set, as artifacts.

Skipped when Chromium is not installed, unless FLEETPLAN_REQUIRE_BROWSER is set (CI)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest
from chromium import WAIT_FOR_RENDERED, Chromium, find_chromium

from fleetplan import write_comparison
from optimizer.cli.main import main
from optimizer.commands.compare import compare
from optimizer.commands.report import SECTIONS, compare_page, sweep_page

SECTION_STATE = """Array.from(document.querySelectorAll("main > section")).map(function (s) {
  var figures = Array.from(s.querySelectorAll("figure.chart"));
  return {id: s.id, height: s.getBoundingClientRect().height, missing: s.querySelectorAll(".missing").length,
          figures: figures.length,
          drawn: figures.filter(function (f) { return f.classList.contains("live") && f.querySelector(".main-svg"); }).length,
          images: figures.filter(function (f) { return f.querySelector("img.static").naturalWidth > 0; }).length};
})"""
PRINT_STATE = """Array.from(document.querySelectorAll("figure.chart")).map(function (f) {
  return [getComputedStyle(f.querySelector(".interactive")).display, getComputedStyle(f.querySelector("img.static")).display];
})"""


def _rows(browser: Chromium, session: str, table_id: str) -> list[dict]:
    cells = browser.evaluate(session, f"""Array.from(document.querySelectorAll("#{table_id} tr")).map(function (tr) {{
        return Array.from(tr.children).map(function (c) {{ return c.innerText.trim(); }}); }})""")
    head, *body = cells
    return [dict(zip(head, row)) for row in body]


def _number(text: str) -> float:
    """'$3.74 M' → 3.74e6, '1,160' → 1160, '36.7 %' → 0.367, '−$1.2 k' → −1200."""
    sign = -1.0 if text.startswith("−") else 1.0
    body = text.lstrip("−+").replace("$", "").replace(",", "").strip()
    if body.endswith("%"):
        return sign * float(body[:-1]) / 100
    number, _, unit = body.partition(" ")
    return sign * float(number) * {"B": 1e9, "M": 1e6, "k": 1e3, "ms": 1.0}.get(unit, 1.0)


def _shown(text: str, value: float) -> bool:
    """``text`` shows ``value`` to its displayed precision (three significant digits or better)."""
    return abs(_number(text) - value) <= 5e-3 * abs(value) + 5e-3


@pytest.fixture(scope="module")
def browser():
    binary = find_chromium()
    if binary is None:
        if os.environ.get("FLEETPLAN_REQUIRE_BROWSER"):
            pytest.fail("headless Chromium is required here but not installed (apt-get install chromium)")
        pytest.skip("headless Chromium is not installed (.ci/run installs it)")
    with Chromium(binary) as b:
        yield b


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """Where the screenshot and the PDF go: $FLEETPLAN_ARTIFACTS when set (CI), else pytest's
    temporary folder."""
    chosen = os.environ.get("FLEETPLAN_ARTIFACTS")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    return tmp_path_factory.mktemp("report-artifacts")


@pytest.fixture(scope="module")
def plan_page(browser, report_plan):
    page = report_plan / "report.html"
    session = browser.open(page.as_uri(), 1400, 1000)
    assert browser.evaluate(session, WAIT_FOR_RENDERED) == "ok"
    return page, session


def _clean_and_offline(browser: Chromium, session: str, page: Path) -> None:
    assert browser.problems(session) == []
    elsewhere = [u for u in browser.requests(session) if u != page.as_uri() and not u.startswith("data:image/png")]
    assert elsewhere == []
    assert page.as_uri() in browser.requests(session)  # the recording works: the page itself was seen


def test_the_plan_report_loads_offline_without_errors(browser, plan_page):
    page, session = plan_page
    _clean_and_offline(browser, session, page)


def test_every_section_renders_with_its_charts(browser, plan_page):
    _, session = plan_page
    state = {s["id"]: s for s in browser.evaluate(session, SECTION_STATE)}
    assert list(state) == list(SECTIONS)
    for sid, s in state.items():
        assert s["height"] > 50 and s["missing"] == 0, s
        assert s["drawn"] == s["figures"] == s["images"], s
    assert sum(s["figures"] for s in state.values()) == len(SECTIONS) - 2  # all but the opening and appendix


def test_charts_answer_hovers_and_menus_pick_a_workload(browser, plan_page, report_plan):
    _, session = plan_page
    hover = browser.evaluate(session, """(function () {
      var d = document.querySelector("#utilisation .interactive");
      Plotly.Fx.hover(d, [{curveNumber: 1, pointNumber: 1}]);
      return Array.from(d.querySelectorAll(".hoverlayer text")).map(function (t) { return t.textContent; });
    })()""")
    assert len(hover) == 1 and hover[0].endswith("% of provisioned GPUs serving")
    pools = pd.read_csv(report_plan / "pools.csv")
    workloads = sorted(pools["workload"].unique())
    always = {"map": 5}  # land, coast, borders, metros and sites show in every map view
    for sid in ("map", "gpus-over-the-day"):
        shown = browser.evaluate(session, f"""(function () {{
          var d = document.querySelector("#{sid} .interactive");
          return d.layout.updatemenus[0].buttons.map(function (b) {{
            Plotly.restyle(d, b.args[0]);
            return [b.label, d.data.filter(function (t) {{ return t.visible !== false; }}).length];
          }});
        }})()""")
        assert [label for label, _ in shown] == ["all workloads", *workloads]
        if sid == "gpus-over-the-day":  # one stacked area per site in every view
            assert all(visible == pools["site"].nunique() for _, visible in shown)
        else:  # each view adds its own flows
            assert all(visible > always[sid] for _, visible in shown)


def test_the_opening_shows_the_plans_figures(browser, plan_page, report_plan):
    _, session = plan_page
    summary = json.loads((report_plan / "summary.json").read_text())
    proc = pd.read_csv(report_plan / "procurement.csv")
    nodes = proc[proc["gpu"] != "egress"].set_index("site")

    cards = {c: browser.evaluate(session, f'document.querySelector("#{c} .value").innerText')
             for c in ("card-total", "card-commitment", "card-token", "card-gpus", "card-savings", "card-gap")}
    assert _shown(cards["card-total"], summary["total_cost_usd"])
    assert _shown(cards["card-commitment"], nodes["cost_reserved_usd"].sum() / 12)
    assert _shown(cards["card-token"], summary["cost_per_million_tokens_usd"])
    assert _number(cards["card-gpus"]) == sum(summary["gpus_by_type_peak"].values())
    assert _shown(cards["card-savings"], summary["savings_vs_baseline"])
    assert _shown(cards["card-gap"], summary["mip_gap"])

    commitment = _rows(browser, session, "commitment")
    for row in commitment[:-1]:
        r = nodes.loc[row["site"]]
        assert row["accelerator"] == r["gpu"] and row["term"] == "reserved, 3 years"
        assert _number(row["nodes"]) == r["reserved_3y_nodes"]
        assert _number(row["GPUs"]) == 4 * r["reserved_3y_nodes"]  # 4-GPU nodes in the test scenario
        assert _shown(row["a year"], r["cost_reserved_usd"]) and _shown(row["a month"], r["cost_reserved_usd"] / 12)
    assert commitment[-1]["site"] == "total" and _number(commitment[-1]["nodes"]) == nodes["reserved_nodes"].sum()

    rented = _rows(browser, session, "ondemand")
    assert {r["site"] for r in rented} == set(nodes.index[nodes["ondemand_node_hours"] > 0])
    for row in rented:
        r = nodes.loc[row["site"]]
        assert _number(row["most nodes at once"]) == r["ondemand_nodes_peak"]
        assert _number(row["node-hours a year"]) == round(r["ondemand_node_hours"])
        assert _shown(row["rental a year"], r["cost_ondemand_usd"])
        assert _shown(row["cold starts a year"], r["cost_ramp_usd"])

    tokens = {r["workload"]: r for r in _rows(browser, session, "cost-per-token-table")}
    assert set(tokens) == set(summary["cost_per_million_tokens_usd_by_workload"])
    for k, row in tokens.items():
        assert _shown(row["plan"], summary["cost_per_million_tokens_usd_by_workload"][k])
        listed = summary["token_billing"]["by_workload"][k]["list_usd_per_million_output_tokens"]
        assert _shown(row["per-token list price"], listed)
        base = summary["baseline_cost_usd_by_workload"][k] / summary["cost_usd_by_workload"][k]
        assert _shown(row["hand-made baseline"], summary["cost_per_million_tokens_usd_by_workload"][k] * base)

    latency = {r["workload"]: r for r in _rows(browser, session, "latency")}
    for v in summary["verification"]["by_workload"]:
        assert _shown(latency[v["workload"]]["p99 TTFT measured"].replace("ms", "").strip(), v["ttft_p99_ms_measured"])

    opening = browser.evaluate(session, 'document.getElementById("opening").innerText')
    assert "Stress test (demand ×1.2)" in opening and "Operational year (8,760 hours" in opening
    assert f"at most {100 * summary['mip_gap']:.1f} % above the cheapest possible one" in opening


def test_printing_shows_the_static_charts_and_a_pdf_and_screenshot_are_made(browser, plan_page, artifacts):
    _, session = plan_page
    shot = browser.screenshot(session, artifacts / "report-1400.png")
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])  # the PNG header's IHDR
    assert (width, height) == (1400, 1000)
    browser.screenshot(session, artifacts / "report-full.png", full_page=True)
    browser.send("Emulation.setEmulatedMedia", {"media": "print"}, session)
    try:
        assert set(map(tuple, browser.evaluate(session, PRINT_STATE))) == {("none", "block")}
    finally:
        browser.send("Emulation.setEmulatedMedia", {"media": ""}, session)
    pdf = browser.print_pdf(session, artifacts / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    assert max(int(n) for n in re.findall(rb"/Count (\d+)", pdf)) >= 3  # pages
    print(f"\nreport artifacts: {artifacts}")


def test_compare_and_sweep_pages_load_offline(browser, report_plan, tmp_path):
    write_comparison(compare([report_plan, report_plan]), tmp_path / "compare")
    table = pd.DataFrame([
        {"run_id": "a", "demand.scale": None, "status": "gap_above_target", "total_cost_usd": 2.0e6},
        {"run_id": "b", "demand.scale": 0.5, "status": "gap_above_target", "total_cost_usd": 1.1e6},
        {"run_id": "c", "demand.scale": 2, "status": "infeasible", "total_cost_usd": None, "diagnosis": "too much"}])
    (tmp_path / "sweep").mkdir()
    sweep_page.write_sweep_report(table, {"demand.scale": [0.5, 2]}, "one-at-a-time", tmp_path / "sweep")
    for page, sections in ((tmp_path / "compare" / "compare.html", compare_page.SECTIONS),
                           (tmp_path / "sweep" / "sweep.html", sweep_page.SECTIONS)):
        session = browser.open(page.as_uri(), 1400, 1000)
        assert browser.evaluate(session, WAIT_FOR_RENDERED) == "ok"
        _clean_and_offline(browser, session, page)
        state = browser.evaluate(session, SECTION_STATE)
        assert [s["id"] for s in state] == list(sections)
        assert all(s["height"] > 30 and s["missing"] == 0 and s["drawn"] == s["figures"] for s in state), state


def test_a_script_in_a_scenario_name_stays_text(browser, tmp_path):
    out = tmp_path / "p"
    assert main(["plan", str(Path(__file__).parent / "data" / "tiny.yaml"), "--out", str(out), "--quiet",
                 "--set", "name=<script>window.injected = 1</script>"]) == 0
    page = out / "report.html"
    session = browser.open(page.as_uri(), 1400, 1000)
    assert browser.evaluate(session, WAIT_FOR_RENDERED) == "ok"
    assert browser.evaluate(session, "typeof window.injected") == "undefined"
    assert browser.evaluate(session, 'document.querySelector("h1").innerText') == \
        "fleetplan — <script>window.injected = 1</script>"
    _clean_and_offline(browser, session, page)
    shutil.rmtree(out)
