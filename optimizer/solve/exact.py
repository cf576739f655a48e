"""Exact mode: integer replicas with the SLO capacity f(n) exact on the integers (binaries per
pool size) and integer nodes, in one MIP — for small instances and checks."""

from __future__ import annotations

import time

from optimizer.costing import Solution
from optimizer.solve.cache import ModelCache
from optimizer.solve.pricing import plan_cost
from optimizer.solve.settings import Candidate, SolverSettings, SolveStep


def solve_exact(inst, cache: ModelCache, settings: SolverSettings, deadline: float,
                log: list[SolveStep]) -> tuple[Candidate, float, str]:
    """(the plan, HiGHS's bound, its status)."""
    t = time.perf_counter()
    out = cache.run(deadline - time.perf_counter(), settings.mip_gap, settings.threads, "exact")
    reading = cache.read(out.x)
    sol = Solution(reading.committed, reading.ondemand, reading.flows, reading.replicas, reading.routes,
                   reading.unserved)
    bound = float(out.bound if out.bound is not None else out.objective)
    plan = Candidate(plan_cost(inst, sol), sol)
    log.append(SolveStep("exact", out.status, out.objective, bound, time.perf_counter() - t, plan.cost_usd))
    return plan, bound, out.status
