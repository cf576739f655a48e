"""A fleet made whole and priced — the one place it is done.

A plan's load per pool and hour becomes whole replicas; the replicas, GPUs per (site,
accelerator); the GPUs, whole nodes. On a commitment of c nodes an hour that needs N nodes
rents on demand

    o = ⌈max(0, N − c) / (1 − φ)⌉        (φ: the warm-pool share of rented nodes, kept idle)

which leaves (c + ⌊(1 − φ)·min(o, cap)⌋)·G usable GPUs (G per node, cap the on-demand supply)
and draws node kW · PUE · (c + o). An hour that starts r = max(0, o_h − o_{h−1}) nodes pays
their cold start, r · cold-start hours · the on-demand rate, once each time the hour recurs (a
planned hour on each day of its day type); rises are counted over a cycle of hours that wraps
(a planned day of a (period, day type); the year's 8,760 hours).

Every consumer reads these rules from here: the plan's cost lines and commitment
(`procurement_table`; the commitment rule of `optimizer.solve.commitments`, with which
`optimizer.solve.repair` makes a master solution whole), its per-slice node table (`node_table`, the
report's provisioning chart), the hours of an operated year (`price_hours`), the supply a
repair may fill (`supply_gpus`), the power a diagnosis reads (`site_kw`) and the summary's
fleet figures (`fleet_hours`, `gpus_by_type_peak`). Predicted latencies per routed arc are
the prediction module's (`optimizer.results.latency`).

The unserved-demand penalty is not a cost the fleet pays and is reported apart."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from optimizer.base.contracts import COST_COLUMNS, TERMS
from optimizer.base.spot import is_spot
from optimizer.base.units import HOURS_PER_YEAR, KG_PER_TONNE, KW_PER_MW, SECONDS_PER_HOUR, Role
from optimizer.curves.queueing import servers_needed, servers_needed_many
from optimizer.instance.build import Instance
from optimizer.instance.pools import Pool

NO_LOAD_RPS = 1e-12  # below this a pool carries nothing and needs no replica
ROUNDING = 1e-9  # slack on ⌈·⌉ and ⌊·⌋ of quotients that are whole up to floating point


@dataclass
class Solution:
    """A plan's decisions, whole where the world is whole."""

    committed: dict[tuple[str, str, str], int]  # (site, gpu, term) → nodes
    ondemand: dict[tuple[str, str, int], int]  # (site, gpu, state) → nodes
    flows: dict[tuple[int, int], float]  # (pool, state) → requests/s
    replicas: dict[tuple[int, int], int]  # (pool, state) → replicas
    routes: dict[tuple, float]  # (metro, site, workload, tier, state) → requests/s
    unserved: dict[tuple[str, str, int], float]  # (metro, workload, state) → requests/s
    violations: list[str] = field(default_factory=list)
    gpus_short: dict[tuple[str, str, int], int] = field(default_factory=dict)  # beyond supply caps
    kw_over: dict[tuple[str, int], float] = field(default_factory=dict)  # beyond a site's power


# ---------------------------------------------------------------------------- replicas


def replicas_needed(pool: Pool, mean_rps) -> np.ndarray:
    """Whole replicas for mean loads (requests/s, any shape), sized for peak-to-mean × the load:
    the smallest n with f(n) ≥ the peak-sized load for a queueing side (prefill, colocated), and
    ⌈load / decode capacity⌉ for a decode side (decode, colocated); 0 where nothing is carried."""
    load = pool.peak_to_mean * np.asarray(mean_rps, dtype=float)
    n = np.zeros(load.shape, dtype=np.int64)
    if pool.table is not None:
        n = servers_needed_many(load, pool.table)
    if pool.role in (Role.DECODE, Role.COLOCATED):
        n = np.maximum(n, np.ceil(load / pool.decode_rps - ROUNDING).astype(np.int64))
    return np.where(load > NO_LOAD_RPS, n, 0)


