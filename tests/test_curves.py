"""The analytic cost curves against hand arithmetic (DESIGN.md, "The analytic cost curves").

Every expected value here is computed in the test from the formula and the catalogue figures
(never copied from the function under test). Queueing, lengths, batching and speculative
decoding have their own files (tests/test_curves_*.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.base.precision import bytes_per_value
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.curves.cache import (
    cache_kv_share,
    cached_prefix_tokens,
    mean_prefill_tokens,
    p99_cached_tokens,
    prefill_work_saved_fraction,
)
from optimizer.curves.economics import (
    break_even_utilization,
    cost_per_million_tokens_usd,
    idle_cost_share,
    owned_tco_usd_per_gpu_hour,
    owned_usd_per_node_hour,
    tokens_per_s_per_mw,
)
from optimizer.curves.memory import (
    kv_budget_bytes,
    kv_bytes_per_token,
    kv_replication,
    max_concurrency,
    weights_fit,
)
from optimizer.curves.roofline import (
    collective_time_s,
    decode_floor_s,
    decode_step_time_s,
    mixed_step_time_s,
    prefill_compute_s,
    prefill_efficiency,
    prefill_flops,
    prefill_time_s,
    smooth_max,
    weight_bytes_read,
)
from optimizer.curves.shapes import Efficiency, Hardware, ModelShape, Replica
from optimizer.curves.transfer import kv_transfer_time_s, replica_nic_bytes_per_s
from optimizer.scenario import Serving, Workload, load_scenario
from optimizer.scenario.calibration.params import Calibration
from optimizer.serving.configs import (
    hardware,
    make_replica,
    model_shape,
    parallel_degrees,
)
from optimizer.serving.configs import (
    kv_bytes_per_token as workload_kv_bytes_per_token,
)

# the pre-calibration global values (no calibration entry applies): the hand-computed
# values below check the formulas, not the shipped defaults
NEUTRAL = Calibration()

GIB = 2**30  # vendors' HBM "GB" are binary (see optimizer.serving.configs.hardware)


# --------------------------------------------------------------------------- fixtures


@functools.lru_cache(maxsize=1)
def all_catalogue():
    """Every catalogue row: a scenario with no tables named takes the whole of data/."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "all.yaml"
        path.write_text("name: all\n")
        scenario, _ = load_scenario(path)
    return scenario


@pytest.fixture(scope="module")
def catalogue():
    return all_catalogue()


def replica(cat, model: str, gpu: str, p: int, dtype: str = "bf16", kv_dtype: str | None = None, **serving):
    s = Serving(calibration=NEUTRAL, **serving)
    r = make_replica(cat.models[model], cat.accelerators[gpu], s, p, dtype, kv_dtype or dtype)
    assert r is not None
    return r


def llama70_shape() -> ModelShape:
    """Llama-3.1-70B typed in by hand from FACTS.md §2 (not read from the catalogue)."""
    return ModelShape(params_total=70.554e9, params_active=70.554e9, layers=80, hidden=8192, heads=64,
                      kv_heads=8, head_dim=128)


def h100_hw() -> Hardware:
    """H100 SXM typed in by hand from FACTS.md §1.1 (BF16 dense)."""
    return Hardware(dense_flops_per_s=989.4e12, hbm_bytes=80 * GIB, hbm_bytes_per_s=3.35e12,
                    scaleup_domain_gpus=8, scaleup_bytes_per_s=450e9, nic_bytes_per_s=50e9, gpus_per_node=8)


def plain_eff(**kw) -> Efficiency:
    base = dict(prefill_mfu=1.0, decode_mbu=1.0, decode_mfu=1.0, step_overhead_s=0.0, usable_hbm_fraction=1.0,
                workspace_bytes_per_gpu=0.0, collective_latency_s=0.0, link_efficiency=1.0,
                roofline_sharpness=math.inf)
    base.update(kw)
    return Efficiency(**base)


def probe_workload(model: str, kv_dtype: str) -> Workload:
    return Workload(id="probe", model=model, weight_dtype="bf16", kv_dtype=kv_dtype, isl_mean_tokens=1000,
                    isl_p99_tokens=2000, osl_mean_tokens=100, osl_p99_tokens=200, ttft_p99_ms=1000,
                    itl_p99_ms=50, peak_requests_per_s_per_million_people=0)


# --------------------------------------------------------------------------- 1. KV bytes per token

# FACTS.md §2.1: 2 (K,V) × layers × kv_heads × head_dim × 2 bytes; MLA layers × (512 + 64) × 2.
KV_BF16 = {
    "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,
    "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,
    "llama-3.1-405b": 2 * 126 * 8 * 128 * 2,
    "qwen3-32b": 2 * 64 * 8 * 128 * 2,
    "mixtral-8x7b": 2 * 32 * 8 * 128 * 2,
    "deepseek-v3": 61 * (512 + 64) * 2,
}


