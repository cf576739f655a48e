"""compare.html: two or more plans side by side — the headline figures (with the change
against the first plan), where the money goes, GPUs by site and accelerator, cost by
workload, and the metros whose main site moved. Written by `fleetplan compare --out`, with
compare.png (the cost chart's static image)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from optimizer.base.outputs import write_bytes_atomic
from optimizer.commands.compare import Comparison
from optimizer.commands.report import formatting as f
from optimizer.commands.report.drawing import Axes, Chart, bars
from optimizer.commands.report.formatting import TableColumn, esc
from optimizer.commands.report.html import chart_html, page, section, write_page

SECTIONS = ("headline", "money", "gpus", "workloads", "routing")
HEADLINE = {  # metric → (label, format)
    "total_cost_usd": ("total cost a year", f.usd),
    "cost_per_million_tokens_usd": ("cost per million output tokens", f.usd),
    "gpus_at_peak": ("GPUs at peak", f.count),
    "reserved_nodes": ("committed nodes", f.count),
    "ondemand_node_hours": ("on-demand node-hours a year", f.count),
    "reserved_share_of_gpu_hours": ("reserved share of GPU-hours", f.pct),
    "average_utilization": ("average utilisation", f.pct),
    "tokens_per_s_per_mw": ("tokens/s per MW", f.count),
    "unserved_fraction": ("unserved demand", lambda x: f.pct(x, 3)),
    "mip_gap": ("gap against the bound", lambda x: f.pct(x, 2)),
    "savings_vs_baseline": ("saving against the hand-made baseline", f.pct),
}
ROUTING_ROWS = 200  # routing changes listed on the page (all are in routing_changes.csv)


def headline_data(cmp: Comparison) -> pd.DataFrame:
    """Metric × plan, plus each later plan's change against the first (relative, where the
    first is not zero)."""
    out = cmp.headline.copy()
    first = out[cmp.names[0]].astype(float)
    for name in cmp.names[1:]:
        out[f"change: {name}"] = (out[name].astype(float) - first) / first.where(first != 0)
    return out


def money_data(cmp: Comparison) -> pd.DataFrame:
    """US$ a year per plan and cost line."""
    return cmp.money.rename_axis("line").reset_index().melt(id_vars="line", var_name="plan", value_name="usd")


def gpus_data(cmp: Comparison) -> pd.DataFrame:
    """GPUs at each (site, accelerator)'s peak per plan, and the change against the first plan."""
    out = cmp.gpus.rename_axis(["site", "gpu"]).reset_index().melt(id_vars=["site", "gpu"], var_name="plan",
                                                                   value_name="gpus")
    first = out[out["plan"] == cmp.names[0]].set_index(["site", "gpu"])["gpus"]
    out["change"] = out["gpus"].to_numpy() - first.reindex(pd.MultiIndex.from_frame(out[["site", "gpu"]])).to_numpy()
    return out


def money_chart(cmp: Comparison) -> Chart:
    data = money_data(cmp)
    data = data.assign(musd=data["usd"] / 1e6, hover=[f"{p} · {ln}: {f.usd(v)} a year"
                                                      for p, ln, v in zip(data["plan"], data["line"], data["usd"])])
    static, fig = bars(data, "plan", "musd", "line", Axes("Where the money goes", ylabel="US$ million a year"),
                       hover="hover")
    return Chart(data.drop(columns=["musd", "hover"]), static, fig)


def gpus_chart(cmp: Comparison) -> Chart:
    data = gpus_data(cmp)
    data = data.assign(row=data["site"] + " / " + data["gpu"],
                       hover=[f"{p} · {s} / {g}: {f.count(n)} GPUs ({'+' if c >= 0 else '−'}{f.count(abs(c))} against "
                              f"{cmp.names[0]})" for p, s, g, n, c in
                              zip(data["plan"], data["site"], data["gpu"], data["gpus"], data["change"])])
    static, fig = bars(data, "row", "gpus", "plan", Axes("GPUs at each site's peak hour", xlabel="GPUs"),
                       hover="hover", stacked=False, horizontal=True)
    return Chart(data.drop(columns=["row", "hover"]), static, fig)


