"""The commitment of a fleet made whole: per (site, accelerator), the whole number of
committed nodes that minimises the year's cost of the whole replicas' nodes — committed nodes
at the cheapest term, on-demand nodes and their cold starts by the fleet's rules
(`optimizer.solve.fleet`). `commit` makes a plan's commitment; `Commitments` applies the rule
one pair at a time and `PairCost` keeps a pair's commitment up to date as a few states' needs
change (the searches of `optimizer.solve.moves`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.base.contracts import TERM
from optimizer.base.units import HOURS_PER_YEAR, KG_PER_TONNE
from optimizer.instance.build import Instance
from optimizer.instance.churn import PairBounds
from optimizer.solve.fleet import carbon_kg_per_node_hour, ondemand_for, plan_hours


@dataclass(frozen=True)
class TermTier:
    """Committed nodes of one term: at most ``nodes`` of them, at ``usd_per_node_hour`` (energy in)."""

    term: str
    usd_per_node_hour: float
    nodes: int


def tiers(inst: Instance, site: str, gpu: str) -> list[TermTier]:
    """What c committed nodes are made of, cheapest first: the fleet's own nodes (as many as it
    has), and the cheapest term the plan may sign (up to the supply cap)."""
    prices = inst.contracts[(site, gpu)].committed
    out = [TermTier(t, p.rate + p.energy, inst.existing_nodes.get((site, gpu, t), 0)) for t, p in sorted(prices.items())
           if TERM[t].existing]
    new = {t: p.rate + p.energy for t, p in prices.items() if not TERM[t].existing}
    if new:
        term = min(sorted(new), key=lambda t: new[t])
        out.append(TermTier(term, new[term], inst.committed_max[(site, gpu)]))
    return sorted(out, key=lambda tier: tier.usd_per_node_hour)


def committed_usd_per_year(layers: list[TermTier], c: np.ndarray) -> np.ndarray:
    """The year's cost of c committed nodes filled tier by tier (cheapest first)."""
    cost, left = np.zeros(len(c)), np.asarray(c, dtype=np.int64)
    for tier in layers:
        n = np.minimum(left, tier.nodes)
        cost += n * tier.usd_per_node_hour * HOURS_PER_YEAR
        left = left - n
    return cost


def split(layers: list[TermTier], nodes: int) -> dict[str, int]:
    """c committed nodes by term, tier by tier."""
    out = {}
    for tier in layers:
        n = min(nodes, tier.nodes)
        if n:
            out[tier.term] = n
        nodes -= n
    return out


def migration_usd(inst: Instance, site: str, gpu: str, c):
    """Moving replicas onto the committed nodes added against a previous fleet (churn), once."""
    return inst.churn.migration_usd((site, gpu), c) if inst.churn is not None else 0.0


def _signed_term(layers: list[TermTier]) -> str | None:
    """The term new nodes are signed on (None: the plan may sign none)."""
    return next((t.term for t in layers if not TERM[t.term].existing), None)


def _bounds(inst: Instance, site: str, gpu: str) -> PairBounds:
    """The pair's bounds from the churn limits (`optimizer.instance.churn`); none without them."""
    return inst.churn.pair_bounds((site, gpu)) if inst.churn is not None else PairBounds()


def _commitments(inst: Instance, site: str, gpu: str, layers: list[TermTier], top: int) -> np.ndarray:
    """The whole commitments c worth pricing: 0 (or the churn floor) up to the nodes the
    busiest state needs, within what the tiers hold (the fleet's own, the supply cap) and the
    churn limits."""
    room = sum(t.nodes for t in layers)
    bounds = _bounds(inst, site, gpu)
    high = min(room, top, bounds.committed_max)
    low = min(bounds.committed_min, room)
    return np.arange(low, max(low, int(high)) + 1)