def test_kv_bytes_headline_values():
    assert KV_BF16["llama-3.1-70b"] == 327_680
    assert KV_BF16["llama-3.1-8b"] == 131_072
    assert KV_BF16["deepseek-v3"] == 70_272
    assert kv_bytes_per_token(llama70_shape(), 2.0) == 327_680
    mla = ModelShape(params_total=671e9, params_active=37e9, layers=61, hidden=7168, heads=128, kv_heads=128,
                     head_dim=128, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, experts=256,
                     experts_per_token=8)
    assert kv_bytes_per_token(mla, 2.0) == 70_272
    assert kv_bytes_per_token(mla, 1.0) == 35_136


@pytest.mark.parametrize("model", sorted(KV_BF16))
def test_kv_bytes_per_token_of_shipped_models(catalogue, model):
    row = catalogue.models[model]
    expected = KV_BF16[model]
    assert kv_bytes_per_token(model_shape(row), bytes_per_value("bf16")) == expected
    assert kv_bytes_per_token(model_shape(row), bytes_per_value("fp8")) == expected / 2
    assert workload_kv_bytes_per_token(probe_workload(model, "bf16"), row) == expected
    assert workload_kv_bytes_per_token(probe_workload(model, "fp8"), row) == expected / 2
    r = make_replica(row, catalogue.accelerators["h200-sxm"], Serving(calibration=NEUTRAL), 1, "fp8", "fp8")
    assert r.kv_bytes_per_token == expected / 2


def test_kv_replication_when_tp_exceeds_kv_heads():
    m = ModelShape(params_total=1e9, params_active=1e9, layers=2, hidden=1024, heads=16, kv_heads=4, head_dim=64)
    assert kv_replication(m, 1) == 1.0
    assert kv_replication(m, 4) == 1.0
    assert kv_replication(m, 8) == 2.0  # each of 8 GPUs holds one of 4 heads: two copies
    mla = ModelShape(params_total=1e9, params_active=1e9, layers=2, hidden=1024, heads=16, kv_heads=16,
                     head_dim=64, attention="mla", kv_lora_rank=128, qk_rope_head_dim=32)
    assert kv_replication(mla, 64) == 1.0


# --------------------------------------------------------------------------- 2. KV budget, fit, ceiling


def test_serving_defaults_used_below():
    s = Serving(calibration=NEUTRAL)
    assert (s.usable_hbm_fraction, s.workspace_gb_per_gpu) == (0.90, 2.0)


def test_llama70b_bf16_needs_two_h100(catalogue):
    # M_kv = p·H·u − N·β − p·workspace with H = 80 GiB, u = 0.9, workspace 2 GB, N·β = 70.554e9·2
    weights = 70.554e9 * 2
    one = 1 * 80 * GIB * 0.9 - weights - 1 * 2e9
    two = 2 * 80 * GIB * 0.9 - weights - 2 * 2e9
    assert one < 0 < two
    assert two == pytest.approx(9.5108e9, rel=1e-4)  # 154.619 − 141.108 − 4 GB
    r1 = replica(catalogue, "llama-3.1-70b", "h100-sxm", 1)
    r2 = replica(catalogue, "llama-3.1-70b", "h100-sxm", 2)
    assert not weights_fit(r1) and kv_budget_bytes(r1) <= 0
    assert weights_fit(r2)
    assert kv_budget_bytes(r1) == pytest.approx(one, rel=1e-12)
    assert kv_budget_bytes(r2) == pytest.approx(two, rel=1e-12)
    assert max_concurrency(r1, 1000) == 0  # no replica where nothing fits
    # FP8 weights halve N·β: one H100 then fits (77.31 − 70.55 − 2 = 4.76 GB)
    r1_fp8 = replica(catalogue, "llama-3.1-70b", "h100-sxm", 1, "fp8")
    assert kv_budget_bytes(r1_fp8) == pytest.approx(80 * GIB * 0.9 - 70.554e9 - 2e9, rel=1e-12)
    assert weights_fit(r1_fp8)


def test_cli_table_offers_tp2_for_llama70b_bf16(catalogue):
    from optimizer.serving.table import operating_table

    out = operating_table(catalogue.models["llama-3.1-70b"], catalogue.accelerators["h100-sxm"], Serving(calibration=NEUTRAL),
                          isl=2000, osl=500, itl_ms=50, usd_per_gpu_hour=4.0)
    assert [row["tp"] for row in out["configs"]] == [2, 4, 8]
    assert out["kv_bytes_per_token"] == 327_680
    tp4 = next(row for row in out["configs"] if row["tp"] == 4)
    budget = 4 * 80 * GIB * 0.9 - 70.554e9 * 2 - 4 * 2e9
    assert tp4["max_concurrency"] == math.floor(budget / (327_680 * 2500))
    assert tp4["kv_budget_gb"] == pytest.approx(budget / 1e9)


