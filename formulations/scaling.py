"""On-demand ramps: reactive scaling cannot meet a rise faster than a cold start.

Within each day cycle (period × day type, hours in order, wrapping at midnight), nodes added
at hour t must be started a cold start earlier and are paid for while they boot:
Columns   v[s,g,t] ≥ 0   nodes started for slice t
          v[s,g,t] ≥ o[s,g,t] − o[s,g,prev(t)]
Cost      d_t · (cold-start hours) · $/node-h · v   — d_t the days the slice's hour recurs
          (a rise is paid once a day; a slice standing for several hours of each day weighs
          more hours than days).
The warm pool (a share φ of on-demand nodes kept idle for faster-than-cold-start rises) is
in `procurement`'s usable-node count.
"""

from __future__ import annotations

from formulations.linear import Param


def add_to(build) -> None:
    lp, inst, terms = build.lp, build.inst, build.terms
    if inst.cold_start_hours <= 0:
        return
    nominal = {st.slice: st.id for st in inst.states if st.lost_site is None}
    prev = {}
    for _, group in inst.slices.groupby(["period", "day_type"], sort=False):
        order = [t for t in group.sort_values("hour").index if t in nominal]  # a view may hold fewer states
        for i, t in enumerate(order):
            prev[nominal[t]] = nominal[order[i - 1]]
    ondemand = lp.cols["ondemand"]
    # a cycle of one hour repeats itself: nothing rises, and its row would name one column twice
    index = [key for key in ondemand if key[2] in prev and prev[key[2]] != key[2]]
    ramp = lp.add_cols("ramp", index)
    for (s, g, t), col in ramp.items():
        lp.add_row("ramp_up", (s, g, t), [(col, 1.0), (ondemand[(s, g, t)], -1.0), (ondemand[(s, g, prev[t])], 1.0)],
                   lower=0.0)
        days = inst.states[t].days
        terms.add_cost("ramp", col, Param("ondemand_usd_per_node_hour", (s, g), days * inst.cold_start_hours))
