"""Operate a plan hour by hour through a whole year: the commitment fixed, each hour's demand
served as the plan routes it, the pools and on-demand nodes sized to it.

The plan sizes its fleet on representative slices (period × day type × hour). Its year is
8,760 hours that differ: demand grows within a period (the plan sees the period's middle),
and days differ from their type's average. Here the committed nodes, the plan's pools
(configs, tiers, sites) and its routing are kept; every hour sizes its pools and rents its
on-demand nodes again.

Calendar   day d of the year lies in period p (periods in order, their days); its day type
           spreads the types over the period by their shares (largest deficit first); UTC
           hour h reads the planned hour nearest to it.
Demand     λ[m,k,h] = λ_slice[m,k,slice(d,h)] · (1 + g)^(pos(d) − ½) · ε[d,k]
           g the growth per period (modelled demand only), pos(d) ∈ (0,1) the day's position
           in its period (the plan sees the middle), ε[d,k] = exp(σ z − σ²/2), z ~ N(0,1)
           per (day, workload): day-to-day variation with mean 1 (σ = 0: none).
Routing    the plan's, as shares (`PlanShares`): each (metro, workload)'s requests spread over
           its arcs, each tier's over its pools, each prefill class's over its decode pools as
           in the slice the hour reads — a load balancer holding the plan's weights. At a
           slice's own demand the pools carry exactly the plan's loads.
Fleet      whole replicas, nodes, on-demand nodes, usable GPUs and kW by the one set of rules
           the plan was costed with (`optimizer.solve.fleet`): replicas n = min{n : f(n) ≥
           peak-to-mean · y} (and the decode slots), o = ⌈max(0, N − c) / (1 − φ)⌉ capped at
           the on-demand cap; hours reading the peak slice keep the on-demand nodes the plan
           holds for a site-loss contingency.
Re-routing an hour whose loads the fleet cannot host (GPUs short beyond the caps) is routed
           again by the plan's own formulation on a one-hour view (`optimizer.solve.fixed_commitment`:
           the commitment fixed, the plan's pools open) and keeps that routing where it leaves
           fewer GPUs short; such hours are counted (`hours_rerouted`).
Cost       commitment (as planned) + Σ_h on-demand $/node-h · o + ramps (rises of o within
           the year × cold-start hours × rate) + egress; the unserved penalty is reported apart.

Operating only the plan's own slices (`operate_slices`: each slice's demand, weighted by its
hours, ramps within its planned day) reproduces the plan's cost lines: both come from the same
loads and the same rules. The year differs from the plan by what the plan cannot see — growth
inside a period, and day-to-day variation.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.contracts import COMMITTED_CATEGORIES, COST_COLUMNS
from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.outputs import write_csv, write_text_atomic
from optimizer.base.units import HOURS_PER_DAY, HOURS_PER_YEAR, SECONDS_PER_HOUR, Role
from optimizer.folder.read import read_plan, scenario_of
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import Instance, build_instance
from optimizer.scenario import Scenario
from optimizer.solve.fixed_commitment import FixedCommitmentProgram
from optimizer.solve.fleet import (
    NO_LOAD_RPS,
    Hours,
    Solution,
    committed_nodes,
    gpus_in_replicas,
    nodes_for,
    ondemand_for,
    plan_hours,
    price_hours,
    procurement_table,
    replicas_for,
    replicas_needed,
)


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
    nearest = {h: min(planned, key=lambda p: min(abs(p - h), HOURS_PER_DAY - abs(p - h))) for h in range(HOURS_PER_DAY)}
    shares = [(d.id, d.share) for d in s.horizon.day_types]
    rows = []
    day = 0
    for period in s.horizon.periods:
        days = max(1, round(period.days))
        counts = {dt: 0 for dt, _ in shares}
        for i in range(days):
            dt = max(shares, key=lambda x: (i + 1) * x[1] - counts[x[0]])[0]
            counts[dt] += 1
            for h in range(HOURS_PER_DAY):
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


def demand_keys(inst: Instance) -> list[tuple[str, str]]:
    """Every (metro, workload) with demand in some slice, in order."""
    return sorted({(m, k) for m, k, _ in inst.demand})


# ---------------------------------------------------------------------------- the plan operated


@dataclass
class OperatedCommitment:
    """What the year is operated on: committed nodes per (site, accelerator), the plan's load per
    (pool, nominal state) and routes per (metro, site, workload, tier, nominal state), the GPUs
    its site-loss states need per (site, accelerator), what the commitment costs a year and the
    plan's own total cost."""

    nodes: dict[tuple[str, str], int]
    flows: dict[tuple[int, int], float]
    routes: dict[tuple, float]
    demand: dict[tuple[str, str, int], float]  # (metro, workload, state) → requests/s the plan was made for
    contingency_gpus: dict[tuple[str, str], int]
    committed_usd: float
    planned_total_usd: float

    @classmethod
    def of_solution(cls, inst: Instance, sol: Solution) -> "OperatedCommitment":
        nominal = {st.id for st in inst.states if st.lost_site is None}
        flows = {key: y for key, y in sol.flows.items() if key[1] in nominal}
        routes = {key: x for key, x in sol.routes.items() if key[4] in nominal}
        return cls(committed_nodes(sol), flows, routes, _planned_demand(inst, routes), _contingency_gpus(inst, sol.replicas),
                   *_costs(procurement_table(inst, sol)))

    @classmethod
    def of_plan(cls, inst: Instance, tables: dict[str, pd.DataFrame]) -> "OperatedCommitment":
        """From a plan folder's tables: procurement.csv, pools.csv and routing.csv."""
        proc = tables["procurement"]
        nodes = {(r.site, r.gpu): int(r.reserved_nodes) for r in proc.itertuples() if r.gpu != "egress" and r.reserved_nodes}
        state = _state_of(inst)
        pid = {(p.role, p.site, p.workload, p.tier, p.gpu, p.config.id, p.speed): p.id for p in inst.pools}
        flows, replicas = {}, {}
        for r in tables["pools"].itertuples():
            key = (r.role, r.site, r.workload, int(r.tier), r.gpu, r.config, int(r.speed))
            if key not in pid:
                raise ScenarioError(f"a {r.role} pool of {r.workload} at {r.site} ({r.config}) is not in the plan's "
                                    "scenario — was the folder edited?", Origin("pools.csv"), field="config")
            sid = state[(r.period, r.day_type, int(r.hour), r.lost_site if isinstance(r.lost_site, str) and r.lost_site else None)]
            replicas[(pid[key], sid)] = int(r.replicas)
            if r.requests_per_s > 0 and inst.states[sid].lost_site is None:
                flows[(pid[key], sid)] = float(r.requests_per_s)
        routes = {(r.metro, r.site, r.workload, int(r.tier), state[(r.period, r.day_type, int(r.hour), None)]):
                  float(r.requests_per_s) for r in tables["routing"].itertuples() if r.requests_per_s > 0}
        return cls(nodes, flows, routes, _planned_demand(inst, routes), _contingency_gpus(inst, replicas), *_costs(proc))