def test_colocated_figures_carry_the_prefill_of_the_prompts(catalogue):
    """curves' colocated column is osl · min(decode requests/s, prefill lane requests/s) of the
    colocated replica the plan would build; it never exceeds decode alone, and longer prompts
    lower it (at 8k-token prompts several times below the decode-only figure)."""
    from optimizer.scenario import Workload
    from optimizer.serving.configs import colocated_config, make_replica
    from optimizer.serving.table import operating_table

    model, gpu, serving = catalogue.models["llama-3.1-70b"], catalogue.accelerators["h100-sxm"], Serving(calibration=NEUTRAL)
    short, long = (operating_table(model, gpu, serving, isl=isl, osl=500, itl_ms=50, usd_per_gpu_hour=4.0)["configs"]
                   for isl in (2000, 8000))
    pairs = [(a, b) for a, b in zip(short, long) if b["colocated_tokens_per_s"] is not None]
    assert pairs  # some degree serves 8k-token prompts colocated inside the objective
    for a, b in pairs:
        assert a["colocated_tokens_per_s"] <= a["decode_tokens_per_s"] + 1e-9
        assert b["colocated_tokens_per_s"] < a["colocated_tokens_per_s"]
    tp8 = next(row for row in long if row["tp"] == 8)
    assert tp8["decode_tokens_per_s"] / tp8["colocated_tokens_per_s"] > 2
    probe = Workload(id="probe", model=model.id, isl_mean_tokens=8000, isl_p99_tokens=8000, osl_mean_tokens=500,
                     osl_p99_tokens=500, ttft_p99_ms=1e6, itl_p99_ms=50, peak_requests_per_s_per_million_people=0)
    c = colocated_config(probe, model, gpu, make_replica(model, gpu, serving, 8, "bf16", "bf16"), serving,
                         tp8["colocated_chunk_tokens"])
    assert tp8["colocated_tokens_per_s"] == pytest.approx(500 * min(c.decode_rps, c.lane_rps()))


@pytest.mark.parametrize("gpu,p,context", [("h100-sxm", 4, 4096), ("h100-sxm", 8, 8192), ("h200-sxm", 2, 2500),
                                           ("b200", 1, 128_000), ("mi300x", 2, 1)])
def test_concurrency_ceiling_is_the_hand_floor(catalogue, gpu, p, context):
    acc = catalogue.accelerators[gpu]
    budget = p * acc.hbm_gb * GIB * 0.9 - 70.554e9 * 2 - p * 2e9
    expected = math.floor(budget / (327_680 * context))  # p ≤ 8 KV heads: no replication
    r = replica(catalogue, "llama-3.1-70b", gpu, p)
    assert int(max_concurrency(r, context)) == expected
    # a resident prompt cache takes its share of the budget away
    assert int(max_concurrency(r, context, 0.25)) == math.floor(budget * 0.75 / (327_680 * context))


def test_concurrency_ceiling_h100_tp4_4k_context_value(catalogue):
    # 4·85.899·0.9 = 309.238 GB; − 141.108 − 8 = 160.130 GB; / (327,680 · 4096 B) = 119.3 → 119
    r = replica(catalogue, "llama-3.1-70b", "h100-sxm", 4)
    assert int(max_concurrency(r, 4096)) == 119


def test_concurrency_ceiling_counts_replicated_kv():
    m = ModelShape(params_total=1e9, params_active=1e9, layers=10, hidden=1024, heads=16, kv_heads=2,
                   head_dim=64)
    r = Replica(m, h100_hw(), plain_eff(), gpus=8)
    budget = 8 * 80 * GIB - 2e9
    kv = 2 * 10 * 2 * 64 * 2  # 5,120 B per token, stored 8 / 2 = 4 times
    assert int(max_concurrency(r, 1000)) == math.floor(budget / (kv * 4 * 1000))


# --------------------------------------------------------------------------- 3. decode step


def test_decode_floor_hand_values(catalogue):
    # weights over bandwidth at η_m = 0.75: 70.554e9·2 / (4 · 3.35e12 · 0.75)
    r = replica(catalogue, "llama-3.1-70b", "h100-sxm", 4)
    assert decode_floor_s(r) == pytest.approx(70.554e9 * 2 / (4 * 3.35e12 * 0.75), rel=1e-12)
    assert decode_floor_s(r) * 1e3 == pytest.approx(14.04, abs=0.01)
    # MoE: a one-token step reads only the always-read part plus k experts = N_a
    mix = replica(catalogue, "mixtral-8x7b", "h100-sxm", 1)
    assert decode_floor_s(mix) == pytest.approx(12.888e9 * 2 / (3.35e12 * 0.75), rel=1e-9)


