"""The rest of the budget (the ``refine`` step): better plans and a better bound, until the gap
target or the deadline. Every plan and bound is noted with its second (`steps.Context.note`),
so that the solve reads like a solver log.

* Where the exact model fits (at most `EXACT_BINARIES` pool-size choices), HiGHS gets it
  whole, started from the best plan: it can only improve on it, and its bound counts. A
  third of the time left goes there first (small plans are proven at once), then re-plans
  (below), then the exact model again from the better plan.
* Otherwise the slices, independent once the commitment is fixed or priced, run side by
  side (`parallel`), in rounds while time is left:

  - re-plan (`replan`): each slice exactly — integer replicas, f exact on the integers, any
    pool — on the plan's commitment, started from the plan; the new flows made whole and
    re-committed (`repair.repair`), kept when the whole plan is cheaper;
  - Lagrangian rounds (`lagrange`): from the master LP's duals, then subgradient steps;
    each slice an integer program whose own bound counts.

The gap's split (`gap_split`) says, as measured, how far the first plan moved, how far the
bound moved, and how much of what remains the slice programs themselves left open.
"""

from __future__ import annotations

import time

from optimizer.errors import TimeLimitNoPlanError
from optimizer.fleet import Solution, committed_nodes
from optimizer.repair import repair
from optimizer.solve import lagrange
from optimizer.solve.cache import ModelCache
from optimizer.solve.exact import run_exact
from optimizer.solve.parallel import SliceRunner
from optimizer.solve.pricing import plan_cost, size_choices
from optimizer.solve.settings import Bound, Candidate, SolveStep
from optimizer.solve.slices import of_state
from optimizer.solve.steps import Context, fits

EXACT_BINARIES = 40_000  # pool-size choices up to which the exact model is handed to HiGHS whole
# (us-east: 30,759; the reference: 1.7 M)
MIN_SLICE_S = 1.0  # a slice program's least time: HiGHS's root and its first dives
MAX_SLICE_S = 60.0
EXACT_FIRST_SHARE = 1 / 3  # of the time left, for the first exact solve where the exact model fits
THETA = 1.0  # Polyak step size of the first subgradient step, halved when a round does not raise L


def refine(ctx: Context, best: Candidate | None) -> Candidate | None:
    if best is None or ctx.time_left() < MIN_SLICE_S or _met(ctx):
        return best
    if ctx.settings.backend != "highs":
        ctx.say("refining runs on the highs backend only: the first plan is kept")
        return best
    if size_choices(ctx.inst, ctx.largest) > EXACT_BINARIES:
        return by_slices(ctx, best)
    # HiGHS proves small plans at once but improves plans slowly; re-plans improve them fast
    best = exact_from(ctx, best, EXACT_FIRST_SHARE * ctx.time_left())
    if not _met(ctx) and ctx.time_left() >= MIN_SLICE_S:
        with SliceRunner(ctx.inst, ctx.settings.workers, ctx.settings.scheduler) as runner:
            best = _replan_while_better(ctx, runner, best)
        if not _met(ctx) and ctx.time_left() >= MIN_SLICE_S:
            best = exact_from(ctx, best, ctx.time_left())
    return best


def _met(ctx: Context) -> bool:
    return ctx.gap is not None and ctx.gap <= ctx.settings.mip_gap + 1e-9


# ---------------------------------------------------------------------------- exact, warm-started


def exact_from(ctx: Context, best: Candidate, seconds: float) -> Candidate:
    """The exact model started from ``best`` for ``seconds``; HiGHS stops sooner where the
    best plan is within the gap target of the best bound (its own or one found before). The
    start is kept unless HiGHS returns a cheaper whole plan."""
    t = time.perf_counter()
    cache = ModelCache()
    cache.prepare(ctx.inst, True, {}, ctx.largest, "highs")
    cache.start_from(best.solution)
    ctx.say(f"exact model: {cache.size['integers']:,} integer variables, started from the plan "
            f"({time.perf_counter() - t:.1f} s to build)")
    try:
        plan, out, _ = run_exact(ctx, cache, "exact model", seconds)
    except TimeLimitNoPlanError:
        return best
    if plan is not None and plan.cost_usd < best.cost_usd - 1e-6:
        best = plan
        ctx.note("exact", plan.cost_usd)
    ctx.progress_line(f"exact model, {out.status}")
    return best


# ---------------------------------------------------------------------------- slices


def by_slices(ctx: Context, best: Candidate) -> Candidate:
    """Re-plans on the best plan's commitment for as long as they improve it; then, while time
    is left, a Lagrangian round — its bound, and its slices' solutions made whole as a plan
    (a Lagrangian heuristic) — followed by re-plans again."""
    inst = ctx.inst
    slices = sum(1 for st in inst.states if st.lost_site is None and st.weight_hours > 0)
    with SliceRunner(inst, ctx.settings.workers, ctx.settings.scheduler) as runner:
        best = _replan_while_better(ctx, runner, best)
        if ctx.master_duals is None:
            return best
        mu = lagrange.from_duals(inst, ctx.master_lp, ctx.master_duals)
        theta, last_bound = THETA, None
        while not _met(ctx) and ctx.time_left() >= MIN_SLICE_S:
            done = lagrange.evaluate(inst, runner, mu, _per_slice(ctx, runner, slices), time.time() + ctx.time_left())
            ctx.log.append(SolveStep("lagrangian", "bound" if done.bound_usd is not None else "time_limit", None,
                                     done.bound_usd, done.seconds, None))
            if done.bound_usd is None:
                break
            ctx.note("lagrangian", bound=Bound("Lagrangian", done.bound_usd, ctx.elapsed(),
                                               "slices with whole replicas, the commitment priced by multipliers"))
            ctx.split["slice_gaps_usd"] = sum(max(0.0, done.slice_costs.get(sid, b) - b)
                                              for sid, b in done.slice_bounds.items())
            ctx.progress_line(f"Lagrangian round: ${done.bound_usd:,.0f} ({done.seconds:.1f} s)")
            best = _keep_if_cheaper(ctx, best, repair(inst, done.flows, done.routes, done.unserved), "lagrangian")
            if last_bound is not None and done.bound_usd <= last_bound:
                theta /= 2
            last_bound = done.bound_usd if last_bound is None else max(last_bound, done.bound_usd)
            mu = lagrange.step(inst, mu, done, ctx.best_usd, theta)
            best = _replan_while_better(ctx, runner, best)
    return best


