"""Procurement: nodes committed for the horizon (reserved 1-year, reserved 3-year, owned) and
nodes rented on demand per state — variants of one contract, differing only in when they
are paid for and whether energy is in the price.

Sets      (s, g) offered site–accelerator pairs; terms T(s,g) the committed contracts priced
Variables c[s,g,term] ≥ 0   committed nodes (every hour of the year)
          o[s,g,t] ≥ 0        on-demand nodes in state t (paid for the slice's hours)
          Integer in exact mode. The master problem keeps them continuous: its plan is made
          whole afterwards (`optimizer.costing.commit`), where node integrality decomposes
          by (site, accelerator) and is solved exactly.
Supply    Σ_term c[s,g,term] ≤ reserved cap;   o[s,g,t] ≤ on-demand cap
Nodes     usable[s,g,t]  = Σ c + (1 − φ) · o    (φ: warm-pool share of on-demand nodes, kept
                                                 idle to absorb rises faster than a cold start)
          powered[s,g,t] = Σ c + o
Cost      reserved/owned: c · $/node-h · 8760;  owned energy: c_owned · node kW · PUE · $/MWh · 8760
          (cloud prices include energy; owned nodes pay it at full power — conservative);
          on-demand: Σ_t h_t · o[s,g,t] · $/node-h.
"""

from __future__ import annotations

import pyomo.environ as pyo

HOURS_PER_YEAR = 8760.0


def add_to(build) -> None:
    build.terms.writes("nodes_usable", "nodes_powered")
    model, inst, terms = build.model, build.inst, build.terms
    committed_index = [(s, g, term) for s, g in inst.site_gpus for term in sorted(inst.contracts[(s, g)].committed)]
    domain = pyo.NonNegativeIntegers if build.exact else pyo.NonNegativeReals
    model.committed = pyo.Var(committed_index, domain=domain)
    ondemand_index = [(s, g, st.id) for st in inst.states for s, g in inst.site_gpus
                      if s != st.lost_site and inst.ondemand_max[(s, g)] > 0]
    model.ondemand = pyo.Var(ondemand_index, domain=domain,
                             bounds=lambda m, s, g, t: (0, inst.ondemand_max[(s, g)]))
    terms_of: dict = {}
    for s, g, term in committed_index:
        terms_of.setdefault((s, g), []).append(term)
    model.committed_max = pyo.Param(sorted(terms_of), mutable=True, initialize=lambda m, s, g: inst.committed_max[(s, g)])
    model.committed_cap = pyo.Constraint(
        sorted(terms_of),
        rule=lambda m, s, g: pyo.quicksum(m.committed[s, g, term] for term in terms_of[(s, g)]) <= m.committed_max[s, g],
    )
    model.committed_usd_per_node_hour = pyo.Param(
        committed_index, mutable=True, initialize=lambda m, s, g, term: inst.contracts[(s, g)].committed[term])
    model.owned_energy_usd_per_node_hour = pyo.Param(
        inst.site_gpus, mutable=True, initialize=lambda m, s, g: inst.contracts[(s, g)].owned_energy)
    model.ondemand_usd_per_node_hour = pyo.Param(
        inst.site_gpus, mutable=True, initialize=lambda m, s, g: inst.contracts[(s, g)].ondemand)
    has_ondemand = set(ondemand_index)
    for st in inst.states:
        for s, g in inst.site_gpus:
            if s == st.lost_site:
                continue
            committed = [model.committed[s, g, term] for term in terms_of.get((s, g), [])]
            usable, powered = list(committed), list(committed)
            if (s, g, st.id) in has_ondemand:
                usable.append((1.0 - inst.warm_fraction) * model.ondemand[s, g, st.id])
                powered.append(model.ondemand[s, g, st.id])
            terms.nodes_usable[(s, g, st.id)].extend(usable)
            terms.nodes_powered[(s, g, st.id)].extend(powered)
    for s, g, term in committed_index:
        rate = model.committed_usd_per_node_hour[s, g, term]
        terms.add_cost("owned" if term == "owned" else "reserved", HOURS_PER_YEAR * rate * model.committed[s, g, term])
        if term == "owned":
            terms.add_cost("owned_energy", HOURS_PER_YEAR * model.owned_energy_usd_per_node_hour[s, g] * model.committed[s, g, term])
    weight = {st.id: st.weight_hours for st in inst.states}
    terms.add_cost("ondemand", pyo.quicksum(
        weight[t] * model.ondemand_usd_per_node_hour[s, g] * model.ondemand[s, g, t] for s, g, t in ondemand_index if weight[t] > 0))


def refresh(model, inst) -> None:
    """New prices and supply caps for a model of the same structure."""
    for (s, g, term) in model.committed_usd_per_node_hour:
        model.committed_usd_per_node_hour[s, g, term] = inst.contracts[(s, g)].committed[term]
    for (s, g) in inst.site_gpus:
        model.owned_energy_usd_per_node_hour[s, g] = inst.contracts[(s, g)].owned_energy
        model.ondemand_usd_per_node_hour[s, g] = inst.contracts[(s, g)].ondemand
    for (s, g) in model.committed_max:
        model.committed_max[s, g] = inst.committed_max[(s, g)]
    for (s, g, t) in model.ondemand:
        model.ondemand[s, g, t].setub(inst.ondemand_max[(s, g)])
