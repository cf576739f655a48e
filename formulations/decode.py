"""Decode pools of disaggregated serving: per (site, workload, accelerator), at the config's
operating batch (the largest whose p99 step meets the ITL objective), possibly with
speculative decoding. The decode pool may run on a different accelerator than the prefill
pool that feeds it (compute-rich prefill, bandwidth-rich decode); the KV transfer between
them is in every tier's TTFT budget (instance: hand-off).

Sets      D_t   decode pools present in state t, per (site, workload, accelerator, speed
          class h): class h runs at the largest batch whose p99 step meets a share of the ITL
          objective (`Serving.decode_speeds`) — a faster class costs GPUs but its shorter first
          step leaves TTFT budget for prefill queueing
Columns   z[p,t] ≥ 0   requests/s decoded by the pool
Balance   Σ_{prefill pools of (s,k,h)} y[·,t]  =  Σ_{decode pools of (s,k,h)} z[·,t]
Capacity  peak-to-mean · z ≤ n · r_d, r_d = ρ_max · b · E[tokens/step] / (osl · step)
          (Little's law on the b slots, with utilisation headroom ρ_max).
Registers gpu_load[(s, g, t)].
"""

from __future__ import annotations

from formulations.pools import add_pool_flows


def add_to(build) -> None:
    build.terms.writes("decode_outflow", "gpu_load")
    lp, inst, terms = build.lp, build.inst, build.terms
    for (pid, sid), col in add_pool_flows(build, "decode").items():
        p = inst.pools[pid]
        terms.decode_outflow[(p.site, p.workload, p.speed, sid)].append((col, 1.0))
    inflow = terms.require("decode_inflow")
    for key in sorted(set(inflow) | set(terms.decode_outflow)):
        lp.add_row("decode_balance", key, inflow.get(key, []) + [(c, -v) for c, v in terms.decode_outflow.get(key, [])],
                   0.0, 0.0)
