"""The typed registry modules write into: cost terms by category and the contributions that
the balancing modules turn into rows. A balance that is read but that no module declared
writing is an error, so a missing module fails loudly rather than leaving a row out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from formulations.linear import LinearProgram


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


@dataclass(frozen=True)
class Operating:
    """The formulation on one state with the commitment decided elsewhere:

    * ``committed`` given: the plan's committed nodes are fixed (bounds) and cost nothing
      more — a plan's commitment operated (re-operation of its slices, the hours of its year,
      a slice re-planned exactly);
    * ``committed_usd`` given instead: committed nodes are free up to their cap at that price
      per node for this state — a slice's share of the commitment, a Lagrangian multiplier
      (`optimizer.solve.lagrange`);
    * ``open_pools``: only these pools exist (None: all);
    * every flow pays a tie-break of ``tie_break_usd_per_gpu_hour`` per GPU it occupies (master
      pricing), and every route the same per ms of round trip, so that among equally cheap
      choices free committed GPUs go where they occupy the fewest and requests stay near."""

    committed: dict | None = None  # (site, gpu) → committed nodes
    open_pools: frozenset | None = None  # pool ids
    tie_break_usd_per_gpu_hour: float = 0.0
    committed_usd: dict | None = None  # (site, gpu) → $ per committed node in this state
    ondemand_extra_usd: dict | None = None  # (site, gpu) → $ added per on-demand node (relaxed ramps' multipliers)


@dataclass
class Build:
    """What every module receives: the linear program, the instance, the registry, the mode.

    exact=False is the master problem: replicas are continuous, a pool's GPUs are its flow
    times the parameter ``gpus_per_rps[(pool, state)]`` (the solve loop re-prices it between
    solves). exact=True makes replicas integer with the SLO capacity f(n) exact on the
    integers (small instances and checks only). ``operating`` (master pricing) fixes a
    commitment (`Operating`).
    """

    lp: LinearProgram
    inst: object
    terms: Terms
    exact: bool
    max_replicas: dict  # (pool id, state id) → largest pool size worth considering
    operating: Operating | None = None
    chord: bool = False  # exact mode with the chord f(N)/N instead of the pool-size choice (`pools`)
