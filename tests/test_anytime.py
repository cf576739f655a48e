"""The anytime solve (`optimizer.solve.anytime`, `lagrange`): every bound it reports is a lower
bound on the brute-force optimum, the Lagrangian at the master's duals is no weaker than the
master, the plan and the bound only ever improve, and slices give the same bounds wherever
they run."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from instances import tiny_instance

from formulations import Mode, read_solution, write_solution
from optimizer.commands import pipeline
from optimizer.commands.pipeline import settings_from
from optimizer.scenario import load_scenario
from optimizer.solve import ModelCache, SolverSettings, lagrange, solve
from optimizer.solve import settings as settings_module
from optimizer.solve.parallel import SliceRunner, check_scheduler
from optimizer.solve.pricing import at_sizes, pool_sizes
from optimizer.solve.settings import FIRST_PLAN_STEPS, STEPS
from optimizer.solve.steps import Context, bound

DATA = Path(__file__).parent / "data"
REL = 1e-7


def _master(inst) -> Context:
    """A context after the bound step: the master LP's bound, duals and program."""
    largest, guess = pool_sizes(inst)
    cache = ModelCache()
    cache.prepare(inst, Mode.plan_master(gpus_per_rps=at_sizes(inst, guess)), "highs")
    s = SolverSettings(exact=False)
    ctx = Context(inst, cache, s, time.perf_counter() + 60, lambda msg: None, largest, guess)
    bound(ctx, None)
    return ctx


@pytest.fixture(scope="module")
def master(tiny):
    return _master(tiny)


def _lagrangian(inst, mu, workers=1, scheduler=None) -> lagrange.Round:
    with SliceRunner(inst, workers, scheduler) as runner:
        return lagrange.evaluate(inst, runner, mu, {"nodes": 10_000, "until": time.time() + 60})


def test_the_lagrangian_at_the_masters_duals_lies_between_the_master_and_the_optimum(tiny, master, optimum):
    mu = lagrange.from_duals(tiny, master.master_lp, master.master_duals)
    done = _lagrangian(tiny, mu)
    assert done.bound_usd is not None
    assert done.bound_usd >= master.bound_usd * (1 - REL)  # whole replicas can only raise it
    assert done.bound_usd <= optimum * (1 + REL)


def test_the_lagrangian_rises_above_the_master_where_whole_replicas_cost_more(tiny, master, optimum):
    # on tiny the master's bound is well below the optimum; whole replicas per slice close part of it
    assert master.bound_usd < optimum * (1 - 1e-3)
    mu = lagrange.from_duals(tiny, master.master_lp, master.master_duals)
    assert _lagrangian(tiny, mu).bound_usd > master.bound_usd * (1 + 1e-4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale=st.lists(st.floats(0, 3), min_size=8, max_size=8))
def test_any_nonnegative_multipliers_give_a_lower_bound(tiny, master, optimum, scale):
    mu = lagrange.from_duals(tiny, master.master_lp, master.master_duals)
    keys = sorted(mu.committed)
    price = lagrange.year_price(tiny)
    committed = {k: scale[i % len(scale)] * price[k[:2]] / 2 for i, k in enumerate(keys)}
    done = _lagrangian(tiny, lagrange.Multipliers(committed, mu.ramps))
    assert done.bound_usd <= optimum * (1 + REL)


def test_ramp_multipliers_keep_the_bound_valid_with_cold_starts():
    inst = tiny_instance(["policy.cold_start_minutes=15"])
    optimum = solve(inst, SolverSettings(exact=True, mip_gap=1e-9))
    assert optimum.status == "optimal"
    ctx = _master(inst)
    mu = lagrange.from_duals(inst, ctx.master_lp, ctx.master_duals)
    for ramps in ({k: 0.0 for k in mu.ramps},
                  {k: lagrange.ramp_price(inst, *k) for k in mu.ramps},
                  mu.ramps):
        done = _lagrangian(inst, lagrange.Multipliers(mu.committed, ramps))
        assert done.bound_usd <= optimum.objective_usd * (1 + REL)


def test_a_subgradient_step_moves_the_multipliers_towards_the_commitment_the_slices_want(tiny, master, optimum):
    mu = lagrange.from_duals(tiny, master.master_lp, master.master_duals)
    done = _lagrangian(tiny, mu)
    _, chosen = lagrange.committed_part(tiny, mu)
    moved = lagrange.step(tiny, mu, done, optimum * 1.05, 1.0)
    for key, v in mu.committed.items():
        wanted = done.commitment.get(key, 0) - chosen.get(key[:2], 0)
        assert np.sign(moved.committed[key] - v) in (np.sign(wanted), 0)


def test_slices_give_the_same_bound_in_process_in_a_pool_and_on_dask(tiny, master):
    mu = lagrange.from_duals(tiny, master.master_lp, master.master_duals)
    alone = _lagrangian(tiny, mu, workers=1)
    pooled = _lagrangian(tiny, mu, workers=2)
    assert pooled.bound_usd == pytest.approx(alone.bound_usd, rel=1e-9)
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        check_scheduler(cluster.scheduler_address)  # a live scheduler passes the up-front check
        on_dask = _lagrangian(tiny, mu, scheduler=cluster.scheduler_address)
    assert on_dask.bound_usd == pytest.approx(alone.bound_usd, rel=1e-9)


