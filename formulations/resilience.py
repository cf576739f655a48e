"""N−1 site-loss resilience at the peak slice.

With the policy on, the instance adds one contingency state per site ℓ: the peak slice's
demand with site ℓ gone and the TTFT objective relaxed by the policy factor (its own arcs,
tiers and pools). The other sites must absorb ℓ's traffic with the nodes they have then —
committed nodes plus the peak slice's on-demand nodes, because nodes cannot be rented in the
moment of a failure:
          o[s,g,(peak, ℓ)] = o[s,g,peak]     for every site s ≠ ℓ
Unserved demand in a contingency state is penalised as if it lasted a notional 1,000 hours,
so the plan buys the spare capacity unless no capacity could serve it.
"""

from __future__ import annotations

import pyomo.environ as pyo


def add_to(build) -> None:
    model, inst = build.model, build.inst
    peak = next(st.id for st in inst.states if st.slice == inst.peak_slice and st.lost_site is None)
    index = [(s, g, st.id) for st in inst.states if st.lost_site is not None
             for s, g in inst.site_gpus if (s, g, st.id) in model.ondemand.index_set()]
    model.contingency_nodes = pyo.Constraint(
        index, rule=lambda m, s, g, t: m.ondemand[s, g, t] == m.ondemand[s, g, peak]
    )
