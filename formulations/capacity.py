"""GPUs of replicas fit the nodes: for every site s, accelerator g and state t

          Σ_{pools on (s,g)} GPUs of their replicas + r[s,g,t]  ≤  GPUs per node · usable nodes[s,g,t]

r is a mutable reserve (0 unless the solve loop found that whole replicas overflowed the
supply there and asks the next solve to leave room).

Replicas of one pool may sit on nodes of any contract (committed or on-demand); a pool's
replicas never span accelerator types.
"""

from __future__ import annotations

import pyomo.environ as pyo



def add_to(build) -> None:
    model, inst, terms = build.model, build.inst, build.terms
    load = terms.require("gpu_load")
    usable = terms.require("nodes_usable")
    keys = sorted(load)
    model.gpu_reserve = pyo.Param(keys, initialize=0.0, mutable=True)
    model.gpu_capacity = pyo.Constraint(
        keys,
        rule=lambda m, s, g, t: pyo.quicksum(load[(s, g, t)]) + m.gpu_reserve[s, g, t]
        <= inst.gpus_per_node[g] * pyo.quicksum(usable.get((s, g, t), [])),
    )


def refresh(model, inst) -> None:
    """No room reserved yet in a reused model."""
    for key in model.gpu_reserve:
        model.gpu_reserve[key] = 0.0
