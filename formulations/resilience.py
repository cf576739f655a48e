"""N−1 site-loss resilience at the peak slice.

With the policy on, the instance adds one contingency state per site ℓ: the peak slice's
demand with site ℓ gone and the TTFT objective relaxed by the policy factor (its own arcs,
tiers and pools). The other sites must absorb ℓ's traffic with the nodes they have then —
committed nodes plus the peak slice's on-demand nodes, because nodes cannot be rented in the
moment of a failure:
          o[s,g,(peak, ℓ)] = o[s,g,peak]     for every site s ≠ ℓ
Unserved demand in a contingency state is penalised as if it lasted a notional 1,000 hours,
so the plan buys the spare capacity unless no capacity could serve it.

Spot: with spot offered, the instance also adds one state per site whose spot zone is lost
(`State.lost_spot_site`): the peak slice with that site's spot nodes gone and the objectives
kept (nominal pools and arcs). The same rows tie every other node to the peak's, spot nodes at
the other sites included — the notice (0–120 s) is shorter than a cold start, so the pools
that ran on the lost spot nodes are carried by the spare replicas already running:
          o[s,g,(peak, spot ℓ)] = o[s,g,peak]   for every (s, g) but ℓ's spot accelerators
"""

from __future__ import annotations


def add_to(build) -> None:
    lp, inst = build.lp, build.inst
    if all(st.lost_site is None for st in inst.states):
        return
    peak = next(st.id for st in inst.states if st.slice == inst.peak_slice and st.lost_site is None)
    ondemand = lp.cols["ondemand"]
    for st in inst.states:
        if st.lost_site is None:
            continue
        for s, g in inst.site_gpus:
            if (s, g, st.id) in ondemand:
                lp.add_row("contingency_nodes", (s, g, st.id),
                           [(ondemand[(s, g, st.id)], 1.0), (ondemand[(s, g, peak)], -1.0)], 0.0, 0.0)
