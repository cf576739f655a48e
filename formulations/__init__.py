"""The planning MIP, one module per concern.

Each module has one entry point, ``add_to(build)``, and a docstring glossary of the sets,
columns, rows and cost terms it adds; a module whose coefficients can change without a
rebuild also has ``refresh(lp, inst)``. Modules write cost terms and balance contributions
into the typed registry (`registry.Terms`); the balancing modules, run last, turn those into
rows, and the objective is assembled from the cost terms. The result is a
`linear.LinearProgram` of arrays that a solver backend (`optimizer.solve.backends`) hands to HiGHS.

Order: pools produce flows and GPU loads (prefill, colocated, decode), kvcache prices the
KV-cache candidates those flows serve with, routing feeds the
tiers, latency_tiers balances them, procurement supplies nodes, scaling prices on-demand
ramps, resilience ties site-loss states to the peak slice, capacity and power close the
balances, carbon prices (and caps) the emissions of the powered nodes, and churn limits how far
the commitment moves from a previous fleet.

One formulation, several uses, each a mode (`modes.Mode`): the plan (plan-master,
plan-exact, plan-chord), and on a one-state view of the instance a plan's commitment operated
(operate-fixed: the re-operation of a plan's slices, the hours of its year, a slice re-planned
exactly) or one state's share of the commitment priced (price-state, the Lagrangian bound). A
constraint added here holds in all of them.

`formulations` imports nothing of `optimizer`: it knows only the `Instance` contract, whose
fields and constants (the horizon's hours, the unit conversions, the cost categories) carry
everything it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulations import (
    capacity,
    carbon,
    churn,
    colocated,
    decode,
    kvcache,
    latency_tiers,
    power,
    prefill,
    procurement,
    resilience,
    routing,
    scaling,
)
from formulations.linear import LinearProgram
from formulations.modes import Commitment, Mode, Replicas
from formulations.pools import ROLES
from formulations.registry import Build, Terms

__all__ = ["MODULES", "Build", "Commitment", "LinearProgram", "Mode", "Reading", "Replicas", "Terms",
           "build_program", "capacity_rows", "carbon_cap_row", "committed_columns", "demand_rows", "flow_columns",
           "power_rows", "prompt_option_columns", "ramp_rows", "read_solution", "refresh", "route_columns", "structure",
           "unserved_columns", "write_solution"]

MODULES = (prefill, colocated, decode, kvcache, routing, latency_tiers, procurement, scaling, resilience, capacity, power,
           carbon, churn)


def structure(inst) -> tuple:
    """What a built program's rows and columns depend on. Two instances with the same
    structure can share one program: `refresh` swaps in the other's coefficients (prices,
    demand, megawatts, caps); the pools' per-request GPU costs are set by the solve loop."""
    return (
        tuple((st.id, st.slice, st.regime, st.lost_site, st.weight_hours, st.penalty_hours, st.days) for st in inst.states),
        tuple(sorted((r, a.metro, a.site, a.workload, a.tier) for r, arcs in inst.arcs.items() for a in arcs)),
        tuple((p.role, p.regime, p.site, p.workload, p.tier, p.gpu, p.speed, p.cache_option) for p in inst.pools),
        tuple(sorted(inst.kv_usd_per_rps_hour.items())),
        tuple(sorted(inst.demand)),
        tuple((key, tuple(sorted(c.committed))) for key, c in sorted(inst.contracts.items())),
        tuple(sorted(key for key, cap in inst.ondemand_max.items() if cap > 0)),
        inst.cold_start_hours, inst.warm_fraction, tuple(sorted(inst.node_kw.items())),
        tuple(sorted(inst.pue.items())), tuple(sorted(inst.gpus_per_node.items())), tuple(sorted(inst.peak_to_mean.items())),
        _carbon_structure(inst),
        _churn_structure(inst.churn),
    )


def _churn_structure(limits) -> tuple:
    """A previous fleet and its limits (`churn`), as a comparable tuple; () where none."""
    if limits is None:
        return ()
    return (tuple(sorted(limits.previous_committed.items())), tuple(sorted(limits.previous_ondemand.items())),
            limits.growth_factor, limits.growth_nodes, limits.max_removed_nodes, limits.max_changes)


def _carbon_structure(inst) -> tuple:
    """Whether carbon is priced and capped, and the emissions of a node-hour (coefficients
    that `carbon.refresh` does not change); nothing where carbon is neither."""
    priced, capped = inst.carbon_usd_per_t > 0, inst.carbon_cap_t is not None
    return (priced, capped, tuple(sorted(inst.carbon_kg_per_node_hour.items())) if priced or capped else ())


def refresh(lp: LinearProgram, inst) -> list:
    """Coefficient changes (lists of (kind → [(position, value)])) for a new instance of the
    same structure."""
    changes = []
    for module in MODULES:
        hook = getattr(module, "refresh", None)
        if hook is not None:
            changes += hook(lp, inst)
    return changes


def build_program(inst, *, mode: Mode) -> tuple[LinearProgram, Terms]:
    """The MIP for ``inst`` in ``mode`` (`modes.Mode`: plan-master, plan-exact, plan-chord,
    operate-fixed, price-state)."""
    lp = LinearProgram()
    lp.param("gpus_per_rps", mode.gpus_per_rps)
    terms = Terms(cost={category: [] for category in inst.cost_categories})
    build = Build(lp, inst, terms, mode)
    for module in MODULES:
        module.add_to(build)
    for items in terms.cost.values():
        for col, coef in items:
            lp.add_cost(col, coef)
    return lp, terms


