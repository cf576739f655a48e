"""Exact mode: integer replicas with the SLO capacity f(n) exact on the integers (binaries per
pool size) and integer nodes, in one MIP — for small instances and checks."""

from __future__ import annotations

import math
import time

from optimizer.base.errors import InfeasibleError
from optimizer.solve.fleet import Solution
from optimizer.solve.pricing import candidate
from optimizer.solve.settings import Bound, Candidate, SolveStep

PROGRESS_EVERY_S = 5.0  # progress lines of a long exact solve


def watcher(ctx, what: str):
    """A HiGHS watch (`optimizer.solve.backends.HighsDirect.solve`): a progress line every
    PROGRESS_EVERY_S with the best plan and bound — HiGHS's own or one found before — and a
    stop once they are within the gap target."""
    last = [time.perf_counter()]

    def watch(_, primal: float, dual: float) -> bool:
        plans, bounds = _finite(primal, ctx.best_usd), _finite(dual, ctx.bound_usd)
        if not plans or not bounds or min(plans) <= 0:
            return False
        plan, bound = min(plans), max(bounds)
        gap = (plan - bound) / plan
        if time.perf_counter() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.perf_counter()
            ctx.say(f"[{ctx.elapsed():6.1f} s] plan ${plan:,.0f}, bound ${bound:,.0f}, gap {gap:.2%} — {what}")
        return gap <= ctx.settings.mip_gap

    return watch


def _finite(*values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def run_exact(ctx, cache, what: str, nodes: int) -> tuple[Candidate | None, object, float]:
    """The exact model in ``cache`` solved for ``nodes`` branch-and-bound nodes or to the gap
    target (the wall-clock cap stops it too); its bound noted. (the plan, HiGHS's outcome,
    seconds)."""
    t = time.perf_counter()
    out = cache.run(max(ctx.time_left(), 1.0), ctx.settings.mip_gap, ctx.settings.threads, what, watcher(ctx, what),
                    nodes=nodes)
    ctx.count("branch-and-bound nodes", out.nodes)
    ctx.stopped_by_clock = ctx.stopped_by_clock or out.status == "time_limit"
    if out.bound is not None and math.isfinite(out.bound):
        ctx.note_bound(what, Bound("exact MIP", float(out.bound), ctx.elapsed(),
                                   "integer replicas and nodes, HiGHS's branch and bound"))
    plan = None
    if out.has_solution:
        reading = cache.read(out.x)
        sol = Solution(reading.committed, reading.ondemand, reading.flows, reading.replicas, reading.routes,
                       reading.unserved)
        plan = candidate(ctx.inst, sol)
    seconds = time.perf_counter() - t
    ctx.log.append(SolveStep("exact", out.status, out.objective, out.bound, seconds,
                             plan.cost_usd if plan else None))
    return plan, out, seconds


def solve_exact(ctx, nodes: int) -> Candidate:
    """Exact mode: the one MIP already in ``ctx.cache``, for ``nodes`` branch-and-bound nodes."""
    plan, out, _ = run_exact(ctx, ctx.cache, "exact", nodes)
    if plan is None:
        raise InfeasibleError(f"the exact model has no plan ({out.status}): no whole plan fits the sites' supply "
                              "caps and megawatts")
    ctx.offer("exact", plan)
    return ctx.best
