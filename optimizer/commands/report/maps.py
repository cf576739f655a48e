"""The routing map: land and borders (`land`), metros sized by their demand, sites sized by
the GPUs they hold at their busiest hour, and every metro → site flow drawn with a width
proportional to its year-average requests/s and coloured by its latency tier (the RTT bound
the flow's pool was sized for).

Projection: plate carrée with the x axis shrunk by cos(middle latitude), so shapes near that
latitude keep their proportions — enough for a continent, and free of any map library."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from matplotlib.collections import LineCollection, PolyCollection

from optimizer.commands.report import formatting as f
from optimizer.commands.report.charts import ALL_WORKLOADS, SLICE_KEYS, provisioning_data
from optimizer.commands.report.drawing import (
    Axes,
    Chart,
    esc,
    group_menu,
    interactive_figure,
    png,
    static_figure,
)
from optimizer.commands.report.folder import MissingInput, PlanFolder
from optimizer.commands.report.land import Land, load_land
from optimizer.scenario import Scenario

TIER_COLOURS = ["#1a9850", "#4575b4", "#fdae61", "#d73027", "#762a83", "#8c510a"]
LAND, COAST, BORDER = "#efece6", "#8f8f8f", "#b9b4aa"
METRO, SITE = "#e08214", "#222222"
MARGIN_DEG = 4.0
WIDTH_CLASSES = 6  # interactive flows are drawn in this many widths (one trace per width and tier)


def flows_data(folder: PlanFolder) -> pd.DataFrame:
    """Per (metro, site, workload, tier): year-average requests/s = Σ_t h_t · x_t / Σ_t h_t,
    with the tier's RTT bound, the round trip and both ends' coordinates."""
    s = folder.scenario
    routing = folder.tables["routing"]
    if routing.empty:
        raise MissingInput("the plan routes no traffic (routing.csv is empty)")
    sl = folder.slices()
    r = routing.merge(sl, on=SLICE_KEYS)
    r["weighted"] = r["requests_per_s"] * r["weight_hours"]
    out = r.groupby(["metro", "site", "workload", "tier"], as_index=False).agg(weighted=("weighted", "sum"),
                                                                             rtt_ms=("rtt_ms", "first"))
    out["requests_per_s"] = out.pop("weighted") / sl["weight_hours"].sum()
    bounds = s.serving.tier_rtt_ms
    out["tier_rtt_ms"] = [bounds[t] if 0 <= t < len(bounds) else float("nan") for t in out["tier"]]
    out["metro_lon"] = [s.metros[m].lon for m in out["metro"]]
    out["metro_lat"] = [s.metros[m].lat for m in out["metro"]]
    out["site_lon"] = [s.sites[x].lon for x in out["site"]]
    out["site_lat"] = [s.sites[x].lat for x in out["site"]]
    return out


def sites_data(folder: PlanFolder) -> pd.DataFrame:
    """Every candidate site with the GPUs provisioned there (committed + on-demand, over its
    accelerators) in its busiest slice; 0 for a site the plan does not use."""
    s = folder.scenario
    prov = provisioning_data(folder)
    peak = prov.groupby(["site", "x"])["gpus_provisioned"].sum().groupby(level="site").max()
    return pd.DataFrame([{"site": x.id, "lon": x.lon, "lat": x.lat, "gpus_peak": int(peak.get(x.id, 0))}
                         for x in s.sites.values()])


def metros_data(folder: PlanFolder) -> pd.DataFrame:
    """Every metro with the year-average requests/s it sends (all workloads)."""
    s = folder.scenario
    flows = flows_data(folder).groupby("metro")["requests_per_s"].sum()
    return pd.DataFrame([{"metro": m.id, "lon": m.lon, "lat": m.lat, "requests_per_s": float(flows.get(m.id, 0.0))}
                         for m in s.metros.values()])


def extent(lons, lats) -> tuple[tuple[float, float], tuple[float, float], float]:
    """(lon range, lat range, y stretch 1 / cos(middle latitude)) around the given points."""
    lon = (min(lons) - MARGIN_DEG, max(lons) + MARGIN_DEG)
    lat = (max(min(lats) - MARGIN_DEG, -85.0), min(max(lats) + MARGIN_DEG, 85.0))
    return lon, lat, 1.0 / math.cos(math.radians((lat[0] + lat[1]) / 2))


def draw_land(ax, land: Land) -> None:
    """Land, coast and borders on a matplotlib axis (below everything else)."""
    ax.add_collection(PolyCollection(land.areas, facecolor=LAND, edgecolor="none", zorder=0))
    ax.add_collection(LineCollection(land.coast, colors=COAST, linewidths=0.6, zorder=0.5))
    ax.add_collection(LineCollection(land.borders, colors=BORDER, linewidths=0.5, zorder=0.5))


def _tier_label(bound: float) -> str:
    return "tier unknown" if math.isnan(bound) else f"tier RTT ≤ {bound:g} ms"


def _widths(volume: pd.Series) -> pd.Series:
    top = volume.max()
    return 0.4 + 5.0 * volume / top if top > 0 else volume * 0 + 0.4


def routing_map(folder: PlanFolder) -> Chart:
    flows = flows_data(folder)
    sites = sites_data(folder)
    metros = metros_data(folder)
    lon_range, lat_range, stretch = extent([*metros["lon"], *sites["lon"]], [*metros["lat"], *sites["lat"]])
    land = load_land().within(lon_range, lat_range)
    tiers = sorted(flows["tier"].unique())
    colour = {t: TIER_COLOURS[i % len(TIER_COLOURS)] for i, t in enumerate(tiers)}
    label = {t: _tier_label(b) for t, b in flows.groupby("tier")["tier_rtt_ms"].first().items()}
    total = flows.groupby(["metro", "site", "tier", "rtt_ms", "metro_lon", "metro_lat", "site_lon", "site_lat"],
                          as_index=False)["requests_per_s"].sum()
    title = "Where each metro's requests are served (year average; width ∝ requests/s, colour = latency tier)"
    height_in = min(max(10.0 * (lat_range[1] - lat_range[0]) * stretch / (lon_range[1] - lon_range[0]) + 1.0, 3.5), 8.0)

    fig, ax = static_figure(height_in)
    ax = ax[0][0]
    draw_land(ax, land)
    width = _widths(total["requests_per_s"])
    for t in tiers:
        part = total["tier"] == t
        segments = [[(a, b), (c, d)] for a, b, c, d in total.loc[part, ["metro_lon", "metro_lat", "site_lon", "site_lat"]]
                    .to_numpy()]
        ax.add_collection(LineCollection(segments, colors=colour[t], linewidths=width[part], alpha=0.75, zorder=1,
                                         label=label[t]))
    _static_points(ax, metros, sites)
    ax.set_xlim(*lon_range)
    ax.set_ylim(*lat_range)
    ax.set_aspect(stretch)
    ax.set_title(title)
    ax.set_xlabel("longitude (°)")
    ax.set_ylabel("latitude (°)")
    legend = ax.legend(fontsize=8, loc="lower left", framealpha=0.9)
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):  # one mid-sized marker per entry, not the first point's size
            handle.set_sizes([30])
    fig.tight_layout()
    static = png(fig)

    out = interactive_figure(Axes(title), height_in)
    groups: list = []
    _interactive_land(out, land, groups)
    for workload, part in [(ALL_WORKLOADS, total), *flows.groupby("workload")]:
        _interactive_flows(out, part, total["requests_per_s"].max(), colour, label, workload, groups)
    _interactive_points(out, metros, sites, groups)
    out.update_xaxes(range=list(lon_range), showgrid=False, zeroline=False, title_text="longitude (°)")
    out.update_yaxes(range=list(lat_range), showgrid=False, zeroline=False, scaleanchor="x", scaleratio=stretch,
                     title_text="latitude (°)")
    out.update_layout(plot_bgcolor="#f7fbff")
    group_menu(out, groups, "show workload")
    note = "" if len(metros) else "No metros."
    return Chart(flows, static, out, note)


def _static_points(ax, metros: pd.DataFrame, sites: pd.DataFrame) -> None:
    demand = metros["requests_per_s"]
    ax.scatter(metros["lon"], metros["lat"], s=6 + 150 * demand / max(demand.max(), 1e-12), color=METRO,
               alpha=0.85, edgecolor="white", lw=0.5, zorder=2, label="metro (area ∝ requests/s)")
    used = sites[sites["gpus_peak"] > 0]
    top = max(used["gpus_peak"].max() if len(used) else 1, 1)
    ax.scatter(used["lon"], used["lat"], marker="s", s=30 + 400 * used["gpus_peak"] / top, color=SITE, zorder=3,
               label="site (area ∝ GPUs at its peak)")
    idle = sites[sites["gpus_peak"] == 0]
    ax.scatter(idle["lon"], idle["lat"], marker="s", s=25, facecolor="white", edgecolor="0.5", zorder=3,
               label="candidate site, unused")
    for r in used.itertuples():
        ax.annotate(f"{r.site} {f.count(r.gpus_peak)} GPUs", (r.lon, r.lat), xytext=(7, 5), textcoords="offset points",
                    fontsize=8, zorder=4, bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.7))


def _interactive_land(fig: go.Figure, land: Land, groups: list) -> None:
    def joined(shapes):
        xs, ys = [], []
        for shape in shapes:
            xs += [*np.round(shape[:, 0], 2), None]
            ys += [*np.round(shape[:, 1], 2), None]
        return xs, ys

    for shapes, style in ((land.areas, dict(fill="toself", fillcolor=LAND, line=dict(width=0))),
                          (land.coast, dict(line=dict(color=COAST, width=0.7))),
                          (land.borders, dict(line=dict(color=BORDER, width=0.6)))):
        xs, ys = joined(shapes)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False, **style))
        groups.append(None)


def _interactive_flows(fig: go.Figure, part: pd.DataFrame, top: float, colour: dict, label: dict, workload,
                       groups: list) -> None:
    """Lines in WIDTH_CLASSES widths per tier (one trace each), and a hover point at each flow's middle."""
    part = part.assign(width_class=np.minimum((part["requests_per_s"] / max(top, 1e-12) * WIDTH_CLASSES).astype(int),
                                              WIDTH_CLASSES - 1))
    for t, by_tier in part.groupby("tier"):
        for w, lines in by_tier.groupby("width_class"):
            xs, ys = [], []
            for r in lines.itertuples():
                xs += [r.metro_lon, r.site_lon, None]
                ys += [r.metro_lat, r.site_lat, None]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", opacity=0.75,
                                     line=dict(color=colour[t], width=0.6 + 5.0 * (w + 0.5) / WIDTH_CLASSES),
                                     name=esc(label[t]), legendgroup=esc(label[t]), showlegend=False))
            groups.append(workload)
        hover = [esc(f"{r.metro} → {r.site} · {workload} · {label[t]}") + "<br>" +
                 esc(f"{f.number(r.requests_per_s)} requests/s (year average), RTT {f.ms(r.rtt_ms)}")
                 for r in by_tier.itertuples()]
        fig.add_trace(go.Scatter(
            x=(by_tier["metro_lon"] + by_tier["site_lon"]) / 2, y=(by_tier["metro_lat"] + by_tier["site_lat"]) / 2,
            mode="markers", marker=dict(color=colour[t], size=6, opacity=0.6), name=esc(label[t]),
            legendgroup=esc(label[t]), text=hover,
            hovertemplate="%{text}<extra></extra>"))
        groups.append(workload)


