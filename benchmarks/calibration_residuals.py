"""The curves against every collected measured source: before (the pre-calibration global
values) and after (the shipped defaults, data/serving_calibration.csv), per source and kind.

    python benchmarks/calibration_residuals.py

Sources: data/calibration/aiconfigurator.csv (AIConfigurator 0.12 kernel-measured database,
exported by `python -m optimizer.commands.calibrate.aiconfigurator`), one source per accelerator ×
engine × weight dtype, each scored with the defaults' row of its engine; and the published
end-to-end points of `benchmarks/curves_vs_published.py` (MLPerf v4.1 Offline, status C;
framework benchmarks, status S, shown but not counted). "held out" rows are the points the
shipped fit did not see (the same seeded 20 % split as `python -m
optimizer.commands.calibrate.defaults`). Ratio = predicted / measured latency (for a throughput
point: time per token, published / modelled tokens/s); "in band" = within 0.8–1.25×. Runs in
a few seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curves_vs_published import ratios as published_ratios  # noqa: E402  (this folder)

from optimizer.commands.calibrate.fit import FIT_KEY, split_holdout  # noqa: E402
from optimizer.commands.calibrate.model import measured_ms, predict_ms  # noqa: E402
from optimizer.scenario import Serving  # noqa: E402
from optimizer.scenario.calibration.params import Calibration  # noqa: E402
from optimizer.scenario.calibration.tables import read_table  # noqa: E402

TABLE = Path(__file__).resolve().parent.parent / "data" / "calibration" / "aiconfigurator.csv"


def ratios(table: pd.DataFrame, calibration: Calibration | None = None) -> np.ndarray:
    """predicted / measured per row, each engine's rows with that engine's defaults (or with
    ``calibration`` for every row)."""
    out = np.full(len(table), np.nan)
    for engine, rows in table.groupby("engine"):
        serving = Serving(engine=engine) if calibration is None else Serving(calibration=calibration)
        out[table.index.get_indexer(rows.index)] = predict_ms(rows, serving) / measured_ms(rows)
    return out


def summary(rows: pd.DataFrame, column: str) -> dict:
    r = rows[column].dropna()
    return {"points": len(r), "in_band": float(((r >= 0.8) & (r <= 1.25)).mean()) if len(r) else np.nan,
            "median": float(r.median()), "min": float(r.min()), "max": float(r.max())}


def main() -> int:
    table = read_table(TABLE)
    table["before"] = ratios(table, Calibration())
    held = np.zeros(len(table), dtype=bool)
    for _, rows in table.groupby(FIT_KEY, sort=True):  # the fit's split: over the rows that fit the GPUs
        rows = rows[np.isfinite(rows["before"])]
        held[rows.index.to_numpy()[split_holdout(rows.reset_index(drop=True), 0.2, 0)]] = True
    table["held_out"] = held
    table["after"] = ratios(table)
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
    published = pd.DataFrame([{"source": ("MLPerf v4.1 Offline (C)" if r["point"].in_verdict else
                                           "framework benchmarks (S)"), "label": r["point"].label,
                                "before": 1 / r["ratio_before"], "after": 1 / r["ratio_after"]}
                               for r in published_ratios()
                               if r["point"].in_verdict or r["point"].source.endswith("(S)")])
    print("\n| published end-to-end point (curves_vs_published.py) | kind | before | after |")
    print("|---|---|---:|---:|")
    for row in published.itertuples():
        print(f"| {row.label} ({row.source}) | time per output token | {row.before:.2f} | {row.after:.2f} |")
    err = (table["after"] - 1).abs()
    counted = pd.concat([table["after"], published.loc[published["source"].str.endswith("(C)"), "after"]]).dropna()
    outside = int(((counted < 0.8) | (counted > 1.25)).sum())
    print(f"\nAfter, kernel-measured points: median |error| {100 * err.median():.1f} %, p90 "
          f"{100 * err.quantile(0.9):.1f} %. Every counted point (the {int(table['after'].notna().sum())} scored "
          f"database points and the MLPerf rows): {len(counted) - outside} of {len(counted)} within 0.8–1.25× "
          f"({100 * (1 - outside / len(counted)):.1f} %), {outside} outside.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
