"""The plan report's charts. Each has a data function, computed from the plan folder's tables
(and, for hours and node sizes, its scenario), returning the plotted series as a tidy frame;
and a chart function returning that frame with the static and the interactive figure
(`drawing.Chart`). Tests recompute every data function independently.

Slices are the planned hours: period × day type × UTC hour, each standing for
``weight_hours`` hours of the year (Σ = 8,760)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from optimizer.base.contracts import COST_COLUMNS, COST_LABELS
from optimizer.commands.report import formatting as f
from optimizer.commands.report.drawing import Axes, Chart, bars, lines
from optimizer.commands.report.folder import MissingInput, PlanFolder

COST_LINES = [(column, COST_LABELS[category]) for category, column in COST_COLUMNS.items()]
WATERFALL = [("network_ms", "network"), ("overhead_ms", "overheads"), ("queue_ms", "queue"),
             ("prefill_ms", "prefill"), ("transfer_ms", "KV transfer"), ("first_token_ms", "first token")]
ALL_SITES, ALL_WORKLOADS = "all sites", "all workloads"
SLICE_KEYS = ["period", "day_type", "hour"]


# ---------------------------------------------------------------------------- slices


def slice_axis(folder: PlanFolder) -> pd.DataFrame:
    """Slices in planning order with their x position, hover label and weight."""
    sl = folder.slices()
    several_days = sl["day_type"].nunique() > 1
    sl["x"] = np.arange(len(sl))
    sl["when"] = [f"{p}{' ' + d if several_days else ''} · {h:02d}:00 UTC"
                  for p, d, h in zip(sl["period"], sl["day_type"], sl["hour"])]
    return sl


def slice_ticks(axis: pd.DataFrame) -> list[tuple[float, str]]:
    """A tick where each (period, day type) starts."""
    starts = axis.drop_duplicates(["period", "day_type"])
    several_days = axis["day_type"].nunique() > 1
    return [(float(r.x), f"{r.period}{' ' + r.day_type if several_days else ''}") for r in starts.itertuples()]


# ---------------------------------------------------------------------------- provisioning


def provisioning_data(folder: PlanFolder) -> pd.DataFrame:
    """Per (site, accelerator) and slice: GPUs in replicas, committed and on-demand nodes, GPUs
    provisioned — as the plan made its fleet whole (nodes.csv, `optimizer.solve.fleet`).
    Provisioned GPUs_t = (c + o_t) · GPUs per node."""
    if "nodes" not in folder.tables:
        raise MissingInput("nodes.csv is missing (a folder written before it existed): plan again to see the nodes "
                           "of every hour")
    nodes = folder.tables["nodes"]
    if nodes.empty:
        raise MissingInput("the plan buys no nodes")
    per_node = folder.gpus_per_node()
    out = nodes.merge(slice_axis(folder)[[*SLICE_KEYS, "x", "when"]], on=SLICE_KEYS, how="left")
    out["gpus_per_node"] = out["gpu"].map(per_node)
    out["gpus_provisioned"] = (out["committed_nodes"] + out["ondemand_nodes"]) * out["gpus_per_node"]
    return out[["site", "gpu", *SLICE_KEYS, "x", "when", "weight_hours", "gpus_per_node", "gpus_in_replicas",
                "committed_nodes", "ondemand_nodes", "gpus_provisioned"]]


# ---------------------------------------------------------------------------- cost stack


def cost_stack_data(folder: PlanFolder) -> pd.DataFrame:
    """US$ a year per (site, accelerator) and cost line; egress as its own row."""
    proc = folder.tables["procurement"]
    rows = []
    for r in proc.to_dict("records"):
        if r["gpu"] == "egress":
            rows.append({"site": "all sites", "gpu": "egress", "line": "egress", "usd": float(r["cost_usd"])})
            continue
        rows += [{"site": r["site"], "gpu": r["gpu"], "line": label, "usd": float(r.get(col, 0.0))}
                 for col, label in COST_LINES if r.get(col, 0.0)]
    out = pd.DataFrame(rows, columns=["site", "gpu", "line", "usd"])
    out["row"] = out["site"] + " / " + out["gpu"]
    return out


def cost_stack(folder: PlanFolder) -> Chart:
    data = cost_stack_data(folder)
    data = data.assign(hover=[f"{r} · {ln}: {f.usd(v)} a year ({f.usd(v / 12)} a month)"
                              for r, ln, v in zip(data["row"], data["line"], data["usd"])],
                       musd=data["usd"] / 1e6)
    static, fig = bars(data, "row", "musd", "line", Axes("What the plan costs a year, by site, accelerator and contract",
                                                          xlabel="US$ million a year", height_in=3.0),
                       hover="hover", horizontal=True)
    return Chart(data.drop(columns=["hover", "musd"]), static, fig)


# ---------------------------------------------------------------------------- GPUs over the day


def gpus_over_the_day_data(folder: PlanFolder) -> pd.DataFrame:
    """GPUs in replicas per slice, site and workload (zero where a site runs none), plus each
    site's total over workloads (workload "all workloads")."""
    axis = slice_axis(folder)
    pools = folder.nominal_pools()
    gpus = (pools["replicas"] * pools["gpus_per_replica"]).groupby(
        [pools["site"], pools["workload"], *(pools[k] for k in SLICE_KEYS)]).sum().rename("gpus").reset_index()
    total = gpus.groupby(["site", *SLICE_KEYS], as_index=False)["gpus"].sum().assign(workload=ALL_WORKLOADS)
    both = pd.concat([total, gpus], ignore_index=True).merge(axis[[*SLICE_KEYS, "x"]], on=SLICE_KEYS)
    grid = pd.MultiIndex.from_product([[ALL_WORKLOADS, *sorted(gpus["workload"].unique())],
                                       sorted(gpus["site"].unique()), axis["x"]], names=["workload", "site", "x"])
    out = both.set_index(["workload", "site", "x"])["gpus"].reindex(grid, fill_value=0).reset_index()
    out = out.merge(axis[[*SLICE_KEYS, "x", "when"]], on="x")
    return out[["workload", "site", *SLICE_KEYS, "x", "when", "gpus"]]


