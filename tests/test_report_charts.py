"""Every chart's plotted series, recomputed here from the plan folder's files with plain pandas
(none of the report's code), must equal what the chart plots; and the figures people read
must be formatted as people read them."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.path import Path as Outline

from optimizer.commands.report import charts
from optimizer.commands.report import formatting as f
from optimizer.commands.report.folder import read_plan_folder
from optimizer.commands.report.land import LAND_FILE, decode_arcs, load_land, ring
from optimizer.commands.report.maps import flows_data, metros_data, sites_data
from optimizer.commands.report.opening import commitment_data, ondemand_table_data


@pytest.fixture(scope="module")
def folder(report_plan):
    return read_plan_folder(report_plan)


@pytest.fixture(scope="module")
def raw(report_plan):
    """The folder's files as a reader with pandas would take them."""
    tables = {n: pd.read_csv(report_plan / f"{n}.csv") for n in ("procurement", "pools", "routing", "slo")}
    summary = json.loads((report_plan / "summary.json").read_text())
    scenario = json.loads((report_plan / "scenario.json").read_text())
    return tables, summary, scenario


def _hours(scenario: dict) -> dict:
    """Hours of the year each (period, hour) slice stands for: days · 24 / planned hours a day
    (the test scenario has one day type)."""
    hours = scenario["horizon"]["hours"]
    return {(p["id"], h): p["days"] * 24 / len(hours) for p in scenario["horizon"]["periods"] for h in hours}


def _provisioning(raw) -> pd.DataFrame:
    """Per (site, gpu, period, hour): GPUs in replicas, on-demand nodes by the plan's rule
    o = ⌈max(0, ⌈GPUs / per node⌉ − committed) / (1 − warm)⌉, GPUs provisioned, hours."""
    tables, _, scenario = raw
    warm = scenario["policy"]["warm_pool_fraction"]
    pools = tables["pools"][tables["pools"]["lost_site"].isna()]
    rows = []
    for r in tables["procurement"][tables["procurement"]["gpu"] != "egress"].itertuples():
        per_node = int(scenario["accelerators"][r.gpu]["gpus_per_node"])
        for (period, hour), weight in _hours(scenario).items():
            here = pools[(pools.site == r.site) & (pools.gpu == r.gpu) & (pools.period == period) & (pools.hour == hour)]
            used = int((here.replicas * here.gpus_per_replica).sum())
            ondemand = math.ceil(max(0, math.ceil(used / per_node) - r.reserved_nodes) / (1 - warm) - 1e-9)
            rows.append({"site": r.site, "gpu": r.gpu, "period": period, "hour": hour, "weight": weight, "used": used,
                         "ondemand": ondemand, "provisioned": (r.reserved_nodes + ondemand) * per_node})
    return pd.DataFrame(rows)


def test_the_test_plan_has_what_the_charts_must_get_right(raw):
    tables, _, scenario = raw
    assert scenario["accelerators"]["h100-sxm"]["gpus_per_node"] in (4, "4")  # not 8
    assert tables["procurement"]["site"].nunique() == 3  # two sites and the egress row
    assert tables["procurement"]["ondemand_node_hours"].sum() > 0
    assert tables["pools"]["workload"].nunique() == 2


def test_on_demand_nodes_per_hour_add_up_to_procurement(folder, raw):
    mine = _provisioning(raw)
    tables, _, _ = raw
    hours = (mine["ondemand"] * mine["weight"]).groupby(mine["site"]).sum()
    proc = tables["procurement"].set_index("site")
    for site, value in hours.items():
        assert value == pytest.approx(proc.loc[site, "ondemand_node_hours"])
        assert mine[mine.site == site]["ondemand"].max() == proc.loc[site, "ondemand_nodes_peak"]
    data = charts.ondemand_data(folder).merge(mine, on=["site", "gpu", "period", "hour"])
    assert len(data) == len(mine)
    assert (data["ondemand_nodes"] == data["ondemand"]).all()
    assert charts.ondemand(folder).note == ""  # the reconstruction matched procurement.csv


