"""One-state views of an instance: the unit the one-state programs are built on — a slice of
the year on its own (`slice_view`: a bound per slice, a slice re-planned on a commitment) and
the hour of operation on a plan's open pools (`open_pools_view`)."""

from __future__ import annotations

from dataclasses import replace

from optimizer.base.units import Role
from optimizer.instance.build import NOMINAL, Instance, State


def open_pools_view(inst: Instance, open_pools) -> Instance:
    """The instance as one hour of operation on a fixed plan: a single nominal state (the
    peak slice's, weighing one hour), every (metro, workload) that has demand in any slice
    (at its largest rate, so that each gets its demand row; the hour's own rates are set per
    solve), and only the arcs into tiers where one of ``open_pools`` takes requests. The
    formulation of the plan, built on this view in operate-fixed mode
    (`formulations.Mode.operate_fixed`), is the program that operates a commitment."""
    demand: dict = {}
    for (m, k, _), lam in inst.demand.items():
        demand[(m, k, inst.peak_slice)] = max(demand.get((m, k, inst.peak_slice), 0.0), lam)
    return _one_state(inst, inst.peak_slice, 1.0, demand, open_pools)


def slice_view(inst: Instance, state: State, open_pools=None) -> Instance:
    """One nominal state of the instance on its own (its slice's demand and hours): the unit
    the slice programs (a bound per slice, a slice re-planned on a fixed commitment) work on."""
    demand = {key: lam for key, lam in inst.demand.items() if key[2] == state.slice}
    return _one_state(inst, state.slice, state.weight_hours, demand, open_pools)


def _one_state(inst: Instance, slice_id: int, hours: float, demand: dict, open_pools) -> Instance:
    """The instance reduced to one nominal state (id 0) of ``slice_id`` weighing ``hours``,
    with ``demand``; arcs only into tiers where an open pool (all, where ``open_pools`` is
    None) takes requests."""
    st = State(0, slice_id, NOMINAL, None, hours, hours, float(inst.slices.loc[slice_id, "days"]))
    entry = {(p.site, p.workload, p.tier) for p in inst.pools_in(st)
             if (open_pools is None or p.id in open_pools) and p.role != Role.DECODE}
    arcs = [a for a in inst.arcs[NOMINAL] if (a.site, a.workload, a.tier) in entry]
    return replace(inst, states=[st], demand=demand, arcs={NOMINAL: arcs})
