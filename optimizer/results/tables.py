"""The plan's tables: pools (replicas and load per pool and state), routing (requests/s per
arc and slice, with its round trip), slo (predicted p99s, `latency`) and curves (every
serving config used, with its curve figures); procurement and nodes (per slice: committed and
on-demand nodes, GPUs in replicas and usable, kW) come from `optimizer.solve.fleet`."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd

from optimizer.base.units import MS_PER_S, Regime
from optimizer.curves.queueing import wait_quantile_s
from optimizer.instance.build import Instance
from optimizer.results.latency import slo_table
from optimizer.scenario import Scenario
from optimizer.solve import SolveResult
from optimizer.solve.fleet import node_table, procurement_table


def slice_columns(inst: Instance) -> dict[int, dict]:
    """Per state id: its slice's period, day type and hour, and the site it has lost."""
    rows = {t: (r.period, r.day_type, int(r.hour)) for t, r in zip(inst.slices.index, inst.slices.itertuples())}
    return {st.id: dict(zip(("period", "day_type", "hour"), rows[st.slice]), lost_site=st.lost_site)
            for st in inst.states}


def _pool_waits_ms(s: Scenario, inst: Instance, sol) -> list[float]:
    """Each (pool, state)'s wait at its workload's required attainment (ms), one vectorised
    `wait_quantile_s` call; 0 for decode pools and empty ones."""
    rows = []
    for (pid, sid), n in sorted(sol.replicas.items()):
        p = inst.pools[pid]
        c = p.config
        batching = c.batching()
        queues = p.table is not None and n > 0
        rows.append((p.peak_to_mean * sol.flows.get((pid, sid), 0.0) if queues else 0.0, max(n, 1),
                     c.service_mean_s if queues else 1.0, c.service_scv, s.workloads[p.workload].slo_attainment,
                     batching.get("full_prompts", 1.0), batching.get("full_pass_s", c.service_mean_s or 1.0),
                     c.service_third_ratio))
    if not rows:
        return []
    a = np.array(rows, dtype=float).T
    return (wait_quantile_s(a[0], a[1], a[2], a[3], a[4], a[5], a[6], service_third_ratio=a[7]) * MS_PER_S).tolist()


def plan_tables(s: Scenario, inst: Instance, result: SolveResult, predictions: bool = True) -> dict[str, pd.DataFrame]:
    """The plan's tables; ``predictions`` False leaves out slo.csv (its predicted p99s are a
    tenth to a fifth of a run's time, and a sweep's row does not report them)."""
    sol = result.solution
    slice_of = slice_columns(inst)
    pools = []
    for ((pid, sid), n), wait_ms in zip(sorted(sol.replicas.items()), _pool_waits_ms(s, inst, sol)):
        p = inst.pools[pid]
        load = sol.flows.get((pid, sid), 0.0)
        pools.append({
            "site": p.site, "workload": p.workload, "tier": p.tier, "role": p.role, "speed": p.speed, "gpu": p.gpu,
            "config": p.config.id, "gpus_per_replica": p.gpus, **slice_of[sid],
            "replicas": n, "requests_per_s": load,
            "p99_wait_ms": wait_ms,
            "queue_budget_ms": p.queue_budget_ms if p.table is not None else None,
            **({"cache_option": p.cache_option, "cache_hit_rate": inst.kv_hit_rate.get((p.workload, p.cache_option), 0.0)}
               if inst.kv_hit_rate else {}),  # KV-cache tiers only: a plan without them keeps its columns
        })
    routing = []
    rtt = rtt_lookup(inst)
    for (m, site, k, tier, sid), x in sorted(sol.routes.items()):
        if inst.states[sid].lost_site is None:
            routing.append({"metro": m, "site": site, "workload": k, "tier": tier, **slice_of[sid],
                            "requests_per_s": x, "rtt_ms": rtt[(m, site)]})
    routing_df = pd.DataFrame(routing, columns=["metro", "site", "workload", "tier", "period", "day_type", "hour",
                                                "lost_site", "requests_per_s", "rtt_ms"]).drop(columns="lost_site")
    pools_df = pd.DataFrame(pools)
    nodes = node_table(inst, sol)
    nodes = pd.concat([pd.DataFrame([slice_of[sid] for sid in nodes.pop("state")], index=nodes.index)
                       .drop(columns="lost_site"), nodes], axis=1) if len(nodes) else nodes.drop(columns="state")
    tables = {"procurement": procurement_table(inst, sol), "nodes": nodes, "pools": pools_df, "routing": routing_df}
    if predictions:
        tables["slo"] = slo_table(s, inst, sol, pools_df)
    return {**tables, "curves": _curves_table(inst, sol)}


def rtt_lookup(inst: Instance) -> dict:
    return {(a.metro, a.site): a.rtt_ms for a in inst.arcs[Regime.NOMINAL]}


def _curves_table(inst: Instance, sol) -> pd.DataFrame:
    used = sorted({inst.pools[pid].config.id for (pid, _), n in sol.replicas.items() if n})
    configs = {p.config.id: p.config for p in inst.pools}
    rows = []
    for cid in used:
        c = asdict(configs[cid])
        c["service_mean_ms"] = c.pop("service_mean_s") * MS_PER_S
        c["nic_gb_s"] = c.pop("nic_bytes_per_s") / 1e9
        rows.append(c)
    frame = pd.DataFrame(rows)
    if frame.empty or not frame["expert_parallel"].any():  # only plans with expert-parallel configs carry them
        frame = frame.drop(columns=["expert_parallel", "fabric"], errors="ignore")
    return frame
