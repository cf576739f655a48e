"""Moves on whole plans (`optimizer.solve.moves`): each kept move lowers the plan's cost or
frees GPUs, and leaves a plan whose balances hold — every request routed, every tier's
requests taken by its pools, every prefill class's handed to its decode pools; the search
never raises the cost, never goes below the brute-force optimum, and does the same work
(moves priced) to the same end wherever it runs."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from instances import brute_force, tiny_instance, us_east_instance

from optimizer.base.units import Role
from optimizer.solve import SolverSettings, plan_cost, solve
from optimizer.solve.fleet import gpus_in_replicas, whole_replicas
from optimizer.solve.moves import WholePlan, decode_merges, improve_by_moves, merges
from optimizer.solve.pricing import unserved_request_hours
from optimizer.solve.settings import EFFORTS, FIRST_PLAN_STEPS, STEPS
from optimizer.solve.steps import PATHS

REL = 1e-9


def _first(inst):
    """The master's first whole plan, before any move."""
    return solve(inst, SolverSettings(exact=False, steps=("bound",), effort="first")).solution


@pytest.fixture(scope="module")
def us_east():
    return us_east_instance()


def assert_balanced(inst, sol):
    """The plan's balances, recomputed from its decisions."""
    routed, into, entry, handed, decoded = (defaultdict(float) for _ in range(5))
    for (m, s, k, tier, sid), x in sol.routes.items():
        routed[(m, k, sid)] += x
        into[(s, k, tier, sid)] += x
    for (pid, sid), y in sol.flows.items():
        p = inst.pools[pid]
        if p.role == Role.DECODE:
            decoded[(p.site, p.workload, p.speed, sid)] += y
        else:
            entry[(p.site, p.workload, p.tier, sid)] += y
            if p.role == Role.PREFILL:
                handed[(p.site, p.workload, p.speed, sid)] += y
    for state in inst.states:
        if state.lost_site is None:
            for (m, k, t), lam in inst.demand.items():
                if t == state.slice:
                    assert routed[(m, k, state.id)] + sol.unserved.get((m, k, state.id), 0.0) == pytest.approx(lam, rel=1e-7)
    for a, b in ((into, entry), (handed, decoded)):
        for key in set(a) | set(b):
            assert a[key] == pytest.approx(b[key], rel=1e-7, abs=1e-9), key
    assert sol.replicas == {k: n for k, n in whole_replicas(inst, sol.flows).items() if n or k in sol.replicas}


@pytest.mark.parametrize("year_first", [False, True], ids=["year-merges-last", "year-merges-first"])
@pytest.mark.parametrize("which", ["tiny", "us-east"])
def test_the_search_keeps_balances_and_never_raises_the_cost(which, year_first, tiny, us_east):
    inst = tiny if which == "tiny" else us_east
    first = _first(inst)
    better, done = improve_by_moves(inst, first, 3000, year_first=year_first)
    assert done.priced > 0 and done.after_usd <= done.before_usd + 1e-6
    assert plan_cost(inst, better) <= plan_cost(inst, first) + 1e-6
    assert not better.violations and not better.gpus_short
    assert_balanced(inst, better)
    if which == "us-east":
        assert plan_cost(inst, better) < 0.99 * plan_cost(inst, first)  # the moves pay there (4–10 %)


def test_each_kept_move_lowers_the_cost_or_frees_gpus(us_east):
    plan = WholePlan(us_east, _first(us_east))
    kept = 0
    for sid in plan.rule.ids[:12]:
        for generate in (merges(plan, sid), decode_merges(plan, sid)):
            for loads, routes in generate:
                before_cost, before_gpus = plan.cost_usd, sum(v.sum() for v in plan.gpus.values())
                move = plan.price(loads, routes)
                if move.better:
                    plan.apply(move)
                    kept += 1
                    after_gpus = sum(v.sum() for v in plan.gpus.values())
                    assert plan.cost_usd < before_cost - 1e-6 or (
                        plan.cost_usd <= before_cost + 1e-6 and after_gpus < before_gpus)
                    assert plan.cost_usd == pytest.approx(before_cost + move.cost_usd, abs=1e-6)
    assert kept > 0
    # the search's own bookkeeping agrees with the fleet's rules applied from scratch
    sol = plan.solution()
    again = WholePlan(us_east, sol)
    assert again.cost_usd == pytest.approx(plan.cost_usd, rel=REL)
    need = gpus_in_replicas(us_east, sol.replicas)
    for (s, g), gpus in plan.gpus.items():
        assert list(gpus) == [need.get((s, g, sid), 0) for sid in plan.rule.ids]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale=st.floats(0.3, 3.0), budget=st.integers(0, 400), year_first=st.booleans())
def test_on_brute_force_instances_moves_stay_feasible_and_above_the_optimum(scale, budget, year_first):
    inst = tiny_instance([f"demand.scale={scale}"])
    first = _first(inst)
    better, _ = improve_by_moves(inst, first, budget, year_first=year_first)
    assert plan_cost(inst, better) <= plan_cost(inst, first) + 1e-6
    assert plan_cost(inst, better) >= brute_force(inst) * (1 - 1e-7)
    assert not better.violations
    assert_balanced(inst, better)


def test_more_moves_never_cost_more_and_the_same_budget_gives_the_same_plan(us_east):
    first = _first(us_east)
    costs = [plan_cost(us_east, improve_by_moves(us_east, first, budget)[0]) for budget in (0, 200, 1000, 4000)]
    assert costs == sorted(costs, reverse=True)
    a, b = improve_by_moves(us_east, first, 1500)[0], improve_by_moves(us_east, first, 1500)[0]
    assert a.replicas == b.replicas and a.committed == b.committed and a.ondemand == b.ondemand


