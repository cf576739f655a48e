"""A linear program assembled as arrays — the contract between the formulation modules and
the solver backends.

Modules add blocks of columns (variables) and rows (constraints) keyed by their index
tuples, and cost coefficients. A coefficient, cost or bound may be a `Param` reference
instead of a number: a named, keyed value that can change between solves (prices, demand,
the per-request GPU cost of a pool) without rebuilding — the backends push the new values
into the solver, which keeps its basis.

Everything is plain Python lists and dicts while building and NumPy arrays (CSR) once
`freeze`d: a model of a million nonzeros builds in about a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

INF = math.inf


@dataclass(frozen=True)
class Param:
    """``scale`` × the value of parameter ``name`` at ``key``."""

    name: str
    key: tuple
    scale: float = 1.0

    def __mul__(self, factor: float) -> "Param":
        return Param(self.name, self.key, self.scale * factor)

    __rmul__ = __mul__


@dataclass
class LinearProgram:
    params: dict[str, dict] = field(default_factory=dict)
    col_lower: list = field(default_factory=list)
    col_upper: list = field(default_factory=list)
    col_integer: list = field(default_factory=list)
    cols: dict[str, dict] = field(default_factory=dict)  # block → key → column
    row_lower: list = field(default_factory=list)
    row_upper: list = field(default_factory=list)
    rows: dict[str, dict] = field(default_factory=dict)  # block → key → row
    entries_row: list = field(default_factory=list)
    entries_col: list = field(default_factory=list)
    entries_val: list = field(default_factory=list)
    cost: dict[int, float] = field(default_factory=dict)
    cost_terms: dict[int, list] = field(default_factory=dict)  # column → numbers and Params it sums
    # where parameters enter: (kind, position, scale) per (name, key)
    uses: dict[tuple, list] = field(default_factory=dict)

    # ------------------------------------------------------------------ parameters
    def param(self, name: str, values: dict) -> None:
        self.params[name] = dict(values)

    def value(self, x) -> float:
        if isinstance(x, Param):
            return x.scale * self.params[x.name][x.key]
        return float(x)

    def _use(self, x, kind: str, position) -> None:
        if isinstance(x, Param):
            self.uses.setdefault((x.name, x.key), []).append((kind, position, x.scale))

    # ------------------------------------------------------------------ building
    def add_cols(self, block: str, keys, lower=0.0, upper=INF, integer: bool = False) -> dict:
        """Columns for ``keys``; ``lower``/``upper`` a number, a Param or a callable of the key."""
        out = self.cols.setdefault(block, {})
        for key in keys:
            col = len(self.col_lower)
            out[key] = col
            lo = lower(key) if callable(lower) else lower
            hi = upper(key) if callable(upper) else upper
            self.col_lower.append(self.value(lo))
            self.col_upper.append(self.value(hi))
            self.col_integer.append(integer)
            self._use(lo, "col_lower", col)
            self._use(hi, "col_upper", col)
        return out

    def add_row(self, block: str, key, terms, lower=-INF, upper=INF) -> int:
        """A row Σ coef · column within [lower, upper]; ``terms`` are (column, coef) pairs,
        coef a number or a Param."""
        row = len(self.row_lower)
        self.rows.setdefault(block, {})[key] = row
        self.row_lower.append(self.value(lower))
        self.row_upper.append(self.value(upper))
        self._use(lower, "row_lower", row)
        self._use(upper, "row_upper", row)
        for col, coef in terms:
            position = len(self.entries_val)
            self.entries_row.append(row)
            self.entries_col.append(col)
            self.entries_val.append(self.value(coef))
            self._use(coef, "coef", position)
        return row

    def add_cost(self, col: int, coef) -> None:
        self.cost_terms.setdefault(col, []).append(coef)
        self.cost[col] = sum(self.value(c) for c in self.cost_terms[col])
        self._use(coef, "cost", col)

    # ------------------------------------------------------------------ reading
    @property
    def n_cols(self) -> int:
        return len(self.col_lower)

    @property
    def n_rows(self) -> int:
        return len(self.row_lower)

    def cost_vector(self) -> np.ndarray:
        c = np.zeros(self.n_cols)
        for col, v in self.cost.items():
            c[col] = v
        return c

    def csc(self):
        """(start, index, value) of the constraint matrix in compressed columns."""
        cols = np.asarray(self.entries_col, dtype=np.int64)
        order = np.argsort(cols, kind="stable")
        start = np.zeros(self.n_cols + 1, dtype=np.int64)
        np.add.at(start, cols + 1, 1)
        return (np.cumsum(start), np.asarray(self.entries_row, dtype=np.int32)[order],
                np.asarray(self.entries_val, dtype=np.float64)[order])

    def set_upper(self, bounds: dict[int, float]) -> dict[str, list]:
        """New upper bounds for columns (e.g. 0 to close a column); returns the change list."""
        for col, value in bounds.items():
            self.col_upper[col] = value
        return {"col_upper": list(bounds.items())}

    def set_params(self, name: str, values: dict) -> dict[str, list]:
        """New values for a parameter; returns the changed entries as (position, new value)
        lists by kind (coef, cost, row_lower, row_upper, col_lower, col_upper). Values are
        recomputed from scratch, so they never depend on the order of earlier updates."""
        table = self.params[name]
        touched: dict[str, dict] = {}
        for key, value in values.items():
            if table.get(key) == value:
                continue
            table[key] = value
            for kind, position, scale in self.uses.get((name, key), ()):
                touched.setdefault(kind, {})[position] = scale * value
        store = {"coef": self.entries_val, "row_lower": self.row_lower, "row_upper": self.row_upper,
                 "col_lower": self.col_lower, "col_upper": self.col_upper}
        out = {}
        for kind, positions in touched.items():
            if kind == "cost":
                for col in positions:
                    self.cost[col] = sum(self.value(c) for c in self.cost_terms[col])
                out[kind] = [(col, self.cost[col]) for col in positions]
            else:
                for position, v in positions.items():
                    store[kind][position] = v
                out[kind] = list(positions.items())
        return out
