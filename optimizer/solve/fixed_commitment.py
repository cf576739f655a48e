"""A plan's commitment operated: the plan's own formulation on a one-hour view of the
instance (`instance.views.open_pools_view`) with the commitment fixed (`formulations.Mode.operate_fixed`).
Two uses: the plan's own slices operated again on its commitment (`reoperate_slices`, a step of
the solve), and the hours of the operated year its routing cannot host (`optimizer.commands.operate`).

Per hour, only the demand changes: the program stays in HiGHS and each solve starts from the
last basis (a fraction of a millisecond on the reference scenario). Its pools are priced at the
per-replica capacity of their largest planned size, which is optimistic for a pool run far
below it; an hour it routes is therefore made whole and kept only where it leaves fewer GPUs
short than the plan's own routing.
"""

from __future__ import annotations

import highspy
import numpy as np

from formulations import (
    Mode,
    Reading,
    build_program,
    demand_rows,
    flow_columns,
    read_solution,
    route_columns,
    unserved_columns,
)
from optimizer.base.units import SECONDS_PER_HOUR
from optimizer.instance.build import Instance
from optimizer.instance.pools import kappa
from optimizer.instance.views import open_pools_view
from optimizer.solve.backends import HighsDirect
from optimizer.solve.fleet import Solution, committed_nodes
from optimizer.solve.repair import repair

TIE_BREAK_USD_PER_GPU_HOUR = 1e-4  # small beside any price, large beside the solver's tolerances


def largest_sizes(sol: Solution) -> dict[int, int]:
    """The largest whole size of each pool over the plan's states."""
    sizes: dict = {}
    for (pid, _), n in sol.replicas.items():
        sizes[pid] = max(sizes.get(pid, 0), n)
    return sizes


class FixedCommitmentProgram:
    """One hour of operation on ``nodes`` (committed per (site, accelerator)) with the pools of
    ``sizes`` (pool id → largest planned size; each priced at κ of that size)."""

    def __init__(self, inst: Instance, nodes: dict[tuple[str, str], int], sizes: dict[int, int]):
        per_replica = {pid: kappa(inst.pools[pid], n) for pid, n in sizes.items() if n > 0}
        # a pool whose planned size carries nothing inside its objective (f(n) = 0: one hour's
        # p99 out of reach at so few replicas) is no capacity to operate on
        open_pools = frozenset(pid for pid, rps in per_replica.items() if rps > 0)
        view = open_pools_view(inst, open_pools)
        prices = {(pid, 0): inst.pools[pid].gpus * inst.pools[pid].peak_to_mean / per_replica[pid]
                  for pid in open_pools}
        mode = Mode.operate_fixed(committed=nodes, gpus_per_rps=prices, open_pools=open_pools,
                                  tie_break_usd_per_gpu_hour=TIE_BREAK_USD_PER_GPU_HOUR)
        self.lp, _ = build_program(view, mode=mode)
        self.keys = sorted((m, k) for m, k, _ in view.demand)
        self.backend = HighsDirect(self.lp)
        self.highs = self.backend.highs
        self._rows = np.array(demand_rows(self.lp, self.keys), dtype=np.int32)
        flows = flow_columns(self.lp)
        self.pools = [pid for pid, _ in flows]
        self.flow_cols = np.array([col for _, col in flows], dtype=np.int64)
        self.unserved_cols = np.array(unserved_columns(self.lp, self.keys), dtype=np.int64)
        routes = route_columns(self.lp)
        self.route_cols = np.array(list(routes.values()), dtype=np.int64)
        self.egress_usd = np.array([SECONDS_PER_HOUR * inst.egress_usd_per_request[key[2]] for key in routes])

    def price(self, gpus_per_rps: dict[int, float]) -> None:
        """New GPUs per request/s for some pools (pool id → price) — e.g. their whole replicas
        at an hour's planned load over that load, exact at the plan's own routing."""
        known = self.lp.params["gpus_per_rps"]
        self.backend.apply([self.lp.set_params("gpus_per_rps", {(pid, 0): v for pid, v in gpus_per_rps.items()
                                                                if (pid, 0) in known})])

    def solve(self, demand_rps: np.ndarray) -> tuple[np.ndarray, bool]:
        """(solution vector, optimal?) for one hour's demand per (metro, workload) of ``keys``."""
        h = self.highs
        h.changeRowsBounds(len(self._rows), self._rows, demand_rps, demand_rps)
        h.run()
        return np.asarray(h.getSolution().col_value), h.getModelStatus() == highspy.HighsModelStatus.kOptimal

    def read(self, x: np.ndarray) -> Reading:
        return read_solution(self.lp, x)


def reoperate_slices(inst: Instance, sol: Solution) -> Solution | None:
    """The plan's slices operated again on its commitment and pools, made whole and
    re-committed (`repair.repair`): committed GPUs cost nothing in the hour, so each slice fills
    them before it rents, which the master's linear prices cannot see. None where one program
    cannot stand for every state (site-loss states, more than one regime) or a slice fails."""
    if any(st.lost_site is not None or st.regime != inst.states[0].regime for st in inst.states):
        return None
    program = FixedCommitmentProgram(inst, committed_nodes(sol), largest_sizes(sol))
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
