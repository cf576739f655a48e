"""sweep.html: a sensitivity sweep — how its runs ended, the tornado (one key at a time), the
cost over each varied key, and every run. Written by `fleetplan sweep` beside sweep.csv, with
tornado.png (the tornado's static image) when the sweep varies one key at a time."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from optimizer.base.outputs import write_bytes_atomic
from optimizer.commands.report import formatting as f
from optimizer.commands.report.drawing import Axes, Chart, bars, lines
from optimizer.commands.report.folder import MissingInput
from optimizer.commands.report.formatting import TableColumn, esc
from optimizer.commands.report.html import chart_html, page, section, write_page

SECTIONS = ("runs", "tornado", "curves", "table")
PLANNED = ("optimal", "gap_above_target", "time_limit")  # statuses that come with a plan and its cost
AS_WRITTEN = "scenario as written"


def value_label(v) -> str | None:
    """How a varied value reads: 200, 0.25, ×0.8; None where the run leaves the key as written."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:g}"
    return str(v)


def _labels(table: pd.DataFrame, vary: dict) -> pd.DataFrame:
    return pd.DataFrame({k: [value_label(v) for v in table[k]] if k in table else [None] * len(table) for k in vary},
                        index=table.index)


def _base(table: pd.DataFrame, labels: pd.DataFrame, metric: str) -> float | None:
    """The metric of the run that changes nothing (the scenario as written), if it planned."""
    rows = table[labels.isna().all(axis=1) & table["status"].isin(PLANNED)]
    return float(rows[metric].iloc[0]) if len(rows) else None


def tornado_data(table: pd.DataFrame, vary: dict, metric: str = "total_cost_usd") -> pd.DataFrame:
    """Per varied key, over the runs that change only that key and planned: the value giving
    the lowest and the highest ``metric``, against the scenario as written; widest swing first."""
    labels = _labels(table, vary)
    base = _base(table, labels, metric)
    if base is None:
        raise MissingInput("the run of the scenario as written did not plan, so there is no centre for a tornado")
    rows = []
    for key in vary:
        only = labels[key].notna() & labels.drop(columns=key).isna().all(axis=1) & table["status"].isin(PLANNED)
        runs = table[only]
        if runs.empty:
            continue
        lo, hi = runs[metric].idxmin(), runs[metric].idxmax()
        swing = float(runs[metric].max() - runs[metric].min())
        rows += [{"key": key, "side": side, "value": labels.at[i, key], metric: float(table.at[i, metric]),
                  "base": base, "swing": swing} for side, i in (("lowest", lo), ("highest", hi))]
    if not rows:
        raise MissingInput("no run that changes a single key planned")
    return pd.DataFrame(rows).sort_values(["swing", "key", "side"], ascending=[False, True, False], ignore_index=True)


def tornado(table: pd.DataFrame, vary: dict) -> Chart:
    data = tornado_data(table, vary)
    base = float(data["base"].iloc[0])
    data = data.assign(delta_musd=(data["total_cost_usd"] - base) / 1e6,
                       hover=[f"{k} = {v}: {f.usd(c)} a year ({f.pct(c / base - 1, 1, signed=True)} against the "
                              f"scenario as written, {f.usd(base)})"
                              for k, v, c in zip(data["key"], data["value"], data["total_cost_usd"])])
    static, fig = bars(data, "key", "delta_musd", "side",
                       Axes(f"Cost a year when one key changes, against the scenario as written ({f.usd(base)})",
                            xlabel="change in US$ million a year", height_in=2.4),
                       hover="hover", stacked=False, horizontal=True)
    return Chart(data.drop(columns=["delta_musd", "hover"]), static, fig)


def curves_data(table: pd.DataFrame, vary: dict, mode: str) -> pd.DataFrame:
    """Per varied key and value, each run's cost: one key at a time, the runs changing only
    that key (and the scenario as written as a flat line); on a grid, one line per
    combination of the other keys. ``position`` orders the values as the sweep gave them."""
    labels = _labels(table, vary)
    base = _base(table, labels, "total_cost_usd")
    rows = []
    for key, values in vary.items():
        order = list(dict.fromkeys(value_label(v) for v in values))
        others = labels.drop(columns=key)
        chosen = labels[key].notna() & (others.isna().all(axis=1) if mode == "one-at-a-time" else True)
        for i in table.index[chosen]:
            label = labels.at[i, key]
            rows.append({"key": key, "position": order.index(label) if label in order else len(order), "value": label,
                         "others": ", ".join(f"{k} = {v}" for k, v in others.loc[i].items() if pd.notna(v)) or "runs",
                         "status": table.at[i, "status"], "total_cost_usd": table.at[i, "total_cost_usd"]
                         if "total_cost_usd" in table else None,
                         "cost_per_million_tokens_usd": table.at[i, "cost_per_million_tokens_usd"]
                         if "cost_per_million_tokens_usd" in table else None})
        if mode == "one-at-a-time" and base is not None:
            rows += [{"key": key, "position": p, "value": v, "others": AS_WRITTEN, "status": "as written",
                      "total_cost_usd": base, "cost_per_million_tokens_usd": None} for p, v in enumerate(order)]
    return pd.DataFrame(rows).sort_values(["key", "others", "position"], ignore_index=True)


