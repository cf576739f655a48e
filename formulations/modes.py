"""What a program is built for: the formulation's mode.

One formulation serves the plan and the operation of a plan. A mode says two things — how a
pool's replicas are counted and how the commitment (the committed nodes, paid every hour of
the horizon) is treated — and carries the data that choice needs. Modules branch on its named
predicates (`Mode.integer_replicas`, `Mode.chord_capacity`, `Mode.commitment_planned`,
`Mode.commitment_fixed`, `Mode.commitment_priced`, `Mode.tie_breaks`,
`Mode.ondemand_surcharged`), never on which fields happen to be set.

    mode            replicas                          commitment
    plan-master     continuous, priced by gpus_per_rps  chosen, paid for the horizon
    plan-exact      whole, pool-size choice            chosen, paid for the horizon
    plan-chord      whole, chord capacity              chosen, paid for the horizon
    operate-fixed   priced (or whole)                  a plan's, fixed and free
    price-state     whole (chord or pool-size choice)   free up to its cap at $ per node
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Replicas(Enum):
    """How a pool's replicas are counted (`pools`)."""

    PRICED = "priced"  # continuous: GPUs = gpus_per_rps[p,t] · flow, a parameter the solve loop sets
    EXACT = "exact"  # whole replicas, the SLO capacity f(n) exact on the integers (a pool-size choice)
    CHORD = "chord"  # whole replicas at the per-replica capacity f(N)/N of the largest size (a relaxation)


class Commitment(Enum):
    """How committed nodes are treated (`procurement`)."""

    PLANNED = "planned"  # chosen by the program and paid for the horizon
    FIXED = "fixed"  # a plan's, fixed by bounds, costing nothing more
    PRICED = "priced"  # free up to the cap at a given $ per node for this state


