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

from optimizer.compare import Comparison, compare, comparison_text, write_comparison
from optimizer.plan import Plan, read_plan, write_plan
from optimizer.plan import make_plan as plan
from optimizer.scenario import load_scenario
from optimizer.sweep import sweep
from optimizer.verify import verify_plan as verify
from optimizer.verify import write_verify

__all__ = ["Comparison", "Plan", "compare", "comparison_text", "load_scenario", "plan", "read_plan", "sweep",
           "verify", "write_comparison", "write_plan", "write_verify"]
