"""The existing fleet (`optimizer.scenario.fleet`) in the plan's year: which nodes the plan can
count on for the whole year, what keeping them costs, and what is sunk.

    reserved  counted when its contract covers the plan year [start, start + 365 d); its rent
              is sunk: it costs the plan nothing more (the rent falling in the year is reported)
    owned     counted from its purchase; keeping a node a year pays colocation and energy
              and forgoes the value it loses that year (retire it and that value is kept):
                  rate = colo + (value(t) − value(t + 1 y)) / 8760 $/node-hour,
                  value(t) = residual, or the book value capex · max(0, 1 − age / life)
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from optimizer.base.units import DAYS_PER_YEAR, HOURS_PER_YEAR
from optimizer.curves.economics import owned_usd_per_node_hour
from optimizer.scenario import Scenario
from optimizer.scenario.fleet import FleetRow, day

RESERVED_TERM, OWNED_TERM = "existing-reserved", "existing-owned"


@dataclass(frozen=True)
class FleetYear:
    """The fleet as one plan year sees it."""

    nodes: dict[tuple[str, str, str], int]  # (site, gpu, existing term) → nodes there all year
    keep_usd_per_node_hour: dict[tuple[str, str], tuple[float, float]]  # owned (site, gpu) → (rate, energy)
    sunk_usd: float  # reserved rent falling in the year, paid whatever the plan does
    lapsing: list[dict]  # reserved rows that end before or during the year: up for renewal
    ondemand_quota: dict[tuple[str, str], int]  # (site, gpu) → on-demand nodes granted


def plan_year(s: Scenario) -> tuple[datetime.date, datetime.date]:
    """[first day, first day of the next year) of the scenario's plan year."""
    start = day(s.horizon.start)
    return start, start + datetime.timedelta(days=DAYS_PER_YEAR)


def book_value_usd(capex_usd: float, life_years: float, age_years: float) -> float:
    """Straight-line book value of a node ``age_years`` after purchase."""
    return capex_usd * max(0.0, 1.0 - age_years / life_years)


def _owned_terms(s: Scenario, row: FleetRow, start: datetime.date) -> tuple[float, float]:
    """(rate, energy) $/node-hour of keeping an owned row's node through the plan year."""
    a, where = s.accelerators[row.gpu], s.sites[row.site]
    capex = row.capex_usd_per_node if row.capex_usd_per_node is not None else s.owned[row.gpu].capex_usd_per_node
    life = row.life_years if row.life_years is not None else s.owned[row.gpu].life_years
    age = max(0.0, (start - day(row.purchased)).days / DAYS_PER_YEAR)
    now = row.residual_usd_per_node if row.residual_usd_per_node is not None else book_value_usd(capex, life, age)
    later = max(0.0, now - capex / life) if row.residual_usd_per_node is not None else book_value_usd(capex, life, age + 1)
    hourly = owned_usd_per_node_hour(capex, life, a.node_kw, where.pue, where.energy_usd_per_mwh,
                                     where.colo_usd_per_kw_month)
    return hourly["colo"] + (now - later) / HOURS_PER_YEAR, hourly["energy"]


def reserved_usd_per_gpu_hour(s: Scenario, row: FleetRow) -> float:
    """A reserved row's rent: its own, else the catalogue's price of the term nearest its length
    (1 year up to 18 months, 3 years beyond), else on-demand."""
    if row.usd_per_gpu_hour is not None:
        return row.usd_per_gpu_hour
    price = s.prices[row.gpu]
    months = ((day(row.end) - day(row.start)).days / DAYS_PER_YEAR * 12) if row.start else 12
    nearest = price.reserved_1y_usd_per_gpu_hour if months <= 18 else price.reserved_3y_usd_per_gpu_hour
    return nearest if nearest is not None else price.ondemand_usd_per_gpu_hour


def fleet_year(s: Scenario) -> FleetYear:
    """What the plan year counts of ``s.fleet`` (empty when there is none)."""
    nodes: dict = {}
    keep: dict = {}
    quota: dict = {}
    lapsing, sunk = [], 0.0
    if not s.fleet.contracts:
        return FleetYear({}, {}, 0.0, [], {})
    start, end = plan_year(s)
    for row in s.fleet.contracts:
        pair = (row.site, row.gpu)
        if row.contract == "ondemand-quota":
            quota[pair] = quota.get(pair, 0) + row.nodes
        elif row.contract == "owned":
            if day(row.purchased) <= start:
                nodes[(*pair, OWNED_TERM)] = nodes.get((*pair, OWNED_TERM), 0) + row.nodes
                keep[pair] = _owned_terms(s, row, start)  # rows of one pair: the last one's terms
        else:
            first = day(row.start) if row.start else start
            last_day = day(row.end) + datetime.timedelta(days=1)
            overlap_days = max(0, (min(last_day, end) - max(first, start)).days)
            rent = reserved_usd_per_gpu_hour(s, row) * s.accelerators[row.gpu].gpus_per_node * row.nodes
            sunk += rent * overlap_days * 24
            if first <= start and last_day >= end:
                nodes[(*pair, RESERVED_TERM)] = nodes.get((*pair, RESERVED_TERM), 0) + row.nodes
            elif start <= last_day < end:
                lapsing.append({"site": row.site, "gpu": row.gpu, "nodes": row.nodes, "end": row.end})
    return FleetYear(nodes, keep, sunk, lapsing, quota)
