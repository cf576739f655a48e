"""One year of a multi-year scenario (``horizon.years`` > 1) as a scenario of its own: the
same scenario, with year k's (k = 0 … years − 1)

    first day      horizon.start + k years
    demand         × (1 + g)^k, g = years.demand_growth_per_year (default: what
                   demand.growth_per_period compounds to over the year's periods)
    prices         × the price path's factor of year k, per accelerator (rent, reserved terms,
                   owned capex); a path holds its last factor beyond its end
    supply caps    × (1 + years.supply_growth_per_year)^k; nothing of an accelerator before its
                   years.available_from date
    sites' power   × (1 + years.power_growth_per_year)^k
    fleet          the rows given (what the years before signed, and the scenario's own fleet)

Each is written as ``--set`` overrides, so a year's plan folder records how it differs from the
scenario and can be planned again as recorded.
"""

from __future__ import annotations

import csv
import datetime
import json

from optimizer.base.errors import ScenarioError
from optimizer.scenario.fleet import PRICE_SCENARIOS_FILE, day, years_later
from optimizer.scenario.model import Scenario
from optimizer.scenario.overrides import apply_overrides
from optimizer.scenario.raw import RawScenario
from optimizer.scenario.tables import DATA_DIR
from optimizer.scenario.validate import validate

PRICE_COLUMNS = ("ondemand_usd_per_gpu_hour", "reserved_1y_usd_per_gpu_hour", "reserved_3y_usd_per_gpu_hour")
FLAG = "horizon.years"


def price_paths(s: Scenario) -> dict[str, dict[str, list[float]]]:
    """Named price paths: the shipped ones (data/price_scenarios.csv, for every accelerator:
    '*') and the scenario's own (``years.price_paths``), which win on a name."""
    paths: dict[str, dict[str, list[float]]] = {}
    with open(DATA_DIR / PRICE_SCENARIOS_FILE, newline="") as f:
        for row in sorted(csv.DictReader(f), key=lambda r: (r["scenario"], int(r["year"]))):
            paths.setdefault(row["scenario"], {}).setdefault("*", []).append(float(row["price_factor"]))
    own: dict[str, dict[str, list[float]]] = {}
    for path in s.years.price_paths:
        own.setdefault(path.name, {})[path.gpu] = list(path.factors)
    paths.update(own)
    return paths


def price_factor(paths: dict, name: str, gpu: str, k: int) -> float:
    """Year k's price factor of ``gpu`` on path ``name`` (its last factor held beyond its end;
    1 for an accelerator the path does not name)."""
    per = paths[name]
    factors = per.get(gpu, per.get("*", [1.0]))
    return factors[min(k, len(factors) - 1)]


def check_price_scenario(s: Scenario, raw: RawScenario) -> dict:
    """The price paths, the scenario's own among them (an unknown name is refused)."""
    paths = price_paths(s)
    if s.years.price_scenario not in paths:
        raise ScenarioError(f"unknown price scenario '{s.years.price_scenario}' (expected one of "
                            f"{', '.join(sorted(paths))}, or a path of years.price_paths)",
                            raw.origin("years"), field="years.price_scenario")
    return paths


def demand_growth_per_year(s: Scenario) -> float:
    if s.years.demand_growth_per_year is not None:
        return s.years.demand_growth_per_year
    return (1 + s.demand.growth_per_period) ** len(s.horizon.periods) - 1


def year_start(s: Scenario, k: int) -> datetime.date | None:
    if s.horizon.start is None:
        return None
    return years_later(day(s.horizon.start), k)


def year_overrides(s: Scenario, k: int, paths: dict, path_name: str, fleet_rows: list[dict] | None,
                   policy: dict | None = None) -> list[str]:
    """The ``--set`` overrides that make year k of ``s`` (module docstring); ``policy``:
    policy fields set for this year's plan (e.g. the terms it may sign)."""
    out = ["horizon.years=1"]
    start = year_start(s, k)
    if start is not None:
        out.append(f"horizon.start={start.isoformat()}")
    if s.years.hours is not None:
        out.append(f"horizon.hours={json.dumps(s.years.hours)}")
    if k:
        out.append(f"demand.scale=×{(1 + demand_growth_per_year(s)) ** k:.12g}")
    for gpu, price in sorted(s.prices.items()):
        f = price_factor(paths, path_name, gpu, k)
        if f != 1.0:
            out += [f"prices.{gpu}.{col}=×{f:.12g}" for col in PRICE_COLUMNS if getattr(price, col) is not None]
            if gpu in s.owned:
                out.append(f"owned.{gpu}.capex_usd_per_node=×{f:.12g}")
    out += _supply(s, k, start)
    if k and s.years.power_growth_per_year:
        out += [f"sites.{site}.power_mw=×{(1 + s.years.power_growth_per_year) ** k:.12g}" for site in sorted(s.sites)]
    if fleet_rows is not None:
        out.append(f"fleet.contracts={json.dumps(fleet_rows)}")
    out += [f"policy.{key}={json.dumps(value)}" for key, value in sorted((policy or {}).items())]
    return out


def _supply(s: Scenario, k: int, start: datetime.date | None) -> list[str]:
    """Supply caps of year k: grown, and none of an accelerator not yet available."""
    out = []
    growth = (1 + s.years.supply_growth_per_year) ** k
    for site, per in sorted(s.supply.items()):
        for gpu, row in sorted(per.items()):
            available = gpu not in s.years.available_from or day(s.years.available_from[gpu]) <= start
            for col in ("reserved_nodes_max", "ondemand_nodes_max"):
                value = round(getattr(row, col) * growth) if available else 0
                if value != getattr(row, col):
                    out.append(f"supply.{site}.{gpu}.{col}={value}")
    return out


def year_scenario(raw: RawScenario, overrides: list[str]) -> tuple[Scenario, RawScenario]:
    """A year's scenario from the multi-year one's raw data and `year_overrides`."""
    year_raw = apply_overrides(raw, overrides, flag=FLAG)
    return validate(year_raw), year_raw
