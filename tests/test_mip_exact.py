"""The MIP against a brute-force enumeration of integer plans (`instances.brute_force`) on the
tiny instance (2 metros, 2 sites, 2 accelerators, 2 slices), and the default mode's bound and plan around
the true optimum."""

from __future__ import annotations

import pytest
from instances import capacity

from optimizer.solve import SolverSettings, solve


def test_exact_mode_finds_the_brute_force_optimum(tiny, optimum):
    result = solve(tiny, SolverSettings(exact=True, mip_gap=1e-9, time_limit_s=60))
    assert result.status == "optimal"
    assert result.objective_usd == pytest.approx(optimum, rel=1e-6)


def test_default_mode_brackets_the_optimum(tiny, optimum):
    result = solve(tiny, SolverSettings(exact=False, mip_gap=1e-6, time_limit_s=60))
    assert result.best_bound_usd <= optimum * (1 + 1e-9)
    assert optimum <= result.objective_usd * (1 + 1e-9)
    assert result.mip_gap == pytest.approx((result.objective_usd - result.best_bound_usd) / result.objective_usd)


def test_plan_pools_are_whole_and_fit_their_nodes(tiny):
    result = solve(tiny, SolverSettings(exact=False, time_limit_s=60))
    sol = result.solution
    for (pid, sid), n in sol.replicas.items():
        pool = tiny.pools[pid]
        assert isinstance(n, int)
        assert capacity(pool, n, pool.peak_to_mean) >= sol.flows[(pid, sid)] * (1 - 1e-9)
    assert not sol.violations
