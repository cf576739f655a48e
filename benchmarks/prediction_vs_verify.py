"""Predicted against simulated p99s: the shipped scenarios planned (the first whole plan, as
``--effort first``) and verified, and per workload how far the prediction is from what the
simulation measures.

    python benchmarks/prediction_vs_verify.py [--scenarios reference,us-east,deepseek-moe] [--requests 20000]
                                              [--seed 0] [--before NAME=DIR …] [--out DIR]

For every (site, workload, slice) group `verify` simulates, the ratio predicted / measured of
its p99 TTFT and p99 ITL (the prediction is the mixture of the group's routes through its
pools, `optimizer.results.latency`); per workload the median ratio and the ratio of its
group furthest from 1, the least TTFT attainment, and the plan's cost. ``--before
NAME=DIR`` puts a plan folder made (and verified) by another version beside it — e.g. one
written before the tail-of-the-sum sizing — read from its summary.json and verify.csv.
Prints one Markdown table (RESULTS.md "Predicted p99s against the simulation").
Each scenario: ~40 s to plan and ~40–60 s to verify the reference on two cores; us-east ~15 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from optimizer.commands.pipeline import make_plan
from optimizer.commands.verify import verify_plan, write_verify
from optimizer.folder.write import write_plan
from optimizer.scenario import DATA_DIR

SCENARIOS = {"reference": None, "us-east": DATA_DIR / "scenarios" / "us-east.yaml",
             "deepseek-moe": DATA_DIR / "scenarios" / "deepseek-moe.yaml"}


def ratios(groups: pd.DataFrame) -> pd.DataFrame:
    """Per workload: groups, the median ratio predicted / measured of p99 TTFT and ITL and the
    group's ratio furthest from 1, and the least TTFT attainment."""
    g = groups[groups["scope"] == "site"] if "scope" in groups else groups
    out = []
    for k, rows in g.groupby("workload", sort=True):
        row = {"workload": k, "groups": len(rows), "ttft_attainment_min": rows["ttft_attainment"].min()}
        for what in ("ttft", "itl"):
            r = rows[f"{what}_p99_ms_predicted"] / rows[f"{what}_p99_ms"]
            row[f"{what}_median"] = r.median()
            row[f"{what}_worst"] = r.loc[(r - 1).abs().idxmax()]
        out.append(row)
    return pd.DataFrame(out)


def measured(name: str, scenario, requests: int, seed: int, out: Path) -> tuple[dict, pd.DataFrame, float]:
    """(summary, ratios, seconds) of the scenario planned and verified in ``out``/name."""
    t0 = time.perf_counter()
    folder = write_plan(make_plan(scenario, effort="first"), out / name)
    result = verify_plan(folder, requests=requests, seed=seed)
    write_verify(result, folder)
    summary = json.loads((folder / "summary.json").read_text())
    return summary, ratios(result.tables["by_pool"]), time.perf_counter() - t0


def recorded(folder: Path) -> tuple[dict, pd.DataFrame]:
    """A plan folder verified earlier: its summary and the ratios of its verify.csv."""
    return json.loads((folder / "summary.json").read_text()), ratios(pd.read_csv(folder / "verify.csv"))


def table(rows: list[tuple[str, str, dict, pd.DataFrame]]) -> str:
    header = ("| scenario | version | cost / year | workload | groups | p99 TTFT: median predicted/measured | "
              "worst group | p99 ITL: median | worst group | TTFT attainment (least group) |")
    lines = [header, "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for scenario, version, summary, r in rows:
        for i, x in enumerate(r.itertuples()):
            cost = f"${summary['total_cost_usd']:,.0f}" if i == 0 else ""
            lines.append(f"| {scenario if i == 0 else ''} | {version if i == 0 else ''} | {cost} | {x.workload} | "
                         f"{x.groups} | {x.ttft_median:.3f} | {x.ttft_worst:.3f} | {x.itl_median:.3f} | "
                         f"{x.itl_worst:.3f} | {x.ttft_attainment_min:.4f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="reference,us-east")
    ap.add_argument("--requests", type=int, default=20000, help="simulated requests per group (verify's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--before", action="append", default=[], metavar="NAME=DIR",
                    help="a verified plan folder of scenario NAME made by another version, shown beside")
    ap.add_argument("--out", default=None, help="keep the plan folders here (default: a temporary folder)")
    args = ap.parse_args(argv)
    before = dict(item.split("=", 1) for item in args.before)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        for name in args.scenarios.split(","):
            if name in before:
                rows.append((name, "before", *recorded(Path(before[name]))))
            summary, r, seconds = measured(name, SCENARIOS[name], args.requests, args.seed, out)
            print(f"{name}: planned and verified in {seconds:.0f} s", file=sys.stderr)
            rows.append((name, "this version", summary, r))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
