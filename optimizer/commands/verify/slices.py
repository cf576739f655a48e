"""The plan's groups `verify` simulates: the slices chosen (`select_slices`: each period's
peak, all, or a list), and per slice each (site, workload) with its routes and pools
(`plan_groups`)."""

from __future__ import annotations

import pandas as pd

from optimizer.base.errors import Origin, ScenarioError, shorten
from optimizer.commands.verify.group import Group, GroupPool, Route

SLICE = ["period", "day_type", "hour"]


def nominal_pools(pools: pd.DataFrame) -> pd.DataFrame:
    """The pools of the plan's fleet: not the rows of a lost site (a contingency)."""
    if "lost_site" in pools:
        return pools[pools["lost_site"].isna() | (pools["lost_site"].astype(str) == "")]
    return pools


def select_slices(routing: pd.DataFrame, slices) -> list[tuple[str, str, int]]:
    """"peak": per period, the (day type, hour) with the most requests/s routed; "all"; or
    a list of "PERIOD/DAYTYPE/HOUR"."""
    load = routing.groupby(["period", "day_type", "hour"], sort=True)["requests_per_s"].sum()
    if isinstance(slices, str) and slices == "peak":
        periods = load.index.get_level_values(0)
        return [tuple(load[periods == p].idxmax()) for p in periods.unique()]
    if isinstance(slices, str) and slices == "all":
        return list(load.index)
    if isinstance(slices, str):
        slices = [slices]
    out = []
    known = set(load.index)
    for text in slices:
        parts = str(text).split("/")
        if len(parts) != 3 or not parts[2].strip().isdigit():
            raise ScenarioError(f"a slice is PERIOD/DAYTYPE/HOUR, e.g. Q1/all/20; got {shorten(repr(text))}",
                                Origin("--slices"))
        key = (parts[0], parts[1], int(parts[2]))
        if key not in known:
            raise ScenarioError(f"slice {shorten(repr(text))} carries no routed load in this plan; known: "
                                + ", ".join(f"{p}/{d}/{h}" for p, d, h in sorted(known)[:8])
                                + (" …" if len(known) > 8 else ""), Origin("--slices"))
        out.append(key)
    return out


def state_pools(pools: pd.DataFrame, state: str) -> pd.DataFrame:
    """The pools of a contingency state (``lost_site``, e.g. "spot@ashburn"), or an error
    naming the states the plan has."""
    lost = pools["lost_site"].fillna("").astype(str) if "lost_site" in pools else pd.Series("", index=pools.index)
    rows = pools[lost == state]
    if rows.empty:
        known = sorted(x for x in lost.unique() if x)
        raise ScenarioError(f"the plan has no contingency state {shorten(repr(state))}; known: "
                            + (", ".join(known) or "none"), Origin("--spot-loss"))
    return rows


def state_routing(routing: pd.DataFrame, pools: pd.DataFrame, tier_rtt_ms: list[float]) -> pd.DataFrame:
    """The routes of a contingency state at its slice, which the plan does not write: the
    slice's routes scaled, per (site, workload, tier), to the flow the state's prefill and
    colocated pools carry there; a (site, workload, tier) that carries flow only in the state
    gets one route at its tier's RTT bound (the worst a moved request may see)."""
    carried = pools[pools["role"] != "decode"].groupby(["site", "workload", "tier", *SLICE])["requests_per_s"].sum()
    key = ["site", "workload", "tier", *SLICE]
    routes = dict(tuple(routing.groupby(key)))
    out = []
    for k, rps in carried.items():
        if rps <= 0:
            continue
        rows = routes.get(k)
        total = float(rows["requests_per_s"].sum()) if rows is not None else 0.0
        if total > 0:
            out.append(rows.assign(requests_per_s=rows["requests_per_s"] * rps / total))
        else:
            site, workload, tier, period, day_type, hour = k
            out.append(pd.DataFrame([{"metro": "(moved)", "site": site, "workload": workload, "tier": tier,
                                      "period": period, "day_type": day_type, "hour": hour, "requests_per_s": rps,
                                      "rtt_ms": float(tier_rtt_ms[int(tier)])}]))
    return pd.concat(out, ignore_index=True) if out else routing.iloc[:0]



def _int(v) -> int:
    """A sparse integer column's value (empty: -1, as written without tiers)."""
    return -1 if pd.isna(v) else int(v)


def _float(v) -> float:
    return 0.0 if pd.isna(v) else float(v)


def plan_groups(tables: dict[str, pd.DataFrame], slices, state: str | None = None,
                tier_rtt_ms: list[float] | None = None) -> list[Group]:
    """The (site, workload, slice) groups of the plan folder's ``tables`` at ``slices``
    (`select_slices`); with ``state``, the contingency state's pools at its slice instead
    (`state_routing`)."""
    routing = tables["routing"]
    pools = nominal_pools(tables["pools"])
    chosen = None
    if state is not None:
        pools = state_pools(tables["pools"], state)
        routing = state_routing(routing, pools, tier_rtt_ms or [])
        chosen = sorted({(p, d, int(h)) for p, d, h in pools[SLICE].itertuples(index=False)})
    groups = []
    for period, day_type, hour in chosen or select_slices(routing, slices):
        r = routing[(routing["period"] == period) & (routing["day_type"] == day_type) & (routing["hour"] == hour)]
        p = pools[(pools["period"] == period) & (pools["day_type"] == day_type) & (pools["hour"] == hour)]
        for (site, k), rows in r.groupby(["site", "workload"], sort=True):
            routes = tuple(Route(x.metro, int(x.tier), float(x.requests_per_s), float(x.rtt_ms))
                           for x in rows.itertuples() if x.requests_per_s > 0)
            here = p[(p["site"] == site) & (p["workload"] == k)]
            group_pools = tuple(GroupPool(x.role, int(x.tier), x.config, int(round(x.replicas)), float(x.requests_per_s),
                                     int(getattr(x, "speed", -1)), _int(getattr(x, "cache_option", -1)),
                                     _float(getattr(x, "cache_hit_rate", 0.0)))
                                for x in here.sort_values(["role", "tier", "config"]).itertuples())
            if routes:
                groups.append(Group(site, k, period, day_type, int(hour), routes, group_pools))
    return groups
