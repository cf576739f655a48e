"""Better whole plans by moves priced exactly — the search the master's linear prices cannot do.

A move changes the loads of a few pools in one nominal state: the pools' whole replicas, their
(site, accelerator)'s nodes in that state and that pair's whole commitment over the year are
priced again by the fleet's own rules (`optimizer.solve.fleet`: `replicas_needed`, `nodes_for`,
`Commitments.best`), for the pairs the move touches only. Routing arcs, latency tiers and the
decode speed classes are kept, so every request stays inside its objective:

* merge  — all of an entry pool's load into another prefill or colocated pool of its (site,
           workload, tier) — another accelerator or serving mode; a prefill pool's requests go
           on to the decode pools of its speed class, so those loads follow;
* year merge — the same in every nominal state at once: a node that every hour needs is freed
           only when every hour leaves it (one state's merge alone would add the target's
           nodes and keep the source's);
* decode — all of a decode pool's load into another decode pool of its (site, workload,
           class);
* closure — every pool of one (site, accelerator) into pools of their tiers (decode: of their
           class) on other accelerators, in every nominal state at once: a pair whose
           nodes all its pools share (a rack) is freed only when all of them leave;
* route  — one (metro, workload)'s requests in one state from its (site, tier) to another arc
           of it, into the target tier's most loaded entry pool (a small pool emptied, a
           site's last replicas of a workload closed).

The master's linear prices see none of this: a pool of n replicas carries f(n) requests/s,
convex in n (small pools carry far less per replica), and whole replicas and whole nodes
round up. A move is kept when the plan costs less, or as much with fewer GPUs (room that later
moves can use); moves that break a supply cap or a site's megawatts are not. Work is counted in
moves priced, candidates are tried in a fixed order, so a plan never depends on the machine's
speed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from optimizer.base.units import Regime, Role
from optimizer.instance.build import Instance
from optimizer.solve.commitments import Commitments, PairCost, commit
from optimizer.solve.fleet import (
    Solution,
    gpus_in_replicas,
    node_kw,
    nodes_for,
    replicas_for,
)

NO_LOAD_RPS = 1e-12
COST_TOLERANCE_USD = 1e-6


@dataclass
class PricedMove:
    """A move's effect before it is made: the change in the plan's cost and in GPUs, and the
    new state of what it touches."""

    cost_usd: float
    gpus: int
    loads: dict  # state → pool → new load
    routes: dict  # state → arc → new requests/s
    replicas: dict  # (pool, state) → whole replicas
    pairs: dict  # (site, gpu) → (GPUs per position, its trial `Committed` and token; None: same nodes)
    feasible: bool

    @property
    def better(self) -> bool:
        return self.feasible and (self.cost_usd < -COST_TOLERANCE_USD
                                  or (self.cost_usd <= COST_TOLERANCE_USD and self.gpus < 0))


class WholePlan:
    """A whole plan in the form moves change: per nominal state its pools' loads and its
    routes; whole replicas per (pool, state); per (site, accelerator) the GPUs in replicas per
    state and its commitment (`commitments.Commitments`). Site-loss states are kept as they are."""

    def __init__(self, inst: Instance, sol: Solution):
        self.inst = inst
        self.rule = Commitments(inst)
        self.position = {sid: i for i, sid in enumerate(self.rule.ids)}
        self.sol = sol
        self.loads: dict = defaultdict(dict)
        for (pid, sid), y in sol.flows.items():
            if sid in self.position and y > NO_LOAD_RPS:
                self.loads[sid][pid] = y
        self.routes: dict = defaultdict(dict)
        for (m, s, k, tier, sid), x in sol.routes.items():
            if sid in self.position:
                self.routes[sid][(m, s, k, tier)] = x
        self.replicas = {(pid, sid): replicas_for(inst.pools[pid], y) for sid, pools in self.loads.items()
                         for pid, y in pools.items()}
        self.gpus = {key: np.zeros(len(self.rule.ids), dtype=np.int64) for key in inst.site_gpus}
        contingency: dict = {}
        for (s, g, sid), n in gpus_in_replicas(inst, sol.replicas).items():
            if sid in self.position:
                continue
            contingency[(s, g)] = max(contingency.get((s, g), 0), int(nodes_for(n, inst.gpus_per_node[g])))
        for (pid, sid), n in self.replicas.items():
            p = inst.pools[pid]
            self.gpus[(p.site, p.gpu)][self.position[sid]] += n * p.gpus
        self.pairs = {key: PairCost(self.rule, *key, nodes_for(self.gpus[key], inst.gpus_per_node[key[1]]),
                                    contingency.get(key, 0)) for key in inst.site_gpus}

    @property
    def committed(self) -> dict:
        """(site, gpu) → its current whole commitment (`commitments.Committed`)."""
        return {key: pair.current for key, pair in self.pairs.items()}

    @property
    def cost_usd(self) -> float:
        """The fleet's cost (commitment, on-demand, ramps); egress and penalties do not move."""
        return sum(pair.current.cost_usd for pair in self.pairs.values())

    # ---------------------------------------------------------------------- pricing a move
    def price(self, loads: dict, routes: dict | None = None) -> PricedMove:
        """``loads``: state → pool → its new load (requests/s); ``routes``: state → arc → its
        new requests/s (bookkeeping: where requests go)."""
        inst = self.inst
        replicas, change, gpus = {}, defaultdict(dict), 0
        for sid, pools in loads.items():
            for pid, y in pools.items():
                n = replicas_for(inst.pools[pid], y) if y > NO_LOAD_RPS else 0
                replicas[(pid, sid)] = n
                before = self.replicas.get((pid, sid), 0)
                if n != before:
                    p = inst.pools[pid]
                    key = (p.site, p.gpu)
                    where = self.position[sid]
                    change[key][where] = change[key].get(where, 0) + (n - before) * p.gpus
                    gpus += (n - before) * p.gpus
        pairs, cost, feasible = {}, 0.0, True
        for key, deltas in change.items():
            if not any(deltas.values()):
                continue
            new = self.gpus[key].copy()
            for where, d in deltas.items():
                new[where] += d
            pair = self.pairs[key]
            per_node = inst.gpus_per_node[key[1]]
            nodes = {where: int(nodes_for(new[where], per_node)) for where in deltas}
            nodes = {where: n for where, n in nodes.items() if n != pair.need[where]}
            if not nodes:  # the same whole nodes: only the GPUs in replicas change
                pairs[key] = (new, None, None)
                continue
            committed, token = pair.trial(nodes)
            pairs[key] = (new, committed, token)
            cost += committed.cost_usd - pair.current.cost_usd
            feasible = feasible and not committed.over_cap
        feasible = feasible and all(self._power_ok(site, pairs) for site in {s for s, _ in pairs})
        feasible = feasible and self._budget_ok(pairs)
        return PricedMove(cost, gpus, loads, routes or {}, replicas, pairs, feasible)

    def _power_ok(self, site: str, pairs: dict) -> bool:
        """Every nominal state's powered nodes within the site's megawatts."""
        kw = np.zeros(len(self.rule.ids))
        for s, g in self.inst.site_gpus:
            if s == site:
                trial = pairs.get((s, g), (None, None))[1]
                c = trial if trial is not None else self.pairs[(s, g)].current
                kw += node_kw(self.inst, s, g, c.nodes + c.ondemand)
        return bool((kw <= self.inst.power_kw[site] * (1 + 1e-9)).all())

    def _budget_ok(self, pairs: dict) -> bool:
        """A churn budget not shared out per pair (`steps._within_the_budget`) kept by the
        whole fleet: Σ |c − c⁰| + max(0, P − P⁰) ≤ B over every pair."""
        limits = self.inst.churn
        if limits is None or limits.max_changes is None or limits.allotted is not None:
            return True
        committed, peak = {}, {}
        for key, pair in self.pairs.items():
            trial = pairs.get(key, (None, None))[1]
            c = trial if trial is not None else pair.current
            committed[key], peak[key] = c.nodes, int(c.ondemand.max(initial=0))
        return limits.used(committed, peak) <= limits.max_changes

    def apply(self, move: PricedMove) -> None:
        for sid, pools in move.loads.items():
            for pid, y in pools.items():
                if y > NO_LOAD_RPS:
                    self.loads[sid][pid] = y
                else:
                    self.loads[sid].pop(pid, None)
        for sid, arcs in move.routes.items():
            for arc, x in arcs.items():
                if x > NO_LOAD_RPS:
                    self.routes[sid][arc] = x
                else:
                    self.routes[sid].pop(arc, None)
        for key, n in move.replicas.items():
            if n:
                self.replicas[key] = n
            else:
                self.replicas.pop(key, None)
        for key, (gpus, _, token) in move.pairs.items():
            self.gpus[key] = gpus
            if token is not None:
                self.pairs[key].keep(token)

    def solution(self) -> Solution:
        """The plan as a `fleet.Solution`, made whole by `commitments.commit` (site-loss states as
        they were)."""
        inst, sol = self.inst, self.sol
        flows = {key: y for key, y in sol.flows.items() if key[1] not in self.position}
        flows.update({(pid, sid): y for sid, pools in self.loads.items() for pid, y in pools.items()})
        routes = {key: x for key, x in sol.routes.items() if key[4] not in self.position}
        routes.update({(*arc, sid): x for sid, arcs in self.routes.items() for arc, x in arcs.items()})
        replicas = {key: n for key, n in sol.replicas.items() if key[1] not in self.position}
        replicas.update(self.replicas)
        need = {key: int(nodes_for(v, inst.gpus_per_node[key[1]])) for key, v in gpus_in_replicas(inst, replicas).items()}
        committed, ondemand, violations = commit(inst, need)
        return Solution(committed, ondemand, flows, replicas, routes, dict(sol.unserved), violations)


