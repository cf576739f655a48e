"""The two renderings of every chart, drawn from the same tidy frame: a static PNG
(matplotlib, for print and for readers without JavaScript) and an interactive Plotly figure
(hover values; legend entries toggle series; a menu picks one group — a site, a workload —
where the chart has groups). The static image is the interactive figure's first view.

Names from the scenario reach Plotly escaped (it renders a subset of HTML in labels) and
reach matplotlib with mathtext off (a `$` in a name would otherwise start a formula)."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import plotly.graph_objects as go  # noqa: E402

from optimizer.commands.report.formatting import esc  # noqa: E402

PALETTE = [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab10").colors]
TITLE_CHARS = 100  # static titles wrap here
LEGEND_COLUMNS = 6
# no mathtext, and plain tick labels (no offset, no scientific notation) for any magnitude a plan has
STATIC_RC = {"text.parse_math": False, "font.size": 9, "axes.titlesize": 11, "axes.formatter.useoffset": False,
             "axes.formatter.limits": (-9, 15)}
WIDTH_IN = 10.0
PX_PER_IN = 100


@dataclass
class Chart:
    """A chart's plotted data (tidy), its static PNG and its interactive figure."""

    data: pd.DataFrame
    png: bytes
    figure: go.Figure
    note: str = ""


@dataclass(frozen=True)
class Axes:
    title: str
    xlabel: str = ""
    ylabel: str = ""
    height_in: float = 4.0
    percent: bool = False  # y (x for horizontal bars) is a fraction shown as %
    ticks: Sequence[tuple[float, str]] = ()  # explicit (position, label) ticks on x


def png(fig) -> bytes:
    buf = io.BytesIO()
    with plt.rc_context(STATIC_RC):
        fig.savefig(buf, format="png", dpi=PX_PER_IN, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def static_figure(height_in: float, ncols: int = 1):
    with plt.rc_context(STATIC_RC):
        return plt.subplots(1, ncols, figsize=(WIDTH_IN, height_in), squeeze=False)


def interactive_figure(axes: Axes, height_in: float | None = None) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=dict(text=esc(axes.title), x=0.01), template="none", colorway=PALETTE,
        height=int((height_in or axes.height_in) * PX_PER_IN), margin=dict(l=60, r=20, t=70, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0, font=dict(size=11)),
        font=dict(family="sans-serif", size=12), hoverlabel=dict(namelength=-1))
    for update in (fig.update_xaxes, fig.update_yaxes):
        update(automargin=True, gridcolor="#e6e6e6", zerolinecolor="#999", exponentformat="none", separatethousands=True)
    return fig


def colours(names: Sequence) -> dict:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(dict.fromkeys(names))}


def group_menu(fig: go.Figure, trace_groups: Sequence, label: str) -> None:
    """A drop-down that shows the traces of one group at a time (the first group to begin
    with); traces of group None show in every view."""
    groups = [g for g in dict.fromkeys(trace_groups) if g is not None]
    if len(groups) < 2:
        return
    buttons = [dict(label=esc(g), method="restyle", args=[{"visible": [t is None or t == g for t in trace_groups]}])
               for g in groups]
    fig.update_layout(updatemenus=[dict(buttons=buttons, direction="down", x=1.0, xanchor="right", y=1.12,
                                        yanchor="bottom", showactive=True)],
                      annotations=[dict(text=esc(label), x=1.0, xref="paper", xanchor="right", y=1.19, yref="paper",
                                        yanchor="bottom", showarrow=False, font=dict(size=11))])
    for trace, g in zip(fig.data, trace_groups):
        trace.visible = g is None or g == groups[0]


