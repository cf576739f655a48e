"""report.html of a multi-year plan folder: the present cost and what planning the years
together saves, the cost of each year (a chart: operations and commitments running, with the
year-by-year schedule beside it), the signing schedule, the cost under each price path, and
links to each year's own report."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from optimizer.commands.report import formatting as f
from optimizer.commands.report.drawing import Axes, Chart, bars
from optimizer.commands.report.formatting import TableColumn, esc
from optimizer.commands.report.html import chart_html, page, section, write_page
from optimizer.folder.horizon import read_horizon
from optimizer.results.horizon import term_label

ACTION_LABELS = {"sign": "sign", "renew": "renew", "buy": "buy", "lapse": "let lapse", "retire": "retire"}


def cost_chart(years: pd.DataFrame) -> Chart:
    """Each year's cash cost: operations and commitments running (the chosen schedule), and the
    two schedules' totals side by side."""
    rows = []
    for r in years.itertuples():
        label = f"year {r.year}"
        rows += [{"year": label, "part": "operations", "musd": r.operating_usd / 1e6},
                 {"year": label, "part": "commitments running", "musd": r.commitments_usd / 1e6}]
    data = pd.DataFrame(rows)
    static, fig = bars(data, "year", "musd", "part",
                       Axes("Cost of each year (cash, US$ million)", ylabel="US$ million", height_in=3.2))
    return Chart(data, static, fig, note="Operations: on-demand, energy, colocation, egress, carbon and cold starts of "
                 "the year's plan; commitments: the rent (owned: capital) of every contract the plan signed that runs "
                 "in the year.")


def _summary_html(sm: dict) -> str:
    saving = sm["together_saves_usd"]
    verdict = (f"planning the years together saves {f.usd(saving)} ({f.pct(sm['together_saves_fraction'])}) against "
               "planning each year alone" if saving >= 0 else
               f"planning each year alone is {f.usd(-saving)} cheaper here, so that schedule is the plan")
    return (f"<p>Present cost {esc(f.usd(sm['present_cost_usd']))} over {sm['years']} years from {esc(sm['start'])} "
            f"(prices: {esc(sm['price_scenario'])}, discount {esc(f.pct(sm['discount_rate']))} a year); "
            f"{esc(verdict)}. Committed beyond the horizon: {esc(f.usd(sm['committed_beyond_horizon_usd']))} "
            f"({'counted in full' if sm['end_value'] == 'full' else 'not counted'}). The joint linear program "
            f"({sm['joint_program']['columns']:,} columns, {sm['joint_program']['rows']:,} rows) estimated "
            f"{esc(f.usd(sm['joint_program']['linear_present_cost_usd']))}; the figures here are the whole plans'. "
            f"Best bound {esc(f.usd(sm.get('bound_present_cost_usd')))}: the plan is within "
            f"{esc(f.pct(sm.get('gap')))} of it.</p>")


def _schedule_html(schedule: pd.DataFrame, method: str) -> str:
    rows = schedule[schedule["plan"] == method].assign(
        action=lambda d: d["action"].map(ACTION_LABELS), term=lambda d: d["term"].map(term_label))
    if rows.empty:
        return "<p>Nothing to sign: the fleet and on-demand rental carry every year.</p>"
    return f.table(rows, [TableColumn("year", "year", f.count, True), TableColumn("action", "action"),
                          TableColumn("nodes", "nodes", f.count, True), TableColumn("gpu", "accelerator"),
                          TableColumn("site", "site"), TableColumn("term", "term"), TableColumn("ends", "until"),
                          TableColumn("usd_per_node_year", "$ per node-year", f.usd, True),
                          TableColumn("present_cost_usd", "present cost", f.usd, True)], table_id="schedule")


def _years_html(years: pd.DataFrame) -> str:
    return f.table(years, [TableColumn("year", "year", f.count, True), TableColumn("start", "from"),
                           TableColumn("demand_factor", "demand ×", f.number, True),
                           TableColumn("operating_usd", "operations", f.usd, True),
                           TableColumn("commitments_usd", "commitments", f.usd, True),
                           TableColumn("cost_usd", "cash cost", f.usd, True),
                           TableColumn("present_cost_usd", "present cost", f.usd, True),
                           TableColumn("together_cost_usd", "together: cash", f.usd, True),
                           TableColumn("myopic_cost_usd", "year by year: cash", f.usd, True),
                           TableColumn("sunk_usd", "sunk rent", f.usd, True),
                           TableColumn("gpus_peak", "GPUs at peak", f.count, True)], table_id="years")


def _prices_html(prices: pd.DataFrame) -> str:
    return f.table(prices, [TableColumn("price_scenario", "price path"),
                            TableColumn("together_present_cost_usd", "years together", f.usd, True),
                            TableColumn("myopic_present_cost_usd", "year by year", f.usd, True)],
                   table_id="prices") + ("<p class=\"note\">Each schedule as planned (the same nodes, rentals and "
                                         "signings), its on-demand hours and signings at each path's prices.</p>")


def write_horizon_report(folder: Path) -> Path:
    """report.html in a (temporary) multi-year plan folder."""
    folder = Path(folder)
    sm, tables = read_horizon(folder)
    years, schedule, prices = tables["years"], tables["schedule"], tables["price_scenarios"]
    links = "".join(f'<li><a href="year-{k}/report.html">year {k}</a></li>' for k in range(1, sm["years"] + 1))
    sections = [
        section("summary", "The plan over the years", lambda: _summary_html(sm), "summary"),
        section("years", "Cost of each year", lambda: chart_html(cost_chart(years), "cost of each year") +
                _years_html(years), "years"),
        section("schedule", "Signing schedule", lambda: _schedule_html(schedule, sm["method"]), "schedule"),
        section("prices", "Under each price path", lambda: _prices_html(prices), "prices"),
        section("year-plans", "Each year's plan", lambda: f"<ul>{links}</ul>", "year plans"),
    ]
    subtitle = esc(f"{sm['scenario']}: {sm['years']} years from {sm['start']}")
    return write_page(folder / "report.html", page(f"fleetplan multi-year plan — {sm['scenario']}", subtitle, sections))
