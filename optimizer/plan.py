"""A plan: the solver's answer as tidy tables plus a summary, and the plan folder on disk.

`make_plan` runs the whole pipeline (scenario → network → instance → solve → tables);
`write_plan` writes the folder atomically (a temporary folder, then one rename);
`read_plan` reads one back.

Plan folder:
  summary.json        headline figures (costs, $/M tokens, goodput, gap, status, versions)
  procurement.csv     (site, gpu): committed and on-demand nodes, cost lines; + egress row
  pools.csv           (site, workload, tier, role, gpu, config, state): replicas and load
  routing.csv         (metro, site, workload, tier, period, day_type, hour): requests/s, RTT
  slo.csv             (metro, workload, site, tier): predicted p99 TTFT/ITL and the breakdown
  curves.csv          every serving config the plan uses, with its curve figures
  scenario.json       the resolved scenario (every table), from which the plan can be redone
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zipfile
from datetime import datetime
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.baseline import baseline
from optimizer.checks import preflight
from optimizer.configs import make_replica
from optimizer.costing import procurement_table, unserved_penalty_usd
from optimizer.billing import token_billing
from optimizer.curves.economics import cost_per_million_tokens_usd
from optimizer.curves.queueing import wait_quantile_s
from optimizer.curves.roofline import decode_step_time_s, mixed_step_time_s
from optimizer.curves.speculative import speculative_step_time_s
from optimizer.errors import InfeasibleError, TimeLimitNoPlanError
from optimizer.instance import Instance, build_instance
from optimizer.network import build_graph, rtt_matrix
from optimizer.scenario import RawScenario, Scenario, apply_overrides, load_scenario, validate
from optimizer.solve import SolveResult, SolverSettings, solve

TABLES = ("procurement", "pools", "routing", "slo", "curves")
TIMING_FIELDS = ("solve_seconds", "build_seconds", "handoff_seconds", "wall_seconds", "steps")
UNSERVED_TOLERANCE = 1e-6
FIXED_DATE = datetime(2000, 1, 1)


@dataclass
class Plan:
    summary: dict
    tables: dict[str, pd.DataFrame]
    scenario_data: dict = field(default_factory=dict)


def versions() -> dict[str, str]:
    out = {}
    for dist in ("fleetplan", "pyomo", "highspy"):
        try:
            out[dist] = version(dist)
        except Exception:  # a development tree without installed metadata
            out[dist] = "unknown"
    return out


def settings_from(s: Scenario, time_limit_s=None, mip_gap=None, threads=None, exact=None, backend="highs") -> SolverSettings:
    return SolverSettings(
        time_limit_s=time_limit_s if time_limit_s is not None else s.policy.time_limit_s,
        mip_gap=mip_gap if mip_gap is not None else s.policy.mip_gap,
        threads=threads if threads is not None else s.policy.threads,
        exact=exact,
        backend=backend,
    )


def make_plan(path=None, overrides=(), *, time_limit_s=None, mip_gap=None, threads=None, exact=None,
              allow_unserved=False, robust=False, backend="highs", progress=None) -> Plan:
    """Plan a scenario file (default: the reference scenario) with ``--set`` overrides;
    ``robust`` plans with the scenario's robust margins (`robust_plan`)."""
    s, raw = load_scenario(path, list(overrides))
    settings = settings_from(s, time_limit_s, mip_gap, threads, exact, backend)
    if robust:
        return robust_plan(s, raw, settings, allow_unserved=allow_unserved, progress=progress)
    return plan_scenario(s, raw, settings, allow_unserved=allow_unserved, progress=progress)