def test_utilisation_sums_gpus_per_site_and_hour_and_matches_the_summary(folder, raw):
    mine = _provisioning(raw)
    _, summary, _ = raw
    year = (mine["used"] * mine["weight"]).sum() / (mine["provisioned"] * mine["weight"]).sum()
    assert year == pytest.approx(summary["average_utilization"], rel=1e-12)
    chart = charts.utilisation(folder)
    data = chart.data.set_index(["site", "hour"])["utilisation"]
    mine["wu"], mine["wp"] = mine["used"] * mine["weight"], mine["provisioned"] * mine["weight"]
    for (site, hour), g in mine.groupby(["site", "hour"]):
        assert data[(site, hour)] == pytest.approx(g["wu"].sum() / g["wp"].sum(), rel=1e-12)
    for hour, g in mine.groupby("hour"):
        assert data[(charts.ALL_SITES, hour)] == pytest.approx(g["wu"].sum() / g["wp"].sum(), rel=1e-12)
    fleet = chart.data[chart.data["site"] == charts.ALL_SITES]
    assert fleet["used_gpu_hours"].sum() / fleet["provisioned_gpu_hours"].sum() == pytest.approx(
        summary["average_utilization"], rel=1e-12)
    assert chart.data["utilisation"].between(0, 1).all()
    assert len(chart.png) > 1000 and len(chart.figure.data) == chart.data["site"].nunique()


def test_gpus_over_the_day_sum_replica_gpus(folder, raw):
    tables, _, _ = raw
    pools = tables["pools"][tables["pools"]["lost_site"].isna()]
    data = charts.gpus_over_the_day(folder).data
    for (site, workload, period, hour), g in pools.groupby(["site", "workload", "period", "hour"]):
        row = data[(data.site == site) & (data.workload == workload) & (data.period == period) & (data.hour == hour)]
        assert row["gpus"].item() == (g.replicas * g.gpus_per_replica).sum()
    for (site, period, hour), g in pools.groupby(["site", "period", "hour"]):
        row = data[(data.site == site) & (data.workload == charts.ALL_WORKLOADS) & (data.period == period)
                   & (data.hour == hour)]
        assert row["gpus"].item() == (g.replicas * g.gpus_per_replica).sum()
    assert len(data) == 3 * 2 * 8  # (all, two workloads) × two sites × eight slices, zeros included


def test_cost_stack_is_procurement_line_by_line(folder, raw):
    tables, summary, _ = raw
    data = charts.cost_stack(folder).data
    proc = tables["procurement"].set_index(["site", "gpu"])
    for r in data.itertuples():
        column = {"reserved": "cost_reserved_usd", "on-demand": "cost_ondemand_usd", "cold starts": "cost_ramp_usd",
                  "egress": "cost_usd"}[r.line]
        assert r.usd == pytest.approx(proc.loc[("*" if r.gpu == "egress" else r.site, r.gpu), column])
    assert data["usd"].sum() == pytest.approx(summary["total_cost_usd"], rel=1e-12)


def test_ttft_waterfall_takes_each_workloads_slowest_arc(folder, raw):
    tables, _, _ = raw
    slo = tables["slo"]
    data = charts.ttft_waterfall(folder).data
    for workload, g in slo.groupby("workload"):
        worst = g.loc[g["ttft_p99_ms_predicted"].idxmax()]
        parts = data[data.workload == workload].set_index("part")["ms"]
        assert parts["network"] == pytest.approx(worst["network_ms"])
        assert parts["queue"] == pytest.approx(worst["queue_ms"])
        assert parts["prefill"] == pytest.approx(worst["prefill_ms"])
        assert parts.drop("slack").sum() == pytest.approx(worst["ttft_p99_ms_predicted"])
        assert parts.sum() == pytest.approx(max(worst["ttft_p99_ms_objective"], worst["ttft_p99_ms_predicted"]))


def test_cost_per_token_against_baseline_and_list(folder, raw):
    _, summary, _ = raw
    data = charts.cost_per_token(folder).data.set_index(["workload", "measure"])["usd_per_million_tokens"]
    base = summary["baseline_cost_usd_by_workload"]
    assert sum(base.values()) == pytest.approx(summary["baseline_cost_usd"], rel=1e-9)
    for k, plan in summary["cost_per_million_tokens_usd_by_workload"].items():
        tokens_millions = summary["cost_usd_by_workload"][k] / plan
        assert data[(k, "plan")] == pytest.approx(plan)
        assert data[(k, "hand-made baseline")] == pytest.approx(base[k] / tokens_millions)
        listed = summary["token_billing"]["by_workload"][k]["list_usd_per_million_output_tokens"]
        assert data[(k, "per-token list price")] == pytest.approx(listed)
        measured = summary["verification"]["token_billing"]["by_workload"][k]
        assert data[(k, "plan, measured goodput (verify)")] == pytest.approx(
            measured["gpu_cost_usd_per_million_goodput_tokens"])


