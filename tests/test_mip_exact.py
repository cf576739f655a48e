"""The MIP against a brute-force enumeration of integer plans on a tiny instance
(2 metros, 2 sites, 2 accelerators, 2 slices), and the default mode's bound and plan around
the true optimum."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import build_instance
from optimizer.scenario import load_scenario
from optimizer.solve import SolverSettings, solve

TINY = Path(__file__).parent / "data" / "tiny.yaml"


def tiny_instance(overrides=()):
    s, _ = load_scenario(TINY, list(overrides))
    return build_instance(s, rtt_matrix(build_graph(s), s))


def _capacity(pool, n: int, ptm: float) -> float:
    """Requests/s of mean load n replicas of a colocated pool carry inside their SLO."""
    if n == 0:
        return 0.0
    return min(float(pool.table[n - 1]), pool.decode_rps * n) / ptm


def brute_force(inst) -> float:
    """The cheapest integer plan, by enumeration: every vector of whole replicas per pool and
    slice, every whole number of committed nodes per (site, accelerator), on-demand nodes for
    the rest. Written independently of the MIP: routing is a max-flow, which on this instance
    (every metro reaches every pool) is min(demand, total capacity)."""
    assert all(p.role == "colocated" for p in inst.pools)
    for st in inst.states:
        reach = {(a.metro, a.site, a.tier) for a in inst.arcs_in(st)}
        assert all((m, p.site, p.tier) in reach for m in inst.metros for p in inst.pools)
    k = inst.workloads[0]
    penalty = inst.penalty_usd_per_request[k]
    egress = inst.egress_usd_per_request[k]
    pairs = inst.site_gpus
    options = {}
    for st in inst.states:
        demand = sum(v for (m, kk, t), v in inst.demand.items() if t == st.slice)
        ranges = []
        for p in inst.pools:
            top = 0
            while _capacity(p, top, p.peak_to_mean) < demand and top < len(p.table):
                top += 1
            ranges.append(range(top + 1))
        opts = []
        for ns in itertools.product(*ranges):
            served = min(demand, sum(_capacity(p, n, p.peak_to_mean) for p, n in zip(inst.pools, ns)))
            gpus = {pair: 0 for pair in pairs}
            for p, n in zip(inst.pools, ns):
                gpus[(p.site, p.gpu)] += n * p.gpus
            nodes = tuple(math.ceil(gpus[pair] / inst.gpus_per_node[pair[1]]) for pair in pairs)
            opts.append((nodes, served, demand))
        options[st.id] = opts
    top_nodes = [max(o[0][i] for opts in options.values() for o in opts) for i in range(len(pairs))]
    best = math.inf
    for committed in itertools.product(*(range(t + 1) for t in top_nodes)):
        cost = sum(c * min(p.rate + p.energy for p in inst.contracts[pair].committed.values()) * 8760
                   for c, pair in zip(committed, pairs))
        for st in inst.states:
            h = st.weight_hours
            cost += min(
                sum(h * inst.contracts[pair].ondemand * max(0, n - c) for n, c, pair in zip(nodes, committed, pairs))
                + 3600 * h * (penalty * (demand - served) + egress * served)
                for nodes, served, demand in options[st.id]
            )
        best = min(best, cost)
    return best


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
        assert _capacity(pool, n, pool.peak_to_mean) >= sol.flows[(pid, sid)] * (1 - 1e-9)
    assert not sol.violations
