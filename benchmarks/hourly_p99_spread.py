"""How far one hour's p99 wait strays from the long-run p99 a plan sizes for, and what that
does to `verify`'s per-group judgement.

    python benchmarks/hourly_p99_spread.py [--scenario data/scenarios/deepseek-moe.yaml]
        [--workload reasoning] [--gpu h200-sxm] [--gpus 8] [--batch-tokens 8192]
        [--servers 1,2,4] [--hours 40] [--plan PLAN_DIR --seeds 6]

Part one: a prefill pool (Poisson arrivals of the workload's prompts through `verify`'s FIFO
pool with batching) run for ``--hours`` hours at 50, 70 and 80 % of its full-pass capacity;
the long-run p99 wait x over all of them, then each hour's own p99 wait over x (10th, 50th,
90th percentile of the hours) and the standard deviation of the hourly share of requests
waiting longer than x (1 % in the long run). A plan's laws size for x; an hour is judged on
its own p99.

Part two (``--plan``): `verify` of a plan folder under ``--seeds`` seeds (a copy per seed, the
folder itself untouched); per seed the groups that miss their TTFT objective and the spread of
measured / predicted p99 TTFT over the groups. Prints Markdown tables (RESULTS.md, "The wait's
heavy tail").
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from optimizer.base.units import SECONDS_PER_HOUR
from optimizer.commands.verify import verify_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prefill_wait_tail import pool_arguments, simulated_waits, the_pool  # noqa: E402

UTILISATIONS = (0.5, 0.7, 0.8)
LONG_RUN_Q = 0.99


def hourly_waits(r, w, isl, batch_tokens, servers, lam, hours, seed):
    """(waits in s, the hour of each arrival) of ``hours`` simulated hours."""
    t, wait = simulated_waits(r, w, isl, batch_tokens, servers, lam, int(lam * SECONDS_PER_HOUR * hours), seed)
    return wait, np.floor(t / SECONDS_PER_HOUR).astype(np.int64)


def pool_table(args) -> None:
    w, r, c, isl = the_pool(args)
    print("| replicas | utilisation | requests an hour | long-run p99 wait (ms) | an hour's p99 / long-run: "
          "10th, 50th, 90th percentile of hours | hourly share over the long-run p99: sd |")
    print("|---:|---:|---:|---:|---|---:|")
    for n in (int(x) for x in args.servers.split(",")):
        for util in UTILISATIONS:
            lam = util * n * c.lane_rps()
            wait, hour = hourly_waits(r, w, isl, args.batch_tokens, n, lam, args.hours, seed=7)
            keep = hour < args.hours
            wait, hour = wait[keep], hour[keep]
            x = float(np.quantile(wait, LONG_RUN_Q))
            per_hour = np.array([np.quantile(wait[hour == h], LONG_RUN_Q) for h in range(args.hours)]) / x
            share = np.bincount(hour, wait > x) / np.bincount(hour)
            p10, p50, p90 = np.quantile(per_hour, (0.1, 0.5, 0.9))
            print(f"| {n} | {util:.2f} | {lam * SECONDS_PER_HOUR:,.0f} | {x * 1e3:,.0f} | {p10:.2f}, {p50:.2f}, "
                  f"{p90:.2f} | {share.std():.4f} |")


def plan_table(plan_dir: Path, seeds: int) -> None:
    print("\n| seed | groups missing TTFT | of | measured / predicted p99 TTFT: min, median, max | lowest attainment |")
    print("|---:|---:|---:|---|---:|")
    for seed in range(seeds):
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "plan"
            shutil.copytree(plan_dir, copy)
            res = verify_plan(copy, seed=seed)
            v = res.tables["by_pool"]
            ratio = v["ttft_p99_ms"] / v["ttft_p99_ms_predicted"]
            print(f"| {seed} | {int((~v['ttft_pass'].astype(bool)).sum())} | {len(v)} | {ratio.min():.2f}, "
                  f"{ratio.median():.2f}, {ratio.max():.2f} | {v['ttft_attainment'].min():.4f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pool_arguments(ap)
    ap.add_argument("--servers", default="1,2,4")
    ap.add_argument("--hours", type=int, default=40)
    ap.add_argument("--plan", type=Path, help="a plan folder to verify under several seeds")
    ap.add_argument("--seeds", type=int, default=6)
    args = ap.parse_args(argv)
    pool_table(args)
    if args.plan is not None:
        plan_table(args.plan, args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
