"""What a plan does with the fleet it started from: per (site, accelerator) the nodes it has
(reserved and owned), the nodes the plan uses, what it leaves idle (reserved: sunk anyway) or
retires (owned: keeping them would cost more than they save), the contracts up for renewal,
and the rent already sunk in the year."""

from __future__ import annotations

import pandas as pd

from optimizer.base.contracts import TERM
from optimizer.instance.build import Instance
from optimizer.instance.fleet import fleet_year
from optimizer.scenario import Scenario


def fleet_summary(s: Scenario, inst: Instance, proc: pd.DataFrame) -> dict | None:
    """The existing fleet's part of the plan's summary (None when the plan starts from nothing)."""
    if not s.fleet.contracts:
        return None
    year = fleet_year(s)
    used = {(r.site, r.gpu): r for r in proc.itertuples() if r.site != "*"}
    rows = []
    for (site, gpu, term), have in sorted(inst.existing_nodes.items()):
        row = used.get((site, gpu))
        n = int(getattr(row, TERM[term].nodes_column)) if row is not None else 0
        rows.append({"site": site, "gpu": gpu, "term": term, "nodes": have, "used_nodes": n,
                     "idle_nodes" if TERM[term].id == "existing-reserved" else "retired_nodes": have - n})
    return {
        "start": s.horizon.start,
        "existing": rows,
        "up_for_renewal": year.lapsing,
        "sunk_usd": year.sunk_usd,
        "ondemand_quota": [{"site": site, "gpu": gpu, "nodes": n} for (site, gpu), n in sorted(year.ondemand_quota.items())],
    }


def fleet_lines(fleet: dict | None) -> list[str]:
    """The text summary's lines on the existing fleet."""
    if not fleet:
        return []
    lines = [f"  existing fleet at {fleet['start']}: rent already sunk in the year ${fleet['sunk_usd']:,.0f} (not in the "
             "plan's cost)"]
    for r in fleet["existing"]:
        rest = (f", {r['idle_nodes']} idle (sunk)" if "idle_nodes" in r else f", {r['retired_nodes']} retired") \
            if r["nodes"] != r["used_nodes"] else ""
        lines.append(f"    {r['site']}/{r['gpu']} {TERM[r['term']].label}: {r['nodes']} nodes, {r['used_nodes']} used{rest}")
    for r in fleet["up_for_renewal"]:
        lines.append(f"    {r['site']}/{r['gpu']}: {r['nodes']} reserved nodes end {r['end']}: up for renewal (the plan "
                     "signs new nodes where it needs them)")
    return lines
