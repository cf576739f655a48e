"""Churn limits: how far a plan may move from a previous fleet, as plain data the formulation
(`formulations.churn`) and the whole-plan searches (`optimizer.solve.commitments`) read.

A fleet's nodes at a (site, accelerator) pair are its committed nodes c plus its on-demand
peak P = max over nominal states of the on-demand nodes rented. With the previous fleet's
c⁰ and P⁰ (N⁰ = c⁰ + P⁰):

    growth      c + P − N⁰ ≤ γ · N⁰ + Γ            nodes added, as energy-system planners write it
    removal     c⁰ − c ≤ R                          committed nodes ended or taken out
    budget      Σ_pairs |c − c⁰| + max(0, P − P⁰) ≤ B   node changes

On-demand nodes given back count as no change (they are rented by the hour and returned every
day by design); on-demand nodes beyond the previous peak count as added. A budget of zero
therefore keeps every committed node and rents no more on demand than the previous fleet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.base.errors import ScenarioError

NO_LIMIT = math.inf


@dataclass(frozen=True)
class PairBounds:
    """What a pair's whole commitment may be: committed nodes in [committed_min, committed_max],
    committed plus on-demand nodes of any state ≤ nodes_max, on-demand nodes ≤ ondemand_max."""

    committed_min: int = 0
    committed_max: float = NO_LIMIT
    nodes_max: float = NO_LIMIT
    ondemand_max: float = NO_LIMIT


@dataclass(frozen=True)
class ChurnLimits:
    """The previous fleet and the limits on moving from it (module docstring). ``allotted``:
    the budget shared out per pair — (committed nodes added, removed, on-demand peak added) —
    which the whole-plan searches keep (`allot`); None before the budget is shared."""

    previous_committed: dict  # (site, gpu) → committed nodes of the previous fleet
    previous_ondemand: dict  # (site, gpu) → its on-demand peak nodes
    growth_factor: float | None = None  # γ (None with growth_nodes None: no growth limit)
    growth_nodes: float | None = None  # Γ
    max_removed_nodes: int | None = None  # R, per (site, accelerator)
    max_changes: int | None = None  # B, over all pairs
    allotted: dict | None = None
    migration_usd_per_node: float = 0.0  # $ once per committed node added at a pair (replicas moved onto it)

    def migration_usd(self, pair, committed) -> float:
        """What the committed nodes added at a pair cost to move replicas onto: m · max(0, c − c⁰)
        (``committed`` a number or an array of them)."""
        added = np.maximum(np.asarray(committed) - int(self.previous_committed.get(pair, 0)), 0)
        return self.migration_usd_per_node * added

    @property
    def limits_growth(self) -> bool:
        return self.growth_factor is not None or self.growth_nodes is not None

    def previous_nodes(self, pair) -> int:
        """N⁰ = c⁰ + P⁰ of a pair."""
        return int(self.previous_committed.get(pair, 0)) + int(self.previous_ondemand.get(pair, 0))

    def growth_cap(self, pair) -> float:
        """(1 + γ) · N⁰ + Γ: the most nodes a pair may hold in any state."""
        if not self.limits_growth:
            return NO_LIMIT
        previous = self.previous_nodes(pair)
        return (1.0 + (self.growth_factor or 0.0)) * previous + (self.growth_nodes or 0.0)

    def committed_floor(self, pair) -> int:
        """c⁰ − R (at least 0): the fewest committed nodes a pair may keep."""
        if self.max_removed_nodes is None:
            return 0
        return max(0, int(self.previous_committed.get(pair, 0)) - self.max_removed_nodes)

    def pair_bounds(self, pair) -> PairBounds:
        """A pair's bounds from the growth and removal limits and, once shared, its budget."""
        c_min, c_max, nodes_max = self.committed_floor(pair), NO_LIMIT, math.floor(self.growth_cap(pair) + 1e-9) \
            if self.limits_growth else NO_LIMIT
        od_max = NO_LIMIT
        if self.allotted is not None:
            up, down, od_up = self.allotted.get(pair, (0, 0, 0))
            c0 = int(self.previous_committed.get(pair, 0))
            c_min, c_max = max(c_min, c0 - down), c0 + up
            od_max = int(self.previous_ondemand.get(pair, 0)) + od_up
        return PairBounds(c_min, min(c_max, nodes_max), nodes_max, od_max)

    def changes(self, committed: dict, ondemand_peak: dict) -> dict:
        """(site, gpu) → (committed added, committed removed, on-demand peak added) of a fleet
        (committed nodes and on-demand peak per pair) against the previous one."""
        out = {}
        for pair in sorted(set(committed) | set(ondemand_peak) | set(self.previous_committed) | set(self.previous_ondemand)):
            dc = int(committed.get(pair, 0)) - int(self.previous_committed.get(pair, 0))
            dp = int(ondemand_peak.get(pair, 0)) - int(self.previous_ondemand.get(pair, 0))
            if dc or dp > 0:
                out[pair] = (max(dc, 0), max(-dc, 0), max(dp, 0))
        return out

    def breaches(self, committed: dict, ondemand_peak: dict) -> list[str]:
        """Each limit a fleet breaks, in words (empty: it keeps them all)."""
        out = []
        for pair, (added, removed, od_added) in self.changes(committed, ondemand_peak).items():
            nodes = int(committed.get(pair, 0)) + int(ondemand_peak.get(pair, 0))
            cap = self.growth_cap(pair)
            if nodes > cap + 1e-9:
                out.append(f"{pair[0]}/{pair[1]}: {nodes} nodes, more than the growth limit's {cap:g} "
                           f"({self.previous_nodes(pair)} before)")
            if self.max_removed_nodes is not None and removed > self.max_removed_nodes:
                out.append(f"{pair[0]}/{pair[1]}: {removed} committed nodes removed, more than {self.max_removed_nodes}")
        used = self.used(committed, ondemand_peak)
        if self.max_changes is not None and used > self.max_changes:
            out.append(f"{used} node changes, more than the budget of {self.max_changes}")
        return out

    def used(self, committed: dict, ondemand_peak: dict) -> int:
        """Node changes of a fleet: Σ |c − c⁰| + max(0, P − P⁰)."""
        return sum(sum(v) for v in self.changes(committed, ondemand_peak).values())


