"""Decode operating point under an ITL objective, the batching knee and the price floor
(curves 5–6)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.base.units import SECONDS_PER_HOUR
from optimizer.curves.roofline import decode_step_parts, decode_step_time_s
from optimizer.curves.shapes import Replica


def operating_batch(step_time_s, itl_objective_s: float, tail_factor: float) -> int:
    """Largest batch b (1-based position in ``step_time_s``, the step time at b = 1, 2, …,
    b_max) whose p99 inter-token gap tail·step(b) meets the ITL objective; 0 if even b = 1
    misses. Step time grows with b, so the feasible batches are a prefix."""
    ok = tail_factor * np.asarray(step_time_s) <= itl_objective_s
    return int(np.count_nonzero(np.logical_and.accumulate(ok)))


def decode_operating_point(step_of, max_batch: int, itl_objective_s: float, tail_factor: float) -> tuple[int, float]:
    """(b, step seconds) at the largest batch b ≤ b_max whose p99 gap tail·step(b) meets the
    ITL objective, or (0, nan) where none (curve 6). ``step_of(batches)`` gives the step (or
    iteration) time in seconds: a plain decode step, a speculative verify + draft, or a
    colocated iteration with a prefill chunk beside it."""
    if max_batch < 1:
        return 0, float("nan")
    steps = np.asarray(step_of(np.arange(1, max_batch + 1, dtype=float)))
    b = operating_batch(steps, itl_objective_s, tail_factor)
    if b == 0:
        return 0, float("nan")
    return b, float(steps[b - 1])


def colocated_balance_batch(osl_tokens: float, chunks_per_prompt: float, decode_utilization: float,
                            prefill_utilization: float) -> int:
    """The batch k at which a colocated replica's decode side and prefill lane complete
    requests at the same rate, both carried by the same iterations of length T(b):

        decode:  ρ_d · b / (osl · T(b))        prefill lane:  ρ_p / (n_c · T(b))

    (n_c chunks per prompt, one per iteration). Below k the decode side limits and a larger
    batch gains; beyond it the lane limits and a larger batch only lengthens T(b), so the
    replica completes fewer requests. k = ⌈ρ_p · osl / (ρ_d · n_c)⌉, at least 1.
    Hand check: osl 750, n_c 32 (16k prompts in 512-token chunks), ρ_d = ρ_p → k = 24."""
    ratio = prefill_utilization * osl_tokens / (decode_utilization * max(chunks_per_prompt, 1e-9))
    return max(int(np.ceil(ratio - 1e-9)), 1)


@dataclass(frozen=True)
class Knee:
    """Where batching stops paying.

    ``ridge_batch`` is the batch where the step's memory time equals its compute time (the
    roofline ridge); ``knee_batch`` is that ridge capped by the KV ceiling b_max — beyond it
    tokens/s flattens (compute-bound) or cannot grow (out of KV memory).
    ``floor_usd_per_million_tokens`` is the cost per token at b_max, the lowest this replica
    can reach at ``usd_per_hour``.
    """

    ridge_batch: float
    knee_batch: int
    max_batch: int
    knee_tokens_per_s: float
    floor_usd_per_million_tokens: float


def batching_knee(replica: Replica, context_tokens: float, usd_per_hour: float, max_batch: int) -> Knee:
    """Ridge b* is the smallest batch whose compute time reaches its memory time,
    (2·N_a·b + attention)/(p·F·η_c) ≥ (W_read(b) + b·c·kv·r)/(p·B·η_m);
    the knee is min(b*, b_max) with b_max the KV concurrency ceiling; the cost per token at
    b is usd_per_s · step(b) / b."""
    b_max = int(max_batch)
    if b_max < 1:
        return Knee(float("nan"), 0, 0, 0.0, float("nan"))
    batches = np.arange(1, b_max + 1, dtype=float)
    memory, compute, _ = decode_step_parts(replica, batches, context_tokens)
    crossed = compute >= memory
    ridge = float(batches[np.argmax(crossed)]) if crossed.any() else float("inf")
    knee = int(min(ridge, b_max))
    tokens_per_s = batches / decode_step_time_s(replica, batches, context_tokens)
    floor = usd_per_hour / (tokens_per_s[-1] * SECONDS_PER_HOUR) * 1e6
    return Knee(ridge, knee, b_max, float(tokens_per_s[knee - 1]), float(floor))


def marginal_usd_per_million_tokens(replica: Replica, batch, context_tokens: float, usd_per_hour: float):
    """Cost per million output tokens at batch b: usd_per_hour · step(b) / (3600 · b) · 1e6."""
    b = np.asarray(batch, dtype=float)
    return usd_per_hour * decode_step_time_s(replica, b, context_tokens) / (SECONDS_PER_HOUR * b) * 1e6
