"""The typed registry modules write into: cost terms by category and the contributions that
the balancing modules turn into rows. A balance that is read but that no module declared
writing is an error, so a missing module fails loudly rather than leaving a row out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from formulations.linear import LinearProgram
from formulations.modes import Mode


def _terms() -> dict:
    return defaultdict(list)


@dataclass
class Terms:
    """(column, coefficient) pairs keyed by what they balance; a coefficient is a number or a
    `linear.Param`.

    cost            category → (column, $ for the horizon per unit)
    tier_inflow     (regime, site, workload, tier, state) → requests/s routed into a tier
    tier_outflow    same key → requests/s the tier's prefill and colocated pools take
    decode_inflow   (site, workload, speed class, state) → requests/s leaving disaggregated prefill
    decode_outflow  same key → requests/s the decode pools take
    gpu_load        (site, gpu, state) → GPUs replicas occupy
    nodes_usable    (site, gpu, state) → nodes replicas may use
    nodes_powered   (site, gpu, state) → nodes drawing power
    """

    cost: dict[str, list]  # the instance's cost categories, each with its (column, coefficient) pairs
    tier_inflow: dict = field(default_factory=_terms)
    tier_outflow: dict = field(default_factory=_terms)
    decode_inflow: dict = field(default_factory=_terms)
    decode_outflow: dict = field(default_factory=_terms)
    gpu_load: dict = field(default_factory=_terms)
    nodes_usable: dict = field(default_factory=_terms)
    nodes_powered: dict = field(default_factory=_terms)
    written: set = field(default_factory=set)

    def add_cost(self, category: str, col: int, coef) -> None:
        if category not in self.cost:
            raise KeyError(f"unknown cost category {category!r}; known: {', '.join(self.cost)}")
        self.cost[category].append((col, coef))

    def writes(self, *balances: str) -> None:
        """Declare that the calling module contributes to these balances (maybe nothing)."""
        self.written.update(balances)

    def require(self, name: str) -> dict:
        """The contributions to one balance; raises when no module declared writing it."""
        if name not in self.written:
            raise RuntimeError(f"no formulation module contributed to '{name}' — a module is missing from the build")
        return getattr(self, name)


@dataclass
class Build:
    """What every module receives: the linear program, the instance, the registry, and the
    mode (`modes.Mode`: how replicas are counted, how the commitment is treated)."""

    lp: LinearProgram
    inst: object
    terms: Terms
    mode: Mode