def cost_curve(data: pd.DataFrame, key: str) -> Chart:
    part = data[data["key"] == key]
    order = part.drop_duplicates("position").sort_values("position")
    part = part.assign(musd=pd.to_numeric(part["total_cost_usd"], errors="coerce") / 1e6,
                       hover=[f"{key} = {v} · {o}: {f.usd(c)} a year ({s})" for v, o, c, s in
                              zip(part["value"], part["others"], part["total_cost_usd"], part["status"])])
    static, fig = lines(part, "position", "musd", "others",
                        Axes(f"Cost a year over {key}", xlabel=key, ylabel="US$ million a year", height_in=3.4,
                             ticks=list(zip(order["position"].astype(float), order["value"]))), hover="hover")
    return Chart(part.drop(columns=["musd", "hover"]), static, fig)


def _runs_html(table: pd.DataFrame, vary: dict) -> str:
    counts = table["status"].value_counts().rename_axis("status").reset_index(name="runs")
    parts = [f.table(counts, [TableColumn("status", "status"), TableColumn("runs", "runs", f.count, True)], table_id="statuses")]
    failed = table[~table["status"].isin(PLANNED)]
    if len(failed):
        columns = ([TableColumn("run_id", "run")] + [TableColumn(k, k, _value) for k in vary if k in failed]
                   + [TableColumn("status", "status"), TableColumn("diagnosis", "why")])
        parts.append("<h3>Runs without a plan</h3>" + f.table(failed, columns, table_id="failed-runs"))
    return "".join(parts)


def _value(v) -> str:
    return value_label(v) or AS_WRITTEN


def _curves_html(table: pd.DataFrame, vary: dict, mode: str) -> str:
    data = curves_data(table, vary, mode)
    if data.empty:
        raise MissingInput("no run changes a varied key")
    return "".join(chart_html(cost_curve(data, key), f"cost over {key}") for key in vary if (data["key"] == key).any())


def _table_html(table: pd.DataFrame, vary: dict) -> str:
    columns = ([TableColumn("run_id", "run")] + [TableColumn(k, k, _value) for k in vary if k in table]
               + [TableColumn("status", "status"), TableColumn("total_cost_usd", "cost a year", f.usd, True),
                  TableColumn("cost_per_million_tokens_usd", "per million tokens", f.usd, True),
                  TableColumn("mip_gap", "gap", lambda x: f.pct(x, 2), True),
                  TableColumn("wall_seconds", "seconds", f.number, True)])
    return f.table(table, [c for c in columns if c.key in table], table_id="runs-table")


def render_sweep(table: pd.DataFrame, vary: dict, mode: str) -> str:
    def tornado_html() -> str:
        if mode != "one-at-a-time":
            raise MissingInput("a tornado needs a sweep of one key at a time (--one-at-a-time)")
        return chart_html(tornado(table, vary), "tornado")

    sections = [section("runs", "How the runs ended", lambda: _runs_html(table, vary)),
                section("tornado", "Sensitivity: one key at a time", tornado_html),
                section("curves", "Cost over each varied key", lambda: _curves_html(table, vary, mode)),
                section("table", "Every run", lambda: _table_html(table, vary))]
    subtitle = (f"{f.count(len(table))} runs ({esc(mode)}) varying " + ", ".join(f"<b>{esc(k)}</b>" for k in vary))
    return page("fleetplan — sensitivity sweep", subtitle, sections)


def write_sweep_report(table: pd.DataFrame, vary: dict, mode: str, out: str | Path) -> Path:
    """sweep.html in ``out``, and tornado.png when the sweep went one key at a time and its
    scenario-as-written run planned."""
    out = Path(out)
    if mode == "one-at-a-time":
        try:
            png = tornado(table, vary).png
        except MissingInput:  # the page says why
            png = None
        if png is not None:
            write_bytes_atomic(out / "tornado.png", png)
    return write_page(out / "sweep.html", render_sweep(table, vary, mode))
