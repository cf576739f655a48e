"""Procurement: nodes committed for the horizon (reserved 1-year, reserved 3-year, owned) and
nodes rented on demand per state (spot nodes among them, as accelerators of their own whose
price is the expected cost of a spot node-hour, `optimizer.scenario.spot`) — variants of one contract, differing only in when they
are paid for and whether energy is in the price.

Sets      (s, g) offered site–accelerator pairs (those of state t: `Instance.site_gpus_in`, not
          a lost site's nor a lost spot zone's); terms T(s,g) the committed contracts priced
Columns   c[s,g,term] ≥ 0   committed nodes (every hour of the year)
          o[s,g,t] ≥ 0      on-demand nodes in state t (paid for the slice's hours)
          Integer where the mode counts whole replicas. The master problem keeps them continuous: its plan is made
          whole afterwards (`optimizer.solve.commitments.commit`), where node integrality decomposes
          by (site, accelerator) and is solved exactly.
Supply    Σ_term c[s,g,term] ≤ reserved cap over the terms the plan signs; an existing
          fleet's term (`Instance.existing_nodes`) at most the nodes it has;   o[s,g,t] ≤ on-demand cap
Nodes     usable[s,g,t]  = Σ c + (1 − φ) · o    (φ: warm-pool share of on-demand nodes, kept
                                                 idle to absorb rises faster than a cold start)
          powered[s,g,t] = Σ c + o
Cost      committed: c · $/node-h · 8760 in the term's category (`optimizer.base.contracts`); a term
          whose price leaves energy out (owned) also pays c · node kW · PUE · $/MWh · 8760 as
          energy (at full power — conservative); on-demand: Σ_t h_t · o[s,g,t] · $/node-h.
Modes (`modes.Mode`): with the commitment fixed (operate-fixed), c is fixed at the plan's
nodes — on the (site, accelerator)'s first priced term — and costs nothing more; with the
commitment priced for one state (price-state: a Lagrangian multiplier μ[s,g] per node), c is
free up to its cap at μ, and an on-demand node may carry an extra price (the multipliers of
the ramps relaxed around the state).
"""

from __future__ import annotations

from formulations.linear import INF, Param


def add_to(build) -> None:
    build.terms.writes("nodes_usable", "nodes_powered")
    lp, inst, terms = build.lp, build.inst, build.terms
    committed_index = [(s, g, term) for s, g in inst.site_gpus for term in sorted(inst.contracts[(s, g)].committed)]
    lp.param("committed_usd_per_node_hour", {key: inst.contracts[key[:2]].committed[key[2]].rate for key in committed_index})
    lp.param("energy_usd_per_node_hour", {key: inst.contracts[key[:2]].committed[key[2]].energy for key in committed_index})
    lp.param("ondemand_usd_per_node_hour", {key: inst.contracts[key].ondemand for key in inst.site_gpus})
    lp.param("committed_max", {key: float(inst.committed_max[key]) for key in inst.site_gpus})
    lp.param("ondemand_max", {key: float(inst.ondemand_max[key]) for key in inst.site_gpus})
    mode = build.mode
    if mode.commitment_fixed:
        committed = lp.add_cols("committed", committed_index, lower=_fixed(inst, mode), upper=_fixed(inst, mode))
    else:  # the fleet's own nodes: at most what it has
        committed = lp.add_cols("committed", committed_index, upper=lambda key: inst.existing_nodes.get(key, INF),
                                integer=mode.integer_replicas)
    if mode.commitment_priced:
        lp.param("state_committed_usd", {key: float(mode.committed_usd.get(key, 0.0)) for key in inst.site_gpus})
    if mode.ondemand_surcharged:
        lp.param("state_ondemand_extra_usd", {key: float(mode.ondemand_extra_usd.get(key, 0.0))
                                              for key in inst.site_gpus})
    ondemand_index = [(s, g, st.id) for st in inst.states for s, g in inst.site_gpus_in(st)
                      if inst.ondemand_max[(s, g)] > 0]
    ondemand = lp.add_cols("ondemand", ondemand_index, upper=lambda key: Param("ondemand_max", key[:2]),
                           integer=mode.integer_replicas)
    terms_of: dict = {}
    signed_of: dict = {}
    for (s, g, term), col in committed.items():
        terms_of.setdefault((s, g), []).append(col)
        if (s, g, term) not in inst.existing_nodes:
            signed_of.setdefault((s, g), []).append((col, 1.0))
        if mode.commitment_priced:
            terms.add_cost("reserved", col, Param("state_committed_usd", (s, g)))
        if not mode.commitment_planned:
            continue
        contract = inst.contracts[(s, g)].committed[term]
        terms.add_cost(contract.category, col, Param("committed_usd_per_node_hour", (s, g, term), inst.horizon_hours))
        if contract.energy:
            terms.add_cost("energy", col, Param("energy_usd_per_node_hour", (s, g, term), inst.horizon_hours))
    for key, signed in sorted(signed_of.items()):
        lp.add_row("committed_cap", key, signed, upper=Param("committed_max", key))
    for st in inst.states:
        for s, g in inst.site_gpus_in(st):
            cols = terms_of.get((s, g), [])
            usable = [(c, 1.0) for c in cols]
            powered = list(usable)
            col = ondemand.get((s, g, st.id))
            if col is not None:
                usable.append((col, 1.0 - inst.warm_fraction))
                powered.append((col, 1.0))
            terms.nodes_usable[(s, g, st.id)].extend(usable)
            terms.nodes_powered[(s, g, st.id)].extend(powered)
    for (s, g, sid), col in ondemand.items():
        hours = inst.states[sid].weight_hours
        if hours > 0:
            terms.add_cost("ondemand", col, Param("ondemand_usd_per_node_hour", (s, g), hours))
        if mode.ondemand_surcharged:
            terms.add_cost("ramp", col, Param("state_ondemand_extra_usd", (s, g)))


def _fixed(inst, mode):
    """Bound of a committed column with the commitment fixed: the plan's nodes on the first
    priced term."""
    def bound(key):
        s, g, term = key
        first = sorted(inst.contracts[(s, g)].committed)[0]
        return float(mode.committed.get((s, g), 0)) if term == first else 0.0
    return bound


def refresh(lp, inst) -> list:
    """New prices and supply caps for a program of the same structure."""
    committed = lp.params["committed_usd_per_node_hour"]
    return [
        lp.set_params("committed_usd_per_node_hour", {key: inst.contracts[key[:2]].committed[key[2]].rate
                                                      for key in committed}),
        lp.set_params("energy_usd_per_node_hour", {key: inst.contracts[key[:2]].committed[key[2]].energy
                                                   for key in committed}),
        lp.set_params("ondemand_usd_per_node_hour", {key: inst.contracts[key].ondemand for key in inst.site_gpus}),
        lp.set_params("committed_max", {key: float(inst.committed_max[key]) for key in inst.site_gpus}),
        lp.set_params("ondemand_max", {key: float(inst.ondemand_max[key]) for key in inst.site_gpus}),
    ]
