"""GPUs of replicas fit the nodes: for every site s, accelerator g and state t

          Σ_{pools on (s,g)} GPUs of their replicas − GPUs per node · usable nodes[s,g,t]  ≤  −r[s,g,t]

r (parameter gpu_reserve, 0 unless the solve loop found that whole replicas overflowed the
supply there and asks the next solve to leave room). Replicas of one pool may sit on nodes
of any contract; a pool's replicas never span accelerator types.
"""

from __future__ import annotations

from formulations.linear import Param


def add_to(build) -> None:
    lp, inst, terms = build.lp, build.inst, build.terms
    load = terms.require("gpu_load")
    usable = terms.require("nodes_usable")
    keys = sorted(load)
    lp.param("gpu_reserve", {key: 0.0 for key in keys})
    for key in keys:
        per_node = float(inst.gpus_per_node[key[1]])
        lp.add_row("gpu_capacity", key, load[key] + [(c, -per_node * v) for c, v in usable.get(key, [])],
                   upper=Param("gpu_reserve", key, -1.0))


def refresh(lp, inst) -> list:
    """No room reserved yet in a reused program."""
    return [lp.set_params("gpu_reserve", {key: 0.0 for key in lp.params["gpu_reserve"]})]