def robust_plan(s: Scenario, raw: RawScenario, settings: SolverSettings, *, allow_unserved=False, progress=None) -> Plan:
    """Plan with margins (demand at a high percentile, derated efficiencies, longer round
    trips) and report the price of robustness against the nominal plan. The folder keeps the
    nominal scenario, so verify and stress judge the robust plan in the nominal world."""
    say = progress or (lambda msg: None)
    say("nominal plan (for the price of robustness)")
    nominal = plan_scenario(s, raw, settings, allow_unserved=allow_unserved, progress=progress)
    margins = s.robust.overrides(s)
    robust_raw = apply_overrides(raw, margins)
    say("robust plan: " + ", ".join(margins))
    plan = plan_scenario(validate(robust_raw), robust_raw, settings, allow_unserved=allow_unserved, progress=progress)
    _to_nominal_world(plan, s.robust.demand_factor, s.robust.rtt_margin_ms)
    plan.scenario_data = raw.data
    cost, base = plan.summary["total_cost_usd"], nominal.summary["total_cost_usd"]
    plan.summary.update(scenario_sha256=raw.sha256(), overrides=list(raw.overrides), robust={
        **s.robust.model_dump(), "margins": margins, "nominal_cost_usd": base,
        "price_of_robustness": cost / base - 1 if base else None})
    return plan


def plan_scenario(s: Scenario, raw: RawScenario, settings: SolverSettings, *, allow_unserved=False, progress=None,
                  cache=None) -> Plan:
    say = progress or (lambda msg: None)
    preflight(s, raw)
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s)
    inst = build_instance(s, rtt)
    say(f"instance: {len(inst.metros)} metros, {len(inst.sites)} sites, {len(inst.states)} states, "
        f"{len(inst.pools)} pools, {sum(len(a) for a in inst.arcs.values())} routing arcs")
    result = solve(inst, settings, progress, cache)
    tables = plan_tables(s, inst, result)
    summary = plan_summary(s, raw, inst, result, tables, settings)
    if summary["unserved_fraction"] > UNSERVED_TOLERANCE and not allow_unserved:
        if result.status == "time_limit":
            raise TimeLimitNoPlanError(
                f"the time limit ran out before a plan serving all demand was found (the best so far leaves "
                f"{100 * summary['unserved_fraction']:.2f} % unserved); raise --time-limit, or use the default "
                "mode for large scenarios (--master)")
        from optimizer.diagnosis import diagnose

        raise InfeasibleError(diagnose(s, inst, result.solution, rtt))
    return Plan(summary, tables, raw.data)


# ---------------------------------------------------------------------------- tables


def _slice_columns(inst: Instance) -> dict[int, dict]:
    """Per state id: its slice's period, day type and hour, and the site it has lost."""
    rows = {t: (r.period, r.day_type, int(r.hour)) for t, r in zip(inst.slices.index, inst.slices.itertuples())}
    return {st.id: dict(zip(("period", "day_type", "hour"), rows[st.slice]), lost_site=st.lost_site)
            for st in inst.states}


def _pool_wait_ms(inst: Instance, s: Scenario, pool, load: float, n: int) -> float:
    if pool.table is None or n == 0:
        return 0.0
    q = s.workloads[pool.workload].slo_attainment
    c = pool.config
    return float(wait_quantile_s(inst.peak_to_mean * load, n, c.service_mean_s, c.service_scv, q)) * 1e3


def plan_tables(s: Scenario, inst: Instance, result: SolveResult) -> dict[str, pd.DataFrame]:
    sol = result.solution
    slice_of = _slice_columns(inst)
    pools = []
    for (pid, sid), n in sorted(sol.replicas.items()):
        p = inst.pools[pid]
        load = sol.flows.get((pid, sid), 0.0)
        pools.append({
            "site": p.site, "workload": p.workload, "tier": p.tier, "role": p.role, "speed": p.speed, "gpu": p.gpu,
            "config": p.config.id, "gpus_per_replica": p.gpus, **slice_of[sid],
            "replicas": n, "requests_per_s": load,
            "p99_wait_ms": _pool_wait_ms(inst, s, p, load, n),
            "queue_budget_ms": p.queue_budget_ms if p.table is not None else None,
        })
    routing = []
    rtt = _rtt_lookup(inst)
    for (m, site, k, tier, sid), x in sorted(sol.routes.items()):
        if inst.states[sid].lost_site is None:
            routing.append({"metro": m, "site": site, "workload": k, "tier": tier, **slice_of[sid],
                            "requests_per_s": x, "rtt_ms": rtt[(m, site)]})
    routing_df = pd.DataFrame(routing, columns=["metro", "site", "workload", "tier", "period", "day_type", "hour",
                                                "lost_site", "requests_per_s", "rtt_ms"]).drop(columns="lost_site")
    pools_df = pd.DataFrame(pools)
    return {
        "procurement": procurement_table(inst, sol),
        "pools": pools_df,
        "routing": routing_df,
        "slo": _slo_table(s, inst, sol, pools_df),
        "curves": _curves_table(inst, sol),
    }


