"""A static, offline HTML report of a plan folder: the plots a planner puts in a deck, with
every image embedded (base64 PNG) so the file opens anywhere without a network.

Sections: headline figures; cost stack by site, accelerator and procurement type; GPUs by
site over the day for each period; map of metros, sites and routing flows; TTFT budget
waterfall per workload; utilisation; cost per million tokens against the hand-made baseline;
and an appendix with the curves and procurement tables the MIP used.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from optimizer.network import build_graph, plot_map  # noqa: E402
from optimizer.plan import Plan, read_plan, scenario_of  # noqa: E402

SECTIONS = ("summary", "cost-stack", "gpus-over-the-day", "map", "ttft-waterfall", "utilisation",
            "cost-per-token", "appendix")
WATERFALL = [("network_ms", "network"), ("overhead_ms", "overheads"), ("queue_ms", "queue"),
             ("prefill_ms", "prefill"), ("transfer_ms", "KV transfer"), ("first_token_ms", "first token")]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _img(data: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def cost_stack(plan: Plan) -> str:
    proc = plan.tables["procurement"]
    nodes = proc[proc["gpu"] != "egress"].copy()
    nodes["label"] = nodes["site"] + " / " + nodes["gpu"]
    lines = [("cost_reserved_usd", "reserved"), ("cost_owned_usd", "owned"), ("cost_energy_usd", "energy (owned)"),
             ("cost_ondemand_usd", "on-demand"), ("cost_ramp_usd", "cold starts")]
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(nodes) + 1.8))
    left = pd.Series(0.0, index=nodes.index)
    for col, label in lines:
        if col in nodes and nodes[col].sum() > 0:
            ax.barh(nodes["label"], nodes[col] / 1e6, left=left / 1e6, label=label)
            left += nodes[col]
    ax.set_xlabel("US$ million per year")
    ax.set_title("cost by site, accelerator and procurement type")
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def gpus_over_the_day(plan: Plan) -> str:
    pools = plan.tables["pools"]
    nominal = pools[pools["lost_site"].isna()]
    periods = sorted(nominal["period"].unique())
    fig, axes = plt.subplots(1, max(len(periods), 1), figsize=(4 * max(len(periods), 1), 3.6), sharey=True, squeeze=False)
    used = (nominal["replicas"] * nominal["gpus_per_replica"]).groupby(
        [nominal["period"], nominal["site"], nominal["hour"]]).sum()
    for ax, period in zip(axes[0], periods):
        for site in sorted(nominal["site"].unique()):
            try:
                series = used.loc[(period, site)]
            except KeyError:
                continue
            ax.plot(series.index, series.values, marker=".", label=site)
        ax.set_title(f"{period}")
        ax.set_xlabel("hour (UTC)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("GPUs in replicas")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("GPUs by site over the day")
    fig.tight_layout()
    return _png(fig)


def routing_map(plan: Plan, plan_dir: Path) -> str:
    s = scenario_of(plan, plan_dir)
    routing = plan.tables["routing"]
    flows = routing.groupby(["metro", "site"])["requests_per_s"].sum().rename("weight").reset_index()
    buf = io.BytesIO()
    plot_map(build_graph(s), s, buf, flows)
    return base64.b64encode(buf.getvalue()).decode()


def ttft_waterfall(plan: Plan) -> str:
    """For each workload, the arc with the highest predicted p99 TTFT: its budget part by
    part, as shares of the workload's objective (objectives differ by orders of magnitude)."""
    slo = plan.tables["slo"]
    worst = slo.sort_values("ttft_p99_ms_predicted").groupby("workload").tail(1).set_index("workload")
    fig, ax = plt.subplots(figsize=(10, 0.7 * len(worst) + 1.8))
    colours = plt.cm.tab10.colors
    for i, (k, row) in enumerate(worst.iterrows()):
        objective = row["ttft_p99_ms_objective"]
        left = 0.0
        for j, (col, label) in enumerate(WATERFALL):
            ax.barh(i, 100 * row[col] / objective, left=left, color=colours[j], label=label if i == 0 else None)
            left += 100 * row[col] / objective
        ax.barh(i, 100 - left, left=left, color="0.92", edgecolor="0.6", label="slack" if i == 0 else None)
        ax.text(101, i, f"{objective:g} ms objective; {row['metro']} → {row['site']}", va="center", fontsize=7)
    ax.set_yticks(range(len(worst)), list(worst.index))
    ax.set_xlim(0, 140)
    ax.set_xlabel("share of the p99 TTFT objective (%)")
    ax.set_title("p99 TTFT budget of each workload's tightest routed arc")
    ax.legend(fontsize=7, ncol=7, loc="lower center", bbox_to_anchor=(0.5, 1.08))
    fig.tight_layout()
    return _png(fig)


