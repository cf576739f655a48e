"""The scale ladder: from the reference scenario up to a global one, one row per step.

    python benchmarks/plan_scale.py [--steps reference,100x30,200x40] [--effort quick] [--time-limit S]
                                    [--out FILE.md] [--history DIR]

A step is a shipped scenario's name (``reference``, ``us-east``, ``one-site-70b``) or a
synthetic case ``METROSxSITES``. Per step: metros, sites, slices, variables, integer
variables, rows, nonzeros, build s, hand-off s, bound LP s (the master LP, whose optimum is
the first proven bound), the first whole plan (seconds into the solve, cost), seconds until
the reported gap (best plan against best bound so far) is within 5 % and 1 % ("-" if never),
solve s, wall s, status, the master LP's bound, the best bound and where it came from, the
final gap, plan cost, hand-made baseline cost, savings, peak memory (MiB). Prints a Markdown
table (and writes it with --out); ``--history DIR`` writes each step's plan and bound over
time as ``DIR/STEP.csv`` (`gap_over_time.py` draws them). The effort sets the work
(`optimizer.solve.settings.WORK`); ``--time-limit`` only caps the wall clock.

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

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import REFERENCE_SITES, write_case  # noqa: E402

from optimizer.commands.pipeline import settings_from  # noqa: E402
from optimizer.geography.network import build_graph, rtt_matrix  # noqa: E402
from optimizer.instance.build import build_instance  # noqa: E402
from optimizer.scenario import DATA_DIR, MixRow, load_scenario  # noqa: E402
from optimizer.solve import solve  # noqa: E402
from optimizer.solve.baseline import baseline  # noqa: E402
from optimizer.solve.settings import EFFORTS  # noqa: E402

COLUMNS = ["step", "metros", "sites", "slices", "dropped_pairs", "variables", "integers", "rows", "nonzeros", "build_s",
           "handoff_s", "bound_lp_s", "first_plan_s", "first_plan_musd", "to_5%_s", "to_1%_s", "solve_s", "wall_s",
           "status", "master_bound_musd", "bound_musd", "bound_from", "gap_%", "cost_musd", "baseline_musd", "savings_%",
           "peak_mib"]
SHIPPED = {"us-east", "one-site-70b"}


def scenario_for(step: str, folder: Path) -> Path | None:
    if step == "reference":
        return None
    if step in SHIPPED:
        return DATA_DIR / "scenarios" / f"{step}.yaml"
    metros, sites = (int(x) for x in step.split("x"))
    na_eu = {"north-america", "europe"} if metros <= 100 else None
    return write_case(folder / step, metros, sites, continents=na_eu,
                      site_ids=REFERENCE_SITES if sites <= 10 else None)


def time_to_gap(result, gap: float) -> float | str:
    """Seconds into the solve until the reported gap — the best whole plan so far against the
    best bound so far, (plan − bound) / plan — is within ``gap``."""
    for p in result.history:
        if p.plan_usd and p.bound_usd is not None and (p.plan_usd - p.bound_usd) / p.plan_usd <= gap:
            return p.seconds
    return "-"


def run_step(step: str, folder: Path, time_limit: float | None, effort: str, history: Path | None) -> dict:
    start = time.perf_counter()
    s, raw = load_scenario(scenario_for(step, folder))
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s)
    inst = build_instance(s, rtt)
    dropped = [MixRow(metro=u["metro"], workload=u["workload"], multiplier=0.0) for u in inst.unreachable]
    if dropped:
        s = s.model_copy(update={"demand": s.demand.model_copy(update={"mix": list(s.demand.mix) + dropped})})
        inst = build_instance(s, rtt)
    result = solve(inst, settings_from(s, time_limit_s=time_limit, effort=effort),
                   progress=lambda m: print("   ", m, file=sys.stderr))
    if history is not None:
        history.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([vars(p) for p in result.history]).to_csv(history / f"{step}.csv", index=False)
    base = baseline(inst)
    whole = base.total_cost_usd if not base.cannot_serve else None  # a baseline short of a workload is no baseline
    size = result.model_size
    cost = result.objective_usd
    return {
        "step": step, "metros": len(s.metros), "sites": len(s.sites), "slices": len(inst.slices),
        "dropped_pairs": len(dropped),
        "variables": size["variables"], "integers": size["integers"], "rows": size["rows"], "nonzeros": size["nonzeros"],
        "build_s": result.build_seconds, "handoff_s": result.handoff_seconds,
        "bound_lp_s": next((st.seconds for st in result.steps if st.kind in ("bound", "exact")), float("nan")),
        "first_plan_s": result.first_plan_seconds if result.first_plan_seconds is not None else float("nan"),
        "first_plan_musd": (result.split.get("first_plan_usd") or float("nan")) / 1e6,
        "to_5%_s": time_to_gap(result, 0.05), "to_1%_s": time_to_gap(result, 0.01), "solve_s": result.solve_seconds,
        "wall_s": time.perf_counter() - start, "status": result.status,
        "master_bound_musd": next((b.usd for b in result.bounds if b.source == "master LP"), float("nan")) / 1e6,
        "bound_musd": result.best_bound_usd / 1e6, "bound_from": best_source(result),
        "gap_%": 100 * result.mip_gap,
        "cost_musd": cost / 1e6, "baseline_musd": whole / 1e6 if whole else float("nan"),
        "savings_%": 100 * (1 - cost / whole) if whole else float("nan"),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def best_source(result) -> str:
    best = max(result.bounds, key=lambda b: b.usd, default=None)
    return best.source if best is not None else "-"


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
    p.add_argument("--time-limit", type=float, default=None)
    p.add_argument("--effort", choices=EFFORTS, default="quick")
    p.add_argument("--out")
    p.add_argument("--history", type=Path)
    args = p.parse_args()
    if args.history is not None and args.history.exists() and not args.history.is_dir():
        p.error(f"--history {args.history}: expected a folder for the STEP.csv files, not a file")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for step in args.steps.split(","):
            print(f"== {step}", file=sys.stderr)
            rows.append(run_step(step, Path(tmp), args.time_limit, args.effort, args.history))
            print(markdown(rows[-1:]), file=sys.stderr)
    table = markdown(rows)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
