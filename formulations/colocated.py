"""Colocated pools: replicas that prefill in chunks inside their decode iterations, one per
(site, workload, latency tier, accelerator).

Sets      C_t   colocated pools present in state t
Columns   y[p,t] ≥ 0   requests/s the pool takes
Capacity  both sides of the replica bind: the prefill lane's SLO capacity f_p(n) (service
          time = ⌈prompt/chunk⌉ iterations, each slowed by the decode batch beside it) and
          the decode side's requests/s at its operating batch, whose iteration already
          includes the prefill chunk (the ITL interference of colocation). Master mode prices
          a replica at κ = min(f(n)/n, decode capacity).
Registers tier_outflow[(regime, s, k, tier, t)] += y; gpu_load[(s, g, t)].
"""

from __future__ import annotations

from formulations.pools import add_pool_flows


def add_to(build) -> None:
    build.terms.writes("tier_outflow", "gpu_load")
    inst, terms = build.inst, build.terms
    for (pid, sid), col in add_pool_flows(build, "colocated").items():
        p = inst.pools[pid]
        terms.tier_outflow[(p.regime, p.site, p.workload, p.tier, sid)].append((col, 1.0))
