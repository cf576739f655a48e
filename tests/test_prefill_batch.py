"""Batched prefill: the pass time of several prompts, how many prompts a budget packs, the
queue of a batching pool against the FIFO-with-batching simulation, and the plan that
chooses it where it pays."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optimizer.commands.pipeline import make_plan
from optimizer.commands.stress import stress
from optimizer.commands.verify import fifo_pool, verify_plan
from optimizer.curves.lengths import LengthDistribution
from optimizer.curves.prefill_batch import full_pass, full_pass_s, new_token_law, p99_pass_s, pass_time_s
from optimizer.curves.queueing import batch_prompts, erlang_c, slo_capacity_rps, wait_law, wait_quantile_s
from optimizer.curves.roofline import prefill_time_s
from optimizer.curves.shapes import Efficiency, Hardware, ModelShape, Replica
from optimizer.curves.tail import geometric_weights, law, slack_table, sojourn_quantile_s
from optimizer.folder.read import read_plan
from optimizer.folder.write import write_plan
from optimizer.scenario import apply_overrides, load_scenario, validate
from optimizer.serving.budget import Stages
from optimizer.serving.configs import config_at, make_replica, prefill_config

BATCHING = Path(__file__).parent / "data" / "batching.yaml"


def hand_replica() -> Replica:
    """Llama-3.1-70B on one H100 SXM, typed in by hand (FACTS.md §1.1, §2)."""
    model = ModelShape(params_total=70.554e9, params_active=70.554e9, layers=80, hidden=8192, heads=64, kv_heads=8,
                       head_dim=128)
    hw = Hardware(dense_flops_per_s=989.4e12, hbm_bytes=80 * 2**30, hbm_bytes_per_s=3.35e12, scaleup_domain_gpus=8,
                  scaleup_bytes_per_s=450e9, nic_bytes_per_s=50e9, gpus_per_node=8)
    eff = Efficiency(prefill_mfu=0.5, prefill_half_tokens=1000.0, decode_mbu=1.0, decode_mfu=1.0,
                     step_overhead_s=0.002, usable_hbm_fraction=1.0, workspace_bytes_per_gpu=0.0,
                     collective_latency_s=0.0, link_efficiency=1.0, roofline_sharpness=math.inf)
    return Replica(model, hw, eff, gpus=1)


# ---------------------------------------------------------------------------- one pass


def test_a_pass_of_two_prompts_by_hand():
    """Llama-3.1-70B on one H100 (BF16, 989.4 TFLOP/s, 3.35 TB/s), η_max 0.5, s½ 1,000,
    τ₀ 2 ms, pure max: prompts of 1,000 tokens (none cached) and 3,000 (1,000 cached).
    T = 1,000 + 2,000 = 3,000 new tokens, η(T) = 0.5·3000/4000 = 0.375;
    linear 2·70.554e9·3000 = 4.23324e14 FLOPs; attention 80·64·256·(1000² + 3000² − 1000²)
    = 1.179648e13; compute (4.23324e14 + 1.179648e13)/(989.4e12·0.375) = 1.17277 s ≫ the
    weight read 2·70.554e9/3.35e12 = 42.1 ms; + τ₀."""
    r = hand_replica()
    expected = 0.002 + (4.23324e14 + 1.179648e13) / (989.4e12 * 0.375)
    assert pass_time_s(r, [1000, 3000], [0, 1000]) == pytest.approx(expected, rel=1e-6)
    # the same prompts one pass each pay τ₀ twice and run at η(1000) = 0.25, η(2000) = 0.333
    apart = float(prefill_time_s(r, 1000, 0) + prefill_time_s(r, 3000, 1000))
    assert apart == pytest.approx(0.004 + (2 * 70.554e9 * 1000 + 80 * 64 * 256 * 1e6) / (989.4e12 * 0.25)
                                  + (2 * 70.554e9 * 2000 + 80 * 64 * 256 * 8e6) / (989.4e12 / 3), rel=1e-6)
    assert apart > expected


def test_equal_prompts_are_the_roofline_pass_of_several_prompts(reference):
    s, _ = reference
    w = s.workloads["chat"]
    r = make_replica(s.models[w.model], s.accelerators["h100-sxm"], s.serving, 4, w.weight_dtype, w.kv_dtype)
    for k in (1, 3, 8):
        assert pass_time_s(r, [900] * k, [200] * k) == pytest.approx(float(prefill_time_s(r, 900, 200, prompts=k)))


# ---------------------------------------------------------------------------- packing


def test_packing_equal_prompts_by_hand():
    """Prompts of exactly 1,000 new tokens: a 2,500-token budget holds two, 3,000 three; a
    999-token budget holds none beside the first, which goes alone."""
    for budget, prompts in ((2500, 2.0), (3000, 3.0), (999, 1.0)):
        k, tokens = full_pass([1000.0], [1.0], budget)
        assert k == pytest.approx(prompts, abs=1e-9)
        assert tokens == pytest.approx(1000.0 * prompts, rel=1e-9)


def test_packing_two_lengths_by_hand():
    """Prompts of 90 or 1,000 new tokens, half each, budget 1,000. A pass that starts with a
    1,000 is alone (state A). One that starts with a 90 (state B) takes the following 90s,
    at most 10 more, until a 1,000 comes: E[prompts | B] = 1 + Σ_{j=1..10} 2^-j = 2 − 2^-10.
    The next pass starts with the prompt that did not fit — a 1,000 unless ten 90s filled
    the pass, then a fresh one: P(B → B) = 2^-10·½, P(A → B) = ½. Stationary:
    π_B/π_A = ½/(1 − 2^-11)."""
    ratio = 0.5 / (1 - 2 ** -11)
    pa, pb = 1 / (1 + ratio), ratio / (1 + ratio)
    k_b = 2 - 2 ** -10
    k, tokens = full_pass([90.0, 1000.0], [0.5, 0.5], 1000)
    assert k == pytest.approx(pa * 1 + pb * k_b, rel=1e-9)
    assert tokens == pytest.approx(pa * 1000 + pb * 90 * k_b, rel=1e-9)


@pytest.mark.parametrize("budget", [2048, 8192])
def test_packing_matches_head_of_line_greedy_on_sampled_prompts(budget):
    """Code completion's prompts (lognormal, mean 800, p99 3,000; 60 % hit a 600-token
    prefix) packed greedily from a long queue, counted here prompt by prompt."""
    lengths = LengthDistribution(800, 3000, 131072)
    rng = np.random.default_rng(3)
    n = 200_000
    tokens = lengths.sample(rng, n)
    new = np.where(rng.random(n) < 0.6, tokens - np.minimum(tokens, 600), tokens)
    taken, held, i = [], [], 0
    while i < n - 1000:
        j, total = i + 1, new[i]
        while total + new[j] <= budget:
            total += new[j]
            j += 1
        taken.append(j - i)
        held.append(total)
        i = j
    k, t = full_pass(*new_token_law(lengths, 0.6, 600)[:2], budget)
    assert k == pytest.approx(np.mean(taken), rel=0.02)
    assert t == pytest.approx(np.mean(held), rel=0.02)
    # a queue of i.i.d. prompts packed independently would overstate it: the prompt that
    # does not fit starts the next pass
    assert np.mean(taken) < budget / new.mean()


# ---------------------------------------------------------------------------- the queue


def test_without_batching_the_queue_is_erlang_c():
    args = (np.array([5.0, 20.0, 35.0]), 4, 0.1, 0.5, 0.99)
    plain = wait_quantile_s(*args)
    assert np.allclose(wait_quantile_s(*args, full_prompts=1.0, full_pass_s=0.1), plain)
    budget = slack_table(law([0.0]), [law([0.0])], 0.05)
    assert np.allclose(slo_capacity_rps([1, 4, 16], 0.1, 0.5, budget, 0.85, 0.99, 1.0, 0.1),
                       slo_capacity_rps([1, 4, 16], 0.1, 0.5, budget, 0.85, 0.99))


def test_passes_grow_with_load_up_to_a_full_pass():
    """S̄ 10 ms, a full pass of 6 prompts in 30 ms, 4 servers: capacity 4·6/0.03 = 800/s. A
    pass takes at most the prompts queued, min(Q, K): it fills only as the pool saturates."""
    rates = np.array([1.0, 100.0, 300.0, 500.0, 700.0, 790.0, 799.9])
    k = batch_prompts(rates, 4, 0.010, 6.0, 0.030)
    assert k[0] == pytest.approx(1.0, abs=1e-3)
    assert np.all(np.diff(k) > 0) and np.all(k <= 6.0 + 1e-9)
    assert 5.5 < k[-2] < k[-1] < 6.0 and k[-1] == pytest.approx(6.0, abs=0.05)
    # the fixed point by hand at 790/s: k = 1 − C·u + C·u/(1 − u·v), v = 5/6, u = λ·S(k)/(n·k)
    u = 790.0 * (0.010 + (k[-2] - 1) * 0.004) / (4 * k[-2])
    c = erlang_c(4, 4 * u)
    assert k[-2] == pytest.approx(1 - c * u + c * u / (1 - u * 5 / 6), rel=1e-6)
    # beyond a one-at-a-time pool's capacity (400/s) the batching pool still waits finitely
    assert np.isfinite(wait_quantile_s(500.0, 4, 0.010, 0.3, 0.99, 6.0, 0.030))
    assert np.isinf(wait_quantile_s(500.0, 4, 0.010, 0.3, 0.99))
    assert np.isinf(wait_quantile_s(810.0, 4, 0.010, 0.3, 0.99, 6.0, 0.030))


def pool_laws(s, c):
    """(X₀, X_w) of a prefill config's pool alone — its pass, no transfer or decode step:
    the prompt alone, or (having waited) beside J others, J geometric with mean m_q − 1."""
    stages = Stages(s)
    p, passes = stages.prompts(c.workload), stages.prefill_passes(c)

    def at(lam, servers):
        kw = c.batching()
        wait = wait_law(lam, servers, c.service_mean_s, c.service_scv, kw["full_prompts"], kw["full_pass_s"])
        weights = geometric_weights(float(wait.queued) - 1.0, len(passes))
        riding = law(np.concatenate(passes), np.concatenate([p.probs * x for x in weights]))
        return float(wait.waits), float(wait.rate_per_s), law(passes[0], p.probs), riding
    return at


@pytest.mark.parametrize("servers", [4, 16])
def test_batched_p99_against_the_fifo_batching_simulation(reference, servers):
    """Code completion on H100 ×4, passes of up to 4,096 new tokens, at half and 85 % of the
    full-pass capacity: the predicted p99 of wait + the pass a prompt rides in (the tail of
    the sum, `curves.tail`) against the simulated p99 of the time from arrival to the end of
    its pass. The model takes the wait and the pass as independent; in the simulation a long
    wait goes with a fuller pass (more prompts queued behind), so it may run a little low."""
    s, _ = reference
    w = s.workloads["code-completion"]
    m = s.models[w.model]
    r = make_replica(m, s.accelerators["h100-sxm"], s.serving, 4, w.weight_dtype, w.kv_dtype)
    c = prefill_config(w, m, s.accelerators["h100-sxm"], r, s.serving, batch_tokens=4096)
    lengths = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, m.max_context)
    laws = pool_laws(s, c)
    rng = np.random.default_rng(11)
    n = 30_000
    for load in (0.5, 0.85):
        lam = load * servers * c.lane_rps()
        arrivals = np.cumsum(rng.exponential(1 / lam, n))
        tokens = lengths.sample(rng, n)
        cached = np.where(rng.random(n) < w.prompt_cache_hit_rate, np.minimum(tokens - 1, w.shared_prefix_tokens), 0)
        _, end = fifo_pool(arrivals, servers, prefill_time_s(r, tokens, cached), tokens=tokens, cached=cached,
                           batch_tokens=4096, batch_service=lambda t, k: pass_time_s(r, t, k))
        simulated = np.quantile((end - arrivals)[n // 10:], 0.99)
        predicted = sojourn_quantile_s(*laws(lam, servers))
        assert 0.85 * simulated <= predicted <= 1.15 * simulated, (load, predicted, simulated)


def test_a_batched_config_serves_more_per_replica_and_its_p99_pass_carries_the_others(reference):
    s, _ = reference
    w = s.workloads["code-completion"]
    m, a = s.models[w.model], s.accelerators["h100-sxm"]
    r = make_replica(m, a, s.serving, 4, w.weight_dtype, w.kv_dtype)
    one = prefill_config(w, m, a, r, s.serving)
    lengths = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, m.max_context)
    for budget in (2048, 8192):
        c = prefill_config(w, m, a, r, s.serving, batch_tokens=budget)
        assert c.id.endswith(f"prefill-b{budget}") and c.prefill_batch_tokens == budget
        assert c.lane_rps() > one.lane_rps()
        k, pass_s = full_pass_s(r, lengths, w.prompt_cache_hit_rate, w.shared_prefix_tokens, budget)
        assert c.batch_prompts == pytest.approx(k) and c.batch_pass_ms == pytest.approx(pass_s * 1e3)
        assert c.prefill_p99_ms == pytest.approx(1e3 * p99_pass_s(r, lengths, w.prompt_cache_hit_rate,
                                                                  w.shared_prefix_tokens, budget, w.isl_p99_tokens, 0))
    # the p99 prompt (3,000 tokens) alone fills a 2,048 budget: no longer than one at a time
    assert prefill_config(w, m, a, r, s.serving, batch_tokens=2048).prefill_p99_ms == pytest.approx(one.prefill_p99_ms)
    assert prefill_config(w, m, a, r, s.serving, batch_tokens=8192).prefill_p99_ms > 1.5 * one.prefill_p99_ms
    # a budget that cannot hold two prompts on average is not offered
    assert prefill_config(w, m, a, r, s.serving, batch_tokens=600) is None


# ---------------------------------------------------------------------------- plans


@pytest.fixture(scope="module")
def batching_plans(tmp_path_factory):
    """tests/data/batching.yaml with a loose (400 ms) and a tight (130 ms) TTFT objective,
    and the loose one with batching not offered."""
    out = tmp_path_factory.mktemp("batching")
    plans = {}
    for name, overrides in (("loose", []), ("tight", ["workloads.code-completion.ttft_p99_ms=130"]),
                            ("unbatched", ["serving.prefill_batch_tokens=[]"])):
        plans[name] = write_plan(make_plan(BATCHING, overrides, exact=True), out / name)
    return plans


def _prefill(plan_dir) -> pd.DataFrame:
    plan = read_plan(plan_dir)
    pools = plan.tables["pools"].merge(plan.tables["curves"][["id", "prefill_batch_tokens"]], left_on="config",
                                       right_on="id")
    return pools[pools["role"] == "prefill"]


def test_the_plan_batches_short_prompts_where_the_objective_is_loose(batching_plans):
    loose, unbatched = _prefill(batching_plans["loose"]), _prefill(batching_plans["unbatched"])
    assert set(loose["prefill_batch_tokens"]) == {8192}
    assert set(unbatched["prefill_batch_tokens"]) == {0}
    assert loose["replicas"].sum() < 0.8 * unbatched["replicas"].sum()
    cost = {k: read_plan(v).summary["total_cost_usd"] for k, v in batching_plans.items()}
    assert cost["loose"] < cost["unbatched"]


def test_the_plan_does_not_batch_where_a_full_pass_misses_the_objective(batching_plans):
    """At 130 ms a full pass (8,192 tokens, 178 ms on one H100) is beyond the objective, and
    the passes a waiting prompt rides in leave too little for the wait; one prompt at a time
    (the p99 prompt: 27 ms) does not. (At 150 ms the plan batches, and verify meets it.)"""
    assert set(_prefill(batching_plans["tight"])["prefill_batch_tokens"]) == {0}


def test_verify_simulates_the_plans_own_batch_budget(batching_plans):
    d = batching_plans["loose"]
    planned = verify_plan(d, requests=20000, seed=1)
    assert planned.summary["all_objectives_met"]
    row = planned.tables["by_pool"].iloc[0]
    assert row["ttft_p99_ms"] <= row["ttft_p99_ms_predicted"]
    # the what-if of one prompt at a time on replicas sized for batches cannot keep up
    one_at_a_time = verify_plan(d, requests=20000, seed=1, prefill_batch_tokens=0)
    assert not one_at_a_time.summary["all_objectives_met"]


def test_stress_evaluates_the_batch_decision_under_longer_prompts(batching_plans):
    """config_at keeps the plan's budget and re-packs it: 1.5× longer prompts fit fewer to a
    pass; stress sees that pool, not a one-at-a-time one."""
    d = batching_plans["loose"]
    plan = read_plan(d)
    row = plan.tables["curves"].query("role == 'prefill'").iloc[0]
    s = validate(load_scenario(BATCHING)[1])
    longer = validate(apply_overrides(load_scenario(BATCHING)[1], ["workloads.code-completion.isl_mean_tokens=450"]))
    base, perturbed = config_at(row, s), config_at(row, longer)
    assert base.prefill_batch_tokens == perturbed.prefill_batch_tokens == 8192
    assert perturbed.batch_prompts < base.batch_prompts
    assert perturbed.lane_rps() < base.lane_rps()
    nominal = stress(d)
    harder = stress(d, ["workloads.code-completion.isl_mean_tokens=×1.5"])
    assert nominal.summary["all_objectives_met"]
    assert harder.table["ttft_p99_ms_worst"].iloc[0] > nominal.table["ttft_p99_ms_worst"].iloc[0]


def test_a_folder_from_before_batched_prefill_reads_as_one_prompt_at_a_time(batching_plans, tmp_path):
    import shutil

    d = tmp_path / "old"
    shutil.copytree(batching_plans["unbatched"], d)
    curves = pd.read_csv(d / "curves.csv").drop(columns=["prefill_batch_tokens", "batch_prompts", "batch_pass_ms"])
    curves.to_csv(d / "curves.csv", index=False)
    plan = read_plan(d)
    assert (plan.tables["curves"]["prefill_batch_tokens"] == 0).all()
    assert verify_plan(d, requests=2000, seed=0).summary["all_objectives_met"]
    assert math.isfinite(stress(d).summary["attainment_min"])
