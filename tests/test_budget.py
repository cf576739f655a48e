"""The TTFT budget waterfall: the q-quantile of the stages after the wait against a Monte
Carlo of the same stages, stage p99s that do not add, near vs far sites, an infeasible site
across the Pacific, and `fleetplan budget --json`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from optimizer.cli.main import main
from optimizer.curves.lengths import LengthDistribution
from optimizer.curves.roofline import prefill_time_s
from optimizer.geography.network import build_graph, haversine_km, rtt_matrix
from optimizer.scenario import load_scenario
from optimizer.serving.budget import Stages, best_waterfall, colocated, disaggregated
from optimizer.serving.configs import kv_bytes_per_token, make_replica, workload_configs

KEYS = ["rtt_ms", "overhead_ms", "prefill_ms", "kv_transfer_ms", "first_token_ms", "queue_budget_ms",
        "ttft_p99_ms", "feasible"]
SPENT = ["rtt_ms", "overhead_ms", "prefill_ms", "kv_transfer_ms", "first_token_ms"]


def budget_json(capsys, *args) -> dict:
    assert main(["budget", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def assert_adds_up(out: dict) -> None:
    assert out["ttft_p99_ms"] - sum(out[k] for k in SPENT) == pytest.approx(out["queue_budget_ms"], abs=1e-9)
    assert out["feasible"] == (out["queue_budget_ms"] >= 0)


def chat_configs(s, gpu: str):
    w = s.workloads["chat"]
    configs = workload_configs(w, s.models[w.model], s.accelerators[gpu], s.serving)
    prefill = next(c for c in configs if c.id == f"chat/{gpu}/x4/prefill")
    decode = next(c for c in configs if c.role == "decode" and c.speed == 1.0 and not c.speculative)
    return w, prefill, decode, configs


def sampled_prompts(s, w, n: int = 400_000, seed: int = 5):
    """Prompts as the simulator draws them: lognormal lengths, a hit bringing the shared prefix."""
    rng = np.random.default_rng(seed)
    tokens = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, s.models[w.model].max_context).sample(rng, n)
    hit = rng.random(n) < w.prompt_cache_hit_rate
    return rng, tokens, np.where(hit, np.minimum(tokens - 1, w.shared_prefix_tokens), 0)


# ----------------------------------------------------------------------------- arithmetic


def test_disaggregated_waterfall_is_the_quantile_of_the_stages(reference):
    """The stages after the wait — prefill of the prompt, its KV over the slower NIC, the rest
    of the decode step it joins (uniform) and one step — have a p99 below the sum of their
    p99s; the waterfall's parts add up to it. Checked against a Monte Carlo of the stages."""
    s, _ = reference
    w, prefill, decode, _ = chat_configs(s, "b200")
    assert (w.ttft_p99_ms, s.serving.fixed_overhead_ms, w.slo_attainment) == (300, 23, 0.99)
    f = disaggregated(w, s, 20.0, prefill, decode, Stages(s))
    rng, tokens, cached = sampled_prompts(s, w)
    r = make_replica(s.models[w.model], s.accelerators["b200"], s.serving, 4, w.weight_dtype, w.kv_dtype)
    nic = min(prefill.nic_bytes_per_s, decode.nic_bytes_per_s)
    transfer = s.serving.kv_transfer_latency_ms / 1e3 + tokens * kv_bytes_per_token(w, s.models[w.model]) / nic
    step = decode.step_ms / 1e3
    stages = prefill_time_s(r, tokens, cached) + transfer + step * (1.0 + rng.random(len(tokens)))
    sampled = 1e3 * np.quantile(stages, 0.99)
    spent = f.prefill_ms + f.kv_transfer_ms + f.first_token_ms
    assert spent == pytest.approx(sampled, rel=0.01)
    assert f.queue_budget_ms == pytest.approx(300 - 20 - 23 - spent)
    # stage p99s do not add: the p99 prompt's prefill and transfer and a whole extra step are more
    p99_prompt = 1e3 * float(prefill_time_s(r, w.isl_p99_tokens, 0) + s.serving.kv_transfer_latency_ms / 1e3
                             + w.isl_p99_tokens * kv_bytes_per_token(w, s.models[w.model]) / nic)
    assert spent < p99_prompt + 2 * decode.step_ms
    assert f.feasible and f.mode == "disaggregated"
    assert f.prefill_config == prefill.id and f.decode_config == decode.id
    assert_adds_up(f.as_dict())


def test_colocated_waterfall_and_the_best_path(reference):
    """Colocated: the rest of the running iteration, then one C-token chunk per iteration; the
    last chunk emits the first token (no transfer, no separate first step)."""
    s, _ = reference
    w, prefill, decode, configs = chat_configs(s, "b200")
    together = next(c for c in configs if c.role == "colocated")
    c = colocated(w, s, 20.0, together, Stages(s))
    assert c.kv_transfer_ms == 0 and c.first_token_ms == 0
    rng, tokens, cached = sampled_prompts(s, w)
    iteration = together.step_ms / 1e3
    stages = (np.ceil((tokens - cached) / together.chunk_tokens) + rng.random(len(tokens))) * iteration
    # every chunk at the mid-prompt iteration: at the balance batch the decode share of an
    # iteration is small, so where a chunk sits in its prompt moves it by a percent or two
    assert c.prefill_ms == pytest.approx(1e3 * np.quantile(stages, 0.99), rel=0.02)
    assert c.queue_budget_ms == pytest.approx(300 - 20 - 23 - c.prefill_ms)
    options = [disaggregated(w, s, 20.0, prefill, decode, Stages(s)), c]
    best = best_waterfall(w, s, 20.0, [prefill, decode, together])
    assert best.queue_budget_ms == pytest.approx(max(o.queue_budget_ms for o in options))
    assert best_waterfall(w, s, 20.0, [prefill, decode]).mode == "disaggregated"
    assert best_waterfall(w, s, 20.0, [prefill]) is None  # no decode side


