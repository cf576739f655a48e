"""The rest of the effort's work (the ``refine`` step): better plans and a better bound, until
the gap target or the work is done. Every plan and bound is noted with its second
(`steps.Context.offer`, `note_bound`), so that the solve reads like a solver log. The phases run
in a fixed order and each starts from the best plan the one before left, keeping it unless it
finds a better one: an effort that does more of them never ends with a costlier plan.

* moves — the search on whole plans (`moves`) goes on, to the effort's number of moves priced;
* exact — where the exact model fits (at most the effort's `Work.exact_binaries` pool-size
  choices), HiGHS gets it whole, started from the best plan, for the effort's branch-and-bound
  nodes: it can only improve on the plan, and its bound counts;
* slices — the slices, independent once the commitment is fixed or priced, run side by side
  (`parallel`), for the effort's rounds, each slice program for its nodes:

  - re-plan (`replan_slices`): the renting slices exactly — integer replicas, f exact on the integers,
    any pool — on the plan's commitment, started from the plan; the new flows made whole and
    re-committed (`repair.repair`), kept when the whole plan is better; then moves again;
  - a Lagrangian round (`lagrange`): from the master LP's duals, then subgradient steps; each
    slice an integer program whose own bound counts.

The gap's split (`gap_split`) says, as measured, how far the first plan moved, how far the
bound moved, and how much of what remains the slice programs themselves left open.
"""

from __future__ import annotations

import time

from formulations import Mode
from optimizer.solve import lagrange
from optimizer.solve.cache import ModelCache
from optimizer.solve.exact import run_exact
from optimizer.solve.fleet import committed_nodes
from optimizer.solve.parallel import SliceRunner
from optimizer.solve.pricing import candidate, size_choices
from optimizer.solve.repair import repair
from optimizer.solve.settings import WORK, Bound, Candidate, SolveStep
from optimizer.solve.slices import of_state
from optimizer.solve.steps import Context, improve

THETA = 1.0  # Polyak step size of the first subgradient step, halved when a round does not raise L


def refine(ctx: Context, best: Candidate | None) -> Candidate | None:
    if best is None or ctx.met():
        return best
    work = ctx.settings.work
    best = improve(ctx, best, max(work.moves - WORK["first"].moves, 0))
    if ctx.met() or ctx.out_of_time():
        return best
    if ctx.settings.backend != "highs":
        ctx.say("the exact model and the slice programs run on the highs backend only: the improved plan is kept")
        return best
    if work.exact_nodes and size_choices(ctx.inst, ctx.largest) <= work.exact_binaries:
        best = exact_from(ctx, best, work.exact_nodes)
    if work.slice_rounds and not ctx.met() and not ctx.out_of_time():
        best = by_slices(ctx, best)
    return best


# ---------------------------------------------------------------------------- exact, warm-started


def exact_from(ctx: Context, best: Candidate, nodes: int) -> Candidate:
    """The exact model started from ``best`` for ``nodes`` branch-and-bound nodes; HiGHS stops
    sooner where the best plan is within the gap target of the best bound (its own or one found
    before). The start is kept unless HiGHS returns a better whole plan."""
    t = time.perf_counter()
    cache = ModelCache()
    cache.prepare(ctx.inst, Mode.plan_exact(max_replicas=ctx.largest), "highs")
    cache.start_from(best.solution)
    ctx.say(f"exact model: {cache.size['integers']:,} integer variables, started from the plan "
            f"({time.perf_counter() - t:.1f} s to build)")
    plan, out, _ = run_exact(ctx, cache, "exact model", nodes=nodes)
    if plan is not None:
        ctx.offer("exact", plan)
    ctx.progress_line(f"exact model, {out.status}")
    return ctx.best


# ---------------------------------------------------------------------------- slices


