"""Queueing for a pool of replicas (curve 9): Erlang C, the p99 wait, SLO capacity f(n).

A pool of n identical servers (prefill replicas) takes Poisson arrivals at λ per second;
each job needs a service time S with mean S̄ and squared coefficient of variation c_s².

* Erlang C (M/M/n):  P(wait) = C(n, a),  a = λ·S̄ the offered load;
  computed as C = n·B / (n − a·(1 − B)) from Erlang B, B = Pois(n; a) / Pois(≤ n; a).
* M/M/n wait tail:    P(W > t) = C · exp(−(n/S̄ − λ)·t), so the q-quantile wait is
  t_q = ln(C / (1 − q)) / (n/S̄ − λ)   (0 when C ≤ 1 − q).
* Allen–Cunneen for M/G/n: scale the wait by (c_a² + c_s²)/2 = (1 + c_s²)/2.
* SLO capacity f(n): the largest λ with t_q(λ, n) ≤ the pool's queueing budget and
  utilisation λ·S̄/n ≤ ρ_max (the approximation underestimates the tail near saturation,
  so utilisation is capped).

f(n) is increasing and **convex** in n for a fixed budget while the utilisation cap does not
bind: per-replica capacity f(n)/n grows with the pool (pooling gains). Where the cap starts to
bind, f = ρ_max·n/S̄ grows more slowly than the increment just below it (f is the minimum of a
convex curve and that line, so it has a concave kink there), but f(n)/n never falls.
`capacity_table` gives f on the integers for the optimizer (see `formulations.pools` for how
it is used).
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaincc, gammaln


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


def wait_quantile_s(arrival_rate, servers, mean_service_s, service_scv, quantile=0.99):
    """q-quantile of the wait before service starts (seconds); inf at or beyond saturation.

    t_q = (1 + c_s²)/2 · max(0, ln(C / (1 − q)) / (n/S̄ − λ)).
    """
    lam = np.asarray(arrival_rate, dtype=float)
    n = np.asarray(servers, dtype=float)
    s = np.asarray(mean_service_s, dtype=float)
    c = erlang_c(n, lam * s)
    drain = n / s - lam
    tail = 1.0 - np.asarray(quantile, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(c > tail, np.log(np.maximum(c, 1e-300) / tail) / drain, 0.0)
    t = np.where(drain <= 0, np.inf, t)
    return t * (1.0 + np.asarray(service_scv, dtype=float)) / 2.0


def slo_capacity_rps(servers, mean_service_s, service_scv, wait_budget_s, max_utilization, quantile=0.99):
    """f(n): the largest arrival rate whose q-quantile wait fits ``wait_budget_s`` and whose
    utilisation stays ≤ ρ_max; 0 where the budget is negative. All arguments broadcast
    (bisection on λ — the wait quantile increases with λ)."""
    n, s, scv, budget = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, dtype=float)) for x in
                                              (servers, mean_service_s, service_scv, wait_budget_s)))
    top = max_utilization * n / s
    fits_top = wait_quantile_s(top, n, s, scv, quantile) <= budget
    lo = np.zeros_like(top)
    hi = top.copy()
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        ok = wait_quantile_s(mid, n, s, scv, quantile) <= budget
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.where(budget < 0, 0.0, np.where(fits_top, top, lo))


def capacity_table(max_servers: int, mean_service_s, service_scv, wait_budget_s, max_utilization, quantile=0.99):
    """f(1), …, f(max_servers) as an array (index k−1 holds f(k))."""
    return slo_capacity_rps(np.arange(1, max_servers + 1), mean_service_s, service_scv, wait_budget_s, max_utilization, quantile)


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