def test_decode_step_hand_value_memory_bound():
    # pure max, η = 1, no overhead, p = 1: step = (N·β + b·c·kv) / B when memory-bound
    r = Replica(llama70_shape(), h100_hw(), plain_eff(), gpus=1, weight_bytes_per_param=1.0, kv_bytes_per_value=1.0)
    b, c = 4, 1000
    memory = (70.554e9 + b * c * 163_840) / 3.35e12
    compute = (2 * 70.554e9 * b + b * 80 * 64 * 256 * 2 * c) / 989.4e12
    assert memory > compute
    assert float(decode_step_time_s(r, b, c)) == pytest.approx(memory, rel=1e-12)
    # with overhead τ₀ and sharpness q: τ₀ + (m^q + c^q)^(1/q)
    r3 = Replica(llama70_shape(), h100_hw(), plain_eff(step_overhead_s=0.0015, roofline_sharpness=3.0), gpus=1,
                 weight_bytes_per_param=1.0, kv_bytes_per_value=1.0)
    assert float(decode_step_time_s(r3, b, c)) == pytest.approx(0.0015 + (memory**3 + compute**3) ** (1 / 3),
                                                                rel=1e-12)


def test_decode_step_compute_bound_at_large_batch():
    r = Replica(llama70_shape(), h100_hw(), plain_eff(), gpus=1, weight_bytes_per_param=1.0, kv_bytes_per_value=1.0)
    b, c = 2048, 10
    memory = (70.554e9 + b * c * 163_840) / 3.35e12
    compute = (2 * 70.554e9 * b + b * 80 * 64 * 256 * 2 * c) / 989.4e12
    assert compute > memory
    assert float(decode_step_time_s(r, b, c)) == pytest.approx(compute, rel=1e-12)


MODELS = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "mixtral-8x7b", "deepseek-v3", "llama-3.1-405b"]
GPUS = ["h100-sxm", "h200-sxm", "b200", "a100-80gb-sxm", "l40s", "mi300x", "mi325x"]


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), p=st.sampled_from([1, 2, 4, 8, 16]),
       dtype=st.sampled_from(["bf16", "fp8"]), batch=st.integers(1, 4096), context=st.integers(1, 131_072),
       more_batch=st.integers(1, 512), more_context=st.integers(1, 32_768),
       sharpness=st.sampled_from([1.0, 1.5, 3.0, 10.0, math.inf]))
def test_decode_step_floor_and_monotonicity(model, gpu, p, dtype, batch, context, more_batch, more_context,
                                            sharpness):
    cat = all_catalogue()
    acc, m = cat.accelerators[gpu], cat.models[model]
    r = make_replica(m, acc, Serving(calibration=NEUTRAL), p, dtype, dtype)
    if r is None:  # no FP8 on A100
        assert dtype == "fp8" and acc.fp8_dense_tflops is None
        return
    r = dataclasses.replace(r, eff=dataclasses.replace(r.eff, roofline_sharpness=sharpness))
    shape = model_shape(m)
    beta = bytes_per_value(dtype)
    if shape.is_moe:  # a one-token step touches the shared part and k experts: N_a parameters
        read_one = shape.params_active * beta
    else:
        read_one = shape.params_total * beta
    raw_floor = read_one / (p * acc.hbm_tb_s * 1e12)  # η = 1, peak bandwidth
    step = float(decode_step_time_s(r, batch, context))
    assert step >= raw_floor * (1 - 1e-12)
    assert step >= decode_floor_s(r) * (1 - 1e-12)
    assert float(decode_step_time_s(r, batch + more_batch, context)) >= step * (1 - 1e-12)
    assert float(decode_step_time_s(r, batch, context + more_context)) >= step * (1 - 1e-12)


def test_decode_step_vectorised_and_increasing(catalogue):
    r = replica(catalogue, "llama-3.1-8b", "h100-sxm", 1)
    steps = decode_step_time_s(r, np.arange(1, 600), 2000)
    assert steps.shape == (599,)
    assert np.all(np.diff(steps) > 0)
    contexts = decode_step_time_s(r, 32, np.array([10, 100, 1000, 10_000, 100_000]))
    assert np.all(np.diff(contexts) > 0)


def test_smooth_max_bounds():
    a, b = 3.0, 4.0
    assert float(smooth_max(a, b, math.inf)) == 4.0
    assert float(smooth_max(a, b, 2.0)) == pytest.approx(5.0)  # the 3-4-5 triangle
    assert float(smooth_max(2.0, 2.0, 3.0)) == pytest.approx(2.0 * 2 ** (1 / 3))  # 2^(1/q) × max at the ridge
    for q in (1.0, 1.5, 3.0, 20.0):
        v = float(smooth_max(a, b, q))
        assert 4.0 <= v <= 7.0


# --------------------------------------------------------------------------- TP/EP communication


