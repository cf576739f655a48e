"""Procurement contracts as one table: every committed term, what its price is, whether
energy is in it, and the cost category its dollars land in. The instance prices them, the MIP
buys them, costing, operations, the report and comparisons read their columns — all from
here, so that a new term (say a 6-month reservation) is one row below and one price column
in the catalogue (`prices.csv`), nothing else.

On-demand nodes are not a committed term: they are rented per hour at the on-demand price.
The fleet a company already has (`fleet:` in a scenario) enters as two more terms: nodes on
contracts already signed (their rent is sunk: they cost the plan nothing more) and nodes
already owned (their capital is sunk; keeping them pays colocation and energy, retiring them
saves both). The plan fills them before it signs anything new.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    id: str  # as plan tables name it ("reserved-1y")
    label: str  # as a person reads it
    policy_key: str  # as `policy.reserved_terms` lists it ("1y"); "owned" follows `policy.allow_owned`
    price_column: str | None  # prices.csv column in $/GPU-hour; None: priced by its TCO (capex, energy, colo)
    energy_included: bool  # cloud prices include energy; owned nodes pay it apart (at full power)
    category: str  # the cost category (and procurement column cost_<category>_usd) its rent lands in
    existing: bool = False  # the fleet's own: at most the nodes it has, never signed by the plan
    years: int | None = None  # a reservation's length (owned: its depreciation life, per accelerator)

    @property
    def nodes_column(self) -> str:
        return f"{self.id.replace('-', '_')}_nodes"


TERMS: tuple[Term, ...] = (
    Term("reserved-1y", "reserved, 1 year", "1y", "reserved_1y_usd_per_gpu_hour", True, "reserved", years=1),
    Term("reserved-3y", "reserved, 3 years", "3y", "reserved_3y_usd_per_gpu_hour", True, "reserved", years=3),
    Term("owned", "owned", "owned", None, False, "owned"),
    Term("existing-reserved", "already signed", "existing", None, True, "reserved", existing=True),
    Term("existing-owned", "already owned", "existing", None, False, "owned", existing=True),
)
TERM = {t.id: t for t in TERMS}
RESERVED_POLICY_KEYS = tuple(t.policy_key for t in TERMS if t.price_column)
NEW_TERMS = tuple(t for t in TERMS if not t.existing)  # what a plan may sign

# Cost categories of a plan: committed terms, the energy of terms that do not include it, the
# hourly lines, and the unserved-demand penalty (reported apart: the fleet does not pay it).
# Each has its column in procurement.csv (egress has a row of its own instead).
COST_COLUMNS = {
    "reserved": "cost_reserved_usd",
    "owned": "cost_owned_usd",
    "energy": "cost_energy_usd",
    "ondemand": "cost_ondemand_usd",
    "ramp": "cost_ramp_usd",
    "carbon": "cost_carbon_usd",
}
COST_LABELS = {"reserved": "reserved", "owned": "owned", "energy": "energy (owned)", "ondemand": "on-demand",
               "ramp": "cold starts", "carbon": "carbon", "egress": "egress"}
COMMITTED_CATEGORIES = tuple(dict.fromkeys([t.category for t in TERMS] + ["energy"]))  # paid every hour of the year
COST_CATEGORIES = (*COST_COLUMNS, "egress", "unserved", "tie_break", "kv_cache")