def by_slices(ctx: Context, best: Candidate) -> Candidate:
    """Rounds of: re-plans on the best plan's commitment, moves on what they give, and a
    Lagrangian round — its bound, and its slices' solutions made whole as a plan (a Lagrangian
    heuristic)."""
    inst = ctx.inst
    mu = lagrange.from_duals(inst, ctx.master_lp, ctx.master_duals) if ctx.master_duals is not None else None
    theta, last_bound = THETA, None
    with SliceRunner(inst, ctx.settings.workers, ctx.settings.scheduler) as runner:
        for _ in range(ctx.settings.work.slice_rounds):
            if ctx.met() or ctx.out_of_time():
                break
            best = replan_slices(ctx, runner, best)
            if mu is None or ctx.met() or ctx.out_of_time():
                continue
            done = lagrange.evaluate(inst, runner, mu, _slice_limits(ctx))
            ctx.count("slice programs", len(done.slice_bounds))
            ctx.log.append(SolveStep("lagrangian", "bound" if done.bound_usd is not None else "time_limit", None,
                                     done.bound_usd, done.seconds, None))
            if done.bound_usd is None:
                break
            ctx.note_bound("lagrangian", Bound("Lagrangian", done.bound_usd, ctx.elapsed(),
                                               "slices with whole replicas, the commitment priced by multipliers"))
            ctx.split["slice_gaps_usd"] = sum(max(0.0, done.slice_costs.get(sid, b) - b)
                                              for sid, b in done.slice_bounds.items())
            ctx.progress_line(f"Lagrangian round: ${done.bound_usd:,.0f} ({done.seconds:.1f} s)")
            ctx.offer("lagrangian", candidate(inst, repair(inst, done.flows, done.routes, done.unserved)))
            if last_bound is not None and done.bound_usd <= last_bound:
                theta /= 2
            last_bound = done.bound_usd if last_bound is None else max(last_bound, done.bound_usd)
            mu = lagrange.step(inst, mu, done, ctx.best_usd, theta)
            best = ctx.best
    return ctx.best


def _slice_limits(ctx: Context) -> dict:
    """What bounds a slice program: its branch-and-bound nodes, and the wall-clock cap."""
    return {"nodes": ctx.settings.work.slice_nodes, "until": time.time() + max(ctx.time_left(), 0.0)}


def replan_slices(ctx: Context, runner: SliceRunner, best: Candidate) -> Candidate:
    """The slices that rent on demand re-planned exactly on the best plan's commitment, started
    from it, dearest first; made whole and re-committed, then improved by moves. A slice keeps
    the plan's decisions where its program finds nothing; the whole plan is kept if better."""
    inst, base = ctx.inst, best.solution
    peak_ids = {st.id for st in inst.states if st.slice == inst.peak_slice} \
        if any(st.lost_site is not None for st in inst.states) else set()  # site-loss states follow the peak
    renting: dict = {}  # on a fixed commitment only what a state rents can be saved
    for (s, g, sid), n in base.ondemand.items():
        renting[sid] = renting.get(sid, 0.0) + n * inst.contracts[(s, g)].ondemand * inst.states[sid].weight_hours
    order = sorted((sid for sid in renting if sid not in peak_ids and inst.states[sid].lost_site is None),
                   key=lambda sid: (-renting[sid], sid))
    nodes = committed_nodes(base)
    t = time.perf_counter()
    tasks = [("fixed", sid, {"committed": nodes, "commitment_key": tuple(sorted(nodes.items())),
                             "start": of_state(base, sid), "gap": ctx.settings.mip_gap / 4, **_slice_limits(ctx)})
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
    ctx.count("slice programs", len(tasks))
    new = candidate(inst, repair(inst, flows, routes, unserved))
    ctx.log.append(SolveStep("replan", "optimal", None, None, time.perf_counter() - t, new.cost_usd))
    ctx.offer("replan", new)
    ctx.progress_line(f"{solved} of {len(tasks)} slices re-planned with whole replicas on the commitment, whole plan "
                      f"${new.cost_usd:,.0f} ({time.perf_counter() - t:.1f} s)")
    return improve(ctx, ctx.best, WORK["first"].moves)


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
