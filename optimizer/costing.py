"""What a plan costs, line by line — the same arithmetic as the MIP's objective, applied to
whole numbers of replicas and nodes. Every dollar of a plan's total lives in one row of the
procurement table (nodes, energy, ramps per site and accelerator; egress in a row of its
own); the unserved-demand penalty is not a cost the fleet pays and is reported apart."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from optimizer.contracts import COST_COLUMNS, TERMS
from optimizer.instance import Instance, replicas_for
from optimizer.rebalance import rebalance
from optimizer.units import HOURS_PER_YEAR, SECONDS_PER_HOUR


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


def whole_replicas(inst: Instance, flows: dict[tuple[int, int], float]) -> dict[tuple[int, int], int]:
    """Replicas each pool needs for its peak-sized load (exact SLO capacity on the integers)."""
    return {key: replicas_for(inst.pools[key[0]], inst.pools[key[0]].peak_to_mean * y) for key, y in flows.items()}


def nodes_needed(inst: Instance, replicas: dict[tuple[int, int], int]) -> dict[tuple[str, str, int], int]:
    gpus: dict[tuple[str, str, int], int] = {}
    for (pid, sid), n in replicas.items():
        if n:
            p = inst.pools[pid]
            gpus[(p.site, p.gpu, sid)] = gpus.get((p.site, p.gpu, sid), 0) + n * p.gpus
    return {key: math.ceil(v / inst.gpus_per_node[key[1]]) for key, v in gpus.items()}


def repair(inst: Instance, flows: dict, routes: dict, unserved: dict) -> Solution:
    """Make a master solution whole: whole replicas per pool and state (the smallest pool
    meeting its SLO capacity at the peak-sized load), then per (site, accelerator) the
    cheapest whole commitment and on-demand nodes that host them (`commit`); where whole
    replicas overflow a site's supply, load first moves between the site's interchangeable
    pools (`optimizer.rebalance`). Breaches of
    supply caps or power are recorded, never hidden."""
    flows = rebalance(inst, flows)
    replicas = whole_replicas(inst, flows)
    need = nodes_needed(inst, replicas)
    committed, ondemand, violations = commit(inst, need)
    short = _gpus_short(inst, replicas, committed, ondemand)
    over = _kw_over(inst, committed, ondemand)
    violations += [f"{s} state {sid}: draws {kw / 1000:.2f} MW more than its {inst.power_kw[s] / 1000:.2f} MW"
                   for (s, sid), kw in sorted(over.items())]
    return Solution(committed, ondemand, dict(flows), replicas, dict(routes), dict(unserved), violations, short, over)


def _gpus_short(inst: Instance, replicas: dict, committed: dict, ondemand: dict) -> dict:
    """GPUs the whole replicas need beyond what committed and on-demand nodes (within their
    caps) can host, per (site, accelerator, state)."""
    gpus: dict = {}
    for (pid, sid), n in replicas.items():
        p = inst.pools[pid]
        gpus[(p.site, p.gpu, sid)] = gpus.get((p.site, p.gpu, sid), 0) + n * p.gpus
    have: dict = {}
    for (s, g, _), n in committed.items():
        have[(s, g)] = have.get((s, g), 0) + n
    out = {}
    for (s, g, sid), need in gpus.items():
        od = min(ondemand.get((s, g, sid), 0), inst.ondemand_max.get((s, g), 0))
        usable = (have.get((s, g), 0) + math.floor((1 - inst.warm_fraction) * od + 1e-9)) * inst.gpus_per_node[g]
        if need > usable:
            out[(s, g, sid)] = need - usable
    return out


def _day_cycles(inst: Instance) -> list[list[int]]:
    """Nominal state ids of each (period, day type) in hour order — the cycles ramps follow."""
    nominal = {st.slice: st.id for st in inst.states if st.lost_site is None}
    return [[nominal[t] for t in group.sort_values("hour").index]
            for _, group in inst.slices.groupby(["period", "day_type"], sort=False)]


def commit(inst: Instance, need: dict[tuple[str, str, int], int]):
    """Per (site, accelerator): the whole number of committed nodes c, on the cheapest
    allowed contract, minimising

        c · rate_c · 8760 + Σ_t h_t · rate_od · o_t(c) + ramp cost(o(c)),
        o_t(c) = ⌈max(0, N_t − c) / (1 − φ)⌉,

    N_t the nodes the state's whole replicas need. Contingency states use the peak slice's
    on-demand nodes, which rise to cover them. Exact by enumeration of c: once replicas are
    fixed, (site, accelerator) pairs are independent except for power, checked afterwards.
    """
    weight = {st.id: st.weight_hours for st in inst.states}
    cycles = _day_cycles(inst)
    nominal_ids = [sid for cycle in cycles for sid in cycle]
    peak = next(st.id for st in inst.states if st.slice == inst.peak_slice and st.lost_site is None)
    contingencies = [st.id for st in inst.states if st.lost_site is not None]
    peak_pos = nominal_ids.index(peak)
    committed, ondemand, violations = {}, {}, []
    for s, g in inst.site_gpus:
        n_nominal = np.array([need.get((s, g, sid), 0) for sid in nominal_ids], dtype=float)
        n_cont = max((need.get((s, g, sid), 0) for sid in contingencies), default=0)
        top = int(max(n_nominal.max(initial=0), n_cont))
        if top == 0:
            continue
        contract = inst.contracts[(s, g)]
        terms = {t: price.rate + price.energy for t, price in contract.committed.items()}
        term = min(sorted(terms), key=lambda t: terms[t]) if terms else None
        cap_c = inst.committed_max[(s, g)] if term else 0
        cap_o = inst.ondemand_max[(s, g)]
        best = None
        for c in range(0, min(cap_c, top) + 1):
            o = np.ceil(np.maximum(n_nominal - c, 0) / (1 - inst.warm_fraction) - 1e-9)
            o_cont = math.ceil(max(n_cont - c, 0) / (1 - inst.warm_fraction) - 1e-9)
            o[peak_pos] = max(o[peak_pos], o_cont)
            over = o.max(initial=0) > cap_o
            cost = c * terms.get(term, 0.0) * HOURS_PER_YEAR + contract.ondemand * sum(
                weight[sid] * x for sid, x in zip(nominal_ids, o)) + _ramp_cost(inst, contract.ondemand, o, nominal_ids, cycles, weight)
            key = (over, cost)
            if best is None or key < best[0]:
                best = (key, c, o)
        (over, _), c, o = best
        if c:
            committed[(s, g, term)] = c
        for sid, x in zip(nominal_ids, o):
            if x > 0:
                ondemand[(s, g, sid)] = int(x)
        for sid in contingencies:
            if (s, g, peak) in ondemand and inst.states[sid].lost_site != s:
                ondemand[(s, g, sid)] = ondemand[(s, g, peak)]
        if over:
            violations.append(f"{s}/{g}: needs {int(o.max())} on-demand nodes in some hour, cap {cap_o}"
                              + (f" (and {cap_c} committed)" if term else ""))
    return committed, ondemand, violations


def _ramp_cost(inst: Instance, rate: float, o: np.ndarray, ids: list[int], cycles, weight) -> float:
    if inst.cold_start_hours <= 0:
        return 0.0
    pos = {sid: i for i, sid in enumerate(ids)}
    total = 0.0
    for cycle in cycles:
        values = o[[pos[sid] for sid in cycle]]
        rises = np.maximum(values - np.roll(values, 1), 0)
        total += float(sum(weight[sid] * r for sid, r in zip(cycle, rises)))
    return total * inst.cold_start_hours * rate


def _kw_over(inst: Instance, committed: dict, ondemand: dict) -> dict[tuple[str, int], float]:
    """kW the powered nodes draw beyond a site's megawatts, per (site, state)."""
    committed_at: dict[tuple[str, str], int] = {}
    for (s, g, _), n in committed.items():
        committed_at[(s, g)] = committed_at.get((s, g), 0) + n
    out = {}
    for st in inst.states:
        for s in inst.sites:
            if s == st.lost_site:
                continue
            kw = sum(inst.node_kw[g] * inst.pue[s] * (committed_at.get((s, g), 0) + ondemand.get((s, g, st.id), 0))
                     for g in inst.gpus if (s, g) in inst.contracts)
            if kw > inst.power_kw[s] * (1 + 1e-9):
                out[(s, st.id)] = kw - inst.power_kw[s]
    return out


