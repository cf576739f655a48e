"""The 8,760-hour operational year of a fixed commitment (`fleetplan operate`).

    python benchmarks/operate_year.py [--plan DIR] [--sigmas 0,0.1]

Plans the reference scenario into a temporary folder (unless --plan is given), then operates
its commitment through every hour of the year once per day-to-day demand variation σ, and
prints one Markdown table: σ, hours, seconds in the hourly programs, wall seconds (calendar,
demand, programs, whole replicas and costing), the year's cost against the plan's, the
on-demand peak, and the hours with unserved demand or short of GPUs.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from optimizer.commands.operate import operate_plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", help="a plan folder (default: plan the reference scenario first)")
    ap.add_argument("--sigmas", default="0,0.1")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        plan = args.plan
        if plan is None:
            plan = str(Path(tmp) / "reference")
            subprocess.run([sys.executable, "-m", "optimizer.cli", "plan", "--out", plan, "--quiet", "--no-report"],
                           check=True)
        rows = []
        for sigma in (float(x) for x in args.sigmas.split(",")):
            sm = operate_plan(plan, noise_sigma=sigma).summary
            rows.append(f"| {sigma:g} | {sm['hours']:,} | {sm['solve_seconds']:.1f} | {sm['wall_seconds']:.1f} | "
                        f"{sm['total_cost_usd'] / 1e6:.3f} | {sm['planned_total_cost_usd'] / 1e6:.3f} | "
                        f"{100 * sm['cost_vs_plan']:+.2f} | {sm['ondemand_nodes_peak']} | {sm['hours_with_unserved']} | "
                        f"{sm['hours_short_of_gpus']} | {sm['hours_rerouted']} |")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| noise σ | hours | calendar + hourly programs s | wall s | year cost M$ | plan cost M$ | vs plan % | on-demand peak nodes "
          "| hours unserved | hours short of GPUs | hours re-routed |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\npeak memory of the operating process: {peak_mib:,.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
