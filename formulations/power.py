"""Power: the nodes powered at a site never draw more than its megawatts.

          Σ_g node kW_g · PUE_s · powered nodes[s,g,t]  ≤  kw_room[s,t]     for every (s, t)

kw_room = 1000 · MW_s, less any room the solve loop reserves where whole replicas
overflowed the site's power in an earlier solve.
"""

from __future__ import annotations

from formulations.linear import Param


def add_to(build) -> None:
    lp, inst, terms = build.lp, build.inst, build.terms
    powered = terms.require("nodes_powered")
    by_site: dict = {}
    for (s, g, t), items in powered.items():
        by_site.setdefault((s, t), []).extend((c, inst.node_kw[g] * inst.pue[s] * v) for c, v in items)
    keys = sorted(k for k, items in by_site.items() if items)
    lp.param("kw_room", {key: inst.power_kw[key[0]] for key in keys})
    for key in keys:
        lp.add_row("power", key, by_site[key], upper=Param("kw_room", key))


def refresh(lp, inst) -> list:
    """New megawatts for a program of the same structure; no room reserved yet."""
    return [lp.set_params("kw_room", {key: inst.power_kw[key[0]] for key in lp.params["kw_room"]})]