def gpus_over_the_day(folder: PlanFolder) -> Chart:
    data = gpus_over_the_day_data(folder)
    axis = slice_axis(folder)
    data = data.assign(hover=[f"{w} · {s} · {t}: {f.count(g)} GPUs"
                              for w, s, t, g in zip(data["workload"], data["site"], data["when"], data["gpus"])])
    static, fig = lines(data, "x", "gpus", "site", Axes("GPUs serving, by site, over the planned hours (stacked)",
                                                      xlabel="planned hour (UTC) by period", ylabel="GPUs in replicas",
                                                      ticks=slice_ticks(axis)),
                        hover="hover", group="workload", stacked=True, step=True)
    return Chart(data.drop(columns="hover"), static, fig)


# ---------------------------------------------------------------------------- on demand


def ondemand_data(folder: PlanFolder) -> pd.DataFrame:
    prov = provisioning_data(folder)
    prov = prov.assign(series=prov["site"] + " / " + prov["gpu"])
    return prov[["series", "site", "gpu", *SLICE_KEYS, "x", "when", "committed_nodes", "ondemand_nodes"]]


def ondemand(folder: PlanFolder) -> Chart:
    data = ondemand_data(folder)
    axis = slice_axis(folder)
    data = data.assign(hover=[f"{s} · {t}: {f.count(o)} on-demand nodes beside {f.count(c)} committed"
                              for s, t, o, c in zip(data["series"], data["when"], data["ondemand_nodes"],
                                                    data["committed_nodes"])])
    static, fig = lines(data, "x", "ondemand_nodes", "series",
                        Axes("Nodes rented on demand, over the planned hours", xlabel="planned hour (UTC) by period",
                             ylabel="on-demand nodes", ticks=slice_ticks(axis), height_in=3.4),
                        hover="hover", step=True)
    return Chart(data.drop(columns="hover"), static, fig)


# ---------------------------------------------------------------------------- utilisation


def utilisation_data(folder: PlanFolder) -> pd.DataFrame:
    """Per site (and for all sites) and UTC hour of the day, over the year's periods and day types:

        utilisation = Σ_t h_t · GPUs in replicas_t / Σ_t h_t · GPUs provisioned_t

    (h_t the hours slice t stands for) — the same ratio as summary.json's average_utilization,
    which is this over every site and hour."""
    prov = provisioning_data(folder)
    prov = prov.assign(used_gpu_hours=prov["gpus_in_replicas"] * prov["weight_hours"],
                       provisioned_gpu_hours=prov["gpus_provisioned"] * prov["weight_hours"])
    cols = ["used_gpu_hours", "provisioned_gpu_hours"]
    by_site = prov.groupby(["site", "hour"], as_index=False)[cols].sum()
    fleet = prov.groupby("hour", as_index=False)[cols].sum().assign(site=ALL_SITES)
    out = pd.concat([fleet, by_site], ignore_index=True)
    out["utilisation"] = out["used_gpu_hours"] / out["provisioned_gpu_hours"].where(out["provisioned_gpu_hours"] > 0)
    return out[["site", "hour", *cols, "utilisation"]]


def utilisation(folder: PlanFolder) -> Chart:
    data = utilisation_data(folder)
    fleet = data[data["site"] == ALL_SITES]
    year = fleet["used_gpu_hours"].sum() / fleet["provisioned_gpu_hours"].sum()
    data = data.assign(hover=[f"{s} · {h:02d}:00 UTC: {f.pct(u)} of provisioned GPUs serving"
                              for s, h, u in zip(data["site"], data["hour"], data["utilisation"])])
    static, fig = lines(data, "hour", "utilisation", "site",
                        Axes(f"Utilisation by hour of the day: GPUs serving / GPUs provisioned (year: {f.pct(year)})",
                             xlabel="hour of the day (UTC)", ylabel="utilisation", percent=True, height_in=3.6),
                        hover="hover")
    return Chart(data.drop(columns="hover"), static, fig)


