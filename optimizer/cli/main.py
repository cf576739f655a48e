"""`fleetplan …` — the command line. Each command parses its arguments and calls the library;
errors meant for the planner print one message and exit with the documented code
(`optimizer.base.errors`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pydantic import ValidationError

from optimizer.base.errors import FleetplanError, Origin, ScenarioError, shorten
from optimizer.base.outputs import (
    COMPARISON,
    DEMAND,
    PLAN,
    Terminated,
    file_target,
    folder_target,
    plan_folder_to_update,
    save_png,
    terminate_as_interrupt,
)
from optimizer.cli import arguments as flags
from optimizer.cli.arguments import Parser


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=_json_default))


def _json_default(x):
    if hasattr(x, "item"):
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def _table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Fixed-width text table; columns are (key, header, format)."""
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append([("-" if row.get(k) is None else format(row[k], f)) for k, _, f in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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

    s, _ = _with_catalogue_rows(args, accelerators=[args.gpu], models=[args.model])
    for kind, value, table in (("model", args.model, "models"), ("accelerator", args.gpu, "accelerators")):
        if value not in getattr(s, table):
            known = {*getattr(s, table), *_catalogue_ids(table)}
            raise ScenarioError(unknown_id_message(kind, value, known), field=f"--{'model' if kind == 'model' else 'gpu'}")
    model, gpu = s.models[args.model], s.accelerators[args.gpu]
    if args.dtype == "fp8" and gpu.fp8_dense_tflops is None:
        raise ScenarioError(f"{gpu.id} has no FP8 support; use --dtype bf16", field="--dtype")
    price = args.price_usd_per_gpu_hour
    if price is None:
        if args.gpu not in s.prices:
            raise ScenarioError(f"no price for {args.gpu}; pass --price-usd-per-gpu-hour", field="--price-usd-per-gpu-hour")
        price = s.prices[args.gpu].ondemand_usd_per_gpu_hour
    try:
        out = operating_table(model, gpu, s.serving, args.isl, args.osl, args.itl_ms, price,
                              args.dtype, args.kv_dtype or args.dtype, args.ttft_ms)
    except ValidationError as exc:  # the workload rules of the YAML, applied to the flags
        from optimizer.scenario import Workload, explain

        err = exc.errors()[0]
        flag = CURVE_FLAGS.get(str(err["loc"][0]) if err["loc"] else "", "--isl")
        raise ScenarioError(explain(err, Workload), Origin(flag)) from None
    if args.plot:
        _plot_curves(out, model, gpu, s.serving, args, file_target(args.plot, "png", flag="--plot"))
    if args.json:
        _print_json(out)
        return 0
    print(f"{model.id} on {gpu.id} ({args.dtype} weights, {args.kv_dtype or args.dtype} KV): "
          f"KV {out['kv_bytes_per_token']:,.0f} B/token; prompt {args.isl:g}, output {args.osl:g} tokens; "
          f"ITL objective {args.itl_ms:g} ms; ${price:g}/GPU-h")
    if not out["configs"]:
        print(f"the weights of {model.id} do not fit {gpu.id} at any allowed parallel degree")
        return 0
    print(_table(out["configs"], [
        ("tp", "GPUs", "d"), ("weights_gb_per_gpu", "weights GB/GPU", ".1f"), ("kv_budget_gb", "KV GB", ".1f"),
        ("max_concurrency", "max conc.", "d"), ("prefill_ms", "prefill ms", ".1f"), ("decode_batch", "batch", "d"),
        ("decode_step_ms", "step ms", ".1f"), ("decode_tokens_per_s", "tok/s", ",.0f"),
        ("usd_per_million_output_tokens", "$/M out", ".3f"), ("knee_batch", "knee", "d"),
        ("floor_usd_per_million_output_tokens", "floor $/M", ".3f"),
    ]))
    return 0


def _with_catalogue_rows(args, **wanted):
    """The scenario of --scenario (default: the reference), with the catalogue's rows of any
    accelerator or model the flags name that it does not select (the catalogue has them)."""
    from optimizer.scenario import load_raw, load_scenario

    raw = load_raw(args.scenario)
    overrides = []
    for table, ids in wanted.items():
        missing = [i for i in ids if i and i not in raw.data[table]]
        if missing and all(i in _catalogue_ids(table) for i in missing):
            overrides.append(f"{table}=[{', '.join([*raw.data[table], *missing])}]")
    return load_scenario(args.scenario, overrides + _calibration_override(args))


def _catalogue_ids(table: str) -> set[str]:
    """The ids of a shipped catalogue table (accelerators, models)."""
    from optimizer.scenario import REFERENCE_SCENARIO
    from optimizer.scenario.raw import table_rows

    return set(table_rows(table, None, REFERENCE_SCENARIO))


CURVE_FLAGS = {"isl_mean_tokens": "--isl", "isl_p99_tokens": "--isl", "osl_mean_tokens": "--osl",
               "osl_p99_tokens": "--osl", "itl_p99_ms": "--itl-ms", "ttft_p99_ms": "--ttft-ms"}


def _plot_curves(out, model, gpu, serving, args, target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from optimizer.serving.table import batch_sweep

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in out["configs"]:
        sweep = batch_sweep(model, gpu, serving, row["tp"], args.isl, args.osl, args.dtype, args.kv_dtype or args.dtype)
        line = ax1.plot(sweep["batch"], sweep["tokens_per_s"], label=f"{row['tp']} GPUs")[0]
        ax2.plot(sweep["batch"], sweep["step_ms"], color=line.get_color())
        k = sweep["knee"]
        if k:
            ax1.plot([k], [sweep["tokens_per_s"][k - 1]], "o", color=line.get_color())
            ax2.plot([k], [sweep["step_ms"][k - 1]], "o", color=line.get_color())
    ax2.axhline(args.itl_ms / serving.itl_tail_factor, ls="--", color="0.4", lw=1, label="ITL objective / tail")
    ax1.set(xlabel="decode batch", ylabel="tokens/s per replica", title=f"{model.id} on {gpu.id}: throughput (● knee)")
    ax2.set(xlabel="decode batch", ylabel="step time (ms)", title="decode step time")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, target)


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

    s, raw = _with_catalogue_rows(args, accelerators=[args.gpu] if args.gpu else [])
    for kind, value, table in (("metro", args.metro, s.metros), ("site", args.site, s.sites),
                               ("workload", args.workload, s.workloads)):
        if value not in table:
            raise ScenarioError(unknown_id_message(kind, value, table), field=f"--{kind}")
    gpus = [args.gpu] if args.gpu else sorted(s.supply.get(args.site, {}))
    for g in gpus:
        if g not in s.accelerators:
            known = {*s.accelerators, *_catalogue_ids("accelerators")}
            raise ScenarioError(unknown_id_message("accelerator", g, known), field="--gpu")
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s).loc[args.metro, args.site]
    w = s.workloads[args.workload]
    m = s.models[w.model]
    configs = [c for g in gpus for c in workload_configs(w, m, s.accelerators[g], s.serving)]
    best = best_waterfall(w, s, float(rtt), configs)
    if best is None:
        raise ScenarioError(f"{w.model} cannot be served on {', '.join(gpus)} within the {w.itl_p99_ms:g} ms ITL objective")
    out = {"metro": args.metro, "site": args.site, "gpus": gpus, **best.as_dict()}
    if args.json:
        _print_json(out)
        return 0
    print(f"TTFT budget, {args.workload} from {args.metro} at {args.site} ({best.mode}: {best.prefill_config}"
          + (f" → {best.decode_config}" if best.mode == "disaggregated" else "") + ")")
    spent = 0.0
    for key, label in (("rtt_ms", "network round trip"), ("overhead_ms", "tokenise + safety + admission"),
                       ("prefill_ms", "prefill"), ("kv_transfer_ms", "KV transfer"),
                       ("first_token_ms", "first token (join + step)")):
        spent += out[key]
        print(f"  {label:32s} {out[key]:8.1f} ms   (cumulative {spent:7.1f})")
    print(f"  {'left for queueing':32s} {out['queue_budget_ms']:8.1f} ms   of a {w.ttft_p99_ms:g} ms p99 objective"
          + ("" if best.feasible else "  → INFEASIBLE"))
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
    from optimizer.folder.write import write_plan
    from optimizer.solve.parallel import check_scheduler

    progress = (lambda msg: print(msg, file=sys.stderr)) if not args.quiet else None
    inputs = [args.scenario] if args.scenario else []
    folder_target(args.out, PLAN, inputs=inputs)  # refuse a bad target before any work
    if args.scheduler:
        check_scheduler(args.scheduler)
    if args.from_plan:
        if args.scenario or args.set:
            raise ScenarioError("--from-plan replans a plan folder as recorded; give no SCENARIO or --set with it")
        from optimizer.commands.pipeline import replan

        plan = replan(args.from_plan, progress=progress, allow_unserved=args.allow_unserved)
    else:
        plan = make_plan(args.scenario, (args.set or []) + _calibration_override(args), time_limit_s=args.time_limit, mip_gap=args.mip_gap,
                         threads=args.threads, exact=args.exact, allow_unserved=args.allow_unserved,
                         robust=args.robust, backend=args.backend, progress=progress, effort=args.effort,
                         workers=args.workers, scheduler=args.scheduler)
    out = write_plan(plan, args.out, inputs=plan.inputs, extras=() if args.no_report else (write_report,))
    sm = plan.summary
    if args.json:
        _print_json({k: v for k, v in sm.items() if k != "steps"})
    else:
        print(_plan_text(sm, out))
    if sm["status"] == "time_limit":
        return 4
    return 0


def _or_dash(value, fmt: str) -> str:
    """A figure, or "–" where the plan has none (no tokens served, no power drawn)."""
    return "–" if value is None else fmt.format(value)


def _plan_text(sm: dict, out) -> str:
    lines = [
        f"plan of '{sm['scenario']}' written to {out}",
        f"  cost ${sm['total_cost_usd']:,.0f}/year"
        + (f" + ${sm['unserved_penalty_usd']:,.0f} penalty for unserved demand" if sm["unserved_penalty_usd"] else "")
        + f": {sm['quality']}; best bound ${sm['best_bound_usd']:,.0f} (a better plan could save at most "
        f"${max(sm['objective_usd'] - sm['best_bound_usd'], 0):,.0f}/year)"
        + (" — stopped by the wall clock: this plan may differ on another machine"
           if sm.get("stopped_by_wall_clock") else ""),
        f"  {_or_dash(sm['cost_per_million_tokens_usd'], '${:.3f}')} per million goodput output tokens; "
        f"{sm['goodput_tokens_per_s_avg']:,.0f} tok/s on average, {sm['goodput_tokens_per_s_peak']:,.0f} at peak; "
        f"{_or_dash(sm['tokens_per_s_per_mw'], '{:,.0f}')} tok/s per MW",
        f"  reserved share of GPU-hours {100 * sm['reserved_share_of_gpu_hours']:.0f} %, average utilisation "
        f"{100 * sm['average_utilization']:.0f} %, unserved {100 * sm['unserved_fraction']:.3f} %",
        "  GPUs at peak: " + ", ".join(f"{g} {n:,}" for g, n in sm["gpus_by_type_peak"].items()),
    ]
    if sm.get("robust"):
        r = sm["robust"]
        derate = (f"efficiencies × each accelerator's p90 band of {Path(r['band_source']).name}" if r.get("band")
                  else f"efficiencies ×{r['efficiency_derate']:g}")
        lines.append(f"  robust plan (demand ×{r['demand_factor']:g}, {derate}, "
                     f"RTT +{r['rtt_margin_ms']:g} ms): {100 * r['price_of_robustness']:.1f} % above the nominal "
                     f"plan's ${r['nominal_cost_usd']:,.0f}"
                     + (f", {r['extra_gpus_peak']:+,} GPUs at peak" if r.get("extra_gpus_peak") is not None else ""))
    lines += _baseline_lines(sm)
    for k, v in sm["cost_per_million_tokens_usd_by_workload"].items():
        if v is not None:
            lines.append(f"    {k:20s} ${v:8.3f} per million output tokens")
    if sm["repair_violations"]:
        lines.append("  WARNING: " + "; ".join(sm["repair_violations"][:5]))
    first = f", first whole plan at {sm['first_plan_seconds']:.1f} s" if sm.get("first_plan_seconds") is not None else ""
    lines.append(f"  solved in {sm['solve_seconds']:.1f} s (build {sm['build_seconds']:.1f} s, hand-off "
                 f"{sm['handoff_seconds']:.1f} s{first})")
    return "\n".join(lines)


def _baseline_lines(sm: dict) -> list[str]:
    """The hand-made baseline: where it cannot serve, and the saving where both serve."""
    lines = [f"  the hand-made baseline cannot serve {k}: {why}" for k, why in (sm.get("baseline_cannot_serve") or {}).items()]
    compared = sm.get("baseline_comparison")
    if sm.get("savings_vs_baseline") is not None and compared:
        partly = set(compared["workloads"]) != set(sm["cost_usd_by_workload"])
        scope = f" for {', '.join(compared['workloads'])}" if partly else ""
        lines.append(f"  hand-made baseline ${compared['baseline_cost_usd']:,.0f}/year{scope}: the plan saves "
                     f"{100 * sm['savings_vs_baseline']:.1f} %")
    return lines


@command("sweep", "plan a scenario over ranges of its inputs", flags.sweep)
def cmd_sweep(args) -> int:
    from optimizer.commands.sweep import parse_vary, sweep
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
    cols = ["run_id", *vary, "status", "total_cost_usd", "cost_per_million_tokens_usd", "mip_gap", "wall_seconds"]
    shown = table[[c for c in cols if c in table]]
    print(shown.to_string(index=False, float_format=lambda x: f"{x:,.4g}"))
    print(f"{len(table)} runs → {Path(args.out) / 'sweep.csv'} and sweep.parquet"
          + (f", tornado chart {Path(args.out) / 'tornado.png'}" if (Path(args.out) / "tornado.png").exists() else "")
          + f", report {Path(args.out) / 'sweep.html'}")
    return 0


@command("compare", "plan folders side by side", flags.compare)
def cmd_compare(args) -> int:
    from optimizer.commands.compare import compare, comparison_text, write_comparison
    from optimizer.commands.report.compare_page import write_compare_report

    if len(args.plans) < 2:
        raise ScenarioError("give at least two plan folders to compare")
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

    plan_folder_to_update(args.plan_dir)
    print(f"written: {write_report(args.plan_dir)}")
    return 0


@command("verify", "simulate a plan request by request: measured vs predicted p99s", flags.verify)
def cmd_verify(args) -> int:
    import pandas as pd

    from optimizer.commands.verify import record_verification, verify_plan, write_verify

    plan_folder_to_update(args.plan_dir)
    if args.trace:
        return cmd_verify_trace(args)
    slices = args.slices
    if slices not in ("peak", "all"):
        slices = [x.strip() for x in slices.split(",") if x.strip()]
    progress = None if args.json else (lambda m: print(m, file=sys.stderr))
    result = verify_plan(args.plan_dir, slices=slices, requests=args.requests, seed=args.seed, progress=progress,
                         prefill_batch_tokens=args.prefill_batch_tokens, arrivals=_poisson_source(args))
    write_verify(result, args.plan_dir)
    record_verification(result, args.plan_dir)
    sm = result.summary
    if args.json:
        _print_json(sm)
    else:
        print(result.side_by_side().to_string(index=False, float_format=lambda x: f"{x:,.4g}"))
        if sm.get("token_billing"):
            billing = pd.DataFrame(sm["token_billing"]["by_workload"]).T.rename_axis("workload")
            print(f"\ntoken billing vs GPU-seconds (price list: {sm['token_billing']['provider']}; USD per million "
                  "output tokens):")
            print(billing.to_string(float_format=lambda x: f"{x:,.3g}"))
        print(f"{sm['requests_simulated']:,} requests simulated in {sm['seconds']:.0f} s; TTFT attainment ≥ "
              f"{sm['ttft_attainment_min']:.4f}, ITL attainment ≥ {sm['itl_attainment_min']:.4f}, goodput "
              f"{sm['goodput_fraction']:.4f} → " + ("every objective met" if sm["all_objectives_met"] else "OBJECTIVES MISSED"))
        print(f"written: {Path(args.plan_dir) / 'verify.csv'}")
    return 0 if sm["all_objectives_met"] else 7


# ---------------------------------------------------------------------------- demand from request logs


def _trace_specs(files: list[str], columns: str | None, tz: str | None, metro: str | None, workload: str | None):
    """``[WORKLOAD=]FILE`` arguments and the reading flags → `TraceSpec`s."""
    from optimizer.scenario.trace_spec import TraceSpec, parse_columns

    mapping, fmt = parse_columns(columns)
    specs = []
    for item in files:
        label, sep, path = item.partition("=")
        if not sep or Path(item).exists():
            label, path = workload, item
        specs.append(TraceSpec(Path(path), mapping, fmt, tz or "UTC", metro, label or workload))
    return specs


@command("demand", "demand, lengths and burstiness from request logs → a scenario's demand table", flags.demand)
def cmd_demand(args) -> int:
    from optimizer.base.sources import read_yaml
    from optimizer.commands.traces.derive import derive
    from optimizer.commands.traces.table import check_labels
    from optimizer.commands.traces.write import write_demand
    from optimizer.scenario import load_scenario
    from optimizer.scenario.trace_spec import section_specs

    s, raw = load_scenario(args.scenario)
    if args.out is not None:  # refuse a bad target before reading any log
        folder_target(args.out, DEMAND)
    if args.from_trace:
        specs = _trace_specs(args.from_trace, args.columns, args.tz, args.metro, args.workload)
    elif args.scenario and "traces" in (doc := read_yaml(raw.path)):
        specs = section_specs(doc["traces"], raw.path)
    else:
        raise ScenarioError("give the request logs: --from-trace [WORKLOAD=]FILE …, or a scenario with a traces "
                            "section", field="--from-trace")
    derived = derive(specs, 365 / len(s.horizon.periods))
    for w in derived.warnings:
        print(f"warning: {w}", file=sys.stderr)
    out = None
    if args.out:
        check_labels(derived, s)
        out = write_demand(derived, s, specs, args.out, fill=args.fill)
    if args.json:
        _print_json(derived.as_dict())
        return 0
    print(_table([p.as_dict() for p in derived.pairs], [
        ("metro", "metro", ""), ("workload", "workload", ""), ("requests", "requests", ",d"),
        ("rate_per_s_mean", "req/s", ".3g"), ("isl_mean_tokens", "prompt mean", ",.0f"),
        ("isl_p99_tokens", "prompt p99", ",.0f"), ("osl_mean_tokens", "output mean", ",.0f"),
        ("osl_p99_tokens", "output p99", ",.0f"), ("peak_to_mean_per_minute", "peak/mean 60 s", ".2f"),
        ("peak_to_mean_per_10s", "10 s", ".2f"), ("peak_to_mean_per_second", "1 s", ".1f"),
        ("dispersion_per_minute", "var/mean min", ".1f"),
    ]))
    for p in derived.pairs:
        for note in p.notes:
            print(f"  {p.metro or '-'} / {p.workload or '-'}: {note}")
    if out:
        print(f"written: {out / 'demand.csv'}, workloads.csv, hours.csv, lengths.csv, scenario.yaml, derived.json, "
              "report.html")
    return 0


def _poisson_source(args, scenario=None):
    """verify's Poisson arrivals, with the lengths of ``--lengths FILE`` when given."""
    from optimizer.commands.verify.arrivals import POISSON, Poisson

    if not args.lengths:
        return POISSON
    from optimizer.commands.traces.replay import read_lengths
    from optimizer.folder.read import read_plan, scenario_of

    scenario = scenario or scenario_of(read_plan(args.plan_dir), args.plan_dir)
    return Poisson(read_lengths(args.lengths, scenario))


def _side_by_side_text(table) -> str:
    """Per workload: Poisson / trace figures and the objective, one line each."""
    def pair(row, key, fmt):
        return " / ".join(format(row[f"{key}_{run}"], fmt) for run in ("poisson", "trace"))

    rows = [{"workload": r["workload"], "requests": pair(r, "requests", ",.0f"),
             "ttft": f"{pair(r, 'ttft_p99_ms', ',.0f')} / {r['ttft_p99_ms_objective']:g}",
             "itl": f"{pair(r, 'itl_p99_ms', '.1f')} / {r['itl_p99_ms_objective']:g}",
             "attainment": f"{pair(r, 'ttft_attainment', '.4f')} (≥ {r['slo_attainment']:g})",
             "passes": " / ".join("yes" if r[f"passes_{run}"] else "NO" for run in ("poisson", "trace"))}
            for r in table.to_dict("records")]
    return _table(rows, [("workload", "workload", ""), ("requests", "requests P / T", ""),
                         ("ttft", "p99 TTFT ms P / T / objective", ""), ("itl", "p99 ITL ms P / T / objective", ""),
                         ("attainment", "TTFT attainment P / T", ""), ("passes", "passes P / T", "")])


def cmd_verify_trace(args) -> int:
    """`verify --trace`: the Poisson run and the log's replay of the same plan, side by side."""
    from optimizer.base.outputs import write_csv
    from optimizer.commands.traces.replay import side_by_side, trace_arrivals
    from optimizer.commands.verify import record_verification, verify_plan, write_verify
    from optimizer.folder.read import read_plan, scenario_of

    d = Path(args.plan_dir)
    slices = args.slices if args.slices in ("peak", "all") else [x.strip() for x in args.slices.split(",") if x.strip()]
    s = scenario_of(read_plan(d), d)
    source = trace_arrivals(_trace_specs(args.trace, args.columns, args.tz, None, None), s.workloads, args.trace_scale,
                            jitter_gaps=args.trace_jitter)
    progress = None if args.json else (lambda m: print(m, file=sys.stderr))
    runs = {name: verify_plan(d, slices=slices, requests=args.requests, seed=args.seed, progress=progress,
                              prefill_batch_tokens=args.prefill_batch_tokens, arrivals=arrivals)
            for name, arrivals in (("poisson", _poisson_source(args, s)), ("trace", source))}
    for name, key, result in (("verify", "verification", runs["poisson"]),
                              ("verify_trace", "verification_trace", runs["trace"])):
        write_verify(result, d, name)
        record_verification(result, d, key)
    table = side_by_side(runs["poisson"], runs["trace"])
    write_csv(table, d / "verify_compare.csv", float_format="%.6g")
    met = {name: r.summary["all_objectives_met"] for name, r in runs.items()}
    if args.json:
        _print_json({"poisson": runs["poisson"].summary, "trace": runs["trace"].summary,
                     "by_workload": table.to_dict("records")})
    else:
        print(_side_by_side_text(table))
        for name, r in runs.items():
            sm = r.summary
            print(f"{sm['arrivals']}: {sm['requests_simulated']:,} requests simulated in {sm['seconds']:.0f} s;"
                  f" TTFT attainment ≥ {sm['ttft_attainment_min']:.4f}, ITL attainment ≥ {sm['itl_attainment_min']:.4f}"
                  " → " + ("every objective met" if met[name] else "OBJECTIVES MISSED"))
        print(f"written: {d / 'verify.csv'}, verify_trace.csv, verify_compare.csv")
    return 0 if all(met.values()) else 7


@command("stress", "evaluate a fixed plan under perturbed estimates or a lost site", flags.stress)
def cmd_stress(args) -> int:
    from optimizer.commands.stress import stress, write_stress

    plan_folder_to_update(args.plan_dir)
    result = stress(args.plan_dir, args.perturb or [], demand_factor=args.demand, rtt_factor=args.rtt,
                    lose_site=args.lose_site, within_band=args.within_band, verify=args.verify,
                    requests=args.requests, seed=args.seed,
                    progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    write_stress(result, args.plan_dir)
    if args.json:
        _print_json(result.summary)
    else:
        print(result.table.to_string(index=False, float_format=lambda x: f"{x:,.4g}"))
        print(f"written: {Path(args.plan_dir) / 'stress.csv'}")
    return 0 if result.summary["all_objectives_met"] else 7


@command("operate", "operate a plan's commitment hour by hour through its 8,760-hour year", flags.operate)
def cmd_operate(args) -> int:
    from optimizer.commands.operate import operate_plan, write_operations

    plan_folder_to_update(args.plan_dir)
    ops = operate_plan(args.plan_dir, noise_sigma=args.noise_sigma, seed=args.seed,
                       progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    write_operations(ops, args.plan_dir)
    sm = ops.summary
    ok = sm["hours_with_unserved"] == 0 and sm["hours_short_of_gpus"] == 0 and sm["hours_over_power"] == 0
    if args.json:
        _print_json(sm)
    else:
        print(ops.sites.to_string(index=False, float_format=lambda x: f"{x:,.4g}"))
        print(f"{sm['hours']:,} hours operated in {sm['wall_seconds']:.1f} s: ${sm['total_cost_usd']:,.0f} "
              f"({100 * sm['cost_vs_plan']:+.2f} % against the plan's ${sm['planned_total_cost_usd']:,.0f}); "
              f"on-demand peak {sm['ondemand_nodes_peak']} nodes; hours with unserved demand {sm['hours_with_unserved']}, "
              f"short of GPUs {sm['hours_short_of_gpus']}, over power {sm['hours_over_power']}")
        print(f"written: {Path(args.plan_dir) / 'operations.csv'}")
    return 0 if ok else 7


def _calibration_override(args) -> list[str]:
    """``--calibration FILE`` is the override ``calibration=FILE`` (the file's content replaces
    the one the scenario names), the path checked first so that an error names the flag."""
    from optimizer.scenario.calibration.files import calibration_path

    if getattr(args, "calibration", None) is None:
        return []
    calibration_path(args.calibration, Path.cwd(), Origin(f"--calibration {shorten(args.calibration)}"))
    return [f"calibration={args.calibration}"]


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
        _print_json({k: summary[k] for k in ("calibration_file", "parameters", "warnings", "fit", "holdout")})
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
    from optimizer.commands.export.write import target

    if args.to not in FORMATS:
        raise ScenarioError(f"expected one of {', '.join(FORMATS)}, got {args.to!r}", Origin("--to"))
    inputs = [args.plan_dir] + ([args.from_plan] if args.from_plan else [])
    target(args.out, inputs)  # refuse a bad target before any work
    out, ctx = export_plan(args.plan_dir, args.to, args.out, slice_text=args.slice, model_repos=dict(args.model_repo),
                           infra=dict(args.infra), strict=args.strict, from_plan=args.from_plan)
    for w in ctx.warnings:
        print(f"warning: {w}", file=sys.stderr)
    sites = sorted({p.site for p in ctx.fleet.pools})
    print(f"{args.to} manifests of {len(ctx.fleet.deployments())} deployments at {len(sites)} sites "
          f"(replicas of slice {ctx.slice_text()}; bounds of every hour in each site's bounds.csv) written to {out}"
          + ("; rollout.csv and steps/ hold the rollout" if args.from_plan else ""))
    return 0


@command("import-deployment", "manifests of a serving stack read back into a plan-shaped fleet", flags.import_deployment)
def cmd_import_deployment(args) -> int:
    from optimizer.commands.export import importing

    importing.target(args.out, args.manifests)
    tables = importing.fleet_tables(importing.read_manifests(args.manifests))
    meta = {"manifests": [str(m) for m in args.manifests]}
    if args.against:
        from optimizer.commands.export.fleet import parse_slice, read_fleet

        fleet = read_fleet(args.against)
        recorded = importing.slices_of(args.manifests)
        t = parse_slice(args.slice, fleet) if args.slice else \
            parse_slice(recorded.pop(), fleet) if len(recorded) == 1 else fleet.busiest_slice()
        tables["against"] = importing.against_plan(tables["pools"], fleet, t)
        meta.update(plan=str(args.against), slice="/".join(map(str, t)))
    out = importing.write_fleet(tables, meta, args.out)
    pools = tables["pools"]
    print(f"{len(pools)} pools, {int((pools['replicas'] * pools['gpus_per_replica']).sum()):,} GPUs at "
          f"{pools['site'].nunique()} sites written to {out}")
    if args.against:
        diff = tables["against"]
        print(f"against {args.against} at {meta['slice']}: {int((diff['difference'] != 0).sum())} pools differ "
              f"({int(diff['difference'].clip(lower=0).sum())} replicas more, {int((-diff['difference']).clip(lower=0).sum())} "
              "fewer than planned) — against.csv")
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
