"""Build the MIP, hand it to HiGHS, and turn what comes back into a whole plan.

Default mode (see README "Modelling choices"): the SLO capacity f(n) of a queueing pool is
convex in n — bigger pools carry more per replica — so y ≤ f(n) is not a convex constraint
and has no exact linear form. The master problem therefore prices a pool's requests/s at
a per-replica capacity κ:
  * plan solves (successive linearisation): κ = f(n̂)/n̂ at the pool size n̂ of the previous
    plan (first: the size its reachable demand suggests); each solve's flows are repaired
    into whole replicas — the smallest n with f(n) ≥ peak load, exact — and whole on-demand
    nodes; the cheapest repaired plan is kept;
  * bound solve: κ = f(N)/N with N the pool size that all demand able to reach the pool
    would need. Since f(n)/n grows with n and no pool needs more than N replicas, this
    over-states every pool's capacity: its MIP bound is a valid lower bound on the cost of
    any plan. The reported gap compares the kept plan with that bound.
Exact mode makes replicas integer with f exact on the integers (binaries per pool size);
for small instances and checks.

Every solve runs under a hard wall-clock guard: HiGHS is asked to stop at its time limit and
is cancelled if it overruns by more than a few seconds.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import pyomo.environ as pyo
from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition
from pyomo.contrib.solver.solvers.highs import Highs

from formulations import build_model, refresh_model, structure
from optimizer.costing import Solution, procurement_table, repair, unserved_penalty_usd
from optimizer.curves.queueing import servers_needed
from optimizer.errors import InfeasibleError, NumericalTroubleError, TimeLimitNoPlanError
from optimizer.instance import Instance, reach

GUARD_MARGIN_S = 5.0
AUTO_EXACT_BINARIES = 3000

MAX_ROOM_SOLVES = 4  # extra solves allowed to make room where whole replicas overflowed


@dataclass(frozen=True)
class SolverSettings:
    """exact: True (integer replicas throughout), False (master + repair), None (exact when
    the exact model is small — at most AUTO_EXACT_BINARIES pool-size choices)."""

    time_limit_s: float = 60.0
    mip_gap: float = 0.005
    threads: int | None = None
    exact: bool | None = None
    plan_iterations: int = 3


@dataclass
class SolveStep:
    kind: str  # "plan" | "bound" | "exact"
    status: str
    objective_usd: float | None
    bound_usd: float | None
    seconds: float
    repaired_usd: float | None = None


@dataclass
class SolveResult:
    status: str  # optimal | time_limit | infeasible
    solution: Solution
    objective_usd: float  # total cost + unserved penalty of the kept plan
    best_bound_usd: float
    mip_gap: float
    build_seconds: float
    handoff_seconds: float
    solve_seconds: float
    steps: list[SolveStep] = field(default_factory=list)
    model_size: dict = field(default_factory=dict)
    exact: bool = False


@contextmanager
def gc_paused():
    """Pyomo builds millions of small objects; the cyclic collector only slows that down."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _kappa(pool, n: int) -> float:
    """Requests/s per replica of a pool of n replicas (peak-sized)."""
    if pool.table is None:
        return pool.decode_rps
    n = max(1, min(n, len(pool.table)))
    per = float(pool.table[n - 1]) / n
    return min(per, pool.decode_rps) if pool.role == "colocated" else per


def _coefficients(inst: Instance, sizes: dict[tuple[int, int], int]) -> dict[tuple[int, int], float]:
    """GPUs per request/s of mean load: gpus · peak-to-mean / κ(n̂)."""
    out = {}
    for (pid, sid), n in sizes.items():
        pool = inst.pools[pid]
        kappa = _kappa(pool, n)
        out[(pid, sid)] = pool.gpus * inst.peak_to_mean / kappa if kappa > 0 else 1e6
    return out


def pool_sizes(inst: Instance) -> tuple[dict, dict]:
    """(largest size N each (pool, state) could need, a first guess n̂) from reachable demand."""
    largest, guess = {}, {}
    for key, lam in reach(inst).items():
        pool = inst.pools[key[0]]
        load = lam * inst.peak_to_mean
        if pool.table is None:
            n = math.ceil(load / pool.decode_rps) if load > 0 else 1
            largest[key] = guess[key] = max(n, 1)
            continue
        largest[key] = max(servers_needed(load, pool.table), 1)
        guess[key] = max(servers_needed(load / 2.0, pool.table), 1)
    return largest, guess


def _status_name(results) -> str:
    tc = results.termination_condition
    if tc == TerminationCondition.convergenceCriteriaSatisfied:
        return "optimal"
    if tc == TerminationCondition.maxTimeLimit:
        return "time_limit"
    if tc in (TerminationCondition.provenInfeasible, TerminationCondition.infeasibleOrUnbounded):
        return "infeasible"
    if tc == TerminationCondition.interrupted:
        return "interrupted"
    return "error"


