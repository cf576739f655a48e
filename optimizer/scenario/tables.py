"""Where the shipped catalogues live and how each table is read and keyed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from optimizer.base.sources import shipped_data_dir
from optimizer.scenario import catalogue as rows
from optimizer.scenario import fleet, sections
from optimizer.scenario.kvcache import KvCache
from optimizer.scenario.spot import Spot

DATA_DIR = shipped_data_dir()
REFERENCE_SCENARIO = DATA_DIR / "scenarios" / "reference.yaml"


def scenario_path(path) -> Path:
    """A scenario file: the path given, or — where no such file exists and it is a bare name —
    the shipped scenario of that name (`fleetplan scenarios`); none: the reference."""
    if path is None:
        return REFERENCE_SCENARIO
    given = Path(path)
    if not given.exists() and given.parent == Path("."):
        shipped = DATA_DIR / "scenarios" / (given.name if given.suffix in (".yaml", ".yml") else f"{given.name}.yaml")
        if shipped.is_file():
            return shipped
    return given


@dataclass(frozen=True)
class TableSpec:
    """How one catalogue table is read and keyed."""

    name: str
    file: str
    model: type[BaseModel]
    key: tuple[str, ...]
    optional: bool = False  # a catalogue folder may lack the file (an empty table)

    def label(self, values: dict) -> str:
        return f"{self.name} " + "/".join(f"'{values.get(k)}'" for k in self.key)


TABLES = {
    "accelerators": TableSpec("accelerators", "accelerators.csv", rows.Accelerator, ("id",)),
    "models": TableSpec("models", "models.csv", rows.Model, ("id",)),
    "prices": TableSpec("prices", "prices.csv", rows.Price, ("provider", "gpu")),
    "owned": TableSpec("owned", "owned.csv", rows.Owned, ("gpu",)),
    "metros": TableSpec("metros", "metros.csv", rows.Metro, ("id",)),
    "sites": TableSpec("sites", "sites.csv", rows.Site, ("id",)),
    "supply": TableSpec("supply", "supply.csv", rows.Supply, ("site", "gpu")),
    "grid_carbon": TableSpec("grid_carbon", "grid_carbon.csv", rows.GridCarbon, ("site",), optional=True),
    "workloads": TableSpec("workloads", "workloads.csv", rows.Workload, ("id",)),
}
DIURNAL_FILE = "diurnal.csv"
SECTIONS = {"horizon": sections.Horizon, "demand": sections.Demand, "network": sections.NetworkSpec,
            "serving": sections.Serving, "policy": sections.Policy,
            "robust": sections.Robust, "carbon": sections.Carbon, "fleet": fleet.Fleet, "years": fleet.Years,
            "churn": sections.Churn, "spot": Spot, "kv_cache": KvCache}
TOP_LEVEL = {"name", "description", "catalogue", "calibration", *TABLES, "diurnal", *SECTIONS, "traces"}
