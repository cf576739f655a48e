"""Batching (curves 5–6), speculative decoding (curve 7) and length distributions with their
service-time moments. Expected values are computed in the tests by hand."""

from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from optimizer.curves.batching import (
    batching_knee,
    decode_operating_point,
    marginal_usd_per_million_tokens,
    operating_batch,
)
from optimizer.curves.lengths import (
    MAX_P99_OVER_MEAN,
    Z99,
    LengthDistribution,
    service_moments,
)
from optimizer.curves.memory import max_concurrency
from optimizer.curves.roofline import decode_step_parts, decode_step_time_s
from optimizer.curves.speculative import (
    break_even_acceptance,
    expected_tokens_per_step,
    speculative_speedup,
    speculative_step_time_s,
)
from optimizer.scenario import Serving, load_scenario
from optimizer.scenario.calibration.params import Calibration
from optimizer.serving.configs import make_replica

# the pre-calibration global values (no calibration entry applies): the hand-computed
# values below check the formulas, not the shipped defaults
NEUTRAL = Calibration()


@functools.lru_cache(maxsize=1)
def all_catalogue():
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "all.yaml"
        path.write_text("name: all\n")
        scenario, _ = load_scenario(path)
    return scenario


def replica(model, gpu, p, dtype="bf16"):
    cat = all_catalogue()
    return make_replica(cat.models[model], cat.accelerators[gpu], Serving(calibration=NEUTRAL), p, dtype, dtype)


# --------------------------------------------------------------------------- operating batch


def test_operating_batch_on_a_hand_array():
    steps = np.array([0.010, 0.020, 0.030, 0.050])
    # ITL 40 ms, tail 1.15: 1.15·30 ms = 34.5 ms fits, 1.15·50 ms = 57.5 ms does not
    assert operating_batch(steps, 0.040, 1.15) == 3
    assert operating_batch(steps, 0.0344, 1.15) == 2
    assert operating_batch(steps, 0.001, 1.15) == 0
    assert operating_batch(steps, 1.0, 1.15) == 4
    # only a prefix counts: a later fast step does not make up for a slow one
    assert operating_batch(np.array([0.01, 0.05, 0.02]), 0.04, 1.0) == 1


@pytest.mark.parametrize("model,gpu,p,dtype,context,itl_ms", [
    ("llama-3.1-70b", "h100-sxm", 4, "bf16", 2250, 50),
    ("llama-3.1-70b", "h200-sxm", 1, "fp8", 2250, 50),
    ("llama-3.1-8b", "h100-sxm", 1, "bf16", 820, 20),
    ("mixtral-8x7b", "h100-sxm", 2, "bf16", 6200, 200),
    ("qwen3-32b", "b200", 1, "fp8", 12150, 60),
])
def test_decode_operating_point_is_the_largest_batch_meeting_itl(model, gpu, p, dtype, context, itl_ms):
    r = replica(model, gpu, p, dtype)
    tail, itl = 1.15, itl_ms / 1e3
    b_max = int(max_concurrency(r, context * 1.2))
    b, step = decode_operating_point(lambda bs: decode_step_time_s(r, bs, context), b_max, itl, tail)
    assert 1 <= b <= b_max
    assert step == pytest.approx(float(decode_step_time_s(r, b, context)))
    assert tail * float(decode_step_time_s(r, b, context)) <= itl
    if b < b_max:  # the next batch misses the objective (else the KV ceiling stopped it)
        assert tail * float(decode_step_time_s(r, b + 1, context)) > itl


def test_decode_operating_point_none_fits():
    r = replica("llama-3.1-70b", "h100-sxm", 4)
    b, step = decode_operating_point(lambda bs: decode_step_time_s(r, bs, 2000), 100, 0.005, 1.15)
    assert b == 0 and math.isnan(step)
    assert decode_operating_point(lambda bs: bs, 0, 1.0, 1.0)[0] == 0


# --------------------------------------------------------------------------- knee and price floor


