"""Queueing for a pool (curve 9): Erlang C against textbook values, the p99 wait, SLO capacity
f(n) and its inverse `servers_needed`. Expected values are computed here by hand (Erlang B
recursion, closed forms), never copied from the functions under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.curves.queueing import (
    capacity_table,
    cluster_factor,
    erlang_c,
    servers_needed,
    servers_needed_many,
    slo_capacity_rps,
    tail_rate_per_s,
    wait_quantile_s,
    window_share,
)
from optimizer.curves.tail import law, slack_table


def wait_only(budget_s: float):
    """A budget for the wait alone: the stages after it take no time (X = 0), so f(n) is the
    largest λ whose p99 wait fits the budget."""
    return slack_table(law([0.0]), [law([0.0])], budget_s)


def erlang_c_by_recursion(n: int, a: float) -> float:
    """Textbook route: Erlang B by B(0) = 1, B(k) = a·B(k−1) / (k + a·B(k−1)); then
    C = n·B / (n − a·(1 − B))."""
    b = 1.0
    for k in range(1, n + 1):
        b = a * b / (k + a * b)
    return n * b / (n - a * (1 - b))


# --------------------------------------------------------------------------- Erlang C


def test_erlang_c_two_servers_one_erlang():
    assert float(erlang_c(2, 1.0)) == pytest.approx(1 / 3, rel=1e-12)


def test_erlang_c_three_servers_two_erlangs():
    # B(3, 2) = (8/6) / (1 + 2 + 2 + 8/6) = 4/19;  C = 3·(4/19) / (3 − 2·15/19) = 4/9
    assert float(erlang_c(3, 2.0)) == pytest.approx(4 / 9, rel=1e-12)


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.5, 0.8, 0.95, 0.999])
def test_erlang_c_single_server_is_rho(rho):
    assert float(erlang_c(1, rho)) == pytest.approx(rho, rel=1e-12)


@pytest.mark.parametrize("n,a", [(10, 8.0), (5, 4.5), (20, 12.0), (50, 45.0), (100, 97.0), (4, 0.01)])
def test_erlang_c_matches_the_erlang_b_recursion(n, a):
    assert float(erlang_c(n, a)) == pytest.approx(erlang_c_by_recursion(n, a), rel=1e-9)


def test_erlang_c_n10_a8_value():
    # the recursion gives B(10, 8) = 0.12166, C(10, 8) = 0.40918 (published tables: 0.409)
    assert erlang_c_by_recursion(10, 8.0) == pytest.approx(0.40918, abs=5e-5)
    assert float(erlang_c(10, 8.0)) == pytest.approx(0.409, abs=5e-4)


def test_erlang_c_edges_and_vectorisation():
    assert float(erlang_c(4, 0.0)) == 0.0
    assert float(erlang_c(4, 4.0)) == 1.0  # saturated: every arrival waits
    assert float(erlang_c(4, 9.0)) == 1.0
    grid = erlang_c(np.array([1, 2, 10]), np.array([0.5, 1.0, 8.0]))
    assert grid.tolist() == pytest.approx([0.5, 1 / 3, erlang_c_by_recursion(10, 8.0)])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 200), load=st.floats(0.01, 0.99))
def test_erlang_c_recursion_property(n, load):
    a = load * n
    assert float(erlang_c(n, a)) == pytest.approx(erlang_c_by_recursion(n, a), rel=1e-7, abs=1e-12)


# --------------------------------------------------------------------------- p99 wait


def test_p99_wait_mm1():
    # M/M/1, λ = 0.8/s, S̄ = 1 s: C = ρ = 0.8, t99 = ln(ρ/0.01) / (μ − λ) = ln 80 / 0.2 = 21.91 s
    lam, s = 0.8, 1.0
    expected = math.log(0.8 / 0.01) / (1.0 - 0.8)
    assert expected == pytest.approx(21.910, abs=1e-3)
    assert float(wait_quantile_s(lam, 1, s, 1.0)) == pytest.approx(expected, rel=1e-12)
    # Allen–Cunneen: deterministic service halves it, c_s² = 3 doubles it
    assert float(wait_quantile_s(lam, 1, s, 0.0)) == pytest.approx(expected / 2, rel=1e-12)
    assert float(wait_quantile_s(lam, 1, s, 3.0)) == pytest.approx(expected * 2, rel=1e-12)


def test_heavy_tail_leaves_exponential_service_alone_and_is_takacs_for_one_server():
    # exponential service: r₃ = E[S³]/E[S]³ = 6, the conditional wait of M/M/1 is exponential
    assert float(wait_quantile_s(0.8, 1, 1.0, 1.0, service_third_ratio=6.0)) == pytest.approx(
        float(wait_quantile_s(0.8, 1, 1.0, 1.0)), rel=1e-9)
    # a third moment below the exponential's never makes the law lighter
    assert float(tail_rate_per_s(0.2, 0.8, 1, 1.0, 0.0, 1.0)) == pytest.approx(0.2)
    # by hand, M/G/1 at ρ = 0.8, S̄ = 1, c² = 0.8, r₃ = 8: E[W] = ρ·S̄·(1 + c²)/(2(1 − ρ)) = 3.6,
    # E[W²] = 2E[W]² + λ·E[S³]/(3(1 − ρ)) = 25.92 + 10.667; given a wait (prob. ρ): m₁ = 4.5,
    # m₂ = 45.733, cv² = 1.2584 → a gamma of shape 0.79466 and scale 5.6628; its p99 given a
    # wait is at (1 − 0.99)/... matched at the 1 % tail: t = 5.6628·Q⁻¹(0.79466, 0.01)
    from scipy.special import gammainccinv
    shape = 4.5**2 / (45.7333333 - 4.5**2)
    assert shape == pytest.approx(0.79466, rel=1e-4)
    t = 4.5 / shape * float(gammainccinv(shape, 0.01))
    theta = (1.0 - 0.8) * 2.0 / 1.8
    assert float(tail_rate_per_s(theta, 0.8, 1, 1.0, 0.8, 8.0)) == pytest.approx(-math.log(0.01) / t, rel=1e-6)


@pytest.mark.parametrize("quadratic_s_per_token2", [0.5e-9, 2e-9])
def test_heavy_tailed_service_wait_against_a_simulated_single_server(quadratic_s_per_token2):
    # one FIFO server, log-normal prompt lengths (mean 3,000, p99 12,000), service 10 ms + 25 µs a
    # token + a quadratic term (r₃ 5.7 and 18.6): the two-moment exponential reads the p99 wait
    # 4–25 % low; with the third moment it is never more than 5 % low and at most 20 % high
    # (the heavier the tail, the more conservative), against 400,000 simulated arrivals
    from optimizer.commands.verify.engine import fifo_pool
    from optimizer.curves.lengths import LengthDistribution, service_moments

    lengths = LengthDistribution(3000, 12000)

    def service(s, c):
        s = np.asarray(s, dtype=float)
        return 0.01 + 25e-6 * s + quadratic_s_per_token2 * s * s
    mean, scv, third = service_moments(service, lengths, 0.0, 0.0)
    rng = np.random.default_rng(7)
    for rho in (0.6, 0.8):
        lam = rho / mean
        n = 400_000
        arrive = np.cumsum(rng.exponential(1 / lam, n))
        start, _ = fifo_pool(arrive, 1, service(lengths.sample(rng, n), 0))
        simulated = float(np.quantile((start - arrive)[n // 10:], 0.99))
        two_moments = float(wait_quantile_s(lam, 1, mean, scv))
        three = float(wait_quantile_s(lam, 1, mean, scv, service_third_ratio=third))
        assert two_moments < 0.97 * simulated
        assert 0.95 * simulated <= three <= 1.2 * simulated


def test_p99_wait_mm1_other_units():
    # 50 ms service, ρ = 0.5: λ = 10/s, μ = 20/s, t99 = ln(50)/10 = 0.3912 s
    assert float(wait_quantile_s(10.0, 1, 0.05, 1.0)) == pytest.approx(math.log(0.5 / 0.01) / 10.0, rel=1e-12)


def test_p99_wait_mmn_hand_value():
    # n = 10, S̄ = 0.5 s, λ = 16/s → a = 8, drain = n/S̄ − λ = 4/s
    c = erlang_c_by_recursion(10, 8.0)
    expected = math.log(c / 0.01) / 4.0
    assert float(wait_quantile_s(16.0, 10, 0.5, 1.0)) == pytest.approx(expected, rel=1e-9)
    # p95 instead of p99
    assert float(wait_quantile_s(16.0, 10, 0.5, 1.0, quantile=0.95)) == pytest.approx(math.log(c / 0.05) / 4.0,
                                                                                     rel=1e-9)


def test_p99_wait_zero_when_few_wait_and_inf_when_saturated():
    # C(20, 2) is far below 1 %: the p99 arrival does not wait at all
    assert erlang_c_by_recursion(20, 2.0) < 0.01
    assert float(wait_quantile_s(2.0, 20, 1.0, 1.0)) == 0.0
    assert float(wait_quantile_s(1.0, 1, 1.0, 1.0)) == math.inf
    assert float(wait_quantile_s(5.0, 4, 1.0, 1.0)) == math.inf


# --------------------------------------------------------------------------- SLO capacity f(n)

CASES = [  # (mean service s, c_s², p99 wait budget s, ρ_max)
    (0.1, 0.5, 0.05, 0.85),
    (0.2, 1.0, 0.1, 0.85),
    (0.5, 0.2, 0.01, 0.85),
    (0.05, 0.0, 0.2, 0.85),
    (1.0, 1.0, 0.0, 0.9),
    (0.3, 2.0, 1.0, 0.7),
]


@pytest.mark.parametrize("s,scv,budget,rho", CASES)
def test_slo_capacity_shape(s, scv, budget, rho):
    n = np.arange(1, 129)
    f = capacity_table(128, s, scv, wait_only(budget), rho)
    cap = rho * n / s
    assert np.all(f > 0)
    assert np.all(np.diff(f) > 0)  # increasing
    assert np.all(f <= cap * (1 + 1e-12))  # capped by ρ_max·n/S̄
    per_replica = f / n
    assert np.all(np.diff(per_replica) >= -1e-9 * per_replica[1:])  # pooling gains: f(n)/n never falls
    # convex (increments never shrink) as long as the utilisation cap does not bind
    below = f < cap * (1 - 1e-9)
    inc = np.diff(f)
    both = below[1:-1] & below[2:]
    assert np.all(inc[1:][both] >= inc[:-1][both] * (1 - 1e-6))


@pytest.mark.parametrize("s,scv,budget,rho", CASES)
def test_slo_capacity_is_the_largest_rate_meeting_the_budget(s, scv, budget, rho):
    for n in (1, 3, 10, 40):
        f = float(slo_capacity_rps(n, s, scv, wait_only(budget), rho)[0])
        assert float(wait_quantile_s(f, n, s, scv)) <= budget + 1e-9
        at_cap = f >= rho * n / s * (1 - 1e-9)
        assert at_cap or float(wait_quantile_s(f * (1 + 1e-6), n, s, scv)) > budget


def test_slo_capacity_single_server_closed_form():
    # n = 1, c_s² = 1: t99 = ln(ρ/0.01)/(μ − λ) ≤ W. With μ = 10/s and W = 0.5 s the largest ρ solves
    # ln(100ρ) = 5·(1 − ρ); bisection by hand here.
    mu, w = 10.0, 0.5
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if math.log(max(mid, 1e-300) / 0.01) / (mu - mu * mid) <= w:
            lo = mid
        else:
            hi = mid
    assert float(slo_capacity_rps(1, 0.1, 1.0, wait_only(w), 0.99)[0]) == pytest.approx(lo * mu, rel=1e-6)
    # the utilisation cap binds when it is the tighter of the two
    assert float(slo_capacity_rps(1, 0.1, 1.0, wait_only(w), 0.3)[0]) == pytest.approx(0.3 * mu, rel=1e-12)


def test_slo_capacity_zero_for_negative_budget_and_small_for_zero():
    assert slo_capacity_rps(np.array([1, 8]), 0.1, 1.0, wait_only(-0.01), 0.85).tolist() == [0.0, 0.0]
    # budget 0: the p99 arrival must not wait at all, C(n, a) ≤ 1 %: M/M/1 allows ρ ≤ 0.01
    assert float(slo_capacity_rps(1, 0.1, 1.0, wait_only(0.0), 0.85)[0]) == pytest.approx(0.01 / 0.1, rel=1e-6)


def test_slo_capacity_grows_with_budget():
    budgets = np.array([0.0, 0.01, 0.05, 0.2, 1.0])
    f = np.array([float(slo_capacity_rps(8, 0.1, 0.5, wait_only(b), 0.85)[0]) for b in budgets])
    assert np.all(np.diff(f) >= 0)
    assert f[-1] == pytest.approx(0.85 * 8 / 0.1)


# --------------------------------------------------------------------------- one hour's p99


def test_cluster_factor_mm1_hand_value():
    # M/M/1, λ = 0.8/s, S̄ = 1 s, c_s² = 1, θ = μ − λ = 0.2/s: δ = 1/0.8 − 1 = 0.25 s,
    # σ² = 1 + 1/0.64 = 2.5625 s², κ = 2/(0.2·0.25) + 2.5625/0.0625 = 40 + 41 = 81
    assert float(cluster_factor(0.2, 0.8, 1, 1.0, 1.0, 1.0)) == pytest.approx(81.0, rel=1e-12)
    # one server twice as fast for two servers: δ = 1/1.6 − 1/2 = 0.125, σ² = 1/4 + 1/2.56
    sigma2 = 0.25 + 1 / 2.56
    assert float(cluster_factor(0.4, 1.6, 2, 1.0, 1.0, 1.0)) == pytest.approx(2 / (0.4 * 0.125) + sigma2 / 0.125**2)
    assert float(cluster_factor(0.2, 1.0, 1, 1.0, 1.0, 1.0)) == math.inf  # saturated: no drift back


@pytest.mark.parametrize("rho", [0.6, 0.8])
def test_cluster_factor_against_a_simulated_mm1(rho):
    # 400 windows of 5,000 requests: the variance of a window's share over the long-run p99,
    # over the binomial p(1 − p)/N, against κ (within −20 % … +40 %; measured +9 % and +15 %)
    from optimizer.commands.verify.engine import fifo_pool

    rng = np.random.default_rng(3)
    windows, per = 400, 5000
    arrive = np.cumsum(rng.exponential(1 / rho, windows * per))
    start, _ = fifo_pool(arrive, 1, rng.exponential(1.0, windows * per))
    wait = start - arrive
    share = (wait > np.quantile(wait, 0.99)).reshape(windows, per).mean(axis=1)
    measured = share.var() * per / (0.01 * 0.99)
    kappa = float(cluster_factor(1 - rho, rho, 1, 1.0, 1.0, 1.0))
    assert measured > 10  # clustered, far from independent draws
    assert 0.8 * measured <= kappa <= 1.4 * measured


def test_window_share_solves_its_equation():
    tail, kappa, count, z = 0.01, 100.0, 40_000.0, 1.2815515655446004  # z of 0.9
    p = float(window_share(tail, kappa, count, z))
    assert p + z * math.sqrt(p * kappa / count) == pytest.approx(tail, rel=1e-12)
    assert 0 < p < tail
    assert float(window_share(tail, kappa, count, 0.0)) == tail  # the long run
    assert float(window_share(tail, math.inf, count, z)) == 0.0  # saturated: nothing is allowed
    # a longer window (more requests) or a lower confidence asks less
    assert float(window_share(tail, kappa, 4 * count, z)) > p
    assert float(window_share(tail, kappa, count, 0.5 * z)) > p


def test_slo_capacity_with_an_hour_window_never_exceeds_the_long_run():
    # the hour's p99 met in 90 % / 98 % of hours asks more of a pool than the long run, less so
    # for bigger pools (more requests an hour) and for longer windows
    n = np.arange(1, 33)
    long_run = capacity_table(32, 0.1, 1.0, wait_only(0.5), 0.85)
    z90, z98 = 1.2815515655446004, 2.0537489106318225
    hour90 = capacity_table(32, 0.1, 1.0, wait_only(0.5), 0.85, window_s=3600.0, window_z=z90)
    hour98 = capacity_table(32, 0.1, 1.0, wait_only(0.5), 0.85, window_s=3600.0, window_z=z98)
    day90 = capacity_table(32, 0.1, 1.0, wait_only(0.5), 0.85, window_s=86400.0, window_z=z90)
    assert np.all(hour98 <= hour90) and np.all(hour90 <= day90) and np.all(day90 <= long_run)
    assert hour90[0] < 0.99 * long_run[0]  # one replica feels it
    assert np.all(np.diff(hour90 / n) >= -1e-9)  # pooling gains stay
    # the rate found meets its window share: the long-run p99 at f is below the budget
    f = float(slo_capacity_rps(1, 0.1, 1.0, wait_only(0.5), 0.85, window_s=3600.0, window_z=z90)[0])
    assert float(wait_quantile_s(f, 1, 0.1, 1.0)) < 0.5


# --------------------------------------------------------------------------- servers_needed


@pytest.mark.parametrize("s,scv,budget,rho", CASES)
def test_servers_needed_inverts_the_table(s, scv, budget, rho):
    table = capacity_table(64, s, scv, wait_only(budget), rho)
    rng = np.random.default_rng(7)
    for lam in np.concatenate([rng.uniform(1e-6, table[-1], 200), table[:10], table[:10] * (1 + 1e-9)]):
        n = servers_needed(float(lam), table)
        assert 1 <= n <= 64
        assert table[n - 1] >= lam * (1 - 1e-12)  # f(n) ≥ λ
        if n > 1:
            assert table[n - 2] < lam  # f(n − 1) < λ
    assert servers_needed(0.0, table) == 0
    assert servers_needed(-1.0, table) == 0


@pytest.mark.parametrize("s,scv,budget,rho", CASES)
def test_servers_needed_beyond_the_table_is_never_optimistic(s, scv, budget, rho):
    full = capacity_table(200, s, scv, wait_only(budget), rho)
    for short_len in (2, 5, 20, 31, 50):
        short = full[:short_len]
        for lam in np.linspace(full[short_len - 1] * 1.01, full[-1] * 0.999, 25):
            exact = servers_needed(float(lam), full)
            assert servers_needed(float(lam), short) >= exact


@pytest.mark.parametrize("s,scv,budget,rho", CASES)
def test_servers_needed_many_equals_one_at_a_time(s, scv, budget, rho):
    table = capacity_table(40, s, scv, wait_only(budget), rho)
    rng = np.random.default_rng(3)
    rates = np.concatenate([[0.0, -1.0], rng.uniform(0, table[-1] * 3, 300), table, table * (1 + 1e-9)])
    assert servers_needed_many(rates, table).tolist() == [servers_needed(float(x), table) for x in rates]


def test_servers_needed_beyond_table_where_the_cap_binds():
    # S̄ = 0.1 s, c_s² = 0.5, budget 50 ms, ρ_max 0.85: f grows by ~9.7/s per replica up to n = 32,
    # then by ρ_max/S̄ = 8.5/s (the cap binds). 60 replicas carry at most 0.85·60/0.1 = 510/s.
    full = capacity_table(80, 0.1, 0.5, wait_only(0.05), 0.85)
    lam = 0.85 * 60 / 0.1 * 0.999
    assert servers_needed(lam, full) == 60
    assert servers_needed(lam, full[:31]) >= 60  # extrapolating by the last (convex) increment gave 57