def test_collective_time_hand_value(catalogue):
    # llama-3.1-70b on 4 H100s: 2 all-reduces per layer, α = 15 µs,
    # bw = 900/2 GB/s × 0.7; message = t × 8192 × 2 B
    r = replica(catalogue, "llama-3.1-70b", "h100-sxm", 4)
    bw = 450e9 * 0.7
    for t in (1, 64, 2048):
        expected = 2 * 80 * (15e-6 + 2 * 3 / 4 * t * 8192 * 2 / bw)
        assert float(collective_time_s(r, t)) == pytest.approx(expected, rel=1e-12)
    # the 2·L latency terms alone are 2.4 ms per decode step (why MBU falls with TP)
    assert 2 * 80 * 15e-6 == pytest.approx(2.4e-3)
    assert float(collective_time_s(replica(catalogue, "llama-3.1-70b", "h100-sxm", 4, "bf16"), 0)) == pytest.approx(2.4e-3)
    r1 = replica(catalogue, "llama-3.1-8b", "h100-sxm", 1)
    assert float(collective_time_s(r1, 1000)) == 0.0


def test_collective_time_moe_and_scale_out(catalogue):
    # Mixtral on 2 H100s: one all-reduce plus dispatch + combine all-to-all per layer
    r = replica(catalogue, "mixtral-8x7b", "h100-sxm", 2)
    bw, t = 450e9 * 0.7, 256
    message = t * 4096 * 2
    allreduce = 15e-6 + 2 * 1 / 2 * message / bw
    alltoall = 2 * (15e-6 + message * 2 / 2 * 1 / 2 / bw)
    assert float(collective_time_s(r, t)) == pytest.approx(32 * (allreduce + alltoall), rel=1e-12)
    # DeepSeek-V3 over two H100 nodes uses the 400 Gb/s NIC, not NVLink
    ds = replica(catalogue, "deepseek-v3", "h100-sxm", 16, "fp8")
    assert ds.link_bytes_per_s == pytest.approx(400e9 / 8 * 0.7)
    assert replica(catalogue, "deepseek-v3", "h200-sxm", 8, "fp8").link_bytes_per_s == pytest.approx(450e9 * 0.7)


def test_l40s_uses_pcie_within_the_node(catalogue):
    acc = catalogue.accelerators["l40s"]
    assert parallel_degrees(catalogue.models["llama-3.1-70b"], acc, Serving(calibration=NEUTRAL)) == [1, 2, 4, 8]
    r = replica(catalogue, "llama-3.1-70b", "l40s", 4, "fp8")
    assert r.link_bytes_per_s == pytest.approx(64e9 / 2 * 0.7)


# --------------------------------------------------------------------------- 4. prefill


def test_prefill_flops_hand_value():
    m = llama70_shape()
    s = 4096
    linear = 2 * 70.554e9 * s
    attention = 80 * 64 * (128 + 128) * s * s  # causal: L·n_h·(d_qk + d_v)·s²
    assert float(prefill_flops(m, s)) == pytest.approx(linear + attention, rel=1e-12)
    # FACTS.md rule of thumb: ≈ 2·N_a per token (attention adds 4·L·s·n_h·d_h per token, halved by causality)
    assert float(prefill_flops(m, s)) == pytest.approx(2 * 70.554e9 * s + 4 * 80 * s * 64 * 128 * s / 2, rel=1e-12)


def test_prefill_attention_term_is_quadratic():
    m = llama70_shape()
    linear = lambda s: 2 * 70.554e9 * s  # noqa: E731
    attention = lambda s: float(prefill_flops(m, s)) - linear(s)  # noqa: E731
    for s in (512, 4096, 32_768):
        assert attention(2 * s) == pytest.approx(4 * attention(s), rel=1e-9)
    # and it overtakes the linear part once s > 2·N_a / (L·n_h·(d_qk+d_v)) ≈ 103k tokens
    crossover = 2 * 70.554e9 / (80 * 64 * 256)
    assert attention(int(crossover * 1.1)) > linear(int(crossover * 1.1))
    assert attention(int(crossover * 0.9)) < linear(int(crossover * 0.9))


def test_prefill_is_compute_bound_for_long_prompts(catalogue):
    # p = 1 (no comms): time ≈ FLOPs / (F · η_c) within a few % once the prompt is long
    r = replica(catalogue, "llama-3.1-8b", "h100-sxm", 1)
    for s in (2048, 8192, 32_768):
        flops = 2 * 8.03e9 * s + 32 * 32 * 256 * s * s
        expected = flops / (989.4e12 * 0.45)
        t = float(prefill_time_s(r, s))
        assert t >= expected
        assert t == pytest.approx(expected, rel=0.03)
    # 8k tokens: 1.4916e14 FLOP / 445.2 TFLOP/s = 0.335 s
    assert float(prefill_time_s(r, 8192)) == pytest.approx(0.335, abs=0.002)


def test_prefill_short_prompt_is_weight_read_bound(catalogue):
    r = replica(catalogue, "llama-3.1-8b", "h100-sxm", 1)
    memory = 8.03e9 * 2 / (3.35e12 * 0.75)
    assert float(prefill_time_s(r, 1)) == pytest.approx(1.5e-3 + memory, rel=0.01)  # + τ₀ of the pass


