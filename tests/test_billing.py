"""Token billing vs GPU-seconds (`optimizer.serving.billing`): list charges by hand, the input share of
each role's GPU time, and the view in a plan's summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.base.errors import ScenarioError
from optimizer.commands.pipeline import make_plan
from optimizer.scenario import load_scenario
from optimizer.serving.billing import TokenPrice, list_charge_usd, token_billing, token_prices
from optimizer.serving.configs import workload_configs

TINY = Path(__file__).parent / "data" / "tiny.yaml"


def test_list_charge_by_hand():
    price = TokenPrice(provider="p", model="m", input_usd_per_million_tokens=0.29, output_usd_per_million_tokens=0.40)
    c_in, c_out = list_charge_usd(price, 2000, 500, cache_hit_rate=0.5)  # no cached rate: full price
    assert c_in == pytest.approx(2000 * 0.29e-6)
    assert c_out == pytest.approx(500 * 0.40e-6)
    # 1.56 USD per million output tokens: (580 + 200) USD per 1e6 requests ÷ 500 tokens
    assert (c_in + c_out) / 500 * 1e6 == pytest.approx(1.56)


def test_cached_input_is_billed_at_its_rate():
    price = TokenPrice(provider="p", model="m", input_usd_per_million_tokens=0.27,
                       cached_input_usd_per_million_tokens=0.07, output_usd_per_million_tokens=1.10)
    c_in, _ = list_charge_usd(price, 1_000_000, 0, cache_hit_rate=0.75)
    assert c_in == pytest.approx(0.25 * 0.27 + 0.75 * 0.07)


def test_the_reference_list_prices_every_shipped_model_used_by_a_workload(reference):
    s, _ = reference
    prices = token_prices("reference")
    assert {w.model for w in s.workloads.values()} <= set(prices)


def test_an_unknown_provider_names_the_field_and_the_known_ones():
    with pytest.raises(ScenarioError) as e:
        token_prices("deepinfa")
    text = str(e.value)
    assert "token_price_provider" in text and "deepinfra" in text


def test_input_share_by_role(reference):
    s, _ = reference
    w = s.workloads["chat"]
    configs = workload_configs(w, s.models[w.model], s.accelerators["h100-sxm"], s.serving)
    roles = {c.role: c.input_share for c in configs}
    assert roles["prefill"] == 1.0 and roles["decode"] == 0.0
    colocated = [c.input_share for c in configs if c.role == "colocated"]
    assert colocated and all(0.0 < x < 1.0 for x in colocated)


def test_longer_prompts_take_a_larger_share_of_a_colocated_replica(reference):
    s, _ = reference
    w = s.workloads["chat"]
    shares = []
    for isl in (500, 2000, 6000):
        wl = w.model_copy(update={"isl_mean_tokens": isl, "isl_p99_tokens": max(isl * 2, w.isl_p99_tokens)})
        c = [c for c in workload_configs(wl, s.models[w.model], s.accelerators["h100-sxm"], s.serving)
             if c.role == "colocated" and c.gpus == 8]
        shares.append(min(x.input_share for x in c))
    assert shares == sorted(shares) and shares[0] < shares[-1]


def test_a_plan_summary_carries_the_billing_view():
    plan = make_plan(TINY, exact=True)
    sm = plan.summary
    row = sm["token_billing"]["by_workload"]["code-completion"]
    assert sm["token_billing"]["provider"] == "reference"
    assert row["gpu_cost_usd_per_million_output_tokens"] == pytest.approx(
        sm["cost_per_million_tokens_usd_by_workload"]["code-completion"])
    # llama-3.1-8b reference list: 800 × 0.22 + 40 × 0.45 USD per 1e6 requests ÷ 40 tokens
    assert row["list_usd_per_million_output_tokens"] == pytest.approx((800 * 0.22 + 40 * 0.45) / 40)
    assert row["input_share_of_charge"] == pytest.approx(800 * 0.22 / (800 * 0.22 + 40 * 0.45))
    assert 0.0 < row["input_share_of_gpu_hours"] < 1.0  # tiny.yaml is colocated only
    assert row["gpu_cost_over_list"] == pytest.approx(
        row["gpu_cost_usd_per_million_output_tokens"] / row["list_usd_per_million_output_tokens"])


def test_divergence_is_named_when_the_shares_differ():
    s, _ = load_scenario(TINY)
    view = token_billing(s, {"code-completion": 100.0}, {"code-completion": 1e6},
                         {"code-completion": 1.0}, {"code-completion": 10.0})
    row = view["by_workload"]["code-completion"]
    assert row["input_share_of_gpu_hours"] == pytest.approx(0.1)
    assert row["input_share_of_charge"] > 0.9 and "input is overpriced" in row["diverges"]
    close = token_billing(s, {"code-completion": 100.0}, {"code-completion": 1e6},
                          {"code-completion": 9.0}, {"code-completion": 10.0})
    assert close["by_workload"]["code-completion"]["diverges"] is None
