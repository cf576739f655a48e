"""The tail of a sum (`optimizer.curves.tail`): textbook sojourn quantiles (M/M/1 exactly,
M/D/1 against Erlang's waiting-time formula), the reduction to today's sum of a p99 wait and
a constant stage, Monte Carlo checks of the uniform smear and of mixtures, the capacity
table's slack transform against the direct tail, and the gap law by hand. Expected values
are computed here, never read back from the functions under test."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest

from optimizer.curves.queueing import erlang_c, slo_capacity_rps, wait_quantile_s
from optimizer.curves.tail import (
    Law,
    Mixtures,
    compress,
    gap_law,
    gap_quantile_s,
    geometric_weights,
    inflight_context,
    law,
    mixture_quantile_s,
    pack,
    probability_edges,
    quantile_s,
    settled_batch,
    slack_table,
    sojourn_quantile_s,
    sojourn_survival,
    stack,
    step_states,
    survival,
)


def exponential(rate_per_s: float, points: int = 4096) -> Law:
    """Exp(rate) on the bins of `probability_edges`, each at its conditional mean (exact
    per bin: for F(x) = 1 − e^{−μx} the mean of [a, b] is a + 1/μ − (b − a)·e^{−μ(b−a)}/(1 − e^{−μ(b−a)}))."""
    edges = probability_edges(points)
    lo = -np.log1p(-edges[:-1]) / rate_per_s
    hi = np.where(edges[1:] < 1, -np.log1p(-np.minimum(edges[1:], 1 - 1e-16)) / rate_per_s, np.inf)
    width = hi - lo
    with np.errstate(invalid="ignore", over="ignore"):
        mean = np.where(np.isfinite(width), lo + 1 / rate_per_s - width * np.exp(-rate_per_s * width)
                        / -np.expm1(-rate_per_s * width), lo + 1 / rate_per_s)
    return law(mean, np.diff(edges))


# ---------------------------------------------------------------------------- textbook sojourns


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_mm1_sojourn_is_exponential(rho):
    """M/M/1: the sojourn W + S is Exp(μ − λ) exactly — C = ρ, θ = μ − λ and X = S ~ Exp(μ) in
    the tail-of-the-sum formula give e^{−(μ−λ)t}; its p99 is ln 100/(μ − λ)."""
    mu = 10.0
    lam = rho * mu
    service = exponential(mu)
    predicted = sojourn_quantile_s(rho, mu - lam, service)
    assert predicted == pytest.approx(math.log(100.0) / (mu - lam), rel=2e-3)
    t = np.array([0.05, 0.2, 1.0])
    assert sojourn_survival(t, rho, mu - lam, service) == pytest.approx(np.exp(-(mu - lam) * t), rel=5e-3)


def md1_wait_cdf(t: float, rho: float) -> float:
    """Erlang's M/D/1 waiting-time CDF (D = 1): P(W ≤ t) = (1 − ρ)·Σ_{k ≤ t} (ρ(k − t))^k/k!·e^{−ρ(k−t)},
    summed with 80 digits (the terms alternate and grow)."""
    getcontext().prec = 80
    lam, t = Decimal(rho), Decimal(t)
    total = sum((lam * (k - t)) ** k / Decimal(math.factorial(k)) * (-(lam * (k - t))).exp() for k in range(int(t) + 1))
    return float((1 - lam) * total)


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.8, 0.9])
def test_md1_p99_sojourn_is_allen_cunneens_and_errs_high(rho):
    """M/D/1 (D = 1 s): the exact p99 sojourn is 1 + the p99 of Erlang's waiting time; the
    model (C = ρ, θ = 2(1 − ρ) by Allen–Cunneen, X = D) runs 3–19 % above it, never below."""
    lo, hi = 0.0, 200.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if md1_wait_cdf(mid, rho) < 0.99 else (lo, mid)
    exact = 1.0 + hi
    predicted = sojourn_quantile_s(rho, (1.0 - rho) * 2.0 / (1.0 + 0.0), law([1.0]))
    assert exact <= predicted <= 1.2 * exact


def test_a_constant_stage_reduces_to_the_p99_wait_plus_the_stage():
    """X = x: the p99 is x + ln(C/0.01)/θ — the p99 wait plus the stage (and x when fewer than
    1 % wait). With an M/M/n wait that is `wait_quantile_s` + x."""
    lam, n, s, scv = 16.0, 10, 0.5, 1.0
    c = float(erlang_c(n, lam * s))
    x = 0.123
    assert sojourn_quantile_s(c, n / s - lam, law([x])) == pytest.approx(x + math.log(c / 0.01) / (n / s - lam), rel=1e-6)
    assert sojourn_quantile_s(c, n / s - lam, law([x])) == pytest.approx(x + float(wait_quantile_s(lam, n, s, scv)),
                                                                         rel=1e-6)
    assert sojourn_quantile_s(0.005, 3.0, law([x])) == pytest.approx(x, rel=1e-6)
    # everyone waits (C → 1): x + ln(100)/θ
    assert sojourn_quantile_s(1.0, 4.0, law([x])) == pytest.approx(x + math.log(100.0) / 4.0, rel=1e-6)


def test_stage_quantiles_do_not_add():
    """Two independent stages: the p99 of the sum is below the sum of the p99s."""
    rng = np.random.default_rng(1)
    prompt = law(rng.lognormal(-3.0, 0.6, 4000))
    p99 = quantile_s(prompt, 0.99)
    c, theta = 0.3, 40.0
    wait_p99 = math.log(c / 0.01) / theta
    assert sojourn_quantile_s(c, theta, prompt) < 0.9 * (p99 + wait_p99)


def test_the_uniform_smear_and_the_wait_against_monte_carlo():
    """X = V + s·U with V lognormal: its quantiles and the p99 of W + X against 2 M draws."""
    rng = np.random.default_rng(2)
    v = rng.lognormal(-2.5, 0.5, 3000)
    x = law(v, None, 0.03)
    assert quantile_s(law([0.1], None, 0.05), 0.99) == pytest.approx(0.1 + 0.99 * 0.05, rel=1e-12)
    n = 2_000_000
    draws = rng.choice(v, n) + 0.03 * rng.random(n)
    for q in (0.5, 0.9, 0.99):
        assert quantile_s(x, q) == pytest.approx(np.quantile(draws, q), rel=3e-3)
    waits = np.where(rng.random(n) < 0.4, rng.exponential(1 / 25.0, n), 0.0)
    assert sojourn_quantile_s(0.4, 25.0, x) == pytest.approx(np.quantile(waits + draws, 0.99), rel=5e-3)
    assert survival(x, [0.0, 10.0]) == pytest.approx([1.0, 0.0], abs=1e-12)


def test_mixtures_at_once_equal_one_at_a_time_and_say_when_saturated():
    rng = np.random.default_rng(3)
    a = law(rng.lognormal(-3, 0.5, 300), None, 0.02)
    b = law(rng.lognormal(-2.8, 0.4, 300), None, 0.01)
    laws = pack([a, b], 512)
    mix = Mixtures(item=np.array([0, 0, 1, 2, 2]), weight=np.array([1.0, 2.0, 1.0, 1.0, 0.005]),
                   offset_s=np.array([0.01, 0.03, 0.0, 0.0, 0.0]), waits=np.array([0.3, 0.5, 0.2, 0.2, 1.0]),
                   rate_per_s=np.array([20.0, 30.0, 50.0, 50.0, 0.0]), alone=np.array([0, 1, 0, 0, 1]),
                   riding=np.array([1, 1, 0, 0, 1]), laws=laws)
    got = mix.quantiles_s(4)
    first = mixture_quantile_s([(1.0, 0.01, lambda t: sojourn_survival(t, 0.3, 20.0, a, b)),
                                (2.0, 0.03, lambda t: sojourn_survival(t, 0.5, 30.0, b, b))])
    assert got[0] == pytest.approx(first, rel=1e-6)
    assert got[1] == pytest.approx(sojourn_quantile_s(0.2, 50.0, a), rel=1e-6)
    # a saturated component holding 0.5 % of the mixture leaves its p99 finite …
    assert np.isfinite(got[2]) and got[2] > got[1]
    # … one holding more than 1 % does not; a mixture without components has none
    heavy = Mixtures(**{**mix.__dict__, "weight": np.array([1.0, 2.0, 1.0, 1.0, 0.5])})
    assert np.isinf(heavy.quantiles_s(4)[2]) and np.isnan(got[3])


def test_compress_keeps_the_mean_and_the_tail():
    rng = np.random.default_rng(4)
    x = law(rng.lognormal(0.0, 0.8, 20000), None, 0.1)
    small = compress(x, 128)
    assert len(small.values_s) <= 128 and small.mean_s == pytest.approx(x.mean_s, rel=1e-12)
    for q in (0.5, 0.99, 0.999):
        assert quantile_s(small, q) == pytest.approx(quantile_s(x, q), rel=0.03)


# ---------------------------------------------------------------------------- capacity


def test_the_slack_table_is_the_direct_tail():
    """P(W + X > b) from the tabulated transform against `sojourn_survival` at b, for rates
    between the grid's points and riding laws mixed by geometric weights. Q(θ) is a mixture
    of exponentials in θ, so ln Q is convex and its chords lie above it: the table errs high
    (the capacity low), by at most 2 %."""
    rng = np.random.default_rng(5)
    alone = law(rng.lognormal(-3.0, 0.4, 500), None, 0.01)
    riding = [law(alone.values_s + 0.004 * j, alone.probs, 0.01) for j in range(4)]
    b = 0.12
    table = slack_table(alone, riding, b)
    for c, theta, others in ((0.2, 37.0, 0.0), (0.6, 11.3, 1.7), (0.9, 3.3, 6.0)):
        w = geometric_weights(others, 4)
        mixed = law(np.concatenate([x.values_s for x in riding]), np.concatenate([x.probs * wj for x, wj in
                                                                                  zip(riding, w)]), 0.01)
        direct = float(sojourn_survival(b, c, theta, alone, mixed)[0])
        assert direct <= float(table.tail(c, theta, w)) <= 1.02 * direct
    both = stack([table, slack_table(alone, riding[:1], 0.2)])
    assert both.log_q.shape[:2] == (2, 4)
    assert float(both.tail(0.5, 10.0, geometric_weights(1.0, 4), row=np.array(1))) == pytest.approx(
        float(sojourn_survival(0.2, 0.5, 10.0, alone, riding[0])[0]), rel=2e-2)


def test_capacity_is_the_largest_rate_meeting_the_budget_with_the_stages():
    """f(n) with stages after the wait: at f the pool's requests meet the budget in 99 %, 2 %
    above it they do not (the tabulated transform errs high, so f a little low); f grows with
    n and with the budget, falls as the stages lengthen."""
    rng = np.random.default_rng(6)
    stages = law(rng.lognormal(-3.2, 0.5, 400), None, 0.01)
    s, scv = 0.05, 0.4
    for n in (1, 4, 16):
        f = float(slo_capacity_rps(n, s, scv, slack_table(stages, [stages], 0.2), 0.99)[0])
        c, theta = float(erlang_c(n, f * s)), (n / s - f) * 2 / (1 + scv)
        assert float(sojourn_survival(0.2, c, theta, stages)[0]) <= 0.01 + 1e-6
        up = f * 1.02
        c, theta = float(erlang_c(n, up * s)), (n / s - up) * 2 / (1 + scv)
        assert float(sojourn_survival(0.2, c, theta, stages)[0]) > 0.01
    table = slo_capacity_rps(np.arange(1, 33), s, scv, slack_table(stages, [stages], 0.2), 0.85)
    assert np.all(np.diff(table) > 0) and np.all(np.diff(table / np.arange(1, 33)) >= -1e-9)
    budgets = [slo_capacity_rps(8, s, scv, slack_table(stages, [stages], b), 0.85)[0] for b in (0.1, 0.15, 0.2, 0.4)]
    assert np.all(np.diff(budgets) >= 0)
    longer = law(stages.values_s * 1.3, stages.probs, 0.01)
    assert slo_capacity_rps(8, s, scv, slack_table(longer, [longer], 0.2), 0.85)[0] < budgets[2]


# ---------------------------------------------------------------------------- gaps and batches


def test_gap_quantile_by_hand():
    """Two step states, 10 ms (time share 0.9) and 20 ms (0.1), 10 sequences each: gaps fall
    in them ∝ π·b/d = 0.9 and 0.05, so 5.26 % of gaps are 20 ms — the p99 and the p95; the
    p90 is 10 ms. Speculative steps of E = 2.5 tokens make 60 % of gaps zero: 2.1 % of gaps
    are 20 ms, the p99 is still 20 ms, the p97.5 is 10 ms and the p50 zero."""
    plain = gap_law([0.010, 0.020], [0.9, 0.1], [10, 10])
    assert plain.probs == pytest.approx([0.9 / 0.95, 0.05 / 0.95])
    assert gap_quantile_s([(1.0, plain)], 0.99) == 0.020
    assert gap_quantile_s([(1.0, plain)], 0.95) == 0.020
    assert gap_quantile_s([(1.0, plain)], 0.90) == 0.010
    spec = gap_law([0.010, 0.020], [0.9, 0.1], [10, 10], tokens_per_step=2.5)
    assert spec.zero_share == pytest.approx(0.6)
    assert gap_quantile_s([(1.0, spec)], 0.99) == 0.020
    assert gap_quantile_s([(1.0, spec)], 0.975) == 0.010
    assert gap_quantile_s([(1.0, spec)], 0.5) == 0.0
    # a mixture of pools by their tokens: 1 part of the 20 ms pool in 20 → 5 % of gaps
    fast, slow = gap_law([0.010], [1.0], [8]), gap_law([0.020], [1.0], [8])
    assert gap_quantile_s([(19.0, fast), (1.0, slow)], 0.96) == 0.020
    assert gap_quantile_s([(19.0, fast), (1.0, slow)], 0.94) == 0.010


def test_geometric_weights():
    w = geometric_weights(np.array([0.0, 1.5, 4.0]), 200)
    assert w.sum(axis=1) == pytest.approx([1.0, 1.0, 1.0])
    assert (w * np.arange(200)).sum(axis=1) == pytest.approx([0.0, 1.5, 4.0], rel=1e-9)
    short = geometric_weights(2.0, 3)  # the mass beyond the last point sits on it
    assert short == pytest.approx([1 / 3, 2 / 9, 4 / 9])


def test_settled_batch_with_a_linear_step():
    """step(b) = a + c·b: b = λ·m·(a + c·b) solves to b = λ·m·a/(1 − λ·m·c); capped by the slots."""
    a, c, lam, m = 0.010, 0.0001, 20.0, 30.0
    b = settled_batch(lambda x: a + c * x, m, lam, 1000)
    assert b == pytest.approx(lam * m * a / (1 - lam * m * c), rel=1e-6)
    assert settled_batch(lambda x: a + c * x, m, lam, 5) == 5.0


def test_inflight_context_against_monte_carlo():
    """A sequence caught mid-decode holds its prompt and a uniform part of a length-biased
    output: sampled by time in flight."""
    rng = np.random.default_rng(7)
    n = 2_000_000
    isl_mean, isl_sigma, osl_mu, osl_sigma = 2000.0, 0.35, 5.8, 0.64
    prompt = rng.lognormal(math.log(isl_mean) - isl_sigma ** 2 / 2, isl_sigma, n)
    out = rng.lognormal(osl_mu, osl_sigma, n)
    biased = rng.choice(n, n, p=out / out.sum())
    context = prompt[rng.permutation(n)] + rng.random(n) * out[biased]
    mean, var = inflight_context(isl_mean, isl_sigma, osl_mu, osl_sigma)
    assert mean == pytest.approx(context.mean(), rel=3e-3)
    assert var == pytest.approx(context.var(), rel=2e-2)


def test_step_states_center_on_the_settled_batch():
    """The batch's time law: mean b*, variance b*·(1 + ε)/n with ε the step's elasticity in b."""
    def step(b, context):
        return 0.01 + 0.00005 * np.asarray(b) * np.asarray(context) / 1000.0
    d, pi, b = step_states(step, 60.0, 4, 2000.0, 0.0, 500, points=41)
    assert pi.sum() == pytest.approx(1.0)
    eps = 0.00005 * 60 * 2 / (0.01 + 0.00005 * 60 * 2)  # d ln step / d ln b at b* = 60, context 2000
    assert np.sum(pi * b) == pytest.approx(60.0, rel=1e-3)
    assert np.sum(pi * (b - 60.0) ** 2) == pytest.approx(60.0 * (1 + eps) / 4, rel=0.02)
    assert d == pytest.approx(step(b, 2000.0))
