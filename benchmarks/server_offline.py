"""Server-style against Offline throughput per GPU, as the plan's pools see it.

    python benchmarks/server_offline.py [--model llama-3.1-70b] [--osl 750]

For each accelerator (8-GPU node), prompt length and p99 ITL objective, prints output
tokens/s per GPU:

* Offline: no latency objective — a colocated replica at the largest batch its KV holds,
  prefilling every prompt in chunks (the best of 512 … 8,192 tokens) inside its iterations,
  min(b / iteration, osl / S̄) per replica (decode side, prefill lane), no utilisation cap;
* Server colocated: the plan's colocated config at the ITL objective (`configs.colocated_config`),
  in a pool of 16 replicas whose p99 TTFT (wait + the prompt's chunked prefill) meets the
  objective: osl · min(ρ_max · b / (osl · iteration), f(16)/16);
* Server disaggregated: the best prefill config (pool of 16 at the TTFT objective) feeding
  the best decode config at the ITL objective, GPUs of both counted;

and the Server/Offline ratio (best of the two Server figures) per row, then MI300X / H100
per GPU per ITL objective. The best parallel degree is taken for each figure.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from optimizer.base.units import MS_PER_S
from optimizer.curves.memory import kv_budget_bytes
from optimizer.curves.queueing import slo_capacity_rps
from optimizer.curves.tail import law, slack_table
from optimizer.scenario import Workload, load_scenario
from optimizer.serving.configs import (
    colocated_config,
    decode_config,
    make_replica,
    parallel_degrees,
    prefill_config,
)

GPUS = ("h100-sxm", "h200-sxm", "b200", "mi300x")
PROMPTS = (2000, 8000, 16000)
ITLS_MS = (20.0, 40.0, 50.0)
TTFT_MS = 2000.0
POOL = 16
OFFLINE_CHUNKS = (512, 1024, 2048, 4096, 8192)


def probe(model: str, isl: float, osl: float, itl_ms: float) -> Workload:
    return Workload(id="probe", model=model, weight_dtype="bf16", kv_dtype="bf16", isl_mean_tokens=isl,
                    isl_p99_tokens=isl, osl_mean_tokens=osl, osl_p99_tokens=osl, ttft_p99_ms=TTFT_MS,
                    itl_p99_ms=itl_ms, peak_requests_per_s_per_million_people=0)


def pool_rps(c, budget_s: float, s) -> float:
    """f(16)/16 of a queueing pool whose p99 wait + the config's own prompt time meets the budget."""
    alone = law([c.prefill_p99_ms / MS_PER_S])
    cap = slo_capacity_rps(POOL, c.service_mean_s, c.service_scv, slack_table(alone, [alone], budget_s),
                           s.serving.prefill_max_utilization, 0.99, *_batching(c))
    return float(cap[0]) / POOL


def _batching(c):
    kw = c.batching()
    return kw.get("full_prompts", 1.0), kw.get("full_pass_s", c.service_mean_s)


def replicas(s, model, gpu, tweak=None):
    """bf16 replicas at each parallel degree; ``tweak`` (name → factor) scales efficiency
    parameters of the accelerator's calibration row (the sensitivity table)."""
    for p in parallel_degrees(model, gpu, s.serving):
        r = make_replica(model, gpu, s.serving, p, "bf16", "bf16")
        if r is not None and tweak:
            r = dataclasses.replace(r, eff=dataclasses.replace(
                r.eff, **{k: getattr(r.eff, k) * v for k, v in tweak.items()}))
        if r is not None and kv_budget_bytes(r) > 0:
            yield r


def offline(s, model, gpu, isl, osl, tweak=None) -> float:
    w = probe(model.id, isl, osl, 60_000.0)
    best = 0.0
    for r in replicas(s, model, gpu, tweak):
        for chunk in OFFLINE_CHUNKS:
            c = colocated_config(w, model, gpu, r, s.serving, chunk)
            if c is not None:
                best = max(best, min(c.decode_tokens_per_s, osl * c.lane_rps()) / r.gpus)
    return best


