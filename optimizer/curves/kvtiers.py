"""KV-cache tiers: hit rate as a function of the capacity a tier gives a workload, the
prefill a hit saves and the read time it adds to TTFT (curve 8b).

Reuse model (an LRU stack-distance model). A request's reusable prefix recurs with
probability p∞ (the hit rate of an unbounded cache); the time T between two uses of it is
log-normal, ln T ~ N(ln T₅₀, σ²). Between the two uses the site's cache takes in the KV of
every prompt that arrived: D = λ · T · s̄ · κ bytes (λ requests/s of the workload at the
site, s̄ mean prompt tokens — each prompt's KV is written whole, conservative as a hit writes
only its suffix — κ KV bytes per token). That is the LRU stack distance: an LRU cache of C
bytes holds the prefix when D ≤ C, so

    hit(C) = p∞ · P(D ≤ C) = p∞ · Φ((ln(C / (λ s̄ κ)) − ln T₅₀) / σ)

which is non-decreasing in C (Φ is), 0 at C = 0 and p∞ as C → ∞. With c = C/λ, the capacity
per request/s, hit depends on c alone: a site serving twice the traffic needs twice the
bytes for the same hit rate.

Tiers in an exclusive hierarchy, fastest first (HBM, host DRAM, local NVMe, a site-wide
store): a reuse at distance D is served by the first tier k whose cumulative capacity
C₁ + … + C_k reaches D, so tier k's hit share is hit(C_≤k) − hit(C_<k) and the total is
hit(C₁ + … + C_n).

A hit reads the cached prefix of s_p = min(ρ · s̄, s̄ − 1) tokens (ρ the reusable share) from
its tier at bandwidth B_k after latency L_k:

    read_k = L_k + s_p · κ / B_k          (added to that hit's TTFT)

and saves the prefill of those tokens: the hit's prefill time falls from t(s̄, 0) to
t(s̄, s_p) (`roofline.prefill_time_s`).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from optimizer.base.units import MS_PER_S


def hit_rate(capacity_bytes_per_rps, reuse_probability: float, median_reuse_s: float, sigma: float,
             prompt_tokens: float, kv_bytes_per_token: float):
    """hit(c) = p∞ · Φ((ln(c / (s̄ κ)) − ln T₅₀) / σ) for a capacity of c bytes per request/s
    (0 at c = 0)."""
    c = np.asarray(capacity_bytes_per_rps, dtype=float)
    fill_bytes_per_s = prompt_tokens * kv_bytes_per_token  # per request/s
    with np.errstate(divide="ignore"):
        z = (np.log(c / fill_bytes_per_s) - np.log(median_reuse_s)) / sigma
    return reuse_probability * ndtr(z)


def tier_hit_shares(cumulative_hits) -> np.ndarray:
    """Each tier's hit share from the hit rates at the cumulative capacities C_≤1 … C_≤n
    (last axis): hit(C_≤k) − hit(C_<k), with hit(C_≤0) = 0."""
    h = np.asarray(cumulative_hits, dtype=float)
    return np.diff(h, axis=-1, prepend=0.0)


def cached_tokens(prompt_tokens: float, reusable_share: float) -> float:
    """s_p = min(ρ · s̄, s̄ − 1): a hit leaves at least one token to prefill."""
    return float(min(reusable_share * prompt_tokens, max(prompt_tokens - 1.0, 0.0)))


def read_time_ms(tokens: float, kv_bytes_per_token: float, bandwidth_gb_per_s: float, latency_ms: float) -> float:
    """L + s_p · κ / B, in ms (B in GB/s, 1 GB = 1e9 bytes)."""
    return float(latency_ms + tokens * kv_bytes_per_token / (bandwidth_gb_per_s * 1e9) * MS_PER_S)


def capacity_gb(capacity_bytes_per_rps: float, requests_per_s: float) -> float:
    """A site's tier capacity, GB: c · λ / 1e9."""
    return float(capacity_bytes_per_rps * requests_per_s / 1e9)


def capacity_bytes_per_rps_of(capacity_gb_at_site: float, requests_per_s: float) -> float:
    """The inverse of `capacity_gb`: the capacity per request/s a site's GB give (∞ at λ = 0)."""
    if requests_per_s <= 0:
        return float("inf")
    return float(capacity_gb_at_site * 1e9 / requests_per_s)
