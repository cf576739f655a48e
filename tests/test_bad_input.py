"""A catalogue of bad input. Every case is a small scenario with one slip; the first error
must name the file, the line (and the row, for tables), the field, and say what was expected —
through the library (`load_scenario` + `optimizer.instance.checks.preflight`) and through
`fleetplan validate` (exit 2, the same one line on stderr).

`tests/test_scenario_errors.py` already checks (and this file does not repeat): an unknown
accelerator or model id, a negative or zero value inline, TTFT that looks like seconds, a
percentage for a fraction (cache hit rate, attainment, decode_mbu), a site with no power
(inline and CSV), an accelerator without a price, an unknown price provider, periods that do
not add up to a year, day-type shares that do not add up to 1, repeated hours, a missing CSV
column, a YAML syntax error, a key twice, an unknown section or field, a duplicate CSV id, a
CSV row with the wrong number of cells, bad ``--set`` paths, and demand tables with negative
rates, unknown metros, periods or day types or a missing column. `tests/test_network.py`
checks bad graph files through `build_graph`; here a graph reaches `fleetplan validate`.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from small import SMALL

from optimizer.base.errors import ScenarioError
from optimizer.cli.main import main
from optimizer.commands.calibrate.model import shipped_catalogue
from optimizer.curves.roofline import decode_step_time_s
from optimizer.instance.checks import preflight
from optimizer.scenario import DATA_DIR, Serving, load_scenario
from optimizer.serving.configs import make_replica, workload_configs

METROS_CSV = (
    "id,name,lat,lon,utc_offset_hours,population\n"
    "chicago,Chicago,41.8373,-87.6862,-6,8604203\n"
    "new-york,New York,40.6943,-73.9249,-5,18908608\n"
    "washington,Washington,38.9047,-77.0163,-5,5379184\n"
)
SITES_CSV = (
    "id,name,metro,lat,lon,region,power_mw,pue,energy_usd_per_mwh,colo_usd_per_kw_month\n"
    "chicago,Chicago,chicago,41.8373,-87.6862,us-central,40,1.22,89.5,120\n"
    "ashburn,Ashburn,washington,39.0424,-77.4872,us-east,60,1.25,81.5,184\n"
)
PRICES_CSV = (
    "provider,gpu,ondemand_usd_per_gpu_hour,reserved_1y_usd_per_gpu_hour\n"
    "reference,h100-sxm,3.99,2.79\n"
    "reference,h200-sxm,4.50,3.15\n"
)
DEMAND_CSV = "metro,workload,period,hour,requests_per_s\n"
METRO_ROW = {"id": "chicago", "name": "Chicago", "lat": 41.8373, "lon": -87.6862, "utc_offset_hours": -6,
             "population": 8604203}
BIG_MODEL_WORKLOAD = {"id": "frontier", "model": "llama-3.1-405b", "isl_mean_tokens": 1000, "isl_p99_tokens": 4000,
                      "osl_mean_tokens": 200, "osl_p99_tokens": 800, "ttft_p99_ms": 3000, "itl_p99_ms": 100,
                      "peak_requests_per_s_per_million_people": 1}


def patched(table: str, key: str, **fields) -> dict:
    """SMALL with one catalogue row of ``table`` patched."""
    ids = SMALL[table]
    return {**SMALL, table: {"ids": ids, "patch": {key: fields}}}


def chat(**fields) -> dict:
    return patched("workloads", "chat", **fields)


def with_(**sections) -> dict:
    return {**copy.deepcopy(SMALL), **sections}


def _itl_floor_ms() -> float:
    """The floor the chat workload's error must name, recomputed from the curves: one sequence
    decoding at chat's mean context (2,000 prompt + 500 / 2 output tokens) on the fastest of
    SMALL's replicas, h200-sxm × 8 (the most HBM bandwidth per replica), × the 1.15 tail factor
    (`test_the_itl_floor_is_tight` checks no decode config is faster)."""
    cat = shipped_catalogue()
    r = make_replica(cat.models["llama-3.1-70b"], cat.accelerators["h200-sxm"], Serving(), 8, "fp8", "fp8")
    return 1.15 * float(decode_step_time_s(r, 1.0, 2000 + 500 / 2)) * 1e3


ITL_FLOOR_MS = _itl_floor_ms()


@dataclass
class Case:
    """One bad input and what its error must say.

    ``file``: the file the error names (relative to the scenario's folder, or ``data/…`` for a
    shipped catalogue file); ``line``: the text of the line it names (its first occurrence in
    that file), an int, or None where the error is about the whole file or section; ``row``: a
    fragment of the row label (``workloads 'chat'``); ``field``: the field the error names;
    ``says``: fragments of the message (what was wrong and what was expected)."""

    id: str
    doc: dict
    field: str | None
    says: list[str]
    file: str = "scenario.yaml"
    line: str | int | None = None
    row: str | None = None
    files: dict[str, str | bytes] = field(default_factory=dict)
    raw_yaml: bytes | None = None  # written instead of ``doc`` (syntax and encoding errors)


CASES = [
    # ------------------------------------------------------------------ files and syntax
    Case("yaml-not-utf8", {}, None, ["not UTF-8", "byte 0xe9", "column 13", "expected UTF-8"],
         line=2, raw_yaml=b"name: small\nmetros: [caf\xe9]\n"),
    Case("yaml-control-character", {}, None, ["unacceptable character #x0007", "expected printable"],
         line=2, raw_yaml=b"name: small\ndescription: bell\x07\n"),
    Case("yaml-list-as-a-key", {}, None, ["a mapping key must be a plain name, not a list"],
         line=2, raw_yaml=b"name: small\n? [metros, sites]\n: [chicago]\n"),
    Case("csv-not-utf8", with_(metros="metros.csv"), None, ["not UTF-8", "byte 0xef"], file="metros.csv", line=3,
         files={"metros.csv": METROS_CSV.replace("New York", "New Yor\xef").encode("latin-1")}),
    Case("csv-column-twice", with_(metros="metros.csv"), None, ["column(s) lat appear more than once",
                                                                 "expected each once"],
         file="metros.csv", line=1, files={"metros.csv": METROS_CSV.replace("lon,", "lat,")}),
    Case("catalogue-folder-missing", with_(catalogue="my-catalogue"), "catalogue",
         ["expected a folder of catalogue CSVs", "my-catalogue"], line="catalogue:"),
    # ------------------------------------------------------------------ table forms
    Case("table-is-a-number", with_(sites=5), "sites", ["should be a CSV path, a list of ids or rows", "got 5"],
         line="sites: 5"),
    Case("ids-with-a-null", with_(metros=["chicago", None, "washington"]), "metros",
         ["list of ids (names) or a list of rows", "item 2 is None"], line="- null"),
    Case("patch-not-a-mapping", with_(workloads={"ids": ["chat"], "patch": {"chat": 300}}), "workloads.patch",
         ["the patch of 'chat' should be a mapping of fields", "got 300"], line="chat: 300"),
    Case("section-not-a-mapping", with_(serving=[1, 2]), "serving", ["section 'serving' should be a mapping",
                                                                     "got [1, 2]"], line="serving:"),
    Case("demand-row-not-a-mapping", with_(demand={"table": ["chicago,chat,Q1,0,10"]}), "demand.table",
         ["demand.table: row 1 should be a mapping of fields"], line="- chicago,chat"),
    # ------------------------------------------------------------------ ids and references
    Case("unknown-metro-id", with_(metros=["chicago", "new-yrok", "washington"]), "metros.ids",
         ["unknown metro 'new-yrok'", "did you mean new-york", "Known:", "amsterdam"], line="- new-yrok"),
    Case("unknown-site-id", with_(sites=["chicago", "ashburnn"]), "sites.ids",
         ["unknown site 'ashburnn'", "did you mean ashburn"], line="- ashburnn"),
    Case("unknown-workload-id", with_(workloads=["chatt"]), "workloads.ids",
         ["unknown workload 'chatt'", "did you mean chat", "code-completion"], line="- chatt"),
    Case("unknown-workload-in-demand-mix",
         with_(demand={"mix": [{"metro": "chicago", "workload": "chatt", "multiplier": 2}]}), "workload",
         ["unknown workload 'chatt'", "did you mean chat", "Known: chat"], line="- metro: chicago",
         row="demand.mix row 1"),
    Case("site-at-an-unknown-metro", patched("sites", "ashburn", metro="washingtn"), "metro",
         ["unknown metro 'washingtn'", "did you mean washington"], line="metro: washingtn", row="sites 'ashburn'"),
    Case("unknown-diurnal-profile", chat(diurnal_profile="consumr"), "diurnal_profile",
         ["unknown diurnal profile 'consumr'", "did you mean consumer"], line="diurnal_profile:",
         row="workloads 'chat'"),
    Case("duplicate-inline-id", with_(metros=[METRO_ROW, {**METRO_ROW, "name": "Chicago again"}]), "id",
         ["duplicate id chicago", "first at", "line 6"], line=12, row="metros 'chicago'"),
    Case("duplicate-demand-row", with_(demand={"table": "demand.csv"}), "metro",
         ["duplicate demand.table row", "chicago/chat/Q1/7/-", "first at", "line 2", "expected one row per key"],
         file="demand.csv", line=3,
         files={"demand.csv": DEMAND_CSV + "chicago,chat,Q1,7,10\nchicago,chat,Q1,7,12\n"}),
    Case("key-field-is-a-mapping", with_(metros=[{**METRO_ROW, "id": {"name": "chicago"}}]), "id",
         ["expected a name", "{'name': 'chicago'}"], line="- id:"),
    # ------------------------------------------------------------------ fields
    Case("required-field-missing-inline",
         with_(metros=[{k: v for k, v in METRO_ROW.items() if k != "lat"}]), "lat",
         ["missing (this field is required)"], line="- id: chicago", row="metros 'chicago'"),
    Case("required-cell-empty-in-csv", with_(metros="metros.csv"), "lat",
         ["got nothing (an empty cell or null)"], file="metros.csv", line=3, row="metros 'new-york'",
         files={"metros.csv": METROS_CSV.replace("40.6943", "")}),
    Case("unknown-field-in-a-row", chat(itl_p99=50), "itl_p99", ["unknown field 'itl_p99'", "did you mean itl_p99_ms"],
         line="itl_p99:", row="workloads 'chat'"),
    Case("text-for-a-number", patched("metros", "new-york", population="many"), "population",
         ["expected a valid number", "'many'"], line="population: many", row="metros 'new-york'"),
    Case("nan-in-a-csv", with_(sites="sites.csv"), "power_mw", ["expected 0.01 to 10,000 MW", "'nan'"],
         file="sites.csv", line=3, row="sites 'ashburn'", files={"sites.csv": SITES_CSV.replace(",60,", ",nan,")}),
    Case("inf-in-a-csv", with_(prices={"csv": "prices.csv"}), "ondemand_usd_per_gpu_hour",
         ["expected 0.001 to 10,000 US$/GPU-hour", "'inf'"], file="prices.csv", line=2, row="prices 'reference'/'h100-sxm'",
         files={"prices.csv": PRICES_CSV.replace("3.99", "inf")}),
    Case("nan-inline", chat(itl_p99_ms=float("nan")), "itl_p99_ms", ["expected 5 to 60,000 ms", "got nan"],
         line="itl_p99_ms: .nan", row="workloads 'chat'"),
    Case("inf-inline", chat(peak_requests_per_s_per_million_people=float("inf")),
         "peak_requests_per_s_per_million_people", ["expected 0 to 1,000,000 requests/s per million people", "got inf"], line="peak_requests",
         row="workloads 'chat'"),
    Case("negative-in-a-csv", with_(prices={"csv": "prices.csv"}), "ondemand_usd_per_gpu_hour",
         ["expected 0.001 to 10,000 US$/GPU-hour", "'-4.50'"], file="prices.csv", line=3, row="prices 'reference'/'h200-sxm'",
         files={"prices.csv": PRICES_CSV.replace("4.50", "-4.50")}),
    Case("zero-memory-inline", patched("accelerators", "h200-sxm", hbm_gb=0), "hbm_gb", ["expected 1 to 10,000 GB", "got 0"],
         line="hbm_gb: 0", row="accelerators 'h200-sxm'"),
    Case("beyond-any-plausible-value", patched("accelerators", "h200-sxm", hbm_gb=1.41e5), "hbm_gb",
         ["expected 1 to 10,000 GB", "141000"], line="hbm_gb:", row="accelerators 'h200-sxm'"),
    Case("latitude-out-of-range-in-a-csv", with_(metros="metros.csv"), "lat",
         ["expected -90 to 90 degrees", "'138.9047'"], file="metros.csv", line=4, row="metros 'washington'",
         files={"metros.csv": METROS_CSV.replace("38.9047", "138.9047")}),
    Case("p99-below-mean", chat(isl_p99_tokens=1500), "isl_p99_tokens",
         ["isl_p99_tokens (1500) must be at least isl_mean_tokens (2000)"], line="isl_p99_tokens:",
         row="workloads 'chat'"),
    # ------------------------------------------------------------------ units: percentages and seconds
    Case("share-as-a-percentage", with_(horizon={"day_types": [{"id": "weekday", "share": 71.4},
                                                              {"id": "weekend", "share": 28.6}]}),
         "day_types.0.share", ["looks like a percentage", "write 0.714"], line="day_types:", row="section 'horizon'"),
    Case("growth-as-a-percentage", with_(demand={"growth_per_period": 8}), "growth_per_period",
         ["looks like a percentage", "write 0.08 for 8 %"], line="growth_per_period:", row="section 'demand'"),
    Case("acceptance-as-a-percentage", with_(serving={"speculative": {"acceptance_rate": 70}}),
         "speculative.acceptance_rate", ["looks like a percentage", "write 0.7"], line="speculative:"),
    Case("mip-gap-as-a-percentage", with_(policy={"mip_gap": 1.5}), "mip_gap", ["looks like a percentage",
                                                                              "write 0.015"], line="mip_gap:"),
    Case("itl-in-seconds", chat(itl_p99_ms=0.05), "itl_p99_ms", ["looks like seconds", "write 50 for 0.05 s"],
         line="itl_p99_ms:", row="workloads 'chat'"),
    # ------------------------------------------------------------------ horizon
    Case("no-periods", with_(horizon={"periods": []}), "periods",
         ["the horizon has no periods", "expected e.g. four quarters"], line="periods: []"),
    Case("no-hours", with_(horizon={"hours": []}), "hours", ["hours must be distinct UTC hours 0–23", "got []"],
         line="hours: []"),
    Case("no-day-types", with_(horizon={"day_types": []}), "day_types", ["shares add up to 0",
                                                                        "must add up to 1"], line="day_types: []"),
    # ------------------------------------------------------------------ pre-flight (the curves)
    Case("itl-below-the-physical-floor", chat(itl_p99_ms=6), "itl_p99_ms",
         ["the 6 ms p99 ITL objective is below the physical floor of every serving config",
          "llama-3.1-70b", f"{ITL_FLOOR_MS:.2f} ms", "h200-sxm × 8 GPUs, decode at batch 1",
          f"expected itl_p99_ms ≥ {math.ceil(ITL_FLOOR_MS * 10) / 10:.1f}"],
         line="itl_p99_ms:", row="workloads 'chat'"),
    Case("model-fits-no-accelerator",
         with_(accelerators=["l40s"], models=["llama-3.1-405b"], workloads=[BIG_MODEL_WORKLOAD]), "model",
         ["llama-3.1-405b fits no offered accelerator", "811.7 GB", "827.7 GB of HBM",
          "l40s × 8 GPUs, has 371.1 GB usable", "expected an accelerator with more memory"],
         line="- id: frontier", row="workloads 'frontier'"),
    Case("request-larger-than-the-kv-memory",
         with_(accelerators=["h100-sxm"], serving={"tp_degrees": [1, 2]},
               workloads={"ids": ["chat"], "patch": {"chat": {
                   "weight_dtype": "bf16", "kv_dtype": "bf16", "isl_mean_tokens": 60000, "isl_p99_tokens": 90000,
                   "osl_mean_tokens": 30000, "osl_p99_tokens": 40000, "ttft_p99_ms": 30000,
                   "shared_prefix_tokens": 0, "prompt_cache_hit_rate": 0}}}), "isl_mean_tokens",
         ["one request of 90000 tokens", "needs 29.49 GB of KV cache", "more than the 9.51 GB",
          "h100-sxm × 2 GPUs"], line="weight_dtype: bf16", row="workloads 'chat'"),
    Case("fp8-weights-without-fp8", with_(accelerators=["a100-80gb-sxm"], sites=["ashburn"]), "weight_dtype",
         ["fp8 weights need an accelerator with FP8 support"], file="data/workloads.csv", line="chat,",
         row="workloads 'chat'"),
    Case("tp-degrees-beyond-every-domain", with_(serving={"tp_degrees": [16, 32]}), "tp_degrees",
         ["no allowed tensor-parallel degree [16, 32] fits", "h100-sxm: 8 GPUs", "llama-3.1-70b",
          "expected degrees no larger than the domain"], line="tp_degrees:", row="section 'serving'"),
    Case("ttft-spent-before-compute", chat(ttft_p99_ms=30), "ttft_p99_ms",
         ["30 ms p99 TTFT objective is spent before any compute starts", "add up to 36.5 ms",
          "expected ttft_p99_ms well above 36.5"], line="ttft_p99_ms:", row="workloads 'chat'"),
    Case("tiers-beyond-the-ttft", with_(serving={"tier_rtt_ms": [300, 400]}), "tier_rtt_ms",
         ["the tightest latency tier (300 ms RTT) leaves no time for workload 'chat'", "277 ms",
          "expected tier bounds well below 277 ms"], line="tier_rtt_ms:", row="section 'serving'"),
    Case("no-demand", chat(peak_requests_per_s_per_million_people=0), "peak_requests_per_s_per_million_people",
         ["the scenario has no demand", "add up to 0 in the year", "expected some metro and workload with demand"],
         line="peak_requests", row="workloads 'chat'"),
    Case("demand-table-misses-every-planned-hour", with_(horizon={"hours": [6, 18]}, demand={"table": "demand.csv"}),
         "table", ["the demand table adds up to 0 requests", "rows give hours [7, 8]", "plans [6, 18]"],
         line="table: demand.csv", row="section 'demand'",
         files={"demand.csv": DEMAND_CSV + "chicago,chat,Q1,7,10\nchicago,chat,Q1,8,12\n"}),
    Case("demand-beyond-any-fleet", with_(demand={"scale": 1e6}), "scale",
         ["the fleet's demand in its busiest hour is", "beyond any plausible fleet (at most 1e+08 req/s)",
          "the largest factor is this one, 1e+06"], line="scale:", row="section 'demand'"),
    Case("disconnected-latency-graph", with_(metros=["chicago", "new-york", "washington"],
                                             network={"graph": "edges.csv"}),
         None, ["the latency graph is disconnected", "metro:new-york, metro:washington cannot reach site"],
         file="edges.csv", files={"edges.csv": "from,to,one_way_ms\nmetro:chicago,site:chicago,1\n"
                                               "site:chicago,site:ashburn,9\nmetro:new-york,metro:washington,2\n"}),
]


def _write(case: Case, write_scenario, tmp_path) -> Path:
    path = write_scenario(case.doc, {k: v for k, v in case.files.items() if isinstance(v, str)})
    for name, data in case.files.items():
        if isinstance(data, bytes):
            (tmp_path / name).write_bytes(data)
    if case.raw_yaml is not None:
        path.write_bytes(case.raw_yaml)
    return path


def first_error(path) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        s, raw = load_scenario(path)
        preflight(s, raw)
    return info.value


def _line_of(path: Path, text: str) -> int:
    for i, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), start=1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")


def test_the_catalogue_has_at_least_25_classes():
    assert len({c.id for c in CASES}) == len(CASES) >= 25


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, write_scenario, tmp_path, capsys):
    path = _write(case, write_scenario, tmp_path)
    err = first_error(path)
    where = DATA_DIR / case.file.removeprefix("data/") if case.file.startswith("data/") else tmp_path / case.file
    # the file
    assert Path(err.origin.file).resolve() == where.resolve(), str(err)
    # the line (and the row of a table)
    if case.line is not None:
        line = case.line if isinstance(case.line, int) else _line_of(where, case.line)
        assert err.origin.line == line, str(err)
    if case.row is not None:
        assert case.row in (err.origin.label or ""), str(err)
    # the field
    assert err.field == case.field, str(err)
    # what was wrong and what was expected
    for fragment in case.says:
        assert fragment in err.message, f"{fragment!r} not in {err.message!r}"
    # the same one line from `fleetplan validate`, exit 2, no traceback
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    assert out.err == f"fleetplan: {err}\n" and out.out == ""
    text = str(err)
    assert text.startswith(str(where)) and (case.field is None or f"field '{case.field}'" in text)


# ----------------------------------------------------------------------------- one-off checks


def test_extra_column_in_a_demand_csv_is_a_warning(write_scenario, tmp_path, capsys):
    """An unknown column is ignored with a warning (tables and, now, demand CSVs alike)."""
    text = "metro,workload,period,hour,requests_per_s,comment\nchicago,chat,Q1,7,10,peak\n"
    path = write_scenario(with_(demand={"table": "demand.csv"}), {"demand.csv": text})
    s, raw = load_scenario(path)
    assert raw.warnings == [f"{tmp_path / 'demand.csv'}: column 'comment' is not a known field and is ignored"]
    assert main(["validate", str(path)]) == 0
    assert "warning:" in capsys.readouterr().err


def test_a_supply_row_for_no_chosen_accelerator_is_a_warning(write_scenario, tmp_path):
    """A planner's supply row for an accelerator or a site the scenario lacks is dropped with a
    warning naming the row and the near match (a typo would otherwise vanish silently);
    catalogue rows for other accelerators are dropped without a word."""
    rows = [{"site": "chicago", "gpu": "h100-sxm", "reserved_nodes_max": 10, "ondemand_nodes_max": 5},
            {"site": "ashburn", "gpu": "h100-sxm", "reserved_nodes_max": 10, "ondemand_nodes_max": 5},
            {"site": "ashburn", "gpu": "h200-sx", "reserved_nodes_max": 10, "ondemand_nodes_max": 5},
            {"site": "ashbrn", "gpu": "h200-sxm", "reserved_nodes_max": 10, "ondemand_nodes_max": 5}]
    s, raw = load_scenario(write_scenario(with_(supply=rows)))
    assert set(s.supply) == {"chicago", "ashburn"} and set(s.supply["ashburn"]) == {"h100-sxm"}
    assert len(raw.warnings) == 2
    typo_gpu = next(w for w in raw.warnings if "h200-sx'" in w)
    assert "supply 'ashburn'/'h200-sx'" in typo_gpu and "did you mean h200-sxm" in typo_gpu and "ignored" in typo_gpu
    typo_site = next(w for w in raw.warnings if "ashbrn" in w)
    assert "unknown site 'ashbrn'" in typo_site and "did you mean ashburn" in typo_site
    _, ref = load_scenario(write_scenario(SMALL, name="catalogue.yaml"))
    assert ref.warnings == []


def test_an_empty_optional_cell_takes_the_default(write_scenario):
    """price_multiplier left empty in a planner's sites CSV is 1 (its default), not an error."""
    text = SITES_CSV.replace("colo_usd_per_kw_month\n", "colo_usd_per_kw_month,price_multiplier\n")
    text = text.replace(",120\n", ",120,\n").replace(",184\n", ",184,1.1\n")
    s, _ = load_scenario(write_scenario(with_(sites="sites.csv"), {"sites.csv": text}))
    assert s.sites["chicago"].price_multiplier == 1.0 and s.sites["ashburn"].price_multiplier == 1.1


