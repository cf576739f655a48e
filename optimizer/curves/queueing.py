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

Batching servers (`optimizer.curves.prefill_batch`): a server that frees takes the prompts
waiting for it into one pass, at most k_B of them (a full pass of S_B seconds). A pass of
k prompts is taken to cost the chord S(k) = S̄ + (k − 1)·(S_B − S̄)/(k_B − 1) between one
prompt and a full pass, so a server whose passes carry k prompts serves one every S(k)/k.
The mean batch k is the fixed point of

    k = min(k_B, P(Q = 0) + E[Q; Q ≥ 1]) = min(k_B, 1 + C·ρ²/(1 − ρ)),
    ρ = λ·S(k)/(n·k),  C = C(n, n·ρ)

— a server that frees takes the Q prompts waiting (if none, the next arrival starts a pass
alone), Q distributed as in M/M/n at that utilisation: P(Q ≥ 1) = C·ρ, E[Q] = C·ρ/(1 − ρ).
The right side falls as k grows (bigger passes, lower utilisation, shorter queue), so
bisection finds it. The batching queue drains a long queue in one pass and is shorter than
M/M/n's; this mean-field k stands in for that self-limiting drain. The p99 wait is then the M/G/n one above at mean service S(k)/k (c_s² of one prompt),
and the utilisation cap applies to the full-pass capacity: λ ≤ ρ_max·n·k_B/S_B. With
k_B = 1 all of this is the unbatched queue. That a batched prompt's own pass is longer
than its prefill alone (the other prompts' tokens) is not a wait: the config's p99 prefill
carries it (`optimizer.configs.prefill_config`). Checked against the FIFO-with-batching
simulation (`optimizer.verify.engine.fifo_pool`) in tests/test_prefill_batch.py.
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


def batch_prompts(arrival_rate, servers, mean_service_s, full_prompts=1.0, full_pass_s=None, bracket=None,
                  iterations: int = 40):
    """Mean prompts per pass k of a batching pool, the fixed point of
    k = min(k_B, 1 + C·ρ²/(1 − ρ)) at ρ = λ·S(k)/(n·k) (module docstring); 1 without
    batching (``full_prompts`` ≤ 1). ``bracket`` = (low, high) arrays known to hold it (k
    grows with λ, so the batches at a lower and a higher rate do)."""
    lam, n, s, kb = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                          (arrival_rate, servers, mean_service_s, full_prompts)))
    sb = s if full_pass_s is None else np.broadcast_to(np.asarray(full_pass_s, dtype=float), s.shape)
    if np.all(kb <= 1.0):
        return np.ones_like(s)
    lo, hi = (np.ones_like(s), np.maximum(kb, 1.0)) if bracket is None else bracket
    for _ in range(iterations):  # the right side falls as k grows: bisection
        k = 0.5 * (lo + hi)
        per = per_prompt_s(k, s, kb, sb)
        rho = lam * per / n
        with np.errstate(divide="ignore", invalid="ignore"):
            taken = np.where(rho < 1.0, 1.0 + erlang_c(n, lam * per) * rho * rho / (1.0 - rho), np.inf)
        grow = np.minimum(kb, taken) > k
        lo, hi = np.where(grow, k, lo), np.where(grow, hi, k)
    return 0.5 * (lo + hi)


def per_prompt_s(k, mean_service_s, full_prompts, full_pass_s):
    """S(k)/k: seconds per prompt of a pass of k prompts on the chord between one prompt (S̄)
    and a full pass (k_B prompts in S_B)."""
    k, s, kb, sb = (np.asarray(x, dtype=float) for x in (k, mean_service_s, full_prompts, full_pass_s))
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(kb > 1.0, (sb - s) / (kb - 1.0), 0.0)
    return (s + (k - 1.0) * slope) / k


def wait_quantile_s(arrival_rate, servers, mean_service_s, service_scv, quantile=0.99, full_prompts=1.0,
                    full_pass_s=None, batch=None):
    """q-quantile of the wait before service starts (seconds); inf at or beyond saturation.

    t_q = (1 + c_s²)/2 · max(0, ln(C / (1 − q)) / (n/S̄ − λ)); for a batching pool
    (``full_prompts`` k_B > 1 prompts in a full pass of ``full_pass_s``) S̄ is S(k)/k at the
    mean batch k (``batch``, else `batch_prompts`).
    """
    lam = np.asarray(arrival_rate, dtype=float)
    n = np.asarray(servers, dtype=float)
    s = np.asarray(mean_service_s, dtype=float)
    if np.any(np.asarray(full_prompts) > 1.0):
        sb = s if full_pass_s is None else full_pass_s
        k = batch_prompts(lam, n, s, full_prompts, sb) if batch is None else batch
        s = per_prompt_s(k, s, full_prompts, sb)
    c = erlang_c(n, lam * s)
    drain = n / s - lam
    tail = 1.0 - np.asarray(quantile, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(c > tail, np.log(np.maximum(c, 1e-300) / tail) / drain, 0.0)
    t = np.where(drain <= 0, np.inf, t)
    return t * (1.0 + np.asarray(service_scv, dtype=float)) / 2.0


def slo_capacity_rps(servers, mean_service_s, service_scv, wait_budget_s, max_utilization, quantile=0.99,
                     full_prompts=1.0, full_pass_s=None):
    """f(n): the largest arrival rate whose q-quantile wait fits ``wait_budget_s`` and whose
    utilisation stays ≤ ρ_max (of the full-pass capacity n·k_B/S_B when batching); 0 where
    the budget is negative. All arguments broadcast (bisection on λ — the wait quantile
    increases with λ)."""
    n, s, scv, budget, kb = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, dtype=float)) for x in
                                                  (servers, mean_service_s, service_scv, wait_budget_s, full_prompts)))
    sb = s if full_pass_s is None else np.broadcast_to(np.asarray(full_pass_s, dtype=float), s.shape)
    top = max_utilization * n * np.maximum(kb, 1.0) / np.where(kb > 1.0, sb, s)
    batching = dict(full_prompts=kb, full_pass_s=sb)
    # the batch at the rates that bound λ brackets the batch at any rate between them, so each
    # step of the bisection on λ needs only a few steps of the one on k
    k_lo, k_hi = np.ones_like(top), batch_prompts(top, n, s, kb, sb)
    fits_top = wait_quantile_s(top, n, s, scv, quantile, **batching, batch=k_hi) <= budget
    lo = np.zeros_like(top)
    hi = top.copy()
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        k = batch_prompts(mid, n, s, kb, sb, bracket=(k_lo, k_hi), iterations=8)
        ok = wait_quantile_s(mid, n, s, scv, quantile, **batching, batch=k) <= budget
        lo, k_lo = np.where(ok, mid, lo), np.where(ok, k, k_lo)
        hi, k_hi = np.where(ok, hi, mid), np.where(ok, k_hi, k)
    return np.where(budget < 0, 0.0, np.where(fits_top, top, lo))


def capacity_table(max_servers: int, mean_service_s, service_scv, wait_budget_s, max_utilization, quantile=0.99,
                   full_prompts=1.0, full_pass_s=None):
    """f(1), …, f(max_servers) as an array (index k−1 holds f(k))."""
    return slo_capacity_rps(np.arange(1, max_servers + 1), mean_service_s, service_scv, wait_budget_s, max_utilization,
                            quantile, full_prompts, full_pass_s)


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
