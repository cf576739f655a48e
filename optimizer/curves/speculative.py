"""Speculative decoding: expected tokens per step and when it pays (curve 7).

A draft proposes k tokens, the target verifies them in one step of k+1 tokens per sequence,
each draft token is accepted with probability α (independently, until the first rejection).
"""

from __future__ import annotations

import numpy as np

from optimizer.curves.roofline import decode_step_time_s
from optimizer.curves.shapes import Replica


def expected_tokens_per_step(acceptance, draft_tokens: int):
    """E[tokens per verify step] = (1 − α^{k+1}) / (1 − α)  (= k + 1 at α = 1)."""
    a = np.asarray(acceptance, dtype=float)
    k = draft_tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 - a ** (k + 1)) / (1.0 - a)
    return np.where(np.isclose(a, 1.0), k + 1.0, e)


def mtp_tokens_per_step(acceptance_rates) -> float:
    """MTP with drafts j = 1 … k accepted with probability α_j given the ones before:
    E = 1 + Σ_j Π_{i ≤ j} α_i (one guaranteed token plus the acceptance-weighted drafts);
    with equal rates `expected_tokens_per_step`. DeepSeek-V3's one MTP draft at 0.85: 1.85."""
    chain = np.cumprod(np.asarray(acceptance_rates, dtype=float))
    return float(1.0 + chain.sum())


def speculative_step_time_s(replica: Replica, batch, context_tokens, draft_tokens: int, draft_cost_ratio: float):
    """One speculative iteration: the target verifies k+1 tokens per sequence and the draft
    runs k steps, each costing ``draft_cost_ratio`` × a plain target step at that batch:

        T_spec(b) = step(b, q = k+1) + k·ρ_d·step(b, q = 1)
    """
    plain = decode_step_time_s(replica, batch, context_tokens)
    verify = decode_step_time_s(replica, batch, context_tokens, tokens_per_sequence=draft_tokens + 1)
    return verify + draft_tokens * draft_cost_ratio * plain


def speculative_speedup(replica: Replica, batch, context_tokens, acceptance, draft_tokens: int, draft_cost_ratio: float):
    """Tokens/s with speculation over tokens/s without: E(α,k) · step(b) / T_spec(b)."""
    plain = decode_step_time_s(replica, batch, context_tokens)
    spec = speculative_step_time_s(replica, batch, context_tokens, draft_tokens, draft_cost_ratio)
    return expected_tokens_per_step(acceptance, draft_tokens) * plain / spec


def break_even_acceptance(replica: Replica, batch, context_tokens, draft_tokens: int, draft_cost_ratio: float):
    """The acceptance rate α* at which speculation neither gains nor loses throughput:
    E(α*, k) = T_spec(b) / step(b).

    At small batch the verify step is memory-bound and costs little more than a plain one,
    so α* is low; as b grows the step turns compute-bound, the k+1 tokens cost ~k+1 times
    as much, and α* rises towards 1 (NaN where no α < 1 breaks even).
    """
    plain = decode_step_time_s(replica, batch, context_tokens)
    spec = speculative_step_time_s(replica, batch, context_tokens, draft_tokens, draft_cost_ratio)
    ratio = np.atleast_1d(np.asarray(spec / plain, dtype=float))
    lo = np.zeros_like(ratio)
    hi = np.ones_like(ratio)
    for _ in range(60):  # bisection: E(α) is increasing in α
        mid = 0.5 * (lo + hi)
        below = expected_tokens_per_step(mid, draft_tokens) < ratio
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    alpha = np.where(ratio <= 1.0, 0.0, 0.5 * (lo + hi))
    alpha = np.where(ratio >= draft_tokens + 1.0, np.nan, alpha)
    return alpha if np.ndim(batch) else float(alpha[0])