def test_every_ms_of_rtt_comes_out_of_the_queue(reference):
    s, _ = reference
    w, prefill, decode, _ = chat_configs(s, "b200")
    stages = Stages(s)
    near = disaggregated(w, s, 15.0, prefill, decode, stages)
    far = disaggregated(w, s, 115.0, prefill, decode, stages)
    assert near.queue_budget_ms - far.queue_budget_ms == pytest.approx(100.0)
    too_far = disaggregated(w, s, 250.0, prefill, decode, stages)
    assert too_far.queue_budget_ms < 0 and not too_far.feasible and too_far.as_dict()["feasible"] is False


# ----------------------------------------------------------------------------- the CLI


def test_budget_json_keys_and_sum(capsys):
    out = budget_json(capsys, "--metro", "chicago", "--site", "chicago", "--workload", "chat")
    for key in KEYS:
        assert key in out, key
    assert out["metro"] == "chicago" and out["site"] == "chicago" and out["workload"] == "chat"
    assert out["ttft_p99_ms"] == 300 and out["overhead_ms"] == 23
    assert_adds_up(out)
    # a user in the site's own metro: site round trip + access, no distance
    s, _ = load_scenario()
    assert out["rtt_ms"] == pytest.approx(s.network.site_rtt_ms + s.network.access_rtt_ms)
    assert out["feasible"] is True


def test_far_site_leaves_less_queueing_budget_than_near_ones(capsys):
    args = ["--metro", "chicago", "--workload", "chat", "--gpu", "h200-sxm"]
    out = {site: budget_json(capsys, *args, "--site", site) for site in ("chicago", "ashburn", "frankfurt")}
    for o in out.values():
        assert_adds_up(o)
    # same accelerator everywhere, so only the network differs
    assert out["chicago"]["rtt_ms"] < out["ashburn"]["rtt_ms"] < out["frankfurt"]["rtt_ms"]
    assert out["frankfurt"]["queue_budget_ms"] < out["ashburn"]["queue_budget_ms"] < out["chicago"]["queue_budget_ms"]
    assert out["chicago"]["queue_budget_ms"] - out["frankfurt"]["queue_budget_ms"] == pytest.approx(
        out["frankfurt"]["rtt_ms"] - out["chicago"]["rtt_ms"])
    assert 85 + 5 <= out["frankfurt"]["rtt_ms"] <= 120 + 5  # transatlantic band plus access


def test_budget_text_output(capsys):
    assert main(["budget", "--metro", "chicago", "--site", "ashburn", "--workload", "chat"]) == 0
    text = capsys.readouterr().out
    assert "TTFT budget, chat from chicago at ashburn" in text
    assert "network round trip" in text and "left for queueing" in text and "of a 300 ms p99 objective" in text


def test_budget_unknown_metro_exits_2(capsys):
    assert main(["budget", "--metro", "chicgo", "--site", "ashburn", "--workload", "chat", "--json"]) == 2
    err = capsys.readouterr().err
    assert "field '--metro'" in err and "unknown metro 'chicgo'" in err and "did you mean chicago" in err


PACIFIC = {
    "name": "pacific",
    "accelerators": ["h100-sxm", "h200-sxm"],
    "metros": ["chicago", "tokyo", "singapore"],
    "sites": ["chicago", "tokyo", "singapore"],
    "workloads": ["chat"],
}


def test_site_across_the_pacific_is_infeasible(write_scenario, capsys):
    path = write_scenario(PACIFIC)
    s, raw = load_scenario(path)
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s)
    # by hand: Chicago–Singapore ≈ 15,080 km → 2 · 15,080 · 1.45 / 200 + 8.5 + 5 ≈ 232 ms
    km = float(haversine_km(s.metros["chicago"].lat, s.metros["chicago"].lon,
                            s.sites["singapore"].lat, s.sites["singapore"].lon))
    assert km == pytest.approx(15_080, rel=0.01)
    assert rtt.loc["chicago", "singapore"] == pytest.approx(2 * km * 1.45 / 200 + 8.5 + 5.0)

    common = ["--scenario", str(path), "--workload", "chat"]
    far = budget_json(capsys, *common, "--metro", "chicago", "--site", "singapore")
    assert_adds_up(far)
    assert far["rtt_ms"] == pytest.approx(rtt.loc["chicago", "singapore"])
    assert far["rtt_ms"] + far["overhead_ms"] > 0.8 * far["ttft_p99_ms"]  # the network alone eats the budget
    assert far["feasible"] is False and far["queue_budget_ms"] < 0

    # Tokyo is nearer but still across the Pacific: infeasible too
    tokyo = budget_json(capsys, *common, "--metro", "chicago", "--site", "tokyo")
    assert tokyo["feasible"] is False and far["queue_budget_ms"] < tokyo["queue_budget_ms"] < 0
    # every site offers the same accelerators, so the home site gains exactly the RTT it saves
    home = budget_json(capsys, *common, "--metro", "chicago", "--site", "chicago")
    assert home["rtt_ms"] == pytest.approx(8.5 + 5.0)
    assert home["queue_budget_ms"] - far["queue_budget_ms"] == pytest.approx(far["rtt_ms"] - home["rtt_ms"])
    assert home["feasible"] is True

    assert main(["budget", *common, "--metro", "chicago", "--site", "singapore"]) == 0
    assert "INFEASIBLE" in capsys.readouterr().out
