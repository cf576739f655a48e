"""Where the shipped catalogues live and how each table is read and keyed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from optimizer.scenario.catalogue import (
    Accelerator,
    Metro,
    Model,
    Owned,
    Price,
    Site,
    Supply,
    Workload,
)
from optimizer.scenario.sections import (
    Demand,
    Horizon,
    NetworkSpec,
    Policy,
    Robust,
    Serving,
)

DATA_DIR = Path(__file__).resolve().parent.parent.parent / "data"
REFERENCE_SCENARIO = DATA_DIR / "scenarios" / "reference.yaml"


@dataclass(frozen=True)
class TableSpec:
    """How one catalogue table is read and keyed."""

    name: str
    file: str
    model: type[BaseModel]
    key: tuple[str, ...]

    def label(self, values: dict) -> str:
        return f"{self.name} " + "/".join(f"'{values.get(k)}'" for k in self.key)


TABLES = {
    "accelerators": TableSpec("accelerators", "accelerators.csv", Accelerator, ("id",)),
    "models": TableSpec("models", "models.csv", Model, ("id",)),
    "prices": TableSpec("prices", "prices.csv", Price, ("provider", "gpu")),
    "owned": TableSpec("owned", "owned.csv", Owned, ("gpu",)),
    "metros": TableSpec("metros", "metros.csv", Metro, ("id",)),
    "sites": TableSpec("sites", "sites.csv", Site, ("id",)),
    "supply": TableSpec("supply", "supply.csv", Supply, ("site", "gpu")),
    "workloads": TableSpec("workloads", "workloads.csv", Workload, ("id",)),
}
DIURNAL_FILE = "diurnal.csv"
SECTIONS = {"horizon": Horizon, "demand": Demand, "network": NetworkSpec, "serving": Serving, "policy": Policy,
            "robust": Robust}
TOP_LEVEL = {"name", "description", "catalogue", *TABLES, "diurnal", *SECTIONS}
