"""Autoscaler bounds from the plan: for every pool and slice, the fewest replicas the plan's
committed capacity carries (floor) and the most the capacity of its busiest hour allows
(ceiling).

For a site s and accelerator g (procurement.csv; G GPUs per node):
  C = reserved_nodes · G                            committed GPUs (reserved and owned nodes)
  P = (reserved_nodes + ondemand_nodes_peak) · G    GPUs of the plan's busiest hour there
  U_t = Σ_p n_p,t · g_p                             GPUs the plan's pools use in slice t
and for a pool p of g_p GPUs per replica with n_p,t replicas in slice t:
  floor_p,t   = ⌊ n_p,t · min(1, C / U_t) ⌋   its share of the committed GPUs
  ceiling_p,t = ⌊ n_p,t · P / U_t ⌋           its share of the busiest hour's GPUs
(both 0 where U_t = 0). So floor ≤ n ≤ ceiling (the plan never uses more than P:
`optimizer.folder.read` checks it), Σ_p floor·g_p ≤ C and Σ_p ceiling·g_p ≤ P: an autoscaler
kept inside the bounds never releases what is committed and never rents past the on-demand
nodes the plan budgets at its peak. A pool the plan does not run in a slice has 0 and 0.
"""

from __future__ import annotations

import pandas as pd

from optimizer.commands.export.fleet import POOL_KEY, ExportedFleet

COLUMNS = (*POOL_KEY, "period", "day_type", "hour", "replicas", "floor", "ceiling")


def bounds_table(fleet: ExportedFleet) -> pd.DataFrame:
    """One row per pool and slice of the horizon: replicas, floor and ceiling."""
    proc = fleet.procurement[fleet.procurement["gpu"] != "egress"]
    nodes = proc.groupby(["site", "gpu"])[["reserved_nodes", "ondemand_nodes_peak"]].sum()
    used: dict[tuple, int] = {}
    for p in fleet.pools:
        for t, n in p.replicas.items():
            used[(p.site, p.gpu, t)] = used.get((p.site, p.gpu, t), 0) + n * p.gpus
    rows = []
    for p in fleet.pools:
        per_node = fleet.scenario.accelerators[p.gpu].gpus_per_node
        reserved, peak = (int(v) for v in nodes.loc[(p.site, p.gpu)]) if (p.site, p.gpu) in nodes.index else (0, 0)
        committed, busiest = reserved * per_node, (reserved + peak) * per_node
        for t in fleet.slices:
            n = p.replicas.get(t, 0)
            u = used.get((p.site, p.gpu, t), 0)
            floor = n * min(u, committed) // u if u else 0
            ceiling = n * busiest // u if u else 0
            rows.append((*p.key, *t, n, floor, ceiling))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def bounds_at(table: pd.DataFrame, t) -> dict[tuple, tuple[int, int]]:
    """Pool key → (floor, ceiling) in slice ``t``."""
    at = table[(table["period"] == t[0]) & (table["day_type"] == t[1]) & (table["hour"] == t[2])]
    return {tuple(r[k] for k in POOL_KEY): (int(r["floor"]), int(r["ceiling"])) for _, r in at.iterrows()}
