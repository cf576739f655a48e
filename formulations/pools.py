"""Shared machinery of the replica pools (prefill, colocated, decode): the flow column of
each (pool, state) and how its replicas are counted.

Priced replicas (plan-master, operate-fixed):
              GPUs(p, t) = gpus_per_rps[p,t] · y[p,t], a parameter the solve loop sets to
              gpus · peak-to-mean_k / κ[p,t] (κ: requests/s per replica it prices the pool at;
              peak-to-mean_k the intra-hour peak factor of the pool's workload).
Chord capacity (plan-chord, price-state):
              replicas n[p,t] ∈ ℤ≥0 with peak-to-mean · y ≤ n · f(N)/N, N the largest size the
              pool could need: a relaxation of the pool-size choice (f is convex with f(0) = 0, so it lies
              below its chord) that sees whole replicas but not pool sizes, for bounds.
Pool-size choice (plan-exact, operate-fixed on whole replicas):
              replicas n[p,t] ∈ ℤ≥0 and, where the pool queues (prefill, colocated), a
              choice δ[p,t,j] ∈ {0,1} of the pool size j ≤ L (L the capacity table's length)
              and e[p,t] ∈ ℤ≥0 replicas beyond it (only after δ_L: e ≤ (N − L)·δ_L), with
              n = Σ_j j·δ_j + e,   Σ_j δ_j ≤ 1,   peak-to-mean · y ≤ Σ_j f(j)·δ_j + e·f(L)/L
              — f(n) exactly on the integers (f is convex below its utilisation cap, so no
              single linear form of it would be; beyond the table f grows at f(L)/L per
              replica); decode sides add peak-to-mean · y ≤ r_d · n.
"""

from __future__ import annotations

from formulations.linear import Param

# The roles a pool can have (the instance's `Pool.role`), in the order plans read their blocks;
# each names its blocks (`{role}_flow`, `{role}_replicas`, …).
ROLES = ("prefill", "decode", "colocated")
DECODING_ROLES = ("decode", "colocated")  # pools that hold decode slots



def per_replica(table, n: int) -> float:
    """f(n)/n, read at the table's end beyond it (f extends at its last per-replica capacity)."""
    n = min(n, len(table))
    return float(table[n - 1]) / n


def pool_states(inst, role: str, open_pools=None) -> list[tuple[int, int]]:
    """(pool id, state id) pairs of a role, in a deterministic order (only ``open_pools``
    where given)."""
    return [(p.id, st.id) for st in inst.states for p in inst.pools_in(st, role)
            if open_pools is None or p.id in open_pools]


def add_pool_flows(build, role: str) -> dict:
    """Flow columns y[p,t] ≥ 0 (requests/s into the pool) and their GPU load; returns the
    column of each (pool, state). Where the mode tie-breaks (operate-fixed), a flow also pays
    the tie-break per GPU it occupies (`modes.Mode`)."""
    lp, inst, terms, mode = build.lp, build.inst, build.terms, build.mode
    index = pool_states(inst, role, mode.open_pools)
    flow = lp.add_cols(f"{role}_flow", index)
    if not mode.integer_replicas:
        for key, col in flow.items():
            p = inst.pools[key[0]]
            terms.gpu_load[(p.site, p.gpu, key[1])].append((col, Param("gpus_per_rps", key)))
            if mode.tie_breaks:
                terms.add_cost("tie_break", col, Param("gpus_per_rps", key, mode.tie_break_usd_per_gpu_hour))
        return flow
    replicas = lp.add_cols(f"{role}_replicas", index, integer=True)
    for key, col in flow.items():
        p = inst.pools[key[0]]
        ptm = p.peak_to_mean
        n = replicas[key]
        terms.gpu_load[(p.site, p.gpu, key[1])].append((n, float(p.gpus)))
        if p.table is not None and mode.chord_capacity:
            # a relaxation: f(n) ≤ n · f(N)/N for n ≤ N (f convex, f(0) = 0) — whole replicas, the
            # per-replica capacity of the largest pool the state could need
            top = mode.max_replicas[key]
            lp.col_upper[n] = float(top)
            lp.add_row(f"{role}_slo", key, [(col, ptm), (n, -per_replica(p.table, top))], upper=0.0)
        elif p.table is not None:
            top = mode.max_replicas[key]
            sizes = range(1, min(top, len(p.table)) + 1)
            choose = lp.add_cols(f"{role}_size", [(*key, j) for j in sizes], upper=1.0, integer=True)
            size_sum = [(n, 1.0)] + [(choose[(*key, j)], -float(j)) for j in sizes]
            slo = [(col, ptm)] + [(choose[(*key, j)], -float(p.table[j - 1])) for j in sizes]
            if top > len(p.table):  # beyond the table f grows at its last per-replica capacity
                extra = lp.add_cols(f"{role}_size_extra", [key], upper=float(top - len(p.table)), integer=True)[key]
                lp.add_row(f"{role}_size_extra_after_table", key,
                           [(extra, 1.0), (choose[(*key, len(p.table))], -float(top - len(p.table)))], upper=0.0)
                size_sum.append((extra, -1.0))
                slo.append((extra, -per_replica(p.table, len(p.table))))
            lp.add_row(f"{role}_size_sum", key, size_sum, 0.0, 0.0)
            lp.add_row(f"{role}_size_one", key, [(choose[(*key, j)], 1.0) for j in sizes], upper=1.0)
            lp.add_row(f"{role}_slo", key, slo, upper=0.0)
        if role in DECODING_ROLES:
            lp.add_row(f"{role}_decode_slots", key, [(col, ptm), (n, -p.decode_rps)], upper=0.0)
    return flow
