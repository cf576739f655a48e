"""`fleetplan validate` on catalogues far larger than any plan uses (a user's world-cities
table as metros), to show that validation stays linear and quick.

    python benchmarks/validate_large.py [--rows 50000,500000]

Writes, per row count, a metros CSV of that many random cities plus the one a site needs and
a scenario using it, then times `fleetplan validate` in a fresh process (imports included)
and prints one Markdown table: rows, file MB, wall seconds, peak resident MiB.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_catalogue(folder: Path, rows: int) -> Path:
    rng = np.random.default_rng(0)
    lines = ["id,name,lat,lon,utc_offset_hours,population", "chicago,Chicago,41.8373,-87.6862,-6,8604203"]
    lines += [f"m{i},M{i},{lat:.4f},{lon:.4f},{off},{pop}" for i, (lat, lon, off, pop) in enumerate(zip(
        rng.uniform(-60, 60, rows), rng.uniform(-170, 170, rows), rng.integers(-10, 12, rows),
        rng.integers(1_000, 10_000_000, rows)))]
    (folder / "metros.csv").write_text("\n".join(lines) + "\n")
    path = folder / "scenario.yaml"
    path.write_text("name: large\nmetros: metros.csv\nsites: [chicago]\nworkloads: [chat]\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="50000,500000")
    args = ap.parse_args(argv)
    print("| rows | file MB | wall s | peak MiB |\n|---:|---:|---:|---:|")
    for rows in (int(x) for x in args.rows.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            path = write_catalogue(Path(tmp), rows)
            start = time.perf_counter()
            done = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "optimizer.cli", "validate",
                                   str(path)], capture_output=True, text=True, check=True)
            wall = time.perf_counter() - start
            peak_kib = int(done.stderr.strip().splitlines()[-1])
            mb = (Path(tmp) / "metros.csv").stat().st_size / 1e6
            print(f"| {rows:,} | {mb:.1f} | {wall:.1f} | {peak_kib / 1024:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
