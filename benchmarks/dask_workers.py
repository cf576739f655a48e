"""Slice programs on a Dask cluster: the same result with 1, 2 or 4 workers, and the time.

    python benchmarks/dask_workers.py [--step 100x30] [--workers 1,2,4]

Plans the step's first whole plan once, then re-plans its renting slices exactly on the plan's
commitment (`optimizer.solve.anytime.replan_slices`: the slice programs of the thorough effort, each
for its branch-and-bound nodes, then moves on what they give) on a `dask.distributed`
LocalCluster of each worker count. Prints one Markdown row per count: seconds for the round,
slice programs, the re-planned whole plan's cost, and a digest of its decisions — equal
digests mean the same plan, whatever the cluster. On this 2-core machine more than two
workers only share the cores.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from dask.distributed import LocalCluster  # noqa: E402
from plan_scale import scenario_for  # noqa: E402

from optimizer.commands.pipeline import settings_from  # noqa: E402
from optimizer.geography.network import build_graph, rtt_matrix  # noqa: E402
from optimizer.instance.build import build_instance  # noqa: E402
from optimizer.scenario import load_scenario  # noqa: E402
from optimizer.solve import solve  # noqa: E402
from optimizer.solve.anytime import replan_slices  # noqa: E402
from optimizer.solve.cache import ModelCache  # noqa: E402
from optimizer.solve.parallel import SliceRunner  # noqa: E402
from optimizer.solve.pricing import candidate, pool_sizes  # noqa: E402
from optimizer.solve.steps import Context  # noqa: E402


def digest(sol) -> str:
    parts = [sorted(sol.committed.items()), sorted(sol.ondemand.items()), sorted(sol.replicas.items())]
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", default="100x30")
    ap.add_argument("--workers", default="1,2,4")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        s, raw = load_scenario(scenario_for(args.step, Path(tmp)))
        inst = build_instance(s, rtt_matrix(build_graph(s, raw.path.parent), s))
        first = solve(inst, settings_from(s, effort="first"), progress=lambda m: print("   ", m, file=sys.stderr))
        plan = candidate(inst, first.solution)
        print(f"{args.step}: first plan ${plan.cost_usd:,.0f}, {len(inst.states)} states", file=sys.stderr)
        print("| workers | round s | slice programs | re-planned plan $/year | decisions digest |")
        print("|---:|---:|---:|---:|---|")
        for n in (int(x) for x in args.workers.split(",")):
            with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
                largest, guess = pool_sizes(inst)
                settings = settings_from(s, effort="thorough", scheduler=cluster.scheduler_address)
                ctx = Context(inst, ModelCache(), settings, time.perf_counter() + settings.cap_s, lambda m: None,
                              largest, guess)
                ctx.best = plan
                start = time.perf_counter()
                with SliceRunner(inst, n, cluster.scheduler_address) as runner:
                    new = replan_slices(ctx, runner, plan)
                print(f"| {n} | {time.perf_counter() - start:.1f} | {ctx.work.get('slice programs', 0)} | "
                      f"{new.cost_usd:,.0f} | {digest(new.solution)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
