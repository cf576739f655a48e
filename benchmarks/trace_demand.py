"""Large request logs into a demand table (`fleetplan demand --from-trace`).

    python benchmarks/trace_demand.py [--rows 1000000,10000000] [--format csv,parquet] [--keep DIR] [--sessions]

For each size and format, writes a synthetic log (a week of requests from four metros and
two workloads, a diurnal swell, lognormal prompt and output lengths, ISO timestamps to the
microsecond) in chunks, then runs `fleetplan demand --from-trace LOG --out DIR` in its own
process and prints one Markdown table: rows, format, file MiB, seconds to derive and write
the demand folder, requests per second, and the peak memory of that process. The peak
memory staying flat from 1 M to 10 M rows is what "bounded" means here. ``--sessions`` adds a
session_id column (conversations of four turns on average, spread over a tenth of the week),
so that the pass also derives each workload's prefix reuse (`optimizer.commands.traces.reuse`).

Measured 2026-12-03 on 2 cores shared with other jobs (logs kept from an earlier run; writing
the 10 M-row CSV took 79–89 s, the Parquet 45 s):

| rows | format | file MiB | write log s | demand s | requests/s | peak memory MiB |
|---:|---|---:|---:|---:|---:|---:|
| 10,000 | csv | 1 | 0.1 | 5.6 | 1,782 | 261 |
| 1,000,000 | csv | 51 | kept | 6.8 | 147,509 | 382 |
| 1,000,000 | parquet | 13 | kept | 6.0 | 166,578 | 354 |
| 10,000,000 | csv | 509 | kept | 15.9 | 629,470 | 644 |
| 10,000,000 | parquet | 120 | kept | 15.8 | 633,516 | 797 |
| 20,000,000 | parquet | 234 | 64.2 | 20.5 | 975,292 | 850 |

With ``--sessions`` (2026-12-04, same machine; the prefix reuse of every workload derived too):
10 M rows in 18.2 s and 812 MiB as Parquet (167 MiB), 19.3 s and 651 MiB as CSV (600 MiB); the
Parquet log without session ids took 19.6 s and 716 MiB that day.

About 5 s of each run is fixed (imports, the scenario, the report's figures); ~260 MiB is
the process before any log. Memory grows while a week's (pair, second) counts fill up (4.2 M
of 4.8 M are non-empty at 10 M rows) and the Parquet reader decodes whole row groups (1 M
rows here); from 10 M to 20 M rows it grows 7 %.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from optimizer.curves.lengths import LengthDistribution

METROS = ("new-york", "chicago", "dallas", "los-angeles")
WORKLOADS = {"chat": (1200, 4200, 210, 600), "code-completion": (2000, 7400, 28, 250)}  # isl/osl mean, p99
DAYS = 7
CHUNK_ROWS = 1_000_000
# the CLI in a process of its own, which prints its peak memory (KiB) last on stderr
MEASURED = ("import resource, sys; from optimizer.cli.main import main; code = main(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(code)")


def _chunk(rng: np.random.Generator, start_s: float, n: int, span_s: float,
           sessions: bool = False) -> tuple[pd.DataFrame, float]:
    """n requests after start_s, arriving at a rate that swells through the day."""
    mean_gap = span_s / (CHUNK_ROWS * 1.0)
    hours = (start_s / 3600 + np.arange(n) * mean_gap / 3600) % 24
    gaps = rng.exponential(mean_gap / (0.6 + 0.8 * np.sin(np.pi * hours / 24) ** 2), n)
    t = start_s + np.cumsum(gaps)
    workload = rng.choice(list(WORKLOADS), n, p=[0.7, 0.3])
    isl, osl = np.empty(n, np.int64), np.empty(n, np.int64)
    for k, (im, ip, om, op) in WORKLOADS.items():
        sel = workload == k
        isl[sel] = LengthDistribution(im, ip, 32_000).sample(rng, int(sel.sum()))
        osl[sel] = LengthDistribution(om, op, 8_000).sample(rng, int(sel.sum()))
    stamps = pd.Timestamp("2025-03-03") + pd.to_timedelta(t, unit="s")
    frame = pd.DataFrame({"timestamp": stamps.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "prompt_tokens": isl,
                          "completion_tokens": osl, "metro": rng.choice(METROS, n), "workload": workload})
    if sessions:  # a quarter as many conversations as requests in the chunk: four turns each on average
        frame["session_id"] = int(start_s) * 1000 + rng.integers(0, max(n // 4, 1), n)
    return frame, float(t[-1])


def write_log(path: Path, rows: int, fmt: str, sessions: bool = False) -> None:
    rng = np.random.default_rng(0)
    span_per_chunk = DAYS * 86400 * CHUNK_ROWS / rows
    t, written, writer = 0.0, 0, None
    while written < rows:
        n = min(CHUNK_ROWS, rows - written)
        frame, t = _chunk(rng, t, n, span_per_chunk, sessions)
        if fmt == "csv":
            frame.to_csv(path, mode="a", header=written == 0, index=False)
        else:
            table = pa.Table.from_pandas(frame, preserve_index=False)
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
        written += n
    if writer:
        writer.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1000000,10000000")
    ap.add_argument("--format", default="csv,parquet")
    ap.add_argument("--keep", help="folder to keep the logs in, and to reuse them from (default: a temporary one)")
    ap.add_argument("--sessions", action="store_true", help="logs with a session_id column (prefix reuse derived)")
    args = ap.parse_args(argv)
    lines = ["| rows | format | file MiB | write log s | demand s | requests/s | peak memory MiB |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for rows in (int(x) for x in args.rows.split(",")):
            for fmt in args.format.split(","):
                log = folder / f"log-{rows}{'-sessions' if args.sessions else ''}.{fmt}"
                written = "kept"
                if not (args.keep and log.exists()):
                    t0 = time.perf_counter()
                    write_log(log, rows, fmt, args.sessions)
                    written = f"{time.perf_counter() - t0:.1f}"
                t0 = time.perf_counter()
                command = [sys.executable, "-c", MEASURED, "demand", "--from-trace", str(log), "--out",
                           str(folder / f"demand-{rows}-{fmt}")]
                done = subprocess.run(command, check=True, capture_output=True, text=True)
                seconds = time.perf_counter() - t0
                peak_mib = int(done.stderr.strip().splitlines()[-1]) / 1024
                lines.append(f"| {rows:,} | {fmt} | {log.stat().st_size / 2**20:,.0f} | {written} | {seconds:.1f} | "
                             f"{rows / seconds:,.0f} | {peak_mib:,.0f} |")
                print(lines[-1], file=sys.stderr)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
