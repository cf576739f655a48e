"""The operating table of a model on an accelerator — what `fleetplan curves` prints and
what a planner audits: per parallel degree, memory, concurrency ceiling, prefill time,
decode operating point under an ITL objective and the cost per million output tokens — the
decode-only figures and, beside them, the colocated ones (prefill of the prompts included)."""

from __future__ import annotations

import numpy as np

from optimizer.base.units import MS_PER_S
from optimizer.curves.batching import batching_knee, decode_operating_point
from optimizer.curves.economics import cost_per_million_tokens_usd
from optimizer.curves.expert_parallel import fabric
from optimizer.curves.memory import kv_budget_bytes, max_concurrency
from optimizer.curves.roofline import decode_step_time_s, prefill_time_s
from optimizer.curves.speculative import break_even_acceptance
from optimizer.scenario import Accelerator, Model, Serving, Workload
from optimizer.serving.configs import colocated_config, kv_bytes_per_token, make_replica, parallel_degrees
from optimizer.serving.experts import ep_degrees


def operating_table(
    model: Model,
    gpu: Accelerator,
    serving: Serving,
    isl: float,
    osl: float,
    itl_ms: float,
    usd_per_gpu_hour: float,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    ttft_ms: float | None = None,
) -> dict:
    """One row per parallel degree whose weights fit, then per expert-parallel degree where
    ``serving.expert_parallel`` offers them (``ep``; ``fabric``: what its collectives cross).
    Decode runs at the mean context (prompt + half the output) with KV reserved for
    prompt + output per slot."""
    probe = Workload(id="probe", model=model.id, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                     isl_mean_tokens=isl, isl_p99_tokens=isl, osl_mean_tokens=osl, osl_p99_tokens=osl,
                     ttft_p99_ms=ttft_ms or 1e6, itl_p99_ms=itl_ms, peak_requests_per_s_per_million_people=0)
    rows = []
    context = isl + osl / 2.0
    layouts = [(p, False) for p in parallel_degrees(model, gpu, serving)]
    for p, ep in layouts + [(p, True) for p in ep_degrees(model, gpu, serving)]:
        r = make_replica(model, gpu, serving, p, weight_dtype, kv_dtype, expert_parallel=ep)
        if r is None:
            raise ValueError(f"{gpu.id} has no {weight_dtype} support")
        if kv_budget_bytes(r) <= 0:
            continue
        b_max = int(max_concurrency(r, isl + osl))
        b, step = decode_operating_point(lambda bs: decode_step_time_s(r, bs, context), b_max,
                                         itl_ms / MS_PER_S, serving.itl_tail_factor)
        usd_per_hour = usd_per_gpu_hour * p
        tokens_per_s = b / step if b else 0.0
        knee = batching_knee(r, context, usd_per_hour, b_max)
        prefill_ms = float(prefill_time_s(r, isl)) * MS_PER_S
        row = {
            "tp": p,
            "ep": ep,
            "fabric": fabric(r) if p > 1 else "",
            "weights_gb_per_gpu": r.weight_bytes / p / 1e9,
            "kv_budget_gb": kv_budget_bytes(r) / 1e9,
            "max_concurrency": b_max,
            "prefill_ms": prefill_ms,
            "decode_batch": b,
            "decode_step_ms": step * MS_PER_S if b else None,
            "decode_tokens_per_s": tokens_per_s,
            "usd_per_million_output_tokens": float(cost_per_million_tokens_usd(usd_per_hour, tokens_per_s)) if b else None,
            "step_ms_at_batch_1": float(decode_step_time_s(r, 1, context)) * MS_PER_S,
            "knee_batch": knee.knee_batch,
            "floor_usd_per_million_output_tokens": knee.floor_usd_per_million_tokens,
            "speculative_break_even_acceptance": _nan_to_none(break_even_acceptance(
                r, max(b, 1), context, serving.speculative.draft_tokens, serving.speculative.draft_cost_ratio)),
        }
        row.update(colocated_point(probe, model, gpu, r, serving, usd_per_hour) if not ep else  # EP: decode only
                   {"colocated_tokens_per_s": None, "colocated_usd_per_million_output_tokens": None})
        if ttft_ms is not None:
            row["ttft_headroom_ms"] = ttft_ms - serving.fixed_overhead_ms - prefill_ms
        rows.append(row)
    return {
        "model": model.id,
        "gpu": gpu.id,
        "weight_dtype": weight_dtype,
        "kv_dtype": kv_dtype,
        "kv_bytes_per_token": kv_bytes_per_token(probe, model),
        "isl": isl,
        "osl": osl,
        "itl_ms": itl_ms,
        "usd_per_gpu_hour": usd_per_gpu_hour,
        "configs": rows,
    }


def colocated_point(w: Workload, model: Model, gpu: Accelerator, r, serving: Serving, usd_per_hour: float) -> dict:
    """Decode as a colocated replica sees it: it also prefills every request's prompt (in
    chunks inside its iterations), so it completes

        rps = min(ρ_max · b / (osl · iteration), 1 / S̄)     (decode side, prefill lane)

    requests/s and outputs rps · osl tokens/s — the best over the serving's chunk sizes, as the
    plan's colocated pools see it (`optimizer.serving.configs.colocated_at`); none where no
    batch meets the ITL objective."""
    best = None
    for chunk in serving.colocated_chunk_tokens:
        c = colocated_config(w, model, gpu, r, serving, chunk)
        if c is None:
            continue
        tokens = w.osl_mean_tokens * min(c.decode_rps, c.lane_rps())
        if best is None or tokens > best[0]:
            best = (tokens, c)
    if best is None:
        return {"colocated_tokens_per_s": None, "colocated_usd_per_million_output_tokens": None}
    tokens, c = best
    return {"colocated_tokens_per_s": tokens, "colocated_batch": c.batch, "colocated_chunk_tokens": c.chunk_tokens,
            "colocated_usd_per_million_output_tokens": float(cost_per_million_tokens_usd(usd_per_hour, tokens))}


def _nan_to_none(x):
    return None if x is None or not np.isfinite(x) else float(x)


def batch_sweep(model: Model, gpu: Accelerator, serving: Serving, tp: int, isl: float, osl: float,
                weight_dtype: str = "bf16", kv_dtype: str = "bf16") -> dict:
    """Decode step time and tokens/s for every batch up to the KV ceiling (for plots)."""
    r = make_replica(model, gpu, serving, tp, weight_dtype, kv_dtype)
    b_max = int(max_concurrency(r, isl + osl))
    batches = np.arange(1, max(b_max, 1) + 1)
    steps = decode_step_time_s(r, batches, isl + osl / 2.0)
    return {"batch": batches, "step_ms": steps * MS_PER_S, "tokens_per_s": batches / steps,
            "knee": batching_knee(r, isl + osl / 2.0, 1.0, b_max).knee_batch}
