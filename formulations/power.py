"""Power: the nodes powered at a site never draw more than its megawatts.

          Σ_g node kW_g · PUE_s · powered nodes[s,g,t] + r[s,t]  ≤  1000 · MW_s     for every (s, t)

r is a mutable reserve (0 unless whole replicas overflowed the site's power in an earlier
solve and the solve loop asks for room).
"""

from __future__ import annotations

import pyomo.environ as pyo



def add_to(build) -> None:
    model, inst, terms = build.model, build.inst, build.terms
    powered = terms.require("nodes_powered")
    by_site: dict = {}
    for (s, g, t), exprs in powered.items():
        by_site.setdefault((s, t), []).extend(inst.node_kw[g] * inst.pue[s] * e for e in exprs)
    keys = sorted(k for k, exprs in by_site.items() if exprs)
    model.kw_reserve = pyo.Param(keys, initialize=0.0, mutable=True)
    model.power_kw = pyo.Param(inst.sites, mutable=True, initialize=inst.power_kw)
    model.power = pyo.Constraint(
        keys, rule=lambda m, s, t: pyo.quicksum(by_site[(s, t)]) + m.kw_reserve[s, t] <= m.power_kw[s],
    )


def refresh(model, inst) -> None:
    """New megawatts for a model of the same structure; no room reserved yet."""
    for s in inst.sites:
        model.power_kw[s] = inst.power_kw[s]
    for key in model.kw_reserve:
        model.kw_reserve[key] = 0.0
