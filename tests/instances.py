"""The test suite's instances, in one place for every test that needs one:

* `tiny_instance` — tests/data/tiny.yaml (2 metros, 2 sites, 2 accelerators, 2 slices, one
  colocated workload), small enough that `brute_force` enumerates every integer plan;
* `load_instance` / `us_east_instance` — a scenario file's instance (the shipped us-east);
* `hand_made` — an `Instance` built by hand, no YAML, no network, its numbers chosen so that
  the formulation tests can compute each coefficient by hand (`HOURS`, `DAYS`, `TABLE`).

The fixtures ``tiny`` and ``optimum`` (tests/conftest.py) hold the tiny instance and its
brute-force optimum for a session."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.units import HOURS_PER_YEAR
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import Arc, CommittedPrice, Contract, Instance, State, build_instance
from optimizer.instance.pools import Pool
from optimizer.scenario import DATA_DIR, load_scenario
from optimizer.serving.configs import ServingConfig

TINY = Path(__file__).parent / "data" / "tiny.yaml"
US_EAST = DATA_DIR / "scenarios" / "us-east.yaml"
# either tiny site serves its demand at the same cost: which one a plan picks is the solver's
# tie-break unless one is dearer
DEARER_DALLAS = "sites.dallas.price_multiplier=1.01"


def load_instance(path, overrides=()) -> Instance:
    """A scenario file (with ``--set`` overrides) → its instance, the network read beside it."""
    s, raw = load_scenario(path, list(overrides))
    return build_instance(s, rtt_matrix(build_graph(s, raw.path.parent), s))


def tiny_instance(overrides=()) -> Instance:
    """tests/data/tiny.yaml as an instance (see the module docstring)."""
    return load_instance(TINY, overrides)


def us_east_instance() -> Instance:
    """The shipped us-east scenario as an instance."""
    return load_instance(US_EAST)


def capacity(pool, n: int, ptm: float) -> float:
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
            while capacity(p, top, p.peak_to_mean) < demand and top < len(p.table):
                top += 1
            ranges.append(range(top + 1))
        opts = []
        for ns in itertools.product(*ranges):
            served = min(demand, sum(capacity(p, n, p.peak_to_mean) for p, n in zip(inst.pools, ns)))
            gpus = {pair: 0 for pair in pairs}
            for p, n in zip(inst.pools, ns):
                gpus[(p.site, p.gpu)] += n * p.gpus
            nodes = tuple(math.ceil(gpus[pair] / inst.gpus_per_node[pair[1]]) for pair in pairs)
            opts.append((nodes, served, demand))
        options[st.id] = opts
    top_nodes = [max(o[0][i] for opts in options.values() for o in opts) for i in range(len(pairs))]
    best = math.inf
    for committed in itertools.product(*(range(t + 1) for t in top_nodes)):
        cost = sum(_committed_usd(inst, pair, c) for c, pair in zip(committed, pairs))
        for st in inst.states:
            h = st.weight_hours
            cost += min(
                sum(h * inst.contracts[pair].ondemand * max(0, n - c) for n, c, pair in zip(nodes, committed, pairs))
                + 3600 * h * (penalty * (demand - served) + egress * served)
                for nodes, served, demand in options[st.id]
            )
        best = min(best, cost)
    return best



def _committed_usd(inst, pair, c: int) -> float:
    """A year of c committed nodes at a pair: the existing fleet's nodes (as many as it has) and
    new ones (up to the supply cap), the cheapest rate first."""
    layers = sorted((price.rate + price.energy, inst.existing_nodes.get((*pair, term), inst.committed_max[pair]))
                    for term, price in inst.contracts[pair].committed.items())
    cost = 0.0
    for rate, cap in layers:
        n = min(c, cap)
        cost, c = cost + n * rate * 8760, c - n
    return cost if c == 0 else math.inf


HOURS = HOURS_PER_YEAR / 2  # two slices, each half the year
DAYS = HOURS_PER_YEAR / 24  # each slice's hour recurs every day
TABLE = np.array([5.0, 12.0, 20.0])  # f(n): requests/s a queueing pool of n replicas carries


def _config(cid: str, role: str, gpus: int) -> ServingConfig:
    return ServingConfig(id=cid, workload="k", gpu="g", gpus=gpus, role=role, decode_rps=3.0)


def hand_made(n_minus_1: bool = False, cold_start_hours: float = 1 / 6, **changes) -> Instance:
    """Metro m1; sites s1 (10 ms) and s2 (30 ms); workload k; accelerator g (8 GPUs a node);
    slices 0 (hour 0, 10 req/s) and 1 (hour 12, 20 req/s, the peak); at each site a prefill
    pool (table f), a colocated pool (f and 3 req/s of decode slots) and a decode pool."""
    slices = pd.DataFrame({"period": ["Y", "Y"], "period_index": [0, 0], "day_type": ["all", "all"],
                           "day_multiplier": [1.0, 1.0], "hour": [0, 12], "weight_hours": [HOURS, HOURS],
                           "days": [DAYS, DAYS]})
    slices.index.name = "slice"
    states = [State(0, 0, "nominal", None, HOURS, HOURS, DAYS), State(1, 1, "nominal", None, HOURS, HOURS, DAYS)]
    pools, tier_pools, decode_pools = [], {}, {}
    for site in ("s1", "s2"):
        base = len(pools)
        pools += [Pool(base, "prefill", "nominal", site, "k", 0, "g", _config(f"{site}/p", "prefill", 2), 100.0, TABLE,
                       0.0, 0, 1.2),
                  Pool(base + 1, "colocated", "nominal", site, "k", 0, "g", _config(f"{site}/c", "colocated", 1), 100.0,
                       TABLE, 3.0, -1, 1.2),
                  Pool(base + 2, "decode", "nominal", site, "k", -1, "g", _config(f"{site}/d", "decode", 4), 0.0, None,
                       3.0, 0, 1.2)]
        tier_pools[("nominal", site, "k", 0)] = [base, base + 1]
        decode_pools[(site, "k", 0)] = [base + 2]
    if n_minus_1:
        states.append(State(2, 1, "relaxed", "s1", 0.0, 1000.0, 0.0))
        for site in ("s1", "s2"):
            base = len(pools)
            pools.append(Pool(base, "colocated", "relaxed", site, "k", 0, "g", _config(f"{site}/c", "colocated", 1),
                              100.0, TABLE, 3.0, -1, 1.2))
            tier_pools[("relaxed", site, "k", 0)] = [base]
    arcs = [Arc("m1", "s1", "k", 0, 10.0), Arc("m1", "s2", "k", 0, 30.0)]
    price = Contract(30.0, {"reserved-1y": CommittedPrice(20.0, 0.0, "reserved")})
    inst = Instance(
        name="tiny", slices=slices, states=states, metros=["m1"], sites=["s1", "s2"], workloads=["k"], gpus=["g"],
        demand={("m1", "k", 0): 10.0, ("m1", "k", 1): 20.0}, peak_to_mean={"k": 1.2}, peak_slice=1,
        arcs={"nominal": arcs, "relaxed": arcs if n_minus_1 else []}, pools=pools, tier_pools=tier_pools,
        decode_pools=decode_pools, site_gpus=[("s1", "g"), ("s2", "g")], gpus_per_node={"g": 8},
        node_kw={"g": 10.0}, pue={"s1": 1.2, "s2": 1.5}, power_kw={"s1": 500.0, "s2": 800.0},
        contracts={("s1", "g"): price, ("s2", "g"): price}, committed_max={("s1", "g"): 40, ("s2", "g"): 50},
        ondemand_max={("s1", "g"): 10, ("s2", "g"): 0}, allow_ondemand=True, cold_start_hours=cold_start_hours,
        warm_fraction=0.1, penalty_usd_per_request={"k": 1e-3}, egress_usd_per_request={"k": 2e-6},
        output_tokens={"k": 100.0}, input_tokens={"k": 1000.0}, handoff_ms={}, transfer_ms={})
    return dataclasses.replace(inst, **changes)
