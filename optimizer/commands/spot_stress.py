"""A plan's spot capacity when spot is scarcer (`fleetplan stress DIR --spot-availability F`).

Nothing is re-optimised: the plan's spot nodes stay, each zone (a site renting spot) has
capacity a' = F · a of the hours instead of a, and every hour without it the same nodes are
rented on demand (the plan's fallback). Per spot row of procurement.csv, H its node-hours,
p_od the on-demand $/node-hour of its hardware at the site, d the discount:

    cost(a) = H · p_od · (1 − a · d)          extra = H · p_od · d · (a − a')

The plan holds spare replicas for one zone's spot lost at a time (its spot-loss states);
hours a year with two or more of its zones out at once, zones independent:

    P(≥ 2 out) = 1 − Π_z a_z − Σ_z (1 − a_z) Π_{y ≠ z} a_y

— a floor: the published trace (data/spot_availability.csv) has whole regions out together far
more often than independence gives. The fallback needs on-demand room: at the peak, a site's
spot nodes rented on demand on top of its on-demand nodes of the same hardware must fit the
site's on-demand cap.
"""

from __future__ import annotations

import math
from pathlib import Path

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.spot import base_gpu, is_spot
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.folder.read import read_plan, scenario_of
from optimizer.scenario.spot import spot_terms


def two_or_more_out(availabilities: list[float]) -> float:
    """P(at least two independent zones without capacity at once) (module docstring)."""
    all_in = math.prod(availabilities)
    one_out = sum((1 - a) * math.prod(b for j, b in enumerate(availabilities) if j != i)
                  for i, a in enumerate(availabilities))
    return max(0.0, 1 - all_in - one_out)


def spot_stress(plan_dir: str | Path, factor: float) -> dict:
    """The plan's spot at availability × ``factor`` (module docstring)."""
    if not 0 < factor <= 1:
        raise ScenarioError(f"expected a factor in (0, 1], got {factor}", Origin("--spot-availability"))
    plan = read_plan(plan_dir)
    s = scenario_of(plan, plan_dir)
    terms = spot_terms(s)
    proc = plan.tables["procurement"]
    rows = proc[proc["gpu"].map(lambda g: g != "egress" and is_spot(g)) & (proc["ondemand_node_hours"] > 0)]
    if not terms or rows.empty:
        raise ScenarioError("this plan rents no spot capacity; there is nothing to stress", Origin("--spot-availability"))
    planned = stressed = 0.0
    zones: dict[str, float] = {}
    fallback = []
    for r in rows.itertuples():
        hardware, term = base_gpu(r.gpu), terms[base_gpu(r.gpu)]
        p_od = (s.prices[hardware].ondemand_usd_per_gpu_hour * s.accelerators[hardware].gpus_per_node
                * s.sites[r.site].price_multiplier)
        a, a_new = term.availability, term.availability * factor
        planned += r.ondemand_node_hours * p_od * (1 - a * term.discount_vs_ondemand)
        stressed += r.ondemand_node_hours * p_od * (1 - a_new * term.discount_vs_ondemand)
        zones[r.site] = min(zones.get(r.site, 1.0), a_new)
        own = proc[(proc["site"] == r.site) & (proc["gpu"] == hardware)]["ondemand_nodes_peak"].sum()
        cap = s.supply[r.site][hardware].ondemand_nodes_max if hardware in s.supply.get(r.site, {}) else 0
        fallback.append({"site": r.site, "gpu": r.gpu, "spot_nodes_peak": int(r.ondemand_nodes_peak),
                         "ondemand_nodes_peak": int(own), "ondemand_cap": int(cap),
                         "fits": bool(own + r.ondemand_nodes_peak <= cap)})
    planned_zones = {site: min(terms[base_gpu(r.gpu)].availability for r in rows.itertuples() if r.site == site)
                     for site in zones}
    return {
        "availability_factor": factor, "spot_cost_usd_planned": planned, "spot_cost_usd_stressed": stressed,
        "extra_usd": stressed - planned, "zones": sorted(zones),
        "hours_two_or_more_zones_out_planned": HOURS_PER_YEAR * two_or_more_out(list(planned_zones.values())),
        "hours_two_or_more_zones_out_stressed": HOURS_PER_YEAR * two_or_more_out(list(zones.values())),
        "fallback": fallback, "fallback_fits": all(f["fits"] for f in fallback),
    }


def spot_stress_lines(spot: dict | None) -> list[str]:
    """The stress text's lines on spot."""
    if not spot:
        return []
    lines = [f"spot at {spot['availability_factor']:g} × its availability: ${spot['spot_cost_usd_stressed']:,.0f}/year "
             f"for the plan's spot node-hours (planned ${spot['spot_cost_usd_planned']:,.0f}: "
             f"+${spot['extra_usd']:,.0f} rented on demand instead)",
             f"  two or more of its {len(spot['zones'])} spot zones out at once (beyond the one-zone spare the plan "
             f"holds): {spot['hours_two_or_more_zones_out_stressed']:,.0f} h/year (planned "
             f"{spot['hours_two_or_more_zones_out_planned']:,.0f}; independent zones — a floor)"]
    for f in spot["fallback"]:
        if not f["fits"]:
            lines.append(f"  {f['site']}/{f['gpu']}: {f['spot_nodes_peak']} spot nodes at the peak cannot fall back on "
                         f"demand ({f['ondemand_nodes_peak']} on-demand nodes already, cap {f['ondemand_cap']})")
    return lines
