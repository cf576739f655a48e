"""The plan's summary.json: status, cost and bound, cost per million goodput tokens (overall
and per workload), goodput, tokens per MW, reserved share, utilisation, predicted attainment,
GPUs by type, the hand-made baseline, token billing, timings and versions."""

from __future__ import annotations

from dataclasses import asdict
from importlib.metadata import version

import numpy as np
import pandas as pd

from optimizer.base.contracts import COST_COLUMNS
from optimizer.base.units import HOURS_PER_YEAR, KG_PER_TONNE, SECONDS_PER_HOUR
from optimizer.curves.economics import cost_per_million_tokens_usd
from optimizer.instance.build import Instance
from optimizer.results.churn import churn_summary
from optimizer.results.fleet import fleet_summary
from optimizer.results.spot import spot_summary
from optimizer.scenario import RawScenario, Scenario
from optimizer.serving.billing import token_billing
from optimizer.solve import SolveResult, SolverSettings
from optimizer.solve.baseline import baseline
from optimizer.solve.fleet import fleet_hours, gpus_by_type_peak, unserved_penalty_usd

SECONDS_PER_YEAR = HOURS_PER_YEAR * SECONDS_PER_HOUR
UNSERVED_RPS = 1e-6  # below this, a workload's demand counts as served in full


def versions() -> dict[str, str]:
    out = {}
    for dist in ("fleetplan", "pyomo", "highspy"):
        try:
            out[dist] = version(dist)
        except Exception:  # a development tree without installed metadata
            out[dist] = "unknown"
    return out


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
            served_tokens[k] += tokens * weight[sid] * SECONDS_PER_HOUR
            peak_tokens[sid] = peak_tokens.get(sid, 0.0) + tokens
    slice_hours = inst.slices["weight_hours"].to_dict()
    demand_req = sum(lam * SECONDS_PER_HOUR * slice_hours[t] for (_, _, t), lam in inst.demand.items())
    unserved_req = sum(u * SECONDS_PER_HOUR * weight[sid] for (_, _, sid), u in sol.unserved.items() if weight[sid] > 0)
    annual_tokens = sum(served_tokens.values())
    node_hours, gpu_hours_committed, gpu_hours_ondemand, facility_mwh = fleet_hours(inst, sol)
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
        "quality": quality_words(result, settings.mip_gap),
        "bounds": [asdict(b) for b in result.bounds],
        "gap_split": result.split,
        "gap_history": [asdict(p) for p in result.history],
        "first_plan_seconds": result.first_plan_seconds,
        "stopped_by_wall_clock": result.stopped_by_clock,
        "work": result.work,
        "mode": "exact" if result.exact else "master+repair",
        "total_cost_usd": total,
        "unserved_penalty_usd": unserved_penalty_usd(inst, sol),
        "cost_per_million_tokens_usd": float(cost_per_million_tokens_usd(total / HOURS_PER_YEAR, annual_tokens / SECONDS_PER_YEAR))
        if annual_tokens else None,
        "cost_per_million_tokens_usd_by_workload": {
            k: (by_workload[k] / served_tokens[k] * 1e6 if served_tokens[k] else None) for k in inst.workloads},
        "cost_usd_by_workload": by_workload,
        "token_billing": token_billing(s, by_workload, served_tokens, input_gpu_hours, gpu_hours),
        "goodput_tokens_per_s_avg": annual_tokens / SECONDS_PER_YEAR,
        "goodput_tokens_per_s_peak": max(peak_tokens.values(), default=0.0),
        "tokens_per_s_per_mw": (annual_tokens / SECONDS_PER_YEAR) / (facility_mwh / HOURS_PER_YEAR) if facility_mwh else None,
        "unserved_fraction": unserved_req / demand_req if demand_req else 0.0,
        "reserved_share_of_gpu_hours": gpu_hours_committed / (gpu_hours_committed + gpu_hours_ondemand)
        if gpu_hours_committed + gpu_hours_ondemand else 0.0,
        "average_utilization": replica_gpu_hours / (gpu_hours_committed + gpu_hours_ondemand)
        if gpu_hours_committed + gpu_hours_ondemand else 0.0,
        "predicted_ttft_attainment": _attainment(tables.get("slo"), tables["routing"], "ttft"),
        "predicted_itl_attainment": _attainment(tables.get("slo"), tables["routing"], "itl"),
        "carbon": carbon_summary(s, inst, proc, annual_tokens),
        "fleet": fleet_summary(s, inst, proc),
        "gpus_by_type_peak": gpus_by_type_peak(inst, sol),
        **({"spot": spot} if (spot := spot_summary(s, inst, sol, proc)) else {}),
        "baseline_cost_usd": base.total_cost_usd,
        "baseline_gpu_by_workload": base.gpu_by_workload,
        "baseline_cost_usd_by_workload": base.cost_usd_by_workload,
        "baseline_cannot_serve": base.cannot_serve,
        **against_baseline(by_workload, base.cost_usd_by_workload, _unserved_workloads(inst, sol)),
        "repair_violations": list(sol.violations),
        "solve_seconds": result.solve_seconds,
        "build_seconds": result.build_seconds,
        "handoff_seconds": result.handoff_seconds,
        "model_size": result.model_size,
        "steps": [asdict(st) for st in result.steps],
        "versions": versions(),
        "settings": asdict(settings),
        **({"churn": churn_summary(inst, sol, result.churn_shadow)} if inst.churn is not None else {}),
    }
    return summary


