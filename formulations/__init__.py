"""The planning MIP, one module per concern.

Each module has one entry point, ``add_to(build)``, and a docstring glossary of the sets,
variables, constraints and cost terms it adds. Modules write cost terms and balance
contributions into the typed registry (`registry.Terms`); the balancing modules, run last,
turn those into constraints, and the objective is assembled from the cost terms.

Order: pools produce flows and GPU loads (prefill, colocated, decode), routing feeds the
tiers, latency_tiers balances them, procurement supplies nodes, scaling prices on-demand
ramps, resilience ties site-loss states to the peak slice, capacity and power close the
balances. `formulations` knows only the `Instance` contract, never `optimizer`.
"""

from __future__ import annotations

import pyomo.environ as pyo

from formulations import (
    capacity,
    colocated,
    decode,
    latency_tiers,
    power,
    prefill,
    procurement,
    resilience,
    routing,
    scaling,
)
from formulations.registry import Build, Terms

MODULES = (prefill, colocated, decode, routing, latency_tiers, procurement, scaling, resilience, capacity, power)


def build_model(inst, exact: bool, gpus_per_rps: dict, max_replicas: dict) -> tuple[pyo.ConcreteModel, Terms]:
    """The MIP for ``inst``. ``gpus_per_rps[(pool, state)]`` seeds the master problem's
    per-pool GPU cost of a request/s (ignored in exact mode); ``max_replicas`` bounds pools."""
    model = pyo.ConcreteModel(name=inst.name)
    terms = Terms()
    model.gpus_per_rps = pyo.Param(sorted(gpus_per_rps), initialize=gpus_per_rps, mutable=True, within=pyo.NonNegativeReals)
    build = Build(model, inst, terms, exact, max_replicas)
    for module in MODULES:
        module.add_to(build)
    model.cost = pyo.Expression(list(terms.cost), rule=lambda m, c: pyo.quicksum(terms.cost[c]) if terms.cost[c] else 0.0)
    model.objective = pyo.Objective(expr=pyo.quicksum(model.cost[c] for c in terms.cost), sense=pyo.minimize)
    return model, terms
