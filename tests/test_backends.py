"""The fast road (arrays straight into highspy) gives the reference road's results (the same
program through Pyomo's persistent HiGHS interface), on small cases. Both stop at the first
whole plan: refining runs on the fast road only."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.commands.pipeline import make_plan
from optimizer.scenario import DATA_DIR

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("scenario,exact", [(DATA / "tiny.yaml", True), (DATA / "hetero.yaml", False),
                                            (DATA / "tiny.yaml", False)])
def test_backends_agree(scenario, exact):
    fast = make_plan(scenario, exact=exact, backend="highs", effort="first").summary
    reference = make_plan(scenario, exact=exact, backend="pyomo", effort="first").summary
    assert fast["status"] == reference["status"]
    tolerance = max(fast["mip_gap"], reference["mip_gap"], 1e-9)
    assert fast["objective_usd"] == pytest.approx(reference["objective_usd"], rel=tolerance)
    assert fast["best_bound_usd"] == pytest.approx(reference["best_bound_usd"], rel=1e-6)


def test_backends_agree_on_a_larger_master():
    path = DATA_DIR / "scenarios" / "us-east.yaml"
    fast = make_plan(path, backend="highs", effort="first").summary
    reference = make_plan(path, backend="pyomo", effort="first").summary
    assert fast["best_bound_usd"] == pytest.approx(reference["best_bound_usd"], rel=1e-6)
    # both plans lie between the shared bound and the worse of the two
    gap = max(fast["mip_gap"], reference["mip_gap"])
    assert fast["objective_usd"] == pytest.approx(reference["objective_usd"], rel=gap)
