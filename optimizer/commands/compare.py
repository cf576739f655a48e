"""Scenario comparison: two or more plan folders side by side — what they cost, where the
money goes, which GPUs they buy where, how much they reserve, the power they draw, and which
metros moved to other sites."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from optimizer.base.contracts import COST_COLUMNS, COST_LABELS
from optimizer.base.outputs import COMPARISON, folder_target, write_csv
from optimizer.folder.read import read_plan
from optimizer.results import Plan

COST_LINES = {COST_LABELS[category]: column for category, column in COST_COLUMNS.items()}


@dataclass
class Comparison:
    names: list[str]
    headline: pd.DataFrame  # metric × plan
    by_workload: pd.DataFrame  # workload × (plan, metric)
    gpus: pd.DataFrame  # (site, gpu) × plan: GPUs at peak
    money: pd.DataFrame  # cost line × plan
    routing_changes: pd.DataFrame  # metro, workload, site in each plan (rows where they differ)
    sources: list[Path]  # the plan folders compared

    @property
    def identical(self) -> bool:
        frames = (self.headline, self.gpus, self.money)
        same = all(f.nunique(axis=1, dropna=False).le(1).all() for f in frames if len(f.columns) > 1)
        return same and self.routing_changes.empty


def label(path: Path, names: list[str]) -> str:
    name = path.name or str(path)
    return name if name not in names else f"{name}#{len(names) + 1}"


def _headline(plan: Plan) -> dict:
    """The headline figures; those a summary may lack (`folder.read.SUMMARY_OPTIONAL`) None there."""
    s = plan.summary
    proc = plan.tables["procurement"]
    nodes = proc[proc["gpu"] != "egress"]
    return {
        "total_cost_usd": s["total_cost_usd"],
        "cost_per_million_tokens_usd": s.get("cost_per_million_tokens_usd"),
        "gpus_at_peak": sum(s["gpus_by_type_peak"].values()),
        "reserved_nodes": float(nodes["reserved_nodes"].sum()),
        "ondemand_node_hours": float(nodes["ondemand_node_hours"].sum()),
        "reserved_share_of_gpu_hours": s["reserved_share_of_gpu_hours"],
        "average_utilization": s["average_utilization"],
        "tokens_per_s_per_mw": s.get("tokens_per_s_per_mw"),
        "unserved_fraction": s["unserved_fraction"],
        "mip_gap": s["mip_gap"],
        "savings_vs_baseline": s.get("savings_vs_baseline"),
    }


def _gpus(plan: Plan) -> pd.Series:
    pools = plan.tables["pools"]
    nominal = pools[pools["lost_site"].isna()]
    if nominal.empty:
        return pd.Series(dtype=float)
    per_slice = (nominal["replicas"] * nominal["gpus_per_replica"]).groupby(
        [nominal["site"], nominal["gpu"], nominal["period"], nominal["day_type"], nominal["hour"]]).sum()
    return per_slice.groupby(level=["site", "gpu"]).max()


def _money(plan: Plan) -> pd.Series:
    proc = plan.tables["procurement"]
    nodes = proc[proc["gpu"] != "egress"]
    out = {line: float(nodes[col].sum()) for line, col in COST_LINES.items() if col in nodes}
    out["egress"] = float(proc.loc[proc["gpu"] == "egress", "cost_usd"].sum())
    return pd.Series(out)


def _main_site(plan: Plan) -> pd.Series:
    """The site carrying most of each (metro, workload)'s requests over the year."""
    r = plan.tables["routing"]
    if r.empty:
        return pd.Series(dtype=str)
    load = r.groupby(["metro", "workload", "site"])["requests_per_s"].sum().reset_index()
    top = load.sort_values(["metro", "workload", "requests_per_s", "site"], ascending=[True, True, False, True])
    return top.drop_duplicates(["metro", "workload"]).set_index(["metro", "workload"])["site"]