def _rtt_lookup(inst: Instance) -> dict:
    return {(a.metro, a.site): a.rtt_ms for a in inst.arcs["nominal"]}


class _Settled:
    """Where a pool really runs. Below capacity, continuous batching settles at the batch b*
    where b = λ_replica · (output tokens / tokens per step) · step(b) — smaller than the
    operating batch the pool was sized at, so steps (and colocated iterations, and with them
    the prefill lane) are faster than at full load. Predictions use b*; sizing does not."""

    def __init__(self, s: Scenario, inst: Instance):
        self.s, self.inst = s, inst
        self._steps: dict = {}

    def _step_table(self, c):
        if c.id not in self._steps:
            s = self.s
            w = s.workloads[c.workload]
            r = make_replica(s.models[w.model], s.accelerators[c.gpu], s.serving, c.gpus, w.weight_dtype, w.kv_dtype)
            b = np.arange(1, max(c.batch, 1) + 1, dtype=float)
            context = w.isl_mean_tokens + w.osl_mean_tokens / 2
            if c.role == "colocated":
                steps = mixed_step_time_s(r, b, context, c.chunk_tokens, w.isl_mean_tokens / 2)
            elif c.speculative:
                spec = s.serving.speculative
                steps = speculative_step_time_s(r, b, context, spec.draft_tokens, spec.draft_cost_ratio)
            else:
                steps = decode_step_time_s(r, b, context)
            self._steps[c.id] = np.asarray(steps, dtype=float)
        return self._steps[c.id]

    def step_ms(self, pool, load_rps: float, replicas: int) -> float:
        """Step (iteration) time at the settled batch for this pool's load, in ms."""
        c = pool.config
        steps = self._step_table(c)
        if replicas <= 0 or load_rps <= 0:
            return float(steps[0]) * 1e3
        per_replica = self.inst.peak_to_mean * load_rps / replicas
        in_flight = per_replica * self.s.workloads[c.workload].osl_mean_tokens / c.tokens_per_step * steps
        fits = in_flight <= np.arange(1, len(steps) + 1)
        settled = int(np.argmax(fits)) if fits.any() else len(steps) - 1
        return float(steps[settled]) * 1e3