def server(s, model, gpu, isl, osl, itl_ms, tweak=None) -> tuple[float, float]:
    """(colocated, disaggregated) output tokens/s per GPU."""
    w = probe(model.id, isl, osl, itl_ms)
    budget_s = (TTFT_MS - s.serving.fixed_overhead_ms) / MS_PER_S
    colo, prefill, decode = 0.0, [], []
    for r in replicas(s, model, gpu, tweak):
        for chunk in s.serving.colocated_chunk_tokens:
            c = colocated_config(w, model, gpu, r, s.serving, chunk)
            if c is not None:
                colo = max(colo, osl * min(c.decode_rps, pool_rps(c, budget_s, s)) / r.gpus)
        for b in [0, *s.serving.prefill_batch_tokens]:
            c = prefill_config(w, model, gpu, r, s.serving, batch_tokens=b)
            if c is not None:
                prefill.append(r.gpus / pool_rps(c, budget_s - 0.05, s) if pool_rps(c, budget_s - 0.05, s) > 0
                               else np.inf)
        c = decode_config(w, model, gpu, r, s.serving, speculative=False)
        if c is not None:
            decode.append(r.gpus / c.decode_rps)
    disagg = osl / (min(prefill) + min(decode)) if prefill and decode else 0.0
    return colo, disagg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--osl", type=float, default=750.0)
    args = ap.parse_args()
    s, _ = load_scenario()
    model = s.models[args.model] if args.model in s.models else None
    if model is None:
        raise SystemExit(f"{args.model}: not in the reference scenario's models")
    print(f"{args.model}, bf16, {args.osl:g}-token outputs, p99 TTFT {TTFT_MS:g} ms, pools of {POOL}; "
          "output tokens/s per GPU\n")
    print("| GPU | prompt | ITL ms | Offline | Server colocated | Server disaggregated | Server / Offline |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    per_gpu = {}
    for g in GPUS:
        gpu = s.accelerators[g]
        for isl in PROMPTS:
            off = offline(s, model, gpu, isl, args.osl)
            for itl in ITLS_MS:
                colo, disagg = server(s, model, gpu, isl, args.osl, itl)
                best = max(colo, disagg)
                per_gpu[g, isl, itl] = best
                print(f"| {g} | {isl:,} | {itl:g} | {off:,.0f} | {colo:,.0f} | {disagg:,.0f} | {best / off:.2f} |")
    print("\nMI300X / H100 per GPU (Server, best of colocated and disaggregated); the MI300X calibration row's "
          "per-layer overhead is fitted to a MI300X run at small batch (benchmarks/mi300x_small_batch.py), its decode "
          "MBU is H100's (assumed) — the columns after the first scale them on MI300X only\n")
    print("| prompt | ITL ms | as shipped | " + " | ".join(name for name, _ in SENSITIVITY) + " |")
    print("|---:|---:|---:|" + "---:|" * len(SENSITIVITY))
    mi300x = s.accelerators["mi300x"]
    for isl in PROMPTS:
        for itl in ITLS_MS:
            h = per_gpu["h100-sxm", isl, itl]
            cells = [per_gpu["mi300x", isl, itl]] + [max(server(s, model, mi300x, isl, args.osl, itl, tweak))
                                                     for _, tweak in SENSITIVITY]
            print(f"| {isl:,} | {itl:g} | " + " | ".join(f"{x / h:.2f}" if h else "–" for x in cells) + " |")


SENSITIVITY = [("decode MBU × 0.8", {"decode_mbu": 0.8}),
               ("layer overhead × 1.5", {"layer_overhead_s": 1.5}),
               ("both", {"decode_mbu": 0.8, "layer_overhead_s": 1.5})]


if __name__ == "__main__":
    main()
