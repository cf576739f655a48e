"""Wall seconds from a command's start to its first whole plan, and to its end.

    python benchmarks/first_plan.py [--scenarios reference,us-east] [--efforts first,quick] [--runs 3]

Runs ``fleetplan plan SCENARIO --effort EFFORT --out TMP --no-report`` as a new process (its
imports included, as a planner would start it) and reads the progress lines as they come: the
first whole plan is the line of the master's bound solve (its flows made whole). Prints one
Markdown row per (scenario, effort): the median over ``--runs`` of the seconds to the first
whole plan and to the command's end, the plan's cost, gap, and whether every run wrote the
same tables (work is counted in moves and nodes, not seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST_PLAN_LINE = "bound solve:"
TABLES = ("procurement.csv", "nodes.csv", "pools.csv", "routing.csv", "slo.csv")


def run(scenario: str, effort: str, out: Path) -> dict:
    """One command, timed from its start."""
    argv = [sys.executable, "-m", "optimizer.cli", "plan", *([] if scenario == "reference" else [scenario]),
            "--effort", effort, "--out", str(out), "--no-report"]
    start = time.perf_counter()
    first = None
    with subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True) as proc:
        for line in proc.stderr:
            if first is None and line.startswith(FIRST_PLAN_LINE):
                first = time.perf_counter() - start
    end = time.perf_counter() - start
    if proc.returncode not in (0, 4):
        raise SystemExit(f"fleetplan plan {scenario} --effort {effort} exited {proc.returncode}")
    summary = json.loads((out / "summary.json").read_text())
    digest = hashlib.sha256(b"".join((out / name).read_bytes() for name in TABLES)).hexdigest()
    return {"first_s": first, "end_s": end, "cost": summary["total_cost_usd"], "gap": summary["mip_gap"],
            "digest": digest}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="reference,us-east")
    ap.add_argument("--efforts", default="first,quick")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    print("| scenario | effort | runs | first whole plan s (median, min–max) | command s (median) | cost $/year | gap | "
          "same tables every run |")
    print("|---|---|---:|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in args.scenarios.split(","):
            for effort in args.efforts.split(","):
                runs = [run(scenario, effort, Path(tmp) / f"{scenario}-{effort}-{i}") for i in range(args.runs)]
                firsts = [r["first_s"] for r in runs]
                print(f"| {scenario} | {effort} | {len(runs)} | {statistics.median(firsts):.1f} "
                      f"({min(firsts):.1f}–{max(firsts):.1f}) | {statistics.median(r['end_s'] for r in runs):.1f} | "
                      f"{runs[0]['cost']:,.0f} | {100 * runs[0]['gap']:.2f} % | "
                      f"{'yes' if len({r['digest'] for r in runs}) == 1 else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
