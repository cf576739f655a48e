"""What the plan's KV-cache tiers hold, cost and save, per workload and tier.

With the tiers sized per request/s at the peak (`optimizer.instance.kvcache`), a site holds
for workload k in tier t

    C_site = c_t · λ̂_site            (GB; λ̂_site the site's busiest slice of k in the plan)
    cache $/year = Σ_site C_site · p_t · 8,760 h
    prefill $/year saved = h_t · N_k · v_k

h_t the tier's hit share, N_k the requests the plan serves in a year (routing × slice hours)
and v_k the prefill $ one hit saves. A site whose C_site exceeds the tier's capacity is
listed as capped: its hit rate there is lower than planned (the sizing does not see sites).
"""

from __future__ import annotations

import pandas as pd

from optimizer.base.units import HOURS_PER_YEAR, SECONDS_PER_HOUR
from optimizer.curves.kvtiers import capacity_gb
from optimizer.scenario.kvcache import resolved_tiers

SLICE_KEYS = ["period", "day_type", "hour"]


def _served(inst, routing: pd.DataFrame) -> tuple[dict, dict]:
    """(requests a year per workload, peak requests/s per (site, workload)) from the routing."""
    if routing.empty:
        return {}, {}
    hours = inst.slices.reset_index()[SLICE_KEYS + ["weight_hours"]]
    per_slice = routing.groupby(["site", "workload", *SLICE_KEYS])["requests_per_s"].sum().reset_index()
    per_slice = per_slice.merge(hours, on=SLICE_KEYS, how="left")
    per_slice["requests"] = per_slice["requests_per_s"] * per_slice["weight_hours"] * SECONDS_PER_HOUR
    yearly = per_slice.groupby("workload")["requests"].sum().to_dict()
    peak = per_slice.groupby(["site", "workload"])["requests_per_s"].max().to_dict()
    return yearly, peak


def _tier_block(sized, i: int, k: str, sites: dict, cap_gb: float, requests: float) -> dict:
    at_site = {site: capacity_gb(sized.capacity_bytes_per_rps[i], rps) for site, rps in sorted(sites.items())}
    cache_usd = sum(at_site.values()) * 1e9 * sized.usd_per_byte_hour[i] * HOURS_PER_YEAR
    return {"hit_rate": sized.hit_share[i], "capacity_gb_per_rps": sized.capacity_bytes_per_rps[i] / 1e9,
            "capacity_gb_by_site": {x: round(v, 3) for x, v in at_site.items() if v > 0},
            "capped_sites": [x for x, v in at_site.items() if v > cap_gb + 1e-9],
            "read_ms": sized.read_ms[i], "cache_usd": cache_usd,
            "prefill_usd_saved": sized.hit_share[i] * requests * sized.prefill_usd_per_hit}


def kv_cache_summary(s, sized: dict, inst, routing: pd.DataFrame, total_cost_usd: float) -> dict:
    """The summary's ``kv_cache`` block."""
    yearly, peak = _served(inst, routing)
    caps = {t.id: t.capacity_gb for t in resolved_tiers(s.kv_cache)}
    workloads = {}
    for k, w in sorted(sized.items()):
        sites = {site: rps for (site, kk), rps in peak.items() if kk == k and rps > 0}
        tiers = {t: _tier_block(w, i, k, sites, caps[t], yearly.get(k, 0.0)) for i, t in enumerate(w.tiers)}
        workloads[k] = {"hit_rate": w.hit_rate, "reuse_probability": w.reuse_probability,
                        "cached_tokens": w.cached_tokens, "ttft_added_ms": w.ttft_added_ms,
                        "prefill_usd_per_hit": w.prefill_usd_per_hit,
                        "cache_usd": sum(t["cache_usd"] for t in tiers.values()),
                        "prefill_usd_saved": sum(t["prefill_usd_saved"] for t in tiers.values()),
                        "tiers": tiers}
    cache_usd = sum(w["cache_usd"] for w in workloads.values())
    return {"sizing": "pre-solve grid per workload", "cache_usd": cache_usd,
            "prefill_usd_saved": sum(w["prefill_usd_saved"] for w in workloads.values()),
            "total_cost_with_cache_usd": total_cost_usd + cache_usd, "workloads": workloads}


def kv_cache_lines(kv: dict | None) -> list[str]:
    """The plan text's lines on the KV-cache tiers (none without them)."""
    if not kv:
        return []
    lines = [f"  KV cache: ${kv['cache_usd']:,.0f}/year of tiers, ${kv['prefill_usd_saved']:,.0f}/year of prefill "
             f"saved; with the tiers the plan costs ${kv['total_cost_with_cache_usd']:,.0f}/year"]
    for k, w in kv["workloads"].items():
        used = ", ".join(f"{t} {100 * b['hit_rate']:.0f} %" for t, b in w["tiers"].items() if b["hit_rate"] > 0)
        capped = sorted({x for b in w["tiers"].values() for x in b["capped_sites"]})
        lines.append(f"    {k:20s} hit {100 * w['hit_rate']:4.1f} % ({used or 'no tier'}), +{w['ttft_added_ms']:.1f} ms "
                     f"TTFT, cache ${w['cache_usd']:,.0f}, prefill saved ${w['prefill_usd_saved']:,.0f}"
                     + (f"; capped at {', '.join(capped)}" if capped else ""))
    return lines
