"""On-demand ramps: reactive scaling cannot meet a rise faster than a cold start.

Within each day cycle (period × day type, hours in order, wrapping at midnight), nodes added
at hour t must be started a cold start earlier and are paid for while they boot:
Variables v[s,g,t] ≥ 0   nodes started for slice t
          v[s,g,t] ≥ o[s,g,t] − o[s,g,prev(t)]
Cost      h_t/1 · (cold-start hours) · $/node-h · v   — h_t counts the days the ramp repeats
          (a slice's weight is its hour on each of its days).
The warm pool (a share φ of on-demand nodes kept idle for faster-than-cold-start rises) is
in `procurement`'s usable-node count.
"""

from __future__ import annotations

import pyomo.environ as pyo


def add_to(build) -> None:
    model, inst, terms = build.model, build.inst, build.terms
    if inst.cold_start_hours <= 0:
        return
    slices = inst.slices
    nominal = {st.slice: st.id for st in inst.states if st.lost_site is None}
    prev = {}
    for (period, day), group in slices.groupby(["period", "day_type"], sort=False):
        order = group.sort_values("hour").index.tolist()
        for i, t in enumerate(order):
            prev[nominal[t]] = nominal[order[i - 1]]
    index = [key for key in model.ondemand.index_set() if key[2] in prev]
    model.ramp = pyo.Var(index, domain=pyo.NonNegativeReals)
    model.ramp_up = pyo.Constraint(
        index, rule=lambda m, s, g, t: m.ramp[s, g, t] >= m.ondemand[s, g, t] - m.ondemand[s, g, prev[t]]
    )
    weight = {st.id: st.weight_hours for st in inst.states}
    terms.add_cost("ramp", pyo.quicksum(
        weight[t] * inst.cold_start_hours * model.ondemand_usd_per_node_hour[s, g] * model.ramp[s, g, t] for s, g, t in index))
