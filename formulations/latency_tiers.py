"""Latency tiers as separate pools — no big-M, no binaries.

A metro reaches site s in the tier whose RTT bound is the smallest at or above RTT(m, s) —
or any looser tier, so near metros can share a pool with farther ones; each (site, workload,
tier) has its own pools, sized for the queueing budget left after that tier's worst RTT, the
overheads, the prefill of the p99 prompt and (disaggregated) the hand-off. A request routed
into a tier is therefore inside its TTFT objective whenever its pool keeps its queueing
promise.

Balance   Σ_{arcs into (s,k,τ)} x[·,t] = Σ_{prefill + colocated pools of (s,k,τ)} y[·,t]
          for every (regime, site s, workload k, tier τ, state t).
"""

from __future__ import annotations


def add_to(build) -> None:
    lp, terms = build.lp, build.terms
    inflow = terms.require("tier_inflow")
    outflow = terms.require("tier_outflow")
    for key in sorted(set(inflow) | set(outflow)):
        lp.add_row("tier_balance", key, inflow.get(key, []) + [(c, -v) for c, v in outflow.get(key, [])], 0.0, 0.0)
