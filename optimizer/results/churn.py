"""A plan against the fleet it moved from (`optimizer.instance.churn`): the node changes per
(site, accelerator), the budget used, any limit broken, and what each binding limit costs."""

from __future__ import annotations

from optimizer.instance.build import Instance
from optimizer.solve.churn import fleet_of
from optimizer.solve.fleet import Solution

SHADOW_METHOD = ("dual of the limit's rows in the master LP (continuous replicas): an estimate of the year's cost "
                 "saved per node the limit is loosened by, not a re-planned difference")


def churn_summary(inst: Instance, sol: Solution, shadow: list[dict]) -> dict:
    """summary.json's ``churn``: the limits, the previous and new nodes, the changes per pair
    and in all (Σ |c − c⁰| + on-demand peak beyond P⁰), breaches (empty for a kept plan), and
    the binding limits' shadow prices (``shadow``, $ per node)."""
    limits = inst.churn
    committed, peak = fleet_of(inst, sol)
    rows = []
    for (s, g), (added, removed, od_added) in limits.changes(committed, peak).items():
        rows.append({"site": s, "gpu": g, "previous_committed": int(limits.previous_committed.get((s, g), 0)),
                     "committed": int(committed.get((s, g), 0)),
                     "previous_ondemand_peak": int(limits.previous_ondemand.get((s, g), 0)),
                     "ondemand_peak": int(peak.get((s, g), 0)), "committed_added": added,
                     "committed_removed": removed, "ondemand_peak_added": od_added})
    return {
        "growth_factor": limits.growth_factor, "growth_nodes": limits.growth_nodes,
        "max_removed_nodes": limits.max_removed_nodes, "max_changes": limits.max_changes,
        "previous_nodes": sum(limits.previous_nodes(p) for p in set(limits.previous_committed) | set(limits.previous_ondemand)),
        "nodes": sum(committed.values()) + sum(peak.values()),
        "changes_used": limits.used(committed, peak),
        "changes": rows,
        "breaches": limits.breaches(committed, peak),
        "shadow_prices": shadow,
        "shadow_price_method": SHADOW_METHOD,
    }


def churn_lines(churn: dict | None) -> list[str]:
    """The text summary's lines: changes against the previous fleet, and each binding limit's price."""
    if not churn:
        return []
    limits = [f"{name} {churn[key]:g}" for key, name in (("growth_factor", "growth ×"), ("growth_nodes", "+"),
                                                           ("max_removed_nodes", "removals ≤"),
                                                           ("max_changes", "budget")) if churn[key] is not None]
    lines = [f"  from the previous fleet ({churn['previous_nodes']:,} nodes → {churn['nodes']:,}): "
             f"{churn['changes_used']:,} node changes" + (f"; limits: {', '.join(limits)}" if limits else "")]
    for row in churn["shadow_prices"]:
        where = f" at {row['site']}/{row['gpu']}" if row["site"] else ""
        lines.append(f"    {row['limit']} limit{where} binds: ~${row['usd_per_node']:,.0f}/year per node loosened "
                     "(master-LP dual, an estimate)")
    if churn["breaches"]:
        lines.append("  CHURN LIMIT BROKEN: " + "; ".join(churn["breaches"][:5]))
    return lines