def allot(limits: ChurnLimits, wanted: dict) -> ChurnLimits:
    """The budget shared out per pair from the changes a linear program wanted (pair →
    (added, removed, on-demand added), fractional): each change rounded down, then the
    budget left given a node at a time to the largest remainders (ties by pair), so the
    shares never add up to more than the budget."""
    if limits.max_changes is None:
        return limits
    shares = {(pair, i): math.floor(v + 1e-6) for pair, values in wanted.items() for i, v in enumerate(values)}
    left = limits.max_changes - sum(shares.values())
    remainders = sorted(((wanted[pair][i] - n, pair, i) for (pair, i), n in shares.items()),
                        key=lambda r: (-r[0], r[1], r[2]))
    for rest, pair, i in remainders:
        if left <= 0 or rest <= 1e-6:
            break
        shares[(pair, i)] += 1
        left -= 1
    allotted = {pair: tuple(shares[(pair, i)] for i in range(3)) for pair in wanted}
    return ChurnLimits(limits.previous_committed, limits.previous_ondemand, limits.growth_factor, limits.growth_nodes,
                       limits.max_removed_nodes, limits.max_changes, allotted, limits.migration_usd_per_node)


def limits_from(section, previous: tuple[dict, dict] | None, offered) -> ChurnLimits | None:
    """The churn limits of a scenario's ``churn`` section (`optimizer.scenario.sections.Churn`)
    against a previous fleet ``(committed, on-demand peak)`` per (site, gpu); None where there
    is no previous fleet. A limit without a previous fleet, or a previous fleet with nodes at a
    pair the scenario does not offer (``offered``), is an error naming the section."""
    if previous is None:
        if section.limited:
            raise ScenarioError("churn limits need a previous fleet to move from; expected a plan folder to start "
                                "from (fleetplan plan --from-plan OLD_DIR), or no churn limits", field="churn")
        return None
    committed, ondemand = previous
    stray = sorted(pair for pair in set(committed) | set(ondemand)
                   if pair not in set(offered) and (committed.get(pair, 0) or ondemand.get(pair, 0)))
    if stray:
        raise ScenarioError("the previous fleet has nodes at " + ", ".join(f"{s}/{g}" for s, g in stray)
                            + " which this scenario does not offer; expected its sites and accelerators to include "
                              "every pair the previous plan uses", field="churn")
    return ChurnLimits(dict(committed), dict(ondemand), section.growth_factor, section.growth_nodes,
                       section.max_removed_nodes, section.max_changes,
                       migration_usd_per_node=section.migration_usd_per_node or 0.0)