def _headline_html(cmp: Comparison) -> str:
    data = headline_data(cmp)
    rows = []
    for key, r in data.iterrows():
        label, fmt = HEADLINE.get(key, (key, f.number))
        rows.append({"metric": label, **{n: fmt(r[n]) for n in cmp.names},
                     **{f"change: {n}": f.pct(r[f"change: {n}"], 1, signed=True) for n in cmp.names[1:]}})
    columns = [TableColumn("metric", "figure")] + [TableColumn(n, n, numeric=True) for n in cmp.names] + [
        TableColumn(f"change: {n}", f"{n} against {cmp.names[0]}", numeric=True) for n in cmp.names[1:]]
    return f.table(pd.DataFrame(rows), columns, table_id="headline-table")


def _wide(long: pd.DataFrame, index: list[str], value: str, names: list[str]) -> pd.DataFrame:
    return long.pivot_table(index=index, columns="plan", values=value, aggfunc="sum")[names].reset_index()


def _money_html(cmp: Comparison, chart: Chart) -> str:
    wide = _wide(money_data(cmp), ["line"], "usd", cmp.names)
    columns = [TableColumn("line", "cost line")] + [TableColumn(n, n, f.usd, True) for n in cmp.names]
    total = {"line": "total", **{n: f.usd(wide[n].sum()) for n in cmp.names}}
    return chart_html(chart, "where the money goes") + f.table(wide, columns, total=total)


def _gpus_html(cmp: Comparison) -> str:
    data = gpus_data(cmp)
    wide = _wide(data, ["site", "gpu"], "gpus", cmp.names)
    for n in cmp.names[1:]:
        wide[f"change: {n}"] = wide[n] - wide[cmp.names[0]]
    columns = ([TableColumn("site", "site"), TableColumn("gpu", "accelerator")] + [TableColumn(n, n, f.count, True) for n in cmp.names]
               + [TableColumn(f"change: {n}", f"{n} against {cmp.names[0]}", _signed_count, True) for n in cmp.names[1:]])
    return chart_html(gpus_chart(cmp), "GPUs by site") + f.table(wide, columns, table_id="gpus-table")


def _signed_count(x) -> str:
    return f.MISSING if pd.isna(x) else ("+" if x > 0 else "−" if x < 0 else "") + f.count(abs(x))


def _workloads_html(cmp: Comparison) -> str:
    frame = cmp.by_workload.copy()
    frame.columns = [f"{n}|{m}" for n, m in frame.columns]
    frame = frame.rename_axis("workload").reset_index()
    columns = [TableColumn("workload", "workload")]
    columns += [TableColumn(f"{n}|cost_usd", f"{n}: a year", f.usd, True) for n in cmp.names]
    columns += [TableColumn(f"{n}|cost_per_million_tokens_usd", f"{n}: per million tokens", f.usd, True) for n in cmp.names]
    return f.table(frame, columns)


def _routing_html(cmp: Comparison) -> str:
    changes = cmp.routing_changes
    if changes.empty:
        return "<p>Every (metro, workload) is served mainly from the same site in all plans.</p>"
    words = (f"{f.count(len(changes))} (metro, workload) pairs are served mainly from another site"
             + (f"; the first {ROUTING_ROWS} are listed, all are in routing_changes.csv" if len(changes) > ROUTING_ROWS
                else "") + ".")
    columns = [TableColumn("metro", "metro"), TableColumn("workload", "workload")] + [TableColumn(n, f"main site: {n}") for n in cmp.names]
    return f"<p>{esc(words)}</p>" + f.table(changes.head(ROUTING_ROWS), columns, table_id="routing-table")


def render_comparison(cmp: Comparison, money: Chart) -> str:
    sections = [section("headline", "Headline figures", lambda: _headline_html(cmp)),
                section("money", "Cost by category", lambda: _money_html(cmp, money)),
                section("gpus", "GPUs by site", lambda: _gpus_html(cmp)),
                section("workloads", "Cost by workload", lambda: _workloads_html(cmp)),
                section("routing", "Routing changes", lambda: _routing_html(cmp))]
    subtitle = "Plans compared: " + ", ".join(f"<b>{esc(n)}</b>" for n in cmp.names)
    return page("fleetplan — plans compared", subtitle, sections)


def write_compare_report(cmp: Comparison, out: str | Path) -> Path:
    """compare.html and compare.png (the cost by category, static) in ``out``."""
    out = Path(out)
    money = money_chart(cmp)
    write_bytes_atomic(out / "compare.png", money.png)
    return write_page(out / "compare.html", render_comparison(cmp, money))