def test_a_plan_written_as_a_solution_vector_reads_back_the_same(tiny):
    plan = solve(tiny, SolverSettings(exact=False, steps=FIRST_PLAN_STEPS)).solution
    largest, _ = pool_sizes(tiny)
    cache = ModelCache()
    cache.prepare(tiny, Mode.plan_exact(max_replicas=largest), "highs")
    cols, values = write_solution(cache.lp, plan)
    x = np.zeros(cache.lp.n_cols)
    x[cols] = values
    back = read_solution(cache.lp, x)
    assert {k: v for k, v in back.flows.items() if v} == pytest.approx({k: v for k, v in plan.flows.items() if v})
    assert {k: v for k, v in back.replicas.items() if v} == {k: v for k, v in plan.replicas.items() if v}


@pytest.mark.parametrize("effort", ["quick", "thorough"])
def test_refining_never_loses_the_first_plan_and_its_log_only_improves(tiny, optimum, monkeypatch, effort):
    first = solve(tiny, SolverSettings(exact=False, steps=FIRST_PLAN_STEPS, effort="first", mip_gap=1e-6))
    if effort == "thorough":  # the slice programs, not the exact model
        monkeypatch.setitem(settings_module.WORK, "thorough", replace(settings_module.WORK["thorough"], exact_binaries=0))
    full = solve(tiny, SolverSettings(exact=False, mip_gap=1e-6, effort=effort))
    assert full.objective_usd <= first.objective_usd + 1e-6
    assert full.best_bound_usd <= optimum * (1 + REL) and full.objective_usd >= optimum * (1 - REL)
    plans = [p.plan_usd for p in full.history if p.plan_usd is not None]
    bounds = [p.bound_usd for p in full.history if p.bound_usd is not None]
    assert plans == sorted(plans, reverse=True) and bounds == sorted(bounds)
    assert [p.seconds for p in full.history] == sorted(p.seconds for p in full.history)
    assert all(b.usd <= optimum * (1 + REL) for b in full.bounds)
    sources = {b.source for b in full.bounds}
    assert "master LP" in sources and ("Lagrangian" if effort == "thorough" else "exact MIP") in sources
    assert full.split["plan_usd"] == full.objective_usd and full.split["bound_usd"] == full.best_bound_usd
    assert not full.stopped_by_clock


def test_the_warm_started_exact_model_proves_a_small_plan_optimal(tiny, optimum):
    result = solve(tiny, SolverSettings(exact=False, mip_gap=1e-6))
    assert result.status == "optimal"
    assert result.objective_usd == pytest.approx(optimum, rel=1e-6)


def test_the_one_site_scenario_comes_out_proven_in_the_default_mode(monkeypatch):
    monkeypatch.setattr(pipeline, "STEPS", STEPS)  # the suite's plans stop at the first plan (conftest)
    plan = pipeline.make_plan(Path(__file__).parents[1] / "data" / "scenarios" / "one-site-70b.yaml", exact=False)
    assert plan.summary["status"] == "optimal"
    assert plan.summary["quality"].startswith("optimal")


def test_effort_picks_the_work_and_the_steps_and_a_time_limit_only_caps_it(monkeypatch):
    monkeypatch.setattr(pipeline, "STEPS", STEPS)
    s, _ = load_scenario(DATA / "tiny.yaml", [])
    assert settings_from(s, effort="first").steps == FIRST_PLAN_STEPS
    assert settings_from(s, effort="quick").steps == STEPS
    work = [settings_from(s, effort=e).work for e in ("first", "quick", "thorough")]
    for less, more in zip(work, work[1:]):  # each effort buys at least the work of the one before
        assert more.moves >= less.moves and more.slice_rounds >= less.slice_rounds
        assert more.exact_binaries >= less.exact_binaries and more.cap_s >= less.cap_s
    assert settings_from(s, effort="thorough").cap_s > settings_from(s, effort="quick").cap_s
    assert settings_from(s, time_limit_s=7, effort="thorough").cap_s == 7
    timed, _ = load_scenario(DATA / "tiny.yaml", ["policy.time_limit_s=9"])
    assert settings_from(timed).cap_s == 9
    # an effort flag other than the scenario's takes that effort's cap, not the scenario's limit
    assert settings_from(timed, effort="thorough").cap_s == settings_from(s, effort="thorough").cap_s
    assert replace(settings_from(s), workers=2).workers == 2


def test_exact_mode_searches_on_from_a_plan_highs_left_short(tiny, optimum, monkeypatch):
    """Exact mode where HiGHS stops at its node limit on a poor plan (here: the master's H100
    node, offered as if HiGHS had found it, with no bound): the moves go on from it and reach
    the brute-force optimum, and the log shows them after the exact step."""
    import optimizer.solve as solve_module
    from optimizer.solve.pricing import candidate

    poor = solve(tiny, SolverSettings(exact=False, steps=("bound",), effort="first")).solution

    def stopped_short(ctx, nodes):
        ctx.offer("exact", candidate(ctx.inst, poor))
        return ctx.best

    monkeypatch.setattr(solve_module, "solve_exact", stopped_short)
    out = solve(tiny, SolverSettings(exact=True, steps=FIRST_PLAN_STEPS, effort="first"))
    assert candidate(tiny, poor).cost_usd > 1.5 * optimum  # the premise: HiGHS's plan is poor
    assert out.objective_usd == pytest.approx(optimum, rel=1e-9)
    assert "improve" in [step.kind for step in out.steps]
