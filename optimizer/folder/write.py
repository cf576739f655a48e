"""Writing a plan folder: every table as CSV (spreadsheet-safe, columns in schema order),
summary.json, scenario.json and plan.xlsx, into a temporary folder renamed into place.

Plan folder:
  summary.json        headline figures (costs, $/M tokens, goodput, gap, status, versions)
  procurement.csv     (site, gpu): committed and on-demand nodes, cost lines; + egress row
  pools.csv           (site, workload, tier, role, gpu, config, state): replicas and load
  routing.csv         (metro, site, workload, tier, period, day_type, hour): requests/s, RTT
  slo.csv             (metro, workload, site, tier): predicted p99 TTFT/ITL and the breakdown
  curves.csv          every serving config the plan uses, with its curve figures
  scenario.json       the resolved scenario (every table), from which the plan can be redone
  plan.xlsx           the same tables as sheets
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.outputs import (
    PLAN,
    atomic_folder,
    folder_target,
    spreadsheet_safe,
)
from optimizer.folder.schema import TABLE_COLUMNS, TABLES
from optimizer.results import Plan

# what depends on the machine's speed (the seconds of each step and bound; the plan, the bound
# and the work do not): left out of plan.xlsx and of the reproducibility checks
TIMING_FIELDS = ("solve_seconds", "build_seconds", "handoff_seconds", "wall_seconds", "steps", "gap_history", "bounds",
                 "first_plan_seconds")
FIXED_DATE = datetime(2000, 1, 1)


def write_plan(plan: Plan, out_dir: str | Path, inputs=(), extras=()) -> Path:
    """Write the plan folder atomically: everything goes to a temporary sibling folder, which
    then replaces ``out_dir`` in one rename; an interrupted write leaves nothing behind.
    ``out_dir`` must be absent, empty or a previous plan folder (`optimizer.base.outputs`), and
    hold none of the run's ``inputs``. Each of ``extras`` is called with the temporary folder
    before the rename — the command line passes the report writer there."""
    out = folder_target(out_dir, PLAN, inputs=inputs)
    with atomic_folder(out, PLAN, inputs) as tmp:
        (tmp / "summary.json").write_text(json.dumps(plan.summary, indent=2, sort_keys=True, default=_json) + "\n")
        (tmp / "scenario.json").write_text(json.dumps(plan.scenario_data, indent=1, sort_keys=True, default=str) + "\n")
        for name in TABLES:
            spreadsheet_safe(_in_schema_order(plan.tables[name], name)).to_csv(tmp / f"{name}.csv", index=False,
                                                                               float_format="%.12g")
        _write_xlsx(plan, tmp / "plan.xlsx")
        for extra in extras:
            extra(tmp)
    return out


def _in_schema_order(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """The table's columns as the schema lists them (an empty table keeps its header); a sparse
    column only where some row holds more than its default (spot columns: plans that rent spot)."""
    known = [c.name for c in TABLE_COLUMNS[name]
             if not c.sparse or (c.name in frame.columns and (frame[c.name].fillna(c.default) != c.default).any())]
    return frame.reindex(columns=known + [c for c in frame.columns if c not in known])


def _write_xlsx(plan: Plan, path: Path) -> None:
    """The tables as sheets. Text is never read as a formula (a name such as
    "=HYPERLINK(…)" stays text), and the document's dates are fixed, so the same plan gives
    the same bytes."""
    options = {"strings_to_formulas": False, "strings_to_urls": False, "nan_inf_to_errors": True}
    with pd.ExcelWriter(path, engine="xlsxwriter", engine_kwargs={"options": options}) as xl:
        xl.book.set_properties({"created": FIXED_DATE})
        fields = sorted((k, json.dumps(v, default=_json) if isinstance(v, (dict, list)) else v)
                        for k, v in plan.summary.items() if k not in TIMING_FIELDS)
        pd.DataFrame(fields, columns=["field", "value"]).to_excel(xl, sheet_name="summary", index=False)
        for name in TABLES:
            plan.tables[name].to_excel(xl, sheet_name=name, index=False)


def _json(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)
