"""The plan a careful planner would make by hand — the baseline every plan is measured against.

For each workload: one accelerator type, colocated serving (no disaggregation), each metro
served from its nearest site that offers that type within the TTFT objective, every site
provisioned for its peak hour of the year on reserved capacity (the cheapest allowed term,
topped up on demand beyond the reserved cap; on demand every hour where nothing may be
reserved). The accelerator type is the one that makes this plan cheapest — the planner
tries each. It is costed with the same curves and the same arithmetic as the optimizer's
plans.

A type with which the hand-made plan cannot meet the objectives — a metro no site reaches
in time with it, or a site needing more nodes than it can have or more megawatts than it
has — is not an option; a workload with no option is one the baseline cannot serve, and
says why (`Baseline.cannot_serve`). Its cost is not a baseline's: it is never compared.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from optimizer.base.units import KW_PER_MW, Role
from optimizer.instance.build import NOMINAL, Instance
from optimizer.instance.pools import kappa
from optimizer.solve.commitments import split, tiers
from optimizer.solve.fleet import Solution, beyond_power, node_kw, nodes_for, procurement_table, replicas_for


@dataclass
class Baseline:
    solution: Solution  # the workloads it serves, merged
    gpu_by_workload: dict[str, str]
    cost_usd_by_workload: dict[str, float]  # each served workload's own nodes and egress; they add up to the total
    cannot_serve: dict[str, str]  # workload → why no accelerator type serves it by hand, in a planner's words
    total_cost_usd: float | None = None  # over the workloads it serves; None when it serves none


def _names(items) -> str:
    items = sorted(items)
    return ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")


def _assign(inst: Instance, k: str, gpu: str):
    """(metro → (site, tier), (site, tier) → pool): each metro's nearest site with a
    colocated pool on ``gpu`` in a tier it can use (its own or looser); else why not."""
    pools = {(p.site, p.tier): p for p in inst.pools
             if p.role == Role.COLOCATED and p.regime == NOMINAL and p.workload == k and p.gpu == gpu}
    if not pools:
        return f"no colocated replica on it meets {k}'s latency objectives"
    out = {}
    by_metro = defaultdict(list)
    for a in inst.arcs[NOMINAL]:
        if a.workload == k and (a.site, a.tier) in pools:
            by_metro[a.metro].append(a)
    metros = {m for (m, kk, _) in inst.demand if kk == k}
    far = [m for m in metros if not by_metro.get(m)]
    if far:
        return f"no site serves {_names(far)} colocated on it within {k}'s TTFT objective"
    for m in metros:
        a = min(by_metro[m], key=lambda a: (a.rtt_ms, a.tier))
        out[m] = (a.site, a.tier)
    return out, pools


def _beyond_the_sites(inst: Instance, gpu: str, peak_nodes: dict[str, int], why_at: dict[str, str]) -> str | None:
    """Why the sites cannot hold ``peak_nodes`` of ``gpu`` (supply caps or megawatts); each
    site's ``why_at`` says what its nodes are for."""
    for s, n in sorted(peak_nodes.items()):
        cap = inst.committed_max[(s, gpu)] * bool(inst.contracts[(s, gpu)].committed) + inst.ondemand_max[(s, gpu)]
        if n > cap:
            return f"it needs {n:,} nodes at {s} at the peak hour {why_at[s]}, beyond the {cap:,} the site can supply"
        kw = float(node_kw(inst, s, gpu, n))
        if beyond_power(inst, s, kw):
            return (f"its {n:,} nodes at {s} at the peak hour {why_at[s]} draw {kw / KW_PER_MW:,.1f} MW, beyond the site's "
                    f"{inst.power_kw[s] / KW_PER_MW:,.1f} MW")
    return None


def _plan_for(inst: Instance, k: str, gpu: str):
    """The hand-made plan of workload ``k`` on ``gpu`` (peak nodes, flows, replicas, routes),
    or why it cannot meet the objectives."""
    found = _assign(inst, k, gpu)
    if isinstance(found, str):
        return found
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
        n = replicas_for(pool, lam)
        flows[(pool.id, sid)] = lam
        replicas[(pool.id, sid)] = n
        peak_nodes[site] = max(peak_nodes[site], int(nodes_for(n * pool.gpus, inst.gpus_per_node[gpu])))
    why_at = {site: f"(for {_names(m for m, (ss, _) in assign.items() if ss == site)}: a colocated replica of "
                    f"{pools[(site, tier)].gpus} GPUs meeting {k}'s objectives carries "
                    f"{kappa(pools[(site, tier)], 1):.2g} requests/s)" for site, tier in tier_at.items()}
    return _beyond_the_sites(inst, gpu, peak_nodes, why_at) or (peak_nodes, flows, replicas, routes)


def baseline(inst: Instance) -> Baseline:
    """The hand-made plan of every workload some accelerator type serves by hand, and why
    each other workload cannot be."""
    parts, choice, cannot = {}, {}, {}
    for k in inst.workloads:
        best, why = None, []
        for g in inst.gpus:
            plan = _plan_for(inst, k, g)
            if isinstance(plan, str):
                why.append(f"on {g}, {plan}")
                continue
            nodes = plan[0]
            cost = sum(n * min((c.rate + c.energy for c in inst.contracts[(s, g)].committed.values()),
                               default=inst.contracts[(s, g)].ondemand) for s, n in nodes.items())
            if best is None or cost < best[0]:
                best = (cost, g, plan)
        if best is None:
            cannot[k] = "; ".join(why)
            continue
        _, g, (nodes, f, r, ro) = best
        choice[k] = g
        parts[k] = _solution_of(inst, g, nodes, f, r, ro)
    sol = _merged(list(parts.values()))
    by_workload = {k: float(procurement_table(inst, part)["cost_usd"].sum()) for k, part in parts.items()}
    total = float(procurement_table(inst, sol)["cost_usd"].sum()) if parts else None
    return Baseline(sol, choice, by_workload, cannot, total)


def _solution_of(inst: Instance, g: str, nodes: dict, flows: dict, replicas: dict, routes: dict) -> Solution:
    """One workload's part of the baseline: its peak nodes committed (the fleet's own first, then the cheapest term), up
    to the site's reserved cap, the rest on demand every hour."""
    committed, ondemand = {}, {}
    for s, n in nodes.items():
        layers = tiers(inst, s, g)
        reserved = min(n, sum(t.nodes for t in layers))
        committed.update({(s, g, term): k for term, k in split(layers, reserved).items()})
        if n > reserved:  # what cannot be reserved is rented on demand every hour
            for st in inst.states:
                if st.lost_site is None:
                    ondemand[(s, g, st.id)] = n - reserved
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
