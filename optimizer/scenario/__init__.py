"""A scenario: every input of a plan, typed and validated (pydantic).

A scenario is a YAML file. Each table (accelerators, models, prices, owned, metros, sites,
supply, workloads, diurnal) may be

* omitted — the shipped catalogue in ``data/`` is used;
* a list of ids — those rows of the catalogue;
* a CSV path (relative to the YAML) or a list of inline rows — used instead of the catalogue;
* a mapping ``{csv: PATH, ids: [...], rows: [...], patch: {id: {field: value}}}`` — a base
  (the CSV, else the catalogue), filtered to ``ids``, with ``rows`` added or replaced whole
  and ``patch`` merged field by field.

Loading goes in three steps, so that overrides and sweeps share one mechanism: `load_raw`
(`raw`: files → plain, JSON-able data with the origin of every row), `apply_overrides`
(`overrides`: ``--set`` dotted paths), `validate` (`validate`: → `Scenario`); `load_scenario`
(`load`) runs the three. The models:
`fields` (shared rules), `catalogue` (table rows), `sections`, `model` (the scenario);
`tables` says where the catalogues live and how each table is keyed. Errors name the file,
the row and the field and say what was expected.
"""

from optimizer.scenario.catalogue import (
    Accelerator,
    GridCarbon,
    Metro,
    Model,
    Owned,
    Place,
    Price,
    Site,
    Supply,
    Workload,
)
from optimizer.scenario.fields import Catalogued, Strict
from optimizer.scenario.load import load_scenario
from optimizer.scenario.model import Scenario
from optimizer.scenario.overrides import apply_overrides, set_path
from optimizer.scenario.raw import RawScenario, load_raw
from optimizer.scenario.sections import (
                                         Carbon,
                                         Churn,
                                         DayType,
                                         Demand,
                                         DemandRow,
                                         Horizon,
                                         MixRow,
                                         NetworkSpec,
                                         Period,
                                         Policy,
                                         Robust,
                                         Serving,
                                         Speculative,
)
from optimizer.scenario.tables import DATA_DIR, REFERENCE_SCENARIO, SECTIONS, TABLES, TableSpec
from optimizer.scenario.validate import explain, validate, validate_row

__all__ = ["Accelerator", "Carbon", "Catalogued", "Churn", "DATA_DIR", "DayType", "Demand", "DemandRow", "GridCarbon", "Horizon", "Metro", "MixRow",
           "Model", "NetworkSpec", "Owned", "Period", "Place", "Policy", "Price", "REFERENCE_SCENARIO", "RawScenario", "Robust",
           "SECTIONS", "Scenario", "Serving", "Site", "Speculative", "Strict", "Supply", "TABLES", "TableSpec", "Workload",
           "apply_overrides", "explain", "load_raw", "load_scenario", "set_path", "validate", "validate_row"]
