"""What a report reads from a plan folder: the plan (summary.json and its tables), the scenario
it was planned from (scenario.json), and the outputs of the later checks when they have run —
`fleetplan verify` (summary.json → verification), `fleetplan stress` (stress.json) and
`fleetplan operate` (operations.json, operations_sites.csv).

The plan folder itself is read as every command reads it (`optimizer.folder.read`: every
file checked). The later checks' outputs are optional: missing or unreadable, the folder
records why, and the sections that need them say so instead of failing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from optimizer.folder.read import read_plan, scenario_of
from optimizer.geography.demand import build_slices
from optimizer.results import Plan
from optimizer.scenario import Scenario


class MissingInput(Exception):
    """A section cannot be drawn from this folder; the message says what is missing, in words."""


@dataclass
class PlanFolder:
    path: Path
    plan: Plan
    scenario: Scenario
    problems: dict[str, str] = field(default_factory=dict)  # optional input → why it is unusable
    stress: dict | None = None
    operations: dict | None = None
    operations_sites: pd.DataFrame | None = None

    @property
    def summary(self) -> dict:
        return self.plan.summary

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        return self.plan.tables

    def slices(self) -> pd.DataFrame:
        """(period, day_type, hour, weight_hours) of every planned slice, in planning order."""
        return build_slices(self.scenario)[["period", "day_type", "hour", "weight_hours"]].reset_index(drop=True)

    def gpus_per_node(self) -> dict[str, int]:
        return {g: a.gpus_per_node for g, a in self.scenario.accelerators.items()}

    def nominal_pools(self) -> pd.DataFrame:
        """Pools in the planned world (rows for a lost site's contingency are left out)."""
        pools = self.tables["pools"]
        if pools.empty:
            raise MissingInput("the plan has no serving pools")
        return pools[pools["lost_site"].isna()] if "lost_site" in pools else pools


def read_plan_folder(plan_dir: str | Path) -> PlanFolder:
    d = Path(plan_dir)
    plan = read_plan(d)
    problems: dict[str, str] = {}
    scenario = scenario_of(plan, d)
    stress = _json(d / "stress.json", problems)
    operations = _json(d / "operations.json", problems)
    sites = _csv(d / "operations_sites.csv", problems)
    return PlanFolder(d, plan, scenario, problems, stress, operations, sites)


def _json(path: Path, problems: dict) -> dict | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems[path.name] = f"unreadable: {exc}"
        return None


def _csv(path: Path, problems: dict) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        problems[path.name] = f"unreadable: {exc}"
        return None
