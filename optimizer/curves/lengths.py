"""Prompt and output length distributions, and the service-time moments they imply.

A length with mean m and 99th percentile p is modelled as lognormal, ln X ~ N(μ, σ²), with
    m = exp(μ + σ²/2),   p = exp(μ + z·σ),  z = Φ⁻¹(0.99) = 2.3263
so σ solves σ²/2 − z·σ + ln(p/m) = 0:  σ = z − sqrt(z² − 2·ln(p/m)), μ = ln m − σ²/2.
(Requires p/m ≤ exp(z²/2) ≈ 14.9; p = m gives a constant length.) Lengths are clipped to
[1, max] tokens when sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri  # the standard normal quantile (scipy.stats.norm.ppf)

from optimizer.scenario.fields import MAX_P99_OVER_MEAN, Z99

__all__ = ["MAX_P99_OVER_MEAN", "Z99", "LengthDistribution"]


@dataclass(frozen=True)
class LengthDistribution:
    mean_tokens: float
    p99_tokens: float
    max_tokens: float = float("inf")

    @property
    def sigma(self) -> float:
        ratio = self.p99_tokens / self.mean_tokens
        if ratio <= 1.0:
            return 0.0
        return Z99 - float(np.sqrt(Z99 * Z99 - 2.0 * np.log(ratio)))

    @property
    def mu(self) -> float:
        return float(np.log(self.mean_tokens) - self.sigma**2 / 2.0)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Integer lengths drawn from the lognormal, clipped to [1, max_tokens]."""
        x = rng.lognormal(self.mu, self.sigma, size) if self.sigma > 0 else np.full(size, self.mean_tokens)
        return np.clip(np.rint(x), 1, self.max_tokens).astype(np.int64)

    def quantile_grid(self, points: int = 400) -> np.ndarray:
        """Lengths at evenly spaced probabilities (midpoints), for deterministic expectations."""
        probs = (np.arange(points) + 0.5) / points
        x = np.exp(self.mu + self.sigma * ndtri(probs))
        return np.clip(x, 1.0, self.max_tokens)

    def moment_grid(self, step: float = 0.025, reach: float = 6.5) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, weights) for expectations that lean on the far tail: ln X = μ + σ·z on a
        grid of z ∈ [−reach, reach] weighted by the normal density. The 400-point
        `quantile_grid` stops at the 99.9th percentile and leaves out the long prompts that
        make a service time's third moment (attention time grows with s², its cube with s⁶)."""
        if self.sigma <= 0:
            return np.array([min(max(self.mean_tokens, 1.0), self.max_tokens)]), np.ones(1)
        z = np.arange(-reach, reach + step / 2, step)
        weights = np.exp(-0.5 * z * z)
        return np.clip(np.exp(self.mu + self.sigma * z), 1.0, self.max_tokens), weights / weights.sum()


def service_moments(service_time_of, lengths: LengthDistribution, hit_rate: float, cached_tokens_on_hit: float):
    """Mean, squared coefficient of variation and third-moment ratio of a service time that
    depends on the prompt length s and on whether the prompt cache hits (probability h):

        E[Sʲ] = h·E[S(s, hit)ʲ] + (1 − h)·E[S(s, miss)ʲ],
        c_s² = E[S²]/E[S]² − 1,   r₃ = E[S³]/E[S]³   (an exponential time has c_s² = 1, r₃ = 6).

    ``service_time_of(tokens, cached_tokens)`` is evaluated on `LengthDistribution.moment_grid`.
    """
    grid, weight = lengths.moment_grid()
    miss = np.asarray(service_time_of(grid, np.zeros_like(grid)), dtype=float)
    hit = np.asarray(service_time_of(grid, np.minimum(grid, cached_tokens_on_hit)), dtype=float)
    moment = [float(hit_rate * np.dot(weight, hit**j) + (1 - hit_rate) * np.dot(weight, miss**j)) for j in (1, 2, 3)]
    mean = moment[0]
    return mean, max(moment[1] / (mean * mean) - 1.0, 0.0), moment[2] / mean**3


@dataclass(frozen=True)
class EmpiricalLengths:
    """Lengths drawn from an observed distribution: distinct ``tokens`` (ascending) and how
    many requests had each (``requests``), by inverting its CDF."""

    tokens: np.ndarray
    requests: np.ndarray
    max_tokens: float = float("inf")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        cdf = np.cumsum(self.requests) / np.sum(self.requests)
        i = np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(cdf) - 1)
        return np.clip(np.asarray(self.tokens)[i], 1, self.max_tokens).astype(np.int64)
