"""Operate a plan hour by hour through a whole year: the commitment fixed, each hour routed
and provisioned on its own demand.

The plan sizes its fleet on representative slices (period × day type × hour). Its year is
8,760 hours that differ: demand grows within a period (the plan sees the period's middle),
and days differ from their type's average. Here the committed nodes and the plan's pools
(configs, tiers, sites) are kept; every hour chooses routing and on-demand nodes again.

Calendar   day d of the year lies in period p (periods in order, their days); its day type
           spreads the types over the period by their shares (largest deficit first); UTC
           hour h reads the planned hour nearest to it.
Demand     λ[m,k,h] = λ_slice[m,k,slice(d,h)] · (1 + g)^(pos(d) − ½) · ε[d,k]
           g the growth per period (modelled demand only), pos(d) ∈ (0,1) the day's position
           in its period (the plan sees the middle), ε[d,k] = exp(σ z − σ²/2), z ~ N(0,1)
           per (day, workload): day-to-day variation with mean 1 (σ = 0: none).
Each hour  the plan's own linear program (`formulations`) on a one-hour view of the instance,
           the commitment fixed and costing nothing more, only the plan's pools open, each
           priced at κ of its largest planned size (`optimizer.solve.operating`); one program
           for the year, warm-started from the hour before, only the demand changes. Its
           flows are then made whole: replicas n = min{n : f(n) ≥ peak-to-mean · y} (and the
           decode slots), nodes o = ⌈max(0, GPUs/GPUs-per-node − c) / (1 − φ)⌉ capped at the
           on-demand cap; GPUs beyond the cap are reported short, never hidden.
Cost       commitment (as planned) + Σ_h on-demand $/node-h · o + ramps (rises of o within
           the year × cold-start hours × rate) + egress; the unserved penalty is reported apart.
One process runs the hours in order (see `optimizer.solve.operating`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.contracts import COMMITTED_CATEGORIES, COST_COLUMNS
from optimizer.costing import Solution, procurement_table
from optimizer.curves.queueing import servers_needed_many
from optimizer.errors import Origin, ScenarioError
from optimizer.folder.read import read_plan, scenario_of
from optimizer.instance import Instance, Pool, build_instance
from optimizer.network import build_graph, rtt_matrix
from optimizer.outputs import write_csv, write_text_atomic
from optimizer.scenario import Scenario
from optimizer.solve.operating import OperatingProgram, committed_nodes, largest_sizes
from optimizer.units import HOURS_PER_YEAR, SECONDS_PER_HOUR, Role


@dataclass
class Operations:
    hours: pd.DataFrame  # one row per hour of the year
    sites: pd.DataFrame  # one row per (site, accelerator)
    summary: dict


def calendar(s: Scenario, inst: Instance) -> pd.DataFrame:
    """One row per hour of the year: day, period, day type, UTC hour, the slice it reads and
    the day's position in its period."""
    slice_of = {(r.period, r.day_type, r.hour): t for t, r in inst.slices.iterrows()}
    planned = sorted(inst.slices["hour"].unique())
    nearest = {h: min(planned, key=lambda p: min(abs(p - h), 24 - abs(p - h))) for h in range(24)}
    shares = [(d.id, d.share) for d in s.horizon.day_types]
    rows = []
    day = 0
    for period in s.horizon.periods:
        days = max(1, round(period.days))
        counts = {dt: 0 for dt, _ in shares}
        for i in range(days):
            dt = max(shares, key=lambda x: (i + 1) * x[1] - counts[x[0]])[0]
            counts[dt] += 1
            for h in range(24):
                rows.append((day, period.id, dt, h, slice_of[(period.id, dt, nearest[h])], (i + 0.5) / days))
            day += 1
    return pd.DataFrame(rows, columns=["day", "period", "day_type", "utc_hour", "slice", "period_position"])


def hourly_demand(s: Scenario, inst: Instance, cal: pd.DataFrame, keys: list[tuple[str, str]],
                  noise_sigma: float, seed: int) -> np.ndarray:
    """Requests/s per (hour, (metro, workload) key) — see the module docstring."""
    slices = cal["slice"].to_numpy()
    base = np.array([[inst.demand.get((m, k, t), 0.0) for m, k in keys] for t in range(len(inst.slices))])
    lam = base[slices]
    if s.demand.table is None and s.demand.growth_per_period:
        lam *= ((1 + s.demand.growth_per_period) ** (cal["period_position"].to_numpy() - 0.5))[:, None]
    if noise_sigma > 0:
        rng = np.random.default_rng(seed)
        days = cal["day"].to_numpy()
        workloads = sorted({k for _, k in keys})
        z = rng.standard_normal((days.max() + 1, len(workloads)))
        factor = np.exp(noise_sigma * z - noise_sigma ** 2 / 2)
        col = np.array([workloads.index(k) for _, k in keys])
        lam *= factor[days][:, col]
    return lam