@pytest.mark.parametrize("model,gpu,p,dtype,context", [
    ("llama-3.1-70b", "h100-sxm", 4, "bf16", 2250),
    ("llama-3.1-70b", "h200-sxm", 1, "fp8", 400),
    ("llama-3.1-8b", "h100-sxm", 1, "bf16", 300),
    ("llama-3.1-8b", "b200", 1, "fp8", 100),
    ("mixtral-8x7b", "mi300x", 1, "fp8", 1000),
])
def test_batching_knee(model, gpu, p, dtype, context):
    r = replica(model, gpu, p, dtype)
    b_max = int(max_concurrency(r, context))
    usd_per_hour = 4.0 * p
    k = batching_knee(r, context, usd_per_hour, b_max)
    assert k.max_batch == b_max
    assert 1 <= k.knee_batch <= b_max
    if math.isfinite(k.ridge_batch):  # the ridge: compute first reaches memory there
        ridge = int(k.ridge_batch)
        mem, comp, _ = decode_step_parts(r, ridge, context)
        assert comp >= mem
        if ridge > 1:
            mem, comp, _ = decode_step_parts(r, ridge - 1, context)
            assert comp < mem
        assert k.knee_batch == min(ridge, b_max)
    else:
        assert k.knee_batch == b_max
    # the floor is the cost per token at b_max: $/h · step(b_max) / (3600 · b_max) · 1e6
    step_max = float(decode_step_time_s(r, b_max, context))
    assert k.floor_usd_per_million_tokens == pytest.approx(usd_per_hour * step_max / (3600 * b_max) * 1e6)
    assert k.knee_tokens_per_s == pytest.approx(k.knee_batch / float(decode_step_time_s(r, k.knee_batch, context)))
    # cost per token falls with batch: the floor is the lowest on the curve
    batches = np.arange(1, b_max + 1)
    cost = marginal_usd_per_million_tokens(r, batches, context, usd_per_hour)
    assert np.all(np.diff(cost) <= 1e-12)
    assert cost.min() == pytest.approx(k.floor_usd_per_million_tokens)


def test_knee_of_a_short_context_small_model_is_the_ridge():
    # 8B at FP8 on a B200 with 100-token contexts turns compute-bound well before the KV ceiling
    r = replica("llama-3.1-8b", "b200", 1, "fp8")
    b_max = int(max_concurrency(r, 100))
    k = batching_knee(r, 100, 6.89, b_max)
    assert math.isfinite(k.ridge_batch) and k.knee_batch < b_max


def test_knee_with_no_memory():
    k = batching_knee(replica("llama-3.1-70b", "h100-sxm", 4), 2000, 16.0, 0)
    assert k.knee_batch == 0 and k.max_batch == 0


# --------------------------------------------------------------------------- speculative decoding


def test_expected_tokens_per_step():
    assert float(expected_tokens_per_step(0.0, 3)) == 1.0
    assert float(expected_tokens_per_step(1.0, 3)) == 4.0
    assert float(expected_tokens_per_step(1.0, 7)) == 8.0
    assert float(expected_tokens_per_step(0.7, 3)) == pytest.approx((1 - 0.7**4) / 0.3)
    assert float(expected_tokens_per_step(0.7, 3)) == pytest.approx(1 + 0.7 + 0.49 + 0.343)  # 2.533
    grid = expected_tokens_per_step(np.linspace(0, 1, 11), 4)
    assert np.all(np.diff(grid) > 0)


def test_speculative_step_hand_composition():
    r = replica("llama-3.1-70b", "h100-sxm", 4)
    b, c, k, rho = 16, 2250, 3, 0.1
    plain = float(decode_step_time_s(r, b, c))
    verify = float(decode_step_time_s(r, b, c, tokens_per_sequence=k + 1))
    assert float(speculative_step_time_s(r, b, c, k, rho)) == pytest.approx(verify + k * rho * plain)
    assert float(speculative_speedup(r, b, c, 0.7, k, rho)) == pytest.approx(
        (1 - 0.7**4) / 0.3 * plain / (verify + k * rho * plain))


def test_break_even_acceptance_solves_the_equation():
    r = replica("llama-3.1-70b", "h100-sxm", 4)
    for b in (1, 32, 128):
        alpha = break_even_acceptance(r, b, 2250, 3, 0.1)
        ratio = float(speculative_step_time_s(r, b, 2250, 3, 0.1)) / float(decode_step_time_s(r, b, 2250))
        assert 0 < alpha < 1
        assert (1 - alpha**4) / (1 - alpha) == pytest.approx(ratio, rel=1e-9)


def test_break_even_acceptance_rises_with_batch():
    r = replica("llama-3.1-70b", "h100-sxm", 4)
    batches = np.array([1, 8, 32, 64, 128, 195])
    alpha = break_even_acceptance(r, batches, 2250, 3, 0.1)
    assert np.all(np.isfinite(alpha))
    assert np.all(np.diff(alpha) > 0)
    assert alpha[-1] > alpha[0] + 0.3  # memory-bound batch 1 ≈ 0.23, near the KV ceiling ≈ 0.8
    assert break_even_acceptance(r, 1, 2250, 3, 0.1) == pytest.approx(float(alpha[0]))


