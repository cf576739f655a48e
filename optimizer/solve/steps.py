"""The default solve as named steps. Each takes the best whole plan so far (a `Candidate`, or
None before the first) and returns the best after it; the shared state — the model in its
backend, the wall-clock cap, the bound, the log — travels in a `Context`.

* ``bound`` — the master priced at κ = f(N)/N, N the pool size all demand able to reach a
  pool would need. f(n)/n grows with n and no pool needs more than N replicas, so this
  over-states every pool's capacity: its optimum is a valid lower bound on the cost of any
  plan. Its flows are made whole (`repair.repair`): the first whole plan. Where whole replicas
  overflow a supply cap or a site's power, the master is solved again with that much room left
  there (at most MAX_ROOM_SOLVES times).
  With churn limits (`optimizer.solve.churn`), the budget is shared out per (site,
  accelerator) as the master used it, and only a plan that keeps every limit is kept.
* ``improve`` — from the first plan, three paths (`PATHS`), the best kept: the slices operated
  again on the plan's commitment (`operating.reoperate_slices`: committed GPUs cost nothing in
  an hour, so each slice fills them before it rents, which the master's linear prices cannot
  see), then moves priced exactly on the whole plan (`moves`); moves, re-operation, moves; and
  the same with year merges first in the last moves.
* ``refine`` — the rest of the effort's work (`optimizer.solve.anytime`): more moves, the exact
  model where it fits, slice programs.

Every step's work is counted in units that do not depend on the machine's speed (moves priced,
branch-and-bound nodes; a linear program is solved to its end), so the plan does not either;
the wall clock only caps the whole (`SolverSettings.cap_s`), and a solve it stops says so.
Measured effects of each step are in benchmarks/RESULTS.md ("Solve steps").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from formulations import carbon_cap_row
from optimizer.base.errors import TimeLimitNoPlanError
from optimizer.instance.build import Instance
from optimizer.solve import churn, moves
from optimizer.solve.cache import ModelCache
from optimizer.solve.fixed_commitment import reoperate_slices
from optimizer.solve.fleet import Solution, gpus_in_replicas, node_kw
from optimizer.solve.pricing import at_sizes, candidate
from optimizer.solve.repair import repair
from optimizer.solve.settings import WORK, Bound, Candidate, Progress, SolverSettings, SolveStep

MAX_ROOM_SOLVES = 4  # extra master solves allowed to make room where whole replicas overflowed
REOPERATE_PASSES = 4  # the plan's slices operated again on its commitment


@dataclass
class Context:
    inst: Instance
    cache: ModelCache
    settings: SolverSettings
    deadline: float  # the wall-clock cap, on time.perf_counter()
    say: object
    largest: dict  # (pool, state) → the largest size it could need
    guess: dict  # (pool, state) → a first guess of its size
    log: list[SolveStep] = field(default_factory=list)
    bound_usd: float | None = None
    master_solves: int = 0
    stopped_by_clock: bool = False
    last_fit: Candidate | None = None  # the last repaired plan, fitting or not
    started: float = field(default_factory=time.perf_counter)
    history: list[Progress] = field(default_factory=list)
    bounds: list[Bound] = field(default_factory=list)
    best: Candidate | None = None  # the best whole plan so far
    first_plan_s: float | None = None
    master_duals: object = None  # the bound solve's row duals (`lagrange.from_duals`), with master_lp
    master_lp: object = None
    split: dict = field(default_factory=dict)
    work: dict = field(default_factory=dict)  # work done by kind: moves priced, nodes, slice programs

    @property
    def best_usd(self) -> float | None:
        return None if self.best is None else self.best.cost_usd

    def time_left(self) -> float:
        return self.deadline - time.perf_counter()

    def out_of_time(self) -> bool:
        """The wall-clock cap has passed: the work stops here (and the solve says so)."""
        if self.time_left() <= 0:
            self.stopped_by_clock = True
        return self.stopped_by_clock

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def count(self, kind: str, amount: int) -> None:
        self.work[kind] = self.work.get(kind, 0) + int(amount)

    @property
    def gap(self) -> float | None:
        if self.best_usd is None or self.bound_usd is None or self.best_usd <= 0:
            return None
        return max(0.0, (self.best_usd - self.bound_usd) / self.best_usd)

    def met(self) -> bool:
        """The best plan is within the gap target of the best bound."""
        return self.gap is not None and self.gap <= self.settings.mip_gap + 1e-9

    def offer(self, event: str, plan: Candidate) -> bool:
        """Keep ``plan`` if it fits, keeps the churn limits and beats the best
        (`Candidate.better_than`); True if kept."""
        if not fits(plan.solution) or not plan.better_than(self.best) or churn.breaches(self.inst, plan.solution):
            return False
        self.best = plan
        if self.first_plan_s is None:
            self.first_plan_s = self.elapsed()
        self.history.append(Progress(self.elapsed(), self.best_usd, self.bound_usd, event))
        return True

    def note_bound(self, event: str, bound: Bound) -> None:
        """Record a lower bound (kept if higher)."""
        self.bounds.append(bound)
        if self.bound_usd is None or bound.usd > self.bound_usd:
            self.bound_usd = bound.usd
        self.history.append(Progress(self.elapsed(), self.best_usd, self.bound_usd, event))

    def progress_line(self, event: str) -> None:
        gap = self.gap
        usd = lambda x: f"${x:,.0f}" if x is not None else "-"  # noqa: E731  (no plan or bound yet)
        self.say(f"[{self.elapsed():6.1f} s] plan {usd(self.best_usd)}, bound {usd(self.bound_usd)}, gap "
                 + (f"{gap:.2%}" if gap is not None else "-") + f" — {event}")


def fits(sol: Solution) -> bool:
    return not sol.gpus_short and not sol.kw_over


def _master_solve(ctx: Context, kind: str, coefficients: dict) -> tuple[Candidate, object] | None:
    """Price the pools, solve the master to its end (only the wall-clock cap stops it), make its
    flows whole; log it. None when the cap stopped it after a plan exists."""
    ctx.cache.price_pools(coefficients)
    t = time.perf_counter()
    try:
        out = ctx.cache.run(max(ctx.time_left(), 1.0), ctx.settings.mip_gap / 2, ctx.settings.threads, kind)
    except TimeLimitNoPlanError:
        if ctx.best is None:
            raise
        ctx.stopped_by_clock = True
        return None
    ctx.master_solves += 1
    if not out.has_solution:  # room left for rounding can leave no room at all (churn limits): the last plan stands
        ctx.say(f"{kind} solve: {out.status}, no plan")
        return None
    ctx.stopped_by_clock = ctx.stopped_by_clock or out.status == "time_limit"
    reading = ctx.cache.read(out.x)
    _price_the_cap(ctx, out)
    ctx.inst = churn.allot_from(ctx.inst, ctx.cache.lp, out.x)  # the budget as the master used it, for the searches
    new = candidate(ctx.inst, repair(ctx.inst, reading.flows, reading.routes, reading.unserved))
    if not fits(new.solution):
        new = _within_the_budget(ctx, reading) or new
    ctx.last_fit = new
    ctx.log.append(SolveStep(kind, out.status, out.objective, out.bound, time.perf_counter() - t, new.cost_usd))
    ctx.say(f"{kind} solve: {out.status}, linearised ${out.objective:,.0f}, whole plan ${new.cost_usd:,.0f}"
            + ("" if fits(new.solution) else " (overflows supply or power: solving again with room left)")
            + f" ({time.perf_counter() - t:.1f} s)")
    if not fits(new.solution):
        _reserve_room(ctx, new.solution, coefficients)
    return new, out


def _within_the_budget(ctx: Context, reading) -> Candidate | None:
    """The master's fractional changes can share a churn budget out to pairs its whole plan
    cannot use (fractions of a node wanted at one accelerator, a whole node needed at
    another): the whole plan made with the budget not shared, when it keeps the budget; the
    searches then keep the budget as a whole (`moves.WholePlan`); None otherwise."""
    if ctx.inst.churn is None or ctx.inst.churn.max_changes is None:
        return None
    free = churn.unshared(ctx.inst)
    sol = repair(free, reading.flows, reading.routes, reading.unserved)
    if not fits(sol) or churn.breaches(free, sol):
        return None
    ctx.inst = free
    return candidate(ctx.inst, sol)


def _price_the_cap(ctx: Context, out) -> None:
    """A binding carbon cap's shadow price (its row's dual in the master LP) joins the carbon
    price the whole-plan searches pay (`Instance.carbon_search_usd_per_t`): making the plan
    whole and the moves then trade tonnes as the master did, and keep near the cap."""
    row = carbon_cap_row(ctx.cache.lp)
    if row is None or out.row_dual is None:
        return
    shadow = max(0.0, -float(out.row_dual[row]))
    ctx.inst = replace(ctx.inst, carbon_search_usd_per_t=ctx.inst.carbon_usd_per_t + shadow)


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
    coefficients = at_sizes(ctx.inst, ctx.largest)
    if ctx.cache.start_from_basis():
        ctx.say("the master starts from the base run's basis")
    done = _master_solve(ctx, "bound", coefficients)
    if done is None:
        return best
    new, out = done
    ctx.note_bound("bound", Bound("master LP", float(out.bound), ctx.elapsed(),
                                  "continuous replicas, each pool priced at its largest size's capacity"))
    ctx.master_duals, ctx.master_lp = out.row_dual, ctx.cache.lp
    ctx.offer("bound", new)
    for _ in range(MAX_ROOM_SOLVES):  # whole replicas overflowed somewhere: the same prices, room left there
        if fits(new.solution) or ctx.out_of_time():
            break
        again = _solve_again(ctx, "room", coefficients)
        if again is None:
            break
        new = again
    _tighten_the_cap(ctx, new, coefficients)
    return ctx.best


def _solve_again(ctx: Context, kind: str, coefficients: dict) -> Candidate | None:
    """The master solved again after a change to its program, its whole plan offered."""
    done = _master_solve(ctx, kind, coefficients)
    if done is None:
        return None
    ctx.offer(kind, done[0])
    return done[0]


CAP_SOLVES = 3  # master solves with the carbon cap lowered, at most, while the whole plan exceeds it


def _tighten_the_cap(ctx: Context, plan: Candidate, coefficients: dict) -> None:
    """Whole replicas and nodes emit more than the master's fractional ones: while the whole
    plan exceeds the carbon cap, the master is solved again with the cap lowered by the excess
    (as power room is left where whole replicas overflow a site); the cap is restored after."""
    cap = ctx.inst.carbon_cap_t
    if cap is None:
        return
    target = cap
    for _ in range(CAP_SOLVES):
        if plan.over_cap_t <= 0 or ctx.out_of_time() or target - plan.over_cap_t <= 0:
            break
        target -= plan.over_cap_t
        if not ctx.cache.set_carbon_cap(target):
            return
        again = _solve_again(ctx, "cap", coefficients)
        if again is None:
            break
        plan = again
    ctx.cache.set_carbon_cap(cap)


def reoperate(ctx: Context, plan: Candidate) -> Candidate:
    """REOPERATE_PASSES passes of the plan's slices operated again on its commitment
    (`operating.reoperate_slices`), each from the last pass's plan; they need not fall
    monotonically (re-committing moves the free capacity), so all run and the best is returned."""
    best, current = plan, plan.solution
    for _ in range(REOPERATE_PASSES):
        if ctx.out_of_time():
            break
        t = time.perf_counter()
        new = reoperate_slices(ctx.inst, current)
        if new is None or not fits(new):
            break
        found = candidate(ctx.inst, new)
        ctx.log.append(SolveStep("reoperate", "optimal", None, None, time.perf_counter() - t, found.cost_usd))
        ctx.offer("reoperate", found)
        if found.better_than(best):
            best = found
        current = new
    ctx.say(f"slices operated on the commitment, {REOPERATE_PASSES} passes: whole plan ${best.cost_usd:,.0f}")
    return best


def moved(ctx: Context, plan: Candidate, budget: int, year_first: bool = False) -> Candidate:
    """Moves on ``plan`` (`moves.improve_by_moves`, year merges before the one-hour moves where
    ``year_first``), ``budget`` of them priced."""
    t = time.perf_counter()
    sol, done = moves.improve_by_moves(ctx.inst, plan.solution, budget, stop=ctx.out_of_time, year_first=year_first)
    ctx.count("moves priced", done.priced)
    new = candidate(ctx.inst, sol) if done.kept else plan
    ctx.log.append(SolveStep("improve", "optimal", None, None, time.perf_counter() - t, new.cost_usd))
    ctx.offer("improve", new)
    ctx.say(f"moves on the whole plan{', year merges first' if year_first else ''}: {done.kept:,} of "
            f"{done.priced:,} priced kept, whole plan ${new.cost_usd:,.0f} ({time.perf_counter() - t:.1f} s)")
    return new if new.better_than(plan) else plan


# which path pays depends on the scenario, so each runs from the same plan and the best is kept.
# Measured on the first effort: the reference gains most by operating its slices first or by
# year merges first after moves and re-operation ($16,918,279 → $16,725,866), us-east by
# one-hour moves first (year merges first there: +0.5 %); a path's steps shared with an
# earlier path's are not run again
PATHS = (("reoperate", "moves"), ("moves", "reoperate", "moves"), ("moves", "reoperate", "year moves"))


def improve(ctx: Context, best: Candidate | None, budget: int | None = None) -> Candidate | None:
    """From the best whole plan, each of PATHS — re-operation of its slices (`reoperate`) and
    moves (`moved`, ``budget`` priced each time; default: the first effort's; "year moves":
    year merges first) in that order — keeping the best plan any of them reaches."""
    if best is None:
        return best
    budget = WORK["first"].moves if budget is None else budget
    reached = {(): best}
    for path in PATHS:
        for i, step in enumerate(path):
            if path[:i + 1] in reached:
                continue
            if ctx.out_of_time():
                return ctx.best
            plan = reached[path[:i]]
            reached[path[:i + 1]] = (reoperate(ctx, plan) if step == "reoperate"
                                     else moved(ctx, plan, budget, year_first=step == "year moves"))
    return ctx.best


FIRST_PLAN_FUNCTIONS = {"bound": bound, "improve": improve}
