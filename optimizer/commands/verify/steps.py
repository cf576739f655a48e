"""Step models of the simulation engine: how long one iteration of a replica takes with b
sequences in its batch. `StepModel` evaluates the roofline curves, `TabulatedSteps` reads
them from tables (what `verify` uses), `ConstantSteps` is a stand-in for tests."""

from __future__ import annotations

import numpy as np

from optimizer.curves.roofline import decode_step_time_s, mixed_step_time_s
from optimizer.curves.speculative import speculative_step_time_s


class StepModel:
    """Iteration times of one replica from the roofline curves, vectorised over a segment.

    ``decode(b, mean_context)`` — a decode step (or a speculative verify + draft step when
    ``speculative`` = (k, draft_cost_ratio)); ``mixed(b, mean_context, chunk, chunk_context)``
    — a colocated iteration carrying a prefill chunk.
    """

    def __init__(self, replica, speculative: tuple[int, float] | None = None):
        self.replica = replica
        self.speculative = speculative

    def decode(self, b: int, mean_context: np.ndarray) -> np.ndarray:
        if self.speculative:
            k, ratio = self.speculative
            return speculative_step_time_s(self.replica, b, mean_context, k, ratio)
        return decode_step_time_s(self.replica, b, mean_context)

    def mixed(self, b: int, mean_context, chunk, chunk_context) -> np.ndarray:
        return mixed_step_time_s(self.replica, b, mean_context, chunk, chunk_context)


class TabulatedSteps:
    """A `StepModel` whose decode steps are read from tables: for each batch size b met,
    the exact curve evaluated on a grid of mean contexts every ``spacing`` tokens, linearly
    interpolated (the step is linear in the context on each side of the roofline ridge and
    smooth across it, so the error is ~1e-7 relative; `tests/test_verify.py` bounds it).
    The ridge's curvature grows with the smooth maximum's sharpness q, so the grid is
    8·√(3/q) tokens apart for q > 3 (at least 1). Colocated iterations carrying a chunk are
    evaluated exactly. A table row costs one vectorised curve call; a segment then costs one
    `np.interp` instead of a curve call.
    """

    def __init__(self, exact: StepModel, spacing: float | None = None):
        self.exact = exact
        self.replica = exact.replica
        self.speculative = exact.speculative
        q = self.replica.eff.roofline_sharpness
        self.spacing = float(spacing) if spacing is not None else max(8.0 * min(1.0, (3.0 / q) ** 0.5), 1.0)
        self.rows: dict = {}

    def row(self, b: int, top: float):
        row = self.rows.get(b)
        if row is None or row[0] < top:
            n = int(max(2.0 * top, 4096.0) / self.spacing) + 2
            grid = np.arange(n) * self.spacing
            row = (float(grid[-1]), grid, np.asarray(self.exact.decode(b, grid), dtype=float))
            self.rows[b] = row
        return row

    def decode(self, b: int, mean_context: np.ndarray) -> np.ndarray:
        _, grid, values = self.row(b, float(mean_context.max()))
        return np.interp(mean_context, grid, values)

    def mixed(self, b: int, mean_context, chunk, chunk_context) -> np.ndarray:
        return self.exact.mixed(b, mean_context, chunk, chunk_context)


class ConstantSteps:
    """A stand-in step model: every step takes ``step_s``, a chunk iteration ``chunk_s``."""

    def __init__(self, step_s: float, chunk_s: float | None = None):
        self.step_s = step_s
        self.chunk_s = step_s if chunk_s is None else chunk_s

    def decode(self, b, mean_context):
        return np.full(len(mean_context), self.step_s)

    def mixed(self, b, mean_context, chunk, chunk_context):
        return np.full(len(mean_context), self.chunk_s)
