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


def structure(inst) -> tuple:
    """What a built model's index sets depend on. Two instances with the same structure can
    share one model: `refresh_model` swaps in the other's coefficients (prices, demand,
    megawatts, caps); the pools' per-request GPU costs are set by the solve loop."""
    return (
        tuple((st.id, st.slice, st.regime, st.lost_site, st.weight_hours, st.penalty_hours) for st in inst.states),
        tuple(sorted((r, a.metro, a.site, a.workload, a.tier) for r, arcs in inst.arcs.items() for a in arcs)),
        tuple((p.role, p.regime, p.site, p.workload, p.tier, p.gpu) for p in inst.pools),
        tuple(sorted(inst.demand)),
        tuple((key, tuple(sorted(c.committed))) for key, c in sorted(inst.contracts.items())),
        tuple(sorted(key for key, cap in inst.ondemand_max.items() if cap > 0)),
        inst.cold_start_hours, inst.warm_fraction, tuple(sorted(inst.node_kw.items())),
        tuple(sorted(inst.pue.items())), tuple(sorted(inst.gpus_per_node.items())),
    )


def refresh_model(model, inst) -> None:
    for module in MODULES:
        hook = getattr(module, "refresh", None)
        if hook is not None:
            hook(model, inst)


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
