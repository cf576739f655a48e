"""Churn: how far the plan may move from a previous fleet (`Instance.churn`; none: no rows).

Sets      (s, g) offered pairs; nominal states t (no site lost)
Data      c⁰[s,g] committed nodes and P⁰[s,g] on-demand peak of the previous fleet,
          N⁰ = c⁰ + P⁰; γ growth factor, Γ growth nodes, R removals, B budget
Columns   a[s,g], r[s,g], q[s,g] ≥ 0   committed nodes added and removed, on-demand peak
                                         added (only with a budget)
Growth    Σ_term c[s,g,term] + o[s,g,t] ≤ (1 + γ)·N⁰ + Γ            for every t
Removal   Σ_term c[s,g,term] ≥ c⁰ − R                                where c⁰ > R
Budget    Σ_term c[s,g,term] − a + r = c⁰;   o[s,g,t] − q ≤ P⁰ for every t;
          Σ_(s,g) a + r + q ≤ B
Migration m[s,g] ≥ Σ_term c[s,g,term] − c⁰ (m ≥ 0), costing its $ per node once
          (`ChurnLimits.migration_usd_per_node`, booked with the cold starts): replicas moved
          onto committed nodes added at a pair.
The limits cost nothing: a limit's price is its row's dual (the master's shadow price,
`shadow_prices`).
Modes that plan the commitment only: a one-state program operates a commitment decided elsewhere.
"""

from __future__ import annotations

from formulations.linear import Param

ROWS = ("churn_growth", "churn_removal", "churn_budget")


def _pair_columns(lp, inst) -> tuple[dict, dict]:
    """(s, g) → committed columns (all terms); (s, g) → [(state, on-demand column)]."""
    committed: dict = {}
    for (s, g, _), col in sorted(lp.cols.get("committed", {}).items()):
        committed.setdefault((s, g), []).append(col)
    ondemand: dict = {}
    nominal = {st.id for st in inst.states if st.lost_site is None}
    for (s, g, sid), col in sorted(lp.cols.get("ondemand", {}).items()):
        if sid in nominal:
            ondemand.setdefault((s, g), []).append((sid, col))
    return committed, ondemand


def add_to(build) -> None:
    lp, inst, limits = build.lp, build.inst, build.inst.churn
    if limits is None or not build.mode.commitment_planned:
        return
    committed, ondemand = _pair_columns(lp, inst)
    pairs = list(inst.site_gpus)
    if limits.limits_growth:
        lp.param("churn_growth_cap", {pair: limits.growth_cap(pair) for pair in pairs})
        for pair in pairs:
            c = [(col, 1.0) for col in committed.get(pair, [])]
            for sid, col in ondemand.get(pair, []) or [(None, None)]:
                terms = c + ([(col, 1.0)] if col is not None else [])
                if terms:
                    lp.add_row("churn_growth", (*pair, sid), terms, upper=Param("churn_growth_cap", pair))
    if limits.max_removed_nodes is not None:
        for pair in pairs:
            floor = limits.committed_floor(pair)
            if floor > 0 and committed.get(pair):
                lp.add_row("churn_removal", pair, [(col, 1.0) for col in committed[pair]], lower=float(floor))
    if limits.max_changes is not None:
        _budget(lp, limits, pairs, committed, ondemand)
    if limits.migration_usd_per_node > 0:
        _migration(build, limits, pairs, committed)


def _migration(build, limits, pairs, committed) -> None:
    lp = build.lp
    moved = lp.add_cols("churn_migrated", [pair for pair in pairs if committed.get(pair)])
    lp.param("churn_migration_usd", {(): float(limits.migration_usd_per_node)})
    for pair, col in moved.items():
        c0 = float(limits.previous_committed.get(pair, 0))
        lp.add_row("churn_migration", pair, [(c, 1.0) for c in committed[pair]] + [(col, -1.0)], upper=c0)
        build.terms.add_cost("ramp", col, Param("churn_migration_usd", ()))


def _budget(lp, limits, pairs, committed, ondemand) -> None:
    added = lp.add_cols("churn_added", pairs)
    removed = lp.add_cols("churn_removed", pairs)
    od_added = lp.add_cols("churn_ondemand_added", pairs)
    for pair in pairs:
        c0 = float(limits.previous_committed.get(pair, 0))
        terms = [(col, 1.0) for col in committed.get(pair, [])] + [(added[pair], -1.0), (removed[pair], 1.0)]
        lp.add_row("churn_committed", pair, terms, lower=c0, upper=c0)
        p0 = float(limits.previous_ondemand.get(pair, 0))
        for sid, col in ondemand.get(pair, []):
            lp.add_row("churn_ondemand", (*pair, sid), [(col, 1.0), (od_added[pair], -1.0)], upper=p0)
    lp.param("churn_max_changes", {(): float(limits.max_changes)})
    lp.add_row("churn_budget", (), [(col, 1.0) for block in (added, removed, od_added) for _, col in sorted(block.items())],
               upper=Param("churn_max_changes", ()))


def wanted(lp, x) -> dict:
    """(s, g) → (committed added, removed, on-demand peak added) in a solution of a program
    with a budget (fractional in the master); empty without one."""
    blocks = [lp.cols.get(name, {}) for name in ("churn_added", "churn_removed", "churn_ondemand_added")]
    return {pair: tuple(float(x[block[pair]]) for block in blocks) for pair in blocks[0]}


def shadow_prices(lp, row_dual) -> dict:
    """Each churn row's shadow price in $ per node of the limit loosened — the row's dual (a
    ≤ row binds with a dual ≤ 0, a ≥ row with one ≥ 0; HiGHS's sign convention), as
    magnitudes — keyed (row block, key), binding rows only."""
    out = {}
    for block in ROWS:
        for key, row in sorted(lp.rows.get(block, {}).items(), key=lambda item: item[1]):
            price = abs(float(row_dual[row]))
            if price > 1e-6:
                out[(block, key)] = price
    return out
