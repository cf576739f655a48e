"""Operating a plan's commitment through its 8,760-hour year."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from small import SMALL

from optimizer.cli.main import main
from optimizer.commands.operate import (
    OperatedCommitment,
    calendar,
    hourly_demand,
    operate_plan,
    operate_slices,
    operate_year,
)
from optimizer.commands.pipeline import make_plan, settings_from
from optimizer.folder.read import read_plan
from optimizer.folder.write import write_plan
from optimizer.geography.demand import build_slices
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import build_instance
from optimizer.scenario import DATA_DIR, load_scenario
from optimizer.solve import solve
from optimizer.solve.fleet import procurement_table

US_EAST = DATA_DIR / "scenarios" / "us-east.yaml"


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The us-east plan as a folder, and the same solve kept in memory."""
    folder = write_plan(make_plan(US_EAST), tmp_path_factory.mktemp("operate") / "plan")
    s, raw = load_scenario(US_EAST)
    inst = build_instance(s, rtt_matrix(build_graph(s, raw.path.parent), s))
    return folder, s, inst, solve(inst, settings_from(s)).solution


def test_calendar_spreads_day_types_by_their_shares(write_scenario):
    doc = {**SMALL, "horizon": {"periods": [{"id": "H1", "days": 182}, {"id": "H2", "days": 183}],
                                "day_types": [{"id": "weekday", "share": 5 / 7}, {"id": "weekend", "share": 2 / 7}]}}
    s, _ = load_scenario(write_scenario(doc))
    cal = calendar(s, SimpleNamespace(slices=build_slices(s)))
    assert len(cal) == 8760
    days = cal.drop_duplicates("day")
    counts = days.groupby(["period", "day_type"]).size()
    assert counts[("H1", "weekday")] == 130 and counts[("H1", "weekend")] == 52  # 182 · 5/7, 182 · 2/7
    assert counts[("H2", "weekday")] + counts[("H2", "weekend")] == 183
    assert abs(counts[("H2", "weekday")] - 183 * 5 / 7) < 1
    # no run of weekend days longer than the shares allow: the types are spread, not blocked
    weekend = (days["day_type"] == "weekend").to_numpy().astype(int)
    assert max(len(run) for run in "".join(map(str, weekend)).split("0")) <= 1


def test_hourly_demand_reads_the_slices_grows_within_the_period_and_varies_by_day(planned):
    _, s, inst, _ = planned
    cal = calendar(s, inst)
    keys = sorted({(m, k) for m, k, _ in inst.demand})
    flat = hourly_demand(s.model_copy(update={"demand": s.demand.model_copy(update={"growth_per_period": 0.0})}),
                         inst, cal, keys, 0.0, 0)
    slice_total = sum(v * inst.slices.loc[t, "weight_hours"] for (_, _, t), v in inst.demand.items())
    assert flat.sum() == pytest.approx(slice_total, rel=1e-9)  # every hour reads its slice, weights add up
    g = s.demand.growth_per_period
    assert g > 0
    grown = hourly_demand(s, inst, cal, keys, 0.0, 0)
    first, last = cal.index[cal["day"] == 0], cal.index[cal["day"] == cal.loc[cal["period"] == cal.loc[0, "period"], "day"].max()]
    assert grown[first].sum() < flat[first].sum() < flat[last].sum() * (1 + 1e-12) < grown[last].sum()
    assert grown[last].sum() / flat[last].sum() == pytest.approx((1 + g) ** (cal.loc[last[0], "period_position"] - 0.5))
    noisy = hourly_demand(s, inst, cal, keys, 0.2, 7)
    assert np.array_equal(noisy, hourly_demand(s, inst, cal, keys, 0.2, 7))
    assert not np.array_equal(noisy, hourly_demand(s, inst, cal, keys, 0.2, 8))
    ratio = noisy[grown > 0] / grown[grown > 0]
    assert ratio.mean() == pytest.approx(1.0, abs=0.03)  # log-normal with mean 1 (365 days × workloads)


def test_every_hour_is_served_and_the_costs_add_up(planned):
    folder, s, inst, sol = planned
    ops = operate_year(s, inst, OperatedCommitment.of_solution(inst, sol))
    h, sm = ops.hours, ops.summary
    assert sm["hours"] == len(h) == 8760 and sm["hours_rerouted"] == 0
    np.testing.assert_allclose(h["served_rps"] + h["unserved_rps"], h["demand_rps"], rtol=1e-6)
    assert sm["hours_with_unserved"] == 0 and sm["hours_short_of_gpus"] == 0 and sm["hours_over_power"] == 0
    assert sm["total_cost_usd"] == pytest.approx(sm["committed_usd"] + h["ondemand_usd"].sum() + h["ramp_usd"].sum()
                                                 + h["egress_usd"].sum())
    assert ops.sites["ondemand_usd"].sum() == pytest.approx(h["ondemand_usd"].sum())
    assert (ops.sites["ondemand_nodes_peak"] <= ops.sites["ondemand_cap"]).all()
    # the same year from the plan folder: the commitment survives the round trip through the CSVs
    again = operate_plan(folder)
    assert again.summary["total_cost_usd"] == pytest.approx(sm["total_cost_usd"], rel=1e-9)


