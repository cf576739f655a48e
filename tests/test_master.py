"""The master LP's demand groups are an exact aggregation: metros of a workload whose arcs reach
the same (site, tier) pairs are one demand, and the optimum is the one of a program with every
metro its own demand (routes cost the same from each, egress being per request)."""

from __future__ import annotations

import numpy as np
import pytest

from formulations import Mode, build_program, routing
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import build_instance
from optimizer.scenario import DATA_DIR, load_scenario
from optimizer.solve.backends import HighsDirect
from optimizer.solve.pricing import at_sizes, pool_sizes


def _optimum(inst) -> tuple[float, int]:
    largest, _ = pool_sizes(inst)
    lp, _ = build_program(inst, mode=Mode.plan_master(gpus_per_rps=at_sizes(inst, largest)))
    highs = HighsDirect(lp).highs
    highs.run()
    return highs.getInfo().objective_function_value, lp.n_cols


def test_grouping_metros_with_the_same_arcs_keeps_the_masters_optimum(monkeypatch):
    s, raw = load_scenario(DATA_DIR / "scenarios" / "us-east.yaml")
    inst = build_instance(s, rtt_matrix(build_graph(s, raw.path.parent), s))
    grouped, columns = _optimum(inst)
    alone = routing.demand_groups
    monkeypatch.setattr(routing, "demand_groups", lambda i, st, each_metro=False: alone(i, st, each_metro=True))
    each, more_columns = _optimum(inst)
    assert columns < more_columns  # some metros share their arcs there
    assert grouped == pytest.approx(each, rel=1e-9)
    assert np.isfinite(grouped)