def _planned_demand(inst: Instance, routes: dict) -> dict:
    """The demand the plan was made for: its instance's, and at least what it routed."""
    out = {(m, k, st.id): inst.demand.get((m, k, st.slice), 0.0) for st in inst.states if st.lost_site is None
           for m, k in {(m, k) for m, k, t in inst.demand if t == st.slice}}
    routed: dict = {}
    for (m, _, k, _, sid), x in routes.items():
        routed[(m, k, sid)] = routed.get((m, k, sid), 0.0) + x
    return {key: max(out.get(key, 0.0), routed.get(key, 0.0)) for key in out.keys() | routed.keys()}


def _state_of(inst: Instance) -> dict:
    """(period, day type, hour, lost site) → state id."""
    where = {t: (r.period, r.day_type, int(r.hour)) for t, r in inst.slices.iterrows()}
    return {(*where[st.slice], st.lost_site): st.id for st in inst.states}


def _contingency_gpus(inst: Instance, replicas: dict) -> dict[tuple[str, str], int]:
    """The most GPUs any site-loss state's replicas need per (site, accelerator)."""
    out: dict = {}
    for (s, g, sid), n in gpus_in_replicas(inst, replicas).items():
        if inst.states[sid].lost_site is not None:
            out[(s, g)] = max(out.get((s, g), 0), n)
    return out


