"""Solver backends: hand a `formulations.linear.LinearProgram` to HiGHS and read back what it
found. Both solve the same arrays; they differ in the road there.

* ``highs`` (default): the arrays go straight into highspy (one `passModel`); coefficient
  changes between solves (`set_params`) go in as `changeCoeff` / `changeColsCost` /
  `changeRowsBounds` / `changeColsBounds`, so HiGHS keeps its basis. About 0.3 µs per
  nonzero to hand over.
* ``pyomo``: the same program as a Pyomo model solved through Pyomo's persistent HiGHS
  interface — the reference road, about 30× slower to build and hand over; kept to check
  the fast road against (tests) and for users who want the Pyomo model.

Every solve runs under a hard wall-clock guard: HiGHS is asked to stop at its time limit
(measured against the instance's accumulated run time) and is cancelled if it overruns by
more than GUARD_MARGIN_S — HiGHS can overrun its limit several-fold in presolve.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import highspy
import numpy as np

from formulations.linear import INF, LinearProgram

GUARD_MARGIN_S = 5.0


@contextmanager
def gc_paused():
    """Building allocates millions of small objects; the cyclic collector only slows that."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class Outcome:
    status: str  # optimal | time_limit | work_limit | infeasible | interrupted | error
    has_solution: bool
    objective: float | None
    bound: float | None
    x: np.ndarray | None
    row_dual: np.ndarray | None = None  # a linear program's row duals (HiGHS's signs), when valid
    nodes: int = 0  # branch-and-bound nodes a MIP took


class _Guard:
    """Cancels a HiGHS run that overruns its limit by more than the margin."""

    def __init__(self, highs: highspy.Highs, seconds: float):
        self.timer = threading.Timer(seconds + GUARD_MARGIN_S, highs.cancelSolve)
        self.timer.daemon = True

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()


