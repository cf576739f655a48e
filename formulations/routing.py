"""Demand, routing and unserved demand.

Sets      A_t    arcs (metro m, site s, workload k, tier τ) usable in state t: only arcs
                 whose RTT puts the metro in a tier where the site has a pool, at most the
                 K nearest such sites per (m, k) (instance)
Variables x[a,t] ≥ 0   requests/s routed along arc a;   u[m,k,t] ≥ 0   unserved requests/s
Balance   Σ_{a ∈ A_t(m,k)} x[a,t] + u[m,k,t] = λ[m,k,t]      (mean requests/s of the slice)
Cost      unserved: 3600 · h_t · π_k · u   (π_k = penalty $/M tokens × mean output tokens / 1e6;
                 h_t the slice's hours, or a large notional weight in a site-loss state)
          egress:   3600 · h_t · e_k · x   (e_k = $/GB × bytes per output token × output tokens)
Registers tier_inflow[(regime, s, k, τ, t)] += x.
"""

from __future__ import annotations

import pyomo.environ as pyo


def add_to(build) -> None:
    build.terms.writes("tier_inflow")
    model, inst, terms = build.model, build.inst, build.terms
    arc_index, demand_index = [], []
    arcs_of: dict = {}
    demand_of: dict = {}
    for m, k, t in sorted(inst.demand):
        demand_of.setdefault(t, []).append((m, k))
    for st in inst.states:
        for a in inst.arcs_in(st):
            if (a.metro, a.workload, st.slice) in inst.demand:
                arc_index.append((a.metro, a.site, a.workload, a.tier, st.id))
                arcs_of.setdefault((a.metro, a.workload, st.id), []).append(len(arc_index) - 1)
        demand_index.extend((m, k, st.id) for m, k in demand_of.get(st.slice, []))
    model.route = pyo.Var(arc_index, domain=pyo.NonNegativeReals)
    model.unserved = pyo.Var(demand_index, domain=pyo.NonNegativeReals)
    state = {st.id: st for st in inst.states}
    model.demand_rps = pyo.Param(demand_index, mutable=True, initialize=lambda m, metro, k, sid: inst.demand[(metro, k, state[sid].slice)])
    model.penalty_usd_per_request = pyo.Param(inst.workloads, mutable=True, initialize=inst.penalty_usd_per_request)
    model.egress_usd_per_request = pyo.Param(inst.workloads, mutable=True, initialize=inst.egress_usd_per_request)

    def balance(m, metro, k, sid):
        routed = pyo.quicksum(model.route[arc_index[i]] for i in arcs_of.get((metro, k, sid), []))
        return routed + model.unserved[metro, k, sid] == m.demand_rps[metro, k, sid]

    model.demand_balance = pyo.Constraint(demand_index, rule=balance)
    regime = {st.id: st.regime for st in inst.states}
    for key in arc_index:
        metro, site, k, tier, sid = key
        terms.tier_inflow[(regime[sid], site, k, tier, sid)].append(model.route[key])
    terms.add_cost("unserved", pyo.quicksum(
        3600.0 * state[sid].penalty_hours * model.penalty_usd_per_request[k] * model.unserved[m, k, sid]
        for m, k, sid in demand_index))
    terms.add_cost("egress", pyo.quicksum(
        3600.0 * state[key[4]].weight_hours * model.egress_usd_per_request[key[2]] * model.route[key]
        for key in arc_index if state[key[4]].weight_hours > 0))


def refresh(model, inst) -> None:
    """New demand and per-request prices for a model of the same structure."""
    state = {st.id: st for st in inst.states}
    for (metro, k, sid) in model.demand_rps:
        model.demand_rps[metro, k, sid] = inst.demand[(metro, k, state[sid].slice)]
    for k in inst.workloads:
        model.penalty_usd_per_request[k] = inst.penalty_usd_per_request[k]
        model.egress_usd_per_request[k] = inst.egress_usd_per_request[k]