def test_operating_the_plans_own_slices_reproduces_its_cost_lines(planned):
    """The plan and its operation make the fleet whole by the same rules from the same loads:
    each slice operated at its own demand rents what the plan rents, line by line — from the
    plan in memory and from its folder."""
    folder, s, inst, sol = planned
    for commitment, proc in ((OperatedCommitment.of_solution(inst, sol), procurement_table(inst, sol)),
                             (OperatedCommitment.of_plan(inst, read_plan(folder).tables), pd.read_csv(folder / "procurement.csv"))):
        lines = operate_slices(inst, commitment).set_index(["site", "gpu"])
        proc = proc[proc["gpu"] != "egress"].set_index(["site", "gpu"])
        renting = proc[proc["ondemand_node_hours"] > 0]
        assert len(renting) > 0  # the premise: the plan rents on demand somewhere
        for column in ("ondemand_node_hours", "ramp_node_hours", "cost_ondemand_usd", "cost_ramp_usd"):
            got = lines[column].reindex(renting.index).fillna(0.0)
            np.testing.assert_allclose(got, renting[column], rtol=1e-3, err_msg=column)


def test_the_year_at_no_noise_differs_from_the_plan_by_growth_inside_the_quarter(planned):
    """Growth of g a quarter moves an hour's demand by (1 + g)^(±½) around the quarter's middle,
    which the plan sees; with no day-to-day noise the year costs within that much of the plan."""
    _, s, inst, sol = planned
    flat = s.model_copy(update={"demand": s.demand.model_copy(update={"growth_per_period": 0.0})})
    commitment = OperatedCommitment.of_solution(inst, sol)
    # without growth only the ramps differ: the year's hours cross from one period's day into the
    # next four times, where the plan's planned day wraps into itself
    assert operate_year(flat, inst, commitment).summary["cost_vs_plan"] == pytest.approx(0.0, abs=1e-4)
    grown = operate_year(s, inst, commitment).summary
    assert 0 <= grown["cost_vs_plan"] < s.demand.growth_per_period / 2


def test_more_demand_on_the_same_commitment_rents_more(planned):
    _, s, inst, sol = planned
    commitment = OperatedCommitment.of_solution(inst, sol)
    base = operate_year(s, inst, commitment).summary
    s2, raw2 = load_scenario(US_EAST, ["demand.scale=1.5"])
    inst2 = build_instance(s2, rtt_matrix(build_graph(s2, raw2.path.parent), s2))
    more = operate_year(s2, inst2, commitment).summary
    assert more["ondemand_usd"] > base["ondemand_usd"]
    assert more["committed_usd"] == base["committed_usd"]


def test_operate_cli_writes_its_tables_and_exit_codes(planned, capsys, tmp_path):
    folder, *_ = planned
    assert main(["operate", str(folder), "--json"]) == 0
    summary = json.loads((folder / "operations.json").read_text())
    assert summary["hours"] == 8760
    assert (folder / "operations.csv").exists() and (folder / "operations_sites.csv").exists()
    assert main(["operate", str(folder), "--noise-sigma", "1.0"]) == 7  # days at several × their mean demand
    assert main(["operate", str(folder), "--noise-sigma", "5"]) == 2
    assert main(["operate", str(tmp_path)]) == 2
    assert "not a plan folder" in capsys.readouterr().err


def test_whole_replicas_size_a_pool_for_its_peak_once(planned):
    """`fleet.replicas_needed` takes mean load and sizes for peak-to-mean × it — once: a pool's
    SLO capacity table at n replicas carries peak-sized load, and n is the smallest that does."""
    from optimizer.curves.queueing import servers_needed
    from optimizer.solve.fleet import replicas_for

    _, s, inst, sol = planned
    checked = 0
    for (pid, sid), y in sol.flows.items():
        p = inst.pools[pid]
        if p.table is not None and p.role == "prefill" and y > 1e-6:
            assert p.peak_to_mean > 1  # us-east sizes for the busiest minutes
            assert replicas_for(p, y) == servers_needed(p.peak_to_mean * y, p.table)
            checked += 1
    assert checked
