"""What the plan's KV-cache tiers hold, cost and save, per workload and tier — as the plan
chose them among each workload's candidate caches (`formulations.kvcache`).

With candidate o holding c_{o,t} bytes per request/s at the peak in tier t
(`optimizer.instance.kvcache`), a site holds for workload k in tier t

    C_site = Σ_o c_{o,t} · λ̂_{site,k,o}   (GB; λ̂ the busiest state's requests/s into the
                                           site's pools of candidate o, `solve.pricing.kv_cache_peaks`)
    cache $/year = Σ_site C_site · p_t · 8,760 h
    prefill $/year saved = Σ_o h_{o,t} · N_{k,o} · v_k

h_{o,t} the candidate's hit share from tier t, N_{k,o} the requests a year its pools take
(flows × slice hours) and v_k the prefill $ one hit saves; a workload's hit rate is
Σ_o h_o · N_{k,o} / Σ_o N_{k,o}. A site whose C_site exceeds the tier's capacity is listed as
capped: its hit rate there is lower than planned (the candidates do not see a tier's room).
"""

from __future__ import annotations

from optimizer.base.units import HOURS_PER_YEAR, SECONDS_PER_HOUR
from optimizer.scenario.kvcache import resolved_tiers
from optimizer.solve.pricing import kv_cache_peaks


def served_requests(inst, flows: dict) -> dict[tuple[str, int], float]:
    """(workload, candidate) → requests a year its pools take in the plan's slices."""
    out: dict = {}
    for (pid, sid), rps in flows.items():
        p, hours = inst.pools[pid], inst.states[sid].weight_hours
        if p.cache_option >= 0 and hours > 0:
            key = (p.workload, p.cache_option)
            out[key] = out.get(key, 0.0) + rps * hours * SECONDS_PER_HOUR
    return out


def _tier_block(options, i: int, served: dict, peaks: dict, cap_gb: float, price: float) -> dict:
    """One tier's line of a workload: hit share, GB per site, $ held and prefill $ saved."""
    total = sum(served.values())
    at_site: dict = {}
    for (site, o), rps in peaks.items():
        at_site[site] = at_site.get(site, 0.0) + options[o].capacity_bytes_per_rps[i] * rps / 1e9
    return {"hit_rate": sum(options[o].hit_share[i] * n for o, n in served.items()) / total if total else 0.0,
            "capacity_gb_by_site": {x: round(v, 3) for x, v in sorted(at_site.items()) if v > 0},
            "capped_sites": [x for x, v in sorted(at_site.items()) if v > cap_gb + 1e-9],
            "read_ms": options[0].read_ms[i], "cache_usd": sum(at_site.values()) * 1e9 * price * HOURS_PER_YEAR,
            "prefill_usd_saved": sum(options[o].hit_share[i] * n * options[o].prefill_usd_per_hit
                                     for o, n in served.items())}


def kv_cache_summary(s, options: dict, inst, solution, total_cost_usd: float) -> dict:
    """The summary's ``kv_cache`` block, from the plan's flows (``solution.flows``)."""
    yearly, peaks = served_requests(inst, solution.flows), kv_cache_peaks(inst, solution.flows)
    caps = {t.id: t.capacity_gb for t in resolved_tiers(s.kv_cache)}
    workloads = {}
    for k, cands in sorted(options.items()):
        served = {o: n for (kk, o), n in yearly.items() if kk == k and n > 0}
        here = {(site, o): rps for (site, kk, o), rps in peaks.items() if kk == k and rps > 0}
        total = sum(served.values())
        first = cands[0]
        tiers = {t: _tier_block(cands, i, served, here, caps[t], first.usd_per_byte_hour[i])
                 for i, t in enumerate(first.tiers)}
        workloads[k] = {"hit_rate": sum(cands[o].hit_rate * n for o, n in served.items()) / total if total else 0.0,
                        "reuse_probability": first.reuse_probability, "cached_tokens": first.cached_tokens,
                        "ttft_added_ms": max((cands[o].ttft_added_ms for o in served), default=0.0),
                        "prefill_usd_per_hit": first.prefill_usd_per_hit,
                        "cache_usd": sum(t["cache_usd"] for t in tiers.values()),
                        "prefill_usd_saved": sum(t["prefill_usd_saved"] for t in tiers.values()),
                        "options": [{"option": o, "hit_rate": c.hit_rate, "ttft_added_ms": c.ttft_added_ms,
                                     "capacity_gb_per_rps": {t: b / 1e9 for t, b in zip(c.tiers, c.capacity_bytes_per_rps)},
                                     "usd_per_rps_hour": c.usd_per_rps_hour,
                                     "request_share": served.get(o, 0.0) / total if total else 0.0}
                                    for o, c in enumerate(cands)],
                        "tiers": tiers}
    cache_usd = sum(w["cache_usd"] for w in workloads.values())
    return {"sizing": "chosen by the plan among candidate caches", "cache_usd": cache_usd,
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
