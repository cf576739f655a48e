"""Unserved demand is never the cheaper choice: the penalty per unserved request is at least
PENALTY_MARGIN × the costliest way the plan could serve one, so a penalty set absurdly low
still yields a plan that serves everything it can."""

from __future__ import annotations

import pytest
from instances import TINY, US_EAST, load_instance

from optimizer.commands.pipeline import make_plan
from optimizer.instance.build import PENALTY_MARGIN, serving_ceiling_usd
from optimizer.scenario import load_scenario

LOW = "policy.unserved_penalty_usd_per_million_tokens=0.001"


def test_a_penalty_set_below_the_cost_of_serving_still_serves_everything():
    """tiny at $0.001 per million tokens: leaving its demand would cost a thousandth of a
    cent; without the floor the plan left all 60 req/s of its busy hour unserved (exit 3)."""
    plan = make_plan(TINY, [LOW])
    assert plan.summary["unserved_fraction"] == 0.0
    assert plan.summary["unserved_penalty_usd"] == 0.0


@pytest.mark.parametrize("path", [TINY, US_EAST], ids=["tiny", "us-east"])
def test_the_penalty_is_above_what_serving_a_request_costs_in_the_plan(path):
    """The ceiling bounds what the plan spends per request of each workload (its cost per
    million output tokens × mean output tokens), and the penalty is at least the margin × it."""
    inst = load_instance(path, [LOW])
    s, _ = load_scenario(path, [LOW])
    plan = make_plan(path, [LOW])
    for k, w in s.workloads.items():
        ceiling = serving_ceiling_usd(s, k, inst.pools, inst.contracts)
        assert inst.penalty_usd_per_request[k] == pytest.approx(PENALTY_MARGIN * ceiling)
        spent = plan.summary["cost_per_million_tokens_usd_by_workload"][k] * w.osl_mean_tokens / 1e6
        assert 0 < spent <= ceiling


def test_the_ceiling_grows_with_the_warm_share_and_doubles_for_a_lost_site():
    base = load_instance(TINY)
    s, _ = load_scenario(TINY)
    k = next(iter(s.workloads))
    one = serving_ceiling_usd(s, k, base.pools, base.contracts)
    warm, _ = load_scenario(TINY, ["policy.warm_pool_fraction=0.5"])
    assert serving_ceiling_usd(warm, k, base.pools, base.contracts) == pytest.approx(one / 0.5 * (1 - s.policy.warm_pool_fraction))
    n1, _ = load_scenario(TINY, ["policy.n_minus_1=true"])
    assert serving_ceiling_usd(n1, k, base.pools, base.contracts) == pytest.approx(2 * one)


def test_a_penalty_above_the_ceiling_is_kept_as_given():
    s, _ = load_scenario(TINY)
    inst = load_instance(TINY)
    for k, w in s.workloads.items():
        given = s.policy.unserved_penalty_usd_per_million_tokens * w.osl_mean_tokens / 1e6
        assert given > PENALTY_MARGIN * serving_ceiling_usd(s, k, inst.pools, inst.contracts)
        assert inst.penalty_usd_per_request[k] == given