def replicas_for(pool: Pool, mean_rps: float) -> int:
    """`replicas_needed` of one load (the same rule, without arrays: searches price thousands)."""
    load = pool.peak_to_mean * mean_rps
    if load <= NO_LOAD_RPS:
        return 0
    n = servers_needed(load, pool.table) if pool.table is not None else 0
    if pool.role in (Role.DECODE, Role.COLOCATED):
        n = max(n, math.ceil(load / pool.decode_rps - ROUNDING))
    return n


def capacity_rps(pool: Pool, n: int) -> float:
    """Mean requests/s that n whole replicas carry inside their objectives — the inverse of
    `replicas_needed` (beyond the capacity table, f grows at its last per-replica capacity)."""
    if n <= 0:
        return 0.0
    cap = math.inf
    if pool.table is not None:
        table = pool.table
        cap = float(table[min(n, len(table)) - 1]) + max(0, n - len(table)) * float(table[-1]) / len(table)
    if pool.role in (Role.DECODE, Role.COLOCATED):
        cap = min(cap, pool.decode_rps * n)
    return cap / pool.peak_to_mean


def whole_replicas(inst: Instance, flows: dict[tuple[int, int], float]) -> dict[tuple[int, int], int]:
    """Whole replicas of every (pool, state) load."""
    return {key: replicas_for(inst.pools[key[0]], y) for key, y in flows.items()}


# ---------------------------------------------------------------------------- nodes and power


def gpus_in_replicas(inst: Instance, replicas: dict[tuple[int, int], int]) -> dict[tuple[str, str, int], int]:
    """GPUs the replicas occupy per (site, accelerator, state)."""
    gpus: dict[tuple[str, str, int], int] = {}
    for (pid, sid), n in replicas.items():
        if n:
            p = inst.pools[pid]
            gpus[(p.site, p.gpu, sid)] = gpus.get((p.site, p.gpu, sid), 0) + n * p.gpus
    return gpus


def nodes_for(gpus, gpus_per_node: int):
    """Whole nodes that hold ``gpus`` GPUs."""
    return np.ceil(np.asarray(gpus, dtype=float) / gpus_per_node - ROUNDING).astype(np.int64)


def ondemand_for(nodes_needed, committed, warm_fraction: float):
    """On-demand nodes an hour rents beyond ``committed``: ⌈max(0, N − c) / (1 − φ)⌉."""
    short = np.maximum(np.asarray(nodes_needed, dtype=float) - np.asarray(committed, dtype=float), 0.0)
    return np.ceil(short / (1.0 - warm_fraction) - ROUNDING).astype(np.int64)


def usable_gpus(committed, ondemand, gpus_per_node: int, warm_fraction: float):
    """GPUs replicas may use: committed nodes and the serving share of rented ones."""
    serving = np.floor((1.0 - warm_fraction) * np.asarray(ondemand, dtype=float) + ROUNDING)
    return ((np.asarray(committed) + serving) * gpus_per_node).astype(np.int64)


def supply_gpus(inst: Instance, site: str, gpu: str) -> int:
    """The most GPUs replicas may use at a (site, accelerator): every node its caps allow — and
    its churn limits (`optimizer.instance.churn`: committed nodes first, as they are all usable)."""
    c, o = inst.committed_max[(site, gpu)], inst.ondemand_max[(site, gpu)]
    if inst.churn is not None:
        bounds = inst.churn.pair_bounds((site, gpu))
        c = min(c, bounds.committed_max, bounds.nodes_max)
        o = min(o, bounds.ondemand_max, max(bounds.nodes_max - c, 0))
    return int(usable_gpus(int(c), int(o), inst.gpus_per_node[gpu], inst.warm_fraction))


def node_kw(inst: Instance, site: str, gpu: str, nodes):
    """kW that powered nodes draw at a site, PUE included."""
    return inst.node_kw[gpu] * inst.pue[site] * np.asarray(nodes, dtype=float)