def _replan_while_better(ctx: Context, runner: SliceRunner, best: Candidate) -> Candidate:
    while not _met(ctx) and ctx.time_left() >= MIN_SLICE_S:
        new = replan(ctx, runner, best, _per_slice(ctx, runner, _renting(best.solution)))
        if new is best:
            break
        best = new
    return best


def _keep_if_cheaper(ctx: Context, best: Candidate, sol: Solution, event: str) -> Candidate:
    cost = plan_cost(ctx.inst, sol)
    if fits(sol) and cost < best.cost_usd - 1e-6:
        ctx.note(event, cost)
        return Candidate(cost, sol)
    return best


def _renting(sol: Solution) -> int:
    return len({sid for _, _, sid in sol.ondemand})


def _per_slice(ctx: Context, runner: SliceRunner, slices: int) -> float:
    """Seconds per slice program: half the time left, spread over the workers."""
    return min(MAX_SLICE_S, max(MIN_SLICE_S, 0.5 * ctx.time_left() * runner.workers / max(slices, 1)))


def replan(ctx: Context, runner: SliceRunner, best: Candidate, seconds: float) -> Candidate:
    """The slices that rent on demand re-planned exactly on the best plan's commitment,
    started from it, dearest first; made whole and re-committed. A slice keeps the plan's
    decisions where its program finds nothing in time; the whole plan is kept if cheaper."""
    inst, base = ctx.inst, best.solution
    peak_ids = {st.id for st in inst.states if st.slice == inst.peak_slice} \
        if any(st.lost_site is not None for st in inst.states) else set()  # site-loss states follow the peak
    renting: dict = {}  # on a fixed commitment only what a state rents can be saved
    for (s, g, sid), n in base.ondemand.items():
        renting[sid] = renting.get(sid, 0.0) + n * inst.contracts[(s, g)].ondemand * inst.states[sid].weight_hours
    order = sorted((sid for sid in renting if sid not in peak_ids and inst.states[sid].lost_site is None),
                   key=lambda sid: -renting[sid])
    nodes = committed_nodes(base)
    t = time.perf_counter()
    tasks = [("fixed", sid, {"committed": nodes, "commitment_key": tuple(sorted(nodes.items())),
                             "start": of_state(base, sid), "seconds": seconds, "gap": ctx.settings.mip_gap / 4,
                             "until": time.time() + ctx.time_left()})
             for sid in order]
    flows, routes, unserved = dict(base.flows), dict(base.routes), dict(base.unserved)
    solved = 0
    for result in runner.run_tasks(tasks):
        if result.reading is None:
            continue
        sid = result.state
        flows = {k: v for k, v in flows.items() if k[1] != sid} | result.reading.flows
        routes = {k: v for k, v in routes.items() if k[4] != sid} | result.reading.routes
        unserved = {k: v for k, v in unserved.items() if k[2] != sid} | result.reading.unserved
        solved += 1
    sol = repair(inst, flows, routes, unserved)
    ctx.log.append(SolveStep("replan", "optimal" if fits(sol) else "overflow", None, None, time.perf_counter() - t,
                             plan_cost(inst, sol)))
    kept = _keep_if_cheaper(ctx, best, sol, "replan")
    ctx.progress_line(f"{solved} of {len(tasks)} slices re-planned with whole replicas on the commitment, whole plan "
                      f"${plan_cost(inst, sol):,.0f} ({time.perf_counter() - t:.1f} s)")
    return kept


def gap_split(ctx: Context, first_plan_usd: float | None) -> dict:
    """Where the gap lies, as measured: how far the plan and the bound moved from the first
    plan and the master LP, and how much of the remaining gap the slice programs of the last
    Lagrangian round left open (they could raise the bound by at most that much)."""
    master = next((b.usd for b in ctx.bounds if b.source == "master LP"), None)
    out = {"first_plan_usd": first_plan_usd, "plan_usd": ctx.best_usd, "master_bound_usd": master,
           "bound_usd": ctx.bound_usd}
    if first_plan_usd is not None and ctx.best_usd is not None:
        out["plan_moved_usd"] = first_plan_usd - ctx.best_usd
    if master is not None and ctx.bound_usd is not None:
        out["bound_moved_usd"] = ctx.bound_usd - master
    if ctx.best_usd is not None and ctx.bound_usd is not None:
        out["remaining_usd"] = ctx.best_usd - ctx.bound_usd
    out.update(ctx.split)
    return out

