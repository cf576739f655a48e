"""The shipped catalogues in data/: every row validates, carries a source and a date, and the
headline figures match the reference sheet (FACTS.md)."""

from __future__ import annotations

import csv
from datetime import date
from pathlib import Path

import pytest

from optimizer.base.sources import read_csv
from optimizer.scenario import DATA_DIR, TABLES, Accelerator, Model, load_scenario
from optimizer.scenario.calibration.params import PARAMETERS, entry_from_row

TODAY = date.today()
CSV_FILES = sorted(p.name for p in DATA_DIR.glob("*.csv"))


def csv_rows(name: str) -> list[dict]:
    with (DATA_DIR / name).open(newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    """A scenario naming no table takes every catalogue row (prices: the 'reference' provider)."""
    path = tmp_path_factory.mktemp("all") / "all.yaml"
    path.write_text("name: all\n")
    scenario, raw = load_scenario(path)
    return scenario, raw


def test_the_catalogue_files_are_known():
    known = {spec.file for spec in TABLES.values()} | {"diurnal.csv", "latency_reference.csv", "token_prices.csv",
                                                        "serving_calibration.csv", "price_scenarios.csv",
                                                        "spot.csv", "spot_availability.csv", "kv_tiers.csv", "kv_reuse.csv"}
    assert set(CSV_FILES) == known


def test_every_serving_calibration_row_validates_within_the_fit_bounds():
    # the shipped defaults are read by every plan: one row per key, a catch-all, every
    # parameter inside the bounds a fit keeps to
    entries = [entry_from_row({k: v for k, v in row.items() if v != ""}) for row in csv_rows("serving_calibration.csv")]
    keys = [e.key for e in entries]
    assert len(set(keys)) == len(keys) and "*/*/*" in keys
    for e in entries:
        for name, (lower, upper, _) in PARAMETERS.items():
            assert lower <= getattr(e, name) <= upper, (e.key, name)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_row_validates_against_its_model(table):
    spec = TABLES[table]
    required = [n for n, f in spec.model.model_fields.items() if f.is_required()]
    optional = [n for n in spec.model.model_fields if n not in required]
    rows = read_csv(DATA_DIR / spec.file, required, optional)
    assert rows.warnings == []  # no unknown columns
    assert len(rows.rows) == len(csv_rows(spec.file)) > 0
    keys = set()
    for row in rows.rows:
        validated = spec.model.model_validate(row.values)
        key = tuple(getattr(validated, k) for k in spec.key)
        assert key not in keys, f"duplicate {spec.key} {key} in {spec.file}"
        keys.add(key)


def test_empty_scenario_takes_the_whole_catalogue(everything):
    s, raw = everything
    assert raw.warnings == []
    assert s.name == "all"
    assert len(s.accelerators) == len(csv_rows("accelerators.csv")) == 11
    assert len(s.models) == len(csv_rows("models.csv"))
    assert len(s.owned) == len(csv_rows("owned.csv"))
    assert len(s.metros) == len(csv_rows("metros.csv"))
    assert len(s.sites) == len(csv_rows("sites.csv"))
    # a supply row whose site's racks cannot take the part (power or liquid cooling) is not offered
    site = {r["id"]: r for r in csv_rows("sites.csv")}
    gpu = {r["id"]: r for r in csv_rows("accelerators.csv")}
    hostable = [r for r in csv_rows("supply.csv")
                if float(gpu[r["gpu"]]["node_kw"]) <= float(site[r["site"]]["rack_kw_max"])
                and (gpu[r["gpu"]]["liquid_cooling_required"] == "no" or site[r["site"]]["liquid_cooling"] == "yes")]
    assert 0 < len(hostable) < len(csv_rows("supply.csv"))
    assert sum(len(per) for per in s.supply.values()) == len(hostable)
    assert len(s.workloads) == len(csv_rows("workloads.csv"))
    assert s.price_provider == "reference"
    assert len(s.prices) == sum(r["provider"] == "reference" for r in csv_rows("prices.csv"))
    profiles = {r["profile"] for r in csv_rows("diurnal.csv")}
    assert set(s.diurnal) == profiles
    assert all(len(v) == 24 and max(v) == 1.0 for v in s.diurnal.values())


@pytest.mark.parametrize("name", CSV_FILES)
def test_every_row_has_a_source_and_a_date(name):
    rows = csv_rows(name)
    assert rows
    columns = set(rows[0])
    assert {"source", "as_of"} <= columns
    for i, row in enumerate(rows, start=2):
        assert (row["source"] or "").strip(), f"{name} line {i}: empty source"
        as_of = date.fromisoformat(row["as_of"])  # raises on a missing or malformed date
        assert date(2010, 1, 1) <= as_of <= TODAY, f"{name} line {i}: as_of {as_of}"
        for field in filter(None, (row.get("assumed_fields") or "").split(";")):
            assert field.strip() in columns, f"{name} line {i}: assumed field {field!r} is not a column"


def test_latency_reference_rows():
    for row in csv_rows("latency_reference.csv"):
        assert float(row["rtt_ms"]) > 0
        for key in ("a_lat", "b_lat"):
            assert -90 <= float(row[key]) <= 90
        for key in ("a_lon", "b_lon"):
            assert -180 <= float(row[key]) <= 180


def test_every_accelerator_has_a_reference_price_and_an_owned_row():
    gpus = {r["id"] for r in csv_rows("accelerators.csv")}
    reference = {r["gpu"] for r in csv_rows("prices.csv") if r["provider"] == "reference"}
    assert gpus == reference
    assert gpus == {r["gpu"] for r in csv_rows("owned.csv")}
    for row in csv_rows("prices.csv"):
        assert row["gpu"] in gpus
        on_demand = float(row["ondemand_usd_per_gpu_hour"])
        for term in ("reserved_1y_usd_per_gpu_hour", "reserved_3y_usd_per_gpu_hour"):
            if row[term]:
                assert float(row[term]) <= on_demand, f"{row['provider']}/{row['gpu']}: {term} above on-demand"
        if row["reserved_1y_usd_per_gpu_hour"] and row["reserved_3y_usd_per_gpu_hour"]:
            assert float(row["reserved_3y_usd_per_gpu_hour"]) <= float(row["reserved_1y_usd_per_gpu_hour"])


def test_references_between_tables_resolve():
    gpus = {r["id"] for r in csv_rows("accelerators.csv")}
    metros = {r["id"] for r in csv_rows("metros.csv")}
    sites = {r["id"] for r in csv_rows("sites.csv")}
    models = {r["id"] for r in csv_rows("models.csv")}
    profiles = {r["profile"] for r in csv_rows("diurnal.csv")}
    assert {r["metro"] for r in csv_rows("sites.csv")} <= metros
    assert {r["site"] for r in csv_rows("supply.csv")} <= sites
    assert {r["gpu"] for r in csv_rows("supply.csv")} <= gpus
    assert {r["model"] for r in csv_rows("workloads.csv")} <= models
    assert {r["diurnal_profile"] for r in csv_rows("workloads.csv")} <= profiles


# --------------------------------------------------------------------------- FACTS.md values


def _accelerator(gpu: str) -> Accelerator:
    row = next(r for r in csv_rows("accelerators.csv") if r["id"] == gpu)
    return Accelerator.model_validate({k: (v if v != "" else None) for k, v in row.items()})


def _model(mid: str) -> Model:
    row = next(r for r in csv_rows("models.csv") if r["id"] == mid)
    return Model.model_validate({k: (v if v != "" else None) for k, v in row.items()})


@pytest.mark.parametrize("gpu,bf16,fp8,hbm_gb,tb_s", [
    ("h100-sxm", 989.4, 1978.9, 80, 3.35),
    ("h200-sxm", 989.4, 1978.9, 141, 4.8),
    ("b200", 2250, 4500, 180, 8.0),
    ("a100-80gb-sxm", 312, None, 80, 2.039),
    ("l40s", 362.05, 733, 48, 0.864),
    ("mi300x", 1307.4, 2614.9, 192, 5.3),
    ("mi325x", 1307.4, 2614.9, 256, 6.0),
])
def test_accelerator_figures_match_facts(gpu, bf16, fp8, hbm_gb, tb_s):
    a = _accelerator(gpu)  # FACTS.md §1.1, dense tensor rates
    assert a.bf16_dense_tflops == bf16
    assert a.fp8_dense_tflops == fp8
    assert a.hbm_gb == hbm_gb
    assert a.hbm_tb_s == tb_s


def test_accelerator_links_and_power_match_facts():
    h100 = _accelerator("h100-sxm")
    assert (h100.tdp_w, h100.scaleup_gb_s, h100.scaleup_domain_gpus, h100.gpus_per_node) == (700, 900, 8, 8)
    assert h100.node_kw == 10.2  # DGX H100 max input
    l40s = _accelerator("l40s")
    assert (l40s.scaleup_domain_gpus, l40s.scaleup_gb_s) == (1, 64)  # PCIe, no NVLink
    assert _accelerator("b200").node_kw == 14.3


@pytest.mark.parametrize("mid,total,active,layers,hidden,heads,kv_heads,head_dim", [
    ("llama-3.1-8b", 8.030, 8.030, 32, 4096, 32, 8, 128),
    ("llama-3.1-70b", 70.554, 70.554, 80, 8192, 64, 8, 128),
    ("llama-3.1-405b", 405.853, 405.853, 126, 16384, 128, 8, 128),
    ("qwen3-32b", 32.762, 32.762, 64, 5120, 64, 8, 128),
    ("mixtral-8x7b", 46.703, 12.888, 32, 4096, 32, 8, 128),
])
def test_model_shapes_match_facts(mid, total, active, layers, hidden, heads, kv_heads, head_dim):
    m = _model(mid)  # FACTS.md §2
    assert (m.total_params_b, m.active_params_b) == (total, active)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (layers, hidden, heads, kv_heads, head_dim)


def test_deepseek_and_mixtral_details_match_facts():
    ds = _model("deepseek-v3")
    assert (ds.total_params_b, ds.active_params_b, ds.layers, ds.hidden) == (671, 37, 61, 7168)
    assert (ds.attention, ds.kv_lora_rank, ds.qk_rope_head_dim) == ("mla", 512, 64)
    assert (ds.experts, ds.experts_per_token, ds.max_context) == (256, 8, 163_840)
    mx = _model("mixtral-8x7b")
    assert (mx.experts, mx.experts_per_token, mx.vocab, mx.max_context) == (8, 2, 32_000, 32_768)
    assert _model("qwen3-32b").max_context == 40_960


def test_workload_context_fits_the_model():
    models = {r["id"]: int(r["max_context"]) for r in csv_rows("models.csv")}
    for w in csv_rows("workloads.csv"):
        assert float(w["isl_p99_tokens"]) + float(w["osl_p99_tokens"]) <= models[w["model"]]


def test_reference_scenario_still_loads():
    s, _ = load_scenario()
    assert set(s.accelerators) <= {r["id"] for r in csv_rows("accelerators.csv")}
    assert Path(DATA_DIR / "scenarios" / "reference.yaml").exists()


def test_every_token_price_row_validates_and_has_a_reference_row():
    from optimizer.serving.billing import TOKEN_PRICES_FILE, TokenPrice

    rows = [TokenPrice.model_validate({k: v or None for k, v in r.items()}) for r in csv_rows(TOKEN_PRICES_FILE.name)]
    keys = [(r.provider, r.model) for r in rows]
    assert len(keys) == len(set(keys))
    assert all(r.source and r.as_of for r in rows)
    assert {r.model for r in rows} == {r.model for r in rows if r.provider == "reference"}
