"""Prefill pools: replicas that only prefill, one per (site, workload, latency tier,
accelerator), sized for their tier's queueing budget.

Sets      P_t   prefill pools present in state t (a lost site's pools are absent)
Columns   y[p,t] ≥ 0   requests/s the pool takes (its queue is FIFO, Poisson arrivals)
Capacity  via `pools`: the SLO capacity f_p(n) — the largest λ whose p99 wait fits the
          pool's budget with n replicas (Erlang C, Allen–Cunneen) — applied to the
          peak-sized load peak-to-mean · y. Every request leaving a prefill pool continues to
          a decode pool of the same site and decode speed class (`decode`) — the class whose
          first step its queueing budget left room for.
Registers tier_outflow[(regime, s, k, tier, t)] += y; decode_inflow[(s, k, class, t)] += y;
          gpu_load[(s, g, t)].
"""

from __future__ import annotations

from formulations.pools import add_pool_flows


def add_to(build) -> None:
    build.terms.writes("tier_outflow", "decode_inflow", "gpu_load")
    inst, terms = build.inst, build.terms
    for (pid, sid), col in add_pool_flows(build, "prefill").items():
        p = inst.pools[pid]
        terms.tier_outflow[(p.regime, p.site, p.workload, p.tier, sid)].append((col, 1.0))
        terms.decode_inflow[(p.site, p.workload, p.speed, sid)].append((col, 1.0))