def beyond_churn(inst: Instance, site: str, gpu: str, c: np.ndarray, ondemand_peak: np.ndarray) -> np.ndarray:
    """Which commitments c (with their on-demand peaks) break the pair's churn bounds."""
    bounds = _bounds(inst, site, gpu)
    return (c + ondemand_peak > bounds.nodes_max) | (ondemand_peak > bounds.ondemand_max)


@dataclass(frozen=True)
class Committed:
    """One (site, accelerator)'s whole commitment: nodes c on ``term``, on-demand nodes per
    nominal state (in `plan_hours` order), what both cost a year, and whether some state needs
    more on-demand nodes than its cap."""

    term: str | None
    nodes: int
    ondemand: np.ndarray
    cost_usd: float
    over_cap: bool


class Commitments:
    """The commitment rule of `commit`, one (site, accelerator) at a time — for the plan's
    repair and for searches that change a few pairs' needs and price them again."""

    def __init__(self, inst: Instance):
        self.inst = inst
        self.ids, self.hours = plan_hours(inst)
        peak = next(st.id for st in inst.states if st.slice == inst.peak_slice and st.lost_site is None)
        self.peak_pos = self.ids.index(peak)
        self.contingencies = [st.id for st in inst.states if st.lost_site is not None]
        self._carbon: dict[tuple[str, str], np.ndarray] = {}
        self._tiers: dict[tuple[str, str], list[TermTier]] = {}

    def tiers(self, site: str, gpu: str) -> list[TermTier]:
        """`tiers` of a pair, once: searches price a pair thousands of times."""
        if (site, gpu) not in self._tiers:
            self._tiers[(site, gpu)] = tiers(self.inst, site, gpu)
        return self._tiers[(site, gpu)]

    def carbon_usd(self, site: str, gpu: str) -> np.ndarray:
        """$ of carbon a node powered in each planned position costs over the year (h · kg · $/t
        / 1000), at the price the searches pay (`Instance.carbon_search_usd_per_t`); all zero
        where none. Once per pair: searches price a pair thousands of times."""
        if (site, gpu) not in self._carbon:
            inst = self.inst
            price = inst.carbon_search_usd_per_t if inst.carbon_search_usd_per_t is not None else inst.carbon_usd_per_t
            kg = carbon_kg_per_node_hour(inst, site, gpu, [inst.states[sid].slice for sid in self.ids]) \
                if price > 0 else np.zeros(len(self.ids))
            self._carbon[(site, gpu)] = self.hours.weight_hours * kg * price / KG_PER_TONNE
        return self._carbon[(site, gpu)]

    def best(self, site: str, gpu: str, need: np.ndarray, need_contingency: int = 0) -> Committed:
        """c minimising the commit cost for nodes needed per nominal state ``need``; the peak
        state's on-demand nodes also cover ``need_contingency`` (a site-loss state's)."""
        inst, hours = self.inst, self.hours
        top = int(max(need.max(initial=0), need_contingency))
        layers = self.tiers(site, gpu)
        term = _signed_term(layers)
        c = _commitments(inst, site, gpu, layers, top)
        if top == 0 and c[-1] == 0:
            return Committed(term, 0, np.zeros(len(need), dtype=np.int64), 0.0, False)
        o = ondemand_for(need[None, :], c[:, None], inst.warm_fraction)
        o[:, self.peak_pos] = np.maximum(o[:, self.peak_pos], ondemand_for(need_contingency, c, inst.warm_fraction))
        od_rate = inst.contracts[(site, gpu)].ondemand
        cost = (committed_usd_per_year(layers, c) + migration_usd(inst, site, gpu, c) + od_rate * (o @ hours.weight_hours)
                + od_rate * inst.cold_start_hours * (hours.rises(o) @ hours.repeats))
        carbon = self.carbon_usd(site, gpu)
        if carbon.any():  # every committed node is powered every hour, on-demand ones when rented
            cost = cost + c * carbon.sum() + o @ carbon
        over = (o.max(axis=1) > inst.ondemand_max[(site, gpu)]) | beyond_churn(inst, site, gpu, c, o.max(axis=1))
        i = int(np.lexsort((cost, over))[0])
        return Committed(term, int(c[i]), o[i], float(cost[i]), bool(over[i]))