# -------------------------------------------------------------------------- the moves


def _decode_follow(plan: WholePlan, sid: int, pools: dict, site: str, k: str, before: int | None, after: int | None,
                   amount: float) -> None:
    """Requests/s ``amount`` leaving prefill of decode class ``before`` (None: colocated) for
    class ``after``: taken from the class's decode pools in proportion to their loads, given
    to the new class's most loaded decode pool (its densest one if none is loaded)."""
    if before == after or amount <= NO_LOAD_RPS:
        return
    loads = plan.loads[sid]
    inst = plan.inst
    if before is not None:
        source = [pid for pid in inst.decode_pools.get((site, k, before), []) if loads.get(pid, 0.0) > NO_LOAD_RPS]
        total = sum(pools.get(pid, loads[pid]) for pid in source)
        for pid in source if total > NO_LOAD_RPS else ():
            current = pools.get(pid, loads[pid])
            pools[pid] = max(current - amount * current / total, 0.0)
    if after is not None:
        target = inst.decode_pools.get((site, k, after), [])
        loaded = [pid for pid in target if loads.get(pid, 0.0) > NO_LOAD_RPS]
        pid = max(loaded, key=lambda q: (loads[q], -q)) if loaded else \
            min(target, key=lambda q: (inst.pools[q].gpus / inst.pools[q].decode_rps, q))
        pools[pid] = pools.get(pid, loads.get(pid, 0.0)) + amount