def ramp_nodes(inst: Instance, ondemand: dict) -> dict[tuple[str, str, int], int]:
    """Nodes started per slice: rises of on-demand nodes within each day cycle (wrapping)."""
    out = {}
    for order in _day_cycles(inst):
        for s, g in inst.site_gpus:
            for i, sid in enumerate(order):
                rise = ondemand.get((s, g, sid), 0) - ondemand.get((s, g, order[i - 1]), 0)
                if rise > 0:
                    out[(s, g, sid)] = rise
    return out


def procurement_table(inst: Instance, sol: Solution) -> pd.DataFrame:
    """One row per (site, accelerator) with its nodes, node-hours and cost lines, plus one
    row for egress. cost_usd adds up to the plan's total cost."""
    weight = {st.id: st.weight_hours for st in inst.states}
    ramps = ramp_nodes(inst, sol.ondemand) if inst.cold_start_hours > 0 else {}
    rows = []
    for s, g in inst.site_gpus:
        contract = inst.contracts[(s, g)]
        row = {"site": s, "gpu": g}
        for term in TERMS:
            row[term.nodes_column] = sol.committed.get((s, g, term.id), 0)
        row["reserved_nodes"] = sum(row[term.nodes_column] for term in TERMS)  # every committed node
        od_hours = sum(weight[sid] * n for (ss, gg, sid), n in sol.ondemand.items() if (ss, gg) == (s, g))
        ramp_hours = sum(weight[sid] * inst.cold_start_hours * n for (ss, gg, sid), n in ramps.items() if (ss, gg) == (s, g))
        peak_od = max((n for (ss, gg, sid), n in sol.ondemand.items() if (ss, gg) == (s, g) and weight[sid] > 0), default=0)
        row.update(ondemand_nodes_peak=peak_od, ondemand_node_hours=od_hours, ramp_node_hours=ramp_hours)
        cost = dict.fromkeys(COST_COLUMNS, 0.0)
        for term, price in contract.committed.items():
            nodes = sol.committed.get((s, g, term), 0)
            cost[price.category] += HOURS_PER_YEAR * price.rate * nodes
            cost["energy"] += HOURS_PER_YEAR * price.energy * nodes
        cost["ondemand"] = contract.ondemand * od_hours
        cost["ramp"] = contract.ondemand * ramp_hours
        row.update({COST_COLUMNS[category]: usd for category, usd in cost.items()})
        row["cost_usd"] = sum(cost.values())
        if row["reserved_nodes"] or od_hours:
            rows.append(row)
    egress = sum(SECONDS_PER_HOUR * weight[key[4]] * inst.egress_usd_per_request[key[2]] * x for key, x in sol.routes.items())
    rows.append({"site": "*", "gpu": "egress", "cost_usd": egress})
    return pd.DataFrame(rows).fillna(0)


def unserved_penalty_usd(inst: Instance, sol: Solution) -> float:
    hours = {st.id: st.penalty_hours for st in inst.states}
    return sum(SECONDS_PER_HOUR * hours[sid] * inst.penalty_usd_per_request[k] * u for (_, k, sid), u in sol.unserved.items())
