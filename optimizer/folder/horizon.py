"""Writing and reading a multi-year plan folder, atomically like a plan folder:

  horizon.json          the summary: present cost, the years together against year by year,
                        the cost under every price path, the joint program's size and status
  years.csv             per year: operations, commitments running, cash and present cost, sunk rent
  schedule.csv          what to sign, renew, let lapse, buy and retire, per year (both schedules:
                        column plan)
  price_scenarios.csv   both schedules' present cost under every named price path
  scenario.json         the multi-year scenario as resolved
  year-1/ … year-K/     each year's whole plan: a plan folder (verify, report, compare read it)
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.outputs import HORIZON, atomic_folder, folder_target, spreadsheet_safe
from optimizer.folder.read import json_object
from optimizer.folder.write import write_plan
from optimizer.results.horizon import PRICE_COLUMNS, SCHEDULE_COLUMNS, YEARS_COLUMNS, HorizonPlan


def write_horizon(plan: HorizonPlan, out_dir: str | Path, inputs=(), extras=(), year_extras=()) -> Path:
    """The folder (module docstring); ``extras`` are called with the temporary folder before the
    rename (the report), ``year_extras`` with each year's."""
    out = folder_target(out_dir, HORIZON, inputs=inputs)
    with atomic_folder(out, HORIZON, inputs) as tmp:
        (tmp / "horizon.json").write_text(json.dumps(plan.summary, indent=2, sort_keys=True, default=str) + "\n")
        (tmp / "scenario.json").write_text(json.dumps(plan.scenario_data, indent=1, sort_keys=True, default=str) + "\n")
        for name, frame in (("years", plan.years), ("schedule", plan.schedule), ("price_scenarios", plan.price_scenarios)):
            spreadsheet_safe(frame).to_csv(tmp / f"{name}.csv", index=False, float_format="%.12g")
        for k, year in enumerate(plan.plans, start=1):
            write_plan(year, tmp / f"year-{k}", extras=year_extras)
        for extra in extras:
            extra(tmp)
    return out


def is_horizon_folder(path: str | Path) -> bool:
    return (Path(path) / "horizon.json").is_file()


def read_horizon(path: str | Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    """A multi-year plan folder's summary and tables (years, schedule, price_scenarios), or an
    error naming the file that is missing, truncated or edited."""
    d = Path(path)
    summary = json_object(d / "horizon.json", "a multi-year plan's summary")
    tables = {}
    for name, columns in (("years", YEARS_COLUMNS), ("schedule", SCHEDULE_COLUMNS), ("price_scenarios", PRICE_COLUMNS)):
        try:
            tables[name] = pd.read_csv(d / f"{name}.csv")
        except (OSError, ValueError) as exc:  # pandas' parser errors are ValueErrors
            raise ScenarioError(f"cannot read it ({exc}); expected the table fleetplan plan wrote",
                                Origin(str(d / f"{name}.csv"))) from None
        missing = [c for c in columns if c not in tables[name]]
        if missing:
            raise ScenarioError(f"columns {', '.join(missing)} are missing; the file may be truncated or edited",
                                Origin(str(d / f"{name}.csv")))
    return summary, tables


def year_folders(path: str | Path) -> list[Path]:
    """A multi-year plan folder's year plan folders, in order; any other path as itself."""
    if not is_horizon_folder(path):
        return [Path(path)]
    years = json_object(Path(path) / "horizon.json", "a multi-year plan's summary").get("years")
    folders = [Path(path) / f"year-{k}" for k in range(1, int(years) + 1)] if isinstance(years, int) else []
    if not folders or not all((f / "summary.json").is_file() for f in folders):
        raise ScenarioError("this multi-year plan folder lacks its year plan folders (year-1 …)", Origin(str(path)))
    return folders
