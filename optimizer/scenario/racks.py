"""Which site can host which accelerator: rack power and cooling.

A node goes into one rack position: it is offered at a site only where its power fits the
site's rack (``node_kw ≤ rack_kw_max``) and, for parts that need it, the site has direct liquid
cooling. An NVL72 "node" is the whole rack (72 GPUs, ~120–140 kW, liquid only), so a site of
40 kW air-cooled racks is not offered one; an 8-GPU Hopper node (10.2 kW) fits anywhere.

The catalogue's supply rows come along with any accelerator a scenario selects: those a site
cannot host are dropped. A supply row the planner wrote for such a pair is an error that says
what the rack lacks.
"""

from __future__ import annotations

from pathlib import Path

from optimizer.base.errors import ScenarioError
from optimizer.scenario.tables import DATA_DIR


def _from_catalogue(file: str) -> bool:
    return Path(file).resolve().is_relative_to(DATA_DIR.resolve())


def hostable_supply(supply: dict, sites: dict, accelerators: dict, raw) -> dict:
    """``supply`` (site → gpu → row) without the pairs a site's racks cannot take; a
    `ScenarioError` for such a pair the planner wrote, or for a site left with no accelerator
    because of its racks; a warning for an accelerator no site can host."""
    out, refused = {}, {}
    for sid, per in supply.items():
        site = sites.get(sid)
        kept, dropped = {}, []
        for gid, row in per.items():
            a = accelerators.get(gid)
            why = site.hosts(a) if site is not None and a is not None else None
            if why is None:
                kept[gid] = row
                continue
            origin = raw.origin("supply", sid, gid)
            if not _from_catalogue(origin.file):
                raise ScenarioError(f"{why}; expected a site whose racks take it, or no supply row for this pair",
                                    origin, field="gpu")
            dropped.append(why)
            refused.setdefault(gid, why)
        if per and not kept and dropped:
            raise ScenarioError(f"site '{sid}' can host none of the offered accelerators it has supply for: "
                                f"{dropped[0]}; expected a larger rack_kw_max, liquid_cooling, or another site",
                                raw.origin("sites", sid), field="rack_kw_max")
        out[sid] = kept
    offered = {g for per in out.values() for g in per}
    raw.warnings.extend(f"accelerator '{g}' is offered at no site: {why}" for g, why in sorted(refused.items())
                        if g not in offered)
    return out