def test_the_itl_floor_is_tight(write_scenario):
    """Just above the floor the message names, the workload has a serving config and passes."""
    err = first_error(write_scenario(chat(itl_p99_ms=7)))
    floor = float(re.search(r"is (\d+\.\d+) ms", err.message).group(1))
    s, raw = load_scenario(write_scenario(chat(itl_p99_ms=round(floor + 0.05, 2)), name="ok.yaml"))
    preflight(s, raw)
    w = s.workloads["chat"]
    decode = [c for g in s.accelerators for c in workload_configs(w, s.models[w.model], s.accelerators[g], s.serving)
              if c.role == "decode"]
    assert decode and min(c.itl_p99_ms for c in decode) >= floor - 0.01


def test_plan_stops_at_the_preflight_with_exit_2(write_scenario, tmp_path, capsys):
    """`fleetplan plan` runs the same checks before building anything: exit 2, nothing written."""
    path = write_scenario(chat(itl_p99_ms=6))
    out = tmp_path / "plan"
    assert main(["plan", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "field 'itl_p99_ms'" in err and "physical floor" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_preflight_is_cheap_on_the_reference(reference):
    import time

    s, raw = reference
    preflight(s, raw)  # warm
    start = time.perf_counter()
    preflight(s, raw)
    assert time.perf_counter() - start < 1.0