def _slo_table(s: Scenario, inst: Instance, sol, pools_df: pd.DataFrame) -> pd.DataFrame:
    """Predicted p99 TTFT and ITL per (metro, workload, site, tier) routed in any nominal
    slice. A tier may hold a prefill and a colocated pool; each request takes one of them, so
    the prediction is the slowest path of a pool that carries load, at its worst slice:
      disaggregated: queue + prefill(p99) + KV transfer + first token; ITL from the decode pools;
      colocated:     queue + chunked prefill(p99); ITL from the colocated iteration.
    Steps are read at the batch each pool settles at under its load (`_Settled`)."""
    nominal = pools_df[pools_df["lost_site"].isna()] if len(pools_df) else pools_df
    configs = {p.config.id: p for p in inst.pools}
    settled = _Settled(s, inst)
    tail = s.serving.itl_tail_factor
    rtt_of = _rtt_lookup(inst)
    decode_step: dict = {}
    for row in nominal.itertuples():
        if row.role == "decode":
            key = (row.site, row.workload, row.speed, row.period, row.day_type, row.hour)
            decode_step[key] = max(decode_step.get(key, 0.0), settled.step_ms(configs[row.config], row.requests_per_s, row.replicas))
    worst: dict = {}
    for row in nominal.itertuples():
        if row.role == "decode" or row.requests_per_s <= 0:
            continue
        pool = configs[row.config]
        c = pool.config
        key = (row.site, row.workload, row.tier)
        if row.role == "prefill":
            transfer = inst.transfer_ms.get((row.site, row.workload), 0.0)
            step = decode_step.get((row.site, row.workload, row.speed, row.period, row.day_type, row.hour), 0.0)
            first, itl = (1 + tail) * step, tail * step
            prefill, wait = c.prefill_p99_ms, row.p99_wait_ms
        else:
            step = settled.step_ms(pool, row.requests_per_s, row.replicas)
            faster = step / c.step_ms  # the prefill lane moves with the iteration
            transfer, first, itl = 0.0, 0.0, tail * step
            prefill = c.prefill_p99_ms * faster
            wait = float(wait_quantile_s(inst.peak_to_mean * row.requests_per_s, row.replicas, c.service_mean_s * faster,
                                         c.service_scv, s.workloads[row.workload].slo_attainment)) * 1e3
        path = {"queue_ms": wait, "prefill_ms": prefill, "transfer_ms": transfer,
                "first_token_ms": first, "itl": itl, "mode": "disaggregated" if row.role == "prefill" else "colocated"}
        total = wait + prefill + transfer + first
        if key not in worst or total > worst[key][0]:
            worst[key] = (total, path, max(itl, worst[key][2] if key in worst else 0.0))
        else:
            worst[key] = (worst[key][0], worst[key][1], max(worst[key][2], itl))
    rows = []
    seen = set()
    for (m, site, k, tier, sid), x in sorted(sol.routes.items()):
        if inst.states[sid].lost_site is not None or (m, k, site, tier) in seen or (site, k, tier) not in worst:
            continue
        seen.add((m, k, site, tier))
        w = s.workloads[k]
        total, path, itl = worst[(site, k, tier)]
        network = rtt_of[(m, site)]
        rows.append({
            "metro": m, "workload": k, "site": site, "tier": tier,
            "ttft_p99_ms_predicted": network + s.serving.fixed_overhead_ms + total,
            "ttft_p99_ms_objective": w.ttft_p99_ms,
            "itl_p99_ms_predicted": itl, "itl_p99_ms_objective": w.itl_p99_ms,
            "network_ms": network, "overhead_ms": s.serving.fixed_overhead_ms, "queue_ms": path["queue_ms"],
            "prefill_ms": path["prefill_ms"], "transfer_ms": path["transfer_ms"], "first_token_ms": path["first_token_ms"],
            "mode": path["mode"],
        })
    return pd.DataFrame(rows)


def _curves_table(inst: Instance, sol) -> pd.DataFrame:
    used = sorted({inst.pools[pid].config.id for (pid, _), n in sol.replicas.items() if n})
    configs = {p.config.id: p.config for p in inst.pools}
    rows = []
    for cid in used:
        c = asdict(configs[cid])
        c["service_mean_ms"] = c.pop("service_mean_s") * 1e3
        c["nic_gb_s"] = c.pop("nic_bytes_per_s") / 1e9
        rows.append(c)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- summary


