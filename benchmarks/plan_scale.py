"""The scale ladder: from the reference scenario up to a global one, one row per step.

    python benchmarks/plan_scale.py [--steps reference,100x30,200x40] [--time-limit 300] [--out FILE.md]

Per step: metros, sites, slices, variables, integer variables, rows, nonzeros, build s,
hand-off s, bound LP s (the root: the first, relaxed solve whose optimum is the proven
bound), seconds until the best whole plan so far is within 5 % and 1 % of that bound ("-"
if never), solve s, wall s, status, final gap against the proven bound, plan cost, hand-made
baseline cost, savings, peak memory (MiB). Prints a Markdown table (and writes it with --out).

A (metro, workload) pair no site can serve within its TTFT objective (the global step has
some: West Africa to Madrid for code-completion's 150 ms) would only add its unserved-demand
penalty to both the plan and the bound and hide the gap; such pairs are dropped (demand mix
0) and counted in the `dropped_pairs` column.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import REFERENCE_SITES, write_case  # noqa: E402

from optimizer.baseline import baseline  # noqa: E402
from optimizer.instance import build_instance  # noqa: E402
from optimizer.network import build_graph, rtt_matrix  # noqa: E402
from optimizer.pipeline import settings_from  # noqa: E402
from optimizer.scenario import MixRow, load_scenario  # noqa: E402
from optimizer.solve import solve  # noqa: E402

COLUMNS = ["step", "metros", "sites", "slices", "dropped_pairs", "variables", "integers", "rows", "nonzeros", "build_s", "handoff_s",
           "bound_lp_s", "to_5%_s", "to_1%_s", "solve_s", "wall_s", "status", "gap_%", "cost_musd", "baseline_musd", "savings_%", "peak_mib"]


def scenario_for(step: str, folder: Path) -> Path | None:
    if step == "reference":
        return None
    metros, sites = (int(x) for x in step.split("x"))
    na_eu = {"north-america", "europe"} if metros <= 100 else None
    return write_case(folder / step, metros, sites, continents=na_eu,
                      site_ids=REFERENCE_SITES if sites <= 10 else None)


def time_to_gap(result, gap: float) -> float | str:
    """Seconds from the start of the build until the best whole plan is within ``gap`` of the
    proven bound (gap = (plan − bound) / plan, as the planner reports it)."""
    elapsed = result.build_seconds + result.handoff_seconds
    best = float("inf")
    for st in result.steps:
        elapsed += st.seconds
        if st.repaired_usd is not None:
            best = min(best, st.repaired_usd)
        if best < float("inf") and (best - result.best_bound_usd) / best <= gap:
            return elapsed
    return "-"


def run_step(step: str, folder: Path, time_limit: float) -> dict:
    start = time.perf_counter()
    s, raw = load_scenario(scenario_for(step, folder))
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s)
    inst = build_instance(s, rtt)
    dropped = [MixRow(metro=u["metro"], workload=u["workload"], multiplier=0.0) for u in inst.unreachable]
    if dropped:
        s = s.model_copy(update={"demand": s.demand.model_copy(update={"mix": list(s.demand.mix) + dropped})})
        inst = build_instance(s, rtt)
    result = solve(inst, settings_from(s, time_limit_s=time_limit), progress=lambda m: print("   ", m, file=sys.stderr))
    base = baseline(inst)
    size = result.model_size
    cost = result.objective_usd
    return {
        "step": step, "metros": len(s.metros), "sites": len(s.sites), "slices": len(inst.slices),
        "dropped_pairs": len(dropped),
        "variables": size["variables"], "integers": size["integers"], "rows": size["rows"], "nonzeros": size["nonzeros"],
        "build_s": result.build_seconds, "handoff_s": result.handoff_seconds,
        "bound_lp_s": next((st.seconds for st in result.steps if st.kind in ("bound", "exact")), float("nan")),
        "to_5%_s": time_to_gap(result, 0.05), "to_1%_s": time_to_gap(result, 0.01), "solve_s": result.solve_seconds,
        "wall_s": time.perf_counter() - start, "status": result.status, "gap_%": 100 * result.mip_gap,
        "cost_musd": cost / 1e6, "baseline_musd": base.total_cost_usd / 1e6 if base else float("nan"),
        "savings_%": 100 * (1 - cost / base.total_cost_usd) if base else float("nan"),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def markdown(rows: list[dict]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", default="reference,100x30,200x40")
    p.add_argument("--time-limit", type=float, default=300.0)
    p.add_argument("--out")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for step in args.steps.split(","):
            print(f"== {step}", file=sys.stderr)
            rows.append(run_step(step, Path(tmp), args.time_limit))
            print(markdown(rows[-1:]), file=sys.stderr)
    table = markdown(rows)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
