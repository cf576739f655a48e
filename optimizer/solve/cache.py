"""The master program in its backend, and every change the solve makes to it, by name.

A sweep whose next run has the same structure (`formulations.structure`) — only prices,
demand, megawatts or caps changed — refreshes the coefficients of the kept program instead
of rebuilding it; the basis is forgotten, so that a run's result never depends on the run
before it.
"""

from __future__ import annotations

import time

from formulations import (
    Mode,
    Reading,
    build_program,
    carbon_cap_row,
    flow_columns,
    read_solution,
    refresh,
    structure,
    write_solution,
)
from formulations.linear import INF
from optimizer.base.errors import NumericalTroubleError, ScenarioError, TimeLimitNoPlanError
from optimizer.solve.backends import BACKENDS, Outcome, gc_paused


class ModelCache:
    def __init__(self, start_basis=None):
        self.signature = None
        self.lp = None
        self.backend = None
        self.reuses = 0
        self.closed: list[int] = []  # flow columns the last run's pool choice closed
        # a sweep's runs start their master from the base run's final basis (the same start for
        # every run, so that no run depends on the ones before it); the base run records it
        self.start_basis = start_basis
        self.last_basis = None

    def prepare(self, inst, mode: Mode, backend: str) -> tuple[float, float]:
        """Ready a program for ``inst`` in ``mode`` (plan-master or plan-exact); returns (build s,
        hand-off s) — zero build on reuse (plan-master only)."""
        if backend not in BACKENDS:
            raise ScenarioError(f"unknown solver backend '{backend}' (expected {', '.join(BACKENDS)})", field="--backend")
        start = time.perf_counter()
        signature = None if mode.integer_replicas else (backend, structure(inst))
        with gc_paused():
            if signature is not None and signature == self.signature:
                self.backend.apply(refresh(self.lp, inst) + [self.lp.set_params("gpus_per_rps", mode.gpus_per_rps)]
                                   + [self.lp.set_upper({col: INF for col in self.closed})])
                self.closed = []
                self.backend.forget_basis()
                self.reuses += 1
                return 0.0, time.perf_counter() - start
            self.lp, _ = build_program(inst, mode=mode)
            self.closed = []
            build_s = time.perf_counter() - start
            t = time.perf_counter()
            self.backend = BACKENDS[backend](self.lp)
            handoff_s = time.perf_counter() - t
        self.signature = signature
        return build_s, handoff_s

    @property
    def size(self) -> dict:
        lp = self.lp
        return {"variables": lp.n_cols, "integers": int(sum(lp.col_integer)), "rows": lp.n_rows,
                "nonzeros": len(lp.entries_val)}

    # ------------------------------------------------------------------ changes, by name
    def price_pools(self, gpus_per_rps: dict) -> None:
        """GPUs per request/s of each (pool, state) — the master's pool prices."""
        self.backend.apply([self.lp.set_params("gpus_per_rps", gpus_per_rps)])

    def close_pools_except(self, kept: set[int]) -> None:
        """Flows into every pool not in ``kept`` bounded at 0 (reopened by the next `prepare`)."""
        closed = {col: 0.0 for pid, col in flow_columns(self.lp) if pid not in kept}
        self.backend.apply([self.lp.set_upper(closed)])
        self.closed = sorted(closed)

    def param(self, name: str) -> dict:
        """Current values of a parameter (read-only use)."""
        return self.lp.params[name]

    def reserve_room(self, gpus: dict, kw_room: dict) -> None:
        """Leave GPUs free per (site, accelerator, state) and lower the kW room per (site, state)."""
        self.backend.apply([self.lp.set_params("gpu_reserve", gpus), self.lp.set_params("kw_room", kw_room)])

    def set_carbon_cap(self, tonnes: float) -> bool:
        """The carbon cap's right-hand side (a whole plan emits more than the master's fractional
        one); False where the program has no cap."""
        if carbon_cap_row(self.lp) is None:
            return False
        self.backend.apply([self.lp.set_params("carbon_cap_t", {(): tonnes})])
        return True

    # ------------------------------------------------------------------ solving
    def start_from_basis(self) -> bool:
        """The start basis, where one is given and fits the program."""
        return self.start_basis is not None and self.backend.set_basis(self.start_basis)

    def start_from(self, plan) -> None:
        """A whole plan as HiGHS's starting point (`formulations.write_solution`)."""
        self.backend.set_start(*write_solution(self.lp, plan))

    def run(self, seconds: float, gap: float, threads: int | None, what: str, watch=None,
            nodes: int | None = None) -> Outcome:
        """One solve; errors and time limits without any solution become planner-facing errors.
        ``watch`` and ``nodes``: see `optimizer.solve.backends.HighsDirect.solve`."""
        out = self.backend.solve(seconds, gap, threads, watch, nodes)
        self.last_basis = self.backend.basis() if not any(self.lp.col_integer) else None
        if out.status == "error" and not out.has_solution:
            raise NumericalTroubleError(
                f"HiGHS stopped with an error during the {what} solve and no solution; "
                "this usually means numerical trouble — check for extreme prices or demands")
        if out.status in ("time_limit", "interrupted") and not out.has_solution:
            raise TimeLimitNoPlanError(
                f"the time limit ran out during the {what} solve before any plan was found; "
                "raise --time-limit or shrink the scenario")
        if out.status == "work_limit" and not out.has_solution:
            raise TimeLimitNoPlanError(
                f"the {what} solve found no plan in the effort's branch-and-bound nodes; "
                "raise --effort or shrink the scenario")
        return out

    def read(self, x) -> Reading:
        return read_solution(self.lp, x)
