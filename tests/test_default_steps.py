"""The pipeline with its default step list (bound, improve, refine), which the rest of the
suite swaps for the first plan only (tests/conftest.py `first_plans_only`): the tiny scenario
planned by `make_plan` as ``fleetplan plan`` would, its summary coherent and its log showing
the refine step's work."""

from __future__ import annotations

import pytest
from instances import TINY

from optimizer.commands import pipeline
from optimizer.commands.pipeline import make_plan
from optimizer.solve.settings import FIRST_PLAN_STEPS, STEPS


def test_the_suite_plans_first_plans_only_unless_a_test_asks():
    assert pipeline.STEPS == FIRST_PLAN_STEPS


@pytest.mark.default_steps
def test_a_plan_with_the_default_steps_is_served_and_its_summary_coherent(optimum):
    assert pipeline.STEPS == STEPS
    # exact=False: left to itself the tiny instance is solved in exact mode, without steps
    plan = make_plan(TINY, exact=False)
    s = plan.summary
    assert tuple(s["settings"]["steps"]) == STEPS == ("bound", "improve", "refine")
    assert s["settings"]["effort"] == "quick" and s["mode"] == "master+repair"
    kinds = [step["kind"] for step in s["steps"]]
    assert kinds[0] == "bound" and "improve" in kinds
    assert "exact" in kinds  # refine's warm-started exact model: no first-plan step logs it
    assert set(kinds) <= {"bound", "room", "reoperate", "improve", "exact"}

    assert s["unserved_fraction"] == 0 and s["total_cost_usd"] > 0
    assert set(plan.tables["routing"]["workload"]) == {"code-completion"}
    assert s["status"] == "optimal" and s["proven_within_gap"] and not s["stopped_by_wall_clock"]
    assert s["best_bound_usd"] <= s["objective_usd"] * (1 + 1e-9)
    assert s["mip_gap"] == pytest.approx((s["objective_usd"] - s["best_bound_usd"]) / s["objective_usd"], abs=1e-12)
    assert s["mip_gap"] <= s["mip_gap_target"]
    assert s["objective_usd"] == pytest.approx(optimum, rel=1e-6)  # the brute-force optimum
    split = s["gap_split"]
    assert split["plan_usd"] == pytest.approx(s["objective_usd"]) and split["first_plan_usd"] >= split["plan_usd"]
    assert split["bound_usd"] == pytest.approx(s["best_bound_usd"])
    assert s["work"]["moves priced"] > 0 and s["work"]["branch-and-bound nodes"] >= 1
    assert 0 < s["first_plan_seconds"] <= s["solve_seconds"]
