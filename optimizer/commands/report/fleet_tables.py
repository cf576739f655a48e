"""The plan report's tables on where the plan starts from: the fleet the company had (what
the plan used, left idle or retired, and what is up for renewal) and the churn limits (the
changes per site and accelerator, and what each binding limit costs)."""

from __future__ import annotations

import pandas as pd

from optimizer.base.contracts import TERM
from optimizer.commands.report import formatting as f
from optimizer.commands.report.formatting import TableColumn, esc


def fleet_html(summary: dict) -> str:
    """The existing fleet's table ('' where the plan started from nothing)."""
    fleet = summary.get("fleet")
    if not fleet:
        return ""
    rows = pd.DataFrame([{**r, "term": TERM[r["term"]].label if r["term"] in TERM else r["term"],
                          "left": r.get("idle_nodes", r.get("retired_nodes", 0)),
                          "how": "idle (rent sunk)" if "idle_nodes" in r else "retired"} for r in fleet["existing"]])
    out = (f"<h3>The fleet it started from ({esc(fleet['start'])})</h3><p>Rent already sunk in the year: "
           f"{esc(f.usd(fleet['sunk_usd']))}, not in the plan's cost.</p>")
    if not rows.empty:
        out += f.table(rows, [TableColumn("site", "site"), TableColumn("gpu", "accelerator"), TableColumn("term", "held as"),
                              TableColumn("nodes", "nodes", f.count, True), TableColumn("used_nodes", "used", f.count, True),
                              TableColumn("left", "not used", f.count, True), TableColumn("how", "those")],
                       table_id="existing-fleet")
    renew = pd.DataFrame(fleet["up_for_renewal"])
    if not renew.empty:
        out += "<p>Up for renewal (ending inside the year):</p>" + f.table(
            renew, [TableColumn("site", "site"), TableColumn("gpu", "accelerator"),
                    TableColumn("nodes", "nodes", f.count, True), TableColumn("end", "ends")], table_id="renewals")
    return out


def churn_html(summary: dict) -> str:
    """The churn limits' table ('' without a previous fleet)."""
    churn = summary.get("churn")
    if not churn:
        return ""
    limits = ", ".join(f"{k} {churn[k]}" for k in ("growth_factor", "growth_nodes", "max_removed_nodes", "max_changes")
                       if churn.get(k) is not None) or "none (the changes reported)"
    out = (f"<h3>Moving from the previous fleet</h3><p>Limits: {esc(limits)}. Nodes {f.count(churn['previous_nodes'])} → "
           f"{f.count(churn['nodes'])}; changes used {f.count(churn['changes_used'])}.</p>")
    changes = pd.DataFrame(churn["changes"])
    if not changes.empty:
        out += f.table(changes, [TableColumn("site", "site"), TableColumn("gpu", "accelerator"),
                                 TableColumn("previous_committed", "committed before", f.count, True),
                                 TableColumn("committed", "committed", f.count, True),
                                 TableColumn("previous_ondemand_peak", "on-demand peak before", f.count, True),
                                 TableColumn("ondemand_peak", "on-demand peak", f.count, True)], table_id="churn-changes")
    prices = pd.DataFrame(churn["shadow_prices"])
    if not prices.empty:
        out += (f"<p>What each binding limit costs ({esc(churn['shadow_price_method'])}):</p>"
                + f.table(prices, [TableColumn(c, c.replace("_", " "), f.usd if c == "usd_per_node" else f.text,
                                               c == "usd_per_node") for c in prices.columns], table_id="churn-prices"))
    return out
