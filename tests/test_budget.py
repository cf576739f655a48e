"""The TTFT budget waterfall: arithmetic on hand-made configs, near vs far sites, an
infeasible site across the Pacific, and `fleetplan budget --json`."""

from __future__ import annotations

import json

import pytest

from optimizer.budget import best_waterfall, colocated, disaggregated
from optimizer.cli import main
from optimizer.configs import ServingConfig
from optimizer.network import build_graph, haversine_km, rtt_matrix
from optimizer.scenario import load_scenario

KEYS = ["rtt_ms", "overhead_ms", "prefill_ms", "kv_transfer_ms", "first_token_ms", "queue_budget_ms",
        "ttft_p99_ms", "feasible"]
SPENT = ["rtt_ms", "overhead_ms", "prefill_ms", "kv_transfer_ms", "first_token_ms"]

# Hand-made configs, so the arithmetic below does not move when the curves are re-tuned.
PREFILL = ServingConfig(id="p", workload="chat", gpu="x", gpus=8, role="prefill", prefill_p99_ms=80.0,
                        nic_bytes_per_s=50e9)
DECODE = ServingConfig(id="d", workload="chat", gpu="x", gpus=2, role="decode", step_ms=20.0, nic_bytes_per_s=25e9)
COLOCATED = ServingConfig(id="c", workload="chat", gpu="x", gpus=8, role="colocated", prefill_p99_ms=150.0,
                          step_ms=30.0)
KV_BYTES_PER_TOKEN = 163_840.0  # Llama-3.1-70B with FP8 KV: 2 · 80 layers · 8 heads · 128 · 1 B


def budget_json(capsys, *args) -> dict:
    assert main(["budget", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def assert_adds_up(out: dict) -> None:
    assert out["ttft_p99_ms"] - sum(out[k] for k in SPENT) == pytest.approx(out["queue_budget_ms"], abs=1e-9)
    assert out["feasible"] == (out["queue_budget_ms"] >= 0)


# ----------------------------------------------------------------------------- arithmetic


def test_disaggregated_waterfall_by_hand(reference):
    s, _ = reference
    w = s.workloads["chat"]
    assert (w.isl_p99_tokens, w.ttft_p99_ms) == (4500, 300)
    assert s.serving.fixed_overhead_ms == 3 + 15 + 5  # tokenisation, safety, admission
    f = disaggregated(w, s, 20.0, PREFILL, DECODE, KV_BYTES_PER_TOKEN)
    # KV of the p99 prompt over the slower NIC (25 GB/s), plus 1 ms set-up
    xfer = 1.0 + 4500 * 163_840 / 25e9 * 1e3
    first = (1 + 1.15) * 20.0  # join wait (≤ one step) + the p99 step
    assert f.kv_transfer_ms == pytest.approx(xfer)  # 30.49 ms
    assert f.first_token_ms == pytest.approx(43.0)
    assert f.queue_budget_ms == pytest.approx(300 - 20 - 23 - 80 - xfer - first)
    assert f.feasible and f.mode == "disaggregated"
    assert f.prefill_config == "p" and f.decode_config == "d"
    assert_adds_up(f.as_dict())


def test_colocated_waterfall_and_the_best_path(reference):
    s, _ = reference
    w = s.workloads["chat"]
    c = colocated(w, s, 20.0, COLOCATED)
    assert c.kv_transfer_ms == 0 and c.first_token_ms == 0  # the last chunk emits the first token
    assert c.queue_budget_ms == pytest.approx(300 - 20 - 23 - 150)  # 107 ms
    best = best_waterfall(w, s, 20.0, [PREFILL, DECODE, COLOCATED], KV_BYTES_PER_TOKEN)
    assert best.mode == "colocated" and best.queue_budget_ms == pytest.approx(107.0)
    # without the colocated option the disaggregated path is the best there is
    assert best_waterfall(w, s, 20.0, [PREFILL, DECODE], KV_BYTES_PER_TOKEN).mode == "disaggregated"
    assert best_waterfall(w, s, 20.0, [PREFILL], KV_BYTES_PER_TOKEN) is None  # no decode side


def test_every_ms_of_rtt_comes_out_of_the_queue(reference):
    s, _ = reference
    w = s.workloads["chat"]
    near = disaggregated(w, s, 15.0, PREFILL, DECODE, KV_BYTES_PER_TOKEN)
    far = disaggregated(w, s, 115.0, PREFILL, DECODE, KV_BYTES_PER_TOKEN)
    assert near.queue_budget_ms - far.queue_budget_ms == pytest.approx(100.0)
    too_far = disaggregated(w, s, 250.0, PREFILL, DECODE, KV_BYTES_PER_TOKEN)
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
