"""Prompt and output length distributions, and the service-time moments they imply.

A length with mean m and 99th percentile p is modelled as lognormal, ln X ~ N(μ, σ²), with
    m = exp(μ + σ²/2),   p = exp(μ + z·σ),  z = Φ⁻¹(0.99) = 2.3263
so σ solves σ²/2 − z·σ + ln(p/m) = 0:  σ = z − sqrt(z² − 2·ln(p/m)), μ = ln m − σ²/2.
(Requires p/m ≤ exp(z²/2) ≈ 14.9; p = m gives a constant length.) Lengths are clipped to
[1, max] tokens when sampled.

A part of the requests split at prompt lengths (`LengthDistribution.part`) is the same
lognormal conditioned on from ≤ X < below: with F(x) = Φ((ln x − μ)/σ) its share is
F(below) − F(from), its q-quantile exp(μ + σ·Φ⁻¹(F(from) + q·(F(below) − F(from)))) and its
mean the lognormal's partial expectation over the range over that share,
    E[X | a ≤ X < b] = e^{μ+σ²/2} · (Φ(β − σ) − Φ(α − σ)) / (Φ(β) − Φ(α)),  α, β = (ln a − μ)/σ, (ln b − μ)/σ.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.special import ndtr, ndtri  # the standard normal CDF and quantile (scipy.stats.norm)

from optimizer.scenario.fields import MAX_P99_OVER_MEAN, Z99

__all__ = ["MAX_P99_OVER_MEAN", "Z99", "LengthDistribution", "prompt_lengths"]


@dataclass(frozen=True)
class LengthDistribution:
    """``mean_tokens`` and ``p99_tokens`` set the lognormal of the whole workload; a part of it
    (``from_tokens`` ≤ X < ``below_tokens``) keeps them and is conditioned on the range."""

    mean_tokens: float
    p99_tokens: float
    max_tokens: float = float("inf")
    from_tokens: float = 0.0
    below_tokens: float = float("inf")

    def part(self, from_tokens: float = 0.0, below_tokens: float = float("inf")) -> LengthDistribution:
        """The requests with from_tokens ≤ length < below_tokens (of the whole distribution)."""
        return replace(self, from_tokens=from_tokens, below_tokens=below_tokens)

    @property
    def is_part(self) -> bool:
        return self.from_tokens > 0 or self.below_tokens < float("inf")

    def cdf(self, tokens: float) -> float:
        """P(X < tokens) of the whole (unconditioned, unclipped) lognormal."""
        if tokens <= 0:
            return 0.0
        if tokens == float("inf"):
            return 1.0
        if self.sigma <= 0:
            return float(self.mean_tokens < tokens)
        return float(ndtr((np.log(tokens) - self.mu) / self.sigma))

    @property
    def share(self) -> float:
        """The part's share of the whole's requests."""
        return self.cdf(self.below_tokens) - self.cdf(self.from_tokens)

    def _probs(self, probs) -> np.ndarray:
        """Probabilities of the part mapped to the whole's."""
        lo = self.cdf(self.from_tokens)
        return lo + np.asarray(probs, dtype=float) * (self.cdf(self.below_tokens) - lo)

    def quantiles(self, probs) -> np.ndarray:
        """The part's quantiles at ``probs``, clipped to [1, max_tokens]."""
        probs = np.asarray(probs, dtype=float)
        if self.sigma <= 0:
            return np.full(probs.shape, min(max(self.mean_tokens, 1.0), self.max_tokens))
        return self._inside(np.exp(self.mu + self.sigma * ndtri(self._probs(probs))))

    def _inside(self, x: np.ndarray) -> np.ndarray:
        """Lengths kept within the part's range (against rounding at its ends), then clipped to
        [1, max_tokens]."""
        if self.is_part:
            x = np.clip(x, self.from_tokens, np.nextafter(self.below_tokens, 0.0))
        return np.clip(x, 1.0, self.max_tokens)

    def quantile(self, q: float) -> float:
        return float(self.quantiles(q))

    @property
    def spread_sigma(self) -> float:
        """σ of the lognormal with the part's mean and variance, √ln(1 + Var/mean²) (the whole's σ)."""
        if not self.is_part or self.sigma <= 0:
            return self.sigma
        grid, weight = self.moment_grid()
        m1, m2 = float(np.dot(weight, grid)), float(np.dot(weight, grid * grid))
        return float(np.sqrt(max(np.log(m2 / (m1 * m1)), 0.0)))

    def _partial_mean(self, a: float, b: float) -> float:
        """E[X; a ≤ X < b] of the unclipped lognormal."""
        if b <= a:
            return 0.0
        alpha = (np.log(a) - self.mu) / self.sigma if a > 0 else -np.inf
        beta = (np.log(b) - self.mu) / self.sigma if b < np.inf else np.inf
        return float(np.exp(self.mu + self.sigma**2 / 2) * (ndtr(beta - self.sigma) - ndtr(alpha - self.sigma)))

    @property
    def conditional_mean_tokens(self) -> float:
        """The part's mean length, clipped to [1, max_tokens] as sampled (the whole's mean when
        nothing is cut or clipped)."""
        if self.sigma <= 0:
            return float(min(max(self.mean_tokens, 1.0), self.max_tokens))
        a, b, top = self.from_tokens, self.below_tokens, self.max_tokens
        total = self._partial_mean(max(a, 1.0), min(b, top))  # unclipped inside [1, max)
        if a < 1.0:  # lengths below one token count as one
            total += self.cdf(min(1.0, b)) - self.cdf(a)
        if b > top:  # lengths past the context count as the context
            total += top * (self.cdf(b) - self.cdf(max(a, top)))
        return float(total / self.share)

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
        """Integer lengths drawn from the lognormal (a part: by its quantiles), clipped to [1, max_tokens]."""
        if self.sigma > 0 and self.is_part:
            x = self._inside(np.exp(self.mu + self.sigma * ndtri(self._probs(rng.random(size)))))
        else:
            x = rng.lognormal(self.mu, self.sigma, size) if self.sigma > 0 else np.full(size, self.mean_tokens)
        return np.clip(np.rint(x), 1, self.max_tokens).astype(np.int64)

    def quantile_grid(self, points: int = 400) -> np.ndarray:
        """Lengths at evenly spaced probabilities (midpoints), for deterministic expectations."""
        probs = self._probs((np.arange(points) + 0.5) / points)
        return self._inside(np.exp(self.mu + self.sigma * ndtri(probs)))

    def moment_grid(self, step: float = 0.025, reach: float = 6.5) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, weights) for expectations that lean on the far tail: ln X = μ + σ·z on a
        grid of z ∈ [−reach, reach] weighted by the normal density. The 400-point
        `quantile_grid` stops at the 99.9th percentile and leaves out the long prompts that
        make a service time's third moment (attention time grows with s², its cube with s⁶)."""
        if self.sigma <= 0:
            return np.array([min(max(self.mean_tokens, 1.0), self.max_tokens)]), np.ones(1)
        if self.is_part:  # the part's own range of z, as finely as the whole's
            lo = max(-reach, float(ndtri(self.cdf(self.from_tokens))))
            hi = min(reach, float(ndtri(self.cdf(self.below_tokens))))
            z = np.linspace(lo, hi, max(int((hi - lo) / step) + 1, 41))
        else:
            z = np.arange(-reach, reach + step / 2, step)
        weights = np.exp(-0.5 * z * z)
        return self._inside(np.exp(self.mu + self.sigma * z)), weights / weights.sum()


def prompt_lengths(w, max_tokens: float) -> LengthDistribution:
    """A workload's prompt lengths: its own lognormal, or for a part of a split workload
    (``w.prompt_part``, `optimizer.instance.prompt_split`) its parent's conditioned on the
    part's range."""
    part = w.prompt_part
    if part is None:
        return LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, max_tokens)
    whole = LengthDistribution(part.parent_isl_mean_tokens, part.parent_isl_p99_tokens, max_tokens)
    return whole.part(part.from_tokens, float("inf") if part.below_tokens is None else part.below_tokens)


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