def committed_nodes(sol: Solution) -> dict[tuple[str, str], int]:
    """Committed nodes per (site, accelerator), all terms together."""
    nodes: dict = {}
    for (s, g, _), n in sol.committed.items():
        nodes[(s, g)] = nodes.get((s, g), 0) + n
    return nodes


def site_kw(inst: Instance, sol: Solution, state: int) -> dict[str, float]:
    """kW each site's powered nodes (committed and rented in ``state``) draw."""
    committed = committed_nodes(sol)
    out: dict[str, float] = {}
    for s, g in inst.site_gpus:
        nodes = committed.get((s, g), 0) + sol.ondemand.get((s, g, state), 0)
        out[s] = out.get(s, 0.0) + float(node_kw(inst, s, g, nodes))
    return out


# ---------------------------------------------------------------------------- hours


@dataclass(frozen=True, eq=False)
class Hours:
    """A sequence of hours a fleet is priced over: each position's weight in hours of the year
    and how often its rises recur (days: a planned hour recurs once a day of its day type, an
    hour of the year once), and the cycles (arrays of positions, in hour order) over which
    on-demand rises are counted, each wrapping from its last hour to its first."""

    weight_hours: np.ndarray
    repeats: np.ndarray
    cycles: tuple[np.ndarray, ...]

    @classmethod
    def sequence(cls, n: int) -> "Hours":
        """n consecutive hours of the year, each once, rises counted in order (the year wraps)."""
        return cls(np.ones(n), np.ones(n), (np.arange(n),))

    @cached_property
    def previous(self) -> np.ndarray:
        """Each position's previous hour in its cycle (the first's is the cycle's last)."""
        out = np.arange(len(self.weight_hours))
        for cycle in self.cycles:
            out[cycle] = np.roll(cycle, 1)
        return out

    def rises(self, ondemand: np.ndarray) -> np.ndarray:
        """Nodes started at each position: o_h − o_{h−1} where positive, within its cycle
        (positions on the last axis)."""
        ondemand = np.asarray(ondemand)
        return np.maximum(ondemand - ondemand[..., self.previous], 0)


def plan_hours(inst: Instance) -> tuple[list[int], Hours]:
    """(nominal state ids in position order, their `Hours`): the planned days of each
    (period, day type), each a cycle in hour order."""
    nominal = {st.slice: st.id for st in inst.states if st.lost_site is None}
    ids, cycles = [], []
    for _, group in inst.slices.groupby(["period", "day_type"], sort=False):
        cycle = [nominal[t] for t in group.sort_values("hour").index]
        cycles.append(np.arange(len(ids), len(ids) + len(cycle)))
        ids += cycle
    weight = np.array([inst.states[sid].weight_hours for sid in ids], dtype=float)
    days = np.array([inst.states[sid].days for sid in ids], dtype=float)
    return ids, Hours(weight, days, tuple(cycles))


@dataclass
class Priced:
    """One (site, accelerator) over a sequence of hours on a commitment: what it rents and
    draws each hour, and what the hours cost."""

    ondemand: np.ndarray  # nodes rented per hour (at most the on-demand cap)
    wanted: np.ndarray  # nodes the hour would rent without the cap
    usable_gpus: np.ndarray
    gpus_short: np.ndarray  # GPUs the replicas need beyond the usable ones
    kw: np.ndarray
    ondemand_usd: np.ndarray  # per hour of the sequence (× its weight)
    ramp_usd: np.ndarray
    carbon_t: np.ndarray  # what the powered nodes emit in each hour of the sequence (× its weight)
    carbon_usd: np.ndarray  # that, at the scenario's carbon price


