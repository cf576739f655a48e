"""`fleetplan …` — the command line. Each command parses its arguments and calls the library;
errors meant for the planner print one message and exit with the documented code
(`optimizer.base.errors`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pydantic import ValidationError

from optimizer.base.errors import FleetplanError, Origin, ScenarioError, shorten
from optimizer.base.outputs import (
    COMPARISON,
    DEMAND,
    HORIZON,
    PLAN,
    Terminated,
    file_target,
    folder_target,
    plan_folder_to_update,
    save_png,
    terminate_as_interrupt,
)
from optimizer.base.precision import default_kv
from optimizer.base.units import DAYS_PER_YEAR
from optimizer.cli import arguments as flags
from optimizer.cli.arguments import Parser
from optimizer.cli.inputs import (
    CURVE_FLAGS,
    at_precision,
    calibration_override,
    catalogue_ids,
    served_precision,
    trace_specs,
    with_catalogue_rows,
)
from optimizer.cli.output import print_json
from optimizer.cli.runs import plan_years, verify_one, verify_trace

# ---------------------------------------------------------------------------- commands

COMMANDS: dict[str, tuple] = {}  # name → (what it does, its handler, the definer of its flags)


def command(name: str, what: str, flags_of):
    """Register a command: its handler, one line of help and its flags (`optimizer.cli.arguments`)."""
    def register(handler):
        COMMANDS[name] = (what, handler, flags_of)
        return handler
    return register


@command("curves", "operating table of a model on an accelerator", flags.curves)
def cmd_curves(args) -> int:
    from optimizer.base.errors import unknown_id_message
    from optimizer.serving.table import operating_table

    s, _ = with_catalogue_rows(args, accelerators=[args.gpu], models=[args.model])
    for kind, value, table in (("model", args.model, "models"), ("accelerator", args.gpu, "accelerators")):
        if value not in getattr(s, table):
            known = {*getattr(s, table), *catalogue_ids(table)}
            raise ScenarioError(unknown_id_message(kind, value, known), field=f"--{'model' if kind == 'model' else 'gpu'}")
    model, gpu = s.models[args.model], s.accelerators[args.gpu]
    kv_dtype = args.kv_dtype or default_kv(args.dtype)
    served_precision(gpu, args.dtype, kv_dtype)
    price = args.price_usd_per_gpu_hour
    if price is None:
        if args.gpu not in s.prices:
            raise ScenarioError(f"no price for {args.gpu}; pass --price-usd-per-gpu-hour", field="--price-usd-per-gpu-hour")
        price = s.prices[args.gpu].ondemand_usd_per_gpu_hour
    try:
        out = operating_table(model, gpu, s.serving, args.isl, args.osl, args.itl_ms, price,
                              args.dtype, kv_dtype, args.ttft_ms)
    except ValidationError as exc:  # the workload rules of the YAML, applied to the flags
        from optimizer.scenario import Workload, explain

        err = exc.errors()[0]
        flag = CURVE_FLAGS.get(str(err["loc"][0]) if err["loc"] else "", "--isl")
        raise ScenarioError(explain(err, Workload), Origin(flag)) from None
    if args.plot:
        from optimizer.commands.report.curves import plot_curves

        plot_curves(out, model, gpu, s.serving, args.isl, args.osl, args.itl_ms, args.dtype, kv_dtype,
                    file_target(args.plot, "png", flag="--plot"))
    if args.json:
        print_json(out)
        return 0
    from optimizer.commands.serving_text import curves_text

    print(curves_text(out, model.id, gpu.id, dtype=args.dtype, kv_dtype=kv_dtype, isl=args.isl, osl=args.osl,
                      itl_ms=args.itl_ms, price=price))
    return 0


@command("validate", "check a scenario file; exit 0 or 2 with the first error", flags.validate)
def cmd_validate(args) -> int:
    from optimizer.instance.checks import preflight
    from optimizer.scenario import load_scenario

    s, raw = load_scenario(args.scenario)
    preflight(s, raw)
    for w in raw.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{raw.path}: valid — {len(s.metros)} metros, {len(s.sites)} sites, {len(s.accelerators)} accelerators, "
          f"{len(s.workloads)} workloads, {len(s.horizon.periods)} periods × {len(s.horizon.day_types)} day type(s) × "
          f"{len(s.horizon.hours)} h")
    return 0


@command("budget", "TTFT budget waterfall for a metro, a site and a workload", flags.budget)
def cmd_budget(args) -> int:
    from optimizer.base.errors import unknown_id_message
    from optimizer.geography.network import build_graph, rtt_matrix
    from optimizer.serving.budget import best_waterfall
    from optimizer.serving.configs import workload_configs

    s, raw = with_catalogue_rows(args, accelerators=[args.gpu] if args.gpu else [])
    for kind, value, table in (("metro", args.metro, s.metros), ("site", args.site, s.sites),
                               ("workload", args.workload, s.workloads)):
        if value not in table:
            raise ScenarioError(unknown_id_message(kind, value, table), field=f"--{kind}")
    gpus = [args.gpu] if args.gpu else sorted(s.supply.get(args.site, {}))
    for g in gpus:
        if g not in s.accelerators:
            known = {*s.accelerators, *catalogue_ids("accelerators")}
            raise ScenarioError(unknown_id_message("accelerator", g, known), field="--gpu")
    for why in filter(None, (s.sites[args.site].hosts(s.accelerators[g]) for g in gpus)):
        raise ScenarioError(f"{why}; expected an accelerator the site's racks take", field="--gpu")
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s).loc[args.metro, args.site]
    s = at_precision(s, args.workload, gpus, args.dtype, args.kv_dtype)
    w = s.workloads[args.workload]
    m = s.models[w.model]
    configs = [c for g in gpus for c in workload_configs(w, m, s.accelerators[g], s.serving)]
    best = best_waterfall(w, s, float(rtt), configs)
    if best is None:
        raise ScenarioError(f"{w.model} cannot be served on {', '.join(gpus)} within the {w.itl_p99_ms:g} ms ITL objective")
    out = {"metro": args.metro, "site": args.site, "gpus": gpus, **best.as_dict()}
    if args.json:
        print_json(out)
        return 0
    from optimizer.commands.serving_text import budget_text

    print(budget_text(out, best, args.workload, args.metro, w.ttft_p99_ms))
    return 0


@command("network", "the latency graph: RTT table, map, exports", flags.network)
def cmd_network(args) -> int:
    from optimizer.base.outputs import write_csv
    from optimizer.commands.report.maps import network_map
    from optimizer.geography.network import (
        EDGE_CSV_HEADER,
        RTT_CSV_HEADER,
        build_graph,
        rtt_long,
        rtt_matrix,
        write_edge_csv,
        write_graphml,
    )
    from optimizer.scenario import load_scenario

    s, raw = load_scenario(args.scenario)
    inputs = raw.files()
    targets = {}
    for flag, value, kind, header in (("--rtt-csv", args.rtt_csv, "csv", RTT_CSV_HEADER), ("--graphml", args.graphml, "graphml", None),
                                      ("--edges-csv", args.edges_csv, "csv", EDGE_CSV_HEADER), ("--plot", args.plot, "png", None)):
        if value is not None:
            targets[flag] = file_target(value, kind, flag=flag, header=header, inputs=inputs)
    if len(set(targets.values())) < len(targets):
        raise ScenarioError("two outputs name the same file; give each its own", field=", ".join(targets))
    g = build_graph(s, raw.path.parent)
    rtt = rtt_matrix(g, s)
    if "--rtt-csv" in targets:
        write_csv(rtt_long(rtt), targets["--rtt-csv"])
    if "--graphml" in targets:
        write_graphml(g, targets["--graphml"])
    if "--edges-csv" in targets:
        write_edge_csv(g, targets["--edges-csv"])
    if "--plot" in targets:
        save_png(network_map(g, s), targets["--plot"])
    nearest = rtt.min(axis=1)
    print(f"{len(s.metros)} metros × {len(s.sites)} sites; RTT to the nearest site: median {nearest.median():.1f} ms, "
          f"worst {nearest.max():.1f} ms ({nearest.idxmax()})")
    return 0


@command("plan", "plan a scenario (default: the embedded reference scenario)", flags.plan)
def cmd_plan(args) -> int:
    from optimizer.commands.pipeline import make_plan
    from optimizer.commands.report import write_report
    from optimizer.folder.horizon import is_horizon_folder
    from optimizer.folder.write import write_plan
    from optimizer.results.text import plan_text
    from optimizer.scenario import load_scenario
    from optimizer.solve.parallel import check_scheduler

    progress = (lambda msg: print(msg, file=sys.stderr)) if not args.quiet else None
    inputs = [args.scenario] if args.scenario else []
    # refuse a bad target before any work (a multi-year plan replaces only its own kind of folder)
    folder_target(args.out, HORIZON if is_horizon_folder(args.out) else PLAN, inputs=inputs)
    if args.scheduler:
        check_scheduler(args.scheduler)
    overrides = (args.set or []) + calibration_override(args)
    if args.fleet_from_plan:
        if args.from_plan:
            raise ScenarioError("--fleet-from-plan starts a new plan from a folder's fleet; --from-plan re-plans a "
                                "folder: give one of them", field="--fleet-from-plan")
        from optimizer.commands.fleet_from_plan import fleet_override

        overrides.append(fleet_override(args.fleet_from_plan, args.scenario, overrides))
    replanning = args.max_changes is not None or args.scenario or args.set
    if args.max_changes is not None and not args.from_plan:
        raise ScenarioError("--max-changes limits the changes from a plan; give the plan with --from-plan OLD_DIR",
                            field="--max-changes")
    if args.from_plan and args.robust and replanning:
        raise ScenarioError("--robust does not re-plan from a plan folder's fleet; give --robust or --from-plan",
                            field="--robust")
    if args.from_plan and not replanning:
        from optimizer.commands.pipeline import replan

        plan = replan(args.from_plan, progress=progress, allow_unserved=args.allow_unserved)
    else:
        overrides += [f"churn.max_changes={args.max_changes}"] if args.max_changes is not None else []
        loaded = None
        if args.from_plan is None:
            loaded = load_scenario(args.scenario, overrides)
            if loaded[0].horizon.years > 1:
                return plan_years(args, loaded, progress)
        plan = make_plan(args.scenario, overrides, time_limit_s=args.time_limit, mip_gap=args.mip_gap,
                         threads=args.threads, exact=args.exact, allow_unserved=args.allow_unserved,
                         robust=args.robust, backend=args.backend, progress=progress, effort=args.effort,
                         workers=args.workers, scheduler=args.scheduler, from_plan=args.from_plan, loaded=loaded)
    out = write_plan(plan, args.out, inputs=plan.inputs, extras=() if args.no_report else (write_report,))
    sm = plan.summary
    if args.json:
        print_json({k: v for k, v in sm.items() if k != "steps"})
    else:
        print(plan_text(sm, out))
    if sm["status"] == "time_limit":
        return 4
    return 0


@command("sweep", "plan a scenario over ranges of its inputs", flags.sweep)
def cmd_sweep(args) -> int:
    from optimizer.commands.sweep import parse_vary, sweep, sweep_text
    from optimizer.solve.parallel import check_scheduler

    vary = parse_vary(args.vary or [])
    if not vary:
        raise ScenarioError("give at least one --vary KEY=V1,V2,…", field="--vary")
    if args.scheduler:
        check_scheduler(args.scheduler)
    table = sweep(args.scenario, vary, "one-at-a-time" if args.one_at_a_time else "grid", executor=args.executor,
                  workers=args.workers, scheduler=args.scheduler, out=args.out, reuse=args.reuse,
                  time_limit_s=args.time_limit, mip_gap=args.mip_gap, progress=not args.quiet,
                  effort=args.effort or "first")
    print(sweep_text(table, vary, args.out))
    return 0


@command("compare", "plan folders side by side", flags.compare)
def cmd_compare(args) -> int:
    from optimizer.commands.compare import compare, comparison_text, write_comparison
    from optimizer.commands.compare_fleet import compare_running, is_fleet_folder
    from optimizer.commands.report.compare_page import write_compare_report
    from optimizer.folder.horizon import year_folders

    args.plans = [str(d) for p in args.plans for d in year_folders(p)]  # a multi-year plan: each of its years
    if len(args.plans) < 2:
        raise ScenarioError("give at least two plan folders to compare")
    if any(is_fleet_folder(d) for d in args.plans):
        return print(compare_running(args.plans, args.out)) or 0
    for d in args.plans:
        if not (Path(d) / "summary.json").is_file():
            raise ScenarioError("not a plan folder (no summary.json); expected a folder written by fleetplan plan",
                                field=d)
    if args.out is not None:
        folder_target(args.out, COMPARISON, inputs=args.plans)
    cmp = compare(args.plans)
    if args.out:
        write_compare_report(cmp, write_comparison(cmp, args.out))
    print(comparison_text(cmp))
    if args.out:
        print(f"written: {Path(args.out) / 'compare.csv'}, routing_changes.csv, compare.png, compare.html")
    return 0


@command("report", "write report.html for a plan folder", flags.plan_dir)
def cmd_report(args) -> int:
    from optimizer.commands.report import write_report
    from optimizer.commands.report.horizon import write_horizon_report
    from optimizer.folder.horizon import is_horizon_folder, read_horizon, year_folders

    if is_horizon_folder(args.plan_dir):  # a multi-year plan: each year's report, then the years'
        read_horizon(args.plan_dir)  # a damaged folder is refused before anything is written
        for d in year_folders(args.plan_dir):
            plan_folder_to_update(d)
            print(f"written: {write_report(d)}")
        print(f"written: {write_horizon_report(args.plan_dir)}")
        return 0
    plan_folder_to_update(args.plan_dir)
    print(f"written: {write_report(args.plan_dir)}")
    return 0


@command("verify", "simulate a plan request by request: measured vs predicted p99s", flags.verify)
def cmd_verify(args) -> int:
    from optimizer.folder.horizon import is_horizon_folder, year_folders

    if is_horizon_folder(args.plan_dir) and not args.trace:  # a multi-year plan: each year's plan
        return max(verify_one(args, d) for d in year_folders(args.plan_dir))
    plan_folder_to_update(args.plan_dir)
    if args.trace:
        return verify_trace(args)
    return verify_one(args, args.plan_dir)


# ---------------------------------------------------------------------------- demand from request logs


@command("demand", "demand, lengths and burstiness from request logs → a scenario's demand table", flags.demand)
def cmd_demand(args) -> int:
    from optimizer.base.sources import read_yaml
    from optimizer.commands.traces.derive import derive
    from optimizer.commands.traces.table import check_labels
    from optimizer.commands.traces.text import demand_text
    from optimizer.commands.traces.write import write_demand
    from optimizer.scenario import load_scenario
    from optimizer.scenario.trace_spec import section_specs

    s, raw = load_scenario(args.scenario)
    if args.out is not None:  # refuse a bad target before reading any log
        folder_target(args.out, DEMAND)
    if args.from_trace:
        specs = trace_specs(args.from_trace, args.columns, args.tz, args.metro, args.workload)
    elif args.scenario and "traces" in (doc := read_yaml(raw.path)):
        specs = section_specs(doc["traces"], raw.path)
    else:
        raise ScenarioError("give the request logs: --from-trace [WORKLOAD=]FILE …, or a scenario with a traces "
                            "section", field="--from-trace")
    derived = derive(specs, DAYS_PER_YEAR / len(s.horizon.periods), args.reuse_window)
    for w in derived.warnings:
        print(f"warning: {w}", file=sys.stderr)
    out = None
    if args.out:
        check_labels(derived, s)
        out = write_demand(derived, s, specs, args.out, fill=args.fill)
    if args.json:
        print_json(derived.as_dict())
        return 0
    print(demand_text(derived, out))
    return 0


@command("stress", "evaluate a fixed plan under perturbed estimates or a lost site", flags.stress)
def cmd_stress(args) -> int:
    from optimizer.commands.stress import stress, stress_text, write_stress

    plan_folder_to_update(args.plan_dir)
    result = stress(args.plan_dir, args.perturb or [], demand_factor=args.demand, rtt_factor=args.rtt,
                    lose_site=args.lose_site, within_band=args.within_band, verify=args.verify,
                    requests=args.requests, seed=args.seed, spot_availability=args.spot_availability,
                    progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    write_stress(result, args.plan_dir)
    if args.json:
        print_json(result.summary)
    else:
        print(stress_text(result, args.plan_dir))
    return 0 if result.summary["all_objectives_met"] else 7


@command("operate", "operate a plan's commitment hour by hour through its 8,760-hour year", flags.operate)
def cmd_operate(args) -> int:
    from optimizer.commands.operate import operate_plan, operations_text, write_operations

    plan_folder_to_update(args.plan_dir)
    ops = operate_plan(args.plan_dir, noise_sigma=args.noise_sigma, seed=args.seed,
                       progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    write_operations(ops, args.plan_dir)
    sm = ops.summary
    ok = sm["hours_with_unserved"] == 0 and sm["hours_short_of_gpus"] == 0 and sm["hours_over_power"] == 0
    if args.json:
        print_json(sm)
    else:
        print(operations_text(ops, args.plan_dir))
    return 0 if ok else 7


@command("calibrate", "fit the serving parameters to measured tables; write a calibration file", flags.calibrate)
def cmd_calibrate(args) -> int:
    from optimizer.commands.calibrate.report import run, text

    context = {k: getattr(args, k) for k in ("model", "accelerator", "tp", "gpus", "engine", "version", "weight_dtype",
                                              "prompt_tokens", "output_tokens")}
    # both targets checked before any table is read: a calibration file replaces only one
    out = file_target(args.out, "calibration", flag="--out", inputs=args.tables)
    plot = file_target(args.plot, "png", flag="--plot", inputs=args.tables) if args.plot is not None else None
    if plot == out:
        raise ScenarioError("--out and --plot name the same file; expected two", Origin(f"--plot {shorten(args.plot)}"))
    summary = run(args.tables, out, holdout=args.holdout, seed=args.seed, context=context, plot=plot)
    for w in summary["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        print_json({k: summary[k] for k in ("calibration_file", "parameters", "warnings", "fit", "holdout")})
    else:
        print(text(summary))
    return 0


@command("scenarios", "list the shipped example scenarios", flags.nothing)
def cmd_scenarios(args) -> int:
    from optimizer.base.sources import read_yaml
    from optimizer.scenario import DATA_DIR

    for path in sorted((DATA_DIR / "scenarios").glob("*.yaml")):
        doc = read_yaml(path)
        print(f"{path.stem:24s} {' '.join(str(doc.get('description', '')).split())[:100]}")
    return 0


@command("export", "a plan as the manifests of a serving stack, with autoscaler bounds per hour", flags.export)
def cmd_export(args) -> int:
    from optimizer.commands.export import FORMATS, export_plan
    from optimizer.commands.export.text import export_text
    from optimizer.commands.export.write import target

    if args.to not in FORMATS:
        raise ScenarioError(f"expected one of {', '.join(FORMATS)}, got {args.to!r}", Origin("--to"))
    inputs = [args.plan_dir] + ([args.from_plan] if args.from_plan else [])
    target(args.out, inputs)  # refuse a bad target before any work
    out, ctx = export_plan(args.plan_dir, args.to, args.out, slice_text=args.slice, model_repos=dict(args.model_repo),
                           infra=dict(args.infra), strict=args.strict, from_plan=args.from_plan)
    for w in ctx.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(export_text(args.to, ctx, out, args.from_plan))
    return 0


@command("import-deployment", "manifests of a serving stack read back into a plan-shaped fleet", flags.import_deployment)
def cmd_import_deployment(args) -> int:
    from optimizer.commands.export import importing
    from optimizer.commands.export.text import import_text

    importing.target(args.out, args.manifests)
    tables = importing.fleet_tables(importing.read_manifests(args.manifests))
    meta, recorded = importing.fleet_meta(args.manifests)
    if args.against:
        from optimizer.commands.export.fleet import parse_slice, read_fleet

        fleet = read_fleet(args.against)
        t = parse_slice(args.slice, fleet) if args.slice else \
            parse_slice(recorded.pop(), fleet) if len(recorded) == 1 else fleet.busiest_slice()
        tables["against"] = importing.against_plan(tables["pools"], fleet, t)
        meta.update(plan=str(args.against), slice="/".join(map(str, t)))
    out = importing.write_fleet(tables, meta, args.out)
    print(import_text(tables, meta, out, args.against))
    return 0


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fleetplan", description="Plan LLM-inference fleets at the lowest cost that meets p99 latency objectives.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (what, handler, arguments) in COMMANDS.items():
        parser = sub.add_parser(name, help=what)
        arguments(parser)
        parser.set_defaults(func=handler)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a bad flag (one line printed, code 2), or --help (code 0)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        with terminate_as_interrupt():
            return int(args.func(args) or 0)
    except FleetplanError as exc:
        print(f"fleetplan: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("fleetplan: terminated (SIGTERM); nothing half-written was left behind", file=sys.stderr)
        return 143
    except BrokenPipeError:  # `fleetplan … | head` closed the pipe after the files were written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("fleetplan: interrupted; nothing half-written was left behind", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