def test_cached_tokens_reduce_prefill(catalogue):
    m = llama70_shape()
    s, sc = 4000, 1500
    expected = 2 * 70.554e9 * (s - sc) + 80 * 64 * 256 * (s * s - sc * sc)
    assert float(prefill_flops(m, s, sc)) == pytest.approx(expected, rel=1e-12)
    assert float(prefill_flops(m, s, s + 10)) == 0.0  # fully cached (cache longer than the prompt)
    r = replica(catalogue, "llama-3.1-70b", "h100-sxm", 4)
    times = prefill_time_s(r, 4000, np.array([0, 1000, 2000, 3000]))
    assert np.all(np.diff(times) < 0)


def test_prefill_with_tp_adds_comms(catalogue):
    r = replica(catalogue, "llama-3.1-70b", "h100-sxm", 4)
    s = 4096
    compute = (2 * 70.554e9 * s + 80 * 64 * 256 * s * s) / (4 * 989.4e12 * 0.45)
    memory = 70.554e9 * 2 / (4 * 3.35e12 * 0.75)
    comms = 2 * 80 * (15e-6 + 1.5 * s * 8192 * 2 / (450e9 * 0.7))
    expected = 1.5e-3 + (compute**3 + memory**3) ** (1 / 3) + comms  # τ₀ + smax + comms
    assert float(prefill_time_s(r, s)) == pytest.approx(expected, rel=1e-12)


def test_prefill_efficiency_rises_with_tokens_in_the_pass():
    # η(s) = η_max·s/(s + s½): half of η_max at s½, → η_max for long passes; a pass of 4
    # prompts of 512 runs at η(2048), not η(512)
    eff = plain_eff(prefill_mfu=0.8, prefill_half_tokens=512.0)
    assert float(prefill_efficiency(eff, 512)) == pytest.approx(0.4)
    assert float(prefill_efficiency(eff, 1536)) == pytest.approx(0.6)
    r = Replica(llama70_shape(), h100_hw(), eff, gpus=1)
    one = float(prefill_compute_s(r, 512))
    four = float(prefill_compute_s(r, 512, prompts=4))
    flops = 2 * 70.554e9 * 512 + 80 * 64 * 256 * 512**2
    assert one == pytest.approx(flops / (989.4e12 * 0.4), rel=1e-12)
    assert four == pytest.approx(4 * flops / (989.4e12 * 0.8 * 2048 / 2560), rel=1e-12)


def test_layer_overhead_and_attention_factor_enter_a_decode_step():
    # τ₀ + L·τ_L + κ-weighted KV read: hand-computed for Llama-3.1-70B on one H100
    eff = plain_eff(step_overhead_s=1e-3, layer_overhead_s=20e-6, attention_factor=2.0)
    r = Replica(llama70_shape(), h100_hw(), eff, gpus=1)
    kv = 2 * 80 * 8 * 128 * 2
    memory = (70.554e9 * 2 + 2.0 * 8 * 1000 * kv) / 3.35e12
    assert float(decode_step_time_s(r, 8, 1000)) == pytest.approx(1e-3 + 80 * 20e-6 + memory, rel=1e-9)


# --------------------------------------------------------------------------- colocated iteration


def test_mixed_step_never_faster_than_plain_decode(catalogue):
    r = replica(catalogue, "llama-3.1-70b", "h100-sxm", 4, "fp8")
    b = np.arange(1, 200)
    plain = decode_step_time_s(r, b, 2250)
    mixed = mixed_step_time_s(r, b, 2250, 512, 1000)
    assert np.all(mixed >= plain)
    # the chunk's compute is added to the decode compute by hand (pure max, p = 1, η = 1)
    r1 = Replica(llama70_shape(), h100_hw(), plain_eff(), gpus=1, weight_bytes_per_param=1.0, kv_bytes_per_value=1.0)
    mem = (70.554e9 + 8 * 1000 * 163_840) / 3.35e12
    comp = (2 * 70.554e9 * 8 + 8 * 80 * 64 * 256 * 2 * 1000) / 989.4e12
    chunk = 2 * 70.554e9 * 512 + 80 * 64 * 256 * ((1000 + 512) ** 2 - 1000**2)
    mem_chunk = 1000 * 163_840 / 3.35e12
    expected = max(mem + mem_chunk, comp + chunk / 989.4e12)
    assert float(mixed_step_time_s(r1, 8, 1000, 512, 1000)) == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------- 5. the keynote arithmetic