def utilisation(plan: Plan) -> str:
    pools = plan.tables["pools"]
    proc = plan.tables["procurement"]
    nominal = pools[pools["lost_site"].isna()]
    used = (nominal["replicas"] * nominal["gpus_per_replica"]).groupby([nominal["site"], nominal["gpu"], nominal["hour"]]).mean()
    fig, ax = plt.subplots(figsize=(10, 3.8))
    for row in proc[proc["gpu"] != "egress"].itertuples():
        try:
            series = used.loc[(row.site, row.gpu)]
        except KeyError:
            continue
        provisioned = 8 * (row.reserved_nodes + row.ondemand_nodes_peak)
        if provisioned:
            ax.plot(series.index, series.values / provisioned, marker=".", label=f"{row.site}/{row.gpu}")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("hour (UTC)")
    ax.set_ylabel("GPUs in replicas / GPUs provisioned at peak")
    ax.set_title("utilisation over the day (mean over periods)")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def cost_per_token(plan: Plan) -> str:
    s = plan.summary
    per = {k: v for k, v in s["cost_per_million_tokens_usd_by_workload"].items() if v is not None}
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar(list(per), list(per.values()), color="tab:blue", label="plan")
    if s.get("baseline_cost_usd"):
        ratio = s["baseline_cost_usd"] / s["total_cost_usd"]
        ax.bar(list(per), [v * ratio for v in per.values()], color="none", edgecolor="tab:red", lw=1.5,
               label=f"hand-made baseline (×{ratio:.2f} overall)")
    ax.set_ylabel("US$ per million output tokens")
    ax.set_title("cost per million goodput tokens")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def _table(df: pd.DataFrame, max_rows: int = 60) -> str:
    return df.head(max_rows).to_html(index=False, float_format=lambda x: f"{x:,.4g}", border=0, classes="t")


def _summary_table(plan: Plan) -> str:
    s = plan.summary
    rows = [
        ("status", s["status"]),
        ("total cost (US$/year)", f"{s['total_cost_usd']:,.0f}"),
        ("proven bound (US$/year)", f"{s['best_bound_usd']:,.0f}"),
        ("gap against the bound", f"{100 * s['mip_gap']:.2f} %"),
        ("cost per million goodput tokens", f"${s['cost_per_million_tokens_usd']:.3f}" if s["cost_per_million_tokens_usd"] else "-"),
        ("goodput tokens/s (average, peak)", f"{s['goodput_tokens_per_s_avg']:,.0f}, {s['goodput_tokens_per_s_peak']:,.0f}"),
        ("tokens/s per MW", f"{s['tokens_per_s_per_mw']:,.0f}" if s["tokens_per_s_per_mw"] else "-"),
        ("reserved share of GPU-hours", f"{100 * s['reserved_share_of_gpu_hours']:.1f} %"),
        ("average utilisation", f"{100 * s['average_utilization']:.1f} %"),
        ("unserved demand", f"{100 * s['unserved_fraction']:.3f} %"),
        ("GPUs at peak", ", ".join(f"{g}: {n:,}" for g, n in s["gpus_by_type_peak"].items())),
        ("hand-made baseline (US$/year)", f"{s['baseline_cost_usd']:,.0f}" if s.get("baseline_cost_usd") else "-"),
    ]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="t">{body}</table>'


def render(plan_dir: str | Path) -> str:
    d = Path(plan_dir)
    plan = read_plan(d)
    parts = {
        "summary": ("Summary", _summary_table(plan)),
        "cost-stack": ("Cost stack", _img(cost_stack(plan), "cost stack")),
        "gpus-over-the-day": ("GPUs by site over the day", _img(gpus_over_the_day(plan), "GPUs over the day")),
        "map": ("Metros, sites and routing", _img(routing_map(plan, d), "routing map")),
        "ttft-waterfall": ("TTFT budget waterfall", _img(ttft_waterfall(plan), "TTFT waterfall")),
        "utilisation": ("Utilisation", _img(utilisation(plan), "utilisation")),
        "cost-per-token": ("Cost per million tokens vs the baseline", _img(cost_per_token(plan), "cost per token")),
        "appendix": ("Appendix: curves and procurement", "<h3>Serving configurations used</h3>" + _table(plan.tables["curves"])
                     + "<h3>Procurement</h3>" + _table(plan.tables["procurement"])),
    }
    body = "".join(f'<section id="{sid}"><h2>{html.escape(title)}</h2>{content}</section>'
                   for sid, (title, content) in parts.items())
    title = f"fleetplan — {html.escape(plan.summary['scenario'])}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
section {{ margin-bottom: 2.5em; }} img {{ max-width: 100%; }}
table.t {{ border-collapse: collapse; font-size: 12px; }} table.t td, table.t th {{ padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: right; }}
table.t th {{ text-align: left; }}
</style></head>
<body><h1>{title}</h1>
<p>Plan of scenario {html.escape(plan.summary['scenario'])} (sha256 {plan.summary['scenario_sha256'][:12]}…).</p>
{body}
<script>
// marks the page once every figure has decoded, so a headless browser can check it rendered
window.addEventListener("load", function () {{
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.every(function (i) {{ return i.complete && i.naturalWidth > 0; }});
  document.body.setAttribute("data-rendered", ok ? "ok" : "broken");
}});
</script>
</body></html>
"""


def write_report(plan_dir: str | Path) -> Path:
    d = Path(plan_dir)
    path = d / "report.html"
    tmp = d / ".report.html.tmp"
    tmp.write_text(render(d), encoding="utf-8")
    tmp.replace(path)
    return path
