"""Prompt cache: prefill work it removes and KV memory it occupies (curve 8)."""

from __future__ import annotations

import numpy as np


def cached_prefix_tokens(prompt_tokens, shared_prefix_tokens: float):
    """Tokens of a prompt that a cache hit skips: min(s_p, s)."""
    return np.minimum(np.asarray(prompt_tokens, dtype=float), shared_prefix_tokens)


def mean_prefill_tokens(mean_prompt_tokens: float, hit_rate: float, shared_prefix_tokens: float) -> float:
    """Expected tokens to prefill per request: s̄ − h·min(s_p, s̄)."""
    return float(mean_prompt_tokens - hit_rate * cached_prefix_tokens(mean_prompt_tokens, shared_prefix_tokens))


def p99_cached_tokens(hit_rate: float, shared_prefix_tokens: float, quantile: float = 0.99) -> float:
    """Cached tokens to assume for the p99 prompt: the prefix only when hits are so common
    that the quantile request is itself a hit (h ≥ quantile), else none — the p99 prompt
    is conservatively a miss."""
    return float(shared_prefix_tokens) if hit_rate >= quantile else 0.0


def cache_kv_share(resident_prefixes: float, shared_prefix_tokens: float, kv_bytes_per_token: float, kv_budget_bytes: float) -> float:
    """Share of a replica's KV budget held by resident shared prefixes:
    n_prefixes · s_p · kv / M_kv (capped at 1). Concurrency lacks exactly this share."""
    if kv_budget_bytes <= 0:
        return 1.0
    return float(min(1.0, resident_prefixes * shared_prefix_tokens * kv_bytes_per_token / kv_budget_bytes))


def prefill_work_saved_fraction(mean_prompt_tokens: float, hit_rate: float, shared_prefix_tokens: float) -> float:
    """Fraction of prefill tokens the cache removes: h·min(s_p, s̄)/s̄ (a report line item)."""
    if mean_prompt_tokens <= 0:
        return 0.0
    return float(hit_rate * cached_prefix_tokens(mean_prompt_tokens, shared_prefix_tokens) / mean_prompt_tokens)