def _costs(proc: pd.DataFrame) -> tuple[float, float]:
    """(what the commitment costs a year, the plan's total cost)."""
    columns = [COST_COLUMNS[c] for c in COMMITTED_CATEGORIES]
    committed = float(proc[columns].fillna(0).sum().sum())
    return committed, float(proc["cost_usd"].sum())


class PlanShares:
    """The plan's routing as a linear map from an hour's demand to its pools' loads, per slice:
    each (metro, workload)'s requests spread over its arcs as the plan routed them, each (site,
    workload, tier)'s over its prefill and colocated pools as the plan split them, each prefill
    class's over its decode pools likewise. An hour reading slice t with demand λ (per key)
    gives its pools y = M_t · λ, and at the slice's own demand exactly the plan's loads."""

    def __init__(self, inst: Instance, commitment: OperatedCommitment, keys: list[tuple[str, str]]):
        self.keys = keys
        self.pools = sorted({pid for pid, _ in commitment.flows})
        self._column = {pid: j for j, pid in enumerate(self.pools)}
        self._key = {key: i for i, key in enumerate(keys)}
        self.maps: dict[int, np.ndarray] = {}  # slice → pools × keys
        self.egress: dict[int, np.ndarray] = {}  # slice → $ per hour per request/s of each key
        for st in inst.states:
            if st.lost_site is None:
                self.maps[st.slice], self.egress[st.slice] = self._slice_map(inst, commitment, st)

    def _slice_map(self, inst: Instance, commitment: OperatedCommitment, st) -> tuple[np.ndarray, np.ndarray]:
        m = np.zeros((len(self.pools), len(self.keys)))
        egress = np.zeros(len(self.keys))
        into: dict = {}  # (site, workload, tier) → share of each key's requests routed into it
        for (metro, site, k, tier, sid), x in commitment.routes.items():
            if sid == st.id:
                i = self._key[(metro, k)]
                share = x / commitment.demand[(metro, k, st.id)]
                into.setdefault((site, k, tier), np.zeros(len(self.keys)))[i] += share
                egress[i] += share * SECONDS_PER_HOUR * inst.egress_usd_per_request[k]
        groups: dict = {}
        for (pid, sid), y in commitment.flows.items():
            if sid == st.id:
                p = inst.pools[pid]
                group = (p.site, p.workload, p.speed) if p.role == Role.DECODE else (p.site, p.workload, p.tier)
                groups.setdefault((p.role == Role.DECODE, group), []).append((pid, y))
        handed: dict = {}  # (site, workload, decode class) → share of each key's requests handed to decode
        for (is_decode, group), members in sorted(groups.items()):  # entry pools first
            total = sum(y for _, y in members)
            feed = handed if is_decode else into
            for pid, y in members:
                row = feed.get(group, np.zeros(len(self.keys))) * (y / total)
                m[self._column[pid]] = row
                p = inst.pools[pid]
                if p.role == Role.PREFILL:
                    handed[(p.site, p.workload, p.speed)] = handed.get((p.site, p.workload, p.speed), 0.0) + row
        return m, egress

    def loads(self, slices: np.ndarray, demand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pool loads, hours × pools; egress $ per hour) for hours reading ``slices`` with
        ``demand`` (hours × keys)."""
        loads = np.zeros((len(slices), len(self.pools)))
        egress = np.zeros(len(slices))
        for t in np.unique(slices):
            rows = np.flatnonzero(slices == t)
            loads[rows] = demand[rows] @ self.maps[int(t)].T
            egress[rows] = demand[rows] @ self.egress[int(t)]
        return loads, egress


def _gpus(inst: Instance, pools: list[int], loads: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    """GPUs in whole replicas per (site, accelerator) for each hour's pool loads."""
    gpus = {key: np.zeros(len(loads), dtype=np.int64) for key in inst.site_gpus}
    for j, pid in enumerate(pools):
        p = inst.pools[pid]
        gpus[(p.site, p.gpu)] += p.gpus * replicas_needed(p, loads[:, j])
    return gpus


