"""From one plan to the next in a safe order, at one slice of the day.

Each pool's objective is met by the replicas of the plan whose routing is live: n_old before
the traffic moves, n_new after. So the steps are
  1. scale up:   every pool to max(n_old, n_new) — new pools start, growing pools grow, on
                 the capacity that arrives (the new plan's nodes; where a site needs more
                 GPUs than either plan holds during the move, the table says how many);
  2. switch:     routing moves to the new plan (its routing.csv) — every pool already holds
                 what both plans need;
  3. scale down: every pool to n_new — shrinking pools shrink and pools the new plan drops
                 stop, and capacity that leaves is released last.
At every step each pool holds at least what the live routing needs:
max(n_old, n_new) ≥ n_old before the switch and ≥ n_new after it, and n_new after step 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.commands.export.fleet import POOL_KEY, ExportedFleet, ServingPool, Slice

STEPS = ("scale-up", "switch-routing", "scale-down")


@dataclass
class Step:
    name: str
    routing: str  # the plan whose routing is live during the step: "old" | "new"
    replicas: dict[tuple, int]  # pool key → replicas once the step is done


def _at(fleet: ExportedFleet, t: Slice) -> dict[tuple, int]:
    return {p.key: p.replicas.get(t, 0) for p in fleet.pools}


def steps(old: ExportedFleet, new: ExportedFleet, t: Slice) -> list[Step]:
    if t not in old.slices:
        raise ScenarioError(f"slice {'/'.join(map(str, t))} of the new plan is not in the old plan's horizon",
                            Origin("--slice"))
    n_old, n_new = _at(old, t), _at(new, t)
    keys = sorted(set(n_old) | set(n_new))
    up = {k: max(n_old.get(k, 0), n_new.get(k, 0)) for k in keys}
    return [Step("scale-up", "old", up), Step("switch-routing", "new", dict(up)),
            Step("scale-down", "new", {k: n_new.get(k, 0) for k in keys})]


def table(old: ExportedFleet, new: ExportedFleet, t: Slice, plan: list[Step]) -> pd.DataFrame:
    """One row per step and pool that changes (the switch: one row), with the GPUs each
    (site, accelerator) then holds beside what the new plan buys there."""
    n_old = _at(old, t)
    gpus = {p.key: p.gpus for p in (*old.pools, *new.pools)}
    proc = new.procurement[new.procurement["gpu"] != "egress"]
    nodes = proc.groupby(["site", "gpu"])[["reserved_nodes", "ondemand_nodes_peak"]].sum().sum(axis=1)
    rows, before = [], n_old
    for i, step in enumerate(plan, 1):
        held: dict[tuple, int] = {}
        for k, n in step.replicas.items():
            held[(k[0], k[5])] = held.get((k[0], k[5]), 0) + n * gpus[k]
        if step.name == "switch-routing":
            rows.append({"step": i, "action": step.name, **{c: "" for c in POOL_KEY}, "replicas_from": "",
                         "replicas_to": "", "site_gpus_held": "", "site_gpus_bought": ""})
        for k in sorted(step.replicas):
            a, b = before.get(k, 0), step.replicas[k]
            if a != b:
                per_node = new.scenario.accelerators[k[5]].gpus_per_node if k[5] in new.scenario.accelerators else 0
                rows.append({"step": i, "action": step.name, **dict(zip(POOL_KEY, k)), "replicas_from": a,
                             "replicas_to": b, "site_gpus_held": held[(k[0], k[5])],
                             "site_gpus_bought": int(nodes.get((k[0], k[5]), 0)) * per_node})
        before = step.replicas
    return pd.DataFrame(rows)


def fleet_at(fleet_pools: list[ServingPool], replicas: dict[tuple, int], t: Slice) -> list[ServingPool]:
    """The pools of both plans with the replicas of one step in slice ``t`` (for its manifests)."""
    out, seen = [], set()
    for p in fleet_pools:
        if p.key in seen or p.key not in replicas:
            continue
        seen.add(p.key)
        out.append(ServingPool(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, "replicas": {t: replicas[p.key]}}))
    return out
