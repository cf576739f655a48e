"""Every numeric field of a scenario has a range a physicist would accept, generated from the
schema: each field of every model a scenario holds is tried at 0, −1, 1e308, 1e−300, NaN,
+∞ and −∞ — and so is every numeric column of a benchmark table (`calibration.tables.NUMBERS`)
and every parameter of a calibration file (`calibration.params.PARAMETERS`). A value outside the field's range is one line naming the file, the line and the
field, with the accepted range; a value inside it validates and passes the pre-flight checks
(or is refused there in one line) — never a traceback three modules later.

A new numeric field is covered without a new test: `test_every_numeric_field_is_bounded`
fails until it has a range (`optimizer.scenario.fields.bounded`), and the value tests pick
it up from the model.
"""

from __future__ import annotations

import math
import typing

import pytest
from pydantic import BaseModel
from small import SMALL

from optimizer.base.errors import FleetplanError, ScenarioError
from optimizer.cli.main import main
from optimizer.instance.checks import preflight
from optimizer.scenario import (
    Accelerator,
    Carbon,
    Churn,
    DayType,
    Demand,
    DemandRow,
    GridCarbon,
    Horizon,
    Metro,
    MixRow,
    Model,
    NetworkSpec,
    Owned,
    Period,
    Policy,
    Price,
    Robust,
    Scenario,
    Serving,
    Site,
    Speculative,
    Supply,
    Workload,
    load_raw,
    validate,
)
from optimizer.scenario.calibration.files import read_calibration
from optimizer.scenario.calibration.params import PARAMETERS
from optimizer.scenario.calibration.tables import LIMITS, NUMBERS, read_benchmark_csv
from optimizer.scenario.catalogue import PromptPart
from optimizer.scenario.experts import ExpertParallel, Mtp
from optimizer.scenario.fields import accepted, range_text
from optimizer.scenario.fleet import FleetRow, PricePath, Years
from optimizer.scenario.kvcache import KvCache, ReuseSpec, TierSpec
from optimizer.scenario.spot import Spot

VALUES = [0, -1, 1e308, 1e-300, math.nan, math.inf, -math.inf]
ALWAYS_REFUSED = {1e308, math.inf, -math.inf}  # no physical field reaches them (NaN: checked apart)

# Where a value of each model's fields goes in the resolved scenario (SCENARIO below).
PLACES = {
    Accelerator: lambda d: d["accelerators"]["h100-sxm"],
    Model: lambda d: d["models"]["llama-3.1-70b"],
    Price: lambda d: d["prices"]["h100-sxm"],
    Owned: lambda d: d["owned"]["h100-sxm"],
    Metro: lambda d: d["metros"]["chicago"],
    Site: lambda d: d["sites"]["chicago"],
    Supply: lambda d: d["supply"]["chicago"]["h100-sxm"],
    Workload: lambda d: d["workloads"]["chat"],
    Horizon: lambda d: d["horizon"],
    Period: lambda d: d["horizon"]["periods"][0],
    DayType: lambda d: d["horizon"]["day_types"][0],
    Demand: lambda d: d["demand"],
    DemandRow: lambda d: d["demand"]["table"][0],
    MixRow: lambda d: d["demand"]["mix"][0],
    NetworkSpec: lambda d: d["network"],
    Serving: lambda d: d["serving"],
    Speculative: lambda d: d["serving"]["speculative"],
    Policy: lambda d: d["policy"],
    Robust: lambda d: d["robust"],
    GridCarbon: lambda d: d["grid_carbon"]["chicago"],
    Carbon: lambda d: d["carbon"],
    FleetRow: lambda d: d["fleet"]["contracts"][0],
    Years: lambda d: d["years"],
    PricePath: lambda d: d["years"]["price_paths"][0],
    Churn: lambda d: d["churn"],
    Spot: lambda d: d["spot"],
    ExpertParallel: lambda d: d["serving"]["expert_parallel"],
    Mtp: lambda d: d["serving"]["expert_parallel"]["mtp"],
    KvCache: lambda d: d["kv_cache"],
    TierSpec: lambda d: d["kv_cache"]["tiers"][0],
    ReuseSpec: lambda d: d["kv_cache"]["workloads"]["chat"],
}
# numeric fields with no range of their own, and why
EXEMPT = {
    **{(PromptPart, name): "set by the plan on the parts it writes; a scenario that writes prompt_part is refused"
       for name in PromptPart.model_fields},
    (Scenario, "diurnal"): "each profile is divided by its peak: any finite, non-negative shape is one",
    (Serving, "calibration"): "a calibration file's content, checked when the file is read (test_calibration.py)",
}
SCENARIO = {
    **SMALL,
    "horizon": {"periods": [{"id": "Y", "days": 365}], "day_types": [{"id": "all", "share": 1.0}],
                "start": "2027-01-01"},
    "fleet": {"contracts": [{"site": "chicago", "gpu": "h100-sxm", "nodes": 1, "contract": "reserved",
                             "end": "2030-01-01"}]},
    "churn": {"growth_nodes": 1},
    "spot": {"enabled": False},
    "kv_cache": {"tiers": [{"id": "nvme"}], "workloads": {"chat": {"median_reuse_s": 60}}},
    "years": {"discount_rate": 0.08, "price_paths": [{"name": "mine", "factors": [1.0, 0.9]}]},
    "demand": {"table": [{"metro": "chicago", "workload": "chat", "period": "Y", "hour": 12, "requests_per_s": 10}],
               "mix": [{"metro": "chicago", "workload": "chat", "multiplier": 1}]},
    "network": {"route_factor": 1.45},
    "serving": {"speculative": {"enabled": True}, "expert_parallel": {"enabled": True, "mtp": {"enabled": True}}},
    "policy": {"cold_start_minutes": 10},
    "robust": {"demand_factor": 1.25},
    "carbon": {"price_usd_per_t": 0},
}