def price_hours(inst: Instance, site: str, gpu: str, committed: int, gpus_needed: np.ndarray, hours: Hours,
                slices, floor_nodes=0) -> Priced:
    """The module's rules (docstring) for one (site, accelerator) over ``hours``, each an hour
    of one of ``slices`` (its grid's carbon intensity); an hour rents at least ``floor_nodes``
    (per hour or one number: nodes kept for a site-loss contingency)."""
    per_node = inst.gpus_per_node[gpu]
    cap = inst.ondemand_max[(site, gpu)]
    wanted = np.maximum(ondemand_for(nodes_for(gpus_needed, per_node), committed, inst.warm_fraction), floor_nodes)
    o = np.minimum(wanted, cap)
    usable = usable_gpus(committed, o, per_node, inst.warm_fraction)
    rate = inst.contracts[(site, gpu)].ondemand
    tonnes = carbon_tonnes(inst, site, gpu, slices, hours.weight_hours, committed + o)
    return Priced(o, wanted, usable, np.maximum(np.asarray(gpus_needed) - usable, 0).astype(np.int64),
                  node_kw(inst, site, gpu, committed + o), rate * hours.weight_hours * o,
                  rate * inst.cold_start_hours * hours.repeats * hours.rises(o), tonnes, inst.carbon_usd_per_t * tonnes)


def carbon_kg_per_node_hour(inst: Instance, site: str, gpu: str, slices) -> np.ndarray:
    """kg CO2eq one powered node of (site, accelerator) emits in an hour of each of ``slices``
    (0 where the site has no grid row)."""
    return np.array([inst.carbon_kg_per_node_hour.get((site, gpu, int(t)), 0.0) for t in slices], dtype=float)


def carbon_tonnes(inst: Instance, site: str, gpu: str, slices, weight_hours, powered_nodes) -> np.ndarray:
    """Tonnes the powered nodes emit in each of the hours (``weight_hours`` each, of ``slices``):
    h · kg per node-hour · nodes / 1000."""
    kg = carbon_kg_per_node_hour(inst, site, gpu, slices)
    return np.asarray(weight_hours, dtype=float) * kg * np.asarray(powered_nodes, dtype=float) / KG_PER_TONNE


def gpus_short(inst: Instance, sol: Solution) -> dict:
    """GPUs the whole replicas need beyond what committed and on-demand nodes (within their
    caps and churn limits) can host, per (site, accelerator, state)."""
    have = committed_nodes(sol)
    out = {}
    for (s, g, sid), need in gpus_in_replicas(inst, sol.replicas).items():
        o = min(sol.ondemand.get((s, g, sid), 0), inst.ondemand_max.get((s, g), 0))
        usable = int(usable_gpus(have.get((s, g), 0), o, inst.gpus_per_node[g], inst.warm_fraction))
        if inst.churn is not None:  # nodes beyond the churn limits are no supply either
            usable = min(usable, supply_gpus(inst, s, g))
        if need > usable:
            out[(s, g, sid)] = need - usable
    return out


def beyond_power(inst: Instance, site: str, kw: float) -> bool:
    """Whether ``kw`` drawn at ``site`` exceeds its megawatts (up to floating point)."""
    return kw > inst.power_kw[site] * (1 + ROUNDING)


def kw_over(inst: Instance, sol: Solution) -> dict[tuple[str, int], float]:
    """kW the powered nodes draw beyond a site's megawatts, per (site, state)."""
    out = {}
    for st in inst.states:
        for s, kw in site_kw(inst, sol, st.id).items():
            if s != st.lost_site and beyond_power(inst, s, kw):
                out[(s, st.id)] = kw - inst.power_kw[s]
    return out


# ---------------------------------------------------------------------------- cost lines and tables


def ramp_nodes(inst: Instance, ondemand: dict) -> dict[tuple[str, str, int], int]:
    """Nodes started per state: rises of on-demand nodes within each planned day (wrapping)."""
    ids, hours = plan_hours(inst)
    out = {}
    for s, g in inst.site_gpus:
        rises = hours.rises(np.array([ondemand.get((s, g, sid), 0) for sid in ids], dtype=np.int64))
        out.update({(s, g, sid): int(r) for sid, r in zip(ids, rises) if r > 0})
    return out


