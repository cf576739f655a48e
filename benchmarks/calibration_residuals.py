"""The curves against every collected measured table: before (the pre-calibration global
values) and after (the shipped defaults, data/serving_calibration.csv), per source and kind.

    python benchmarks/calibration_residuals.py

Sources: data/calibration/aiconfigurator.csv (AIConfigurator 0.12 kernel-measured database,
exported by `python -m optimizer.calibration.aiconfigurator`), one source per accelerator ×
engine × weight dtype. "held out" rows are the points the shipped fit did not see (the same
seeded 20 % split as `python -m optimizer.calibration.defaults`). Ratio = predicted /
measured; "in band" = within 0.8–1.25×. The MLPerf and framework points are in
`benchmarks/curves_vs_published.py`. Runs in about a minute.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.calibration.fit import FIT_KEY, split_holdout  # noqa: E402
from optimizer.calibration.model import measured_ms, predict_ms  # noqa: E402
from optimizer.calibration.params import Calibration, shipped_calibration  # noqa: E402
from optimizer.calibration.tables import read_table  # noqa: E402
from optimizer.scenario import Serving  # noqa: E402

TABLE = Path(__file__).resolve().parent.parent / "data" / "calibration" / "aiconfigurator.csv"


def ratios(table: pd.DataFrame, serving: Serving) -> np.ndarray:
    return predict_ms(table, serving) / measured_ms(table)


def summary(rows: pd.DataFrame, column: str) -> dict:
    r = rows[column].dropna()
    return {"points": len(r), "in_band": float(((r >= 0.8) & (r <= 1.25)).mean()) if len(r) else np.nan,
            "median": float(r.median()), "min": float(r.min()), "max": float(r.max())}


def main() -> int:
    table = read_table(TABLE)
    table["before"] = ratios(table, Serving(calibration=Calibration()))
    held = np.zeros(len(table), dtype=bool)
    for _, rows in table.groupby(FIT_KEY, sort=True):  # the fit's split: over the rows that fit the GPUs
        rows = rows[np.isfinite(rows["before"])]
        held[rows.index.to_numpy()[split_holdout(rows.reset_index(drop=True), 0.2, 0)]] = True
    table["held_out"] = held
    table["after"] = ratios(table, Serving())
    print("| source (AIConfigurator 0.12) | kind | points | before: in 0.8–1.25× | before: median (min–max) "
          "| after: in band | after: median (min–max) | after, held out: in band |")
    print("|---|---|---:|---:|---|---:|---|---:|")
    for (acc, engine, dtype, kind), rows in table.groupby([*FIT_KEY, "kind"], sort=True):
        b, a = summary(rows, "before"), summary(rows, "after")
        h = summary(rows[rows["held_out"]], "after")
        print(f"| {acc} {engine} {dtype} | {kind} | {a['points']} | {100 * b['in_band']:.0f} % | "
              f"{b['median']:.2f} ({b['min']:.2f}–{b['max']:.2f}) | {100 * a['in_band']:.0f} % | "
              f"{a['median']:.2f} ({a['min']:.2f}–{a['max']:.2f}) | {100 * h['in_band']:.0f} % of {h['points']} |")
    b, a = summary(table, "before"), summary(table, "after")
    h = summary(table[table["held_out"]], "after")
    print(f"| **all** | | {a['points']} | {100 * b['in_band']:.0f} % | {b['median']:.2f} ({b['min']:.2f}–{b['max']:.2f}) "
          f"| {100 * a['in_band']:.0f} % | {a['median']:.2f} ({a['min']:.2f}–{a['max']:.2f}) | "
          f"{100 * h['in_band']:.0f} % of {h['points']} |")
    err = (table["after"] - 1).abs()
    print(f"\nAfter: median |error| {100 * err.median():.1f} %, p90 {100 * err.quantile(0.9):.1f} %; "
          f"{int(((table['after'] < 0.8) | (table['after'] > 1.25)).sum())} of {len(table)} points outside 0.8–1.25×.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
