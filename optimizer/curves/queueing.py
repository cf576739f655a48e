"""Queueing for a pool of replicas (curve 9): Erlang C, the wait's law, SLO capacity f(n).

A pool of n identical servers (prefill replicas) takes Poisson arrivals at λ per second;
each job needs a service time S with mean S̄ and squared coefficient of variation c_s².

* Erlang C (M/M/n):  P(wait) = C(n, a),  a = λ·S̄ the offered load;
  computed as C = n·B / (n − a·(1 − B)) from Erlang B, B = Pois(n; a) / Pois(≤ n; a).
* The wait (`wait_law`): P(W > t) = C·exp(−θ·t), θ = (n/S̄ − λ)·2/(1 + c_s²) — M/M/n's
  drain rate, stretched by the Allen–Cunneen factor (c_a² + c_s²)/2 = (1 + c_s²)/2 for M/G/n;
  its q-quantile is t_q = ln(C / (1 − q)) / θ (0 when C ≤ 1 − q).
* A heavy tail (`tail_rate_per_s`): long prompts make the wait's tail heavier than that
  exponential. Given a wait, its first two moments are known exactly for M/G/1 (Takács) and,
  for n servers, taken from one server n times as fast (service S/n, the law's own
  reading of M/G/n):  m₁ = 1/θ,  m₂ = 2ρ·m₁² + r₃·S̄²/(3·n²·(1 − ρ)),  r₃ = E[S³]/E[S]³,
  ρ = λ·S̄/n; a gamma law with those moments (shape k = m₁²/(m₂ − m₁²), never above 1, so
  never lighter than the exponential) replaces θ by the rate of the exponential with the same
  (1 − q) quantile, θ' = −ln(1 − q)/t, t its quantile. For exponential service r₃ = 6 gives
  k = 1 and θ' = θ. Checked against the simulation of one server with log-normal prompts
  (tests/test_queueing.py).
* SLO capacity f(n) (`slo_capacity_rps`): the largest λ whose requests meet the pool's
  budget b in share q, wait and the stages after it together —
      (1 − C)·P(X₀ > b) + C·Q(θ) ≤ 1 − q   (`tail`, `tail.SlackTable`)
  — with utilisation λ·S̄/n ≤ ρ_max (near saturation the approximation runs low, so
  utilisation is capped). A constant stage x and no batching give the largest λ whose p99
  wait fits b − x.

One hour's p99 (`cluster_factor`, `window_share`; opt-in, `serving.slo_hours_met`): the
share above is a long-run share; a window of N = λ·T requests (an hour, as `verify` judges
one) has its own. Long waits come in clusters — a long prompt holds every prompt behind it
— so the window's share F over a high level has Var F ≈ κ·p(1 − p)/N with κ far above 1. A
cluster starts when a wait crosses the level; it overshoots by V, exponential at the tail's
rate θ' (memoryless), and the waits then drift back by δ = 1/λ − S_q/n per request with
variance σ² = c_s²·S̄²/n² + 1/λ² (one server n times as fast; S_q the per-prompt service
while prompts queue). The requests until it falls back, X, have E[X | V] = V/δ and
Var(X | V) = V·σ²/δ³ (a random walk's first passage), so E[X] = 1/(θ'δ),
E[X²] = 2/(θ'δ)² + σ²/(θ'δ³), and clusters arriving as a Poisson stream give
κ = E[X²]/E[X] = 2/(θ'·δ) + σ²/δ². A pool then meets the objective in a share c of windows
(z the standard normal quantile of c) when its long-run share p* satisfies
p* + z·√(p*·κ/N) ≤ 1 − q. Against 40 simulated hours of a DeepSeek-R1 prefill pool
(`benchmarks/hourly_p99_spread.py`, 1–4 replicas, 50–80 % busy) κ reads 0.57–1.38 × the measured
variance ratio (12–123; itself ±22 % from 40 hours).

f(n) is increasing and **convex** in n for a fixed budget while the utilisation cap does not
bind: per-replica capacity f(n)/n grows with the pool (pooling gains). Where the cap starts to
bind, f = ρ_max·n/S̄ grows more slowly than the increment just below it (f is the minimum of a
convex curve and that line, so it has a concave kink there), but f(n)/n never falls.
`capacity_table` gives f on the integers for the optimizer (see `formulations.pools` for how
it is used).

Batching servers (`optimizer.curves.prefill_batch`): a server that frees takes the prompts
waiting for it into one pass, at most k_B of them (a full pass of S_B seconds). A pass of
k prompts is taken to cost the chord S(k) = S̄ + (k − 1)·(S_B − S̄)/(k_B − 1) between one
prompt and a full pass, so a server whose passes carry k prompts serves one every S(k)/k.
A server that frees takes the Q prompts waiting, at most the K that fit its budget; if
none, the next arrival starts a pass alone. K varies from pass to pass (a long prompt fills
a pass alone); with only its mean k_B known, K − 1 is taken geometric (the widest law of
that mean), P(K ≥ j) = v^{j−1}, v = (k_B − 1)/k_B. With Q distributed as in M/M/n at
utilisation u, P(Q ≥ j) = C·u^j, and the mean batch k is the fixed point of

    k = (1 − C·u) + E[min(Q, K); Q ≥ 1] = 1 − C·u + C·u·m_q,   m_q = 1/(1 − u·v),
    u = λ·S(k)/(n·k),  C = C(n, n·u)

(the right side falls as k grows — bigger passes, lower utilisation, shorter queue — so
bisection finds it). A prompt waits with probability C at that k. A wait drains faster
than M/G/n at utilisation u would: while prompts queue, each pass takes those queued, on
average m_q = E[min(Q, K) | Q ≥ 1] = Σ_j u^{j−1}·v^{j−1} of them (k_B at saturation; a K
fixed at k_B would read the simulated batches 15–20 % high), so the queue drains at
θ = (n·m_q/S(m_q) − λ)·2/(1 + c_s²). The prompt that waited rides in such a pass with J
others, J geometric with mean m_q − 1 (`tail.geometric_weights`); one that found a server
free goes alone. The utilisation cap applies to the full-pass capacity:
λ ≤ ρ_max·n·k_B/S_B. With k_B = 1 all of this is the unbatched queue. Checked against the
FIFO-with-batching simulation (`optimizer.commands.verify.engine.fifo_pool`) in
tests/test_prefill_batch.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammaincc, gammainccinv, gammaln

from optimizer.curves.tail import SlackTable, geometric_weights


def erlang_c(servers, offered_load):
    """Probability an arrival waits in M/M/n with ``servers`` = n and a = λ·S̄ (a < n).

    Textbook check: n = 2, a = 1 → C = 1/3.
    """
    n = np.asarray(servers, dtype=float)
    a = np.asarray(offered_load, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        pmf = np.exp(n * np.log(a) - a - gammaln(n + 1.0))
        blocking = pmf / gammaincc(n + 1.0, a)  # Poisson cdf P(X ≤ n) = Q(n + 1, a)
        c = n * blocking / (n - a * (1.0 - blocking))
    c = np.where(a >= n, 1.0, c)
    c = np.where(a <= 0, 0.0, c)
    return np.clip(c, 0.0, 1.0)


def batch_prompts(arrival_rate, servers, mean_service_s, full_prompts=1.0, full_pass_s=None, bracket=None,
                  iterations: int = 40):
    """Mean prompts per pass k of a batching pool, the fixed point of
    k = 1 − C·u + C·u·m_q(u) at u = λ·S(k)/(n·k) (module docstring); 1
    without batching (``full_prompts`` ≤ 1). ``bracket`` = (low, high) arrays known to hold
    it (k grows with λ, so the batches at a lower and a higher rate do)."""
    lam, n, s, kb = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                          (arrival_rate, servers, mean_service_s, full_prompts)))
    sb = s if full_pass_s is None else np.broadcast_to(np.asarray(full_pass_s, dtype=float), s.shape)
    out = np.ones(s.shape)
    batching = kb > 1.0
    if not batching.any():
        return out
    lam, n, s, kb, sb = (x[batching] for x in (lam, n, s, kb, sb))  # the others pass one prompt at a time
    lo, hi = (np.ones_like(s), kb.copy()) if bracket is None else (bracket[0][batching], bracket[1][batching])
    for _ in range(iterations):  # the right side falls as k grows: bisection
        k = 0.5 * (lo + hi)
        per = per_prompt_s(k, s, kb, sb)
        u = lam * per / n
        taken = 1.0 + erlang_c(n, lam * per) * u * (queued_batch(u, kb) - 1.0)
        grow = np.minimum(kb, taken) > k
        lo, hi = np.where(grow, k, lo), np.where(grow, hi, k)
    out[batching] = 0.5 * (lo + hi)
    return out


def queued_batch(utilisation, full_prompts):
    """m_q = E[min(Q, K) | Q ≥ 1] = 1/(1 − u·v), v = (k_B − 1)/k_B: the mean prompts of a pass
    taken from a queue (module docstring; k_B at and beyond saturation)."""
    u = np.asarray(utilisation, dtype=float)
    kb = np.maximum(np.asarray(full_prompts, dtype=float), 1.0)
    v = (kb - 1.0) / kb
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(u < 1.0, 1.0 / (1.0 - np.clip(u, 0.0, 1.0) * v), kb)
    return np.minimum(np.where(u <= 0, 1.0, m), kb)


def per_prompt_s(k, mean_service_s, full_prompts, full_pass_s):
    """S(k)/k: seconds per prompt of a pass of k prompts on the chord between one prompt (S̄)
    and a full pass (k_B prompts in S_B)."""
    k, s, kb, sb = (np.asarray(x, dtype=float) for x in (k, mean_service_s, full_prompts, full_pass_s))
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(kb > 1.0, (sb - s) / (kb - 1.0), 0.0)
    return (s + (k - 1.0) * slope) / k


CAPACITY_STEPS = 32  # bisection steps on λ: f(n) to 2⁻³² of the utilisation cap


@dataclass(frozen=True)
class WaitLaw:
    """P(W > t) = ``waits``·exp(−``rate_per_s``·t), and the mean prompts ``queued`` of a
    pass taken from a queue (1 without batching); arrays of one shape. rate ≤ 0: saturated."""

    waits: np.ndarray
    rate_per_s: np.ndarray
    queued: np.ndarray

    def quantile_s(self, quantile) -> np.ndarray:
        """t_q = max(0, ln(C/(1 − q)))/θ; inf when saturated."""
        tail = 1.0 - np.asarray(quantile, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(self.waits > tail, np.log(np.maximum(self.waits, 1e-300) / tail) / self.rate_per_s, 0.0)
        return np.where(self.rate_per_s <= 0, np.inf, t)


def tail_rate_per_s(rate_per_s, arrival_rate, servers, queue_service_s, service_scv, service_third_ratio,
                    quantile=0.99):
    """θ': the decay rate of the exponential whose (1 − q) quantile is that of the gamma law
    with a wait's first two moments given it waits (module docstring, "A heavy tail").
    ``queue_service_s`` is the service time per prompt while prompts queue (S̄, or S(m_q)/m_q
    when batching); ``service_third_ratio`` r₃ = 0 (not known) keeps θ."""
    theta, lam, n, sq, third, q = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (
        rate_per_s, arrival_rate, servers, queue_service_s, service_third_ratio, quantile)))
    out = theta.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = lam * sq / n
        m1 = 1.0 / theta
        cv2 = 2.0 * rho - 1.0 + third * sq * sq / (3.0 * n * n * (1.0 - rho) * m1 * m1)
    heavy = (theta > 0) & (third > 0) & (rho < 1.0) & (cv2 > 1.0)  # else the exponential (shape 1)
    shape = np.maximum(1.0 / cv2[heavy], 1e-3)
    tail = 1.0 - q[heavy]
    out[heavy] = -np.log(tail) * shape / (m1[heavy] * gammainccinv(shape, tail))
    return out


def wait_law(arrival_rate, servers, mean_service_s, service_scv, full_prompts=1.0, full_pass_s=None,
             batch=None, service_third_ratio=0.0, quantile=0.99) -> WaitLaw:
    """The wait of an arrival (module docstring): C at the mean batch k (``batch``, else
    `batch_prompts`), θ = (n·m_q/S(m_q) − λ)·2/(1 + c_s²) (m_q = 1 and S̄ without
    batching), made heavier by `tail_rate_per_s` where ``service_third_ratio`` is known (its
    rate then matches the law's ``quantile``)."""
    lam = np.asarray(arrival_rate, dtype=float)
    n = np.asarray(servers, dtype=float)
    s = np.asarray(mean_service_s, dtype=float)
    kb = np.asarray(full_prompts, dtype=float)
    scv = np.asarray(service_scv, dtype=float)
    stretch = 2.0 / (1.0 + scv)
    if not np.any(kb > 1.0):
        theta = (n / s - lam) * stretch
        return WaitLaw(erlang_c(n, lam * s), tail_rate_per_s(theta, lam, n, s, scv, service_third_ratio, quantile),
                       np.ones(np.broadcast(lam, n, s).shape))
    sb = s if full_pass_s is None else np.asarray(full_pass_s, dtype=float)
    k = batch_prompts(lam, n, s, kb, sb) if batch is None else batch
    per = per_prompt_s(k, s, kb, sb)
    queued = queued_batch(lam * per / n, kb)
    per_queued = per_prompt_s(queued, s, kb, sb)
    theta = (n / per_queued - lam) * stretch
    return WaitLaw(erlang_c(n, lam * per), tail_rate_per_s(theta, lam, n, per_queued, scv, service_third_ratio,
                                                           quantile), queued)


def wait_quantile_s(arrival_rate, servers, mean_service_s, service_scv, quantile=0.99, full_prompts=1.0,
                    full_pass_s=None, batch=None, service_third_ratio=0.0):
    """q-quantile of the wait before service starts (seconds), `wait_law`'s; inf at or
    beyond saturation."""
    return wait_law(arrival_rate, servers, mean_service_s, service_scv, full_prompts, full_pass_s,
                    batch, service_third_ratio, quantile).quantile_s(quantile)


def cluster_factor(tail_rate_per_s, arrival_rate, servers, queue_service_s, mean_service_s, service_scv):
    """κ = 2/(θ'·δ) + σ²/δ²: how many times the binomial variance the share of requests over
    a high wait level has in a window (module docstring, "One hour's p99"); δ = 1/λ − S_q/n,
    σ² = c_s²·S̄²/n² + 1/λ². inf at or beyond saturation."""
    theta, lam, n, sq, s, scv = (np.asarray(x, dtype=float) for x in (tail_rate_per_s, arrival_rate, servers,
                                                                      queue_service_s, mean_service_s, service_scv))
    with np.errstate(divide="ignore", invalid="ignore"):
        drift = 1.0 / lam - sq / n
        spread = scv * s * s / (n * n) + 1.0 / (lam * lam)
        kappa = 2.0 / (theta * drift) + spread / (drift * drift)
    return np.where((drift > 0) & (theta > 0), kappa, np.inf)


def window_share(tail, kappa, window_requests, z):
    """p*: the long-run share over budget whose window share stays ≤ ``tail`` (= 1 − q) at
    z standard deviations, p + z·√(p·κ/N) = tail (module docstring, "One hour's p99"): with
    b = z·√(κ/N), √p = (√(b² + 4·tail) − b)/2. ``tail`` itself where z = 0."""
    tail, kappa, count, z = (np.asarray(x, dtype=float) for x in (tail, kappa, window_requests, z))
    with np.errstate(divide="ignore", invalid="ignore"):
        b = z * np.sqrt(kappa / count)
        root = (np.sqrt(b * b + 4.0 * tail) - b) / 2.0
    return np.where(z > 0, np.where(np.isfinite(root), root * root, 0.0), tail)


def slo_capacity_rps(servers, mean_service_s, service_scv, slack: SlackTable, max_utilization, quantile=0.99,
                     full_prompts=1.0, full_pass_s=None, law=None, service_third_ratio=0.0, window_s=0.0,
                     window_z=0.0):
    """f(n): the largest arrival rate whose requests meet the budget of ``slack`` in share
    ``quantile`` — P(W + X > b) ≤ 1 − q (module docstring) — and whose utilisation stays
    ≤ ρ_max (of the full-pass capacity n·k_B/S_B when batching); 0 where even an empty pool
    misses. ``slack`` carries one riding law per count of prompts beside a waiting one
    (geometric, `tail.geometric_weights`); ``law`` says which of its laws each entry uses
    (default: its only one). With ``window_z`` > 0, one window of ``window_s`` seconds meets
    the share at z standard deviations instead of the long run: P(W + X > b) ≤ p*
    (`window_share`). Bisection on λ (P(W + X > b) grows with λ, and p* falls with it);
    every argument broadcasts, so many tables are sized at once."""
    n, s, scv, kb, q, third = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, dtype=float)) for x in
                                                    (servers, mean_service_s, service_scv, full_prompts, quantile,
                                                     service_third_ratio)))
    sb = s if full_pass_s is None else np.broadcast_to(np.asarray(full_pass_s, dtype=float), s.shape)
    row = None if law is None else np.broadcast_to(np.asarray(law), s.shape)
    top = max_utilization * n * np.maximum(kb, 1.0) / np.where(kb > 1.0, sb, s)
    laws = slack.log_q.shape[1]

    def misses(lam, k):
        wait = wait_law(lam, n, s, scv, kb, sb, batch=k, service_third_ratio=third, quantile=q)
        weights = geometric_weights(wait.queued - 1.0, laws) if laws > 1 else None
        allowed = 1.0 - q
        if window_z > 0:
            kappa = cluster_factor(wait.rate_per_s, lam, n, per_prompt_s(wait.queued, s, kb, sb), s, scv)
            allowed = window_share(allowed, kappa, lam * window_s, window_z)
        return slack.tail(wait.waits, wait.rate_per_s, weights, row) > allowed

    # the batch at the rates that bound λ brackets the batch at any rate between them, so each
    # step of the bisection on λ needs only a few steps of the one on k
    k_lo, k_hi = np.ones_like(top), batch_prompts(top, n, s, kb, sb)
    fits_top = ~misses(top, k_hi)
    lo = np.zeros_like(top)
    hi = top.copy()
    for _ in range(CAPACITY_STEPS):
        mid = 0.5 * (lo + hi)
        k = batch_prompts(mid, n, s, kb, sb, bracket=(k_lo, k_hi), iterations=4)
        ok = ~misses(mid, k)
        lo, k_lo = np.where(ok, mid, lo), np.where(ok, k, k_lo)
        hi, k_hi = np.where(ok, hi, mid), np.where(ok, k_hi, k)
    return np.where(fits_top, top, lo)


