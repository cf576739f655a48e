"""A multi-year plan's tables: what is signed when (the schedule) and what each year costs.

Each year k's whole plan counts, besides its operations, one year of what it signs itself
(a reservation's rent, an owned node's capital). The years' accounting replaces that by the
signing's whole commitment, so that a 3-year contract signed in the last year is not a year's
rent:

    operating_k  = year k's plan cost − Σ its own signings' nodes · rate · 8760
    present cost = Σ_k d_k · operating_k + Σ_signings nodes · rate · 8760 · Σ_{j ∈ J} d_{k+j}
    cash in k    = operating_k + Σ_{signings running in k} nodes · rate · 8760

(d_k = (1 + r)^−k; J as `optimizer.solve.horizon`.) What a term commits to beyond the horizon
is counted in full, or left out ("prorated"). The rent the company's own fleet had already
signed is sunk and reported apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from optimizer.base.contracts import TERM
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.results import Plan
from optimizer.scenario.fleet import day, term_end

SCHEDULE_COLUMNS = ["plan", "year", "start", "site", "gpu", "action", "term", "nodes", "ends", "usd_per_node_year",
                    "present_cost_usd"]
PRICE_COLUMNS = ["price_scenario", "planned_under", "together_present_cost_usd", "myopic_present_cost_usd"]
YEARS_COLUMNS = ["year", "start", "demand_factor", "operating_usd", "commitments_usd", "cost_usd", "discount_factor",
                 "present_cost_usd", "sunk_usd", "together_cost_usd", "myopic_cost_usd", "gpus_peak", "unserved_fraction"]


@dataclass(frozen=True)
class Signing:
    """Nodes of one term signed at the start of a plan year (0-based)."""

    year: int
    site: str
    gpu: str
    term: str
    nodes: int
    usd_per_node_hour: float  # what the signing commits to per node-hour (rent; owned: capital)
    years: int  # the term's length

    def runs_in(self, k: int) -> bool:
        return self.year <= k < self.year + self.years

    def present_cost_usd(self, rate: float, horizon_years: int, end_value: str) -> float:
        last = self.years if end_value == "full" else min(self.years, horizon_years - self.year)
        return self.nodes * self.usd_per_node_hour * HOURS_PER_YEAR * sum(
            (1 + rate) ** -(self.year + j) for j in range(last))


@dataclass
class YearsPlan:
    """A schedule made whole year by year: its plans, signings and the renewals each year faced."""

    method: str  # "together" or "myopic"
    plans: list[Plan]
    signings: list[Signing]
    expired: list[list[dict]]  # per year: reserved nodes up for renewal at its start
    retired: list[list[dict]]  # per year: owned nodes retired
    own_rent_usd: list[float] = field(default_factory=list)  # per year: one year of its plan's own signings
    given: list[Signing] = field(default_factory=list)  # the long signings it was made on (the joint program's)

    def operating_usd(self, k: int) -> float:
        return self.plans[k].summary["total_cost_usd"] - self.own_rent_usd[k]

    def commitments_usd(self, k: int) -> float:
        return sum(x.nodes * x.usd_per_node_hour * HOURS_PER_YEAR for x in self.signings if x.runs_in(k))

    def present_cost_usd(self, rate: float, end_value: str) -> float:
        years = len(self.plans)
        return (sum((1 + rate) ** -k * self.operating_usd(k) for k in range(years))
                + sum(x.present_cost_usd(rate, years, end_value) for x in self.signings))

    def beyond_usd(self) -> float:
        """Nominal dollars the signings commit to after the horizon."""
        years = len(self.plans)
        return sum(x.nodes * x.usd_per_node_hour * HOURS_PER_YEAR * max(0, x.year + x.years - years)
                   for x in self.signings)


def _action(x: Signing) -> str:
    return "buy" if x.term == "owned" else "sign"


def schedule_table(plan: YearsPlan, starts: list[str | None], rate: float, end_value: str) -> pd.DataFrame:
    """What to sign, renew, buy, let lapse and retire, per year, site, accelerator and term."""
    rows = []
    years = len(plan.plans)
    for k in range(years):
        signed = [x for x in plan.signings if x.year == k]
        renewable = {}
        for r in plan.expired[k]:
            renewable[(r["site"], r["gpu"])] = renewable.get((r["site"], r["gpu"]), 0) + r["nodes"]
        for x in sorted(signed, key=lambda x: (x.site, x.gpu, x.term)):
            renewed = min(x.nodes, renewable.get((x.site, x.gpu), 0)) if x.term != "owned" else 0
            renewable[(x.site, x.gpu)] = renewable.get((x.site, x.gpu), 0) - renewed
            ends = term_end(day(starts[k]), x.years).isoformat() if starts[k] else None
            for action, n in (("renew", renewed), (_action(x), x.nodes - renewed)):
                if n:
                    part = Signing(x.year, x.site, x.gpu, x.term, n, x.usd_per_node_hour, x.years)
                    rows.append({"plan": plan.method, "year": k + 1, "start": starts[k], "site": x.site, "gpu": x.gpu,
                                 "action": action, "term": x.term, "nodes": n, "ends": ends,
                                 "usd_per_node_year": x.usd_per_node_hour * HOURS_PER_YEAR,
                                 "present_cost_usd": part.present_cost_usd(rate, years, end_value)})
        for (site, gpu), n in sorted(renewable.items()):
            if n > 0:
                rows.append({"plan": plan.method, "year": k + 1, "start": starts[k], "site": site, "gpu": gpu,
                             "action": "lapse", "term": "reserved", "nodes": n})
        for r in plan.retired[k]:
            rows.append({"plan": plan.method, "year": k + 1, "start": starts[k], "site": r["site"], "gpu": r["gpu"],
                         "action": "retire", "term": "owned", "nodes": r["nodes"]})
    return pd.DataFrame(rows, columns=SCHEDULE_COLUMNS)


def years_table(chosen: YearsPlan, together: YearsPlan, myopic: YearsPlan, starts: list[str | None],
                demand: list[float], rate: float) -> pd.DataFrame:
    """Per year of the chosen schedule: operations, commitments running, cash cost and its
    present value, the sunk rent of the fleet the company had; and the cash cost of the years
    planned together and of the year-by-year (myopic) schedule."""
    rows = []
    for k, year_plan in enumerate(chosen.plans):
        d = (1 + rate) ** -k
        cost = chosen.operating_usd(k) + chosen.commitments_usd(k)
        fleet = year_plan.summary.get("fleet") or {}
        rows.append({"year": k + 1, "start": starts[k], "demand_factor": demand[k],
                     "operating_usd": chosen.operating_usd(k), "commitments_usd": chosen.commitments_usd(k),
                     "cost_usd": cost, "discount_factor": d, "present_cost_usd": d * cost,
                     "sunk_usd": fleet.get("sunk_usd", 0.0),
                     "together_cost_usd": together.operating_usd(k) + together.commitments_usd(k),
                     "myopic_cost_usd": myopic.operating_usd(k) + myopic.commitments_usd(k),
                     "gpus_peak": sum(year_plan.summary["gpus_by_type_peak"].values()),
                     "unserved_fraction": year_plan.summary["unserved_fraction"]})
    return pd.DataFrame(rows, columns=YEARS_COLUMNS)


@dataclass
class HorizonPlan:
    """A multi-year plan: the chosen schedule's year plans and tables, and the summary."""

    summary: dict
    plans: list[Plan]
    schedule: pd.DataFrame
    years: pd.DataFrame
    price_scenarios: pd.DataFrame
    scenario_data: dict
    inputs: list[Path] = field(default_factory=list)


def term_label(term: str) -> str:
    return TERM[term].label if term in TERM else term