def plan_summary(s: Scenario, raw: RawScenario, inst: Instance, result: SolveResult,
                 tables: dict[str, pd.DataFrame], settings: SolverSettings) -> dict:
    sol = result.solution
    weight = {st.id: st.weight_hours for st in inst.states}
    proc = tables["procurement"]
    total = float(proc["cost_usd"].sum())
    served_tokens: dict[str, float] = {k: 0.0 for k in inst.workloads}
    peak_tokens: dict[int, float] = {}
    for (m, site, k, tier, sid), x in sol.routes.items():
        if weight[sid] > 0:
            tokens = x * inst.output_tokens[k]
            served_tokens[k] += tokens * weight[sid] * 3600.0
            peak_tokens[sid] = peak_tokens.get(sid, 0.0) + tokens
    slice_hours = inst.slices["weight_hours"].to_dict()
    demand_req = sum(lam * 3600.0 * slice_hours[t] for (_, _, t), lam in inst.demand.items())
    unserved_req = sum(u * 3600.0 * weight[sid] for (_, _, sid), u in sol.unserved.items() if weight[sid] > 0)
    annual_tokens = sum(served_tokens.values())
    node_hours, gpu_hours_committed, gpu_hours_ondemand, facility_mwh = _fleet_hours(inst, sol)
    replica_gpu_hours = sum(inst.pools[pid].gpus * n * weight[sid] for (pid, sid), n in sol.replicas.items())
    by_workload = _cost_by_workload(inst, sol, proc)
    input_gpu_hours, gpu_hours = _gpu_hours_by_workload(inst, sol)
    base = baseline(inst)
    summary = {
        "scenario": s.name,
        "scenario_sha256": raw.sha256(),
        "overrides": list(raw.overrides),
        "calibration": {k: (raw.data.get("calibration") or {}).get(k) for k in ("file", "sha256")},
        "status": result.status,
        "proven_within_gap": result.status == "optimal",
        "objective_usd": result.objective_usd,
        "best_bound_usd": result.best_bound_usd,
        "mip_gap": result.mip_gap,
        "mip_gap_target": settings.mip_gap,
        "mode": "exact" if result.exact else "master+repair",
        "total_cost_usd": total,
        "unserved_penalty_usd": unserved_penalty_usd(inst, sol),
        "cost_per_million_tokens_usd": float(cost_per_million_tokens_usd(total / 8760, annual_tokens / (8760 * 3600)))
        if annual_tokens else None,
        "cost_per_million_tokens_usd_by_workload": {
            k: (by_workload[k] / served_tokens[k] * 1e6 if served_tokens[k] else None) for k in inst.workloads},
        "cost_usd_by_workload": by_workload,
        "token_billing": token_billing(s, by_workload, served_tokens, input_gpu_hours, gpu_hours),
        "goodput_tokens_per_s_avg": annual_tokens / (8760 * 3600),
        "goodput_tokens_per_s_peak": max(peak_tokens.values(), default=0.0),
        "tokens_per_s_per_mw": (annual_tokens / (8760 * 3600)) / (facility_mwh / 8760) if facility_mwh else None,
        "unserved_fraction": unserved_req / demand_req if demand_req else 0.0,
        "reserved_share_of_gpu_hours": gpu_hours_committed / (gpu_hours_committed + gpu_hours_ondemand)
        if gpu_hours_committed + gpu_hours_ondemand else 0.0,
        "average_utilization": replica_gpu_hours / (gpu_hours_committed + gpu_hours_ondemand)
        if gpu_hours_committed + gpu_hours_ondemand else 0.0,
        "predicted_ttft_attainment": _attainment(tables["slo"], tables["routing"], "ttft"),
        "predicted_itl_attainment": _attainment(tables["slo"], tables["routing"], "itl"),
        "gpus_by_type_peak": _gpus_by_type(inst, sol),
        "baseline_cost_usd": base.total_cost_usd if base else None,
        "baseline_gpu_by_workload": base.gpu_by_workload if base else None,
        "savings_vs_baseline": 1 - total / base.total_cost_usd if base and base.total_cost_usd else None,
        "repair_violations": list(sol.violations),
        "solve_seconds": result.solve_seconds,
        "build_seconds": result.build_seconds,
        "handoff_seconds": result.handoff_seconds,
        "model_size": result.model_size,
        "steps": [asdict(st) for st in result.steps],
        "versions": versions(),
        "settings": asdict(settings),
    }
    return summary


def _fleet_hours(inst: Instance, sol):
    weight = {st.id: st.weight_hours for st in inst.states}
    committed = {}
    for (s, g, _), n in sol.committed.items():
        committed[(s, g)] = committed.get((s, g), 0) + n
    node_hours = sum(n * 8760.0 for n in committed.values()) + sum(n * weight[sid] for (_, _, sid), n in sol.ondemand.items())
    gpu_c = sum(n * 8760.0 * inst.gpus_per_node[g] for (s, g), n in committed.items())
    gpu_o = sum(n * weight[sid] * inst.gpus_per_node[g] for (s, g, sid), n in sol.ondemand.items())
    mwh = sum(n * 8760.0 * inst.node_kw[g] * inst.pue[s] / 1000 for (s, g), n in committed.items())
    mwh += sum(n * weight[sid] * inst.node_kw[g] * inst.pue[s] / 1000 for (s, g, sid), n in sol.ondemand.items())
    return node_hours, gpu_c, gpu_o, mwh


