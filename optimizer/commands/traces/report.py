"""A short, offline report of what a log gave: the day's rates, the log's minutes and the
length distributions, as PNG figures and one HTML page with them embedded. The figures show
the `MAX_PAIRS` (metro, workload) pairs with the most requests; the tables show all."""

from __future__ import annotations

import base64
import html
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from optimizer.base.units import HOURS_PER_DAY, SECONDS_PER_HOUR  # noqa: E402
from optimizer.commands.traces.derive import Derived  # noqa: E402

MAX_PAIRS = 8
SHOWN_HOURS = 3  # the minutes figure shows this many hours around each pair's busiest hour of the log


def _shown(d: Derived) -> list:
    """The pairs the figures show: the `MAX_PAIRS` with the most requests."""
    return sorted(d.pairs, key=lambda p: -p.requests)[:MAX_PAIRS]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def day_figure(d: Derived, hourly: dict) -> bytes:
    """Requests/s per UTC hour for each (metro, workload): measured hours as bars, filled ones
    as a line. ``hourly``: (metro, workload) → `table.hourly_rates` frame."""
    fig, ax = plt.subplots(figsize=(10, 3.8))
    pairs = _shown(d)
    width = 0.8 / len(pairs)
    for i, pair in enumerate(pairs):
        h = hourly[(pair.metro, pair.workload)]
        label = f"{pair.metro} / {pair.workload}"
        measured = h[h["source"] == "log"]
        bars = ax.bar(measured["hour"] + (i - (len(pairs) - 1) / 2) * width, measured["requests_per_s"], width,
                      label=f"{label} (log)")
        ax.plot(h["hour"], h["requests_per_s"], "--", color=bars.patches[0].get_facecolor() if bars.patches else None,
                lw=1, label=f"{label} (profile fill)" if (h["source"] != "log").any() else None)
    ax.set(xlabel="UTC hour", ylabel="requests/s (hour's mean)", title="the day: measured hours and filled ones",
           xticks=range(0, HOURS_PER_DAY, 2))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def minutes_figure(d: Derived) -> bytes:
    """Requests per minute through the log (at most `SHOWN_HOURS` around its busiest hour),
    with the mean: the burstiness."""
    pairs = _shown(d)
    fig, axes = plt.subplots(len(pairs), 1, figsize=(10, 2.4 * len(pairs)), squeeze=False)
    for ax, pair in zip(axes[:, 0], pairs):
        busiest = pair.stretches.loc[pair.stretches["requests"].idxmax(), "start_utc"]
        half = pd.Timedelta(seconds=SECONDS_PER_HOUR * (SHOWN_HOURS - 1) / 2)
        m = pair.per_minute[busiest - half: busiest + half + pd.Timedelta(seconds=SECONDS_PER_HOUR)]
        ax.step(m.index, m.to_numpy(), where="post", lw=0.9)
        ax.axhline(m.mean(), color="0.3", ls="--", lw=1, label=f"mean {m.mean():.0f}/min")
        ax.set(ylabel="requests/min", title=f"{pair.metro} / {pair.workload}: busiest minute "
               f"{pair.burstiness('peak_to_mean_per_minute'):.2f}× the hour's mean, per-minute variance/mean "
               f"{pair.burstiness('dispersion_per_minute'):.0f} (Poisson: 1)")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("UTC")
    fig.tight_layout()
    return _png(fig)


def lengths_figure(d: Derived) -> bytes:
    """Prompt and output length histograms (log-spaced bins), p99 marked."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, name, what in ((a1, "isl", "prompt"), (a2, "osl", "output")):
        for pair in _shown(d):
            lengths = getattr(pair, name)
            bins = np.geomspace(max(lengths.tokens[0], 1), lengths.tokens[-1] + 1, 40)
            _, _, patches = ax.hist(lengths.tokens, bins=bins, weights=lengths.requests / lengths.requests.sum(),
                                    histtype="step", label=f"{pair.metro} / {pair.workload}")
            ax.axvline(lengths.quantile(0.99), ls=":", lw=1, color=patches[0].get_edgecolor())
        ax.set(xscale="log", xlabel=f"{what} tokens (dotted: p99)", ylabel="share of requests", title=f"{what} lengths")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def render(d: Derived, figures: dict[str, bytes], workloads: pd.DataFrame) -> str:
    table = pd.DataFrame([p.as_dict() for p in d.pairs])[
        ["metro", "workload", "requests", "rate_per_s_mean", "isl_mean_tokens", "isl_p99_tokens", "osl_mean_tokens",
         "osl_p99_tokens", "peak_to_mean_per_minute", "peak_to_mean_per_10s", "peak_to_mean_per_second",
         "dispersion_per_minute"]]
    notes = [f"{p.metro} / {p.workload}: {n}" for p in d.pairs for n in p.notes] + d.warnings
    images = "\n".join(f'<h2>{html.escape(name)}</h2><img alt="{html.escape(name)}" '
                       f'src="data:image/png;base64,{base64.b64encode(data).decode()}">'
                       for name, data in figures.items())
    files = "".join(f"<li>{html.escape(f['path'])}: {f['rows']:,} requests, {f['first_utc']} – {f['last_utc']} "
                    "UTC</li>" for f in d.files)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>demand from request logs</title>
<style>body{{font-family:sans-serif;max-width:1050px;margin:1em auto}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}</style></head><body>
<h1>Demand from request logs</h1><ul>{files}</ul>
<h2>per (metro, workload)</h2>{table.to_html(index=False, float_format=lambda x: f"{x:,.4g}")}
<h2>workload rows</h2>{workloads.to_html(index=False, float_format=lambda x: f"{x:,.4g}")}
<h2>notes</h2><ul>{"".join(f"<li>{html.escape(n)}</li>" for n in notes)}</ul>
{images}</body></html>
"""