def test_break_even_acceptance_edges():
    r = replica("llama-3.1-8b", "b200", 1, "fp8")
    # very large batch, short context: verifying k+1 tokens costs > k+1 plain steps → never pays
    assert math.isnan(break_even_acceptance(r, 4096, 100, 3, 0.1))
    # a free draft at batch 1, verify as cheap as a plain step (memory-bound) → α* ≈ 0
    assert break_even_acceptance(replica("llama-3.1-70b", "h100-sxm", 4), 1, 2250, 3, 1e-9) < 0.05


# --------------------------------------------------------------------------- lengths


@pytest.mark.parametrize("mean,p99", [(2000, 4500), (500, 1800), (800, 3000), (12_000, 30_000), (40, 200)])
def test_lognormal_from_mean_and_p99(mean, p99):
    d = LengthDistribution(mean, p99)
    # the closed form: exp(μ + σ²/2) = m, exp(μ + z·σ) = p
    assert math.exp(d.mu + d.sigma**2 / 2) == pytest.approx(mean, rel=1e-12)
    assert math.exp(d.mu + Z99 * d.sigma) == pytest.approx(p99, rel=1e-12)
    x = d.sample(np.random.default_rng(20261202), 200_000)
    assert x.mean() == pytest.approx(mean, rel=0.02)
    assert np.quantile(x, 0.99) == pytest.approx(p99, rel=0.02)


def test_lengths_constant_and_limits():
    assert Z99 == pytest.approx(norm.ppf(0.99)) and Z99 == pytest.approx(2.3263, abs=1e-4)
    assert MAX_P99_OVER_MEAN == pytest.approx(math.exp(2.3263**2 / 2), rel=1e-3)  # ≈ 14.97
    d = LengthDistribution(700, 700)
    assert d.sigma == 0.0
    assert d.sample(np.random.default_rng(0), 5).tolist() == [700] * 5
    clipped = LengthDistribution(2000, 20_000, max_tokens=8192).sample(np.random.default_rng(1), 50_000)
    assert clipped.max() <= 8192 and clipped.min() >= 1


def test_service_moments_linear_service():
    # S(s) = a·s + b0 on a miss; a lognormal s has Var = m²·(e^{σ²} − 1)
    d = LengthDistribution(2000, 4500)
    a, b0 = 1e-4, 0.02
    var_s = 2000**2 * (math.exp(d.sigma**2) - 1)
    mean, scv, _ = service_moments(lambda s, c: a * (s - c) + b0, d, 0.0, 0.0)
    assert mean == pytest.approx(a * 2000 + b0, rel=0.01)
    assert scv == pytest.approx(a * a * var_s / (a * 2000 + b0) ** 2, rel=0.03)
    # pure proportional service: scv = Var[s]/E[s]² = e^{σ²} − 1, whatever a is
    mean, scv, third = service_moments(lambda s, c: 0.37 * (s - c), d, 0.0, 0.0)
    assert mean == pytest.approx(0.37 * 2000, rel=0.01)
    assert scv == pytest.approx(math.exp(d.sigma**2) - 1, rel=0.03)
    # and E[s³]/E[s]³ = e^{3σ²}, also for a heavy tail (p99 six times the mean), where the
    # 400-point quantile grid, which stops at the 99.9th percentile, reads it 30 % low
    assert third == pytest.approx(math.exp(3 * d.sigma**2), rel=0.01)
    heavy = LengthDistribution(2000, 12000)
    assert service_moments(lambda s, c: s, heavy, 0.0, 0.0)[2] == pytest.approx(math.exp(3 * heavy.sigma**2), rel=0.01)
    grid = heavy.quantile_grid()
    assert np.mean(grid**3) / np.mean(grid) ** 3 < 0.75 * math.exp(3 * heavy.sigma**2)


def test_service_moments_with_cache_hits():
    # a hit on a prefix longer than any prompt costs only b0; misses cost a·s + b0; h = 0.5
    d = LengthDistribution(2000, 4500)
    a, b0, h = 1e-4, 0.02, 0.5
    mean, scv, _ = service_moments(lambda s, c: a * (s - c) + b0, d, h, 1e9)
    e_miss = a * 2000 + b0
    e_miss2 = a * a * 2000**2 * math.exp(d.sigma**2) + 2 * a * b0 * 2000 + b0 * b0
    expected_mean = h * b0 + (1 - h) * e_miss
    expected_second = h * b0 * b0 + (1 - h) * e_miss2
    assert mean == pytest.approx(expected_mean, rel=0.01)
    assert scv == pytest.approx(expected_second / expected_mean**2 - 1, rel=0.03)
    # a constant service time has no variance
    assert service_moments(lambda s, c: np.full_like(s, 0.25), d, 0.3, 100)[1] == pytest.approx(0.0, abs=1e-12)