# procurement.csv's columns, in order: there even where no (site, accelerator) has nodes
PROCUREMENT_COLUMNS = ["site", "gpu", *(term.nodes_column for term in TERMS), "reserved_nodes", "ondemand_nodes_peak",
                       "ondemand_node_hours", "ramp_node_hours", *COST_COLUMNS.values(), "cost_usd", "carbon_t",
                       "spot_nodes_peak", "spot_node_hours"]


def procurement_table(inst: Instance, sol: Solution) -> pd.DataFrame:
    """One row per (site, accelerator) with its nodes, node-hours and cost lines, plus one
    row for egress. cost_usd adds up to the plan's total cost."""
    weight = {st.id: st.weight_hours for st in inst.states}
    days = {st.id: st.days for st in inst.states}
    ramps = ramp_nodes(inst, sol.ondemand) if inst.cold_start_hours > 0 else {}
    tonnes_of = plan_tonnes(inst, sol)
    rows = []
    for s, g in inst.site_gpus:
        contract = inst.contracts[(s, g)]
        row = {"site": s, "gpu": g}
        for term in TERMS:
            row[term.nodes_column] = sol.committed.get((s, g, term.id), 0)
        row["reserved_nodes"] = sum(row[term.nodes_column] for term in TERMS)  # every committed node
        od_hours = sum(weight[sid] * n for (ss, gg, sid), n in sol.ondemand.items() if (ss, gg) == (s, g))
        ramp_hours = sum(days[sid] * inst.cold_start_hours * n for (ss, gg, sid), n in ramps.items() if (ss, gg) == (s, g))
        peak_od = max((n for (ss, gg, sid), n in sol.ondemand.items() if (ss, gg) == (s, g) and weight[sid] > 0), default=0)
        row.update(ondemand_nodes_peak=peak_od, ondemand_node_hours=od_hours, ramp_node_hours=ramp_hours)
        cost = dict.fromkeys(COST_COLUMNS, 0.0)
        for term, price in contract.committed.items():
            nodes = sol.committed.get((s, g, term), 0)
            cost[price.category] += HOURS_PER_YEAR * price.rate * nodes
            cost["energy"] += HOURS_PER_YEAR * price.energy * nodes
        cost["ondemand"] = contract.ondemand * od_hours
        cost["ramp"] = contract.ondemand * ramp_hours
        if inst.churn is not None:  # replicas moved onto committed nodes added against the previous fleet
            cost["ramp"] += float(inst.churn.migration_usd((s, g), row["reserved_nodes"]))
        tonnes = tonnes_of.get((s, g), 0.0)
        cost["carbon"] = inst.carbon_usd_per_t * tonnes
        row.update({COST_COLUMNS[category]: usd for category, usd in cost.items()})
        row["cost_usd"] = sum(cost.values())
        row["carbon_t"] = tonnes
        # a spot accelerator's nodes are rented per hour (its on-demand columns); named again for readers
        row.update(spot_nodes_peak=peak_od if is_spot(g) else 0, spot_node_hours=od_hours if is_spot(g) else 0.0)
        if row["reserved_nodes"] or od_hours:
            rows.append(row)
    egress = sum(SECONDS_PER_HOUR * weight[key[4]] * inst.egress_usd_per_request[key[2]] * x for key, x in sol.routes.items())
    rows.append({"site": "*", "gpu": "egress", "cost_usd": egress})
    return pd.DataFrame(rows, columns=PROCUREMENT_COLUMNS).fillna(0)


def plan_tonnes(inst: Instance, sol: Solution) -> dict[tuple[str, str], float]:
    """Tonnes CO2eq each (site, accelerator) of the plan emits in its year: every committed node
    powered in every planned hour, on-demand nodes in the hours they are rented (none where the
    instance knows no grid)."""
    if not inst.carbon_kg_per_node_hour:
        return {}
    ids, hours = plan_hours(inst)
    slices = [inst.states[sid].slice for sid in ids]
    committed = committed_nodes(sol)
    out = {}
    for s, g in inst.site_gpus:
        o = np.array([sol.ondemand.get((s, g, sid), 0) for sid in ids], dtype=float)
        out[(s, g)] = float(carbon_tonnes(inst, s, g, slices, hours.weight_hours, committed.get((s, g), 0) + o).sum())
    return out