class _Guard:
    """Cancels a HiGHS run that overruns its limit by more than the margin."""

    def __init__(self, solver: Highs, seconds: float):
        self.timer = threading.Timer(seconds + GUARD_MARGIN_S, self._cancel, args=(solver,))
        self.fired = False

    def _cancel(self, solver):
        self.fired = True
        solver._solver_model.cancelSolve()  # the highspy object behind the persistent interface

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()


def _run(solver: Highs, model, seconds: float, gap: float, threads: int | None):
    # HiGHS measures its time limit against the instance's accumulated run time
    solver.config.time_limit = solver._solver_model.getRunTime() + max(seconds, 1.0)
    solver.config.rel_gap = gap
    solver.config.threads = threads
    with _Guard(solver, max(seconds, 1.0)):
        results = solver.solve(model)
    return results


def _values(var) -> dict:
    return {k: v for k, v in var.extract_values().items() if v is not None}


def _extract(model) -> tuple[dict, dict, dict]:
    flows = {}
    for name in ("prefill_flow", "colocated_flow", "decode_flow"):
        flows.update({k: v for k, v in _values(getattr(model, name)).items() if v > 1e-9})
    routes = {k: v for k, v in _values(model.route).items() if v > 1e-9}
    unserved = {k: v for k, v in _values(model.unserved).items() if v > 1e-9}
    return flows, routes, unserved


def plan_cost(inst: Instance, sol: Solution) -> float:
    return float(procurement_table(inst, sol)["cost_usd"].sum()) + unserved_penalty_usd(inst, sol)


class ModelCache:
    """Keeps the last master model and its persistent HiGHS instance. A sweep whose next run
    has the same structure (`formulations.structure`) — only prices, demand, megawatts or
    caps changed — refreshes their coefficients instead of rebuilding, and HiGHS starts
    from its last basis."""

    def __init__(self):
        self.signature = None
        self.model = None
        self.solver = None
        self.size: dict = {}
        self.reuses = 0

    def prepare(self, inst: Instance, exact: bool, coefficients: dict, largest: dict) -> tuple[float, float]:
        """Ready a model for ``inst``; returns (build s, hand-off s) — zero build on reuse."""
        start = time.perf_counter()
        signature = None if exact else structure(inst)
        with gc_paused():
            if signature is not None and signature == self.signature:
                refresh_model(self.model, inst)
                _set_coefficients(self.model, coefficients)
                # forget the last run's basis: a run's result must not depend on the one before
                self.solver._solver_model.clearSolver()
                self.reuses += 1
                return 0.0, time.perf_counter() - start
            self.model, _ = build_model(inst, exact, coefficients, largest)
            build_s = time.perf_counter() - start
            self.solver = Highs()
            self.solver.config.load_solutions = False
            self.solver.config.raise_exception_on_nonoptimal_result = False
            t = time.perf_counter()
            self.solver.set_instance(self.model)
            handoff_s = time.perf_counter() - t
        self.signature = signature
        self.size = _model_size(self.solver)
        return build_s, handoff_s


def solve(inst: Instance, settings: SolverSettings, progress=None, cache: ModelCache | None = None) -> SolveResult:
    """Solve ``inst``: exact mode in one MIP; default mode as plan solves plus a bound solve.
    Pass a `ModelCache` to reuse a model across runs of the same structure (sweeps)."""
    say = progress or (lambda msg: None)
    largest, guess = pool_sizes(inst)
    if settings.exact is None:
        binaries = sum(n for key, n in largest.items() if inst.pools[key[0]].table is not None)
        settings = replace(settings, exact=binaries <= AUTO_EXACT_BINARIES)
    cache = cache or ModelCache()
    build_s, handoff_s = cache.prepare(inst, settings.exact, _coefficients(inst, guess), largest)
    model, solver, size = cache.model, cache.solver, cache.size
    say(f"model: {size['variables']:,} variables ({size['integers']:,} integer), {size['rows']:,} rows, "
        f"{size['nonzeros']:,} nonzeros; " + (f"build {build_s:.1f} s, hand-off {handoff_s:.1f} s" if build_s
                                             else f"reused, coefficients refreshed in {handoff_s:.1f} s"))
    deadline = time.perf_counter() + settings.time_limit_s
    steps: list[SolveStep] = []
    solve_start = time.perf_counter()
    if settings.exact:
        result = _solve_exact(inst, model, solver, settings, steps, deadline)
    else:
        result = _solve_master(inst, model, solver, settings, steps, deadline, largest, guess, say)
    result.build_seconds, result.handoff_seconds = build_s, handoff_s
    result.solve_seconds = time.perf_counter() - solve_start
    result.model_size = size
    result.exact = settings.exact
    return result


