"""The plan a careful planner would make by hand — the baseline every plan is measured against.

For each workload: one accelerator type, colocated serving (no disaggregation), each metro
served from its nearest site that offers that type within the TTFT objective, every site
provisioned for its peak hour of the year on reserved capacity (the cheapest allowed term;
on demand every hour where nothing may be reserved).
The accelerator type is the one that makes this plan cheapest — the planner tries each.
It is costed with the same curves and the same arithmetic as the optimizer's plans.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from optimizer.fleet import Solution, procurement_table, replicas_for
from optimizer.instance import NOMINAL, Instance
from optimizer.units import Role


@dataclass
class Baseline:
    total_cost_usd: float
    gpu_by_workload: dict[str, str]
    solution: Solution
    cost_usd_by_workload: dict[str, float]  # each workload's own nodes and egress; they add up to the total


def _assign(inst: Instance, k: str, gpu: str):
    """(metro → (site, tier), (site, tier) → pool): each metro's nearest site with a
    colocated pool on ``gpu`` in a tier it can use (its own or looser); None when some metro
    with demand has none."""
    pools = {(p.site, p.tier): p for p in inst.pools
             if p.role == Role.COLOCATED and p.regime == NOMINAL and p.workload == k and p.gpu == gpu}
    out = {}
    by_metro = defaultdict(list)
    for a in inst.arcs[NOMINAL]:
        if a.workload == k and (a.site, a.tier) in pools:
            by_metro[a.metro].append(a)
    for m in {m for (m, kk, _) in inst.demand if kk == k}:
        arcs = sorted(by_metro.get(m, []), key=lambda a: (a.rtt_ms, a.tier))
        if not arcs:
            return None
        out[m] = (arcs[0].site, arcs[0].tier)
    return out, pools


def _plan_for(inst: Instance, k: str, gpu: str):
    found = _assign(inst, k, gpu)
    if found is None:
        return None
    assign, pools = found
    # a site serves all its metros from one pool: the loosest tier any of them needs
    tier_at = defaultdict(int)
    for site, tier in assign.values():
        tier_at[site] = max(tier_at[site], tier)
    load = defaultdict(float)
    routes = {}
    for st in inst.states:
        if st.lost_site is not None:
            continue
        for m, (site, _) in assign.items():
            lam = inst.demand.get((m, k, st.slice), 0.0)
            if lam:
                load[(site, st.id)] += lam
                routes[(m, site, k, tier_at[site], st.id)] = lam
    peak_nodes = defaultdict(int)
    flows, replicas = {}, {}
    for (site, sid), lam in load.items():
        pool = pools[(site, tier_at[site])]
        n = replicas_for(pool, pool.peak_to_mean * lam)
        flows[(pool.id, sid)] = lam
        replicas[(pool.id, sid)] = n
        peak_nodes[site] = max(peak_nodes[site], math.ceil(n * pool.gpus / inst.gpus_per_node[gpu]))
    return peak_nodes, flows, replicas, routes


def baseline(inst: Instance) -> Baseline | None:
    """The hand-made plan, or None when some workload has no single accelerator type that
    serves every metro colocated from its nearest site."""
    parts = {}
    choice = {}
    for k in inst.workloads:
        best = None
        for g in inst.gpus:
            plan = _plan_for(inst, k, g)
            if plan is None:
                continue
            nodes = plan[0]
            cost = sum(n * min((c.rate + c.energy for c in inst.contracts[(s, g)].committed.values()),
                               default=inst.contracts[(s, g)].ondemand) for s, n in nodes.items())
            if best is None or cost < best[0]:
                best = (cost, g, plan)
        if best is None:
            return None
        _, g, (nodes, f, r, ro) = best
        choice[k] = g
        parts[k] = _solution_of(inst, g, nodes, f, r, ro)
    sol = _merged(list(parts.values()))
    total = float(procurement_table(inst, sol)["cost_usd"].sum())
    by_workload = {k: float(procurement_table(inst, part)["cost_usd"].sum()) for k, part in parts.items()}
    return Baseline(total, choice, sol, by_workload)


def _solution_of(inst: Instance, g: str, nodes: dict, flows: dict, replicas: dict, routes: dict) -> Solution:
    """One workload's part of the baseline: its peak nodes reserved on the cheapest term (on
    demand every hour where nothing may be reserved)."""
    committed, ondemand = {}, {}
    for s, n in nodes.items():
        terms = inst.contracts[(s, g)].committed
        if terms:
            committed[(s, g, min(sorted(terms), key=lambda t: terms[t].rate + terms[t].energy))] = n
        else:  # nothing can be reserved: rent the peak on demand every hour
            for st in inst.states:
                if st.lost_site is None:
                    ondemand[(s, g, st.id)] = n
    return Solution(committed, ondemand, dict(flows), dict(replicas), dict(routes), {})


def _merged(parts: list[Solution]) -> Solution:
    """The workloads' parts as one plan: nodes at the same (site, accelerator) add up."""
    committed: dict = {}
    ondemand: dict = {}
    flows, replicas, routes = {}, {}, {}
    for part in parts:
        for key, n in part.committed.items():
            committed[key] = committed.get(key, 0) + n
        for key, n in part.ondemand.items():
            ondemand[key] = ondemand.get(key, 0) + n
        flows.update(part.flows)
        replicas.update(part.replicas)
        routes.update(part.routes)
    return Solution(committed, ondemand, flows, replicas, routes, {})
