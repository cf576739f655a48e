"""Churn limits (`optimizer.instance.churn`, `formulations.churn`): a plan re-made from a given
plan, on the tiny instance (tests/data/tiny.yaml), in exact mode and in the master + repair
mode, with answers checked by hand: a budget of zero reproduces the given plan; a removal
limit keeps committed nodes, and its shadow price is an idle node's year; a growth limit that
binds moves the load to the accelerator the fleet already holds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from instances import DEARER_DALLAS, TINY

from optimizer.base.errors import ScenarioError
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.commands.pipeline import make_plan, plan_scenario, settings_from
from optimizer.folder.write import write_plan
from optimizer.instance.churn import ChurnLimits, allot
from optimizer.scenario import load_scenario

MODES = [pytest.param(True, id="exact"), pytest.param(False, id="master")]
L40S, H100 = ("chicago", "l40s"), ("chicago", "h100-sxm")


def _plan(path, overrides=(), previous=None, exact=None):
    s, raw = load_scenario(path, [DEARER_DALLAS, *overrides])
    return plan_scenario(s, raw, settings_from(s, exact=exact), previous=previous)


def _nodes(plan) -> dict:
    proc = plan.tables["procurement"]
    return {(r.site, r.gpu): (int(r.reserved_nodes), int(r.ondemand_nodes_peak))
            for r in proc[proc["site"] != "*"].itertuples() if r.reserved_nodes or r.ondemand_nodes_peak}


def _more_demand(tmp_path: Path, night_rps: float = 5) -> Path:
    """tiny.yaml with Chicago's 15:00 demand 120 req/s instead of 40 (and its 03:00 demand
    ``night_rps``)."""
    text = TINY.read_text().replace("hour: 15, requests_per_s: 40", "hour: 15, requests_per_s: 120")
    text = text.replace("metro: chicago, workload: code-completion, period: Y, hour: 3, requests_per_s: 5}",
                        f"metro: chicago, workload: code-completion, period: Y, hour: 3, requests_per_s: {night_rps}}}")
    out = tmp_path / "more.yaml"
    out.write_text(text)
    return out


@pytest.mark.parametrize("exact", MODES)
def test_a_budget_of_zero_reproduces_the_given_plan(tmp_path, exact):
    old = _plan(TINY, exact=exact)
    folder = write_plan(old, tmp_path / "old")
    again = make_plan(None, ["churn.max_changes=0"], exact=exact, from_plan=folder)
    for name in ("procurement", "pools", "routing"):
        pd.testing.assert_frame_equal(again.tables[name], old.tables[name], check_exact=False, rtol=1e-9)
    assert again.summary["total_cost_usd"] == pytest.approx(old.summary["total_cost_usd"], rel=1e-12)
    assert again.summary["churn"]["changes_used"] == 0 and again.summary["churn"]["breaches"] == []


@pytest.mark.parametrize("exact", MODES)
def test_a_budget_bounds_the_changes_after_a_demand_change(tmp_path, exact):
    """Twice the demand needs a second l40s node: one change. A budget of one allows exactly
    that (same cost as without a budget: a node at either site costs the same); a budget of
    zero cannot serve the demand and says so."""
    folder = write_plan(_plan(TINY, exact=exact), tmp_path / "old")
    more = _more_demand(tmp_path)
    free = make_plan(more, [DEARER_DALLAS], exact=exact, from_plan=folder)
    one = make_plan(more, [DEARER_DALLAS, "churn.max_changes=1"], exact=exact, from_plan=folder)
    assert one.summary["churn"]["changes_used"] == 1 <= free.summary["churn"]["changes_used"]
    assert one.summary["total_cost_usd"] == pytest.approx(free.summary["total_cost_usd"], rel=1e-9)
    assert _nodes(one)[L40S][0] == 1  # the given plan's committed node is kept
    with pytest.raises(Exception, match="unserved|churn"):
        make_plan(more, [DEARER_DALLAS, "churn.max_changes=0"], exact=exact, from_plan=folder)


@pytest.mark.parametrize("exact", MODES)
def test_a_removal_limit_keeps_committed_nodes_at_an_idle_nodes_price(exact):
    """A previous fleet of 3 committed l40s nodes at Chicago; the tiny demand needs one. At
    most one removed: 2 kept, the second idle, so loosening the limit by a node saves that
    node's year — its shadow price is the reserved rate × 8,760 h."""
    plan = _plan(TINY, ["churn.max_removed_nodes=1"], previous=({L40S: 3}, {}), exact=exact)
    assert _nodes(plan) == {L40S: (2, 0)}
    free = _plan(TINY, previous=({L40S: 3}, {}), exact=exact)
    assert _nodes(free) == {L40S: (1, 0)}
    node_year = free.tables["procurement"].set_index(["site", "gpu"]).loc[L40S, "cost_usd"]
    assert plan.summary["total_cost_usd"] - free.summary["total_cost_usd"] == pytest.approx(node_year, rel=1e-9)
    (price,) = plan.summary["churn"]["shadow_prices"]
    assert (price["limit"], price["site"], price["gpu"]) == ("removal", "chicago", "l40s")
    assert price["usd_per_node"] == pytest.approx(node_year, rel=1e-6)
    assert node_year == pytest.approx(50_878.08, rel=1e-6)  # 8 GPUs × the tiny's reserved-3y rate × 8,760 h
    assert node_year / HOURS_PER_YEAR == pytest.approx(5.808, rel=1e-4)


