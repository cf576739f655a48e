"""Shared machinery of the replica pools (prefill, colocated, decode): the flow variable of
each (pool, state) and how its replicas are counted.

Master mode:  replicas(p, t) = y[p,t] · κ⁻¹ — the GPUs per request/s come from the mutable
parameter ``gpus_per_rps[p,t]`` = gpus · peak-to-mean / κ[p,t].
Exact mode:   replicas n[p,t] ∈ ℤ≥0 and, where the pool queues (prefill, colocated), a
choice δ[p,t,j] ∈ {0,1} of the pool size j with
              n = Σ_j j·δ_j,   Σ_j δ_j ≤ 1,   peak-to-mean · y ≤ Σ_j f(j)·δ_j
which is f(n) exactly on the integers (f is convex, so no linear form of it would be).
"""

from __future__ import annotations

import pyomo.environ as pyo


def pool_states(build, role: str) -> list[tuple[int, int]]:
    """(pool id, state id) pairs of a role, in a deterministic order."""
    inst = build.inst
    return [(p.id, st.id) for st in inst.states for p in inst.pools_in(st, role)]


def add_pool_flows(build, role: str, name: str):
    """Flow variable y[p,t] ≥ 0 (requests/s into the pool) and its GPU load."""
    model, inst, terms = build.model, build.inst, build.terms
    index = pool_states(build, role)
    flow = pyo.Var(index, domain=pyo.NonNegativeReals)
    model.add_component(f"{name}_flow", flow)
    if not build.exact:
        for pid, sid in index:
            p = inst.pools[pid]
            terms.gpu_load[(p.site, p.gpu, sid)].append(model.gpus_per_rps[pid, sid] * flow[pid, sid])
        return flow
    queued = role != "decode"
    replicas = pyo.Var(index, domain=pyo.NonNegativeIntegers)
    model.add_component(f"{name}_replicas", replicas)
    ptm = inst.peak_to_mean
    sizes = [(pid, sid, j) for pid, sid in index for j in range(1, build.max_replicas[(pid, sid)] + 1)] if queued else []
    choose = pyo.Var(sizes, domain=pyo.Binary)
    model.add_component(f"{name}_size", choose)
    by_pool: dict = {}
    for pid, sid, j in sizes:
        by_pool.setdefault((pid, sid), []).append(j)
    cons = pyo.ConstraintList()
    model.add_component(f"{name}_exact", cons)
    for pid, sid in index:
        p = inst.pools[pid]
        terms.gpu_load[(p.site, p.gpu, sid)].append(p.gpus * replicas[pid, sid])
        if queued:
            js = by_pool.get((pid, sid), [])
            cons.add(replicas[pid, sid] == sum(j * choose[pid, sid, j] for j in js))
            cons.add(sum(choose[pid, sid, j] for j in js) <= 1)
            cons.add(ptm * flow[pid, sid] <= sum(float(p.table[j - 1]) * choose[pid, sid, j] for j in js))
        if role in ("decode", "colocated"):
            cons.add(ptm * flow[pid, sid] <= p.decode_rps * replicas[pid, sid])
    return flow
