"""What a plan rents as spot, and what it keeps when a spot zone goes.

    spot share of GPU-hours = Σ_spot rows GPUs/node · spot node-hours / Σ_all rows GPUs/node ·
                              (committed nodes · hours of the year + on-demand node-hours)

and, per site offering spot, the requests/s its spot-loss state leaves unserved at the peak
(0 when the spare replicas carry the lost spot nodes' traffic).
"""

from __future__ import annotations

import pandas as pd

from optimizer.base.spot import base_gpu, is_spot
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.scenario.spot import spot_terms


def spot_summary(s, inst, sol, proc: pd.DataFrame) -> dict | None:
    """The summary's ``spot`` block; None where the scenario offers no spot."""
    terms = spot_terms(s)
    if not terms:
        return None
    rows = proc[proc["gpu"] != "egress"]
    per_node = rows["gpu"].map(inst.gpus_per_node)
    spot = rows["gpu"].map(is_spot).astype(bool)
    gpu_hours = per_node * (rows["reserved_nodes"] * HOURS_PER_YEAR + rows["ondemand_node_hours"])
    total = float(gpu_hours.sum())
    lost = {}
    for st in inst.states:
        site = st.lost_spot_site
        if site is not None:
            lost[site] = sum(u for (_, _, sid), u in sol.unserved.items() if sid == st.id)
    return {
        "gpu_hours_share": float(gpu_hours[spot].sum()) / total if total else 0.0,
        "cost_usd": float(rows.loc[spot, "cost_usd"].sum()),
        "nodes_peak": {g: int(n) for g, n in rows[spot].groupby("gpu")["ondemand_nodes_peak"].sum().items() if n},
        "terms": {g: {"discount_vs_ondemand": t.discount_vs_ondemand, "availability": t.availability,
                      "notice_s": t.notice_s} for g, t in sorted(terms.items())},
        "spot_loss_unserved_rps": lost,
        "hardware": sorted({base_gpu(g) for g in rows.loc[spot, "gpu"]}),
    }


def spot_line(spot: dict | None) -> list[str]:
    """The plan text's line on spot (none where spot is not offered)."""
    if not spot:
        return []
    worst = max(spot["spot_loss_unserved_rps"].values(), default=0.0)
    line = f"  spot {spot['gpu_hours_share']:.0%} of GPU-hours, ${spot['cost_usd']:,.0f}/year"
    line += "; a site's spot loss at the peak is carried by spare replicas" if worst <= 1e-6 else \
        f"; a site's spot loss leaves up to {worst:,.2f} requests/s unserved at the peak"
    return [line]