@pytest.mark.parametrize("exact", MODES)
def test_a_binding_growth_limit_moves_the_load_to_the_accelerator_held(tmp_path, exact):
    """Previous fleet: one l40s and one h100 node at Chicago. Three times the peak wants l40s
    (one node committed, one rented at the peak: the cheapest); with no growth (γ = 0, Γ = 0)
    no pair may exceed its previous nodes, so the plan serves it all on the h100 node (one
    carries it; one l40s + one h100 would cost more) and costs more."""
    more = _more_demand(tmp_path)
    previous = ({L40S: 1, H100: 1}, {})
    free = _plan(more, previous=previous, exact=exact)
    assert {g for (_, g) in _nodes(free)} == {"l40s"} and sum(sum(v) for v in _nodes(free).values()) == 2
    held = _plan(more, ["churn.growth_factor=0"], previous=previous, exact=exact)
    assert _nodes(held) == {H100: (1, 0)}
    assert held.summary["total_cost_usd"] > free.summary["total_cost_usd"] + 1000
    assert held.summary["churn"]["breaches"] == []


@pytest.mark.parametrize("exact", MODES)
def test_a_growth_limit_binding_in_the_master_has_its_price(exact):
    """Previous fleet: one l40s node at Chicago. The master's linear prices serve the tiny
    demand cheaper on fractions of an h100 node; with no growth no h100 node may be added, so
    the h100 growth rows bind in the master with a positive price — at most what the master
    saves by an h100 node, its year less the l40s node it replaces — while the whole plan, an
    l40s node either way, costs the same (the price is the master's estimate, as reported)."""
    previous = ({L40S: 1}, {})
    held = _plan(TINY, ["churn.growth_factor=0"], previous=previous, exact=exact)
    free = _plan(TINY, previous=previous, exact=exact)
    assert _nodes(held) == _nodes(free) == {L40S: (1, 0)}
    assert held.summary["total_cost_usd"] == pytest.approx(free.summary["total_cost_usd"], rel=1e-12)
    prices = {(p["limit"], p["site"], p["gpu"]): p["usd_per_node"] for p in held.summary["churn"]["shadow_prices"]}
    assert set(prices) == {("growth", site, "h100-sxm") for site in ("chicago", "dallas")}
    s, _ = load_scenario(TINY)
    h100 = s.prices["h100-sxm"].reserved_3y_usd_per_gpu_hour * s.accelerators["h100-sxm"].gpus_per_node
    h100_year = h100 * HOURS_PER_YEAR
    assert all(0 < usd < h100_year for usd in prices.values())


