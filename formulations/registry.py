"""The typed registry modules write into: cost terms and the contributions that the
balancing modules turn into constraints. A balance that is read but was never written is
an error, so a missing module fails loudly rather than leaving a constraint out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

COST_CATEGORIES = ("reserved", "owned", "owned_energy", "ondemand", "ramp", "egress", "unserved")


@dataclass
class Terms:
    """Linear expressions keyed by what they balance.

    cost            category → expressions in US dollars for the horizon
    tier_inflow     (regime, site, workload, tier, state) → requests/s routed into a tier
    tier_outflow    same key → requests/s the tier's prefill and colocated pools take
    decode_inflow   (site, workload, state) → requests/s leaving disaggregated prefill
    decode_outflow  same key → requests/s the decode pools take
    gpu_load        (site, gpu, state) → GPUs replicas occupy
    nodes_usable    (site, gpu, state) → nodes replicas may use
    nodes_powered   (site, gpu, state) → nodes drawing power
    """

    cost: dict[str, list] = field(default_factory=lambda: {c: [] for c in COST_CATEGORIES})
    tier_inflow: dict = field(default_factory=lambda: defaultdict(list))
    tier_outflow: dict = field(default_factory=lambda: defaultdict(list))
    decode_inflow: dict = field(default_factory=lambda: defaultdict(list))
    decode_outflow: dict = field(default_factory=lambda: defaultdict(list))
    gpu_load: dict = field(default_factory=lambda: defaultdict(list))
    nodes_usable: dict = field(default_factory=lambda: defaultdict(list))
    nodes_powered: dict = field(default_factory=lambda: defaultdict(list))
    written: set = field(default_factory=set)

    def add_cost(self, category: str, expr) -> None:
        if category not in self.cost:
            raise KeyError(f"unknown cost category {category!r}; known: {', '.join(COST_CATEGORIES)}")
        self.cost[category].append(expr)

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
    """What every module receives: the model, the instance, the registry and the mode.

    exact=False is the master problem: replicas are continuous, a pool's replicas are its
    flow over its per-replica capacity κ (kept in the mutable parameter ``gpus_per_rps`` so a
    re-solve updates coefficients instead of rebuilding). exact=True makes replicas integer
    with the SLO capacity f(n) exact on the integers (small instances and checks only).
    """

    model: object
    inst: object
    terms: Terms
    exact: bool
    max_replicas: dict  # (pool id, state id) → largest pool size worth considering
