"""The runs behind `fleetplan plan` on a scenario of several years and `fleetplan verify` (one
plan folder, each year of a multi-year one, or a request log replayed beside the Poisson run)."""

from __future__ import annotations

import sys
from pathlib import Path

from optimizer.base.errors import ScenarioError
from optimizer.base.outputs import HORIZON, folder_target, plan_folder_to_update
from optimizer.cli.inputs import poisson_source, slice_list, trace_specs
from optimizer.cli.output import print_json


def plan_years(args, loaded, progress) -> int:
    """`fleetplan plan` on a scenario of several years (`optimizer.commands.horizon`)."""
    from optimizer.commands.horizon import plan_horizon
    from optimizer.commands.horizon_text import horizon_text
    from optimizer.commands.pipeline import settings_from
    from optimizer.commands.report import write_report
    from optimizer.commands.report.horizon import write_horizon_report
    from optimizer.folder.horizon import write_horizon

    if args.robust:
        raise ScenarioError("--robust plans one year; give a scenario with horizon.years 1", field="--robust")
    s, raw = loaded
    folder_target(args.out, HORIZON, inputs=raw.files())  # refuse a bad target (a one-year plan folder) before any work
    settings = settings_from(s, args.time_limit, args.mip_gap, args.threads, args.exact, args.backend, args.effort,
                             args.workers, args.scheduler)
    plan = plan_horizon(s, raw, settings, progress=progress, allow_unserved=args.allow_unserved)
    out = write_horizon(plan, args.out, inputs=plan.inputs, extras=() if args.no_report else (write_horizon_report,),
                        year_extras=() if args.no_report else (write_report,))
    if args.json:
        print_json(plan.summary)
    else:
        print(horizon_text(plan, out))
    return 0


def verify_one(args, plan_dir) -> int:
    from optimizer.commands.verify import record_verification, verify_plan, write_verify
    from optimizer.commands.verify.text import verify_text

    plan_folder_to_update(plan_dir)
    progress = None if args.json else (lambda m: print(m, file=sys.stderr))
    state = f"spot@{args.spot_loss}" if args.spot_loss is not None else None
    result = verify_plan(plan_dir, slices=slice_list(args.slices), requests=args.requests, seed=args.seed,
                         progress=progress, prefill_batch_tokens=args.prefill_batch_tokens,
                         arrivals=poisson_source(args), state=state)
    if state:
        result.summary["state"] = state
    write_verify(result, plan_dir, "verify_spot_loss" if state else "verify")
    record_verification(result, plan_dir, "verification_spot_loss" if state else "verification")
    sm = result.summary
    if args.json:
        print_json(sm)
    else:
        print(verify_text(result, plan_dir))
    return 0 if sm["all_objectives_met"] else 7


def verify_trace(args) -> int:
    """`verify --trace`: the Poisson run and the log's replay of the same plan, side by side."""
    from optimizer.commands.traces.replay import trace_arrivals, verify_against_trace
    from optimizer.commands.verify.text import trace_runs_text
    from optimizer.folder.read import read_plan, scenario_of

    d = Path(args.plan_dir)
    s = scenario_of(read_plan(d), d)
    source = trace_arrivals(trace_specs(args.trace, args.columns, args.tz, None, None), s.workloads, args.trace_scale,
                            jitter_gaps=args.trace_jitter)
    runs, table = verify_against_trace(d, poisson_source(args, s), source, slices=slice_list(args.slices),
                                       requests=args.requests, seed=args.seed, prefill_batch_tokens=args.prefill_batch_tokens,
                                       progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    if args.json:
        print_json({"poisson": runs["poisson"].summary, "trace": runs["trace"].summary,
                     "by_workload": table.to_dict("records")})
    else:
        print(trace_runs_text(runs, table, d))
    return 0 if all(r.summary["all_objectives_met"] for r in runs.values()) else 7