def test_map_flows_are_year_averages_and_sites_are_sized_by_gpus(folder, raw):
    tables, _, scenario = raw
    hours = _hours(scenario)
    routing = tables["routing"].assign(w=[hours[(p, h)] for p, h in zip(tables["routing"].period, tables["routing"].hour)])
    data = flows_data(folder).set_index(["metro", "site", "workload", "tier"])
    for key, g in routing.groupby(["metro", "site", "workload", "tier"]):
        assert data.loc[key, "requests_per_s"] == pytest.approx((g.requests_per_s * g.w).sum() / 8760)
        assert data.loc[key, "tier_rtt_ms"] == scenario["serving"]["tier_rtt_ms"][key[3]]
    mine = _provisioning(raw)
    peaks = mine.groupby(["site", "period", "hour"])["provisioned"].sum().groupby(level="site").max()
    sites = sites_data(folder).set_index("site")["gpus_peak"]
    assert sites.to_dict() == peaks.to_dict()
    metros = metros_data(folder).set_index("metro")["requests_per_s"]
    assert metros.sum() == pytest.approx(data["requests_per_s"].sum())


def test_commitment_and_rental_tables_are_procurement(folder, raw):
    tables, _, scenario = raw
    proc = tables["procurement"][tables["procurement"]["gpu"] != "egress"].set_index("site")
    sign = commitment_data(folder).set_index("site")
    for site, r in proc.iterrows():
        assert sign.loc[site, "term"] == "reserved, 3 years"
        assert sign.loc[site, "nodes"] == r["reserved_3y_nodes"]
        assert sign.loc[site, "gpus"] == r["reserved_3y_nodes"] * 4
        assert sign.loc[site, "usd_per_year"] == pytest.approx(r["cost_reserved_usd"])
        assert sign.loc[site, "usd_per_month"] == pytest.approx(r["cost_reserved_usd"] / 12)
    rented = ondemand_table_data(folder).set_index("site")
    mine = _provisioning(raw)
    for site, r in rented.iterrows():
        assert r["node_hours"] == proc.loc[site, "ondemand_node_hours"]
        assert r["usd_per_year"] == pytest.approx(proc.loc[site, "cost_ondemand_usd"])
        here = mine[mine.site == site]
        busiest = here.loc[here["ondemand"].idxmax()]  # the first busiest slice in planning order
        assert f"most ({busiest['ondemand']}) in {busiest['period']} · {busiest['hour']:02d}:00 UTC" in r["when"]


def test_a_folder_without_its_scenario_is_refused_and_a_broken_check_output_is_named(report_plan, tmp_path, capsys):
    from optimizer.cli.main import main
    from optimizer.commands.report import SECTIONS, write_report

    copy = tmp_path / "plan"
    shutil.copytree(report_plan, copy)
    (copy / "scenario.json").rename(tmp_path / "scenario.json")
    assert main(["report", str(copy)]) == 2  # the plan itself is incomplete: a clear refusal
    assert "scenario.json missing" in capsys.readouterr().err
    (tmp_path / "scenario.json").rename(copy / "scenario.json")
    (copy / "stress.json").write_text("{not json")  # an optional check's output is broken: the report says so
    text = write_report(copy).read_text()
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in text
    assert "stress.json: unreadable" in text
    assert "$" in text.split('id="opening"')[1].split("</section>")[0]  # the opening still answers


def test_names_from_the_scenario_stay_text(tmp_path):
    from pathlib import Path

    from optimizer.cli.main import main

    out = tmp_path / "p"
    assert main(["plan", str(Path(__file__).parent / "data" / "tiny.yaml"), "--out", str(out), "--quiet",
                 "--set", "name=<script>alert(1)</script>"]) == 0
    text = (out / "report.html").read_text()
    assert "<script>alert(1)" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    specs = text.split('class="plot-spec">')[1:]
    assert specs and all("<" not in s.split("</script>")[0] for s in specs)


# ---------------------------------------------------------------------------- land


