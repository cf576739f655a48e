"""Every benchmark in one go, written to benchmarks/RESULTS.md.

    python benchmarks/run_all.py [--steps reference,100x30] [--effort quick] [--time-limit S] [--sweep-runs 8]
                                 [--out benchmarks/RESULTS.md]

Runs the scale ladder (`plan_scale.py`), the sweep throughput (`sweep_throughput.py`), the
simulator throughput (`verify_throughput.py`, one and two processes), the 8,760-hour
operational year (`operate_year.py`) and request logs into a demand table (`trace_demand.py`)
one after another — they share
the machine's two cores, so never at the same time — and writes their Markdown tables under a
header that records the date, the commit, the CPU count and the HiGHS version. The targets of
the performance issue sit beside the measured figures; the text around them is written by
hand after reading the tables.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(script: str, *args: str) -> str:
    print(f"== {script} {' '.join(args)}", file=sys.stderr)
    done = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True, check=False)
    sys.stderr.write(done.stderr[-2000:])
    return done.stdout.strip() or f"(no table: exit {done.returncode})"


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="reference,100x30")
    ap.add_argument("--effort", default="quick")
    ap.add_argument("--time-limit", help="seconds per ladder step (default: the effort's budget)")
    ap.add_argument("--sweep-runs", default="8")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        plan = str(Path(tmp) / "reference")
        subprocess.run([sys.executable, "-m", "optimizer.cli", "plan", "--out", plan, "--quiet", "--no-report"],
                       check=False)
        ladder = ["--steps", args.steps, "--effort", args.effort] + (["--time-limit", args.time_limit] if args.time_limit else [])
        parts = {
            "Scale ladder (`plan_scale.py`)": _run("plan_scale.py", *ladder),
            "Sweep throughput (`sweep_throughput.py`)": _run("sweep_throughput.py", "--runs", args.sweep_runs),
            "Simulator throughput (`verify_throughput.py`)": _run("verify_throughput.py", "--plan", plan, "--workers", "1,2"),
            "Operational year, fixed commitment (`operate_year.py`)": _run("operate_year.py", "--plan", plan),
            "Request logs into a demand table (`trace_demand.py`)": _run("trace_demand.py"),
        }
    version = metadata.version("highspy")
    head = (f"# Benchmark results\n\nMeasured {datetime.date.today().isoformat()} at commit {_commit()} on "
            f"{os.cpu_count()} CPUs, highspy {version}, Python {sys.version.split()[0]}; "
            f"`python benchmarks/run_all.py` writes the tables below.\n")
    body = "\n".join(f"\n## {title}\n\n{table}\n" for title, table in parts.items())
    Path(args.out).write_text(head + body)
    print(head + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