def _cost_by_workload(inst: Instance, sol, proc: pd.DataFrame) -> dict[str, float]:
    """Each (site, accelerator)'s cost split by the workloads' replica GPU-hours there (idle
    capacity shared in the same proportion); egress by each workload's served output."""
    weight = {st.id: st.weight_hours for st in inst.states}
    share: dict = {}
    for (pid, sid), n in sol.replicas.items():
        p = inst.pools[pid]
        share.setdefault((p.site, p.gpu), {}).setdefault(p.workload, 0.0)
        share[(p.site, p.gpu)][p.workload] += n * p.gpus * weight[sid]
    out = {k: 0.0 for k in inst.workloads}
    for row in proc.itertuples():
        if row.gpu == "egress":
            continue
        parts = share.get((row.site, row.gpu), {})
        total = sum(parts.values())
        for k, v in parts.items():
            out[k] += row.cost_usd * v / total
    egress = {k: 0.0 for k in inst.workloads}
    for (m, site, k, tier, sid), x in sol.routes.items():
        egress[k] += 3600.0 * weight[sid] * inst.egress_usd_per_request[k] * x
    return {k: out[k] + egress[k] for k in inst.workloads}


def _gpu_hours_by_workload(inst: Instance, sol) -> tuple[dict[str, float], dict[str, float]]:
    """(prompt GPU-hours, all replica GPU-hours) per workload in the year; a colocated
    replica's hours are split by its config's estimated input share."""
    weight = {st.id: st.weight_hours for st in inst.states}
    prompt = {k: 0.0 for k in inst.workloads}
    every = {k: 0.0 for k in inst.workloads}
    for (pid, sid), n in sol.replicas.items():
        p = inst.pools[pid]
        hours = n * p.gpus * weight[sid]
        every[p.workload] += hours
        prompt[p.workload] += hours * p.config.input_share
    return prompt, every


def _gpus_by_type(inst: Instance, sol) -> dict[str, int]:
    """GPUs provisioned (committed + on-demand) by type, in the busiest slice."""
    committed = {}
    for (s, g, _), n in sol.committed.items():
        committed[g] = committed.get(g, 0) + n * inst.gpus_per_node[g]
    best = {}
    for st in inst.states:
        if st.lost_site is not None:
            continue
        for g in inst.gpus:
            od = sum(n for (s, gg, sid), n in sol.ondemand.items() if gg == g and sid == st.id) * inst.gpus_per_node[g]
            best[g] = max(best.get(g, 0), committed.get(g, 0) + od)
    return {g: int(v) for g, v in best.items() if v}


def _attainment(slo: pd.DataFrame, routing: pd.DataFrame, what: str) -> float:
    """Share of served requests on arcs whose predicted p99 meets the objective."""
    if slo.empty or routing.empty:
        return 1.0
    ok = slo[f"{what}_p99_ms_predicted"] <= slo[f"{what}_p99_ms_objective"] + 1e-6
    good = set(map(tuple, slo.loc[ok, ["metro", "workload", "site", "tier"]].to_numpy()))
    key = list(map(tuple, routing[["metro", "workload", "site", "tier"]].to_numpy()))
    mask = np.array([k in good for k in key])
    return float(routing.loc[mask, "requests_per_s"].sum() / routing["requests_per_s"].sum())


# ---------------------------------------------------------------------------- folder


