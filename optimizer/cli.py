"""`fleetplan …` — the command line. Each command parses its arguments and calls the library;
errors meant for the planner print one message and exit with the documented code
(`optimizer.errors`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from optimizer.errors import FleetplanError, ScenarioError


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


def cmd_curves(args) -> int:
    from optimizer.operating import operating_table
    from optimizer.errors import unknown_id_message
    from optimizer.scenario import load_scenario

    s, _ = load_scenario(args.scenario, _calibration_override(args))
    for kind, value, table in (("model", args.model, s.models), ("accelerator", args.gpu, s.accelerators)):
        if value not in table:
            raise ScenarioError(unknown_id_message(kind, value, table), field=f"--{'model' if kind == 'model' else 'gpu'}")
    model, gpu = s.models[args.model], s.accelerators[args.gpu]
    if args.dtype == "fp8" and gpu.fp8_dense_tflops is None:
        raise ScenarioError(f"{gpu.id} has no FP8 support; use --dtype bf16", field="--dtype")
    price = args.price_usd_per_gpu_hour
    if price is None:
        if args.gpu not in s.prices:
            raise ScenarioError(f"no price for {args.gpu}; pass --price-usd-per-gpu-hour", field="--price-usd-per-gpu-hour")
        price = s.prices[args.gpu].ondemand_usd_per_gpu_hour
    out = operating_table(model, gpu, s.serving, args.isl, args.osl, args.itl_ms, price,
                          args.dtype, args.kv_dtype or args.dtype, args.ttft_ms)
    if args.plot:
        _plot_curves(out, model, gpu, s.serving, args)
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


def _plot_curves(out, model, gpu, serving, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from optimizer.operating import batch_sweep

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
    fig.savefig(args.plot, dpi=110)
    plt.close(fig)


def cmd_validate(args) -> int:
    from optimizer.checks import preflight
    from optimizer.scenario import load_scenario

    s, raw = load_scenario(args.scenario)
    preflight(s, raw)
    for w in raw.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{raw.path}: valid — {len(s.metros)} metros, {len(s.sites)} sites, {len(s.accelerators)} accelerators, "
          f"{len(s.workloads)} workloads, {len(s.horizon.periods)} periods × {len(s.horizon.day_types)} day type(s) × "
          f"{len(s.horizon.hours)} h")
    return 0


def cmd_budget(args) -> int:
    from optimizer.budget import best_waterfall
    from optimizer.configs import kv_bytes_per_token, workload_configs
    from optimizer.network import build_graph, rtt_matrix
    from optimizer.errors import unknown_id_message
    from optimizer.scenario import load_scenario

    s, raw = load_scenario(args.scenario, _calibration_override(args))
    for kind, value, table in (("metro", args.metro, s.metros), ("site", args.site, s.sites),
                               ("workload", args.workload, s.workloads)):
        if value not in table:
            raise ScenarioError(unknown_id_message(kind, value, table), field=f"--{kind}")
    gpus = [args.gpu] if args.gpu else sorted(s.supply.get(args.site, {}))
    for g in gpus:
        if g not in s.accelerators:
            raise ScenarioError(unknown_id_message("accelerator", g, s.accelerators), field="--gpu")
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s).loc[args.metro, args.site]
    w = s.workloads[args.workload]
    m = s.models[w.model]
    configs = [c for g in gpus for c in workload_configs(w, m, s.accelerators[g], s.serving)]
    best = best_waterfall(w, s, float(rtt), configs, kv_bytes_per_token(w, m))
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
                       ("prefill_ms", "prefill of the p99 prompt"), ("kv_transfer_ms", "KV transfer"),
                       ("first_token_ms", "first token (join + step)")):
        spent += out[key]
        print(f"  {label:32s} {out[key]:8.1f} ms   (cumulative {spent:7.1f})")
    print(f"  {'left for queueing':32s} {out['queue_budget_ms']:8.1f} ms   of a {w.ttft_p99_ms:g} ms p99 objective"
          + ("" if best.feasible else "  → INFEASIBLE"))
    return 0


def cmd_network(args) -> int:
    from optimizer.network import build_graph, plot_map, rtt_long, rtt_matrix, write_edge_csv, write_graphml
    from optimizer.scenario import load_scenario

    s, raw = load_scenario(args.scenario)
    g = build_graph(s, raw.path.parent)
    rtt = rtt_matrix(g, s)
    if args.rtt_csv:
        _atomic_write_csv(rtt_long(rtt), Path(args.rtt_csv))
    if args.graphml:
        write_graphml(g, Path(args.graphml))
    if args.edges_csv:
        write_edge_csv(g, Path(args.edges_csv))
    if args.plot:
        plot_map(g, s, Path(args.plot))
    nearest = rtt.min(axis=1)
    print(f"{len(s.metros)} metros × {len(s.sites)} sites; RTT to the nearest site: median {nearest.median():.1f} ms, "
          f"worst {nearest.max():.1f} ms ({nearest.idxmax()})")
    return 0


def _atomic_write_csv(df, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)


def cmd_plan(args) -> int:
    from optimizer.plan import make_plan, write_plan

    progress = (lambda msg: print(msg, file=sys.stderr)) if not args.quiet else None
    if args.from_plan:
        if args.scenario or args.set:
            raise ScenarioError("--from-plan replans a plan folder as recorded; give no SCENARIO or --set with it")
        from optimizer.plan import replan

        plan = replan(args.from_plan, progress=progress, allow_unserved=args.allow_unserved)
    else:
        plan = make_plan(args.scenario, (args.set or []) + _calibration_override(args), time_limit_s=args.time_limit, mip_gap=args.mip_gap,
                         threads=args.threads, exact=args.exact, allow_unserved=args.allow_unserved,
                         robust=args.robust, backend=args.backend, progress=progress)
    out = write_plan(plan, args.out, report=not args.no_report)
    sm = plan.summary
    if args.json:
        _print_json({k: v for k, v in sm.items() if k != "steps"})
    else:
        print(_plan_text(sm, out))
    if sm["status"] == "time_limit":
        return 4
    return 0


def _plan_text(sm: dict, out) -> str:
    lines = [
        f"plan of '{sm['scenario']}' written to {out}",
        f"  status {sm['status']}: cost ${sm['total_cost_usd']:,.0f}/year"
        + (f" + ${sm['unserved_penalty_usd']:,.0f} penalty for unserved demand" if sm["unserved_penalty_usd"] else "")
        + f", proven bound ${sm['best_bound_usd']:,.0f}, gap {100 * sm['mip_gap']:.2f} % "
        f"(target {100 * sm['mip_gap_target']:.2f} %)" + ("" if sm["proven_within_gap"] else " — NOT proven within the target"),
        f"  ${sm['cost_per_million_tokens_usd']:.3f} per million goodput output tokens; "
        f"{sm['goodput_tokens_per_s_avg']:,.0f} tok/s on average, {sm['goodput_tokens_per_s_peak']:,.0f} at peak; "
        f"{sm['tokens_per_s_per_mw']:,.0f} tok/s per MW",
        f"  reserved share of GPU-hours {100 * sm['reserved_share_of_gpu_hours']:.0f} %, average utilisation "
        f"{100 * sm['average_utilization']:.0f} %, unserved {100 * sm['unserved_fraction']:.3f} %",
        "  GPUs at peak: " + ", ".join(f"{g} {n:,}" for g, n in sm["gpus_by_type_peak"].items()),
    ]
    if sm.get("robust"):
        r = sm["robust"]
        lines.append(f"  robust plan (demand ×{r['demand_factor']:g}, efficiencies ×{r['efficiency_derate']:g}, "
                     f"RTT +{r['rtt_margin_ms']:g} ms): {100 * r['price_of_robustness']:.1f} % above the nominal "
                     f"plan's ${r['nominal_cost_usd']:,.0f}")
    if sm.get("baseline_cost_usd"):
        lines.append(f"  hand-made baseline ${sm['baseline_cost_usd']:,.0f}/year: the plan saves "
                     f"{100 * sm['savings_vs_baseline']:.1f} %")
    for k, v in sm["cost_per_million_tokens_usd_by_workload"].items():
        if v is not None:
            lines.append(f"    {k:20s} ${v:8.3f} per million output tokens")
    if sm["repair_violations"]:
        lines.append("  WARNING: " + "; ".join(sm["repair_violations"][:5]))
    lines.append(f"  solved in {sm['solve_seconds']:.1f} s (build {sm['build_seconds']:.1f} s, hand-off {sm['handoff_seconds']:.1f} s)")
    return "\n".join(lines)


def cmd_sweep(args) -> int:
    from optimizer.sweep import parse_vary, sweep

    vary = parse_vary(args.vary or [])
    if not vary:
        raise ScenarioError("give at least one --vary KEY=V1,V2,…", field="--vary")
    table = sweep(args.scenario, vary, "one-at-a-time" if args.one_at_a_time else "grid", executor=args.executor,
                  workers=args.workers, scheduler=args.scheduler, out=args.out, reuse=args.reuse,
                  time_limit_s=args.time_limit, mip_gap=args.mip_gap, progress=not args.quiet)
    cols = ["run_id", *vary, "status", "total_cost_usd", "cost_per_million_tokens_usd", "mip_gap", "wall_seconds"]
    shown = table[[c for c in cols if c in table]]
    print(shown.to_string(index=False, float_format=lambda x: f"{x:,.4g}"))
    print(f"{len(table)} runs → {Path(args.out) / 'sweep.csv'} and sweep.parquet"
          + (f", tornado chart {Path(args.out) / 'tornado.png'}" if args.one_at_a_time else ""))
    return 0


def cmd_compare(args) -> int:
    from optimizer.compare import compare, comparison_text, write_comparison

    if len(args.plans) < 2:
        raise ScenarioError("give at least two plan folders to compare")
    for d in args.plans:
        if not (Path(d) / "summary.json").exists():
            raise ScenarioError("not a plan folder (no summary.json)", field=d)
    cmp = compare(args.plans)
    print(comparison_text(cmp))
    if args.out:
        write_comparison(cmp, args.out)
        print(f"written: {Path(args.out) / 'compare.csv'}, routing_changes.csv, compare.png")
    return 0


def cmd_report(args) -> int:
    from optimizer.report import write_report

    if not (Path(args.plan_dir) / "summary.json").exists():
        raise ScenarioError("not a plan folder (no summary.json)", field=args.plan_dir)
    print(f"written: {write_report(args.plan_dir)}")
    return 0


def cmd_verify(args) -> int:
    import pandas as pd

    from optimizer.verify import record_verification, verify_plan, write_verify

    if not (Path(args.plan_dir) / "summary.json").exists():
        raise ScenarioError("not a plan folder (no summary.json)", field=args.plan_dir)
    slices = args.slices
    if slices not in ("peak", "all"):
        slices = [x.strip() for x in slices.split(",") if x.strip()]
    progress = None if args.json else (lambda m: print(m, file=sys.stderr))
    result = verify_plan(args.plan_dir, slices=slices, requests=args.requests, seed=args.seed, progress=progress,
                         prefill_batch_tokens=args.prefill_batch_tokens)
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


def cmd_stress(args) -> int:
    from optimizer.stress import stress, write_stress

    if not (Path(args.plan_dir) / "summary.json").exists():
        raise ScenarioError("not a plan folder (no summary.json)", field=args.plan_dir)
    factor = {}
    for name in ("demand", "rtt"):
        text = getattr(args, name)
        try:
            factor[name] = float(text.lstrip("×x*")) if text else 1.0
        except ValueError:
            raise ScenarioError(f"expected a factor like ×1.3, got {text!r}", field=f"--{name}") from None
    result = stress(args.plan_dir, args.perturb or [], demand_factor=factor["demand"], rtt_factor=factor["rtt"],
                    lose_site=args.lose_site, verify=args.verify, requests=args.requests, seed=args.seed,
                    progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    write_stress(result, args.plan_dir)
    if args.json:
        _print_json(result.summary)
    else:
        print(result.table.to_string(index=False, float_format=lambda x: f"{x:,.4g}"))
        print(f"written: {Path(args.plan_dir) / 'stress.csv'}")
    return 0 if result.summary["all_objectives_met"] else 7


def cmd_operate(args) -> int:
    from optimizer.operate import operate_plan, write_operations

    if not (Path(args.plan_dir) / "summary.json").exists():
        raise ScenarioError("not a plan folder (no summary.json)", field=args.plan_dir)
    if not 0 <= args.noise_sigma <= 2:
        raise ScenarioError(f"expected a log-normal σ between 0 and 2, got {args.noise_sigma}", field="--noise-sigma")
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
    the one the scenario names)."""
    return [f"calibration={args.calibration}"] if getattr(args, "calibration", None) else []


