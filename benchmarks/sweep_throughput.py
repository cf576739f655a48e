"""Sweep throughput on the reference scenario, with and without model reuse.

    python benchmarks/sweep_throughput.py [--runs 8] [--workers 2] [--time-limit 60] [--modes fresh,reuse]

The sweep varies one coefficient (the on-demand H100 price, ×0.80 … ×1.20 in equal steps),
so every run has the reference's structure and `--reuse` can refresh coefficients in place.
Prints a Markdown table: mode, runs, wall seconds, seconds per run, projected wall time of a
100-run sweep on the same workers, and the largest relative cost difference between the two
modes' plans (each within its reported gap of the optimum; 0 when reuse changed nothing).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from optimizer.commands.sweep import sweep

KEY = "prices.h100-sxm.ondemand_usd_per_gpu_hour"


def run(mode_reuse: bool, runs: int, workers: int, time_limit: float, folder: Path):
    values = [f"×{x:.3f}" for x in np.linspace(0.8, 1.2, runs)]
    start = time.perf_counter()
    table = sweep(None, {KEY: values}, "grid", workers=workers, out=folder, reuse=mode_reuse,
                  time_limit_s=time_limit, progress=False)
    return table, time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--modes", default="fresh,reuse", help="fresh, reuse or both")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",")]
    rows, tables = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for reuse in [m == "reuse" for m in modes]:
            table, wall = run(reuse, args.runs, args.workers, args.time_limit, Path(tmp) / f"reuse-{reuse}")
            tables[reuse] = table.set_index(KEY)["total_cost_usd"]
            statuses = ", ".join(f"{n} {s}" for s, n in table["status"].value_counts().items())
            rows.append(("fresh build per run" if not reuse else "--reuse (coefficients refreshed)",
                         len(table), wall, statuses))
    print("| mode | runs | workers | wall s | s per run | 100 runs, projected | statuses |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for mode, n, wall, statuses in rows:
        print(f"| {mode} | {n} | {args.workers} | {wall:.0f} | {wall / n:.1f} | {wall / n * 100 / 60:.1f} min | "
              f"{statuses} |")
    if len(tables) == 2:
        diff = float(((tables[True] - tables[False]).abs() / tables[False]).max())
        print(f"\nlargest relative cost difference between the two modes' plans: {diff:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
