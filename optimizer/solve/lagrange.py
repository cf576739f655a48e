"""A lower bound that sees whole replicas: the Lagrangian of the commitment.

Only the commitment c[s,g] (committed nodes, paid every hour of the year) and the on-demand
ramps within a day link the states of the plan. Give each nominal state t its own copy c_t
of the commitment, price it at μ[s,g,t] per node, and price the ramps' coupling with ρ ≥ 0;
then for any multipliers

    L(μ, ρ) = Σ_{s,g} min(0, (H·R[s,g] − Σ_t μ[s,g,t]) · cap[s,g])  +  Σ_t LB_t(μ_t, e_t)

is a lower bound on the cost of every plan, where H·R is a committed node's cheapest price for
the year, cap the committed supply, and LB_t any lower bound on slice t's own integer program
(`slices`, chord mode: whole replicas and whole nodes) in which a committed node costs μ_t
and an on-demand node its price plus e_t = ρ_t − ρ_next(t) (the ramps relaxed around t, each
ramp's cost at least its ρ). HiGHS's dual bound of a slice counts, so a slice need not be
solved to the end. Site-loss states are left out (a relaxation: it can only lower L).

The first multipliers are the master LP's duals (`from_duals`): with them the slices' LP
relaxations add up to the master's bound, so every integer slice can only raise it. Later
rounds move μ by subgradient steps (Polyak: θ·(best plan − L)/‖g‖², g_t = c_t − c̄).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from formulations import capacity_rows, power_rows, ramp_rows
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.instance.build import Instance
from optimizer.solve.parallel import SliceRunner

SLICE_GAP = 1e-3  # relative gap a slice program stops at: its bound is what counts


@dataclass
class Multipliers:
    committed: dict  # (site, gpu, state) → $ a committed node is charged in the state (μ)
    ramps: dict  # (site, gpu, state) → the multiplier of the state's ramp row (ρ)

    def ondemand_extra(self, inst: Instance) -> dict:
        """(site, gpu, state) → e = ρ_t − ρ_next(t): the ramps relaxed around each state."""
        out = dict(self.ramps)
        for (s, g, t), nxt in _next_states(inst).items():
            out[(s, g, t)] = out.get((s, g, t), 0.0) - self.ramps.get((s, g, nxt), 0.0)
        return out


def _next_states(inst: Instance) -> dict:
    """(site, gpu, state) → the state after it in its day (the ramps' order), for every
    (site, gpu) that rents on demand."""
    nominal = {st.slice: st.id for st in inst.states if st.lost_site is None}
    out = {}
    for _, group in inst.slices.groupby(["period", "day_type"], sort=False):
        order = [nominal[t] for t in group.sort_values("hour").index if t in nominal]
        for i, sid in enumerate(order):
            nxt = order[(i + 1) % len(order)]
            if nxt != sid:
                for s, g in inst.site_gpus:
                    out[(s, g, sid)] = nxt
    return out


def year_price(inst: Instance) -> dict:
    """(site, gpu) → the cheapest committed node's price for the year, H·R."""
    return {key: min(p.rate + p.energy for p in c.committed.values()) * HOURS_PER_YEAR
            for key, c in inst.contracts.items() if c.committed}


def from_duals(inst: Instance, lp, row_dual: np.ndarray) -> Multipliers:
    """The master LP's duals as multipliers: a committed node's value to state t is the GPUs
    it adds there priced at the capacity row's dual, less the power it draws priced at the
    power row's; ρ are the ramp rows' duals. Site-loss states are left out (μ = 0 there: their
    slices are not evaluated)."""
    nominal = {st.id for st in inst.states if st.lost_site is None}
    committed = {}
    for (s, g, sid), row in capacity_rows(lp).items():
        if sid in nominal:
            committed[(s, g, sid)] = -inst.gpus_per_node[g] * float(row_dual[row])
    for (s, sid), row in power_rows(lp).items():
        for g in inst.gpus:
            if (s, g, sid) in committed:
                committed[(s, g, sid)] += inst.node_kw[g] * inst.pue[s] * float(row_dual[row])
    ramps = {(s, g, t): min(max(0.0, float(row_dual[row])), ramp_price(inst, s, g, t))
             for (s, g, t), row in ramp_rows(lp).items()}
    return Multipliers({k: max(0.0, v) for k, v in committed.items()}, ramps)


def ramp_price(inst: Instance, site: str, gpu: str, state: int) -> float:
    """A started node's cost in the ramp of ``state``: ρ above it would make L −∞ (a ramp
    priced below nothing), so every ρ stays in [0, this]."""
    return inst.states[state].days * inst.cold_start_hours * inst.contracts[(site, gpu)].ondemand


def committed_part(inst: Instance, mu: Multipliers) -> tuple[float, dict]:
    """(Σ_{s,g} min(0, (H·R − Σ_t μ)·cap), the commitment c̄ that attains it)."""
    price = year_price(inst)
    total, chosen = 0.0, {}
    paid: dict = {}
    for (s, g, _), v in mu.committed.items():
        paid[(s, g)] = paid.get((s, g), 0.0) + v
    for key, hr in price.items():
        reduced = hr - paid.get(key, 0.0)
        chosen[key] = inst.committed_max[key] if reduced < 0 else 0
        total += min(0.0, reduced * inst.committed_max[key])
    return total, chosen


@dataclass
class Round:
    bound_usd: float | None  # None: some slice gave no bound in time
    slice_bounds: dict = field(default_factory=dict)  # state → LB_t
    slice_costs: dict = field(default_factory=dict)  # state → the slice's best integer cost at μ
    commitment: dict = field(default_factory=dict)  # (site, gpu, state) → c_t of the slice's solution
    flows: dict = field(default_factory=dict)  # the slices' solutions, for a plan (`anytime.by_slices`)
    routes: dict = field(default_factory=dict)
    unserved: dict = field(default_factory=dict)
    seconds: float = 0.0


def evaluate(inst: Instance, runner: SliceRunner, mu: Multipliers, limits: dict) -> Round:
    """One round: every nominal slice's program under ``mu`` within ``limits`` (``nodes`` of
    branch and bound each, and ``until``, the wall-clock cap in epoch seconds), and L(μ, ρ) —
    None unless every slice gave a bound."""
    t0 = time.perf_counter()
    extra = mu.ondemand_extra(inst)
    nominal = [st for st in inst.states if st.lost_site is None and st.weight_hours > 0]
    order = sorted(nominal, key=lambda st: (-sum(v for k, v in inst.demand.items() if k[2] == st.slice), st.id))
    tasks = []
    for st in order:
        args = {"committed_usd": {(s, g): v for (s, g, t), v in mu.committed.items() if t == st.id},
                "ondemand_extra_usd": {(s, g): v for (s, g, t), v in extra.items() if t == st.id},
                "gap": SLICE_GAP, **limits}
        tasks.append(("bound", st.id, args))
    out = Round(None)
    for result in runner.run_tasks(tasks):
        out.slice_bounds[result.state] = result.bound_usd
        if result.objective_usd is not None:
            out.slice_costs[result.state] = result.objective_usd
        if result.reading is not None:
            for (s, g, _), n in result.reading.committed.items():
                out.commitment[(s, g, result.state)] = out.commitment.get((s, g, result.state), 0) + n
            out.flows.update(result.reading.flows)
            out.routes.update(result.reading.routes)
            out.unserved.update(result.reading.unserved)
    part, _ = committed_part(inst, mu)
    if len(out.slice_bounds) == len(nominal) and all(np.isfinite(v) for v in out.slice_bounds.values()):
        out.bound_usd = part + sum(out.slice_bounds.values())
    out.seconds = time.perf_counter() - t0
    return out


def step(inst: Instance, mu: Multipliers, last: Round, plan_usd: float, theta: float) -> Multipliers:
    """A subgradient step on μ (ρ kept): g_t = c_t − c̄, Polyak's step towards the plan's cost."""
    _, chosen = committed_part(inst, mu)
    grad = {key: last.commitment.get(key, 0) - chosen.get(key[:2], 0) for key in mu.committed}
    norm = sum(v * v for v in grad.values())
    if norm == 0 or last.bound_usd is None:
        return mu
    size = theta * max(plan_usd - last.bound_usd, 0.0) / norm
    return Multipliers({key: max(0.0, v + size * grad[key]) for key, v in mu.committed.items()}, dict(mu.ramps))