def _numeric(annotation) -> bool:
    if annotation in (int, float):
        return True
    return any(_numeric(arg) for arg in typing.get_args(annotation))


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _fields_of(model: type[BaseModel], seen: set) -> list[tuple[type[BaseModel], str]]:
    """(model, field) for every numeric field reachable from ``model``."""
    if model in seen:
        return []
    seen.add(model)
    out = []
    for name, info in model.model_fields.items():
        if (model, name) in EXEMPT:
            continue
        if _numeric(info.annotation) and info.annotation is not bool:
            out.append((model, name))
        for sub in _models(info.annotation):
            out += _fields_of(sub, seen)
    return out


FIELDS = _fields_of(Scenario, set())


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    import yaml

    path = tmp_path_factory.mktemp("bounds") / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    raw = load_raw(path)
    preflight(validate(raw), raw)  # valid as written
    return raw


def _bounds(info) -> list:
    return info.json_schema_extra["bounds"]


def _inside(value, ge, gt, le, lt) -> bool:
    return not math.isnan(value) and (ge is None or value >= ge) and (gt is None or value > gt) and \
        (le is None or value <= le) and (lt is None or value < lt)


def test_every_numeric_field_is_bounded():
    assert len(FIELDS) > 100
    unbounded = [f"{m.__name__}.{n}" for m, n in FIELDS if accepted(m.model_fields[n]) is None]
    assert not unbounded, f"give these fields a physical range (fields.bounded): {unbounded}"
    assert not [m.__name__ for m, _ in FIELDS if m not in PLACES], "add a place for the new model to PLACES"
    for model, name in FIELDS:  # the range is stated where a planner reads about the field
        info = model.model_fields[name]
        assert accepted(info) in info.description, (model.__name__, name)


@pytest.mark.parametrize("model, name", FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_absurd_values_are_refused_with_the_range(base, model, name):
    info = model.model_fields[name]
    node = PLACES[model](base.data)
    before = node.get(name)
    many = isinstance(info.json_schema_extra, dict) and typing.get_origin(info.annotation) in (list, dict)
    try:
        for value in VALUES:
            node[name] = ({"decode_mbu": value} if typing.get_origin(info.annotation) is dict else [value]) \
                if many else value
            try:
                scenario = validate(base)
            except ScenarioError as exc:
                _check_refusal(exc, base, name, info, value)
                continue
            assert value not in ALWAYS_REFUSED and not math.isnan(value), f"{name} = {value} was accepted"
            assert _inside(value, *_bounds(info)), f"{name} = {value} is outside {accepted(info)} but was accepted"
            try:
                preflight(scenario, base)
            except FleetplanError as exc:  # a value in range that no plan can use: said in one line
                assert "\n" not in str(exc)
    finally:
        node[name] = before
        if before is None:
            del node[name]


def _check_refusal(exc: ScenarioError, raw, name: str, info, value) -> None:
    text = str(exc)
    assert "\n" not in text, text
    assert exc.origin is not None and exc.origin.line is not None, text
    assert exc.origin.file in {str(p) for p in raw.files()}, text
    if not _inside(value, *_bounds(info)):  # (inside the range, a rule across fields may name another)
        assert exc.field and name in exc.field.split("."), text
        assert accepted(info) in text, text


def test_the_examples_of_the_issue_are_one_line_errors(write_scenario, capsys):
    path = write_scenario({**SMALL, "serving": {"step_overhead_ms": 1e308}})
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "step_overhead_ms" in text)
    assert err == f"fleetplan: {path}, line {line}, section 'serving', field 'step_overhead_ms': expected 0 to 20 ms; " \
                  "got 1e+308"
    path = write_scenario({**SMALL, "network": {"fiber_km_per_ms": 1e-300}})
    assert main(["plan", str(path), "--out", str(path.parent / "plan")]) == 2
    err = capsys.readouterr().err.strip()
    assert "field 'fiber_km_per_ms': expected 100 to 299.792458 km/ms; got 1e-300" in err and "\n" not in err
    assert not (path.parent / "plan").exists()