def test_limits_need_a_previous_fleet_and_physical_values():
    with pytest.raises(ScenarioError, match="previous fleet"):
        _plan(TINY, ["churn.max_changes=3"])
    with pytest.raises(ScenarioError, match="growth_factor"):
        load_scenario(TINY, ["churn.growth_factor=-0.5"])
    with pytest.raises(ScenarioError, match="does not offer"):
        _plan(TINY, previous=({("nowhere", "l40s"): 2}, {}))


def test_the_budget_shared_out_never_exceeds_it():
    """Changes a master wanted, fractional: floors (1, 0, 0) and (0, 2, 0) use 3 of the budget
    of 4; the one left goes to the largest remainder (0.7 at s1's committed added)."""
    limits = ChurnLimits({("s1", "g"): 2, ("s2", "g"): 5}, {}, max_changes=4)
    shared = allot(limits, {("s1", "g"): (1.7, 0.0, 0.2), ("s2", "g"): (0.0, 2.3, 0.0)}).allotted
    assert shared == {("s1", "g"): (2, 0, 0), ("s2", "g"): (0, 2, 0)}
    assert limits.used({("s1", "g"): 5, ("s2", "g"): 5}, {}) == 3 and limits.breaches({("s1", "g"): 5, ("s2", "g"): 5}, {}) == []
    assert limits.used({("s1", "g"): 4, ("s2", "g"): 2}, {("s1", "g"): 1}) == 2 + 3 + 1
    assert "budget of 4" in limits.breaches({("s1", "g"): 4, ("s2", "g"): 2}, {("s1", "g"): 1})[0]


def _added(plan, previous) -> int:
    return sum(max(0, c - previous[0].get(pair, 0)) for pair, (c, _) in _nodes(plan).items())


@pytest.mark.parametrize("exact", MODES)
def test_a_migration_cost_is_paid_once_per_committed_node_added(tmp_path, exact):
    """Chicago's demand 120 req/s at 15:00 and 140 at 03:00: more than the one l40s node
    carries in both hours, so unpriced the plan commits a second node (one node added). At
    $5,000 a node added the plan pays m · (nodes added) with its cold starts, and never more
    than the unpriced plan plus that; at $10 M a node it adds no committed node (the growth
    is rented on demand)."""
    old = _plan(TINY, exact=exact)
    previous = ({pair: c for pair, (c, _) in _nodes(old).items()}, {pair: p for pair, (_, p) in _nodes(old).items()})
    more = _more_demand(tmp_path, night_rps=140)
    free = _plan(more, previous=previous, exact=exact)
    if exact:  # the optimum commits the node (the master's rounding may rent the growth instead)
        assert _added(free, previous) == 1
    paid = _plan(more, ["churn.migration_usd_per_node=5000"], previous=previous, exact=exact)
    s, _ = load_scenario(more, [DEARER_DALLAS])
    proc = paid.tables["procurement"]
    rows = proc[proc["site"] != "*"]
    ondemand_rate = {(r.site, r.gpu): s.prices[r.gpu].ondemand_usd_per_gpu_hour * s.accelerators[r.gpu].gpus_per_node
                     * s.sites[r.site].price_multiplier for r in rows.itertuples()}
    migration = sum(r.cost_ramp_usd - ondemand_rate[(r.site, r.gpu)] * r.ramp_node_hours for r in rows.itertuples())
    assert migration == pytest.approx(5000 * _added(paid, previous))
    assert paid.summary["total_cost_usd"] <= free.summary["total_cost_usd"] + 5000 * (1 + 1e-9)
    if exact:
        assert paid.summary["total_cost_usd"] >= free.summary["total_cost_usd"] * (1 - 1e-9)
    dear = _plan(more, ["churn.migration_usd_per_node=10000000"], previous=previous, exact=exact)
    assert _added(dear, previous) == 0
