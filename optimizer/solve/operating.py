"""A plan's commitment operated: the plan's own formulation on a one-hour view of the
instance (`instance.operating_view`) with the commitment fixed (`formulations.Operating`).

Per hour, only the demand changes: the program stays in HiGHS and each solve starts from the
last basis (a fraction of a millisecond on the reference scenario), which is why the hours of
a year run in one process, in order. Two uses:

* `reoperate_slices` — the plan's own slices operated again on its commitment, made whole and
  re-committed (`repair.repair`): committed GPUs cost nothing in the hour, so each slice
  fills them before it rents, which the master problem's linear prices cannot see;
* `optimizer.operate` — the 8,760 hours of the plan's year.
"""

from __future__ import annotations

import highspy
import numpy as np

from formulations import Operating, Reading, build_program, read_solution
from optimizer.backends import HighsDirect
from optimizer.fleet import Solution, committed_nodes
from optimizer.instance import Instance, kappa, operating_view
from optimizer.repair import repair
from optimizer.units import SECONDS_PER_HOUR

TIE_BREAK_USD_PER_GPU_HOUR = 1e-4  # small beside any price, large beside the solver's tolerances


def largest_sizes(sol: Solution) -> dict[int, int]:
    """The largest whole size of each pool over the plan's states."""
    sizes: dict = {}
    for (pid, _), n in sol.replicas.items():
        sizes[pid] = max(sizes.get(pid, 0), n)
    return sizes


class OperatingProgram:
    """One hour of operation on ``nodes`` (committed per (site, accelerator)) with the pools of
    ``sizes`` (pool id → largest planned size; each priced at κ of that size)."""

    def __init__(self, inst: Instance, nodes: dict[tuple[str, str], int], sizes: dict[int, int]):
        open_pools = frozenset(pid for pid, n in sizes.items() if n > 0)
        view = operating_view(inst, open_pools)
        prices = {(pid, 0): inst.pools[pid].gpus * inst.pools[pid].peak_to_mean / kappa(inst.pools[pid], sizes[pid])
                  for pid in open_pools}
        self.lp, _ = build_program(view, False, prices, {}, Operating(dict(nodes), open_pools, TIE_BREAK_USD_PER_GPU_HOUR))
        self.keys = sorted((m, k) for m, k, _ in view.demand)
        self.highs = HighsDirect(self.lp).highs
        self._rows = np.array([self.lp.rows["demand_balance"][(m, k, 0)] for m, k in self.keys], dtype=np.int32)
        flows = [(key[0], col) for block, cols in self.lp.cols.items() if block.endswith("_flow")
                 for key, col in cols.items()]
        self.pools = [pid for pid, _ in flows]
        self.flow_cols = np.array([col for _, col in flows], dtype=np.int64)
        self.unserved_cols = np.array([self.lp.cols["unserved"][(m, k, 0)] for m, k in self.keys], dtype=np.int64)
        routes = self.lp.cols.get("route", {})
        self.route_cols = np.array(list(routes.values()), dtype=np.int64)
        self.egress_usd = np.array([SECONDS_PER_HOUR * inst.egress_usd_per_request[key[2]] for key in routes])

    def solve(self, demand_rps: np.ndarray) -> tuple[np.ndarray, bool]:
        """(solution vector, optimal?) for one hour's demand per (metro, workload) of ``keys``."""
        h = self.highs
        h.changeRowsBounds(len(self._rows), self._rows, demand_rps, demand_rps)
        h.run()
        return np.asarray(h.getSolution().col_value), h.getModelStatus() == highspy.HighsModelStatus.kOptimal

    def read(self, x: np.ndarray) -> Reading:
        return read_solution(self.lp, x)


def reoperate_slices(inst: Instance, sol: Solution, closed: frozenset[int] = frozenset()) -> Solution | None:
    """The plan's slices operated again on its commitment and pools (less ``closed``), made
    whole and re-committed. None where one program cannot stand for every state (site-loss
    states, more than one regime) or a slice fails."""
    if any(st.lost_site is not None or st.regime != inst.states[0].regime for st in inst.states):
        return None
    sizes = {pid: n for pid, n in largest_sizes(sol).items() if pid not in closed}
    program = OperatingProgram(inst, committed_nodes(sol), sizes)
    flows, routes, unserved = {}, {}, {}
    for st in inst.states:
        x, optimal = program.solve(np.array([inst.demand.get((m, k, st.slice), 0.0) for m, k in program.keys]))
        if not optimal:
            return None
        hour = program.read(x)
        flows.update({(pid, st.id): v for (pid, _), v in hour.flows.items()})
        routes.update({(*key[:4], st.id): v for key, v in hour.routes.items()})
        unserved.update({(m, k, st.id): v for (m, k, _), v in hour.unserved.items()})
    return repair(inst, flows, routes, unserved)
