"""The pipeline: a scenario planned into a `Plan` (scenario → pre-flight checks → network →
instance → solve → tables and summary), robustly with margins, or again from a plan folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from threadpoolctl import threadpool_limits

from optimizer.base.errors import (
    InfeasibleError,
    Origin,
    ScenarioError,
    TimeLimitNoPlanError,
)
from optimizer.commands.calibrate import band
from optimizer.folder.read import read_plan, scenario_of
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import Instance, build_instance
from optimizer.instance.checks import preflight, servable_splits
from optimizer.instance.churn import limits_from
from optimizer.instance.kvcache import cache_choice, cache_options, with_kv_cache
from optimizer.instance.prompt_split import candidates, with_split
from optimizer.results import Plan
from optimizer.results.kvcache import kv_cache_summary, served_requests
from optimizer.results.prompt_split import split_summary
from optimizer.results.robust import to_nominal_world
from optimizer.results.summary import plan_summary
from optimizer.results.tables import plan_tables
from optimizer.scenario import (
    RawScenario,
    Scenario,
    apply_overrides,
    load_scenario,
    validate,
)
from optimizer.solve import SolverSettings, solve
from optimizer.solve.diagnosis import diagnose
from optimizer.solve.prompt_split import weigh_options
from optimizer.solve.settings import FIRST_PLAN_STEPS, STEPS

UNSERVED_TOLERANCE = 1e-6


def settings_from(s: Scenario, time_limit_s=None, mip_gap=None, threads=None, exact=None, backend="highs",
                  effort=None, workers=None, scheduler=None) -> SolverSettings:
    """The solve's settings: a flag given here wins over the scenario's policy. The effort
    sets the work (`settings.WORK`): "first" stops at the first whole plan, improved by moves;
    "quick" and "thorough" refine it further. The time limit (flag, then the scenario's, for
    the scenario's own effort) is a wall-clock safety cap, else the effort's cap."""
    effort = effort or s.policy.effort
    if time_limit_s is None and effort == s.policy.effort:
        time_limit_s = s.policy.time_limit_s
    return SolverSettings(
        time_limit_s=time_limit_s,
        mip_gap=mip_gap if mip_gap is not None else s.policy.mip_gap,
        threads=threads if threads is not None else s.policy.threads,
        exact=exact,
        backend=backend,
        steps=FIRST_PLAN_STEPS if effort == "first" else STEPS,
        effort=effort,
        workers=workers,
        scheduler=scheduler,
    )


def make_plan(path=None, overrides=(), *, time_limit_s=None, mip_gap=None, threads=None, exact=None,
              allow_unserved=False, robust=False, backend="highs", progress=None, effort=None, workers=None,
              scheduler=None, from_plan=None, loaded: tuple[Scenario, RawScenario] | None = None) -> Plan:
    """Plan a scenario file (default: the reference scenario) with ``--set`` overrides, or the
    scenario already ``loaded`` from them; ``robust`` plans with the scenario's robust margins
    (`robust_plan`). ``from_plan``: a plan folder whose fleet is the previous one (its churn
    limits, `optimizer.instance.churn`) — and, without ``path``, whose recorded scenario is
    planned again."""
    if loaded is not None:
        s, raw = loaded
    elif from_plan is not None and path is None:
        raw = apply_overrides(recorded_scenario(from_plan), list(overrides))
        s = validate(raw)
    else:
        s, raw = load_scenario(path, list(overrides))
    settings = settings_from(s, time_limit_s, mip_gap, threads, exact, backend, effort, workers, scheduler)
    previous = previous_fleet(from_plan) if from_plan is not None else None
    if robust:
        return robust_plan(s, raw, settings, allow_unserved=allow_unserved, progress=progress)
    return plan_scenario(s, raw, settings, allow_unserved=allow_unserved, progress=progress, previous=previous)


def recorded_scenario(plan_dir: str | Path) -> RawScenario:
    """The resolved scenario a plan folder records (overrides included), as raw data."""
    old = read_plan(plan_dir)
    return RawScenario(old.scenario_data, {}, Path(plan_dir) / "scenario.json",
                       overrides=[str(o) for o in old.summary["overrides"]])


def previous_fleet(plan_dir: str | Path) -> tuple[dict, dict]:
    """A plan folder's fleet: (committed nodes, on-demand peak nodes) per (site, gpu), from its
    procurement.csv."""
    return fleet_of_plan(read_plan(plan_dir))


def fleet_of_plan(plan: Plan) -> tuple[dict, dict]:
    """A plan's fleet: (committed nodes, on-demand peak nodes) per (site, gpu)."""
    proc = plan.tables["procurement"]
    proc = proc[proc["site"] != "*"]
    committed = {(r.site, r.gpu): int(r.reserved_nodes) for r in proc.itertuples() if r.reserved_nodes}
    ondemand = {(r.site, r.gpu): int(r.ondemand_nodes_peak) for r in proc.itertuples() if r.ondemand_nodes_peak}
    return committed, ondemand


def robust_plan(s: Scenario, raw: RawScenario, settings: SolverSettings, *, allow_unserved=False, progress=None) -> Plan:
    """Plan with margins (demand at a high percentile, derated efficiencies, longer round
    trips) and report the price of robustness against the nominal plan. The folder keeps the
    nominal scenario, so verify and stress judge the robust plan in the nominal world."""
    say = progress or (lambda msg: None)
    say("nominal plan (for the price of robustness)")
    nominal = plan_scenario(s, raw, settings, allow_unserved=allow_unserved, progress=progress)
    rows = robust_band(s)
    margins = s.robust.overrides(s, banded=bool(rows))
    robust_raw = apply_overrides(raw, margins)
    if rows:
        robust_raw.data["calibration"] = band.derated(robust_raw.data["calibration"], rows)
        margins = margins + ["efficiencies × the calibration's p90 band per accelerator"]
    say("robust plan: " + ", ".join(margins))
    plan = plan_scenario(validate(robust_raw), robust_raw, settings, allow_unserved=allow_unserved, progress=progress)
    to_nominal_world(plan, s.robust.demand_factor, s.robust.rtt_margin_ms)
    plan.scenario_data = raw.data
    cost, base = plan.summary["total_cost_usd"], nominal.summary["total_cost_usd"]
    gpus, base_gpus = (sum(p.summary["gpus_by_type_peak"].values()) for p in (plan, nominal))
    plan.summary.update(scenario_sha256=raw.sha256(), overrides=list(raw.overrides), robust={
        **s.robust.model_dump(), "margins": margins, "nominal_cost_usd": base,
        "price_of_robustness": cost / base - 1 if base else None,
        "nominal_gpus_peak": base_gpus, "extra_gpus_peak": gpus - base_gpus,
        "band": band.summary_rows(rows) if rows else None,
        "band_source": (s.serving.calibration.file or "shipped defaults") if rows else None})
    return plan


def robust_band(s: Scenario) -> list[dict]:
    """The calibration band a robust plan derates with (`optimizer.commands.calibrate.band`, kinds
    without a spread at ``robust.efficiency_derate``), or [] for the fixed derate: the band
    is used when ``robust.use_calibration_band`` says so, or (unset) when the scenario names
    a calibration file."""
    wanted = s.robust.use_calibration_band
    if wanted is None:
        wanted = s.serving.calibration.file is not None
    if not wanted or not band.has_band(s):
        return []
    return band.band(s, fallback=s.robust.efficiency_derate)


def plan_scenario(s: Scenario, raw: RawScenario, settings: SolverSettings, *, allow_unserved=False, progress=None,
                  cache=None, previous: tuple[dict, dict] | None = None, predictions: bool = True) -> Plan:
    """Plan a validated scenario; ``previous``: the fleet it moves from (committed nodes,
    on-demand peak per (site, gpu)), whose churn limits the plan keeps; ``predictions``
    False: no slo.csv (`plan_tables`)."""
    return plan_instance(s, raw, settings, allow_unserved=allow_unserved, progress=progress, cache=cache,
                         previous=previous, predictions=predictions)[0]


def plan_instance(s: Scenario, raw: RawScenario, settings: SolverSettings, *, allow_unserved=False, progress=None,
                  cache=None, previous: tuple[dict, dict] | None = None,
                  predictions: bool = True) -> tuple[Plan, Instance]:
    """`plan_scenario`, with the instance it planned (its prices and contracts). BLAS runs on
    one thread: a multithreaded BLAS sums in an order set by the machine's cores, and those
    last bits moved the reference's plan (one thread $16,057,100, two $16,073,183)."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _plan_instance(s, raw, settings, allow_unserved=allow_unserved, progress=progress, cache=cache,
                              previous=previous, predictions=predictions)


def _plan_instance(s: Scenario, raw: RawScenario, settings: SolverSettings, *, allow_unserved, progress, cache,
                   previous, predictions) -> tuple[Plan, Instance]:
    if not candidates(s):
        return _plan_written(s, raw, settings, allow_unserved=allow_unserved, progress=progress, cache=cache,
                             previous=previous, predictions=predictions)
    say = progress or (lambda msg: None)
    preflight(s, raw)
    whole = {k: None for k in candidates(s)}
    options, refused = servable_splits(s, raw)
    chosen, weights = (whole, None) if not any(options.values()) else _program_choice(s, raw, settings, options, say)
    kw = dict(allow_unserved=allow_unserved, progress=progress, cache=cache, previous=previous, predictions=predictions)
    plan, inst = _plan_written(with_split(s, whole), raw, settings, **kw)
    whole_usd, split_usd = plan.summary["total_cost_usd"], None
    if chosen != whole:
        say(f"whole plan without a split: ${whole_usd:,.0f}; planning again with the split")
        split_plan, split_inst = _plan_written(with_split(s, chosen), raw, settings, **kw)
        split_usd = split_plan.summary["total_cost_usd"]
        if split_usd < whole_usd:
            plan, inst = split_plan, split_inst
        say(f"with the split ${split_usd:,.0f}: " + ("kept" if plan is split_plan else "not kept"))
    kept = chosen if split_usd is not None and split_usd < whole_usd else whole
    plan.summary["prompt_split"] = split_summary(s, kept, chosen, weights, whole_usd, split_usd, refused)
    return plan, inst


def _program_choice(s: Scenario, raw: RawScenario, settings: SolverSettings, options: dict, say) -> tuple[dict, dict]:
    """The master LP over every servable prompt-length option (`optimizer.solve.prompt_split`):
    (per workload with candidates the threshold of largest weight, None for whole; per workload
    its options' weights keyed "whole" and by threshold)."""
    servable = s.model_copy(update={"workloads": {
        k: w.model_copy(update={"prompt_split_candidates_tokens": options.get(k, w.prompt_split_candidates_tokens)})
        for k, w in s.workloads.items()}})
    program, offered = weigh_options(servable, raw.path.parent, settings.cap_s, settings.threads, settings.backend)
    chosen = {**dict.fromkeys(options), **{p: offered[p][i].threshold_tokens for p, i in program.chosen().items()}}
    weights = {p: {("whole" if o.threshold_tokens is None else f"{o.threshold_tokens:g}"): z
                   for o, z in zip(offered[p], program.weights[p])} for p in offered}
    say("prompt-length split, the program's choice: " + "; ".join(
        f"{p} {'whole' if t is None else f'split at {t:,.0f} tokens'} (weights "
        + ", ".join(f"{o} {z:.2f}" for o, z in weights.get(p, {}).items()) + ")" for p, t in chosen.items()))
    return chosen, weights


def _plan_written(s: Scenario, raw: RawScenario, settings: SolverSettings, *, allow_unserved, progress, cache,
                  previous, predictions) -> tuple[Plan, Instance]:
    say = progress or (lambda msg: None)
    # KV-cache tiers (kv_cache:): candidate caches the plan chooses among; the pre-solve optimum
    # gives the decode side and the checks their workloads
    both = cache_options(s)
    written, sized = s, None if both is None else both[1]
    s = with_kv_cache(s, sized)
    preflight(s, raw)
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s)

    def planned(options):
        inst = build_instance(s, rtt, None if options is None else cache_choice(written, options))
        inst = replace(inst, churn=limits_from(s.churn, previous, inst.site_gpus))
        say(f"instance: {len(inst.metros)} metros, {len(inst.sites)} sites, {len(inst.states)} states, "
            f"{len(inst.pools)} pools, {sum(len(a) for a in inst.arcs.values())} routing arcs")
        return inst, solve(inst, settings, progress, cache)

    options = None if both is None else both[0]
    inst, result = planned(options)
    if options is not None:
        options, inst, result = consolidated(options, inst, result, planned, say)
    tables = plan_tables(s, inst, result, predictions)
    summary = plan_summary(s, raw, inst, result, tables, settings)
    if options is not None:
        summary["kv_cache"] = kv_cache_summary(s, options, inst, result.solution, summary["total_cost_usd"])
    if summary["unserved_fraction"] > UNSERVED_TOLERANCE and not allow_unserved:
        if result.status == "time_limit":
            raise TimeLimitNoPlanError(
                f"the time limit ran out before a plan serving all demand was found (the best so far leaves "
                f"{100 * summary['unserved_fraction']:.2f} % unserved); raise --time-limit, or use the default "
                "mode for large scenarios (--master)")
        raise InfeasibleError(diagnose(s, inst, result.solution, rtt))
    return Plan(summary, tables, raw.data, raw.files()), inst


def consolidated(options: dict, inst: Instance, result, planned, say) -> tuple[dict, Instance, object]:
    """The plan among candidate caches, consolidated: the program may split a tier's requests
    among candidates, and each share gets pools of its own — smaller pools, which queue
    worse once made whole. So the scenario is planned again with, per workload, the
    cheapest candidate and the one serving most of its requests, and the cheaper whole plan
    (cost with the tiers and the unserved penalty) is kept; ties keep the first. Returns
    (the candidates the kept plan chose among, its instance, its result)."""
    served = served_requests(inst, result.solution.flows)
    kept = {}
    for k, o in options.items():
        main = max(range(len(o)), key=lambda i: (served.get((k, i), 0.0), -i))
        kept[k] = tuple(o[i] for i in sorted({0, main}))
    if all(len(kept[k]) == len(o) for k, o in options.items()):
        return options, inst, result
    again, second = planned(kept)
    say(f"KV-cache candidates consolidated: ${second.objective_usd:,.0f} against ${result.objective_usd:,.0f} with all of them")
    return (kept, again, second) if second.objective_usd < result.objective_usd else (options, inst, result)


def replan(plan_dir: str | Path, *, progress=None, allow_unserved=False) -> Plan:
    """Plan again exactly what a plan folder records: its resolved scenario (overrides
    included) with its solver settings."""
    old = read_plan(plan_dir)
    raw = recorded_scenario(plan_dir)
    try:
        settings = SolverSettings(**old.summary["settings"])
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"the recorded solver settings cannot be used: {exc}",
                            Origin(str(Path(plan_dir) / "summary.json")), field="settings") from None
    if old.summary.get("robust"):
        return robust_plan(scenario_of(old, plan_dir), raw, settings, allow_unserved=allow_unserved, progress=progress)
    return plan_scenario(scenario_of(old, plan_dir), raw, settings, allow_unserved=allow_unserved, progress=progress)