@dataclass(frozen=True, kw_only=True)
class Mode:
    """A formulation mode; build one with its named constructors."""

    name: str
    replicas: Replicas
    commitment: Commitment
    gpus_per_rps: dict = field(default_factory=dict)  # (pool, state) → GPUs per request/s (priced replicas)
    max_replicas: dict = field(default_factory=dict)  # (pool, state) → largest pool size worth considering
    committed: dict = field(default_factory=dict)  # (site, gpu) → a plan's committed nodes (fixed)
    committed_usd: dict = field(default_factory=dict)  # (site, gpu) → $ per committed node in this state (priced)
    ondemand_extra_usd: dict | None = None  # (site, gpu) → $ added per on-demand node (relaxed ramps' multipliers)
    open_pools: frozenset | None = None  # pool ids that exist (None: all)
    tie_break_usd_per_gpu_hour: float = 0.0

    # ------------------------------------------------------------------ the modes
    @classmethod
    def plan_master(cls, *, gpus_per_rps: dict) -> Mode:
        """The master problem: replicas are continuous, a pool's GPUs are its flow times the
        parameter ``gpus_per_rps[(pool, state)]`` (re-priced by the solve loop between solves);
        nodes are continuous (made whole afterwards); the commitment is chosen and paid for
        the horizon."""
        return cls(name="plan-master", replicas=Replicas.PRICED, commitment=Commitment.PLANNED,
                   gpus_per_rps=dict(gpus_per_rps))

    @classmethod
    def plan_exact(cls, *, max_replicas: dict) -> Mode:
        """The exact plan: integer replicas with a pool-size choice up to
        ``max_replicas[(pool, state)]`` (f(n) exact on the integers), integer nodes; the
        commitment is chosen and paid for the horizon."""
        return cls(name="plan-exact", replicas=Replicas.EXACT, commitment=Commitment.PLANNED,
                   max_replicas=dict(max_replicas))

    @classmethod
    def plan_chord(cls, *, max_replicas: dict) -> Mode:
        """The exact plan with chord capacity: integer replicas at f(N)/N each, N =
        ``max_replicas[(pool, state)]`` (a relaxation of plan-exact without pool sizes, for
        bounds), integer nodes; the commitment is chosen and paid for the horizon."""
        return cls(name="plan-chord", replicas=Replicas.CHORD, commitment=Commitment.PLANNED,
                   max_replicas=dict(max_replicas))

    @classmethod
    def operate_fixed(cls, *, committed: dict, gpus_per_rps: dict | None = None, max_replicas: dict | None = None,
                      open_pools: frozenset | None = None, tie_break_usd_per_gpu_hour: float = 0.0) -> Mode:
        """A plan's commitment operated: committed nodes are fixed (bounds) at ``committed``
        (site, gpu) → nodes on each pair's first priced term, and cost nothing more. Replicas
        are priced by ``gpus_per_rps`` as in plan-master (the hours of a year, a plan's slices
        operated again) or, given ``max_replicas`` instead, whole as in plan-exact (a slice
        re-planned exactly). ``open_pools``: only these pools get flows. A positive
        ``tie_break_usd_per_gpu_hour`` charges every flow that much per GPU it occupies and
        every route the same per ms of round trip, so that among equally cheap choices free
        committed GPUs go where they occupy the fewest and requests stay near."""
        if (gpus_per_rps is None) == (max_replicas is None):
            raise ValueError("operate-fixed takes either gpus_per_rps (priced replicas) or max_replicas (whole)")
        if gpus_per_rps is not None:
            return cls(name="operate-fixed", replicas=Replicas.PRICED, commitment=Commitment.FIXED,
                       gpus_per_rps=dict(gpus_per_rps), committed=dict(committed), open_pools=open_pools,
                       tie_break_usd_per_gpu_hour=tie_break_usd_per_gpu_hour)
        return cls(name="operate-fixed", replicas=Replicas.EXACT, commitment=Commitment.FIXED,
                   max_replicas=dict(max_replicas), committed=dict(committed), open_pools=open_pools,
                   tie_break_usd_per_gpu_hour=tie_break_usd_per_gpu_hour)

    @classmethod
    def price_state(cls, *, committed_usd: dict, max_replicas: dict, ondemand_extra_usd: dict | None = None,
                    replicas: Replicas = Replicas.CHORD) -> Mode:
        """One state's share of the commitment, priced (a Lagrangian multiplier): committed
        nodes are integer and free up to their cap at ``committed_usd[(site, gpu)]`` each (in
        the reserved cost), instead of the horizon's price; with ``ondemand_extra_usd`` an
        on-demand node also pays that much (as ramp cost: the ramps relaxed around the
        state). Replicas are whole: chord capacity (default) or the pool-size choice."""
        if replicas is Replicas.PRICED:
            raise ValueError("price-state counts whole replicas (chord or exact)")
        return cls(name="price-state", replicas=replicas, commitment=Commitment.PRICED,
                   max_replicas=dict(max_replicas), committed_usd=dict(committed_usd),
                   ondemand_extra_usd=None if ondemand_extra_usd is None else dict(ondemand_extra_usd))

    # ------------------------------------------------------------------ what modules ask
    @property
    def integer_replicas(self) -> bool:
        """Whole replicas (and whole nodes): the pools count replicas as integer columns."""
        return self.replicas is not Replicas.PRICED

    @property
    def chord_capacity(self) -> bool:
        """Whole replicas at the chord f(N)/N instead of the pool-size choice."""
        return self.replicas is Replicas.CHORD

    @property
    def commitment_planned(self) -> bool:
        """Committed nodes are decided here and paid for the horizon."""
        return self.commitment is Commitment.PLANNED

    @property
    def commitment_fixed(self) -> bool:
        """Committed nodes are fixed at a plan's and cost nothing more."""
        return self.commitment is Commitment.FIXED

    @property
    def commitment_priced(self) -> bool:
        """Committed nodes are free up to their cap at a price per node for this state."""
        return self.commitment is Commitment.PRICED

    @property
    def tie_breaks(self) -> bool:
        """Flows and routes pay the tie-break."""
        return self.tie_break_usd_per_gpu_hour > 0

    @property
    def ondemand_surcharged(self) -> bool:
        """On-demand nodes pay an extra per node (the relaxed ramps' multipliers)."""
        return self.ondemand_extra_usd is not None