def capacity_table(max_servers: int, mean_service_s, service_scv, slack: SlackTable, max_utilization, quantile=0.99,
                   full_prompts=1.0, full_pass_s=None, service_third_ratio=0.0, window_s=0.0, window_z=0.0):
    """f(1), …, f(max_servers) as an array (index k−1 holds f(k))."""
    return slo_capacity_rps(np.arange(1, max_servers + 1), mean_service_s, service_scv, slack, max_utilization,
                            quantile, full_prompts, full_pass_s, service_third_ratio=service_third_ratio,
                            window_s=window_s, window_z=window_z)


def servers_needed_many(arrival_rates, table) -> np.ndarray:
    """`servers_needed` for an array of arrival rates at once (one pool, many states)."""
    table = np.asarray(table)
    target = np.asarray(arrival_rates, dtype=float) * (1 - 1e-12)
    inside = np.searchsorted(table, np.minimum(target, table[-1]), side="left") + 1
    beyond = len(table) + np.ceil((target - table[-1]) / (table[-1] / len(table)))
    return np.where(target <= 0, 0, np.where(target <= table[-1], inside, beyond)).astype(np.int64)


def servers_needed(arrival_rate: float, table) -> int:
    """Smallest integer n with f(n) ≥ λ, from a `capacity_table` (0 for no load). Beyond the
    table (N entries), f is extended at its per-replica capacity f(N)/N — safe, because
    f(n)/n never falls. (Not by its last increment: once the utilisation cap binds, f grows
    only by ρ_max/S̄ per replica, less than the increments just below the cap.)"""
    if arrival_rate <= 0:
        return 0
    table = np.asarray(table)
    target = arrival_rate * (1 - 1e-12)
    if target <= table[-1]:
        return int(np.searchsorted(table, target, side="left")) + 1
    step = table[-1] / len(table)
    return len(table) + int(np.ceil((target - table[-1]) / step))