@dataclass
class Commitment:
    """What the year is operated on: committed nodes per (site, accelerator), what they cost
    a year, the plan's pools with their largest size, and the plan's own total cost."""

    nodes: dict[tuple[str, str], int]
    pool_sizes: dict[int, int]  # pool id → largest planned replicas
    committed_usd: float
    planned_total_usd: float

    @classmethod
    def of_solution(cls, inst: Instance, sol: Solution) -> "Commitment":
        return cls(committed_nodes(sol), largest_sizes(sol), *_costs(procurement_table(inst, sol)))

    @classmethod
    def of_plan(cls, inst: Instance, tables: dict[str, pd.DataFrame]) -> "Commitment":
        """From a plan folder's tables: procurement.csv and pools.csv (nominal states)."""
        proc = tables["procurement"]
        nodes = {(r.site, r.gpu): int(r.reserved_nodes) for r in proc.itertuples() if r.gpu != "egress" and r.reserved_nodes}
        pid = {(p.role, p.site, p.workload, p.tier, p.gpu, p.config.id, p.speed): p.id for p in inst.pools}
        pools = tables["pools"]
        if "lost_site" in pools:
            pools = pools[pools["lost_site"].isna() | (pools["lost_site"] == "")]
        sizes: dict = {}
        for r in pools.itertuples():
            key = (r.role, r.site, r.workload, int(r.tier), r.gpu, r.config, int(r.speed))
            if key not in pid:
                raise ScenarioError(f"a {r.role} pool of {r.workload} at {r.site} ({r.config}) is not in the plan's "
                                    "scenario — was the folder edited?", Origin("pools.csv"), field="config")
            sizes[pid[key]] = max(sizes.get(pid[key], 0), int(r.replicas))
        return cls(nodes, sizes, *_costs(proc))


def _costs(proc: pd.DataFrame) -> tuple[float, float]:
    """(what the commitment costs a year, the plan's total cost)."""
    columns = [COST_COLUMNS[c] for c in COMMITTED_CATEGORIES]
    committed = float(proc[columns].fillna(0).sum().sum())
    return committed, float(proc["cost_usd"].sum())


def _run_hours(lam: np.ndarray, program: OperatingProgram) -> dict:
    """Solve the hours in order; returns per-hour flows (by ``program.pools``), egress and unserved."""
    out = {"flows": np.zeros((len(lam), len(program.flow_cols))), "unserved": np.zeros((len(lam), len(program.keys))),
           "egress_usd": np.zeros(len(lam)), "status": []}
    for i, values in enumerate(lam):
        x, optimal = program.solve(values)
        out["status"].append(optimal)
        out["flows"][i] = np.maximum(x[program.flow_cols], 0.0)
        out["unserved"][i] = np.maximum(x[program.unserved_cols], 0.0)
        out["egress_usd"][i] = float(program.egress_usd @ np.maximum(x[program.route_cols], 0.0))
    return out


def _whole_replicas(p: Pool, load: np.ndarray) -> np.ndarray:
    """Whole replicas for each hour's peak-sized load (as `instance.replicas_for`)."""
    n = np.zeros(len(load), dtype=np.int64)
    if p.table is not None:
        n = servers_needed_many(load, p.table)
    if p.role in (Role.DECODE, Role.COLOCATED):
        n = np.maximum(n, np.ceil(load / p.decode_rps - 1e-9).astype(np.int64))
    return np.where(load > 1e-12, n, 0)


def operate_year(s: Scenario, inst: Instance, commitment: Commitment, *, noise_sigma: float = 0.0, seed: int = 0,
                 progress=None) -> Operations:
    """Operate a commitment and its pools through every hour of the year (module docstring)."""
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    cal = calendar(s, inst)
    program = OperatingProgram(inst, commitment.nodes, commitment.pool_sizes)
    lam = hourly_demand(s, inst, cal, program.keys, noise_sigma, seed)
    say(f"operating {len(cal):,} hours on the plan's commitment")
    run = _run_hours(lam, program)
    solve_s = time.perf_counter() - start
    pools = [inst.pools[pid] for pid in program.pools]
    flows, unserved = run["flows"], run["unserved"]
    gpus = {key: np.zeros(len(cal)) for key in inst.site_gpus}
    for j, p in enumerate(pools):
        gpus[(p.site, p.gpu)] += p.gpus * _whole_replicas(p, p.peak_to_mean * flows[:, j])
    hours, sites = _cost_hours(inst, commitment, cal, gpus)
    hours["demand_rps"] = lam.sum(axis=1)
    hours["served_rps"] = flows[:, [j for j, p in enumerate(pools) if p.role != Role.DECODE]].sum(axis=1)
    hours["unserved_rps"] = unserved.sum(axis=1)
    hours["egress_usd"] = run["egress_usd"]
    hours["solved"] = run["status"]
    summary = _summary(commitment, hours, lam, unserved, noise_sigma, seed, solve_s, time.perf_counter() - start)
    say(f"operated {len(cal):,} hours in {summary['wall_seconds']:.1f} s")
    return Operations(hours, sites, summary)