class PairCost:
    """`Commitments.best` for one (site, accelerator) kept up to date as the nodes needed in a
    few states change — what a search on whole plans prices thousands of times. For every
    commitment c = 0 … C it holds the on-demand nodes o[c, t] of each state and the year's
    cost of c; a state's need changing touches only that state's column and the ramps into and
    out of it: O(C) instead of O(C·T)."""

    def __init__(self, rule: Commitments, site: str, gpu: str, need: np.ndarray, need_contingency: int = 0):
        self.rule, self.site, self.gpu, self.contingency = rule, site, gpu, need_contingency
        inst = rule.inst
        self.layers = rule.tiers(site, gpu)
        self.term = _signed_term(self.layers)
        self.od_rate = inst.contracts[(site, gpu)].ondemand
        self.carbon = rule.carbon_usd(site, gpu)
        self.cap_c = min(sum(t.nodes for t in self.layers), _bounds(inst, site, gpu).committed_max)
        self.previous = rule.hours.previous
        self.following = np.argsort(self.previous)  # the position each one is the previous of
        self._build(np.asarray(need, dtype=np.int64).copy())
        self.current = self._best(self.cost, self.need, self.o)

    def _build(self, need: np.ndarray) -> None:
        hours = self.rule.hours
        self.need = need
        self.c = _commitments(self.rule.inst, self.site, self.gpu, self.layers,
                              max(int(need.max(initial=0)), self.contingency))
        warm, peak = self.rule.inst.warm_fraction, self.rule.peak_pos
        self.o = ondemand_for(need[None, :], self.c[:, None], warm)  # every state's column at once (`_column`)
        self.o[:, peak] = np.maximum(self.o[:, peak], ondemand_for(self.contingency, self.c, warm))
        self.cost = (committed_usd_per_year(self.layers, self.c) + migration_usd(self.rule.inst, self.site, self.gpu, self.c)
                     + self.od_rate * (self.o @ hours.weight_hours)
                     + self.od_rate * self.rule.inst.cold_start_hours * (hours.rises(self.o) @ hours.repeats))
        if self.carbon.any():
            self.cost = self.cost + self.c * self.carbon.sum() + self.o @ self.carbon

    def _column(self, t: int, nodes: int) -> np.ndarray:
        o = ondemand_for(nodes, self.c, self.rule.inst.warm_fraction)
        if t == self.rule.peak_pos:
            o = np.maximum(o, ondemand_for(self.contingency, self.c, self.rule.inst.warm_fraction))
        return o

    def _ramp(self, into: np.ndarray, before: np.ndarray, t: int) -> np.ndarray:
        """The ramp cost of the rises into position t, for every c."""
        return (self.od_rate * self.rule.inst.cold_start_hours * self.rule.hours.repeats[t]
                * np.maximum(into - before, 0))

    def _best(self, cost: np.ndarray, need: np.ndarray, o: np.ndarray) -> Committed:
        """The cheapest c of ``cost`` (a c whose busiest state rents beyond the on-demand cap
        only where none fits)."""
        busiest = max(int(need.max(initial=0)), self.contingency)
        inst = self.rule.inst
        peak = ondemand_for(busiest, self.c, inst.warm_fraction)
        over = (peak > inst.ondemand_max[(self.site, self.gpu)]) | beyond_churn(inst, self.site, self.gpu, self.c, peak)
        i = int(np.lexsort((cost, over))[0])
        return Committed(self.term, int(self.c[i]), o[i].copy(), float(cost[i]), bool(over[i]))

    def trial(self, changes: dict[int, int]) -> tuple[Committed, tuple]:
        """The commitment with the nodes needed at some positions changed (position → nodes),
        and a token `keep` takes; nothing is kept until then."""
        need = self.need.copy()
        for t, n in changes.items():
            need[t] = n
        if max(int(need.max(initial=0)), self.contingency) > self.c[-1] and self.c[-1] < self.cap_c:
            full = PairCost(self.rule, self.site, self.gpu, need, self.contingency)  # a larger c may pay now
            return full.current, ("rebuilt", full)
        columns = {t: self._column(t, n) for t, n in changes.items()}
        at = lambda t: columns[t] if t in columns else self.o[:, t]  # noqa: E731
        cost = self.cost.copy()
        for t in set(changes) | {int(self.following[t]) for t in changes}:
            before = int(self.previous[t])
            cost += self._ramp(at(t), at(before), t) - self._ramp(self.o[:, t], self.o[:, before], t)
        for t, column in columns.items():
            cost += self.od_rate * self.rule.hours.weight_hours[t] * (column - self.o[:, t])
            if self.carbon[t]:
                cost += self.carbon[t] * (column - self.o[:, t])
        o = self.o.copy() if len(columns) > 1 else self.o
        if o is self.o:
            (t, column), = columns.items()
            saved = o[:, t].copy()
            o[:, t] = column
            committed = self._best(cost, need, o)
            o[:, t] = saved
        else:
            for t, column in columns.items():
                o[:, t] = column
            committed = self._best(cost, need, o)
        return committed, ("updated", need, columns, cost, committed)

    def keep(self, token: tuple) -> None:
        """Make a trial's result current."""
        if token[0] == "rebuilt":
            full = token[1]
            self.c, self.o, self.cost, self.need, self.current = full.c, full.o, full.cost, full.need, full.current
            return
        _, need, columns, cost, committed = token
        for t, column in columns.items():
            self.o[:, t] = column
        self.need, self.cost, self.current = need, cost, committed


