"""The years planned together: which long contracts to sign in which year.

One linear program holds every plan year's master program (`formulations`, plan-master mode,
each pool priced at its first-guess size) side by side, each year's costs discounted by
d_k = (1 + r)^−k, and couples them through the contracts:

    x[k,s,g,τ] ≥ 0   nodes of term τ signed at (site s, accelerator g) at the start of year k
    c_k[s,g,τ] ≤ Σ_{k' ≤ k < k' + L_τ} x[k',s,g,τ]     (year k uses only what runs in year k)
    cost of x[k,s,g,τ] = Σ_{j ∈ J} rate_k[s,g,τ] · 8760 · d_{k+j}
          J = 0 … L_τ − 1 (end_value "full": a term signed near the end is paid in full)
          J = 0 … min(L_τ, K − k) − 1 ("prorated": only the years inside the horizon)

rate_k is what a signing of year k commits to per node-hour (a reservation's rent, an owned
node's capital; its price path's factor applied); a year's committed columns keep only what is
paid apart from it (an owned node's colocation and energy), so that every dollar is counted
once. L_τ: 1 and 3 years for the reservations, the
depreciation life for owned nodes (their TCO rate is a rent over their life). The fleet a
company already has is in each year's program as its existing terms (`instance.fleet`).

The answer is continuous (a planning estimate, not a bound: pools are priced at a guess of
their size); `optimizer.commands.horizon` makes it whole year by year. Priced at each pool's
largest size instead (``bound``), its optimum bounds every schedule's present cost from below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from formulations import Mode, build_program, committed_columns
from formulations.linear import LinearProgram
from optimizer.base.contracts import TERM
from optimizer.base.errors import InfeasibleError
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.instance.build import Instance
from optimizer.solve.backends import HighsDirect
from optimizer.solve.pricing import at_sizes, pool_sizes


@dataclass
class Joint:
    """The years' program solved: nodes signed per (year, site, accelerator, term), continuous."""

    status: str
    objective_usd: float  # present cost of the linear plan (an estimate)
    signed: dict[tuple[int, str, str, str], float] = field(default_factory=dict)
    columns: int = 0
    rows: int = 0


def discount_factors(rate: float, years: int) -> list[float]:
    """d_k = (1 + r)^−k for k = 0 … years − 1 (and beyond: a term may outlast the horizon)."""
    return [(1 + rate) ** -k for k in range(years)]


def signing_pv_usd(rate_usd_per_node_hour: float, k: int, term_years: int, horizon_years: int, rate: float,
                   end_value: str) -> float:
    """Present cost of one node of a term signed at the start of year k (module docstring)."""
    last = term_years if end_value == "full" else min(term_years, horizon_years - k)
    return sum(rate_usd_per_node_hour * HOURS_PER_YEAR * (1 + rate) ** -(k + j) for j in range(last))


def _append(joint: LinearProgram, lp: LinearProgram, cost: np.ndarray) -> tuple[int, int]:
    """``lp``'s columns and rows added to ``joint`` (with costs ``cost``); returns the offsets."""
    col0, row0 = joint.n_cols, joint.n_rows
    joint.col_lower.extend(lp.col_lower)
    joint.col_upper.extend(lp.col_upper)
    joint.col_integer.extend([False] * lp.n_cols)
    joint.row_lower.extend(lp.row_lower)
    joint.row_upper.extend(lp.row_upper)
    joint.entries_row.extend(r + row0 for r in lp.entries_row)
    joint.entries_col.extend(c + col0 for c in lp.entries_col)
    joint.entries_val.extend(lp.entries_val)
    joint.cost.update({col0 + int(c): float(v) for c, v in enumerate(cost) if v})
    return col0, row0


def joint_signings(insts: list[Instance], term_years: dict[tuple[str, str, str], int], rate: float, end_value: str,
                   seconds: float = 3600.0, threads: int | None = None, bound: bool = False) -> Joint:
    """Solve the years together (module docstring); ``term_years[(site, gpu, term)]``: L_τ.
    ``bound``: each pool priced at its largest size's capacity instead (as the one-year
    master's bound step): the optimum is then a lower bound on the present cost of any
    schedule, costed as `optimizer.results.horizon` costs them."""
    years = len(insts)
    joint = LinearProgram()
    committed_at: dict[tuple[int, str, str, str], int] = {}
    for k, inst in enumerate(insts):
        largest, guess = pool_sizes(inst)
        lp, _ = build_program(inst, mode=Mode.plan_master(gpus_per_rps=at_sizes(inst, largest if bound else guess)))
        cost = lp.cost_vector() * (1 + rate) ** -k
        for (s, g, term), col in committed_columns(lp).items():
            if not TERM[term].existing:  # what the signing commits to is paid there; the rest (energy, colo) here
                price = inst.contracts[(s, g)].committed[term]
                cost[col] = (price.rate - price.signed + price.energy) * HOURS_PER_YEAR * (1 + rate) ** -k
        col0, _ = _append(joint, lp, cost)
        committed_at.update({(k, s, g, term): col0 + col for (s, g, term), col in committed_columns(lp).items()
                             if not TERM[term].existing})
    signing: dict[tuple[int, str, str, str], int] = {}
    for (k, s, g, term) in sorted(committed_at):
        rent = insts[k].contracts[(s, g)].committed[term].signed
        col = joint.n_cols
        joint.col_lower.append(0.0)
        joint.col_upper.append(math.inf)
        joint.col_integer.append(False)
        joint.cost[col] = signing_pv_usd(rent, k, term_years[(s, g, term)], years, rate, end_value)
        signing[(k, s, g, term)] = col
    for (k, s, g, term), col in sorted(committed_at.items()):
        terms = [(col, 1.0)] + [(signing[(j, s, g, term)], -1.0) for j in range(k + 1)
                                if (j, s, g, term) in signing and j + term_years[(s, g, term)] > k]
        joint.add_row("runs", (k, s, g, term), terms, upper=0.0)
    out = HighsDirect(joint).solve(seconds, 1e-9, threads)
    if not out.has_solution:
        raise InfeasibleError(f"the years planned together have no solution ({out.status})")
    signed = {key: float(out.x[col]) for key, col in signing.items() if out.x[col] > 1e-6}
    return Joint(out.status, float(out.objective), signed, joint.n_cols, joint.n_rows)