def test_the_shipped_land_is_small_and_puts_cities_on_land():
    assert LAND_FILE.stat().st_size < 200_000
    land = load_land()
    outlines = [Outline(a) for a in land.areas]
    on_land = lambda lon, lat: any(o.contains_point((lon, lat)) for o in outlines)  # noqa: E731
    assert on_land(-112.07, 33.45) and on_land(8.68, 50.11) and on_land(-77.49, 39.04)  # Phoenix, Frankfurt, Ashburn
    assert not on_land(-40.0, 40.0) and not on_land(-150.0, 20.0)  # mid-Atlantic, mid-Pacific
    assert len(land.coast) > 100 and len(land.borders) > 100
    window = land.within((-130, -60), (20, 55))
    assert 0 < len(window.areas) < len(land.areas)


def test_topojson_arcs_decode_by_hand():
    topology = {"transform": {"scale": [0.5, 2.0], "translate": [10.0, -5.0]},
                "arcs": [[[0, 0], [2, 0], [0, 1]], [[2, 1], [-2, -1]]]}
    first, second = decode_arcs(topology)
    assert first.tolist() == [[10.0, -5.0], [11.0, -5.0], [11.0, -3.0]]
    assert second.tolist() == [[11.0, -3.0], [10.0, -5.0]]
    assert ring([first, second], [0, 1]).tolist() == [[10.0, -5.0], [11.0, -5.0], [11.0, -3.0], [10.0, -5.0]]
    assert ring([first, second], [~1, ~0]).tolist() == [[10.0, -5.0], [11.0, -3.0], [11.0, -5.0], [10.0, -5.0]]


# ---------------------------------------------------------------------------- people's numbers


def test_numbers_read_as_people_write_them():
    assert f.usd(10_943_938) == "$10.9 M"
    assert f.usd(3_743_533.44) == "$3.74 M"
    assert f.usd(457_315.2) == "$457 k"
    assert f.usd(13_493.8) == "$13.5 k"
    assert f.usd(6_963.5) == "$6,964"
    assert f.usd(0.5979) == "$0.598" and f.usd(1.122) == "$1.12" and f.usd(2.5e9) == "$2.50 B"
    assert f.usd(-1_450_000) == "−$1.45 M" and f.usd(None) == "–"
    assert f.count(1464) == "1,464" and f.count(82_589.4) == "82,589"
    assert f.pct(0.8105) == "81.0 %" and f.pct(0.0065, 2, signed=True) == "+0.65 %"
    assert f.ms(2316.4) == "2,316 ms" and f.ms(9.46) == "9.5 ms"
    assert f.significant(9.996) == "10.0" and f.number(3.744e6) == "3,744,000"
    assert f.ranges([22, 23, 0, 1], wrap=24) == [(22, 1)]
    assert f.ranges([1, 2, 3, 7]) == [(1, 3), (7, 7)]


def _parse_usd(text: str) -> float:
    sign = -1 if text.startswith("−") else 1
    body = text.lstrip("−$").replace(",", "")
    unit = {"B": 1e9, "M": 1e6, "k": 1e3}
    number, _, suffix = body.partition(" ")
    return sign * float(number) * unit.get(suffix, 1.0)


@given(st.floats(min_value=1e-6, max_value=1e13, allow_nan=False))
def test_money_is_never_scientific_and_reads_back_within_half_a_percent(x):
    text = f.usd(x)
    assert "e" not in text.lower() and "E" not in text
    back = _parse_usd(text)
    assert back == pytest.approx(x, rel=5e-3, abs=5e-3)


def test_tables_escape_and_align():
    frame = pd.DataFrame({"site": ["<b>x</b>"], "usd": [1234567.0]})
    html = f.table(frame, [f.TableColumn("site", "site"), f.TableColumn("usd", "cost", f.usd, True)])
    assert "&lt;b&gt;x&lt;/b&gt;" in html and '<td class="num">$1.23 M</td>' in html
    assert "e+" not in html


def test_no_chart_prints_scientific_notation(folder):
    for draw in (charts.cost_stack, charts.gpus_over_the_day, charts.ondemand, charts.utilisation,
                 charts.ttft_waterfall, charts.cost_per_token):
        chart = draw(folder)
        hovers = [t for trace in chart.figure.data for t in (trace.text or []) if isinstance(t, str)]
        assert hovers and not any(np.char.find(h, "e+") >= 0 for h in hovers)