def _model_size(solver: Highs) -> dict:
    lp = solver._solver_model.getLp()
    integrality = list(lp.integrality_)
    return {
        "variables": lp.num_col_,
        "integers": sum(1 for v in integrality if int(v) != 0),
        "rows": lp.num_row_,
        "nonzeros": int(lp.a_matrix_.start_[-1]) if lp.num_col_ else 0,
    }


def _check(results, what: str):
    status = _status_name(results)
    has_solution = results.solution_status in (SolutionStatus.optimal, SolutionStatus.feasible)
    if status == "error" and not has_solution:
        raise NumericalTroubleError(
            f"HiGHS stopped with an error during the {what} solve and no solution; "
            "this usually means numerical trouble — check for extreme prices or demands"
        )
    if status in ("time_limit", "interrupted") and not has_solution:
        raise TimeLimitNoPlanError(
            f"the time limit ran out during the {what} solve before any plan was found; "
            "raise --time-limit or shrink the scenario"
        )
    return status, has_solution


def _solve_exact(inst, model, solver, settings, steps, deadline) -> SolveResult:
    t = time.perf_counter()
    results = _run(solver, model, deadline - time.perf_counter(), settings.mip_gap, settings.threads)
    status, _ = _check(results, "exact")
    results.solution_loader.load_vars()
    flows, routes, unserved = _extract(model)
    whole = {k: int(round(v)) for k, v in _values(model.committed).items() if round(v) > 0}
    replicas = {}
    for name in ("prefill_replicas", "colocated_replicas", "decode_replicas"):
        replicas.update({k: int(round(v)) for k, v in _values(getattr(model, name)).items() if round(v) > 0})
    ondemand = {k: int(round(v)) for k, v in _values(model.ondemand).items() if round(v) > 0}
    sol = Solution(whole, ondemand, flows, replicas, routes, unserved)
    bound = float(results.objective_bound if results.objective_bound is not None else results.incumbent_objective)
    objective = plan_cost(inst, sol)
    steps.append(SolveStep("exact", status, results.incumbent_objective, bound, time.perf_counter() - t, objective))
    gap = max(0.0, (objective - bound) / objective) if objective > 0 else 0.0
    return SolveResult(status, sol, objective, bound, gap, 0, 0, 0, steps)


def _set_coefficients(model, coefficients: dict) -> None:
    for key, value in coefficients.items():
        model.gpus_per_rps[key] = value


def _marginal(pool, n: int) -> float:
    """Requests/s the next replica adds to a pool of n: f(n+1) − f(n) for a queueing pool
    (growing with n — pooling), the decode capacity for decode, the smaller of the two for
    colocated."""
    if pool.table is None:
        return pool.decode_rps
    table = pool.table
    k = min(max(n, 0), len(table) - 1)
    step = float(table[k] - (table[k - 1] if k > 0 else 0.0))
    return min(step, pool.decode_rps) if pool.role == "colocated" else step


def _packing(inst: Instance, sol: Solution) -> dict[tuple[str, str], float]:
    """Per (site, accelerator): GPU-hours bought over GPU-hours replicas use (≥ 1). A sliver
    of an accelerator type at a site still buys whole nodes; this is that fixed cost, spread."""
    weight = {st.id: st.weight_hours for st in inst.states}
    used: dict = {}
    for (pid, sid), n in sol.replicas.items():
        p = inst.pools[pid]
        used[(p.site, p.gpu)] = used.get((p.site, p.gpu), 0.0) + n * p.gpus * weight[sid]
    bought: dict = {}
    for (s, g, _), n in sol.committed.items():
        bought[(s, g)] = bought.get((s, g), 0.0) + n * 8760.0 * inst.gpus_per_node[g]
    for (s, g, sid), n in sol.ondemand.items():
        bought[(s, g)] = bought.get((s, g), 0.0) + n * weight[sid] * inst.gpus_per_node[g]
    return {key: max(1.0, bought.get(key, 0.0) / u) for key, u in used.items() if u > 0}


def _tangent_coefficients(inst: Instance, sol: Solution, current: dict) -> dict:
    """Linearise each pool's (concave) cost at the last plan's load: GPUs per request/s =
    gpus · peak-to-mean / (capacity of the next replica) — tangents of a concave cost lie
    above it, so a plan the linearised problem prefers costs no more (a descent); a pool left
    empty is priced at its first replica. Each is scaled by its (site, accelerator)'s node
    packing (`_packing`), so slivers of whole nodes are priced at what they cost."""
    packing = _packing(inst, sol)
    out = dict(current)
    for key in out:
        pool = inst.pools[key[0]]
        step = _marginal(pool, sol.replicas.get(key, 0))
        scale = packing.get((pool.site, pool.gpu), 1.0)
        out[key] = pool.gpus * inst.peak_to_mean / step * scale if step > 0 else 1e6
    return out