def demand_rows(lp: LinearProgram, keys: list[tuple[str, str]], state: int = 0) -> list[int]:
    """The demand balance rows of (metro, workload) ``keys`` in ``state`` of a program where every
    metro is its own demand group (an operate-fixed program with a tie-break, `routing`)."""
    return [lp.rows["demand_balance"][((m,), k, state)] for m, k in keys]


def unserved_columns(lp: LinearProgram, keys: list[tuple[str, str]], state: int = 0) -> list[int]:
    """The unserved-demand columns of (metro, workload) ``keys`` in ``state`` (as `demand_rows`)."""
    return [lp.cols["unserved"][((m,), k, state)] for m, k in keys]


def route_columns(lp: LinearProgram) -> dict:
    """(group, site, workload, tier, state) → the route's column."""
    return lp.cols.get("route", {})


def carbon_cap_row(lp: LinearProgram) -> int | None:
    """The carbon cap's row (None where the program has none: no cap, or a one-state mode)."""
    return lp.rows.get("carbon_cap", {}).get(())


def prompt_option_columns(lp: LinearProgram) -> dict[tuple[str, int], int]:
    """(parent workload, option index) → the column of the option's weight (routing.py); empty
    without prompt-length options."""
    return dict(lp.cols.get("prompt_option", {}))


def flow_columns(lp: LinearProgram) -> list[tuple[int, int]]:
    """(pool, column) of every pool's flow, prefill, colocated and decode alike."""
    return [(key[0], col) for role in ROLES for key, col in lp.cols.get(f"{role}_flow", {}).items()]


def committed_columns(lp: LinearProgram) -> dict:
    """(site, gpu, term) → the column of committed nodes (`procurement`)."""
    return lp.cols.get("committed", {})


def capacity_rows(lp: LinearProgram) -> dict:
    """(site, gpu, state) → the row of GPUs occupied against GPUs usable (`capacity`)."""
    return lp.rows.get("gpu_capacity", {})


def power_rows(lp: LinearProgram) -> dict:
    """(site, state) → the row of kW drawn against the site's room (`power`)."""
    return lp.rows.get("power", {})


def ramp_rows(lp: LinearProgram) -> dict:
    """(site, gpu, state) → the row of on-demand nodes started into the state (`scaling`);
    empty where no day has a rise."""
    return lp.rows.get("ramp_up", {})


@dataclass
class Reading:
    """A solution vector read back by block, nonzero entries only."""

    flows: dict  # (pool, state) → requests/s into the pool
    routes: dict  # (metro, site, workload, tier, state) → requests/s
    unserved: dict  # (metro, workload, state) → requests/s
    committed: dict  # (site, gpu, term) → nodes
    ondemand: dict  # (site, gpu, state) → nodes
    replicas: dict  # (pool, state) → whole replicas (whole-replica modes; empty in the master)


def read_solution(lp: LinearProgram, x: np.ndarray) -> Reading:
    """The one place that knows the blocks' names: everything the solve needs from ``x``."""
    def values(block, whole=False):
        out = {}
        for key, col in lp.cols.get(block, {}).items():
            v = float(x[col])
            if whole:
                if round(v) > 0:
                    out[key] = int(round(v))
            elif v > 1e-9:
                out[key] = v
        return out

    flows, replicas = {}, {}
    for role in ROLES:
        flows.update(values(f"{role}_flow"))
        replicas.update(values(f"{role}_replicas", whole=True))
    integer = bool(lp.col_integer) and any(lp.col_integer)
    routes, unserved = routing.by_metro(lp, values("route"), values("unserved"))
    return Reading(flows, routes, unserved, values("committed", whole=integer), values("ondemand", whole=integer),
                   replicas)


def write_solution(lp: LinearProgram, plan) -> tuple[np.ndarray, np.ndarray]:
    """A plan (anything with `Reading`'s fields, keyed like this program) as a start for
    ``lp``: (columns, values) of every integer column — a pool's size choice included — and
    every flow, route and unserved column, zero where the plan has none; the columns left out
    (tier loads, ramps, usable nodes) and the fixed ones are HiGHS's to complete."""
    values: dict[int, float] = {}

    def put(block: str, table: dict) -> None:
        for key, col in lp.cols.get(block, {}).items():
            values[col] = float(table.get(key, 0.0))

    for role in ROLES:
        put(f"{role}_flow", plan.flows)
        put(f"{role}_replicas", plan.replicas)
        sizes, extra = _size_choices(lp, role, plan.replicas)
        put(f"{role}_size", sizes)
        put(f"{role}_size_extra", extra)
    routes, unserved = routing.by_group(lp, plan.routes, plan.unserved)
    put("route", routes)
    put("unserved", unserved)
    put("committed", plan.committed)
    put("ondemand", plan.ondemand)
    for col in np.flatnonzero(lp.col_integer):
        values.setdefault(int(col), 0.0)
    # a fixed column keeps its value (a commitment being operated)
    cols = np.array(sorted(c for c in values if not _fixed(lp, c)), dtype=np.int32)
    return cols, np.array([values[c] for c in cols])


def _size_choices(lp: LinearProgram, role: str, replicas: dict) -> tuple[dict, dict]:
    """A pool's whole size as its size choice: δ at n, or — beyond the capacity table — δ at
    the table's last size and the replicas past it (`pools`)."""
    table_end: dict = {}
    for pid, sid, j in lp.cols.get(f"{role}_size", {}):
        table_end[(pid, sid)] = max(table_end.get((pid, sid), 0), j)
    sizes, extra = {}, {}
    for key, n in replicas.items():
        end = table_end.get(key)
        if end is not None and n > 0:
            sizes[(*key, min(n, end))] = 1.0
            if n > end:
                extra[key] = float(n - end)
    return sizes, extra


def _fixed(lp: LinearProgram, col: int) -> bool:
    return lp.col_lower[col] == lp.col_upper[col]