def _unserved_workloads(inst: Instance, sol) -> set[str]:
    """Workloads the plan leaves some demand of unserved."""
    return {k for (_, k, sid), u in sol.unserved.items() if u > UNSERVED_RPS and inst.states[sid].weight_hours > 0}


def against_baseline(plan_usd: dict[str, float], base_usd: dict[str, float], unserved: set[str]) -> dict:
    """The saving against the hand-made baseline, over the workloads both serve in full
    (never over a cost the baseline does not have: a workload it cannot serve is left out,
    and named in ``baseline_cannot_serve``); None when they share none."""
    both = sorted(k for k in base_usd if k not in unserved)
    plan, base = sum(plan_usd[k] for k in both), sum(base_usd[k] for k in both)
    return {"savings_vs_baseline": 1 - plan / base if both and base > 0 else None,
            "baseline_comparison": {"workloads": both, "baseline_cost_usd": base, "plan_cost_usd": plan} if both
            else None}


def quality_words(result, target: float) -> str:
    """The plan's quality in a planner's words: "optimal" (within the gap target of a proven
    bound), else how far it may be from the best bound and where that bound comes from."""
    if result.mip_gap <= target + 1e-12:
        return "optimal" if result.mip_gap <= 1e-9 else f"optimal within the {100 * target:.2g} % target"
    best = max(result.bounds, key=lambda b: b.usd, default=None)
    source = f" (bound from the {best.source})" if best is not None else ""
    return f"within {100 * result.mip_gap:.2f} % of the best bound{source}"


def _cost_by_workload(inst: Instance, sol, proc: pd.DataFrame) -> dict[str, float]:
    """Each (site, accelerator)'s cost split by the workloads' replica GPU-hours there (idle
    capacity shared in the same proportion; nodes that only site-loss states use, which weigh
    no hours, by those states' replica GPUs); egress by each workload's served output."""
    weight = {st.id: st.weight_hours for st in inst.states}
    share: dict = {}
    spare: dict = {}
    for (pid, sid), n in sol.replicas.items():
        p = inst.pools[pid]
        share.setdefault((p.site, p.gpu), {}).setdefault(p.workload, 0.0)
        share[(p.site, p.gpu)][p.workload] += n * p.gpus * weight[sid]
        spare.setdefault((p.site, p.gpu), {}).setdefault(p.workload, 0.0)
        spare[(p.site, p.gpu)][p.workload] += n * p.gpus
    out = {k: 0.0 for k in inst.workloads}
    for row in proc.itertuples():
        if row.gpu == "egress":
            continue
        parts = share.get((row.site, row.gpu), {})
        if not sum(parts.values()):
            parts = spare.get((row.site, row.gpu), {})
        total = sum(parts.values())
        for k, v in parts.items():
            out[k] += row.cost_usd * v / total
    egress = {k: 0.0 for k in inst.workloads}
    for (m, site, k, tier, sid), x in sol.routes.items():
        egress[k] += SECONDS_PER_HOUR * weight[sid] * inst.egress_usd_per_request[k] * x
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


def carbon_summary(s, inst, proc, annual_tokens: float) -> dict:
    """What the plan's powered nodes emit in its year (procurement's carbon_t), per million
    output tokens served, its price and cap, and the sites the scenario has no grid data for."""
    tonnes = float(proc["carbon_t"].sum())
    cap = inst.carbon_cap_t
    return {
        "t_per_year": tonnes,
        "kg_per_million_tokens": tonnes * KG_PER_TONNE / annual_tokens * 1e6 if annual_tokens else None,
        "price_usd_per_t": inst.carbon_usd_per_t,
        "cost_usd": float(proc[COST_COLUMNS["carbon"]].sum()),
        "cap_t_per_year": cap,
        "over_cap_t": max(tonnes - cap, 0.0) if cap is not None else 0.0,
        "sites_without_grid_data": sorted(site for site in inst.sites if site not in s.grid_carbon),
    }


def _attainment(slo: pd.DataFrame | None, routing: pd.DataFrame, what: str) -> float | None:
    """Share of served requests on arcs whose predicted p99 meets the objective (None: not
    predicted)."""
    if slo is None:
        return None
    if slo.empty or routing.empty:
        return 1.0
    ok = slo[f"{what}_p99_ms_predicted"] <= slo[f"{what}_p99_ms_objective"] + 1e-6
    good = set(map(tuple, slo.loc[ok, ["metro", "workload", "site", "tier"]].to_numpy()))
    key = list(map(tuple, routing[["metro", "workload", "site", "tier"]].to_numpy()))
    mask = np.array([k in good for k in key])
    return float(routing.loc[mask, "requests_per_s"].sum() / routing["requests_per_s"].sum())
