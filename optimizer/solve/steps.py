"""The default solve as named steps. Each takes the best whole plan so far (a `Candidate`, or
None before the first) and returns the best after it; the shared state — the model in its
backend, the deadline, the bound, the log — travels in a `Context`.

* ``bound`` — the master priced at κ = f(N)/N, N the pool size all demand able to reach a
  pool would need. f(n)/n grows with n and no pool needs more than N replicas, so this
  over-states every pool's capacity: its optimum is a valid lower bound on the cost of any
  plan. Its flows are repaired into a first whole plan.
* ``dominant_pools`` — per (site, workload), in the loosest tier that carried load in the
  bound's solution, keep the one prefill-or-colocated pool, and per (site, workload, speed
  class) the one decode pool, that carried most load over the year; close the others. A site
  then runs few, large pools: pooling is what linear prices cannot see.
* ``descend`` — plan solves: priced at the pool sizes reachable demand suggests, then at
  tangents of each pool's cost at the last plan's load, for as long as each improves on the
  best whole plan; each solve's flows are repaired (`repair.repair`). Where whole replicas
  overflow a supply cap or a site's power, the next solve leaves that much room there.
* ``reoperate`` — the slices operated again on the best plan's commitment
  (`operating.reoperate_slices`), a few passes; the cheapest plan is kept.
* ``consolidate`` — small (site, workload) groups of pools closed, smallest first, where the
  re-operated plan costs less without them.
* ``refine`` — the rest of the budget (`optimizer.solve.anytime`): better plans and a better
  bound, until the gap target or the deadline.

Measured effects of each step are in benchmarks/RESULTS.md ("Solve steps").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from optimizer.errors import TimeLimitNoPlanError
from optimizer.fleet import Solution, gpus_in_replicas, node_kw
from optimizer.instance import Instance
from optimizer.repair import repair
from optimizer.solve.cache import ModelCache
from optimizer.solve.operating import reoperate_slices
from optimizer.solve.pricing import at_sizes, plan_cost, tangents
from optimizer.solve.settings import Bound, Candidate, Progress, SolverSettings, SolveStep
from optimizer.units import Role

MAX_ROOM_SOLVES = 4  # extra solves allowed to make room where whole replicas overflowed
REOPERATE_PASSES = 4  # slices operated again on the kept plan's commitment
CONSOLIDATE_TRIALS = 40  # smallest (site, workload) pool groups tried for closing — a count, not a time,
# so that a plan never depends on the machine's speed


@dataclass
class Context:
    inst: Instance
    cache: ModelCache
    settings: SolverSettings
    deadline: float
    say: object
    largest: dict  # (pool, state) → the largest size it could need
    guess: dict  # (pool, state) → a first guess of its size
    log: list[SolveStep] = field(default_factory=list)
    bound_usd: float | None = None
    bound_flows: dict = field(default_factory=dict)  # the bound solve's flows: which pools carried load
    bound_plan: Candidate | None = None  # the bound solve's flows made whole, fitting or not
    master_solves: int = 0
    timed_out: bool = False
    last_fit: Candidate | None = None  # the last repaired plan, fitting or not (tangents start there)
    started: float = field(default_factory=time.perf_counter)
    history: list[Progress] = field(default_factory=list)
    bounds: list[Bound] = field(default_factory=list)
    best_usd: float | None = None  # the best whole plan's cost so far
    first_plan_s: float | None = None
    master_duals: object = None  # the bound solve's row duals (`lagrange.from_duals`), with master_lp
    master_lp: object = None
    split: dict = field(default_factory=dict)

    @property
    def planned_solves(self) -> int:
        """Master solves planned: the bound, the guess, then tangent steps."""
        return 2 + max(self.settings.plan_iterations - 1, 0)

    def time_left(self) -> float:
        return self.deadline - time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def gap(self) -> float | None:
        if self.best_usd is None or self.bound_usd is None or self.best_usd <= 0:
            return None
        return max(0.0, (self.best_usd - self.bound_usd) / self.best_usd)

    def note(self, event: str, plan_usd: float | None = None, bound: Bound | None = None) -> None:
        """Record a whole plan (kept if cheaper) or a lower bound (kept if higher)."""
        if plan_usd is not None and (self.best_usd is None or plan_usd < self.best_usd):
            self.best_usd = plan_usd
            if self.first_plan_s is None:
                self.first_plan_s = self.elapsed()
        if bound is not None:
            self.bounds.append(bound)
            if self.bound_usd is None or bound.usd > self.bound_usd:
                self.bound_usd = bound.usd
        self.history.append(Progress(self.elapsed(), self.best_usd, self.bound_usd, event))

    def progress_line(self, event: str) -> None:
        gap = self.gap
        self.say(f"[{self.elapsed():6.1f} s] plan ${self.best_usd:,.0f}, bound ${self.bound_usd:,.0f}, gap "
                 + (f"{gap:.2%}" if gap is not None else "-") + f" — {event}")


def _better(best: Candidate | None, new: Candidate) -> bool:
    return best is None or new.cost_usd < best.cost_usd - 1e-6


def fits(sol: Solution) -> bool:
    return not sol.gpus_short and not sol.kw_over


def _master_solve(ctx: Context, kind: str, coefficients: dict, best: Candidate | None) -> tuple[Candidate, object] | None:
    """Price the pools, solve, repair; log it. None when the time ran out after a plan exists."""
    ctx.cache.price_pools(coefficients)
    t = time.perf_counter()
    try:
        # each solve may use all the time left: the steps stop at the deadline
        out = ctx.cache.run(max(ctx.time_left(), 1.0), ctx.settings.mip_gap / 2, ctx.settings.threads, kind)
    except TimeLimitNoPlanError:
        if best is None or ctx.bound_usd is None:
            raise
        ctx.timed_out = True  # keep the plans already made
        return None
    ctx.master_solves += 1
    ctx.timed_out = ctx.timed_out or out.status == "time_limit"
    reading = ctx.cache.read(out.x)
    sol = repair(ctx.inst, reading.flows, reading.routes, reading.unserved)
    new = Candidate(plan_cost(ctx.inst, sol), sol)
    ctx.last_fit = new
    ctx.log.append(SolveStep(kind, out.status, out.objective, out.bound, time.perf_counter() - t, new.cost_usd))
    ctx.say(f"{kind} solve: {out.status}, linearised ${out.objective:,.0f}, whole plan ${new.cost_usd:,.0f}"
            + ("" if fits(sol) else " (overflows supply or power: solving again with room left)")
            + f" ({time.perf_counter() - t:.1f} s)")
    if not fits(sol):
        _reserve_room(ctx, sol, coefficients)
    else:
        ctx.note(kind, new.cost_usd)
    return new, out


def _reserve_room(ctx: Context, sol: Solution, coefficients: dict) -> None:
    """Where whole replicas overflowed a supply cap or a site's power, ask the next solve to
    leave room for the rounding: the whole plan's GPUs (kW) there minus the master's fractional
    ones."""
    inst, cache = ctx.inst, ctx.cache
    fractional: dict = {}
    for (pid, sid), y in sol.flows.items():
        p = inst.pools[pid]
        fractional[(p.site, p.gpu, sid)] = fractional.get((p.site, p.gpu, sid), 0.0) + coefficients[(pid, sid)] * y
    whole = gpus_in_replicas(inst, sol.replicas)
    reserve, kw_room = cache.param("gpu_reserve"), cache.param("kw_room")
    gpus = {key: max(reserve[key], whole.get(key, 0) - fractional.get(key, 0.0)) for key in sol.gpus_short if key in reserve}
    room = {}
    for (site, sid), over in sol.kw_over.items():
        if (site, sid) in kw_room:
            rounding = sum(float(node_kw(inst, site, g, 1)) / inst.gpus_per_node[g]
                           * (whole.get((site, g, sid), 0) - fractional.get((site, g, sid), 0.0)) for g in inst.gpus)
            room[(site, sid)] = min(kw_room[(site, sid)], inst.power_kw[site] - max(rounding, over))
    cache.reserve_room(gpus, room)


# ---------------------------------------------------------------------------- the steps


def bound(ctx: Context, best: Candidate | None) -> Candidate | None:
    done = _master_solve(ctx, "bound", at_sizes(ctx.inst, ctx.largest), best)
    if done is None:
        return best
    new, out = done
    ctx.note("bound", bound=Bound("master LP", float(out.bound), ctx.elapsed(),
                                  "continuous replicas, each pool priced at its largest size's capacity"))
    ctx.bound_flows = ctx.cache.read(out.x).flows
    ctx.bound_plan = new
    ctx.master_duals, ctx.master_lp = out.row_dual, ctx.cache.lp
    return new if fits(new.solution) and _better(best, new) else best


def dominant_pools(ctx: Context, best: Candidate | None) -> Candidate | None:
    inst = ctx.inst
    load: dict = {}
    for (pid, sid), y in ctx.bound_flows.items():
        load[pid] = load.get(pid, 0.0) + y * inst.states[sid].weight_hours
    loosest: dict = {}
    for pid, v in load.items():
        p = inst.pools[pid]
        if v > 0 and p.role != Role.DECODE:
            loosest[(p.site, p.workload)] = max(loosest.get((p.site, p.workload), -1), p.tier)
    keep: dict = {}
    for pid, v in sorted(load.items()):
        p = inst.pools[pid]
        if p.role == Role.DECODE:
            group = (p.site, p.workload, "decode", p.speed)
        elif p.tier != loosest.get((p.site, p.workload)):
            continue
        else:
            group = (p.site, p.workload, "entry", p.tier)
        if v > 0 and v > keep.get(group, (None, 0.0))[1]:
            keep[group] = (pid, v)
    kept = {pid for pid, _ in keep.values()}
    for pid in list(kept):  # a prefill pool needs a decode pool of its class
        p = inst.pools[pid]
        if p.role == Role.PREFILL and (p.site, p.workload, "decode", p.speed) not in keep:
            kept.discard(pid)
    ctx.cache.close_pools_except(kept)
    return best


def descend(ctx: Context, best: Candidate | None) -> Candidate | None:
    coefficients = _no_dearer_than(ctx, at_sizes(ctx.inst, ctx.guess))
    limit = ctx.planned_solves + MAX_ROOM_SOLVES
    while ctx.master_solves < limit:
        if ctx.time_left() <= 0:
            ctx.timed_out = ctx.timed_out or ctx.master_solves < ctx.planned_solves
            break
        done = _master_solve(ctx, "plan", coefficients, best)
        if done is None:
            break
        new, _ = done
        if fits(new.solution):
            if not _better(best, new):
                # the descent stalled — or priced pools so dearly that it left demand the
                # bound's own plan serves (the 200-metro ladder step: $2.9 B of penalties)
                break
            best = new
            if ctx.master_solves >= ctx.planned_solves:
                break
        coefficients = tangents(ctx.inst, (best or ctx.last_fit).solution, coefficients)
    else:
        ctx.timed_out = ctx.timed_out or ctx.master_solves < ctx.planned_solves
    return best


def _no_dearer_than(ctx: Context, coefficients: dict) -> dict:
    """A pool priced at no more GPUs per request/s than the bound's whole plan spent in it: a
    first guess too pessimistic about a pool, where an accelerator's supply is capped, would
    otherwise leave demand unserved that the bound's own plan serves (the 200-metro ladder
    step: $2.85 B of penalties)."""
    if ctx.bound_plan is None:
        return coefficients
    sol, inst = ctx.bound_plan.solution, ctx.inst
    out = dict(coefficients)
    for key, y in sol.flows.items():
        n = sol.replicas.get(key, 0)
        if key in out and y > 1e-9 and n > 0:
            out[key] = min(out[key], n * inst.pools[key[0]].gpus / y)
    return out


def reoperate(ctx: Context, best: Candidate | None) -> Candidate | None:
    """The passes need not fall monotonically (re-committing moves the free capacity), so
    all of them run; the cheapest plan is kept."""
    if best is None:
        return best
    current = best.solution
    for _ in range(REOPERATE_PASSES):
        if ctx.time_left() <= 0:
            break
        t = time.perf_counter()
        new = reoperate_slices(ctx.inst, current)
        if new is None or not fits(new):
            break
        cost = plan_cost(ctx.inst, new)
        ctx.log.append(SolveStep("reoperate", "optimal", None, None, time.perf_counter() - t, cost))
        ctx.say(f"slices operated on the commitment: whole plan ${cost:,.0f} ({time.perf_counter() - t:.1f} s)")
        current = new
        if cost < best.cost_usd - 1e-6:
            best = Candidate(cost, new)
            ctx.note("reoperate", cost)
    return best


def consolidate(ctx: Context, best: Candidate | None) -> Candidate | None:
    """Close whole (site, workload) groups of pools — the CONSOLIDATE_TRIALS smallest by
    GPU-hours, smallest first — where the re-operated plan without them costs less than the
    best plan so far. A closure that leaves demand unserved pays the penalty, so the cost
    refuses it."""
    if best is None:
        return best
    inst = ctx.inst
    weight = {st.id: st.weight_hours for st in inst.states}
    usage: dict = {}
    members: dict = {}
    for (pid, sid), n in best.solution.replicas.items():
        p = inst.pools[pid]
        usage[(p.site, p.workload)] = usage.get((p.site, p.workload), 0.0) + n * p.gpus * weight[sid]
        members.setdefault((p.site, p.workload), set()).add(pid)
    t = time.perf_counter()
    closed: frozenset = frozenset()
    tried = kept = 0
    for group in sorted(usage, key=lambda g: (usage[g], g))[:CONSOLIDATE_TRIALS]:
        if ctx.time_left() <= 0:
            break
        trial = closed | members[group]
        new = reoperate_slices(inst, best.solution, trial)
        tried += 1
        if new is None or not fits(new):
            continue
        cost = plan_cost(inst, new)
        if cost < best.cost_usd - 1e-6:
            best, closed, kept = Candidate(cost, new), trial, kept + 1
            ctx.note("consolidate", cost)
    ctx.log.append(SolveStep("consolidate", "optimal", None, None, time.perf_counter() - t, best.cost_usd))
    ctx.say(f"closing small (site, workload) pool groups: {kept} of {tried} tried closed, whole plan "
            f"${best.cost_usd:,.0f} ({time.perf_counter() - t:.1f} s)")
    return best


FIRST_PLAN_FUNCTIONS = {"bound": bound, "dominant_pools": dominant_pools, "descend": descend, "reoperate": reoperate,
                        "consolidate": consolidate}
