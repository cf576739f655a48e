"""Carbon: the tonnes the fleet's power emits, priced and capped.

Sets      (s, g, t) where the instance knows the site's grid and the state weighs hours
Tonnes    E = Σ_(s,g,t) h_t · kg[s,g,slice(t)] / 1000 · powered[s,g,t]
          kg[s,g,slice] = node kW_g · PUE_s · grid gCO2eq/kWh of s at the slice's hour / 1000
          (`Instance.carbon_kg_per_node_hour`), powered nodes as `procurement` counts them
          (committed nodes draw power every hour, on-demand nodes the hours they are rented)
Cost      carbon: price $/t · E (only where the scenario prices carbon)
Cap       E ≤ cap t (modes that plan the commitment: a year's cap does not split into the
          one-state programs, whose commitment is decided elsewhere)
"""

from __future__ import annotations

from formulations.linear import Param


def tonnes_per_column(build) -> dict[int, float]:
    """Column → tonnes a unit of it emits over the horizon (summed over the states it powers)."""
    inst = build.inst
    out: dict[int, float] = {}
    for (s, g, t), items in build.terms.require("nodes_powered").items():
        st = inst.states[t]
        kg = inst.carbon_kg_per_node_hour.get((s, g, st.slice))
        if kg is None or st.weight_hours <= 0:
            continue
        for col, v in items:
            out[col] = out.get(col, 0.0) + st.weight_hours * kg * v / inst.kg_per_tonne
    return out


def add_to(build) -> None:
    lp, inst, terms = build.lp, build.inst, build.terms
    priced = inst.carbon_usd_per_t > 0
    capped = inst.carbon_cap_t is not None and build.mode.commitment_planned
    if not (priced or capped):
        return
    tonnes = tonnes_per_column(build)
    if priced:
        lp.param("carbon_usd_per_t", {(): inst.carbon_usd_per_t})
        for col, t in sorted(tonnes.items()):
            terms.add_cost("carbon", col, Param("carbon_usd_per_t", (), t))
    if capped:
        lp.param("carbon_cap_t", {(): inst.carbon_cap_t})
        lp.add_row("carbon_cap", (), sorted(tonnes.items()), upper=Param("carbon_cap_t", ()))


def refresh(lp, inst) -> list:
    """A new carbon price or cap for a program of the same structure."""
    changes = []
    if "carbon_usd_per_t" in lp.params:
        changes.append(lp.set_params("carbon_usd_per_t", {(): inst.carbon_usd_per_t}))
    if "carbon_cap_t" in lp.params:
        changes.append(lp.set_params("carbon_cap_t", {(): inst.carbon_cap_t}))
    return changes
