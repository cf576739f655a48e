"""Decode pools of disaggregated serving: per (site, workload, accelerator), at the config's
operating batch (the largest whose p99 step meets the ITL objective), possibly with
speculative decoding. The decode pool may run on a different accelerator than the prefill
pool that feeds it (compute-rich prefill, bandwidth-rich decode); the KV transfer between
them is in every tier's TTFT budget (instance: hand-off).

Sets      D_t   decode pools present in state t
Variables z[p,t] ≥ 0   requests/s decoded by the pool
Balance   Σ_{prefill pools of (s,k)} y[·,t]  =  Σ_{decode pools of (s,k)} z[·,t]
Capacity  peak-to-mean · z ≤ n · r_d, r_d = ρ_max · b · E[tokens/step] / (osl · step)
          (Little's law on the b slots, with utilisation headroom ρ_max).
Registers gpu_load[(s, g, t)].
"""

from __future__ import annotations

import pyomo.environ as pyo

from formulations.pools import add_pool_flows


def add_to(build) -> None:
    build.terms.writes("decode_outflow", "gpu_load")
    model, inst, terms = build.model, build.inst, build.terms
    flow = add_pool_flows(build, "decode", "decode")
    for pid, sid in flow.index_set():
        p = inst.pools[pid]
        terms.decode_outflow[(p.site, p.workload, sid)].append(flow[pid, sid])
    inflow = terms.require("decode_inflow")
    keys = sorted(set(inflow) | set(terms.decode_outflow))
    model.decode_balance = pyo.Constraint(
        keys,
        rule=lambda m, s, k, t: pyo.quicksum(inflow.get((s, k, t), [])) == pyo.quicksum(terms.decode_outflow.get((s, k, t), [])),
    )
