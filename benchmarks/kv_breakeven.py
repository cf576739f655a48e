"""Where a KV-cache tier pays for itself: whole plans over a sweep of one tier's size.

    python benchmarks/kv_breakeven.py [--scenario us-east] [--tier nvme] [--sizes 0,10,50,200,1000,3000]

Plans the scenario once per size with ``kv_cache.tiers=[{id: <tier>, fixed_gb_per_rps: size}]``
(size 0: no cache at all), once with the tiers sized by the plan (all four shipped tiers), and
once as shipped (the workloads' own hit rates), and prints one Markdown table: the capacity per
request/s at the peak, each workload's hit rate, the plan's GPU cost, the tier's cost, their sum
and the sum against the plan without a cache. The break-even is where the sum stops falling.
"""

from __future__ import annotations

import argparse

from optimizer.commands.pipeline import make_plan
from optimizer.scenario import load_scenario

ALL_TIERS = "[hbm, dram, nvme, store]"


def _row(label: str, summary: dict, workloads: list[str], base: float | None) -> str:
    kv = summary.get("kv_cache")
    gpu = summary["total_cost_usd"]
    cache = kv["cache_usd"] if kv else 0.0
    hits = [f"{100 * kv['workloads'][k]['hit_rate']:.1f} %" if kv else "as shipped" for k in workloads]
    total = gpu + cache
    vs = f"{100 * (total / base - 1):+.1f} %" if base else "–"
    return (f"| {label} | " + " | ".join(hits) + f" | ${gpu:,.0f} | ${cache:,.0f} | ${total:,.0f} | {vs} | "
            f"{100 * summary['mip_gap']:.1f} % |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="us-east")
    ap.add_argument("--tier", default="nvme")
    ap.add_argument("--sizes", default="0,10,50,200,1000,3000", help="GB per request/s at the peak")
    args = ap.parse_args(argv)
    s, _ = load_scenario(args.scenario)
    workloads = [k for k, w in s.workloads.items() if w.prompt_cache_hit_rate > 0]
    print(f"| {args.tier} GB per request/s | " + " | ".join(f"{k} hit" for k in workloads)
          + " | GPU $/year | cache $/year | total $/year | vs no cache | gap |")
    print("|---|" + "---:|" * (len(workloads) + 5))
    base = None
    for size in (float(x) for x in args.sizes.split(",")):
        plan = make_plan(args.scenario, [f"kv_cache={{tiers: [{{id: {args.tier}, fixed_gb_per_rps: {size:g}}}]}}"])
        if base is None:
            base = plan.summary["total_cost_usd"] + plan.summary["kv_cache"]["cache_usd"]
        print(_row(f"{size:g}", plan.summary, workloads, base), flush=True)
    print(_row(f"sized ({ALL_TIERS})", make_plan(args.scenario, [f"kv_cache.tiers={ALL_TIERS}"]).summary,
               workloads, base))
    print(_row("no kv_cache section (shipped hit rates)", make_plan(args.scenario).summary, workloads, base))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