def _interactive_points(fig: go.Figure, metros: pd.DataFrame, sites: pd.DataFrame, groups: list) -> None:
    demand = metros["requests_per_s"]
    fig.add_trace(go.Scatter(
        x=metros["lon"], y=metros["lat"], mode="markers", name="metro (area ∝ requests/s)",
        marker=dict(color=METRO, size=4 + 14 * np.sqrt(demand / max(demand.max(), 1e-12)), line=dict(color="white", width=0.5)),
        text=[esc(f"{m}: {f.number(v)} requests/s (year average)") for m, v in zip(metros["metro"], demand)],
        hovertemplate="%{text}<extra></extra>"))
    top = max(sites["gpus_peak"].max(), 1)
    fig.add_trace(go.Scatter(
        x=sites["lon"], y=sites["lat"], mode="markers+text", name="site (area ∝ GPUs at its peak)",
        marker=dict(symbol="square", size=7 + 22 * np.sqrt(sites["gpus_peak"] / top),
                    color=[SITE if g else "white" for g in sites["gpus_peak"]], line=dict(color="#555", width=1)),
        text=[esc(x) if g else "" for x, g in zip(sites["site"], sites["gpus_peak"])], textposition="top right",
        hovertext=[esc(f"{x}: {f.count(g)} GPUs at its busiest hour" if g else f"{x}: candidate, unused")
                   for x, g in zip(sites["site"], sites["gpus_peak"])],
        hovertemplate="%{hovertext}<extra></extra>"))
    groups += [None, None]