def _class(pool) -> int | None:
    return pool.speed if pool.role == Role.PREFILL else None


def merges(plan: WholePlan, sid: int):
    """Each loaded entry pool's load into another pool of its tier, smallest first."""
    inst, loads = plan.inst, plan.loads[sid]
    entry = sorted((pid for pid in loads if inst.pools[pid].role != Role.DECODE), key=lambda q: (loads[q], q))
    for pid in entry:
        p = inst.pools[pid]
        for other in inst.tier_pools.get((p.regime, p.site, p.workload, p.tier), []):
            if other == pid or pid not in loads:
                continue
            y = loads[pid]
            pools = {pid: 0.0, other: loads.get(other, 0.0) + y}
            _decode_follow(plan, sid, pools, p.site, p.workload, _class(p), _class(inst.pools[other]), y)
            yield {sid: pools}, None


def year_merges(plan: WholePlan):
    """Each entry pool's load in every nominal state into another pool of its tier, the pools
    with the least load over the year first."""
    inst = plan.inst
    year: dict = defaultdict(float)
    for sid in plan.rule.ids:
        for pid, y in plan.loads[sid].items():
            if inst.pools[pid].role != Role.DECODE:
                year[pid] += y
    for pid in sorted(year, key=lambda q: (year[q], q)):
        p = inst.pools[pid]
        for other in inst.tier_pools.get((p.regime, p.site, p.workload, p.tier), []):
            states = [sid for sid in plan.rule.ids if pid in plan.loads[sid]]
            if other == pid or not states:
                continue
            loads = {}
            for sid in states:
                y = plan.loads[sid][pid]
                pools = {pid: 0.0, other: plan.loads[sid].get(other, 0.0) + y}
                _decode_follow(plan, sid, pools, p.site, p.workload, _class(p), _class(inst.pools[other]), y)
                loads[sid] = pools
            yield loads, None