def _floor(inst: Instance, commitment: OperatedCommitment, s: str, g: str, reads_peak: np.ndarray) -> np.ndarray:
    """On-demand nodes the hours reading the peak slice keep for the plan's site-loss states."""
    need = nodes_for(commitment.contingency_gpus.get((s, g), 0), inst.gpus_per_node[g])
    return np.where(reads_peak, ondemand_for(need, commitment.nodes.get((s, g), 0), inst.warm_fraction), 0)


def _fleet(inst: Instance, commitment: OperatedCommitment, gpus: dict, hours: Hours, slices: np.ndarray) -> dict:
    """(site, accelerator) → its `fleet.Priced` hours, each hour reading one of ``slices``."""
    reads_peak = slices == inst.peak_slice
    return {(s, g): price_hours(inst, s, g, commitment.nodes.get((s, g), 0), need, hours, slices,
                                _floor(inst, commitment, s, g, reads_peak))
            for (s, g), need in gpus.items()}


def _reroute(inst: Instance, commitment: OperatedCommitment, shares: PlanShares, lam: np.ndarray, hours: np.ndarray,
             slices: np.ndarray, loads: np.ndarray, egress: np.ndarray) -> np.ndarray:
    """The hours ``hours`` routed again by the operating program, each pool priced at its whole
    replicas over its load under the plan's routing that hour (exact there, so the program moves
    load only where the fleet cannot host it); an hour keeps the new routing where it leaves
    fewer GPUs short. Updates ``loads`` and ``egress`` in place; returns the hours that changed."""
    if not len(hours):
        return np.zeros(0, dtype=np.int64)
    sizes: dict = {}
    for (pid, _), y in commitment.flows.items():
        sizes[pid] = max(sizes.get(pid, 0), replicas_for(inst.pools[pid], y))
    program = FixedCommitmentProgram(inst, commitment.nodes, sizes)
    assert program.keys == shares.keys  # both every (metro, workload) with demand, sorted
    one = Hours.sequence(1)
    changed = []
    for h in hours:
        program.price({pid: inst.pools[pid].gpus * replicas_for(inst.pools[pid], y) / y
                       for pid, y in zip(shares.pools, loads[h]) if y > NO_LOAD_RPS})
        x, _ = program.solve(lam[h])
        new = np.zeros((1, len(shares.pools)))
        for pid, col in zip(program.pools, program.flow_cols):
            if pid in shares._column:
                new[0, shares._column[pid]] += max(float(x[col]), 0.0)
        short = [sum(p.gpus_short.sum() for p in _fleet(inst, commitment, _gpus(inst, shares.pools, y), one,
                                                         slices[h:h + 1]).values())
                 for y in (loads[h][None, :], new)]
        if short[1] < short[0]:
            loads[h] = new[0]
            egress[h] = float(program.egress_usd @ np.maximum(x[program.route_cols], 0.0))
            changed.append(h)
    return np.array(changed, dtype=np.int64)