def network_map(g: nx.Graph, s: Scenario):
    """`fleetplan network --plot`: metros, candidate sites and the latency backbone (the
    graph's minimum spanning tree by one-way latency) over land and borders; a figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lon_range, lat_range, stretch = extent([p.lon for p in (*s.metros.values(), *s.sites.values())],
                                           [p.lat for p in (*s.metros.values(), *s.sites.values())])
    fig, ax = plt.subplots(figsize=(12, 6.5))
    draw_land(ax, load_land().within(lon_range, lat_range))
    for u, v in nx.minimum_spanning_tree(g, weight="one_way_ms").edges():
        a, b = g.nodes[u], g.nodes[v]
        if "lon" not in a or "lon" not in b:
            continue
        ax.plot([a["lon"], b["lon"]], [a["lat"], b["lat"]], color="0.8", lw=0.6, zorder=1)
    ax.scatter([m.lon for m in s.metros.values()], [m.lat for m in s.metros.values()],
               s=[8 + 3 * np.sqrt(m.population / 1e5) for m in s.metros.values()], color="tab:orange",
               alpha=0.8, label="metro (size: population)", zorder=2)
    ax.scatter([x.lon for x in s.sites.values()], [x.lat for x in s.sites.values()], marker="s", s=60,
               color="tab:green", edgecolor="k", label="candidate site", zorder=3)
    for x in s.sites.values():
        ax.annotate(x.id, (x.lon, x.lat), xytext=(4, 4), textcoords="offset points", fontsize=7)
    ax.set_xlim(*lon_range)
    ax.set_ylim(*lat_range)
    ax.set_aspect(stretch)
    ax.set_xlabel("longitude (°)")
    ax.set_ylabel("latitude (°)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(f"{s.name}: metros, sites and latency backbone")
    fig.tight_layout()
    return fig