def test_keynote_cost_per_million_tokens():
    # one 8-GPU node at $30/h: 10,000 tok/s = 36 M tok/h → $0.83/M; 4,000 tok/s → $2.08/M
    assert float(cost_per_million_tokens_usd(30.0, 10_000)) == pytest.approx(30 / 36, rel=1e-12)
    assert float(cost_per_million_tokens_usd(30.0, 10_000)) == pytest.approx(0.8333, abs=1e-4)
    assert float(cost_per_million_tokens_usd(30.0, 4_000)) == pytest.approx(30 / 14.4, rel=1e-12)
    assert float(cost_per_million_tokens_usd(30.0, 4_000)) == pytest.approx(2.0833, abs=1e-4)
    both = cost_per_million_tokens_usd(30.0, np.array([10_000.0, 4_000.0]))
    assert np.round(both, 2).tolist() == [0.83, 2.08]
    assert float(cost_per_million_tokens_usd(30.0, 0.0)) == math.inf


# --------------------------------------------------------------------------- 9. economics


def test_break_even_utilisation():
    # reference H100 row: reserved 1y 2.793 / on-demand 3.99 = 0.70
    assert float(break_even_utilization(2.793, 3.99)) == pytest.approx(0.70, abs=1e-9)
    assert break_even_utilization(np.array([1.0, 3.0]), np.array([4.0, 4.0])).tolist() == [0.25, 0.75]


def test_owned_tco_hand_arithmetic():
    # 8× H100 node: capex 310,000 $ over 5 years, 10.2 kW, PUE 1.25, 81.5 $/MWh, colo 184.06 $/kW-month
    terms = dict(capex_usd_per_node=310_000, life_years=5, node_kw=10.2, pue=1.25, energy_usd_per_mwh=81.5,
                 colo_usd_per_kw_month=184.06)
    capital = 310_000 / (5 * 8760)  # 7.0776 $/h
    energy = 10.2 * 1.25 * 81.5 / 1000  # 1.0391 $/h
    colo = 10.2 * 184.06 * 12 / 8760  # 2.5718 $/h
    parts = owned_usd_per_node_hour(**terms)
    assert parts["capital"] == pytest.approx(capital) and capital == pytest.approx(7.0776, abs=1e-4)
    assert parts["energy"] == pytest.approx(energy) and energy == pytest.approx(1.0391, abs=1e-4)
    assert parts["colo"] == pytest.approx(colo) and colo == pytest.approx(2.5718, abs=1e-4)
    assert owned_tco_usd_per_gpu_hour(8, **terms) == pytest.approx((capital + energy + colo) / 8)
    assert owned_tco_usd_per_gpu_hour(8, **terms) == pytest.approx(1.3361, abs=1e-4)
    # drawing 60 % of full power scales only the energy term
    partial = owned_usd_per_node_hour(**terms, power_fraction=0.6)
    assert partial["energy"] == pytest.approx(0.6 * energy)
    assert partial["colo"] == pytest.approx(colo)
    assert HOURS_PER_YEAR == 8760


def test_idle_cost_share():
    assert idle_cost_share(np.array([0.0, 0.35, 1.0, 1.2])).tolist() == pytest.approx([1.0, 0.65, 0.0, 0.0])


def test_tokens_per_s_per_mw():
    # 10,000 tok/s from a 10.2 kW node at PUE 1.25 = 12.75 kW facility → 784,314 tok/s per MW
    assert float(tokens_per_s_per_mw(10_000, 10.2, 1.25)) == pytest.approx(10_000 / 0.01275)
    assert float(tokens_per_s_per_mw(10_000, 10.2, 1.25)) == pytest.approx(784_313.7, abs=0.1)


# --------------------------------------------------------------------------- 8 (prompt cache), 10 (transfer)


def test_prompt_cache_line_items():
    # chat: 2,000-token prompts, 40 % hit a 1,000-token prefix
    assert mean_prefill_tokens(2000, 0.4, 1000) == pytest.approx(2000 - 0.4 * 1000)
    assert prefill_work_saved_fraction(2000, 0.4, 1000) == pytest.approx(0.2)
    assert prefill_work_saved_fraction(0, 0.4, 1000) == 0.0
    assert cached_prefix_tokens(np.array([500, 5000]), 1000).tolist() == [500, 1000]
    assert mean_prefill_tokens(800, 1.0, 5000) == 0.0  # prefix longer than the prompt: all of it cached
    assert p99_cached_tokens(0.4, 1000) == 0.0
    assert p99_cached_tokens(0.995, 1000) == 1000.0
    # 4 resident 1,000-token prefixes of 327,680 B per token in a 100 GB budget
    assert cache_kv_share(4, 1000, 327_680, 100e9) == pytest.approx(4 * 1000 * 327_680 / 100e9)
    assert cache_kv_share(4, 1000, 327_680, 1e9) == 1.0
    assert cache_kv_share(4, 1000, 327_680, 0.0) == 1.0


def test_kv_transfer_hand_value():
    # 4 GPUs × 400 Gb/s × 0.7, a 4,500-token prompt of 163,840 B/token (70B, FP8 KV), 1 ms latency
    bw = replica_nic_bytes_per_s(4, 400e9 / 8, 0.7)
    assert bw == pytest.approx(4 * 50e9 * 0.7)
    assert float(kv_transfer_time_s(4500, 163_840, bw, 1e-3)) == pytest.approx(1e-3 + 4500 * 163_840 / 140e9)