def node_table(inst: Instance, sol: Solution) -> pd.DataFrame:
    """Per (site, accelerator) and nominal state (in planning order): the state's weight in
    hours, GPUs in replicas, committed and on-demand nodes, usable GPUs and kW drawn — the
    plan's provisioning hour by hour, as the report draws it."""
    ids, hours = plan_hours(inst)
    gpus = gpus_in_replicas(inst, sol.replicas)
    committed = committed_nodes(sol)
    rows = []
    for s, g in inst.site_gpus:
        c = committed.get((s, g), 0)
        o = np.array([sol.ondemand.get((s, g, sid), 0) for sid in ids], dtype=np.int64)
        if not c and not o.any():
            continue
        used = np.array([gpus.get((s, g, sid), 0) for sid in ids], dtype=np.int64)
        usable = usable_gpus(c, np.minimum(o, inst.ondemand_max[(s, g)]), inst.gpus_per_node[g], inst.warm_fraction)
        kw = node_kw(inst, s, g, c + o)
        rows += [{"site": s, "gpu": g, "state": sid, "weight_hours": w, "gpus_in_replicas": int(u),
                  "committed_nodes": c, "ondemand_nodes": int(x), "gpus_usable": int(a), "kw": float(k)}
                 for sid, w, u, x, a, k in zip(ids, hours.weight_hours, used, o, usable, kw)]
    return pd.DataFrame(rows, columns=["site", "gpu", "state", "weight_hours", "gpus_in_replicas", "committed_nodes",
                                       "ondemand_nodes", "gpus_usable", "kw"])


def fleet_hours(inst: Instance, sol: Solution) -> tuple[float, float, float, float]:
    """(node-hours, committed GPU-hours, on-demand GPU-hours, MWh drawn) of the plan's year."""
    weight = {st.id: st.weight_hours for st in inst.states}
    committed = committed_nodes(sol)
    node_hours = sum(n * HOURS_PER_YEAR for n in committed.values()) + sum(n * weight[sid] for (_, _, sid), n in sol.ondemand.items())
    gpu_c = sum(n * HOURS_PER_YEAR * inst.gpus_per_node[g] for (s, g), n in committed.items())
    gpu_o = sum(n * weight[sid] * inst.gpus_per_node[g] for (s, g, sid), n in sol.ondemand.items())
    mwh = sum(float(node_kw(inst, s, g, n)) * HOURS_PER_YEAR / KW_PER_MW for (s, g), n in committed.items())
    mwh += sum(float(node_kw(inst, s, g, n)) * weight[sid] / KW_PER_MW for (s, g, sid), n in sol.ondemand.items())
    return node_hours, gpu_c, gpu_o, mwh


def gpus_by_type_peak(inst: Instance, sol: Solution) -> dict[str, int]:
    """GPUs provisioned (committed + on-demand) by type, in the busiest nominal state."""
    committed: dict = {}
    for (s, g), n in committed_nodes(sol).items():
        committed[g] = committed.get(g, 0) + n * inst.gpus_per_node[g]
    best: dict = {}
    for st in inst.states:
        if st.lost_site is not None:
            continue
        for g in inst.gpus:
            od = sum(n for (s, gg, sid), n in sol.ondemand.items() if gg == g and sid == st.id) * inst.gpus_per_node[g]
            best[g] = max(best.get(g, 0), committed.get(g, 0) + od)
    return {g: int(v) for g, v in best.items() if v}


def unserved_penalty_usd(inst: Instance, sol: Solution) -> float:
    hours = {st.id: st.penalty_hours for st in inst.states}
    return sum(SECONDS_PER_HOUR * hours[sid] * inst.penalty_usd_per_request[k] * u for (_, k, sid), u in sol.unserved.items())