def run_interruptibly(highs: highspy.Highs) -> None:
    """``highs.run()`` in a helper thread while this one waits: a signal (Ctrl-C, SIGTERM)
    is then handled at once — HiGHS is cancelled and the exception goes on — instead of
    after the solve, which may be minutes away."""
    failure: list[BaseException] = []

    def target():
        try:
            highs.run()
        except BaseException as exc:  # handed to the waiting thread
            failure.append(exc)

    worker = threading.Thread(target=target, name="highs-run", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except BaseException:
        highs.cancelSolve()
        worker.join()
        raise
    if failure:
        raise failure[0]


def _status(highs: highspy.Highs) -> str:
    s = highs.getModelStatus()
    ms = highspy.HighsModelStatus
    if s == ms.kOptimal:
        return "optimal"
    if s == ms.kTimeLimit:
        return "time_limit"
    if s in (ms.kIterationLimit, getattr(ms, "kSolutionLimit", None)):
        return "work_limit"  # the nodes (or iterations) it was given: work, not time
    if s in (ms.kInfeasible, ms.kUnboundedOrInfeasible):
        return "infeasible"
    if s == getattr(ms, "kInterrupt", None):
        return "interrupted"
    return "error"


def _inf(values) -> np.ndarray:
    a = np.array(values, dtype=np.float64)
    a[np.isposinf(a)] = highspy.kHighsInf
    a[np.isneginf(a)] = -highspy.kHighsInf
    return a


def new_highs() -> highspy.Highs:
    """A silent highspy.Highs: its banner goes to the process's stdout at the C level on first
    construction, where it would break `--json` output, so stdout is muted around it."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            highs = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    highs.setOptionValue("output_flag", False)
    return highs


class HighsDirect:
    """The program in a highspy.Highs instance."""

    name = "highs"

    def __init__(self, lp: LinearProgram):
        self.lp = lp
        self.highs = new_highs()
        model = highspy.HighsLp()
        model.num_col_ = lp.n_cols
        model.num_row_ = lp.n_rows
        model.col_cost_ = lp.cost_vector()
        model.col_lower_ = _inf(lp.col_lower)
        model.col_upper_ = _inf(lp.col_upper)
        model.row_lower_ = _inf(lp.row_lower)
        model.row_upper_ = _inf(lp.row_upper)
        start, index, value = lp.csc()
        model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        model.a_matrix_.start_ = start
        model.a_matrix_.index_ = index
        model.a_matrix_.value_ = value
        if any(lp.col_integer):
            model.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                                  for i in lp.col_integer]
        self.highs.passModel(model)

    def apply(self, changes: list[dict]) -> None:
        """Push coefficient, cost and bound changes (from `LinearProgram.set_params`)."""
        lp, h = self.lp, self.highs
        for change in changes:
            for position, value in change.get("coef", ()):
                h.changeCoeff(lp.entries_row[position], lp.entries_col[position], value)
            cost = change.get("cost", ())
            if cost:
                cols = np.array([c for c, _ in cost], dtype=np.int32)
                h.changeColsCost(len(cols), cols, np.array([v for _, v in cost]))
            rows = sorted({r for kind in ("row_lower", "row_upper") for r, _ in change.get(kind, ())})
            if rows:
                idx = np.array(rows, dtype=np.int32)
                h.changeRowsBounds(len(idx), idx, _inf([lp.row_lower[r] for r in rows]), _inf([lp.row_upper[r] for r in rows]))
            cols = sorted({c for kind in ("col_lower", "col_upper") for c, _ in change.get(kind, ())})
            if cols:
                idx = np.array(cols, dtype=np.int32)
                h.changeColsBounds(len(idx), idx, _inf([lp.col_lower[c] for c in cols]), _inf([lp.col_upper[c] for c in cols]))

    def forget_basis(self) -> None:
        self.highs.clearSolver()

    def basis(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The last solve's simplex basis (column and row statuses), None without one."""
        b = self.highs.getBasis()
        if not b.valid:
            return None
        return (np.array([int(v) for v in b.col_status], dtype=np.int8),
                np.array([int(v) for v in b.row_status], dtype=np.int8))

    def set_basis(self, basis: tuple[np.ndarray, np.ndarray]) -> bool:
        """Start the next solve from ``basis`` (`basis`) where it fits this program's size."""
        cols, rows = basis
        if len(cols) != self.lp.n_cols or len(rows) != self.lp.n_rows:
            return False
        b = highspy.HighsBasis()
        b.col_status = [highspy.HighsBasisStatus(int(v)) for v in cols]
        b.row_status = [highspy.HighsBasisStatus(int(v)) for v in rows]
        b.valid = True
        return self.highs.setBasis(b) == highspy.HighsStatus.kOk

    def set_start(self, cols: np.ndarray, values: np.ndarray) -> None:
        """A (partial) solution HiGHS starts its branch and bound from."""
        self.highs.setSolution(len(cols), cols, values)

    def solve(self, seconds: float, gap: float, threads: int | None, watch=None, nodes: int | None = None) -> Outcome:
        """``watch(seconds, best integer $, bound $)``, called as a MIP runs, stops it by
        returning True; a MIP stops after ``nodes`` branch-and-bound nodes where given (work
        that does not depend on the machine's speed; ``seconds`` is then only a cap)."""
        h = self.highs
        h.setOptionValue("time_limit", h.getRunTime() + max(seconds, 1.0))
        h.setOptionValue("mip_rel_gap", gap)
        h.setOptionValue("mip_max_nodes", int(nodes) if nodes is not None else highspy.kHighsIInf)
        # the master LP solves faster without presolve (reference: 12.9 s against 20.9 s; its
        # reductions are undone again by the postsolve's clean-up); MIPs keep it
        h.setOptionValue("presolve", "on" if any(self.lp.col_integer) else "off")
        if threads:
            h.setOptionValue("threads", threads)

        def interrupt(event):
            out = event.data_out
            if watch(out.running_time, out.mip_primal_bound, out.mip_dual_bound):
                event.data_in.user_interrupt = True

        if watch is not None:
            h.cbMipInterrupt.subscribe(interrupt)
        try:
            with _Guard(h, max(seconds, 1.0)):
                run_interruptibly(h)
        finally:
            if watch is not None:
                h.cbMipInterrupt.unsubscribe(interrupt)
        info = h.getInfo()
        has = info.primal_solution_status == 2
        status = _status(h)
        x = np.asarray(h.getSolution().col_value) if has else None
        objective = info.objective_function_value if has else None
        if info.mip_node_count >= 0 and any(self.lp.col_integer):
            bound = info.mip_dual_bound
        else:
            bound = objective if status == "optimal" else None
        duals = None
        if status == "optimal" and not any(self.lp.col_integer) and info.dual_solution_status == 2:
            duals = np.asarray(h.getSolution().row_dual)
        return Outcome(status, has, objective, bound, x, duals, max(int(info.mip_node_count), 0))


class PyomoHighs:
    """The program as a Pyomo model, solved through Pyomo's persistent HiGHS interface.
    Coefficient changes rebuild the Pyomo model (this road is for checking, not speed)."""

    name = "pyomo"

    def __init__(self, lp: LinearProgram):
        self.lp = lp
        self._dirty = True
        self.model = self.solver = None

    def _build(self) -> None:
        import pyomo.environ as pyo
        from pyomo.contrib.solver.solvers.highs import Highs
        from pyomo.core.expr.numeric_expr import LinearExpression

        lp = self.lp
        m = pyo.ConcreteModel()
        m.x = pyo.Var(range(lp.n_cols))
        for j in range(lp.n_cols):
            var = m.x[j]
            var.domain = pyo.Integers if lp.col_integer[j] else pyo.Reals
            var.setlb(None if lp.col_lower[j] == -INF else lp.col_lower[j])
            var.setub(None if lp.col_upper[j] == INF else lp.col_upper[j])
        by_row: dict[int, list] = {}
        for r, c, v in zip(lp.entries_row, lp.entries_col, lp.entries_val):
            by_row.setdefault(r, []).append((c, v))
        m.rows = pyo.ConstraintList()
        for r in range(lp.n_rows):
            terms = by_row.get(r, [])
            expr = LinearExpression(linear_coefs=[v for _, v in terms], linear_vars=[m.x[c] for c, _ in terms])
            lo = None if lp.row_lower[r] == -INF else lp.row_lower[r]
            hi = None if lp.row_upper[r] == INF else lp.row_upper[r]
            m.rows.add(pyo.inequality(lo, expr, hi) if lo != hi else expr == lo)
        cost = lp.cost
        m.objective = pyo.Objective(expr=LinearExpression(linear_coefs=list(cost.values()),
                                                          linear_vars=[m.x[c] for c in cost]))
        self.solver = Highs()
        self.solver.config.load_solutions = False
        self.solver.config.raise_exception_on_nonoptimal_result = False
        self.solver.set_instance(m)
        self.model = m
        self._dirty = False

    def apply(self, changes: list[dict]) -> None:
        if any(changes):
            self._dirty = True

    def forget_basis(self) -> None:
        self._dirty = True

    def basis(self) -> None:
        """No basis is read back through Pyomo's interface (this road is for checking)."""
        return None

    def set_basis(self, basis) -> bool:
        return False

    def solve(self, seconds: float, gap: float, threads: int | None, watch=None, nodes: int | None = None) -> Outcome:
        """``watch`` is not called and ``nodes`` not counted: Pyomo's interface has neither (this
        road is for checking)."""
        from pyomo.contrib.solver.common.results import SolutionStatus

        if self._dirty:
            self._build()
        h = self.solver._solver_model  # the highspy object behind the persistent interface
        self.solver.config.time_limit = h.getRunTime() + max(seconds, 1.0)
        self.solver.config.rel_gap = gap
        self.solver.config.threads = threads
        with _Guard(h, max(seconds, 1.0)):
            results = self.solver.solve(self.model)
        has = results.solution_status in (SolutionStatus.optimal, SolutionStatus.feasible)
        x = None
        if has:
            results.solution_loader.load_vars()
            x = np.array([self.model.x[j].value or 0.0 for j in range(self.lp.n_cols)])
        return Outcome(_status(h), has, results.incumbent_objective, results.objective_bound, x)


BACKENDS = {"highs": HighsDirect, "pyomo": PyomoHighs}
