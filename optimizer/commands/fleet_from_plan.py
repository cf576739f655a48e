"""A plan folder as the next plan's fleet (`fleetplan plan --fleet-from-plan DIR`): what the
plan signed becomes contracts that started on its first day — reserved for their term, owned
from their purchase — and the fleet it started from is carried over. The new scenario's
first day (``horizon.start``) places them in time: a 1-year reservation signed a year before
it is up for renewal, a 3-year one still runs.

A fleet folder of `fleetplan import-deployment` (what runs today, read from manifests) says
which GPUs run where but not on which contract. Its GPUs at a site of an accelerator of G
GPUs per node become ⌈GPUs / G⌉ nodes reserved for the new plan's first year (from
``horizon.start``, for one year, at the catalogue's rent): assumed — the fleet that runs is
taken as committed for a year, its rent sunk, and the plan decides from the year after.
Spot GPUs (``<gpu>-spot``) are rented by the hour and become no row."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pandas as pd

from optimizer.base.contracts import NEW_TERMS
from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.spot import is_spot
from optimizer.base.units import DAYS_PER_YEAR
from optimizer.commands.compare_fleet import is_fleet_folder
from optimizer.folder.horizon import year_folders
from optimizer.folder.read import read_plan
from optimizer.results import Plan
from optimizer.scenario import load_scenario
from optimizer.scenario.fleet import term_end
from optimizer.solve.fleet import nodes_for


def _rent(old_data: dict, site: str, gpu: str, term: str) -> float | None:
    """$/GPU-hour the old plan signed a term at (its catalogue price × the site's multiplier)."""
    price = (old_data.get("prices") or {}).get(gpu) or {}
    value = price.get(f"reserved_{term.split('-')[1]}_usd_per_gpu_hour")
    multiplier = float(((old_data.get("sites") or {}).get(site) or {}).get("price_multiplier") or 1.0)
    return round(float(value) * multiplier, 6) if value not in (None, "") else None


def signed_rows(old: Plan, signed_on: datetime.date) -> list[dict]:
    """Fleet rows for what a plan signed, as if signed on ``signed_on``, and the rows of the
    fleet it started from."""
    rows = list(((old.scenario_data.get("fleet") or {}).get("contracts")) or [])
    for r in old.tables["procurement"].itertuples():
        if r.site == "*":
            continue
        for term in NEW_TERMS:
            nodes = int(getattr(r, term.nodes_column))
            if not nodes:
                continue
            if term.id == "owned":
                rows.append({"site": r.site, "gpu": r.gpu, "nodes": nodes, "contract": "owned",
                             "purchased": signed_on.isoformat()})
                continue
            end = term_end(signed_on, term.years)
            row = {"site": r.site, "gpu": r.gpu, "nodes": nodes, "contract": "reserved",
                   "start": signed_on.isoformat(), "end": end.isoformat()}
            rent = _rent(old.scenario_data, r.site, r.gpu, term.id)
            if rent is not None:
                row["usd_per_gpu_hour"] = rent
            rows.append(row)
    return rows


def running_rows(fleet_dir: Path, s, start: datetime.date) -> list[dict]:
    """Fleet rows for the GPUs an imported deployment runs (module docstring)."""
    path = fleet_dir / "gpus.csv"
    try:
        gpus = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"cannot read the imported fleet's GPUs ({type(exc).__name__})", Origin(str(path))) from None
    rows = []
    for i, r in enumerate(gpus.itertuples(index=False), start=2):
        if is_spot(str(r.gpu)):
            continue
        for field, value, known in (("site", r.site, s.sites), ("gpu", r.gpu, s.accelerators)):
            if value not in known:
                raise ScenarioError(f"{field} '{value}' is not in the scenario's {field}s; plan a scenario that has it",
                                    Origin(str(path), i), field=field)
        nodes = int(nodes_for(int(r.gpus), s.accelerators[r.gpu].gpus_per_node))
        if nodes:
            rows.append({"site": r.site, "gpu": r.gpu, "nodes": nodes, "contract": "reserved",
                         "start": start.isoformat(), "end": term_end(start, 1).isoformat()})
    return rows


def fleet_override(plan_dir: str | Path, scenario_path, overrides: list[str]) -> str:
    """The ``--set`` that adds a plan folder's commitment to the scenario's fleet (a multi-year
    plan folder's: its last year's, what runs when its horizon ends; an imported fleet
    folder's: its GPUs, `running_rows`)."""
    plan_dir = year_folders(plan_dir)[-1]
    s, _ = load_scenario(scenario_path, overrides)
    if s.horizon.start is None:
        raise ScenarioError("--fleet-from-plan places the old plan's contracts before the new plan's first day; set "
                            "horizon.start (YYYY-MM-DD)", Origin("--fleet-from-plan"), field="horizon.start")
    start = datetime.date.fromisoformat(s.horizon.start)
    own = [r.model_dump(exclude_none=True) for r in s.fleet.contracts]
    if is_fleet_folder(plan_dir):
        return "fleet.contracts=" + json.dumps(own + running_rows(Path(plan_dir), s, start))
    old = read_plan(plan_dir)
    old_start = (old.scenario_data.get("horizon") or {}).get("start")
    signed_on = datetime.date.fromisoformat(old_start) if old_start else start - datetime.timedelta(days=DAYS_PER_YEAR)
    return "fleet.contracts=" + json.dumps(own + signed_rows(old, signed_on))
