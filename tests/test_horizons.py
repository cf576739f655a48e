"""Short horizons plan (issue class 7): one hour, one day, one period. A single planned hour
once exited 6 ("numerical trouble"): its on-demand ramp row named the same column twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from optimizer.cli.main import main
from optimizer.commands.pipeline import make_plan

TINY = Path(__file__).parent / "data" / "tiny.yaml"
HORIZONS = {
    "one hour": {"periods": [{"id": "Y", "days": 365}], "hours": [15]},
    "one day": {"periods": [{"id": "Y", "days": 365}], "hours": list(range(24))},
    "one period, two day types": {"periods": [{"id": "Y", "days": 365}], "hours": [3, 15],
                                  "day_types": [{"id": "weekday", "share": 0.7},
                                                {"id": "weekend", "share": 0.3, "demand_multiplier": 0.6}]},
}


def _scenario(tmp_path: Path, horizon: dict) -> Path:
    doc = yaml.safe_load(TINY.read_text())
    doc["horizon"] = horizon
    # ramps on (the row that broke); unserved demand dearer than any node, so that the one-day
    # plan's last 0.1 req/s at 21:00 is served, not priced
    doc["policy"] = {"cold_start_minutes": 10, "warm_pool_fraction": 0.1,
                     "unserved_penalty_usd_per_million_tokens": 1e5}
    doc["demand"] = {"peak_to_mean_intra_hour": 1.0, "table": [
        {"metro": m, "workload": "code-completion", "period": "Y", "hour": h, "requests_per_s": r * (1 + h / 24)}
        for m, r in (("chicago", 30), ("dallas", 15)) for h in horizon["hours"]]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("name", sorted(HORIZONS))
@pytest.mark.parametrize("exact", [True, False])
def test_short_horizons_plan(tmp_path, name, exact):
    path = _scenario(tmp_path, HORIZONS[name])
    plan = make_plan(path, exact=exact)
    assert plan.summary["unserved_fraction"] == 0
    assert plan.summary["total_cost_usd"] > 0
    hours = plan.tables["routing"].groupby(["period", "day_type", "hour"]).ngroups
    assert hours == len(HORIZONS[name]["hours"]) * len(HORIZONS[name].get("day_types", [1]))


def test_a_one_hour_plan_verifies_and_operates(tmp_path, capsys):
    """The one planned hour (all its demand served, 100 % reserved, no ramps) meets every
    objective in simulation and operates the year at the planned cost: exit 0, not 7."""
    path = _scenario(tmp_path, HORIZONS["one hour"])
    out = tmp_path / "p"
    assert main(["plan", str(path), "--out", str(out), "--quiet", "--no-report"]) == 0
    capsys.readouterr()
    assert main(["verify", str(out), "--requests", "300", "--json"]) == 0
    verified = json.loads(capsys.readouterr().out)
    assert verified["all_objectives_met"] and verified["slices"] == ["Y/all/15"]
    assert verified["ttft_attainment_min"] == verified["itl_attainment_min"] == 1.0
    assert main(["operate", str(out), "--json"]) == 0
    operated = json.loads(capsys.readouterr().out)
    assert operated["hours"] == 8760 and operated["unserved_fraction"] == 0
    assert operated["hours_short_of_gpus"] == operated["hours_over_power"] == 0
    assert operated["total_cost_usd"] == pytest.approx(operated["planned_total_cost_usd"], rel=1e-9)
    assert (out / "operations.csv").exists()


def test_a_one_hour_cycle_has_no_ramp_rows(tmp_path):
    """A day of one planned hour repeats that hour: nothing rises, so no ramp columns."""
    from formulations import Mode, build_program
    from optimizer.geography.network import build_graph, rtt_matrix
    from optimizer.instance.build import build_instance
    from optimizer.scenario import load_scenario
    from optimizer.solve import pool_sizes

    def program(name):
        s, raw = load_scenario(_scenario(tmp_path, HORIZONS[name]))
        inst = build_instance(s, rtt_matrix(build_graph(s, raw.path.parent), s))
        return build_program(inst, mode=Mode.plan_exact(max_replicas=pool_sizes(inst)[0]))[0]

    assert "ramp_up" not in program("one hour").rows
    assert len(program("one day").rows["ramp_up"]) > 0
