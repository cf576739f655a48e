"""One slice of the year as an exact integer program — integer replicas with the SLO
capacity f(n) exact on the integers, integer nodes — on its own (`instance.slice_view`):

* priced: committed nodes free up to their cap at μ[s,g] each (a Lagrangian multiplier,
  `lagrange`); the program's own lower bound counts, so it need not be solved to the end;
* fixed: committed nodes fixed at a plan's, costing nothing more — the slice re-planned
  exactly on the commitment (`improve`).

A slice program is built once and solved again with new multipliers (its basis and its
incumbent kept); a plan's decisions for the slice are handed to HiGHS as a start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from formulations import Operating, Reading, build_program, read_solution
from optimizer.backends import HighsDirect
from optimizer.costing import Solution
from optimizer.instance import Instance, slice_view
from optimizer.solve.pricing import pool_sizes


def of_state(sol: Solution, sid: int) -> Solution:
    """The part of a plan one state needs as a start: its own flows, replicas, routes,
    unserved and on-demand nodes, and the commitment."""
    mine = lambda table, at: {k: v for k, v in table.items() if k[at] == sid}  # noqa: E731
    return Solution(dict(sol.committed), mine(sol.ondemand, 2), mine(sol.flows, 1), mine(sol.replicas, 1),
                    mine(sol.routes, 4), mine(sol.unserved, 2))


@dataclass(frozen=True)
class SliceResult:
    state: int  # the state id in the full instance
    objective_usd: float | None  # the best integer solution's cost, None if none was found
    bound_usd: float  # HiGHS's lower bound on the slice's cost
    reading: Reading | None  # its decisions, keyed by the full instance's state id
    seconds: float


class SliceProgram:
    def __init__(self, inst: Instance, state_id: int, committed: dict | None = None,
                 committed_usd: dict | None = None, ondemand_extra_usd: dict | None = None, chord: bool = False):
        self.state = inst.states[state_id]
        view = slice_view(inst, self.state)
        largest, _ = pool_sizes(view)
        operating = Operating(committed=committed, committed_usd=committed_usd, ondemand_extra_usd=ondemand_extra_usd)
        self.lp, _ = build_program(view, True, {}, largest, operating, chord)
        self.backend = HighsDirect(self.lp)

    def price(self, committed_usd: dict, ondemand_extra_usd: dict) -> None:
        """New multipliers: $ per committed node, and added per on-demand node, of each (site,
        accelerator) in this slice."""
        changes = []
        for name, values in (("state_committed_usd", committed_usd), ("state_ondemand_extra_usd", ondemand_extra_usd)):
            if name in self.lp.params:
                changes.append(self.lp.set_params(name, {key: float(values.get(key, 0.0)) for key in self.lp.params[name]}))
        self.backend.apply(changes)

    def start_from(self, sol: Solution) -> None:
        """Hand a plan's decisions for this slice to HiGHS as a start (integers fixed, the
        rest completed by HiGHS where they do not fit)."""
        sid, x = self.state.id, np.zeros(self.lp.n_cols)
        cols = self.lp.cols
        for (pid, s), y in sol.flows.items():
            if s == sid:
                role = next(r for r in ("prefill", "colocated", "decode") if (pid, 0) in cols.get(f"{r}_flow", {}))
                x[cols[f"{role}_flow"][(pid, 0)]] = y
                n = sol.replicas.get((pid, s), 0)
                x[cols[f"{role}_replicas"][(pid, 0)]] = n
                if n and (pid, 0, n) in cols.get(f"{role}_size", {}):
                    x[cols[f"{role}_size"][(pid, 0, n)]] = 1.0
        for (m, site, k, tier, s), v in sol.routes.items():
            if s == sid and (m, site, k, tier, 0) in cols.get("route", {}):
                x[cols["route"][(m, site, k, tier, 0)]] = v
        for (m, k, s), u in sol.unserved.items():
            if s == sid:
                x[cols["unserved"][(m, k, 0)]] = u
        nodes: dict = {}
        for (s, g, _), n in sol.committed.items():
            nodes[(s, g)] = nodes.get((s, g), 0) + n
        for (s, g, term), col in cols.get("committed", {}).items():
            first = min(term_ for (ss, gg, term_) in cols["committed"] if (ss, gg) == (s, g))
            x[col] = nodes.get((s, g), 0) if term == first else 0.0
        for (s, g, st), n in sol.ondemand.items():
            if st == sid and (s, g, 0) in cols.get("ondemand", {}):
                x[cols["ondemand"][(s, g, 0)]] = n
        self.backend.highs.setSolution(len(x), np.arange(len(x), dtype=np.int32), x)

    def solve(self, seconds: float, gap: float) -> SliceResult:
        t = time.perf_counter()
        out = self.backend.solve(seconds, gap, 1)
        bound = out.bound if out.bound is not None else (out.objective if out.has_solution else 0.0)
        reading = None
        if out.has_solution:
            here = read_solution(self.lp, out.x)
            sid = self.state.id
            reading = Reading({(p, sid): v for (p, _), v in here.flows.items()},
                              {(*k[:4], sid): v for k, v in here.routes.items()},
                              {(m, k, sid): v for (m, k, _), v in here.unserved.items()},
                              dict(here.committed),
                              {(s, g, sid): v for (s, g, _), v in here.ondemand.items()},
                              {(p, sid): v for (p, _), v in here.replicas.items()})
        return SliceResult(self.state.id, out.objective if out.has_solution else None, float(bound), reading,
                           time.perf_counter() - t)
