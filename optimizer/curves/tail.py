"""The tail of a sum: a request's p99 time through a queue and the stages after it, and the
p99 of inter-token gaps.

Stage p99s do not add: the p99 prompt rarely meets the p99 wait. A request's time from its
arrival at a pool to its first token is the sum T = W + X of

* W, its wait for a server. In M/M/n an arrival waits with probability C (Erlang C), and a
  wait, given there is one, is exponential at the rate the pool drains its queue; for M/G/n
  the Allen–Cunneen correction stretches it by (1 + c_s²)/2:
      P(W > t) = C·exp(−θ·t),   θ = (n/S̄ − λ)·2/(1 + c_s²),   t ≥ 0
  (`queueing.wait_law`, which also covers batching servers);
* X, the stages after the wait — prefill of its own prompt, the KV transfer, joining a
  decode batch and its first step. X = V + s·U: V depends on the prompt (a `Law`, points
  and probabilities on a quantile grid of the prompt length), s·U is a uniform delay of
  width s, independent of it (the rest of the step a decode replica is in when the request
  joins). A FIFO arrival's wait depends only on those before it, so W and X are
  independent. A batching server gives an arrival that found it idle a pass of its own (X₀)
  and one that waited a pass shared with the prompts queued beside it (X_w).

Then

    P(T > t) = (1 − C)·E[A(t − V₀)] + C·E[B_θ(t − V_w)],
    A(z) = P(s·U > z) = 1 − clip(z/s, 0, 1)            (1 for z < 0),
    B_θ(z) = E[P(E_θ > z − s·U)]  =  1                                            z ≤ 0
                                     (1 − z/s) + (1 − e^{−θz})/(θs)               0 < z < s
                                     e^{−θ(z − s)}·(1 − e^{−θs})/(θs)             z ≥ s

(E_θ exponential at rate θ; s → 0 gives A = 1[z < 0], B_θ = e^{−θ·max(z, 0)}). The q-quantile
is the t where P(T > t) = 1 − q, found by bisection (`sojourn_quantile_s`). With X constant
(= x) and unbatched it is x + ln(C/(1 − q))/θ, the p99 wait plus a constant stage.

A request of a route chooses among pools (by the plan's flow shares) and sits behind a round
trip; a route's — or a group of routes' — p99 is that of the mixture,
Σ_r w_r·P(a_r + T_r > t) = 1 − q (`mixture_quantile_s`).

SLO capacity with the tail of the sum. A pool's requests meet a budget b (the objective
less the round trip and fixed overheads) in share q when

    (1 − C)·P(X₀ > b) + C·Q(θ) ≤ 1 − q,      Q(θ) = E[B_θ(b − V_w)].

Q falls from 1 (θ → 0) to P(X_w > b) (θ → ∞); `SlackTable` tabulates ln Q on a geometric grid
of θ once per (law, budget), so the capacity table's bisection over λ costs one interpolation per
step (`queueing.tail_capacity_rps`).

Inter-token gaps (`gap_law`, `gap_quantile_s`): a decode replica emits one token per
sequence per step, so a step of duration d at batch b carries b gaps of d; speculative
decoding emits E tokens a step on average, E − 1 of them with a zero gap. With step states
of time probability π and durations d, the share of gaps longer than t is

    P(gap > t) = (1/E)·Σ π·(b/d)·1[d > t] / Σ π·(b/d).

The states (`step_states`) are the batch around the one a replica settles at
(`settled_batch`, Little's law) and the batch's mean context around that of a sequence in
flight (`inflight_context`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

TAIL_FLOOR = 1e-6  # the smallest tail probability the length grids resolve


@dataclass(frozen=True)
class Law:
    """A random delay X = V + smear·U (seconds): V on ascending points ``values_s`` with
    ``probs`` (summing to 1), U uniform on [0, 1] and independent of V."""

    values_s: np.ndarray
    probs: np.ndarray
    smear_s: float = 0.0

    @property
    def mean_s(self) -> float:
        return float(np.dot(self.values_s, self.probs)) + 0.5 * self.smear_s

    def shifted(self, by_s: float, smear_s: float | None = None) -> Law:
        """X + ``by_s`` (and a new smear width, when given)."""
        return Law(self.values_s + by_s, self.probs, self.smear_s if smear_s is None else smear_s)


def law(values_s, probs=None, smear_s: float = 0.0) -> Law:
    """A `Law` from points and weights (equal weights when ``probs`` is None), sorted and
    normalised."""
    x = np.atleast_1d(np.asarray(values_s, dtype=float)).ravel()
    p = np.full(len(x), 1.0 / len(x)) if probs is None else np.atleast_1d(np.asarray(probs, dtype=float)).ravel()
    order = np.argsort(x, kind="stable")
    return Law(x[order], p[order] / p.sum(), float(smear_s))


def probability_edges(points: int) -> np.ndarray:
    """Cumulative-probability edges of ``points`` bins: half of them equal in the body (to
    0.9), the other half geometric in the upper tail down to `TAIL_FLOOR`, so a p99 is
    resolved to a few hundredths of a percent of probability."""
    body = np.linspace(0.0, 0.9, points // 2 + 1)
    tail = 1.0 - np.geomspace(0.1, TAIL_FLOOR, points - points // 2)
    return np.concatenate((body, tail[1:], [1.0]))


def lognormal_points(mu: float, sigma: float, points: int = 256, low: float = 1.0,
                     high: float = np.inf) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of exp(N(μ, σ²)) clipped to [low, high], one point per bin of
    `probability_edges` at the bin's median probability."""
    edges = probability_edges(points)
    middle = 0.5 * (edges[:-1] + edges[1:])
    values = np.exp(mu + sigma * ndtri(middle)) if sigma > 0 else np.full(len(middle), np.exp(mu))
    return np.clip(values, low, high), np.diff(edges)


