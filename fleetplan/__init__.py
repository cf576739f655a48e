"""fleetplan's public Python API, for notebooks and scripts.

    import fleetplan as fp
    p = fp.plan("my-scenario.yaml", ["workloads.chat.ttft_p99_ms=400"])   # a Plan (None: reference)
    p.summary["total_cost_usd"], p.tables["procurement"]                 # figures and tidy tables
    fp.write_plan(p, "plans/base")                                        # the plan folder (+ report.html)
    fp.verify("plans/base")                                               # simulate it request by request
    fp.sweep("my-scenario.yaml", {"demand.scale": [1, 1.5]})              # a DataFrame, one row per run
    fp.compare(["plans/base", "plans/variant"])                           # a Comparison

The library itself lives in `optimizer` (scenario → plan) and `formulations` (the MIP).
"""

from pathlib import Path

from optimizer.commands import compare as _compare
from optimizer.commands.compare import Comparison, compare, comparison_text
from optimizer.commands.pipeline import make_plan as plan
from optimizer.commands.report import write_report
from optimizer.commands.report.compare_page import write_compare_report
from optimizer.commands.sweep import sweep
from optimizer.commands.verify import verify_plan as verify
from optimizer.commands.verify import write_verify
from optimizer.folder import write as _write
from optimizer.folder.read import read_plan
from optimizer.results import Plan
from optimizer.scenario import load_scenario


def write_plan(p: Plan, out_dir, report: bool = True) -> Path:
    """The plan folder (`optimizer.folder.write`), with report.html unless ``report`` is False."""
    return _write.write_plan(p, out_dir, inputs=p.inputs, extras=(write_report,) if report else ())


def write_comparison(cmp: Comparison, out_dir) -> Path:
    """compare.csv and routing_changes.csv (`optimizer.commands.compare`), with compare.html and compare.png."""
    out = _compare.write_comparison(cmp, out_dir)
    write_compare_report(cmp, out)
    return out


__all__ = ["Comparison", "Plan", "compare", "comparison_text", "load_scenario", "plan", "read_plan", "sweep",
           "verify", "write_comparison", "write_plan", "write_verify"]
