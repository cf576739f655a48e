"""How the master problem prices a pool: GPUs per request/s of mean load, from a per-replica
capacity κ. The SLO capacity f(n) of a queueing pool is convex in n below its utilisation
cap — bigger pools carry more per replica — so no linear form of it is exact; the solve
prices pools at chosen sizes and moves the prices between solves (`steps`)."""

from __future__ import annotations

import numpy as np

from optimizer.base.units import HOURS_PER_YEAR, Role
from optimizer.instance.build import Instance, reach
from optimizer.instance.pools import kappa
from optimizer.solve.fleet import Solution, procurement_table, replicas_needed, unserved_penalty_usd
from optimizer.solve.settings import Candidate

UNPRICEABLE = 1e6  # GPUs per request/s of a pool that cannot serve at all


def plan_cost(inst: Instance, sol: Solution, proc=None) -> float:
    """What a whole plan costs, with the unserved-demand penalty (``proc``: its procurement
    table, where already made)."""
    proc = procurement_table(inst, sol) if proc is None else proc
    return float(proc["cost_usd"].sum()) + unserved_penalty_usd(inst, sol) + kv_cache_usd(inst, sol.flows)


def kv_cache_peaks(inst: Instance, flows: dict) -> dict[tuple[str, str, int], float]:
    """(site, workload, candidate cache) → its busiest slice's requests/s into the pools of
    that candidate (`formulations.kvcache`: the year's slices, not site-loss states); empty
    without KV-cache tiers."""
    if not inst.kv_usd_per_rps_hour:
        return {}
    per_state: dict = {}
    for (pid, sid), rps in flows.items():
        p = inst.pools[pid]
        if p.cache_option >= 0 and inst.states[sid].weight_hours > 0:
            key = (p.site, p.workload, p.cache_option)
            per_state[(key, sid)] = per_state.get((key, sid), 0.0) + rps
    peaks: dict = {}
    for (key, _), rps in sorted(per_state.items()):
        peaks[key] = max(peaks.get(key, 0.0), rps)
    return peaks


def kv_cache_usd(inst: Instance, flows: dict) -> float:
    """The tiers' $ for the horizon: hours · Σ $/h per peak request/s · peak (`kv_cache_peaks`)."""
    return float(sum(inst.horizon_hours * inst.kv_usd_per_rps_hour.get((k, o), 0.0) * rps
                     for (_, k, o), rps in kv_cache_peaks(inst, flows).items()))


def unserved_request_hours(inst: Instance, sol: Solution) -> float:
    """Requests/s left unserved × the hours of their states (site-loss states by their
    penalty's notional hours): what a plan fails to serve, compared before its cost."""
    hours = {st.id: st.penalty_hours for st in inst.states}
    return float(sum(hours[sid] * u for (_, _, sid), u in sol.unserved.items()))


def candidate(inst: Instance, sol: Solution) -> Candidate:
    """A whole plan as the steps compare it (`settings.Candidate`)."""
    proc = procurement_table(inst, sol)
    over_cap_t = 0.0 if inst.carbon_cap_t is None else max(float(proc["carbon_t"].sum()) - inst.carbon_cap_t, 0.0)
    return Candidate(plan_cost(inst, sol, proc), sol, unserved_request_hours(inst, sol), over_cap_t)


def at_sizes(inst: Instance, sizes: dict[tuple[int, int], int]) -> dict[tuple[int, int], float]:
    """GPUs per request/s of mean load at a pool size n̂: gpus · peak-to-mean / κ(n̂)."""
    out = {}
    for (pid, sid), n in sizes.items():
        pool = inst.pools[pid]
        per_replica = kappa(pool, n)
        out[(pid, sid)] = pool.gpus * pool.peak_to_mean / per_replica if per_replica > 0 else UNPRICEABLE
    return out


def pool_sizes(inst: Instance) -> tuple[dict, dict]:
    """(largest size N each (pool, state) could need, a first guess n̂) from reachable demand:
    N serves all of it, n̂ half of it (at least one replica each; `fleet.replicas_needed`)."""
    by_pool: dict = {}
    for key, lam in reach(inst).items():
        by_pool.setdefault(key[0], []).append((key, lam))
    largest, guess = {}, {}
    for pid, items in by_pool.items():
        pool = inst.pools[pid]
        keys = [key for key, _ in items]
        load = np.array([v for _, v in items])
        largest.update(zip(keys, np.maximum(replicas_needed(pool, load), 1).tolist()))
        guess.update(zip(keys, np.maximum(replicas_needed(pool, load / 2.0), 1).tolist()))
    return largest, guess


def size_choices(inst: Instance, largest: dict[tuple[int, int], int]) -> int:
    """Pool-size choices (binaries) the exact model would have: one per size up to the
    largest each queueing pool and state could need, within its capacity table."""
    return sum(min(n, len(inst.pools[key[0]].table)) for key, n in largest.items() if inst.pools[key[0]].table is not None)


def marginal(pool, n: int) -> float:
    """Requests/s the next replica adds to a pool of n: f(n+1) − f(n) for a queueing pool
    (growing with n — pooling), the decode capacity for decode, the smaller of the two for
    colocated."""
    if pool.table is None:
        return pool.decode_rps
    table = pool.table
    k = min(max(n, 0), len(table) - 1)
    step = float(table[k] - (table[k - 1] if k > 0 else 0.0))
    return min(step, pool.decode_rps) if pool.role == Role.COLOCATED else step


def packing(inst: Instance, sol: Solution) -> dict[tuple[str, str], float]:
    """Per (site, accelerator): GPU-hours bought over GPU-hours replicas use (≥ 1). A sliver
    of an accelerator type at a site still buys whole nodes; this is that fixed cost, spread."""
    weight = {st.id: st.weight_hours for st in inst.states}
    used: dict = {}
    for (pid, sid), n in sol.replicas.items():
        p = inst.pools[pid]
        used[(p.site, p.gpu)] = used.get((p.site, p.gpu), 0.0) + n * p.gpus * weight[sid]
    bought: dict = {}
    for (s, g, _), n in sol.committed.items():
        bought[(s, g)] = bought.get((s, g), 0.0) + n * HOURS_PER_YEAR * inst.gpus_per_node[g]
    for (s, g, sid), n in sol.ondemand.items():
        bought[(s, g)] = bought.get((s, g), 0.0) + n * weight[sid] * inst.gpus_per_node[g]
    return {key: max(1.0, bought.get(key, 0.0) / u) for key, u in used.items() if u > 0}


def tangents(inst: Instance, sol: Solution, current: dict) -> dict:
    """Linearise each pool's (concave) cost at the last plan's load: GPUs per request/s =
    gpus · peak-to-mean / (capacity of the next replica) — tangents of a concave cost lie
    above it, so a plan the linearised problem prefers costs no more (a descent); a pool left
    empty is priced at its first replica. Each is scaled by its (site, accelerator)'s node
    packing (`packing`), so slivers of whole nodes are priced at what they cost."""
    scale = packing(inst, sol)
    out = dict(current)
    for key in out:
        pool = inst.pools[key[0]]
        step = marginal(pool, sol.replicas.get(key, 0))
        out[key] = pool.gpus * pool.peak_to_mean / step * scale.get((pool.site, pool.gpu), 1.0) if step > 0 \
            else UNPRICEABLE
    return out
