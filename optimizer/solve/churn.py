"""The churn limits (`optimizer.instance.churn`) in the solve: a whole plan's fleet read the
way the limits count it, the breaches that keep a plan from being kept (`steps.Context.offer`),
the budget shared out from the master's solution so that the whole-plan searches keep it
(`allot_from`), and the limits' shadow prices, the duals of their rows in the master LP."""

from __future__ import annotations

from dataclasses import replace

from formulations import Mode, churn
from optimizer.instance.build import Instance
from optimizer.instance.churn import allot
from optimizer.solve.fleet import Solution, committed_nodes

# what each row block limits, in the words of the summary
LIMITS = {"churn_growth": "growth", "churn_removal": "removal", "churn_budget": "budget"}


def fleet_of(inst: Instance, sol: Solution) -> tuple[dict, dict]:
    """(committed nodes, on-demand peak nodes) per (site, gpu) of a whole plan: the peak over
    the states that weigh hours, as procurement.csv's ondemand_nodes_peak."""
    weighted = {st.id for st in inst.states if st.weight_hours > 0}
    peak: dict = {}
    for (s, g, sid), n in sol.ondemand.items():
        if sid in weighted and n > peak.get((s, g), 0):
            peak[(s, g)] = int(n)
    return committed_nodes(sol), peak


def breaches(inst: Instance, sol: Solution) -> list[str]:
    """The churn limits a whole plan breaks (empty without limits)."""
    if inst.churn is None:
        return []
    return inst.churn.breaches(*fleet_of(inst, sol))


def allot_from(inst: Instance, lp, x) -> Instance:
    """``inst`` with the budget shared out per pair as the master's solution ``x`` used it
    (`optimizer.instance.churn.allot`); unchanged without a budget."""
    if inst.churn is None or inst.churn.max_changes is None:
        return inst
    return replace(inst, churn=allot(inst.churn, churn.wanted(lp, x)))


def unshared(inst: Instance) -> Instance:
    """``inst`` with its budget no longer shared out per pair (the limits themselves kept)."""
    return inst if inst.churn is None else replace(inst, churn=replace(inst.churn, allotted=None))


def shadow_prices(lp, row_dual) -> list[dict]:
    """The binding churn limits of a master LP with their shadow prices: $ of the year's plan
    per node the limit is loosened by (a pair's growth rows of every state together), as
    summary rows {limit, site, gpu, usd_per_node}; the budget's has no site."""
    totals: dict = {}
    for (block, key), usd in churn.shadow_prices(lp, row_dual).items():
        pair = tuple(key[:2]) if key else (None, None)
        totals[(LIMITS[block], *pair)] = totals.get((LIMITS[block], *pair), 0.0) + usd
    return [{"limit": limit, "site": site, "gpu": gpu, "usd_per_node": usd}
            for (limit, site, gpu), usd in totals.items()]


def master_shadow_prices(inst: Instance, gpus_per_rps: dict, cache_type, backend: str, threads) -> list[dict]:
    """The churn rows' shadow prices from a master LP solved for them alone (exact mode, which
    has no LP duals of its own): replicas continuous, priced at ``gpus_per_rps``."""
    cache = cache_type()
    cache.prepare(inst, Mode.plan_master(gpus_per_rps=gpus_per_rps), backend)
    out = cache.run(600.0, 1e-9, threads, "churn shadow prices")
    return [] if out.row_dual is None else shadow_prices(cache.lp, out.row_dual)