def _cost_hours(inst: Instance, commitment: Commitment, cal: pd.DataFrame, gpus: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    committed = commitment.nodes
    hours = cal[["day", "period", "day_type", "utc_hour"]].copy()
    hours.insert(0, "hour_of_year", np.arange(len(cal)))
    hours["ondemand_nodes"] = 0
    hours["ondemand_usd"] = 0.0
    hours["ramp_usd"] = 0.0
    hours["gpus_short"] = 0
    rows = []
    kw = np.zeros((len(cal), len(inst.sites)))
    for s, g in inst.site_gpus:
        need = gpus[(s, g)]
        per_node = inst.gpus_per_node[g]
        c = committed.get((s, g), 0)
        cap = inst.ondemand_max[(s, g)] if inst.allow_ondemand else 0
        nodes = np.ceil(need / per_node - 1e-9)
        wanted = np.ceil(np.maximum(nodes - c, 0) / (1 - inst.warm_fraction) - 1e-9).astype(np.int64)
        o = np.minimum(wanted, cap)
        usable = (c + np.floor((1 - inst.warm_fraction) * o + 1e-9)) * per_node
        short = np.maximum(need - usable, 0).astype(np.int64)
        rate = inst.contracts[(s, g)].ondemand
        rises = np.maximum(np.diff(o, prepend=o[-1]), 0)
        hours["ondemand_nodes"] += o
        hours["ondemand_usd"] += rate * o
        hours["ramp_usd"] += rate * inst.cold_start_hours * rises
        hours["gpus_short"] += short
        kw[:, inst.sites.index(s)] += inst.node_kw[g] * inst.pue[s] * (c + o)
        if c or o.any():
            rows.append({"site": s, "gpu": g, "committed_nodes": c, "ondemand_nodes_peak": int(o.max()),
                         "ondemand_cap": cap, "ondemand_node_hours": int(o.sum()), "hours_at_cap": int((wanted >= cap).sum() if cap else 0),
                         "gpus_busy_peak": int(need.max()), "gpu_utilisation": float(need.sum() / max((c * HOURS_PER_YEAR + o.sum()) * per_node, 1)),
                         "ondemand_usd": float(rate * o.sum()), "ramp_usd": float(rate * inst.cold_start_hours * rises.sum()),
                         "hours_short": int((short > 0).sum())})
    power = np.array([inst.power_kw[s] for s in inst.sites])
    hours["sites_over_power"] = (kw > power * (1 + 1e-9)).sum(axis=1)
    return hours, pd.DataFrame(rows)


def _summary(commitment: Commitment, hours, lam, unserved, sigma, seed, solve_s, wall_s) -> dict:
    committed_usd = commitment.committed_usd
    ondemand = float(hours["ondemand_usd"].sum())
    ramp = float(hours["ramp_usd"].sum())
    egress = float(hours["egress_usd"].sum())
    total = committed_usd + ondemand + ramp + egress
    planned = commitment.planned_total_usd
    requests = float(lam.sum()) * SECONDS_PER_HOUR
    return {
        "hours": int(len(hours)), "noise_sigma": sigma, "seed": seed,
        "solve_seconds": solve_s, "wall_seconds": wall_s,
        "hours_not_optimal": int((~hours["solved"]).sum()),
        "committed_usd": committed_usd, "ondemand_usd": ondemand, "ramp_usd": ramp, "egress_usd": egress,
        "total_cost_usd": total, "planned_total_cost_usd": planned,
        "cost_vs_plan": total / planned - 1 if planned else 0.0,
        "unserved_fraction": float(unserved.sum()) * SECONDS_PER_HOUR / requests if requests else 0.0,
        "hours_with_unserved": int((hours["unserved_rps"] > 1e-6).sum()),
        "hours_short_of_gpus": int((hours["gpus_short"] > 0).sum()),
        "hours_over_power": int((hours["sites_over_power"] > 0).sum()),
        "ondemand_nodes_peak": int(hours["ondemand_nodes"].max()),
    }


def operate_plan(plan_dir, *, noise_sigma: float = 0.0, seed: int = 0, progress=None) -> Operations:
    """Operate a plan folder's commitment through the year of its own scenario."""
    plan = read_plan(plan_dir)
    s = scenario_of(plan, plan_dir)
    inst = build_instance(s, rtt_matrix(build_graph(s, Path(plan_dir)), s))
    return operate_year(s, inst, Commitment.of_plan(inst, plan.tables), noise_sigma=noise_sigma, seed=seed,
                        progress=progress)


def write_operations(ops: Operations, plan_dir) -> Path:
    """operations.csv (hours), operations_sites.csv and operations.json beside the plan; each
    written to a temporary name first, then renamed."""
    d = Path(plan_dir)
    for name, frame in (("operations.csv", ops.hours), ("operations_sites.csv", ops.sites)):
        write_csv(frame, d / name)
    write_text_atomic(d / "operations.json", json.dumps(ops.summary, indent=2))
    return d / "operations.csv"
