"""What a solve is asked for and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from optimizer.solve.backends import BACKENDS
from optimizer.solve.fleet import Solution

STEPS = ("bound", "improve", "refine")  # the default solve, in order
FIRST_PLAN_STEPS = STEPS[:-1]  # the first whole plan, improved: what a sweep run does unless asked for more
EFFORTS = ("first", "quick", "thorough")


@dataclass(frozen=True)
class Work:
    """The work an effort buys, counted in units that do not depend on the machine's speed or
    load — so that the same scenario, flags and version give the same plan anywhere. Each
    effort does what the one before it does, then more: more effort never gives a costlier
    plan. The wall clock is only a safety cap (`cap_s` unless a time limit is given); a solve
    it stops says so, because its plan may differ on another machine."""

    moves: int  # moves priced by the search on whole plans (`moves`), in all
    exact_binaries: int  # pool-size choices up to which the exact model is handed to HiGHS whole
    exact_nodes: int  # its branch-and-bound nodes (exact mode's too)
    slice_rounds: int  # rounds of slice programs: re-plans on the commitment and a Lagrangian bound
    slice_nodes: int  # branch-and-bound nodes of each slice program
    cap_s: float  # seconds after which the solve stops wherever it is


# measured on 2 cores (benchmarks/RESULTS.md): the exact model of us-east (52,860 pool-size
# choices) takes about 0.2 s a node, the one-site scenario's (2,984) is proven in a few hundred
WORK = {
    "first": Work(moves=5_000, exact_binaries=0, exact_nodes=1_000, slice_rounds=0, slice_nodes=0, cap_s=900.0),
    "quick": Work(moves=60_000, exact_binaries=12_000, exact_nodes=5_000, slice_rounds=0, slice_nodes=0, cap_s=1800.0),
    "thorough": Work(moves=400_000, exact_binaries=60_000, exact_nodes=3_000, slice_rounds=2, slice_nodes=200,
                     cap_s=7200.0),
}


@dataclass(frozen=True)
class SolverSettings:
    """exact: True (integer replicas throughout), False (master + whole plans), None (exact
    when the exact model is small — at most `AUTO_EXACT_BINARIES` pool-size choices).
    ``steps``: the named steps of the default mode to run (`optimizer.solve.steps`), in their
    order; without ``refine`` the solve stops at the first whole plan, improved by the first
    effort's moves. ``effort`` sets the work (`WORK`); ``time_limit_s`` the wall-clock cap
    (default: the effort's)."""

    time_limit_s: float | None = None
    mip_gap: float = 0.005
    threads: int | None = None
    exact: bool | None = None
    backend: str = "highs"
    steps: tuple[str, ...] = STEPS
    effort: str = "quick"
    workers: int | None = None  # local processes for slice programs (default: the machine's cores, at most 8)
    scheduler: str | None = None  # a Dask scheduler's address: slice programs run there instead

    def __post_init__(self):
        checks = (
            ("time_limit_s", self.time_limit_s is None
             or (isinstance(self.time_limit_s, (int, float)) and 0 < self.time_limit_s <= 1e7),
             "seconds in (0, 1e7] or none"),
            ("mip_gap", isinstance(self.mip_gap, (int, float)) and 0 < self.mip_gap < 1, "a fraction in (0, 1)"),
            ("threads", self.threads is None or (isinstance(self.threads, int) and 1 <= self.threads <= 1024),
             "a whole number in [1, 1024] or none"),
            ("exact", self.exact in (None, True, False), "true, false or none"),
            ("backend", self.backend in BACKENDS, "one of " + ", ".join(BACKENDS)),
            ("steps", isinstance(self.steps, (tuple, list)) and all(s in STEPS for s in self.steps),
             "names among " + ", ".join(STEPS)),
            ("effort", self.effort in EFFORTS, "one of " + ", ".join(EFFORTS)),
            ("workers", self.workers is None or (isinstance(self.workers, int) and 1 <= self.workers <= 1024),
             "a whole number in [1, 1024] or none"),
        )
        for name, ok, expected in checks:
            if not ok or isinstance(getattr(self, name), bool) and name != "exact":
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def work(self) -> Work:
        return WORK[self.effort]

    @property
    def cap_s(self) -> float:
        """The wall-clock safety cap: the time limit where given, else the effort's."""
        return self.time_limit_s if self.time_limit_s is not None else self.work.cap_s


@dataclass(frozen=True)
class SolveStep:
    """One line of the solve's log."""

    kind: str  # "bound" | "room" | "reoperate" | "improve" | "exact" | "replan" | "lagrangian"
    status: str
    objective_usd: float | None  # what the solver's program priced
    bound_usd: float | None
    seconds: float
    repaired_usd: float | None = None  # the whole plan it led to


@dataclass(frozen=True)
class Candidate:
    """A whole plan as each step hands it on: its cost (total cost + unserved penalty) and the
    demand it leaves unserved. Plans compare by what they leave unserved first, then by cost —
    a plan that serves less never replaces one that serves more, whatever the penalty."""

    cost_usd: float
    solution: Solution
    unserved_request_hours: float = 0.0
    over_cap_t: float = 0.0  # tonnes a year above the scenario's carbon cap

    def better_than(self, other: "Candidate | None") -> bool:
        if other is None:
            return True
        tolerance = 1e-6 * max(1.0, other.unserved_request_hours)
        if self.unserved_request_hours < other.unserved_request_hours - tolerance:
            return True
        if self.unserved_request_hours > other.unserved_request_hours + tolerance:
            return False
        if abs(self.over_cap_t - other.over_cap_t) > 1e-6:  # a plan that keeps the cap before a cheaper one
            return self.over_cap_t < other.over_cap_t
        return self.cost_usd < other.cost_usd - 1e-6


@dataclass(frozen=True)
class SolveResult:
    status: str  # optimal | gap_above_target | time_limit
    solution: Solution
    objective_usd: float  # total cost + unserved penalty of the kept plan
    best_bound_usd: float
    mip_gap: float
    build_seconds: float
    handoff_seconds: float
    solve_seconds: float
    steps: list[SolveStep] = field(default_factory=list)
    model_size: dict = field(default_factory=dict)
    exact: bool = False
    history: list[Progress] = field(default_factory=list)  # the plan and the bound as they moved
    bounds: list[Bound] = field(default_factory=list)  # every lower bound tried
    first_plan_seconds: float | None = None  # from the start of the solve to the first whole plan
    split: dict = field(default_factory=dict)  # where the gap lies, as measured (`anytime.gap_split`)
    stopped_by_clock: bool = False  # the wall-clock cap stopped the work: the plan may differ on another machine
    work: dict = field(default_factory=dict)  # the work done, by kind (moves priced, nodes, slice programs)
    churn_shadow: list = field(default_factory=list)  # binding churn limits, $ per node (`optimizer.solve.churn`)


@dataclass(frozen=True)
class Progress:
    """A point of the solve's log: the best plan and the best bound at a second."""

    seconds: float
    plan_usd: float | None
    bound_usd: float | None
    event: str


@dataclass(frozen=True)
class Bound:
    """A lower bound on the cost of every plan, and what it comes from."""

    source: str  # "master LP" | "Lagrangian" | "exact MIP"
    usd: float
    seconds: float  # when it was reached, from the start of the solve
    note: str = ""