def pair_closures(plan: WholePlan):
    """Every pool of one (site, accelerator) emptied at once, in every nominal state: each entry
    pool's load into the pool of its tier on another accelerator most loaded in that state (its
    densest if none is), its decode class following; then each decode pool's into its class's
    most loaded pool on another accelerator. Nodes that every pool of the pair needs (one
    72-GPU rack, say) are freed only when all of them leave; a pair with a pool that has
    nowhere else to go is not closed."""
    for key in plan.inst.site_gpus:
        if not plan.gpus[key].any():
            continue
        states = {sid: _closed(plan, sid, *key) for sid in plan.rule.ids}
        if all(pools is not None for pools in states.values()):
            yield {sid: pools for sid, pools in states.items() if pools}, None


def _closed(plan: WholePlan, sid: int, site: str, gpu: str) -> dict | None:
    """One state's loads with (site, gpu)'s pools emptied (`pair_closures`); None where one
    has nowhere else to go."""
    inst, current = plan.inst, plan.loads[sid]
    pools: dict = {}

    def load(q):
        return pools.get(q, current.get(q, 0.0))

    def elsewhere(candidates):
        others = [q for q in candidates if inst.pools[q].gpu != gpu]
        if not others:
            return None
        loaded = [q for q in others if load(q) > NO_LOAD_RPS]
        if loaded:
            return max(loaded, key=lambda q: (load(q), -q))
        return min(others, key=lambda q: (_gpus_per_rps(inst, q), q))

    on_pair = sorted(pid for pid in current if (inst.pools[pid].site, inst.pools[pid].gpu) == (site, gpu))
    for pid in [q for q in on_pair if inst.pools[q].role != Role.DECODE]:
        p, y = inst.pools[pid], load(pid)
        into = elsewhere(inst.tier_pools.get((p.regime, p.site, p.workload, p.tier), []))
        if into is None:
            return None
        pools[pid] = 0.0
        pools[into] = load(into) + y
        _decode_follow(plan, sid, pools, p.site, p.workload, _class(p), _class(inst.pools[into]), y)
    decode = {q for q in [*on_pair, *pools] if inst.pools[q].role == Role.DECODE and inst.pools[q].gpu == gpu
              and inst.pools[q].site == site}
    for pid in sorted(decode):
        p, y = inst.pools[pid], load(pid)
        if y <= NO_LOAD_RPS:
            continue
        into = elsewhere(inst.decode_pools.get((p.site, p.workload, p.speed), []))
        if into is None:
            return None
        pools[pid] = 0.0
        pools[into] = load(into) + y
    return pools


def decode_merges(plan: WholePlan, sid: int):
    """Each loaded decode pool's load into another decode pool of its class, smallest first."""
    inst, loads = plan.inst, plan.loads[sid]
    decode = sorted((pid for pid in loads if inst.pools[pid].role == Role.DECODE), key=lambda q: (loads[q], q))
    for pid in decode:
        p = inst.pools[pid]
        for other in inst.decode_pools.get((p.site, p.workload, p.speed), []):
            if other != pid and pid in loads:
                yield {sid: {pid: 0.0, other: loads.get(other, 0.0) + loads[pid]}}, None


def route_shifts(plan: WholePlan, sid: int, arcs_of: dict):
    """Each routed (metro, workload)'s requests into a (site, tier) moved to another of its arcs,
    from the smallest tiers' routes first."""
    loads, routes = plan.loads[sid], plan.routes[sid]
    into: dict = defaultdict(float)
    for (m, s, k, tier), x in routes.items():
        into[(s, k, tier)] += x
    for arc in sorted(routes, key=lambda a: (into[(a[1], a[2], a[3])], a)):
        m, s, k, tier = arc
        for target in arcs_of.get((m, k), []):
            if arc not in routes:  # moved away by the last move kept
                break
            if target[1:] == (s, tier):
                continue
            move = _shift(plan, sid, loads, routes, arc, (m, target[1], k, target[2]), routes[arc])
            if move is not None:
                yield move