def test_a_graph_edge_of_absurd_latency_is_refused(write_scenario, tmp_path):
    from optimizer.geography.network import build_graph

    (tmp_path / "edges.csv").write_text("from,to,one_way_ms\nmetro:chicago,site:chicago,1e308\n")
    path = write_scenario({**SMALL, "network": {"graph": "edges.csv"}})
    with pytest.raises(ScenarioError, match=r"edges\.csv, line 2, field 'one_way_ms': expected a one-way latency "
                                            r"of 0 to 1,000 ms"):
        scenario = validate(load_raw(path))
        build_graph(scenario, path.parent)


def test_descriptions_carry_units_and_reasons():
    fiber = NetworkSpec.model_fields["fiber_km_per_ms"].description
    assert "100 to 299.792458 km/ms" in fiber and "light in vacuum" in fiber


# --------------------------------------------------------------------------- calibration inputs

# one e2e row with every numeric column of the benchmark table filled (tables.NUMBERS)
E2E_ROW = {"kind": "e2e", "model": "llama-3.1-8b", "accelerator": "h100-sxm", "weight_dtype": "bf16", "tp": 1, "ep": 1,
           "pp": 1, "gpus": 1, "batch": 8, "prompt_tokens": 512, "context_tokens": 0, "output_tokens": 128,
           "latency_ms": 10, "request_rate": 4, "ttft_p50_ms": 50, "ttft_p99_ms": 100, "itl_p50_ms": 10,
           "itl_p99_ms": 20, "throughput_tokens_per_s": 500}


def test_every_numeric_column_of_the_benchmark_table_is_bounded():
    assert set(NUMBERS) == set(LIMITS) and set(NUMBERS) <= set(E2E_ROW)


@pytest.mark.parametrize("column", NUMBERS)
def test_absurd_values_in_a_benchmark_table_are_refused_with_the_range(tmp_path, column):
    low, high, unit = LIMITS[column]
    path = tmp_path / "t.csv"
    for value in VALUES:
        row = {**E2E_ROW, column: value}
        path.write_text(",".join(row) + "\n" + ",".join(str(v) for v in row.values()) + "\n")
        inside = low <= value <= high or (column == "request_rate" and value == math.inf)
        try:
            table = read_benchmark_csv(path)
        except ScenarioError as exc:
            text = str(exc)
            assert "\n" not in text and exc.origin.file == str(path) and exc.origin.line == 2, text
            if not inside:
                assert exc.field == column and f"expected {range_text(ge=low, le=high, unit=unit)}" in text, text
            continue
        assert inside, f"{column} = {value} was accepted"
        assert table[column].iloc[0] == value


@pytest.mark.parametrize("name", PARAMETERS)
def test_absurd_values_in_a_calibration_file_are_refused_with_the_range(tmp_path, name):
    low, high, _ = PARAMETERS[name]
    path = tmp_path / "cal.yaml"
    for value in VALUES:
        path.write_text(f"fleetplan_calibration: 1\nentries:\n  - {{accelerator: h100-sxm, {name}: {value!r}}}\n"
                        .replace("nan", ".nan").replace("inf", ".inf"))
        try:
            read_calibration(path)
        except ScenarioError as exc:
            assert exc.field == name and "\n" not in str(exc)
            assert str(exc).startswith(f"{path}, line 3, entries[0], field '{name}'"), str(exc)  # file and line
            if not low <= value <= high:
                assert f"{low:g} to {high:g}" in str(exc), str(exc)
            continue
        assert low <= value <= high, f"{name} = {value} was accepted"
