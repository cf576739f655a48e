"""Predicted latencies of a plan (slo.csv): per routed (metro, workload, site, tier), the p99
TTFT path and ITL of the pools it reaches, at the batch each pool settles at under its load."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from optimizer.budget import colocated_path, disaggregated_path
from optimizer.configs import make_replica
from optimizer.curves.queueing import wait_quantile_s
from optimizer.curves.roofline import decode_step_time_s, mixed_step_time_s
from optimizer.curves.speculative import speculative_step_time_s
from optimizer.instance import Instance
from optimizer.scenario import Scenario
from optimizer.units import MS_PER_S, Regime, Role


class Settled:
    """Where a pool really runs. Below capacity, continuous batching settles at the batch b*
    where b = λ_replica · (output tokens / tokens per step) · step(b) — smaller than the
    operating batch the pool was sized at, so steps (and colocated iterations, and with them
    the prefill lane) are faster than at full load. Predictions use b*; sizing does not."""

    def __init__(self, s: Scenario, inst: Instance):
        self.s, self.inst = s, inst
        self._steps: dict = {}

    def _step_table(self, c):
        if c.id not in self._steps:
            s = self.s
            w = s.workloads[c.workload]
            r = make_replica(s.models[w.model], s.accelerators[c.gpu], s.serving, c.gpus, w.weight_dtype, w.kv_dtype)
            b = np.arange(1, max(c.batch, 1) + 1, dtype=float)
            context = w.isl_mean_tokens + w.osl_mean_tokens / 2
            if c.role == Role.COLOCATED:
                steps = mixed_step_time_s(r, b, context, c.chunk_tokens, w.isl_mean_tokens / 2)
            elif c.speculative:
                spec = s.serving.speculative
                steps = speculative_step_time_s(r, b, context, spec.draft_tokens, spec.draft_cost_ratio)
            else:
                steps = decode_step_time_s(r, b, context)
            self._steps[c.id] = np.asarray(steps, dtype=float)
        return self._steps[c.id]

    def step_ms(self, pool, load_rps: float, replicas: int) -> float:
        """Step (iteration) time at the settled batch for this pool's load, in ms."""
        c = pool.config
        steps = self._step_table(c)
        if replicas <= 0 or load_rps <= 0:
            return float(steps[0]) * MS_PER_S
        per_replica = pool.peak_to_mean * load_rps / replicas
        in_flight = per_replica * self.s.workloads[c.workload].osl_mean_tokens / c.tokens_per_step * steps
        fits = in_flight <= np.arange(1, len(steps) + 1)
        settled = int(np.argmax(fits)) if fits.any() else len(steps) - 1
        return float(steps[settled]) * MS_PER_S


def slo_table(s: Scenario, inst: Instance, sol, pools_df: pd.DataFrame) -> pd.DataFrame:
    """Predicted p99 TTFT and ITL per (metro, workload, site, tier) routed in any nominal
    slice. A tier may hold a prefill and a colocated pool; each request takes one of them, so
    the prediction is the slowest path (`optimizer.budget`) of a pool that carries load, at its
    worst slice: the queue is the pool's p99 wait, the KV transfer the one the plan budgeted,
    the first token and the ITL from the decode pools (colocated: the iteration). Steps are
    read at the batch each pool settles at under its load (`Settled`)."""
    nominal = pools_df[pools_df["lost_site"].isna()] if len(pools_df) else pools_df
    configs = {p.config.id: p for p in inst.pools}
    settled = Settled(s, inst)
    tail = s.serving.itl_tail_factor
    rtt_of = {(a.metro, a.site): a.rtt_ms for a in inst.arcs[Regime.NOMINAL]}
    decode_step: dict = {}
    for row in nominal.itertuples():
        if row.role == Role.DECODE:
            key = (row.site, row.workload, row.speed, row.period, row.day_type, row.hour)
            decode_step[key] = max(decode_step.get(key, 0.0), settled.step_ms(configs[row.config], row.requests_per_s, row.replicas))
    worst: dict = {}  # (site, workload, tier) → (slowest path, worst ITL)
    for row in nominal.itertuples():
        if row.role == Role.DECODE or row.requests_per_s <= 0:
            continue
        pool = configs[row.config]
        c = pool.config
        if row.role == Role.PREFILL:
            step = decode_step.get((row.site, row.workload, row.speed, row.period, row.day_type, row.hour), 0.0)
            path = disaggregated_path(s, 0.0, row.p99_wait_ms, c.prefill_p99_ms,
                                      inst.transfer_ms.get((row.site, row.workload), 0.0), step)
        else:
            step = settled.step_ms(pool, row.requests_per_s, row.replicas)
            faster = step / c.step_ms  # the prefill lane moves with the iteration
            wait = float(wait_quantile_s(pool.peak_to_mean * row.requests_per_s, row.replicas, c.service_mean_s * faster,
                                         c.service_scv, s.workloads[row.workload].slo_attainment)) * MS_PER_S
            path = colocated_path(s, 0.0, wait, c.prefill_p99_ms * faster)
        key = (row.site, row.workload, row.tier)
        slowest, itl = worst.get(key, (None, 0.0))
        worst[key] = (path if slowest is None or path.total_ms > slowest.total_ms else slowest, max(itl, tail * step))
    rows = []
    seen = set()
    for (m, site, k, tier, sid), x in sorted(sol.routes.items()):
        if inst.states[sid].lost_site is not None or (m, k, site, tier) in seen or (site, k, tier) not in worst:
            continue
        seen.add((m, k, site, tier))
        w = s.workloads[k]
        pool_path, itl = worst[(site, k, tier)]
        path = replace(pool_path, network_ms=rtt_of[(m, site)])
        rows.append({
            "metro": m, "workload": k, "site": site, "tier": tier,
            "ttft_p99_ms_predicted": path.total_ms, "ttft_p99_ms_objective": w.ttft_p99_ms,
            "itl_p99_ms_predicted": itl, "itl_p99_ms_objective": w.itl_p99_ms,
            "network_ms": path.network_ms, "overhead_ms": path.overhead_ms, "queue_ms": path.queue_ms,
            "prefill_ms": path.prefill_ms, "transfer_ms": path.transfer_ms, "first_token_ms": path.first_token_ms,
            "mode": path.mode,
        })
    return pd.DataFrame(rows)
