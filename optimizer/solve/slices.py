"""One slice of the year as an exact integer program — integer replicas with the SLO
capacity f(n) exact on the integers, integer nodes — on its own (`instance.views.slice_view`):

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

from formulations import Mode, Reading, Replicas, build_program, read_solution, write_solution
from optimizer.instance.build import Instance
from optimizer.instance.views import slice_view
from optimizer.solve.backends import HighsDirect
from optimizer.solve.fleet import Solution
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
    bound_usd: float  # HiGHS's lower bound on the slice's cost (−inf: none in time)
    reading: Reading | None  # its decisions, keyed by the full instance's state id
    seconds: float


class SliceProgram:
    """The slice ``state_id`` of ``inst`` on a commitment either fixed (``committed``: (site,
    gpu) → nodes; operate-fixed on whole replicas) or priced (``committed_usd``, optionally
    ``ondemand_extra_usd``; price-state with ``replicas``, chord capacity by default)."""

    def __init__(self, inst: Instance, state_id: int, *, committed: dict | None = None,
                 committed_usd: dict | None = None, ondemand_extra_usd: dict | None = None,
                 replicas: Replicas = Replicas.CHORD):
        self.state = inst.states[state_id]
        view = slice_view(inst, self.state)
        largest, _ = pool_sizes(view)
        if committed is not None:
            mode = Mode.operate_fixed(committed=committed, max_replicas=largest)
        else:
            mode = Mode.price_state(committed_usd=committed_usd, max_replicas=largest,
                                    ondemand_extra_usd=ondemand_extra_usd, replicas=replicas)
        self.lp, _ = build_program(view, mode=mode)
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
        """Hand a plan's decisions for this slice to HiGHS as a start (HiGHS completes or
        repairs what does not fit)."""
        sid = self.state.id

        def mine(table: dict, at: int) -> dict:  # this state's entries, its id at position ``at`` renamed 0
            return {(*k[:at], 0, *k[at + 1:]): v for k, v in table.items() if k[at] == sid}

        here = Reading(mine(sol.flows, 1), mine(sol.routes, 4), mine(sol.unserved, 2), dict(sol.committed),
                       mine(sol.ondemand, 2), mine(sol.replicas, 1))
        self.backend.set_start(*write_solution(self.lp, here))

    def forget(self) -> None:
        """Drop the last solve's basis and incumbent: the next result depends on its inputs only."""
        self.backend.forget_basis()

    def solve(self, nodes: int, gap: float, seconds: float) -> SliceResult:
        """At most ``nodes`` branch-and-bound nodes (or ``seconds``, the wall-clock cap). HiGHS
        keeps the thread count its process started with: changing it later fails the run."""
        t = time.perf_counter()
        out = self.backend.solve(seconds, gap, None, nodes=nodes)
        if out.bound is not None and np.isfinite(out.bound):
            bound = float(out.bound)
        else:  # stopped before HiGHS had a bound: none, unless the program was solved
            bound = float(out.objective) if out.status == "optimal" else -np.inf
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