def _shift(plan: WholePlan, sid: int, loads: dict, routes: dict, arc: tuple, target: tuple, x: float):
    """``x`` requests/s of ``arc`` onto ``target``: out of the source tier's entry pools in
    proportion to their loads (and their decode classes'), into the target tier's most loaded
    entry pool (its densest one if none is loaded) and its decode class."""
    inst = plan.inst
    m, s, k, tier = arc
    _, s2, _, tier2 = target
    source = [pid for pid in inst.tier_pools.get((Regime.NOMINAL, s, k, tier), []) if loads.get(pid, 0.0) > NO_LOAD_RPS]
    candidates = inst.tier_pools.get((Regime.NOMINAL, s2, k, tier2), [])
    if not source or not candidates:
        return None
    pools: dict = {}
    total = sum(loads[pid] for pid in source)
    for pid in source:
        share = x * loads[pid] / total
        pools[pid] = max(loads[pid] - share, 0.0)
        _decode_follow(plan, sid, pools, s, k, _class(inst.pools[pid]), None, share)
    loaded = [pid for pid in candidates if loads.get(pid, 0.0) > NO_LOAD_RPS]
    into = max(loaded, key=lambda q: (loads[q], -q)) if loaded else min(candidates, key=lambda q: (_gpus_per_rps(inst, q), q))
    pools[into] = pools.get(into, loads.get(into, 0.0)) + x
    _decode_follow(plan, sid, pools, s2, k, None, _class(inst.pools[into]), x)
    return {sid: pools}, {sid: {arc: 0.0, target: routes.get(target, 0.0) + x}}


def _gpus_per_rps(inst: Instance, pid: int) -> float:
    p = inst.pools[pid]
    per_replica = float(p.table[-1]) / len(p.table) if p.table is not None else p.decode_rps
    if p.role == Role.COLOCATED:
        per_replica = min(per_replica, p.decode_rps)
    return p.gpus / max(per_replica, 1e-12)


def arcs_by_demand(inst: Instance) -> dict:
    """(metro, workload) → its nominal arcs (metro, site, tier), nearest first."""
    out: dict = defaultdict(list)
    for a in sorted(inst.arcs[Regime.NOMINAL], key=lambda a: (a.rtt_ms, a.site, a.tier)):
        out[(a.metro, a.workload)].append((a.metro, a.site, a.tier))
    return dict(out)


@dataclass
class Search:
    """What a search did: moves priced and kept, and the fleet's cost before and after."""

    priced: int = 0
    kept: int = 0
    before_usd: float = 0.0
    after_usd: float = 0.0


def improve_by_moves(inst: Instance, sol: Solution, budget: int, stop=lambda: False,
                     year_first: bool = False) -> tuple[Solution, Search]:
    """Moves (module docstring) in rounds: over the nominal states merges, decode merges and
    route shifts, and year merges after them (``year_first``: before them), then pair closures
    — first improvement, until a round keeps nothing or ``budget`` moves have been priced (or
    ``stop()``, the wall-clock cap, says so). Returns the improved plan (made whole by
    `commitments.commit`) and what the search did."""
    plan = WholePlan(inst, sol)
    done = Search(before_usd=plan.cost_usd)
    arcs_of = arcs_by_demand(inst)
    kept_in_round = budget > 0
    while kept_in_round and done.priced < budget and not stop():
        kept_in_round = year_first and _first_improvements(plan, year_merges(plan), done, budget, stop)
        for sid in plan.rule.ids:
            for generate in (merges(plan, sid), decode_merges(plan, sid), route_shifts(plan, sid, arcs_of)):
                kept_in_round |= _first_improvements(plan, generate, done, budget)
            if stop():
                break
        if not year_first:
            kept_in_round |= _first_improvements(plan, year_merges(plan), done, budget, stop)
        kept_in_round |= _first_improvements(plan, pair_closures(plan), done, budget, stop)
    done.after_usd = plan.cost_usd
    return (plan.solution() if done.kept else sol), done


def _first_improvements(plan: WholePlan, generate, done: Search, budget: int, stop=lambda: False) -> bool:
    """Prices the moves ``generate`` yields, keeping each that is better, until ``budget``
    moves have been priced in all; True when one was kept."""
    kept = False
    for loads, routes in generate:
        if done.priced >= budget or stop():
            break
        move = plan.price(loads, routes)
        done.priced += 1
        if move.better:
            plan.apply(move)
            done.kept += 1
            kept = True
    return kept