def test_first_plan_steps_include_the_moves(tiny):
    result = solve(tiny, SolverSettings(exact=False, steps=FIRST_PLAN_STEPS, effort="first"))
    kinds = [step.kind for step in result.steps]
    assert kinds[0] == "bound" and {"reoperate", "improve"} <= set(kinds)
    assert result.work.get("moves priced", 0) > 0
    # one move search per distinct prefix of PATHS that ends in moves: a path's steps shared
    # with an earlier path's are not run again
    searches = {path[:i + 1] for path in PATHS for i, step in enumerate(path) if step.endswith("moves")}
    assert kinds.count("improve") == len(searches) == 4
    assert np.isfinite(result.objective_usd)



def _by_effort(inst, effort: str):
    steps = FIRST_PLAN_STEPS if effort == "first" else STEPS
    result = solve(inst, SolverSettings(exact=False, effort=effort, steps=steps))
    return unserved_request_hours(inst, result.solution), result.objective_usd


@settings(max_examples=6, deadline=None)
@given(scale=st.floats(0.3, 3.0))
def test_more_effort_never_serves_less_nor_costs_more_on_tiny(scale):
    inst = tiny_instance([f"demand.scale={scale}"])
    runs = [_by_effort(inst, effort) for effort in EFFORTS]
    for (unserved_less, cost_less), (unserved_more, cost_more) in zip(runs, runs[1:]):
        assert unserved_more <= unserved_less + 1e-9
        assert cost_more <= cost_less + 1e-6


def test_more_effort_never_serves_less_nor_costs_more_on_us_east(us_east):
    (u1, c1), (u2, c2) = (_by_effort(us_east, effort) for effort in ("first", "quick"))
    assert u1 == u2 == 0 and c2 <= c1 + 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 6))
def test_a_pairs_commitment_kept_up_to_date_equals_one_priced_from_scratch(us_east, seed, steps):
    """`commitments.PairCost` updates a (site, accelerator)'s commitment when a few states' needs
    change; after any sequence of kept trials it is what `Commitments.best` finds afresh."""
    from optimizer.solve.commitments import Commitments, PairCost

    rng = np.random.default_rng(seed)
    rule = Commitments(us_east)
    key = sorted(us_east.site_gpus)[seed % len(us_east.site_gpus)]
    need = rng.integers(0, 12, len(rule.ids))
    pair = PairCost(rule, *key, need)
    for _ in range(steps):
        changes = {int(t): int(n) for t, n in zip(rng.integers(0, len(need), 2), rng.integers(0, 20, 2))}
        trial, token = pair.trial(changes)
        for t, n in changes.items():
            need[t] = n
        fresh = rule.best(*key, need)
        assert trial.cost_usd == pytest.approx(fresh.cost_usd, rel=1e-12)
        assert trial.nodes == fresh.nodes and list(trial.ondemand) == list(fresh.ondemand)
        pair.keep(token)
    assert pair.current.cost_usd == pytest.approx(rule.best(*key, need).cost_usd, rel=1e-12)


def test_a_node_every_hour_needs_is_freed_by_a_year_merge(tiny, optimum, monkeypatch):
    """The tiny master's fractional H100 replicas round to an H100 node that both hours use; a
    merge into the L40S pool in one hour alone adds an L40S node and keeps the H100 one, so only
    the merge in every hour at once reaches the brute-force optimum (one L40S node)."""
    from optimizer.solve import moves

    first = _first(tiny)
    gpus = lambda sol: {g for (_, g, _), n in gpus_in_replicas(tiny, sol.replicas).items() if n}  # noqa: E731
    assert gpus(first) == {"h100-sxm"}  # the premise: the master's plan is on H100
    better, _ = improve_by_moves(tiny, first, 3000)
    assert gpus(better) == {"l40s"} and plan_cost(tiny, better) == pytest.approx(optimum, rel=REL)
    monkeypatch.setattr(moves, "pair_closures", lambda plan: iter(()))  # the other move in every hour at once
    monkeypatch.setattr(moves, "year_merges", lambda plan: iter(()))
    hourly, _ = improve_by_moves(tiny, first, 3000)
    assert plan_cost(tiny, hourly) > optimum * 1.5


def test_a_pair_closure_empties_a_pair_in_every_hour_and_reaches_the_optimum(tiny, optimum, monkeypatch):
    """From the same first plan, closing the H100 pair moves every one of its pools' load, in
    both hours, into L40S pools: no H100 GPU is left in any state, the loads still sum to the
    demand, and the search with closures but no year merges reaches the brute-force optimum."""
    from optimizer.solve import moves

    first = _first(tiny)
    plan = WholePlan(tiny, first)
    closures = list(moves.pair_closures(plan))
    assert len(closures) == sum(bool(plan.gpus[key].any()) for key in tiny.site_gpus) >= 1
    for loads, _ in closures:
        move = plan.price(loads)
        for (pid, sid), n in move.replicas.items():
            assert n == 0 or tiny.pools[pid].gpu != "h100-sxm"
        for sid, pools in loads.items():
            before = sum(plan.loads[sid].values())
            after = sum(pools.get(pid, y) for pid, y in plan.loads[sid].items()) + sum(
                y for pid, y in pools.items() if pid not in plan.loads[sid])
            assert after == pytest.approx(before, rel=1e-12)
    monkeypatch.setattr(moves, "year_merges", lambda plan: iter(()))
    better, _ = improve_by_moves(tiny, first, 3000)
    assert plan_cost(tiny, better) == pytest.approx(optimum, rel=REL)
    assert_balanced(tiny, better)