def cmd_calibrate(args) -> int:
    from optimizer.calibration.report import run, text

    if not 0 <= args.holdout < 1:
        raise ScenarioError(f"expected a fraction in [0, 1), got {args.holdout}", field="--holdout")
    context = {k: getattr(args, k) for k in ("model", "accelerator", "tp", "gpus", "engine", "version", "weight_dtype",
                                              "prompt_tokens", "output_tokens")}
    summary = run(args.tables, args.out, holdout=args.holdout, seed=args.seed, context=context, plot=args.plot)
    if args.json:
        _print_json({k: summary[k] for k in ("calibration_file", "parameters", "fit", "holdout")})
    else:
        print(text(summary))
    return 0


def cmd_scenarios(args) -> int:
    from optimizer.scenario import DATA_DIR, read_yaml

    for path in sorted((DATA_DIR / "scenarios").glob("*.yaml")):
        doc = read_yaml(path)
        print(f"{path.stem:24s} {' '.join(str(doc.get('description', '')).split())[:100]}")
    return 0


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleetplan", description="Plan LLM-inference fleets at the lowest cost that meets p99 latency objectives.")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("curves", help="operating table of a model on an accelerator")
    c.add_argument("--model", required=True)
    c.add_argument("--gpu", required=True)
    c.add_argument("--isl", type=float, default=2000, help="prompt tokens (default 2000)")
    c.add_argument("--osl", type=float, default=500, help="output tokens (default 500)")
    c.add_argument("--itl-ms", type=float, default=50.0, help="p99 inter-token objective (default 50)")
    c.add_argument("--ttft-ms", type=float, help="p99 TTFT objective, to show the headroom after prefill")
    c.add_argument("--price-usd-per-gpu-hour", type=float, help="default: the scenario's on-demand price")
    c.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16", help="weight precision")
    c.add_argument("--kv-dtype", choices=["bf16", "fp8"], help="KV precision (default: as weights)")
    c.add_argument("--scenario", help="take catalogue and serving settings from this scenario (default: reference)")
    c.add_argument("--plot", help="PNG of tokens/s and step time vs batch, knee marked")
    c.add_argument("--calibration", metavar="FILE", help="calibration file (fleetplan calibrate) to use")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_curves)

    v = sub.add_parser("validate", help="check a scenario file; exit 0 or 2 with the first error")
    v.add_argument("scenario")
    v.set_defaults(func=cmd_validate)

    b = sub.add_parser("budget", help="TTFT budget waterfall for a metro, a site and a workload")
    b.add_argument("--metro", required=True)
    b.add_argument("--site", required=True)
    b.add_argument("--workload", required=True)
    b.add_argument("--gpu", help="accelerator for prefill and decode (default: the best the site offers)")
    b.add_argument("--scenario")
    b.add_argument("--calibration", metavar="FILE", help="calibration file (fleetplan calibrate) to use")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_budget)

    n = sub.add_parser("network", help="the latency graph: RTT table, map, exports")
    n.add_argument("scenario", nargs="?")
    n.add_argument("--rtt-csv", help="write from,to,rtt_ms for every metro and site")
    n.add_argument("--plot", help="PNG map of metros, sites and links")
    n.add_argument("--graphml", help="export the graph as GraphML")
    n.add_argument("--edges-csv", help="export the graph as from,to,one_way_ms")
    n.set_defaults(func=cmd_network)

    pl = sub.add_parser("plan", help="plan a scenario (default: the embedded reference scenario)")
    pl.add_argument("scenario", nargs="?")
    pl.add_argument("--out", default="plan", help="plan folder to write (default ./plan)")
    pl.add_argument("--time-limit", type=float, help="seconds for the whole solve (default: the scenario's policy)")
    pl.add_argument("--mip-gap", type=float, help="target relative gap (default: the scenario's policy)")
    pl.add_argument("--threads", type=int)
    pl.add_argument("--backend", choices=["highs", "pyomo"], default="highs",
                    help="hand the program to HiGHS directly (default) or through Pyomo's persistent interface")
    pl.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario field by dotted path")
    mode = pl.add_mutually_exclusive_group()
    mode.add_argument("--exact", dest="exact", action="store_const", const=True,
                      help="integer replicas throughout (small cases and checks; default for small scenarios)")
    mode.add_argument("--master", dest="exact", action="store_const", const=False,
                      help="continuous master + whole-plan repair (default for large scenarios)")
    pl.add_argument("--allow-unserved", action="store_true", help="write the plan even if some demand is unserved")
    pl.add_argument("--from-plan", metavar="DIR", help="plan again exactly what a plan folder records")
    pl.add_argument("--no-report", action="store_true", help="do not write report.html")
    pl.add_argument("--robust", action="store_true",
                    help="plan with the scenario's robust margins; report the price of robustness")
    pl.add_argument("--calibration", metavar="FILE", help="calibration file (fleetplan calibrate) to use")
    pl.add_argument("--json", action="store_true")
    pl.add_argument("--quiet", action="store_true", help="no progress lines")
    pl.set_defaults(func=cmd_plan)

    sw = sub.add_parser("sweep", help="plan a scenario over ranges of its inputs")
    sw.add_argument("scenario", nargs="?")
    sw.add_argument("--vary", action="append", metavar="KEY=V1,V2,…",
                    help="dotted scenario path and values: a list, start:stop:step, or multipliers ×0.5,×1,×1.5")
    how = sw.add_mutually_exclusive_group()
    how.add_argument("--grid", action="store_true", help="every combination (default)")
    how.add_argument("--one-at-a-time", action="store_true", help="one key at a time, with a tornado chart")
    sw.add_argument("--executor", choices=["local", "dask"], default="local")
    sw.add_argument("--workers", type=int, default=2)
    sw.add_argument("--scheduler", help="address of a running Dask scheduler (default: a local cluster)")
    sw.add_argument("--out", default="sweep", help="output folder (default ./sweep); re-running skips finished runs")
    sw.add_argument("--reuse", action="store_true",
                    help="refresh a built model between runs of the same structure (faster; equal within the gap)")
    sw.add_argument("--time-limit", type=float)
    sw.add_argument("--mip-gap", type=float)
    sw.add_argument("--quiet", action="store_true")
    sw.set_defaults(func=cmd_sweep)

    cp = sub.add_parser("compare", help="plan folders side by side")
    cp.add_argument("plans", nargs="+")
    cp.add_argument("--out", help="folder for compare.csv, routing_changes.csv and compare.png")
    cp.set_defaults(func=cmd_compare)

    rp = sub.add_parser("report", help="write report.html for a plan folder")
    rp.add_argument("plan_dir")
    rp.set_defaults(func=cmd_report)

    vf = sub.add_parser("verify", help="simulate a plan request by request: measured vs predicted p99s")
    vf.add_argument("plan_dir")
    vf.add_argument("--slices", default="peak",
                    help="peak (the busiest hour of each period), all, or PERIOD/DAYTYPE/HOUR,… (default peak)")
    vf.add_argument("--requests", type=int, default=20000, help="simulated requests per (site, workload, slice)")
    vf.add_argument("--seed", type=int, default=0)
    vf.add_argument("--prefill-batch-tokens", type=int, default=0, metavar="N",
                    help="what-if: prefill servers batch waiting prompts up to N new tokens (default 0: one "
                         "prompt at a time, as the plan sized them)")
    vf.add_argument("--json", action="store_true")
    vf.set_defaults(func=cmd_verify)

    st = sub.add_parser("stress", help="evaluate a fixed plan under perturbed estimates or a lost site")
    st.add_argument("plan_dir")
    st.add_argument("--perturb", action="append", metavar="KEY=VALUE",
                    help="scenario path and value or ×factor; * stands for every row (workloads.*.isl_mean_tokens=×1.3)")
    st.add_argument("--demand", metavar="×F", help="scale every routed flow")
    st.add_argument("--rtt", metavar="×F", help="scale every round trip")
    st.add_argument("--lose-site", metavar="ID", help="the site goes dark; its traffic moves to the nearest pools that can take it")
    st.add_argument("--verify", action="store_true", help="also simulate the perturbed plan")
    st.add_argument("--requests", type=int, default=2000, help="simulated requests per group with --verify")
    st.add_argument("--seed", type=int, default=0)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_stress)

    op = sub.add_parser("operate", help="operate a plan's commitment hour by hour through its 8,760-hour year")
    op.add_argument("plan_dir")
    op.add_argument("--noise-sigma", type=float, default=0.0, metavar="σ",
                    help="day-to-day demand variation per workload, log-normal σ (0: none)")
    op.add_argument("--seed", type=int, default=0)
    op.add_argument("--json", action="store_true")
    op.set_defaults(func=cmd_operate)

    sc = sub.add_parser("scenarios", help="list the shipped example scenarios")
    sc.set_defaults(func=cmd_scenarios)

    ca = sub.add_parser("calibrate", help="fit the serving parameters to measured tables; write a calibration file")
    ca.add_argument("tables", nargs="+", metavar="TABLE",
                    help="benchmark CSV, vLLM/SGLang serving-benchmark JSON, or mlperf_log_summary.txt")
    ca.add_argument("--out", required=True, help="calibration file to write (.yaml/.yml: YAML, else JSON)")
    ca.add_argument("--holdout", type=float, default=0.2, help="share of each kind's points held out (default 0.2)")
    ca.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    ca.add_argument("--plot", metavar="PNG", help="predicted-vs-measured plot")
    ca.add_argument("--json", action="store_true", help="parameters and per-kind errors as JSON")
    for flag in ("model", "accelerator", "engine", "version", "weight-dtype"):
        ca.add_argument(f"--{flag}", help=f"{flag} of JSON/MLPerf results that do not say it")
    for flag in ("tp", "gpus", "prompt-tokens", "output-tokens"):
        ca.add_argument(f"--{flag}", type=int, help=f"{flag} of JSON/MLPerf results that do not say it")
    ca.set_defaults(func=cmd_calibrate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FleetplanError as exc:
        print(f"fleetplan: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fleetplan: interrupted; nothing half-written was left behind", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