def lines(frame: pd.DataFrame, x: str, y: str, series: str, axes: Axes, *, hover: str | None = None,
          group: str | None = None, stacked: bool = False, step: bool = False) -> tuple[bytes, go.Figure]:
    """One line (or stacked area) per ``series`` over numeric ``x``; with ``group``, a menu picks
    one group's lines and the static image shows the first group."""
    groups = list(dict.fromkeys(frame[group])) if group else [None]
    colour = colours(frame[series])
    fig, ax = static_figure(axes.height_in)
    ax = ax[0][0]
    first = frame[frame[group] == groups[0]] if group else frame
    bottom = None
    for name, part in first.groupby(series, sort=False):
        xs, ys = part[x].to_numpy(), part[y].to_numpy(dtype=float)
        if stacked:
            bottom = np.zeros_like(ys) if bottom is None else bottom
            ax.fill_between(xs, bottom, bottom + ys, step="mid" if step else None, color=colour[name], alpha=0.8,
                            label=str(name), lw=0)
            bottom = bottom + ys
        elif step:
            ax.step(xs, ys, where="mid", color=colour[name], label=str(name))
        else:
            ax.plot(xs, ys, marker=".", ms=3, color=colour[name], label=str(name))
    _decorate(ax, axes, percent_axis="y")
    static = png(fig)

    out = interactive_figure(axes)
    trace_groups = []
    for g in groups:
        part_g = frame[frame[group] == g] if group else frame
        for name, part in part_g.groupby(series, sort=False):
            out.add_trace(go.Scatter(
                x=part[x], y=part[y], name=esc(name), legendgroup=esc(name), mode="lines",
                line=dict(color=colour[name], shape="hvh" if step else "linear", width=1.5 if stacked else 2),
                stackgroup=esc(g) if stacked else None,
                text=[esc(t) for t in part[hover]] if hover else None,
                hovertemplate="%{text}<extra></extra>" if hover else None))
            trace_groups.append(g)
    _interactive_axes(out, axes, percent_axis="y")
    if group:
        group_menu(out, trace_groups, f"show {group}")
    return static, out


def bars(frame: pd.DataFrame, category: str, value: str, series: str, axes: Axes, *, hover: str | None = None,
         stacked: bool = True, horizontal: bool = False, base: float = 0.0) -> tuple[bytes, go.Figure]:
    """Bars of ``value`` per ``category``, one colour per ``series``; stacked (negative values
    stack downward from ``base``) or side by side."""
    categories = list(dict.fromkeys(frame[category]))
    names = list(dict.fromkeys(frame[series]))
    colour = colours(names)
    height = axes.height_in if not horizontal else max(axes.height_in, 0.45 * len(categories) + 1.6)
    fig, ax = static_figure(height)
    ax = ax[0][0]
    pos = np.arange(len(categories), dtype=float)
    up, down = np.full(len(pos), base), np.full(len(pos), base)
    width = 0.8 if stacked else 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        v = frame[frame[series] == name].set_index(category)[value].reindex(categories).fillna(0).to_numpy(dtype=float)
        if stacked:
            start = np.where(v >= 0, up, down)
            where, size = pos, width
        else:
            start, where, size = np.full(len(pos), base), pos - 0.4 + width * (i + 0.5), width
        draw = ax.barh if horizontal else ax.bar
        kwargs = dict(left=start, height=size) if horizontal else dict(bottom=start, width=size)
        draw(where, v, color=colour[name], label=str(name), **kwargs)
        if stacked:
            up, down = np.where(v >= 0, up + v, up), np.where(v < 0, down + v, down)
    if horizontal:
        ax.set_yticks(pos, [str(c) for c in categories])
        ax.invert_yaxis()
    else:
        ax.set_xticks(pos, [str(c) for c in categories], rotation=20 if len(categories) > 6 else 0, ha="right"
                      if len(categories) > 6 else "center")
    if base:
        (ax.axvline if horizontal else ax.axhline)(base, color="k", lw=1)
    _decorate(ax, axes, percent_axis="x" if horizontal else "y")
    static = png(fig)

    out = interactive_figure(axes, height)
    for name in names:
        part = frame[frame[series] == name]
        labels, values = [esc(c) for c in part[category]], part[value]
        out.add_trace(go.Bar(
            x=values if horizontal else labels, y=labels if horizontal else values, orientation="h" if horizontal else "v",
            name=esc(name), marker_color=colour[name], base=base if base else None,
            text=[esc(t) for t in part[hover]] if hover else None, textposition="none",
            hovertemplate="%{text}<extra></extra>" if hover else None))
    out.update_layout(barmode="relative" if stacked else "group")
    if horizontal:
        out.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=[esc(c) for c in categories])
    else:
        out.update_xaxes(categoryorder="array", categoryarray=[esc(c) for c in categories])
    _interactive_axes(out, axes, percent_axis="x" if horizontal else "y")
    return static, out


