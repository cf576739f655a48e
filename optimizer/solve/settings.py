"""What a solve is asked for and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from optimizer.backends import BACKENDS
from optimizer.fleet import Solution

STEPS = ("bound", "dominant_pools", "descend", "reoperate", "consolidate", "refine")  # the default solve, in order
FIRST_PLAN_STEPS = STEPS[:-1]  # the first whole plan: what a sweep run does unless asked for more
EFFORT_BUDGET_S = {"first": 60.0, "quick": 60.0, "thorough": 600.0}  # the budget when no time limit is given


@dataclass(frozen=True)
class SolverSettings:
    """exact: True (integer replicas throughout), False (master + repair), None (exact when
    the exact model is small — at most `AUTO_EXACT_BINARIES` pool-size choices). ``steps``:
    the named steps of the default mode to run (`optimizer.solve.steps`), in their order;
    without ``refine`` the solve stops at the first whole plan (`FIRST_PLAN_STEPS`)."""

    time_limit_s: float = 60.0
    mip_gap: float = 0.005
    threads: int | None = None
    exact: bool | None = None
    # plan solves after the bound solve: the guess, then tangent steps. 2 since re-operation
    # and closing follow (benchmarks/RESULTS.md, "Solve steps")
    plan_iterations: int = 2
    backend: str = "highs"
    steps: tuple[str, ...] = STEPS
    workers: int | None = None  # local processes for slice programs (default: the machine's cores, at most 8)
    scheduler: str | None = None  # a Dask scheduler's address: slice programs run there instead

    def __post_init__(self):
        checks = (
            ("time_limit_s", isinstance(self.time_limit_s, (int, float)) and 0 < self.time_limit_s <= 1e7,
             "seconds in (0, 1e7]"),
            ("mip_gap", isinstance(self.mip_gap, (int, float)) and 0 < self.mip_gap < 1, "a fraction in (0, 1)"),
            ("threads", self.threads is None or (isinstance(self.threads, int) and 1 <= self.threads <= 1024),
             "a whole number in [1, 1024] or none"),
            ("exact", self.exact in (None, True, False), "true, false or none"),
            ("plan_iterations", isinstance(self.plan_iterations, int) and 1 <= self.plan_iterations <= 100,
             "a whole number in [1, 100]"),
            ("backend", self.backend in BACKENDS, "one of " + ", ".join(BACKENDS)),
            ("steps", isinstance(self.steps, (tuple, list)) and all(s in STEPS for s in self.steps),
             "names among " + ", ".join(STEPS)),
            ("workers", self.workers is None or (isinstance(self.workers, int) and 1 <= self.workers <= 1024),
             "a whole number in [1, 1024] or none"),
        )
        for name, ok, expected in checks:
            if not ok or isinstance(getattr(self, name), bool) and name != "exact":
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")
        object.__setattr__(self, "steps", tuple(self.steps))


@dataclass(frozen=True)
class SolveStep:
    """One line of the solve's log."""

    kind: str  # "bound" | "plan" | "exact" | "reoperate" | "consolidate" | "replan" | "lagrangian"
    status: str
    objective_usd: float | None  # what the solver's program priced
    bound_usd: float | None
    seconds: float
    repaired_usd: float | None = None  # the whole plan it led to


@dataclass(frozen=True)
class Candidate:
    """A whole plan and its cost (total cost + unserved penalty), as each step hands it on."""

    cost_usd: float
    solution: Solution


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