def commit(inst: Instance, need: dict[tuple[str, str, int], int]):
    """Per (site, accelerator): the whole number of committed nodes c — the fleet's own first,
    then the cheapest allowed term (`tiers`) — minimising

        cost_c(c) · 8760 + Σ_t h_t · rate_od · o_t(c) + ramp cost(o(c))
          + Σ_t h_t · carbon_t · (c + o_t(c))      (carbon_t: $ of a node-hour's emissions),
        o_t(c) = ⌈max(0, N_t − c) / (1 − φ)⌉,

    N_t the nodes the state's whole replicas need; a c whose o exceeds the on-demand cap only
    where no c fits. Contingency states use the peak slice's on-demand nodes, which rise to
    cover them. Exact by enumeration of c (all at once, `Commitments.best`): once replicas are
    fixed, (site, accelerator) pairs are independent except for power, checked afterwards."""
    rule = Commitments(inst)
    peak = rule.ids[rule.peak_pos]
    committed, ondemand, violations = {}, {}, []
    for s, g in inst.site_gpus:
        n_nominal = np.array([need.get((s, g, sid), 0) for sid in rule.ids], dtype=np.int64)
        n_cont = max((need.get((s, g, sid), 0) for sid in rule.contingencies), default=0)
        best = rule.best(s, g, n_nominal, n_cont)
        committed.update({(s, g, term): n for term, n in split(rule.tiers(s, g), best.nodes).items()})
        for sid, x in zip(rule.ids, best.ondemand):
            if x > 0:
                ondemand[(s, g, sid)] = int(x)
        for sid in rule.contingencies:
            if (s, g, peak) in ondemand and (s, g) in inst.site_gpus_in(inst.states[sid]):
                ondemand[(s, g, sid)] = ondemand[(s, g, peak)]
        if best.over_cap:
            violations.append(f"{s}/{g}: needs {int(best.ondemand.max())} on-demand nodes in some hour, cap "
                              f"{inst.ondemand_max[(s, g)]}" + (f" (and {inst.committed_max[(s, g)]} committed)"
                                                                if best.term else "")
                              + (" or its churn limits" if inst.churn is not None else ""))
    return committed, ondemand, violations