def scatter(frame: pd.DataFrame, x: str, y: str, series: str, axes: Axes, *, hover: str | None = None,
            hollow: str | None = None, ratios: Sequence[float] = ()) -> tuple[bytes, go.Figure]:
    """Points of ``y`` against ``x`` on log–log axes, one colour per ``series`` (hollow markers
    where the boolean column ``hollow`` is true), with the lines y = r·x for each of ``ratios``
    (r = 1 solid, the others dotted)."""
    colour = colours(frame[series])
    lo = float(min(frame[x].min(), frame[y].min())) / 1.3
    hi = float(max(frame[x].max(), frame[y].max())) * 1.3
    fig, ax = static_figure(axes.height_in)
    ax = ax[0][0]
    for (name, open_), part in frame.groupby([series, hollow] if hollow else [series, pd.Series(False, frame.index)],
                                             sort=False):
        ax.scatter(part[x], part[y], s=16, facecolors="none" if open_ else colour[name], edgecolors=colour[name],
                   label=f"{name}{' (held out)' if open_ else ''}")
    for r in ratios:
        ax.plot([lo, hi], [r * lo, r * hi], "k-" if r == 1 else "k:", lw=0.8 if r == 1 else 0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    _decorate(ax, axes, percent_axis="y")
    static = png(fig)

    out = interactive_figure(axes)
    for r in ratios:
        out.add_trace(go.Scatter(x=[lo, hi], y=[r * lo, r * hi], mode="lines", showlegend=False, hoverinfo="skip",
                                 line=dict(color="#444", width=1, dash="solid" if r == 1 else "dot")))
    for (name, open_), part in frame.groupby([series, hollow] if hollow else [series, pd.Series(False, frame.index)],
                                             sort=False):
        out.add_trace(go.Scatter(
            x=part[x], y=part[y], mode="markers", name=esc(f"{name}{' (held out)' if open_ else ''}"),
            marker=dict(color="rgba(0,0,0,0)" if open_ else colour[name], size=7,
                        line=dict(color=colour[name], width=1.5)),
            text=[esc(t) for t in part[hover]] if hover else None,
            hovertemplate="%{text}<extra></extra>" if hover else None))
    _interactive_axes(out, axes, percent_axis="y")
    out.update_xaxes(type="log")
    out.update_yaxes(type="log")
    return static, out


def _decorate(ax, axes: Axes, percent_axis: str) -> None:
    ax.set_title(textwrap.fill(axes.title, TITLE_CHARS))
    ax.set_xlabel(axes.xlabel)
    ax.set_ylabel(axes.ylabel)
    if axes.ticks:
        ax.set_xticks([p for p, _ in axes.ticks], [lbl for _, lbl in axes.ticks])
    if axes.percent:
        fmt = matplotlib.ticker.PercentFormatter(1.0, decimals=0)
        (ax.yaxis if percent_axis == "y" else ax.xaxis).set_major_formatter(fmt)
    ax.grid(alpha=0.3)
    bottom_legend(ax)


def bottom_legend(ax) -> None:
    """The legend in rows under the plot, and the plot laid out above it."""
    fig = ax.figure
    handles, labels = ax.get_legend_handles_labels()
    rows = -(-len(handles) // LEGEND_COLUMNS)
    share = (0.22 * rows + 0.08) / fig.get_figheight() if handles else 0.0
    if handles:
        fig.legend(handles, labels, fontsize=8, ncol=min(len(handles), LEGEND_COLUMNS), loc="lower left",
                   bbox_to_anchor=(0.01, 0.0), frameon=False)
    fig.tight_layout(rect=(0, share, 1, 1))


def _interactive_axes(fig: go.Figure, axes: Axes, percent_axis: str) -> None:
    fig.update_xaxes(title_text=esc(axes.xlabel))
    fig.update_yaxes(title_text=esc(axes.ylabel))
    if axes.ticks:
        fig.update_xaxes(tickmode="array", tickvals=[p for p, _ in axes.ticks], ticktext=[esc(lbl) for _, lbl in axes.ticks])
    if axes.percent:
        (fig.update_yaxes if percent_axis == "y" else fig.update_xaxes)(tickformat=".0%")
