"""Demand, routing and unserved demand.

Sets      A_t    arcs (metro m, site s, workload k, tier τ) usable in state t: only arcs
                 whose RTT puts the metro in a tier where the site has a pool, at most the
                 K nearest such sites per (m, k) (instance)
Columns   x[a,t] ≥ 0   requests/s routed along arc a;   u[m,k,t] ≥ 0   unserved requests/s
Balance   Σ_{a ∈ A_t(m,k)} x[a,t] + u[m,k,t] = λ[m,k,t]      (parameter demand_rps)
Cost      unserved: 3600 · h_t · π_k · u   (π_k = penalty $/M tokens × mean output tokens / 1e6;
                 h_t the slice's hours, or a large notional weight in a site-loss state)
          egress:   3600 · h_t · e_k · x   (e_k = $/GB × bytes per output token × output tokens)
Registers tier_inflow[(regime, s, k, τ, t)] += x.
"""

from __future__ import annotations

from formulations.linear import Param
from optimizer.units import SECONDS_PER_HOUR


def add_to(build) -> None:
    build.terms.writes("tier_inflow")
    lp, inst, terms = build.lp, build.inst, build.terms
    demand_of: dict = {}
    for m, k, t in sorted(inst.demand):
        demand_of.setdefault(t, []).append((m, k))
    arc_index, demand_index = [], []
    for st in inst.states:
        arc_index += [(a.metro, a.site, a.workload, a.tier, st.id) for a in inst.arcs_in(st)
                      if (a.metro, a.workload, st.slice) in inst.demand]
        demand_index += [(m, k, st.id) for m, k in demand_of.get(st.slice, [])]
    lp.param("demand_rps", {(m, k, sid): inst.demand[(m, k, inst.states[sid].slice)] for m, k, sid in demand_index})
    lp.param("penalty_usd_per_request", {(k,): v for k, v in inst.penalty_usd_per_request.items()})
    lp.param("egress_usd_per_request", {(k,): v for k, v in inst.egress_usd_per_request.items()})
    route = lp.add_cols("route", arc_index)
    rtt = {(a.metro, a.site): a.rtt_ms for st in inst.states for a in inst.arcs_in(st)}
    unserved = lp.add_cols("unserved", demand_index)
    arcs_of: dict = {}
    for key, col in route.items():
        metro, site, k, tier, sid = key
        arcs_of.setdefault((metro, k, sid), []).append((col, 1.0))
        terms.tier_inflow[(inst.states[sid].regime, site, k, tier, sid)].append((col, 1.0))
        hours = inst.states[sid].weight_hours
        if hours > 0:
            terms.add_cost("egress", col, Param("egress_usd_per_request", (k,), SECONDS_PER_HOUR * hours))
        if build.operating is not None and build.operating.tie_break_usd_per_gpu_hour > 0:
            terms.add_cost("tie_break", col, build.operating.tie_break_usd_per_gpu_hour * rtt[(metro, site)] / 1e3)
    for key, col in unserved.items():
        m, k, sid = key
        demand = Param("demand_rps", key)
        lp.add_row("demand_balance", key, arcs_of.get((m, k, sid), []) + [(col, 1.0)], demand, demand)
        terms.add_cost("unserved", col, Param("penalty_usd_per_request", (k,),
                                              SECONDS_PER_HOUR * inst.states[sid].penalty_hours))


def refresh(lp, inst) -> list:
    """New demand and per-request prices for a program of the same structure."""
    return [
        lp.set_params("demand_rps", {key: inst.demand[(key[0], key[1], inst.states[key[2]].slice)]
                                     for key in lp.params["demand_rps"]}),
        lp.set_params("penalty_usd_per_request", {(k,): v for k, v in inst.penalty_usd_per_request.items()}),
        lp.set_params("egress_usd_per_request", {(k,): v for k, v in inst.egress_usd_per_request.items()}),
    ]