# ---------------------------------------------------------------------------- TTFT budget


def ttft_waterfall_data(folder: PlanFolder) -> pd.DataFrame:
    """For each workload, the routed arc with the highest predicted p99 TTFT, part by part, in
    ms and as a share of the workload's objective; what is left is the slack."""
    slo = folder.tables["slo"]
    if slo.empty:
        raise MissingInput("the plan routes no traffic (slo.csv is empty)")
    worst = slo.sort_values(["ttft_p99_ms_predicted", "metro", "site"]).groupby("workload").tail(1).sort_values("workload")
    rows = []
    for r in worst.to_dict("records"):
        parts = [(label, float(r[col])) for col, label in WATERFALL]
        parts.append(("slack", max(float(r["ttft_p99_ms_objective"]) - sum(v for _, v in parts), 0.0)))
        rows += [{"workload": r["workload"], "metro": r["metro"], "site": r["site"], "part": label, "ms": v,
                  "objective_ms": float(r["ttft_p99_ms_objective"]), "share": v / float(r["ttft_p99_ms_objective"])}
                 for label, v in parts]
    return pd.DataFrame(rows)


def ttft_waterfall(folder: PlanFolder) -> Chart:
    data = ttft_waterfall_data(folder)
    data = data.assign(row=[f"{w} ({m} → {s}, {f.ms(o)})" for w, m, s, o in
                            zip(data["workload"], data["metro"], data["site"], data["objective_ms"])],
                       hover=[f"{w} · {p}: {f.ms(v)}, {f.pct(sh)} of the objective"
                              for w, p, v, sh in zip(data["workload"], data["part"], data["ms"], data["share"])])
    static, fig = bars(data, "row", "share", "part",
                       Axes("p99 time to first token of each workload's tightest routed arc, as a share of its objective",
                            xlabel="share of the p99 TTFT objective", percent=True, height_in=2.6),
                       hover="hover", horizontal=True)
    return Chart(data.drop(columns=["row", "hover"]), static, fig)


# ---------------------------------------------------------------------------- $/M tokens


def cost_per_token_data(folder: PlanFolder) -> pd.DataFrame:
    """US$ per million output tokens by workload: the plan; the hand-made baseline
    (its cost of the workload over the same tokens: plan $/M × baseline cost / plan cost);
    the per-token list price of the same requests; and, when verified, the plan per million
    tokens delivered inside the objectives."""
    s = folder.summary
    plan = s.get("cost_per_million_tokens_usd_by_workload") or {}
    cost = s.get("cost_usd_by_workload") or {}
    base = s.get("baseline_cost_usd_by_workload") or {}
    listed = (s.get("token_billing") or {}).get("by_workload") or {}
    measured = (((s.get("verification") or {}).get("token_billing") or {}).get("by_workload")) or {}
    rows = []
    for k, v in plan.items():
        if v is None:
            continue
        rows.append({"workload": k, "measure": "plan", "usd_per_million_tokens": v})
        if base.get(k) is not None and cost.get(k):
            rows.append({"workload": k, "measure": "hand-made baseline", "usd_per_million_tokens": v * base[k] / cost[k]})
        if (listed.get(k) or {}).get("list_usd_per_million_output_tokens") is not None:
            rows.append({"workload": k, "measure": "per-token list price",
                         "usd_per_million_tokens": listed[k]["list_usd_per_million_output_tokens"]})
        if (measured.get(k) or {}).get("gpu_cost_usd_per_million_goodput_tokens") is not None:
            rows.append({"workload": k, "measure": "plan, measured goodput (verify)",
                         "usd_per_million_tokens": measured[k]["gpu_cost_usd_per_million_goodput_tokens"]})
    if not rows:
        raise MissingInput("the plan serves no tokens")
    return pd.DataFrame(rows)


def cost_per_token(folder: PlanFolder) -> Chart:
    data = cost_per_token_data(folder)
    data = data.assign(hover=[f"{k} · {m}: {f.usd(v)} per million output tokens"
                              for k, m, v in zip(data["workload"], data["measure"], data["usd_per_million_tokens"])])
    static, fig = bars(data, "workload", "usd_per_million_tokens", "measure",
                       Axes("Cost per million output tokens", ylabel="US$ per million output tokens", height_in=3.6),
                       hover="hover", stacked=False)
    cannot = folder.summary.get("baseline_cannot_serve") or {}
    if cannot:
        note = f"The hand-made baseline cannot serve {', '.join(cannot)}: it has no cost to compare there."
    elif folder.summary.get("baseline_cost_usd_by_workload"):
        note = ""
    else:
        note = ("This plan folder does not record the baseline's cost by workload (planned by an older fleetplan); "
                "plan it again to see it.")
    return Chart(data.drop(columns="hover"), static, fig, note)