def compare(plan_dirs: list[str | Path]) -> Comparison:
    paths = [Path(p) for p in plan_dirs]
    names: list[str] = []
    for p in paths:
        names.append(label(p, names))
    plans = [read_plan(p) for p in paths]
    headline = pd.DataFrame({n: _headline(p) for n, p in zip(names, plans)})
    by_workload = pd.concat({n: pd.DataFrame({
        "cost_usd": p.summary["cost_usd_by_workload"],
        "cost_per_million_tokens_usd": p.summary["cost_per_million_tokens_usd_by_workload"],
    }) for n, p in zip(names, plans)}, axis=1)
    gpus = pd.DataFrame({n: _gpus(p) for n, p in zip(names, plans)}).fillna(0)
    money = pd.DataFrame({n: _money(p) for n, p in zip(names, plans)}).fillna(0)
    sites = pd.DataFrame({n: _main_site(p) for n, p in zip(names, plans)})
    changed = sites[sites.nunique(axis=1, dropna=False) > 1].reset_index() if len(names) > 1 else sites.iloc[0:0]
    return Comparison(names, headline, by_workload, gpus, money, changed, paths)


def write_comparison(cmp: Comparison, out: str | Path) -> Path:
    """compare.csv (long form: section, key, plan, value) and routing_changes.csv; the command
    line adds the page (`optimizer.commands.report.compare_page`)."""
    out = folder_target(out, COMPARISON, inputs=cmp.sources)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for section, frame in (("headline", cmp.headline), ("money", cmp.money)):
        for key, row in frame.iterrows():
            rows += [{"section": section, "key": key, "plan": n, "value": row[n]} for n in cmp.names]
    for (site, gpu), row in cmp.gpus.iterrows():
        rows += [{"section": "gpus_at_peak", "key": f"{site}/{gpu}", "plan": n, "value": row[n]} for n in cmp.names]
    for workload, row in cmp.by_workload.iterrows():
        for n in cmp.names:
            for metric in ("cost_usd", "cost_per_million_tokens_usd"):
                rows.append({"section": f"workload_{metric}", "key": workload, "plan": n, "value": row[(n, metric)]})
    write_csv(pd.DataFrame(rows), out / "compare.csv")
    write_csv(cmp.routing_changes, out / "routing_changes.csv")
    return out


def comparison_text(cmp: Comparison) -> str:
    fmt = {"total_cost_usd": "{:,.0f}", "cost_per_million_tokens_usd": "{:.3f}", "gpus_at_peak": "{:,.0f}",
           "reserved_nodes": "{:,.0f}", "ondemand_node_hours": "{:,.0f}", "reserved_share_of_gpu_hours": "{:.1%}",
           "average_utilization": "{:.1%}", "tokens_per_s_per_mw": "{:,.0f}", "unserved_fraction": "{:.3%}",
           "mip_gap": "{:.2%}", "savings_vs_baseline": "{:.1%}"}
    width = max(12, *(len(n) for n in cmp.names))
    lines = [f"{'':30s}" + "".join(f"{n:>{width + 2}s}" for n in cmp.names)]
    for key, row in cmp.headline.iterrows():
        cells = ["-" if pd.isna(row[n]) else fmt.get(key, "{}").format(row[n]) for n in cmp.names]
        lines.append(f"{key:30s}" + "".join(f"{c:>{width + 2}s}" for c in cells))
    lines.append("where the money goes (US$):")
    for key, row in cmp.money.iterrows():
        lines.append(f"  {key:28s}" + "".join(f"{row[n]:>{width + 2},.0f}" for n in cmp.names))
    if cmp.routing_changes.empty:
        lines.append("routing: every metro's main site is the same in all plans")
    else:
        lines.append(f"routing: {len(cmp.routing_changes)} (metro, workload) pairs change their main site, e.g.")
        for row in cmp.routing_changes.head(8).to_dict("records"):
            lines.append(f"  {row['metro']}/{row['workload']}: " + " → ".join(str(row[n]) for n in cmp.names))
    if cmp.identical:
        lines.append("no differences")
    return "\n".join(lines)