def write_plan(plan: Plan, out_dir: str | Path, report: bool = True) -> Path:
    """Write the plan folder atomically: everything goes to a temporary sibling folder, which
    then replaces ``out_dir`` in one rename; an interrupted write leaves nothing behind.
    ``report`` also writes report.html (`optimizer.report`)."""
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "summary.json").write_text(json.dumps(plan.summary, indent=2, sort_keys=True, default=_json) + "\n")
        (tmp / "scenario.json").write_text(json.dumps(plan.scenario_data, indent=1, sort_keys=True, default=str) + "\n")
        for name in TABLES:
            plan.tables[name].to_csv(tmp / f"{name}.csv", index=False, float_format="%.12g")
        _write_xlsx(plan, tmp / "plan.xlsx")
        if report:
            from optimizer.report import write_report

            write_report(tmp)
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _write_xlsx(plan: Plan, path: Path) -> None:
    """The tables as sheets. Zip entries and document properties carry a fixed date, so the
    same plan gives the same bytes."""
    raw = path.with_suffix(".raw.xlsx")
    with pd.ExcelWriter(raw, engine="openpyxl") as xl:
        xl.book.properties.created = xl.book.properties.modified = FIXED_DATE
        fields = sorted((k, json.dumps(v, default=_json) if isinstance(v, (dict, list)) else v)
                        for k, v in plan.summary.items() if k not in TIMING_FIELDS)
        pd.DataFrame(fields, columns=["field", "value"]).to_excel(xl, sheet_name="summary", index=False)
        for name in TABLES:
            plan.tables[name].to_excel(xl, sheet_name=name, index=False)
    stamp = FIXED_DATE.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    with zipfile.ZipFile(raw) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "docProps/core.xml":  # openpyxl stamps the save time here
                data = re.sub(rb'(<dcterms:modified[^>]*>)[^<]*', rb"\g<1>" + stamp, data)
            dst.writestr(zipfile.ZipInfo(info.filename, date_time=FIXED_DATE.timetuple()[:6]), data)
    raw.unlink()


def _replace_dir(new: Path, target: Path) -> None:
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        os.rename(target, old / "x")
        os.rename(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, target)


def _json(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)


def _to_nominal_world(plan: Plan, demand_factor: float, rtt_margin_ms: float) -> None:
    """A robust plan's fleet, shown serving the nominal demand over nominal round trips:
    flows ÷ the demand factor (same shares), RTTs − the margin; goodput figures follow.
    Pools keep their replicas; queue figures stay those the pools were sized for."""
    t = plan.tables
    for name in ("routing", "pools"):
        t[name]["requests_per_s"] = t[name]["requests_per_s"] / demand_factor
    t["routing"]["rtt_ms"] = t["routing"]["rtt_ms"] - rtt_margin_ms
    for col in ("network_ms", "ttft_p99_ms_predicted"):
        t["slo"][col] = t["slo"][col] - rtt_margin_ms
    sm = plan.summary
    for key in ("goodput_tokens_per_s_avg", "goodput_tokens_per_s_peak", "tokens_per_s_per_mw"):
        if sm.get(key) is not None:
            sm[key] /= demand_factor
    if sm.get("cost_per_million_tokens_usd") is not None:
        sm["cost_per_million_tokens_usd"] *= demand_factor
    sm["cost_per_million_tokens_usd_by_workload"] = {
        k: (v * demand_factor if v is not None else None) for k, v in sm["cost_per_million_tokens_usd_by_workload"].items()}
    for row in sm["token_billing"]["by_workload"].values():
        for key in ("gpu_cost_usd_per_million_output_tokens", "gpu_cost_over_list"):
            if row[key] is not None:
                row[key] *= demand_factor


def replan(plan_dir: str | Path, *, progress=None, allow_unserved=False) -> Plan:
    """Plan again exactly what a plan folder records: its resolved scenario (overrides
    included) with its solver settings."""
    old = read_plan(plan_dir)
    raw = RawScenario(old.scenario_data, {}, Path(plan_dir) / "scenario.json",
                      overrides=list(old.summary.get("overrides", [])))
    settings = SolverSettings(**old.summary["settings"])
    if old.summary.get("robust"):
        return robust_plan(scenario_of(old, plan_dir), raw, settings, allow_unserved=allow_unserved, progress=progress)
    return plan_scenario(scenario_of(old, plan_dir), raw, settings, allow_unserved=allow_unserved, progress=progress)


def scenario_of(plan: Plan, plan_dir: str | Path) -> Scenario:
    """The validated scenario a plan folder records (its scenario.json)."""
    return validate(RawScenario(plan.scenario_data, {}, Path(plan_dir) / "scenario.json"))


def read_plan(plan_dir: str | Path) -> Plan:
    d = Path(plan_dir)
    summary = json.loads((d / "summary.json").read_text())
    tables = {name: pd.read_csv(d / f"{name}.csv", keep_default_na=False, na_values=[""]) for name in TABLES}
    data = json.loads((d / "scenario.json").read_text()) if (d / "scenario.json").exists() else {}
    return Plan(summary, tables, data)