def _reserve_room(model, inst: Instance, sol: Solution, coefficients: dict) -> None:
    """Where the last plan's whole replicas overflowed a supply cap or a site's power, ask the
    next solve to leave room for the rounding: the whole plan's GPUs (kW) there minus the
    master's fractional ones."""
    fractional: dict = {}
    for (pid, sid), y in sol.flows.items():
        p = inst.pools[pid]
        fractional[(p.site, p.gpu, sid)] = fractional.get((p.site, p.gpu, sid), 0.0) + coefficients[(pid, sid)] * y
    whole: dict = {}
    for (pid, sid), n in sol.replicas.items():
        p = inst.pools[pid]
        whole[(p.site, p.gpu, sid)] = whole.get((p.site, p.gpu, sid), 0) + n * p.gpus
    for key in sol.gpus_short:
        if key in model.gpu_reserve:
            room = whole.get(key, 0) - fractional.get(key, 0.0)
            model.gpu_reserve[key] = max(pyo.value(model.gpu_reserve[key]), room)
    for (site, sid), over in sol.kw_over.items():
        if (site, sid) in model.kw_reserve:
            room = sum(inst.node_kw[g] * inst.pue[site] / inst.gpus_per_node[g] * (whole.get((site, g, sid), 0) - fractional.get((site, g, sid), 0.0))
                       for g in inst.gpus)
            model.kw_reserve[site, sid] = max(pyo.value(model.kw_reserve[site, sid]), room, over)


def _solve_master(inst, model, solver, settings, steps, deadline, largest, guess, say) -> SolveResult:
    """Bound solve first (optimistic pooling: its plan consolidates), then a solve priced at
    the pool sizes reachable demand suggests, then tangent descent from the best plan so far.
    Every solve's flows are repaired into a whole plan; the cheapest plan that fits every
    supply cap and megawatt is kept. When whole replicas overflow a cap, later solves leave
    that much room there."""
    best: tuple[float, Solution] | None = None
    last_fit = None
    statuses, bound = [], None
    starts = [("bound", _coefficients(inst, largest)), ("plan", _coefficients(inst, guess))]
    budget = len(starts) + max(settings.plan_iterations - 1, 0)
    coefficients = None
    it = 0
    while it < budget + MAX_ROOM_SOLVES and time.perf_counter() < deadline:
        if it < len(starts):
            kind, coefficients = starts[it]
        else:
            kind = "plan"
            base = (best or last_fit)[1]
            coefficients = _tangent_coefficients(inst, base, coefficients)
        _set_coefficients(model, coefficients)
        t = time.perf_counter()
        results = _run(solver, model, max((deadline - time.perf_counter()) / max(budget - it, 1), 1.0),
                       settings.mip_gap / 2, settings.threads)
        try:
            status, has_solution = _check(results, kind)
        except TimeLimitNoPlanError:
            if best is None or bound is None:
                raise
            statuses.append("time_limit")  # keep the plans already made
            break
        statuses.append(status)
        if kind == "bound":
            bound = results.objective_bound
            if bound is None and has_solution and status == "optimal":
                bound = results.incumbent_objective
        results.solution_loader.load_vars()
        sol = repair(inst, *_extract(model))
        cost = plan_cost(inst, sol)
        fits = not sol.gpus_short and not sol.kw_over
        steps.append(SolveStep(kind, status, results.incumbent_objective, results.objective_bound,
                               time.perf_counter() - t, cost))
        say(f"{kind} solve: {status}, linearised ${results.incumbent_objective:,.0f}, whole plan ${cost:,.0f}"
            + ("" if fits else " (overflows supply or power: solving again with room left)")
            + f" ({time.perf_counter() - t:.1f} s)")
        it += 1
        last_fit = (cost, sol)
        if not fits:
            _reserve_room(model, inst, sol, coefficients)
            continue
        if best is None or cost < best[0] - 1e-6:
            best = (cost, sol)
        elif it > len(starts):
            break  # the descent stalled
        if it >= budget:
            break
    else:
        if it < budget:
            statuses.append("time_limit")  # the deadline came before the planned solves
    if best is None:
        raise InfeasibleError(
            "no whole plan fits the sites' supply caps and megawatts: " + "; ".join(last_fit[1].violations[:5]))
    cost, sol = best
    bound = float(bound) if bound is not None else 0.0
    gap = max(0.0, (cost - bound) / cost) if cost > 0 else 0.0
    if "time_limit" in statuses:
        overall = "time_limit"
    else:
        overall = "optimal" if gap <= settings.mip_gap + 1e-9 else "gap_above_target"
    return SolveResult(overall, sol, cost, bound, gap, 0, 0, 0, steps)