def operate_year(s: Scenario, inst: Instance, commitment: OperatedCommitment, *, noise_sigma: float = 0.0, seed: int = 0,
                 progress=None) -> Operations:
    """Operate a commitment and its pools through every hour of the year (module docstring)."""
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    cal = calendar(s, inst)
    keys = demand_keys(inst)
    lam = hourly_demand(s, inst, cal, keys, noise_sigma, seed)
    say(f"operating {len(cal):,} hours on the plan's commitment, as the plan routes them")
    shares = PlanShares(inst, commitment, keys)
    slices = cal["slice"].to_numpy()
    loads, egress = shares.loads(slices, lam)
    year = Hours.sequence(len(cal))
    fleet = _fleet(inst, commitment, _gpus(inst, shares.pools, loads), year, slices)
    short = np.flatnonzero(sum(p.gpus_short for p in fleet.values()) > 0)
    rerouted = _reroute(inst, commitment, shares, lam, short, slices, loads, egress)
    if len(rerouted):
        fleet = _fleet(inst, commitment, _gpus(inst, shares.pools, loads), year, slices)
    solve_s = time.perf_counter() - start
    hours, sites = _cost_hours(inst, commitment, cal, fleet, _gpus(inst, shares.pools, loads))
    entry = [j for j, pid in enumerate(shares.pools) if inst.pools[pid].role != Role.DECODE]
    hours["demand_rps"] = lam.sum(axis=1)
    hours["served_rps"] = loads[:, entry].sum(axis=1)
    hours["unserved_rps"] = np.maximum(hours["demand_rps"] - hours["served_rps"], 0.0)
    hours["egress_usd"] = egress
    hours["rerouted"] = np.isin(np.arange(len(cal)), rerouted)
    summary = _summary(commitment, hours, lam, noise_sigma, seed, solve_s, time.perf_counter() - start)
    say(f"operated {len(cal):,} hours in {summary['wall_seconds']:.1f} s")
    return Operations(hours, sites, summary)


def operate_slices(inst: Instance, commitment: OperatedCommitment) -> pd.DataFrame:
    """The plan's own slices operated (each its slice's demand, weighted by its hours, ramps
    within its planned day): per (site, accelerator), on-demand node-hours, ramp node-hours and
    their cost — which reproduce the plan's procurement lines."""
    keys = demand_keys(inst)
    ids, hours = plan_hours(inst)
    slices = np.array([inst.states[sid].slice for sid in ids])
    lam = np.array([[inst.demand.get((m, k, t), 0.0) for m, k in keys] for t in slices])
    shares = PlanShares(inst, commitment, keys)
    loads, _ = shares.loads(slices, lam)
    fleet = _fleet(inst, commitment, _gpus(inst, shares.pools, loads), hours, slices)
    rows = [{"site": s, "gpu": g, "ondemand_node_hours": float(p.ondemand @ hours.weight_hours),
             "ramp_node_hours": float(hours.rises(p.ondemand) @ hours.repeats) * inst.cold_start_hours,
             "cost_ondemand_usd": float(p.ondemand_usd.sum()), "cost_ramp_usd": float(p.ramp_usd.sum()),
             "carbon_t": float(p.carbon_t.sum()), "cost_carbon_usd": float(p.carbon_usd.sum())}
            for (s, g), p in fleet.items() if p.ondemand.any() or p.carbon_t.any()]
    return pd.DataFrame(rows, columns=["site", "gpu", "ondemand_node_hours", "ramp_node_hours", "cost_ondemand_usd",
                                       "cost_ramp_usd", "carbon_t", "cost_carbon_usd"])


