"""Stressing a fixed plan, and robust planning."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from optimizer.cli.main import main
from optimizer.commands.pipeline import make_plan
from optimizer.commands.stress import stress
from optimizer.folder.write import write_plan
from optimizer.scenario import DATA_DIR

US_EAST = DATA_DIR / "scenarios" / "us-east.yaml"


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("stress")
    nominal = write_plan(make_plan(US_EAST), root / "nominal")
    robust = write_plan(make_plan(US_EAST, robust=True), root / "robust")
    return nominal, robust


def test_unperturbed_plan_meets_every_objective(plans):
    nominal, _ = plans
    result = stress(nominal)
    assert result.summary["all_objectives_met"]
    assert (result.table["attainment"] == 1).all()
    assert (result.table["unserved_fraction"] == 0).all()


def test_unperturbed_stress_reproduces_slo_csv(plans):
    """One prediction behind both: each routed arc's p99 TTFT and ITL at its worst slice in
    `stress` are its slo.csv row (the plan folder's CSVs round-trip to 12 digits)."""
    nominal, _ = plans
    arcs = stress(nominal).arcs
    worst = arcs.groupby(["metro", "workload", "site", "tier"]).agg(ttft=("ttft_p99_ms", "max"),
                                                                      itl=("itl_p99_ms", "max")).reset_index()
    slo = pd.read_csv(nominal / "slo.csv").merge(worst, on=["metro", "workload", "site", "tier"], how="outer")
    assert len(slo) == len(worst) and slo["ttft"].notna().all() and slo["ttft_p99_ms_predicted"].notna().all()
    np.testing.assert_allclose(slo["ttft"], slo["ttft_p99_ms_predicted"], rtol=1e-9)
    np.testing.assert_allclose(slo["itl"], slo["itl_p99_ms_predicted"], rtol=1e-9)


def test_slower_decode_lengthens_itl_in_proportion(plans):
    """Workloads served by decode pools only (a colocated pool's gaps are its compute-bound
    prefill chunks', which slower HBM barely moves)."""
    nominal, _ = plans
    pools = pd.read_csv(nominal / "pools.csv")
    decode_only = sorted(set(pools["workload"]) - set(pools.loc[pools["role"] == "colocated", "workload"]))
    assert decode_only
    base = stress(nominal).table.set_index("workload")
    slow = stress(nominal, ["serving.decode_mbu=×0.8"]).table.set_index("workload")
    for k in decode_only:
        # slower HBM stretches a memory-bound step at a batch by 1/0.8, a step that is partly
        # compute-bound (a large settled batch) by less; a pool whose steps slow holds its
        # sequences longer and settles at a larger batch (Little's law, b* = λ·output·step(b*)),
        # which stretches them further — on us-east by 1.14–1.3 in all
        ratio = slow.loc[k, "itl_p99_ms_worst"] / base.loc[k, "itl_p99_ms_worst"]
        assert 1.1 < ratio <= 1.25 / 0.8
    # decode pools that run faster than ITL requires (speed classes) absorb a 20 % slowdown,
    # not one that halves the memory bandwidth: the capacity the plan bought runs out
    assert not stress(nominal, ["serving.decode_mbu=×0.5"]).summary["all_objectives_met"]


def test_more_demand_never_raises_attainment(plans):
    nominal, _ = plans
    previous = 1.0
    for factor in (1.0, 1.1, 1.3, 1.6):
        attainment = stress(nominal, demand_factor=factor).summary["attainment_min"]
        assert attainment <= previous + 1e-12
        previous = attainment
    assert previous < 1.0


def test_a_lost_site_moves_its_traffic_or_leaves_it_unserved(plans, tmp_path):
    nominal, _ = plans
    routing = pd.read_csv(nominal / "routing.csv")
    busiest = routing.groupby("site")["requests_per_s"].sum().idxmax()
    result = stress(nominal, lose_site=busiest, keep=tmp_path / "lost")
    moved = pd.read_csv(tmp_path / "lost" / "routing.csv")
    assert busiest not in set(moved["site"])
    unserved = pd.read_csv(tmp_path / "lost" / "unserved.csv")
    assert moved["requests_per_s"].sum() + unserved["requests_per_s"].sum() == pytest.approx(routing["requests_per_s"].sum())
    assert result.summary["attainment_min"] < 1.0  # the others' pools were not sized for it


def test_robust_plan_costs_more_and_absorbs_what_breaks_the_nominal(plans):
    nominal, robust = plans
    sm = json.loads((robust / "summary.json").read_text())
    base = json.loads((nominal / "summary.json").read_text())
    assert sm["robust"]["nominal_cost_usd"] == pytest.approx(base["total_cost_usd"])
    assert sm["total_cost_usd"] > base["total_cost_usd"]
    assert sm["robust"]["price_of_robustness"] == pytest.approx(sm["total_cost_usd"] / base["total_cost_usd"] - 1)
    assert not stress(nominal, demand_factor=1.2).summary["all_objectives_met"]
    assert stress(robust, demand_factor=1.2).summary["all_objectives_met"]


def test_stress_cli_writes_stress_csv_and_exit_codes(plans, capsys):
    nominal, _ = plans
    assert main(["stress", str(nominal), "--json"]) == 0
    assert (nominal / "stress.csv").exists()
    assert main(["stress", str(nominal), "--demand", "×1.6"]) == 7
    assert main(["stress", str(nominal), "--lose-site", "atlantis"]) == 2
    assert "unknown site 'atlantis'" in capsys.readouterr().err


def test_the_rtt_margin_moves_the_latency_tiers_with_the_round_trips(reference):
    """A metro just inside a tier bound stays in its tier under the margin: the bounds move by
    the same 10 ms as every round trip, and the tier's pools give it up from their queueing."""
    s, _ = reference
    margins = s.robust.overrides(s)
    moved = [b + s.robust.rtt_margin_ms for b in s.serving.tier_rtt_ms]
    assert f"serving.tier_rtt_ms={moved}" in margins
    assert f"network.access_rtt_ms={s.network.access_rtt_ms + s.robust.rtt_margin_ms}" in margins