def _uniform_exceeds(z, smear_s) -> np.ndarray:
    """A(z) = P(s·U > z); broadcasts z against s."""
    z = np.asarray(z, dtype=float)
    s = np.asarray(smear_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = 1.0 - np.clip(z / s, 0.0, 1.0)
    return np.where(s > 0, inside, (z < 0).astype(float))


def _waited_exceeds(z, rate_per_s, smear_s) -> np.ndarray:
    """B_θ(z) = P(E_θ + s·U > z) (module docstring); broadcasts z, θ and s."""
    z = np.asarray(z, dtype=float)
    theta = np.asarray(rate_per_s, dtype=float)
    s = np.asarray(smear_s, dtype=float)
    ts = theta * s
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        spread = np.where(ts > 1e-12, -np.expm1(-ts) / ts, 1.0)  # (1 − e^{−θs})/(θs)
        beyond = np.exp(-theta * np.maximum(z - s, 0.0)) * spread
        inside = (1.0 - z / s) + np.where(ts > 1e-12, -np.expm1(-theta * np.maximum(z, 0.0)) / ts, z / s)
    return np.where(z <= 0, 1.0, np.where(z >= s, beyond, inside))


def survival(x: Law, t) -> np.ndarray:
    """P(X > t) for each t: with prefix sums of p_i and p_i·v_i over the sorted points,
    P(X ≤ t) = Σ_{v_i ≤ t − s} p_i + Σ_{t − s < v_i ≤ t} p_i·(t − v_i)/s."""
    t = np.atleast_1d(np.asarray(t, dtype=float))
    mass = np.concatenate(([0.0], np.cumsum(x.probs)))
    b = np.searchsorted(x.values_s, t, side="right")
    if x.smear_s <= 0:
        return 1.0 - mass[b]
    moment = np.concatenate(([0.0], np.cumsum(x.probs * x.values_s)))
    a = np.searchsorted(x.values_s, t - x.smear_s, side="right")
    below = mass[a] + (t * (mass[b] - mass[a]) - (moment[b] - moment[a])) / x.smear_s
    return np.clip(1.0 - below, 0.0, 1.0)


def quantile_s(x: Law, q: float) -> float:
    """The q-quantile of X. Its CDF is piecewise linear between the points v_i and v_i + s
    (each point's uniform smear), so it is inverted exactly on those breakpoints."""
    if x.smear_s <= 0:
        cum = np.cumsum(x.probs)
        return float(x.values_s[min(int(np.searchsorted(cum, q - 1e-12, side="left")), len(cum) - 1)])
    knots = np.union1d(x.values_s, x.values_s + x.smear_s)
    cdf = np.maximum.accumulate(1.0 - survival(x, knots))
    return float(np.interp(q, cdf, knots))


def compress(x: Law, points: int = 128) -> Law:
    """The law on ``points`` bins of cumulative probability (`probability_edges`: the upper
    tail finely), each point carried by its bin's conditional mean — the mean is kept, the
    tail to the bins' resolution; the smear is kept."""
    if len(x.values_s) <= points:
        return x
    edges = probability_edges(points)
    cum = np.cumsum(x.probs)
    which = np.clip(np.searchsorted(edges, cum - 0.5 * x.probs, side="right") - 1, 0, points - 1)
    mass = np.bincount(which, weights=x.probs, minlength=points)
    total = np.bincount(which, weights=x.probs * x.values_s, minlength=points)
    keep = mass > 0
    return Law(total[keep] / mass[keep], mass[keep] / mass[keep].sum(), x.smear_s)


def sojourn_survival(t, waits: float, wait_rate_per_s: float, alone: Law, riding: Law | None = None) -> np.ndarray:
    """P(W + X > t) (module docstring): ``waits`` = C, ``wait_rate_per_s`` = θ, X₀ =
    ``alone`` for an arrival that finds a server, X_w = ``riding`` (default ``alone``) for
    one that waits. A saturated pool (θ ≤ 0) meets no t."""
    riding = alone if riding is None else riding
    t = np.atleast_1d(np.asarray(t, dtype=float))
    if wait_rate_per_s <= 0:
        return np.ones_like(t)
    waited = _waited_exceeds(t[:, None] - riding.values_s[None, :], wait_rate_per_s, riding.smear_s) @ riding.probs
    return (1.0 - waits) * survival(alone, t) + waits * waited


def mixture_quantile_s(parts, quantile: float = 0.99, tolerance_s: float = 1e-7) -> float:
    """The q-quantile of a mixture: ``parts`` = [(weight, offset s, survival function of
    an array of t), …], the law Σ w·P(offset + T > t) / Σ w. Bisection (the mixture's
    survival falls with t); inf when the tail never falls to 1 − q (a saturated pool)."""
    parts = [(w, a, f) for w, a, f in parts if w > 0]
    if not parts:
        return float("nan")
    total = sum(w for w, _, _ in parts)
    tail = 1.0 - quantile

    def exceeds(t: float) -> bool:
        return sum(w * float(f(np.array([t - a]))[0]) for w, a, f in parts) > tail * total

    lo = min(a for _, a, _ in parts)
    hi = max(a for _, a, _ in parts) + 1e-3
    while exceeds(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e7:
            return float("inf")
    while hi - lo > tolerance_s * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if exceeds(mid) else (lo, mid)
    return hi


def sojourn_quantile_s(waits: float, wait_rate_per_s: float, alone: Law, riding: Law | None = None,
                       quantile: float = 0.99) -> float:
    """The q-quantile of W + X (one pool, no round trip)."""
    return mixture_quantile_s([(1.0, 0.0, lambda t: sojourn_survival(t, waits, wait_rate_per_s, alone, riding))],
                              quantile)


@dataclass(frozen=True)
class LawPack:
    """Several laws on one array: points (laws × P, zero-probability padding) and smears."""

    values_s: np.ndarray
    probs: np.ndarray
    smear_s: np.ndarray

    @property
    def top_s(self) -> np.ndarray:
        """The largest value each law reaches (smear included)."""
        return np.where(self.probs > 0, self.values_s, -np.inf).max(axis=1) + self.smear_s


def pack(laws: list[Law], points: int = 128) -> LawPack:
    """`compress` each law to at most ``points`` and lay them on one array."""
    small = [compress(x, points) for x in laws]
    width = max(len(x.values_s) for x in small)
    values = np.zeros((len(small), width))
    probs = np.zeros((len(small), width))
    for i, x in enumerate(small):
        values[i, :len(x.values_s)] = x.values_s
        probs[i, :len(x.probs)] = x.probs
    return LawPack(values, probs, np.array([x.smear_s for x in small]))


@dataclass(frozen=True)
class Mixtures:
    """Many mixtures of sojourns W + X at once: component c belongs to mixture ``item[c]``
    with ``weight`` and a constant ``offset_s`` (round trip, overheads), waits with
    probability ``waits`` at rate ``rate_per_s`` (θ ≤ 0: saturated), and has X₀ =
    ``laws[alone[c]]``, X_w = ``laws[riding[c]]``."""

    item: np.ndarray
    weight: np.ndarray
    offset_s: np.ndarray
    waits: np.ndarray
    rate_per_s: np.ndarray
    alone: np.ndarray
    riding: np.ndarray
    laws: LawPack

    def survival(self, t) -> np.ndarray:
        """Each component's P(offset + W + X > t[item])."""
        z = (np.asarray(t, dtype=float)[self.item] - self.offset_s)[:, None]
        v, p, s = self.laws.values_s, self.laws.probs, self.laws.smear_s
        free = np.sum(_uniform_exceeds(z - v[self.alone], s[self.alone][:, None]) * p[self.alone], axis=1)
        waited = np.sum(_waited_exceeds(z - v[self.riding], self.rate_per_s[:, None], s[self.riding][:, None])
                        * p[self.riding], axis=1)
        out = (1.0 - self.waits) * free + self.waits * waited
        return np.where(self.rate_per_s > 0, out, 1.0)

    def quantiles_s(self, items: int, quantile: float = 0.99, steps: int = 32) -> np.ndarray:
        """The q-quantile of each mixture (nan without components; inf when its saturated
        components alone hold more than 1 − q of its weight): a bisection run on all
        mixtures at once, from the smallest offset to a time every component has passed
        (its largest X beyond its offset plus its wait's (1 − q)-tail)."""
        total = np.bincount(self.item, self.weight, items)
        tail = 1.0 - quantile
        busy = self.rate_per_s > 0
        stuck = np.bincount(self.item, self.weight * ~busy, items)
        top = np.maximum(self.laws.top_s[self.alone], self.laws.top_s[self.riding])
        with np.errstate(divide="ignore", invalid="ignore"):
            wait = np.where(busy & (self.waits > tail), np.log(np.maximum(self.waits, 1e-300) / tail)
                            / np.where(busy, self.rate_per_s, 1.0), 0.0)
        lo = np.full(items, np.inf)
        np.minimum.at(lo, self.item, self.offset_s)
        hi = np.full(items, -np.inf)
        np.maximum.at(hi, self.item, np.where(busy, self.offset_s + top + wait, -np.inf))
        hi = np.maximum(hi, lo)
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            exceeds = np.bincount(self.item, self.weight * self.survival(np.where(np.isfinite(mid), mid, 0.0)),
                                  items) > tail * total
            lo, hi = np.where(exceeds, mid, lo), np.where(exceeds, hi, mid)
        return np.where(total <= 0, np.nan, np.where(stuck > tail * total, np.inf, hi))


RATE_GRID_PER_S = np.geomspace(1e-3, 1e7, 61)  # θ grid of `SlackTable`


@dataclass(frozen=True)
class SlackTable:
    """What a capacity table needs of the stages after the wait, at a budget b, for U laws at
    once: P(X₀ > b) (``beyond_alone``, shape U) and ln Q_j(θ) on `RATE_GRID_PER_S` for each
    riding law j (``log_q``, shape U × laws × rates)."""

    beyond_alone: np.ndarray
    log_q: np.ndarray

    def q(self, rate_per_s, riding_weights=None, row=None) -> np.ndarray:
        """Q(θ) = Σ_j w_j·Q_j(θ) for an array of θ, each of law ``row`` (an index array of
        θ's shape; default the first); weights θ-shaped × laws (default: the first law
        alone). ln Q_j is interpolated linearly in θ — exact where X is a constant, for then
        ln Q = −θ·(b − x); otherwise Q_j, a mixture of exponentials in θ, is log-convex, so
        the chords lie above it: the table errs high and a capacity made with it low."""
        grid = RATE_GRID_PER_S
        r = np.clip(np.asarray(rate_per_s, dtype=float), grid[0], grid[-1])
        if row is None:  # one law: interpolate each riding law's row
            each = np.exp(np.stack([np.interp(r, grid, line) for line in self.log_q[0]], axis=-1))
        else:
            i = np.clip(np.searchsorted(grid, r, side="right") - 1, 0, len(grid) - 2)
            f = (r - grid[i]) / (grid[i + 1] - grid[i])
            u, j = np.broadcast_to(row, r.shape)[..., None], np.arange(self.log_q.shape[1])
            at = self.log_q[u, j, i[..., None]]
            each = np.exp(at + f[..., None] * (self.log_q[u, j, i[..., None] + 1] - at))
        if riding_weights is None:
            return each[..., 0]
        return np.sum(each * riding_weights, axis=-1)

    def tail(self, waits, rate_per_s, riding_weights=None, row=None) -> np.ndarray:
        """P(W + X > b) for arrays of C and θ (θ ≤ 0, a saturated pool: 1)."""
        rate = np.asarray(rate_per_s, dtype=float)
        beyond = self.beyond_alone[0] if row is None else self.beyond_alone[row]
        out = (1.0 - np.asarray(waits)) * beyond + np.asarray(waits) * self.q(rate, riding_weights, row)
        return np.where(rate <= 0, 1.0, out)


def slack_table(alone: Law, riding: list[Law], budget_s: float) -> SlackTable:
    """`SlackTable` (one law) of ``budget_s`` for X₀ = ``alone`` and the riding laws ``riding``."""
    rows = [np.log(np.maximum(_waited_exceeds(budget_s - x.values_s[None, :], RATE_GRID_PER_S[:, None], x.smear_s)
                              @ x.probs, 1e-300)) for x in riding]
    return SlackTable(np.array([float(survival(alone, budget_s)[0])]), np.array([rows]))


def stack(tables: list[SlackTable]) -> SlackTable:
    """One `SlackTable` of several. A table with fewer riding laws repeats its last: the
    geometric weights then put on the repeats exactly the mass they put on its last law, so
    each keeps its own Q."""
    laws = max(x.log_q.shape[1] for x in tables)
    rows = [np.concatenate((x.log_q, np.repeat(x.log_q[:, -1:], laws - x.log_q.shape[1], axis=1)), axis=1)
            for x in tables]
    return SlackTable(np.concatenate([x.beyond_alone for x in tables]), np.concatenate(rows))


def geometric_weights(mean_others, count: int) -> np.ndarray:
    """P(J = j), j = 0 … count − 1, for J geometric with mean ``mean_others`` (array), the mass
    beyond the last point put on it: how many prompts share a waiting prompt's pass beside it
    (`queueing.wait_law`)."""
    m = np.maximum(np.asarray(mean_others, dtype=float), 0.0)[..., None]
    ratio = m / (1.0 + m)
    j = np.arange(count)
    w = (1.0 - ratio) * ratio ** j
    w[..., -1] = ratio[..., 0] ** (count - 1)
    return w


@dataclass(frozen=True)
class GapLaw:
    """A pool's inter-token gaps: a share ``zero_share`` are zero (the tokens of a speculative
    step after its first), the others take ``durations_s`` with probabilities ``probs``."""

    durations_s: np.ndarray
    probs: np.ndarray
    zero_share: float = 0.0


def gap_law(durations_s, state_probs, batch, tokens_per_step: float = 1.0) -> GapLaw:
    """The gaps of step states with durations d, time probabilities π and batch b (module
    docstring): a step carries b gaps and there are π/d of them per unit time, so a gap
    falls in state s with probability ∝ π·b/d; speculative steps (E ≥ 1 tokens per step)
    add a share 1 − 1/E of zero gaps."""
    d = np.asarray(durations_s, dtype=float).ravel()
    w = np.broadcast_to(np.asarray(state_probs, dtype=float) * np.asarray(batch, dtype=float),
                        np.shape(durations_s)).ravel() / d
    return GapLaw(d, w / w.sum(), 1.0 - 1.0 / max(tokens_per_step, 1.0))


def gap_quantile_s(laws, quantile: float = 0.99) -> float:
    """The q-quantile of the gaps of a mixture ``laws`` = [(weight, `GapLaw`), …] (weights:
    the pools' shares of the tokens); 0 when zero gaps alone reach q."""
    laws = [(w, x) for w, x in laws if w > 0]
    total = sum(w for w, _ in laws)
    zero = sum(w * x.zero_share for w, x in laws) / total
    if zero >= quantile:
        return 0.0
    d = np.concatenate([x.durations_s for _, x in laws])
    p = np.concatenate([w * (1.0 - x.zero_share) * x.probs for w, x in laws]) / total
    order = np.argsort(d, kind="stable")
    cum = zero + np.cumsum(p[order])
    return float(d[order][min(int(np.searchsorted(cum, quantile - 1e-12, side="left")), len(d) - 1)])


def inflight_context(isl_mean: float, isl_sigma: float, osl_mu: float, osl_sigma: float) -> tuple[float, float]:
    """(mean, variance) of the context of a sequence caught mid-decode: its prompt s plus
    the part of its output o generated so far. A sequence is in flight for a time ∝ o
    (length-biased) and uniformly far through it, so with lognormal o,

        E[c] = E[s] + E[o²]/(2E[o]),   Var c = Var s + E[o³]/(3E[o]) − (E[o²]/(2E[o]))²,
        E[o^k] = exp(k·μ + k²σ²/2),    Var s = E[s]²·(exp(σ_s²) − 1)."""
    moment = [float(np.exp(k * osl_mu + 0.5 * k * k * osl_sigma ** 2)) for k in (1, 2, 3)]
    half = moment[1] / (2.0 * moment[0])
    return isl_mean + half, isl_mean ** 2 * float(np.expm1(isl_sigma ** 2)) + moment[2] / (3.0 * moment[0]) - half ** 2


def settled_batch(step_of, steps_per_request: float, rate_per_replica: float, slots: float) -> float:
    """b* of Little's law, b = λ·(steps a request needs)·step(b), at most ``slots``: the batch a
    decode replica settles at under its load (bisection; the right side grows more slowly
    than b where the replica keeps up)."""
    def short(b):
        return rate_per_replica * steps_per_request * float(step_of(max(b, 1.0))) > b
    if short(slots):
        return float(slots)
    lo, hi = 0.0, float(slots)
    for _ in range(32):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if short(mid) else (lo, mid)
    return hi


def step_states(step_of, batch: float, replicas: int, context_mean: float, context_var: float, slots: float,
                points: int = 15):
    """(durations, time probabilities, batch) of a decode replica's steps around its settled
    batch b*: b normal with variance b*·(1 + ε)/n — Poisson over the pool's n replicas, which
    take joins by fewest sequences, widened by ε = d ln step/d ln b (a fuller batch steps
    slower and keeps its sequences longer; fitted against the simulator) — clipped to
    [1, slots]; and the batch's mean context normal around ``context_mean`` with variance
    ``context_var``/b. ``step_of(b, context)`` broadcasts."""
    b0 = max(batch, 1.0)
    up, down = float(step_of(b0 * 1.05, context_mean)), float(step_of(b0 / 1.05, context_mean))
    elasticity = min(max(np.log(up / down) / (2.0 * np.log(1.05)), 0.0), 1.0)
    z = np.linspace(-4.0, 4.0, points)
    pz = np.exp(-0.5 * z * z)
    pz /= pz.sum()
    b = np.clip(b0 + z * np.sqrt(b0 * (1.0 + elasticity) / max(replicas, 1)), 1.0, max(slots, 1.0))[:, None]
    context = np.maximum(context_mean + z[None, :] * np.sqrt(context_var / b), 1.0)
    durations = np.asarray(step_of(b, context), dtype=float)
    return durations, pz[:, None] * pz[None, :], np.broadcast_to(b, durations.shape)