def _cost_hours(inst: Instance, commitment: OperatedCommitment, cal: pd.DataFrame, fleet: dict,
                gpus: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    hours = cal[["day", "period", "day_type", "utc_hour"]].copy()
    hours.insert(0, "hour_of_year", np.arange(len(cal)))
    hours["ondemand_nodes"] = sum(p.ondemand for p in fleet.values())
    hours["ondemand_usd"] = sum(p.ondemand_usd for p in fleet.values())
    hours["ramp_usd"] = sum(p.ramp_usd for p in fleet.values())
    hours["carbon_t"] = sum(p.carbon_t for p in fleet.values())
    hours["carbon_usd"] = sum(p.carbon_usd for p in fleet.values())
    hours["gpus_short"] = sum(p.gpus_short for p in fleet.values())
    kw = {site: np.zeros(len(cal)) for site in inst.sites}
    rows = []
    for (s, g), p in fleet.items():
        c = commitment.nodes.get((s, g), 0)
        cap = inst.ondemand_max[(s, g)]
        kw[s] += p.kw
        need = gpus[(s, g)]
        if c or p.ondemand.any():
            rows.append({"site": s, "gpu": g, "committed_nodes": c, "ondemand_nodes_peak": int(p.ondemand.max()),
                         "ondemand_cap": cap, "ondemand_node_hours": int(p.ondemand.sum()),
                         "hours_at_cap": int((p.wanted >= cap).sum() if cap else 0), "gpus_busy_peak": int(need.max()),
                         "gpu_utilisation": float(need.sum() / max((c * HOURS_PER_YEAR + p.ondemand.sum())
                                                                   * inst.gpus_per_node[g], 1)),
                         "ondemand_usd": float(p.ondemand_usd.sum()), "ramp_usd": float(p.ramp_usd.sum()),
                         "carbon_t": float(p.carbon_t.sum()), "carbon_usd": float(p.carbon_usd.sum()),
                         "hours_short": int((p.gpus_short > 0).sum())})
    hours["sites_over_power"] = sum((kw[site] > inst.power_kw[site] * (1 + 1e-9)).astype(int) for site in inst.sites)
    return hours, pd.DataFrame(rows)


def _summary(commitment: OperatedCommitment, hours, lam, sigma, seed, solve_s, wall_s) -> dict:
    committed_usd = commitment.committed_usd
    ondemand = float(hours["ondemand_usd"].sum())
    ramp = float(hours["ramp_usd"].sum())
    egress = float(hours["egress_usd"].sum())
    carbon = float(hours["carbon_usd"].sum())
    total = committed_usd + ondemand + ramp + egress + carbon
    planned = commitment.planned_total_usd
    requests = float(lam.sum()) * SECONDS_PER_HOUR
    return {
        "hours": int(len(hours)), "noise_sigma": sigma, "seed": seed,
        "solve_seconds": solve_s, "wall_seconds": wall_s,
        "hours_rerouted": int(hours["rerouted"].sum()),
        "committed_usd": committed_usd, "ondemand_usd": ondemand, "ramp_usd": ramp, "egress_usd": egress,
        "carbon_usd": carbon, "carbon_t": float(hours["carbon_t"].sum()),
        "total_cost_usd": total, "planned_total_cost_usd": planned,
        "cost_vs_plan": total / planned - 1 if planned else 0.0,
        "unserved_fraction": float(hours["unserved_rps"].sum()) * SECONDS_PER_HOUR / requests if requests else 0.0,
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
    return operate_year(s, inst, OperatedCommitment.of_plan(inst, plan.tables), noise_sigma=noise_sigma, seed=seed,
                        progress=progress)


def write_operations(ops: Operations, plan_dir) -> Path:
    """operations.csv (hours), operations_sites.csv and operations.json beside the plan; each
    written to a temporary name first, then renamed."""
    d = Path(plan_dir)
    for name, frame in (("operations.csv", ops.hours), ("operations_sites.csv", ops.sites)):
        write_csv(frame, d / name)
    write_text_atomic(d / "operations.json", json.dumps(ops.summary, indent=2))
    return d / "operations.csv"


def operations_text(ops: Operations, plan_dir) -> str:
    """A year operated: the sites' table, the cost against the plan's, the hours that went wrong."""
    sm = ops.summary
    return "\n".join([
        ops.sites.to_string(index=False, float_format=lambda x: f"{x:,.4g}"),
        f"{sm['hours']:,} hours operated in {sm['wall_seconds']:.1f} s: ${sm['total_cost_usd']:,.0f} "
        f"({100 * sm['cost_vs_plan']:+.2f} % against the plan's ${sm['planned_total_cost_usd']:,.0f}); "
        f"on-demand peak {sm['ondemand_nodes_peak']} nodes; hours with unserved demand {sm['hours_with_unserved']}, "
        f"short of GPUs {sm['hours_short_of_gpus']}, over power {sm['hours_over_power']}",
        f"written: {Path(plan_dir) / 'operations.csv'}",
    ])