# --------------------------------------------------------------------------- 11. MoE


def test_mixtral_active_params_drive_flops(catalogue):
    m = model_shape(catalogue.models["mixtral-8x7b"])
    s = 2048
    attention = 32 * 32 * 256 * s * s
    assert float(prefill_flops(m, s)) == pytest.approx(2 * 12.888e9 * s + attention, rel=1e-12)
    assert float(prefill_flops(m, s)) / s == pytest.approx(2 * 12.9e9, rel=0.04)  # ≈ 2·N_a per token


def test_mixtral_total_params_drive_memory(catalogue):
    r = replica(catalogue, "mixtral-8x7b", "h100-sxm", 2)
    assert r.weight_bytes == pytest.approx(46.703e9 * 2)
    assert kv_budget_bytes(r) == pytest.approx(2 * 80 * GIB * 0.9 - 46.703e9 * 2 - 2 * 2e9)
    assert not weights_fit(replica(catalogue, "mixtral-8x7b", "h100-sxm", 1))  # 93.4 GB > 77.3 GB


def test_mixtral_weights_read_per_step(catalogue):
    r = replica(catalogue, "mixtral-8x7b", "h100-sxm", 2)
    m = r.model
    expert = (46.703e9 - 12.888e9) / (8 - 2)  # e = (N − N_a)/(E − k) = 5.636e9
    shared = 46.703e9 - 8 * expert  # always read: 1.62e9
    assert m.params_per_expert == pytest.approx(expert)
    assert m.params_always_read == pytest.approx(shared)
    one = float(weight_bytes_read(r, 1))
    assert one == pytest.approx((shared + 2 * expert) * 2) and one == pytest.approx(12.888e9 * 2)
    total = 46.703e9 * 2
    assert one < total
    for t in (2, 4, 16):  # expected share of experts touched: 1 − (1 − 2/8)^t
        assert float(weight_bytes_read(r, t)) == pytest.approx((shared + 8 * expert * (1 - 0.75**t)) * 2)
    reads = weight_bytes_read(r, np.array([1, 2, 4, 8, 16, 64, 256]))
    assert np.all(np.diff(reads) > 0)
    assert reads[-1] == pytest.approx(total, rel=1e-9)
    # dense models always read everything
    dense = replica(catalogue, "llama-3.1-8b", "h100-sxm", 1)
    assert weight_bytes_read(dense, np.array([1, 100])).tolist() == pytest.approx([8.03e9 * 2] * 2)


def test_deepseek_reads_few_experts_at_batch_one(catalogue):
    r = replica(catalogue, "deepseek-v3", "h200-sxm", 8, "fp8")
    one = float(weight_bytes_read(r, 1))
    assert one == pytest.approx(37e9)  # N_a at 1 byte
    assert float(weight_bytes_read(r, 4096)) == pytest.approx(671e9, rel=1e-6)


# --------------------------------------------------------------------------- configs glue


def test_hardware_units(catalogue):
    hw = hardware(catalogue.accelerators["h100-sxm"], "bf16")
    assert hw.dense_flops_per_s == pytest.approx(989.4e12)
    assert hw.hbm_bytes == 80 * GIB
    assert hw.hbm_bytes_per_s == pytest.approx(3.35e12)
    assert hw.scaleup_bytes_per_s == pytest.approx(450e9)  # 900 GB/s both directions → 450 one way
    assert hw.nic_bytes_per_s == pytest.approx(50e9)  # 400 Gb/s
    assert hardware(catalogue.accelerators["h100-sxm"], "fp8").dense_flops_per_s == pytest.approx(1978.9e12)
    assert hardware(catalogue.accelerators["a100-80gb-sxm"], "fp8") is None


@pytest.mark.parametrize("gpu,reported_mib", [("h100-sxm", 81_559), ("h200-sxm", 143_771), ("b200", 183_359)])
def test_hbm_bytes_match_what_the_driver_reports(catalogue, gpu, reported_mib):
    # nvidia-smi totals (MiB) of the "80 GB", "141 GB" and "180 GB" parts: the catalogue's GB are
    # binary. Read as 1e9 B they would be 6.5–7 % short, and Llama-3.1-70B BF16 would not fit 2 × H100.
    hw = hardware(catalogue.accelerators[gpu], "bf16")
    assert hw.hbm_bytes == pytest.approx(reported_mib * 2**20, rel=0.006)


def test_moe_parallel_degrees_span_nodes(catalogue):
    s = Serving(calibration=NEUTRAL)
    assert parallel_degrees(catalogue.models["deepseek-v3"], catalogue.accelerators["h100-sxm"], s) == [1, 2, 4, 8, 16]
    assert parallel_degrees(catalogue.models["llama-3.1-70b"], catalogue.accelerators["h100-sxm"], s) == [1, 2, 4, 8]
