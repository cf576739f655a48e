"""KV-cache tiers: which candidate cache each site's prefill serves with, a choice inside the
program.

Sets      O_k    the workload's candidate caches (`Instance.kv_usd_per_rps_hour`), each with
                 its own prefill and colocated pools (`Pool.cache_option`) fed by the same
                 tier balance, so the program splits a tier's requests among candidates
          P_sko  the prefill and colocated pools of candidate o of workload k at site s
Columns   peak[s,k,o] ≥ 0   requests/s of k at s served with candidate o in the busiest slice
Rows      Σ_{p ∈ P_sko} y[p,t] − peak[s,k,o] ≤ 0            every state t of the year's
          slices (weight_hours > 0; a site-loss state's extra traffic finds the cache the
          year's peak holds: its hit rate there is lower than its pools assume, not modelled)
Cost      kv_cache: horizon hours · Σ_tiers p_tier · c_{o,tier} · peak[s,k,o]
          (p_tier $/byte-hour, c_{o,tier} bytes per peak request/s: the capacity is held all
          year for the site's busiest slice).
A mix of candidates at a site is a partitioned cache (each part holds its share's prefixes):
it can be built, and it never hits more than one cache of the summed capacity (the hit rate
is concave there), so the program does not promise hits a cache could not give. In a
one-state program (a slice or an hour operated) that state's flow is priced as the peak:
dearer than the year's cache for an off-peak slice; a whole plan's cost counts its true peak
(`optimizer.solve.pricing.plan_cost`).
"""

from __future__ import annotations

from formulations.pools import ROLES


def add_to(build) -> None:
    lp, inst, terms = build.lp, build.inst, build.terms
    if not inst.kv_usd_per_rps_hour:
        return
    members: dict = {}
    for role in ROLES:
        for (pid, sid), col in lp.cols.get(f"{role}_flow", {}).items():
            p = inst.pools[pid]
            usd = inst.kv_usd_per_rps_hour.get((p.workload, p.cache_option), 0.0)
            if p.cache_option >= 0 and usd > 0 and inst.states[sid].weight_hours > 0:
                members.setdefault((p.site, p.workload, p.cache_option), {}).setdefault(sid, []).append(col)
    peak = lp.add_cols("kv_cache_peak", sorted(members))
    for key, col in peak.items():
        terms.add_cost("kv_cache", col, inst.horizon_hours * inst.kv_usd_per_rps_hour[key[1:]])
        for sid, cols in sorted(members[key].items()):
            lp.add_row("kv_cache_peak", (*key, sid), [(c, 1.0) for c in cols] + [(col, -1.0)], upper=0.0)
