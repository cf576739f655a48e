"""Build the MIP, hand it to HiGHS, and turn what comes back into a whole plan.

Default mode (README "Modelling choices"): a master linear program with continuous replicas,
each pool priced at a per-replica capacity (`pricing`), whose flows are made whole into the
first plan (`steps.bound`); moves priced exactly improve it (`steps.improve`, `moves`); then
``refine`` (`anytime`) spends the rest of the effort's work on better plans and better bounds.
The gap compares the kept plan with the best bound found. Exact mode (`exact`) makes replicas
integer with f exact on the integers, for small instances and checks; it is chosen
automatically where the exact model is small, and where HiGHS stops short of the gap target
the same searches go on from its plan (`exact_mode`).

Work is counted in units that do not depend on the machine (moves priced, branch-and-bound
nodes, programs solved to their end): the same scenario, flags and version give the same plan
on any machine and under any load. The wall clock only caps the whole solve; a plan it cut
short says so (`SolveResult.stopped_by_clock`).

The program is built as arrays (`formulations`) and handed to HiGHS by a backend
(`optimizer.solve.backends`); the model and every change to it live in a `ModelCache`, which a
sweep reuses between runs of the same structure.
"""

from __future__ import annotations

import time
from dataclasses import replace

from formulations import Mode
from optimizer.base.errors import InfeasibleError
from optimizer.instance.build import Instance
from optimizer.solve import churn
from optimizer.solve.anytime import gap_split, refine
from optimizer.solve.cache import ModelCache
from optimizer.solve.exact import solve_exact
from optimizer.solve.pricing import at_sizes, plan_cost, pool_sizes, size_choices
from optimizer.solve.settings import WORK, Candidate, SolveResult, SolverSettings, SolveStep
from optimizer.solve.steps import FIRST_PLAN_FUNCTIONS, Context, fits, improve

AUTO_EXACT_BINARIES = 3000
STEP_FUNCTIONS = {**FIRST_PLAN_FUNCTIONS, "refine": refine}

__all__ = ["AUTO_EXACT_BINARIES", "Candidate", "ModelCache", "SolveResult", "SolveStep", "SolverSettings", "plan_cost",
           "pool_sizes", "solve"]


def solve(inst: Instance, settings: SolverSettings, progress=None, cache: ModelCache | None = None) -> SolveResult:
    """Solve ``inst``: exact mode in one MIP; default mode as its named steps. Pass a
    `ModelCache` to reuse a program across runs of the same structure (sweeps)."""
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    largest, guess = pool_sizes(inst)
    if settings.exact is None:
        settings = replace(settings, exact=size_choices(inst, largest) <= AUTO_EXACT_BINARIES)
    cache = cache or ModelCache()
    mode = (Mode.plan_exact(max_replicas=largest) if settings.exact
            else Mode.plan_master(gpus_per_rps=at_sizes(inst, guess)))
    build_s, handoff_s = cache.prepare(inst, mode, settings.backend)
    size = cache.size
    say(f"model: {size['variables']:,} variables ({size['integers']:,} integer), {size['rows']:,} rows, "
        f"{size['nonzeros']:,} nonzeros; " + (f"build {build_s:.1f} s, hand-off {handoff_s:.1f} s ({settings.backend})"
                                             if build_s else f"reused, coefficients refreshed in {handoff_s:.1f} s"))
    solving = time.perf_counter()
    ctx = Context(inst, cache, settings, start + settings.cap_s, say, largest, guess, started=solving)
    first_plan = None
    if settings.exact:
        best = exact_mode(ctx)
    else:
        best = None
        for name in settings.steps:
            if name == "refine":
                first_plan = ctx.best_usd
            best = STEP_FUNCTIONS[name](ctx, best)
            if ctx.out_of_time():
                break
        if best is None:
            if ctx.last_fit is None:
                raise InfeasibleError("no plan was made: the steps run do not include a master solve")
            broken = churn.breaches(ctx.inst, ctx.last_fit.solution)
            if broken and fits(ctx.last_fit.solution):
                raise InfeasibleError("no whole plan keeps the churn limits (loosen the churn section or "
                                      "--max-changes): " + "; ".join(broken[:5]))
            raise InfeasibleError("no whole plan fits the sites' supply caps and megawatts"
                                  + (" and the churn limits (loosen --max-changes or the churn section)"
                                     if ctx.inst.churn is not None else "") + ": "
                                  + "; ".join(ctx.last_fit.solution.violations[:5]))
    bound = ctx.bound_usd if ctx.bound_usd is not None else 0.0
    gap = max(0.0, (best.cost_usd - bound) / best.cost_usd) if best.cost_usd > 0 else 0.0
    if gap <= settings.mip_gap + 1e-9:
        status = "optimal"
    elif ctx.stopped_by_clock:
        status = "time_limit"
    else:
        status = "gap_above_target"
    if ctx.stopped_by_clock:
        say("stopped by the wall clock: this plan may differ on another machine")
    split = gap_split(ctx, first_plan if first_plan is not None else ctx.best_usd)
    return SolveResult(status, best.solution, best.cost_usd, bound, gap, build_s, handoff_s,
                       time.perf_counter() - solving, ctx.log, size, settings.exact, ctx.history, ctx.bounds,
                       ctx.first_plan_s, split, ctx.stopped_by_clock, dict(ctx.work), churn_prices(ctx, largest))


def exact_mode(ctx: Context) -> Candidate:
    """The one MIP for the first effort's branch-and-bound nodes; where HiGHS stops short of the
    gap target, the moves from its plan (`steps.improve`), then — with the ``refine`` step — the
    rest of the effort's work (`anytime.refine`: more moves, the MIP again started from the best
    plan). Each effort does what the one before did, then more."""
    best = solve_exact(ctx, min(WORK["first"].exact_nodes, ctx.settings.work.exact_nodes))
    if ctx.met() or ctx.out_of_time():
        return best
    best = improve(ctx, best)
    return refine(ctx, best) if "refine" in ctx.settings.steps else best


def churn_prices(ctx: Context, largest: dict) -> list[dict]:
    """The churn limits' shadow prices: the duals of the bound solve's master LP, or (exact
    mode, no LP duals) of a master LP solved for them; [] without churn limits."""
    if ctx.inst.churn is None:
        return []
    if ctx.master_duals is not None:
        return churn.shadow_prices(ctx.master_lp, ctx.master_duals)
    return churn.master_shadow_prices(ctx.inst, at_sizes(ctx.inst, largest), ModelCache, ctx.settings.backend,
                                      ctx.settings.threads)
