"""report.html of a plan folder: the answers first (`opening`), then the charts a planner puts
in a deck — cost by site, accelerator and contract; nodes rented on demand over the planned
hours; GPUs by site over the planned hours; the routing map; the TTFT budget of each
workload's tightest arc; utilisation; cost per million tokens against the baseline and list
prices — then, when the plan's scenario names a calibration file, the calibration
(`calibration`: predicted against measured, residuals, error band), and an appendix with
every headline figure, the serving configurations and the procurement table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from optimizer.base.contracts import COST_COLUMNS, COST_LABELS, TERMS
from optimizer.base.units import GRAMS_PER_KG
from optimizer.commands.report import charts
from optimizer.commands.report import formatting as f
from optimizer.commands.report.calibration import calibration_html, has_calibration
from optimizer.commands.report.fleet_tables import churn_html, fleet_html
from optimizer.commands.report.folder import PlanFolder, read_plan_folder
from optimizer.commands.report.formatting import TableColumn, esc
from optimizer.commands.report.html import chart_html, page, section, write_page
from optimizer.commands.report.maps import routing_map
from optimizer.commands.report.opening import opening_html

SECTIONS = ("opening", "cost-stack", "on-demand", "gpus-over-the-day", "map", "ttft-waterfall", "utilisation",
            "cost-per-token", "calibration", "appendix")  # calibration: only with a calibration file
CHARTS = {  # section id → (title, name in the navigation bar, chart function)
    "cost-stack": ("Where the money goes", "Money", charts.cost_stack),
    "on-demand": ("On-demand rental over the planned hours", "On demand", charts.ondemand),
    "gpus-over-the-day": ("GPUs by site over the planned hours", "GPUs over the day", charts.gpus_over_the_day),
    "map": ("Metros, sites and routing", "Map", routing_map),
    "ttft-waterfall": ("Where the time to first token goes", "Time to first token", charts.ttft_waterfall),
    "utilisation": ("Utilisation", "Utilisation", charts.utilisation),
    "cost-per-token": ("Cost per million tokens against the baseline and list prices", "Cost per token",
                       charts.cost_per_token),
}
CURVE_COLUMNS = [TableColumn("id", "serving configuration"), TableColumn("gpus", "GPUs", f.count, True),
                 TableColumn("batch", "batch", f.unless_zero(f.count), True),
                 TableColumn("prefill_p99_ms", "prefill p99", f.unless_zero(f.ms), True),
                 TableColumn("step_ms", "decode step", f.unless_zero(f.ms), True),
                 TableColumn("itl_p99_ms", "p99 ITL", f.unless_zero(f.ms), True),
                 TableColumn("decode_tokens_per_s", "decode tokens/s", f.unless_zero(f.count), True),
                 TableColumn("kv_budget_gb", "KV budget (GB)", f.number, True),
                 TableColumn("max_concurrency", "max concurrency", f.unless_zero(f.count), True),
                 TableColumn("service_mean_ms", "mean service", f.unless_zero(f.ms), True),
                 TableColumn("prefill_batch_tokens", "prefill batch budget (tokens)", f.unless_zero(f.count), True)]
PROCUREMENT_COLUMNS = [TableColumn("site", "site", lambda x: "all sites" if x == "*" else f.text(x)), TableColumn("gpu", "accelerator"),
                       *(TableColumn(t.nodes_column, t.label, f.count, True) for t in TERMS),
                       TableColumn("ondemand_nodes_peak", "on-demand peak", f.count, True),
                       TableColumn("ondemand_node_hours", "on-demand node-hours", f.count, True),
                       *(TableColumn(column, COST_LABELS[category], f.usd, True) for category, column in COST_COLUMNS.items()),
                       TableColumn("cost_usd", "total", f.usd, True)]


def key_figures(s: dict) -> pd.DataFrame:
    rows = [
        ("status", s["status"]),
        ("total cost a year", f.usd(s["total_cost_usd"])),
        ("proven lower bound a year", f.usd(s.get("best_bound_usd"))),
        ("gap against the bound (target)", f"{f.pct(s.get('mip_gap'), 2)} ({f.pct(s.get('mip_gap_target'), 2)})"),
        ("cost per million output tokens", f.usd(s.get("cost_per_million_tokens_usd"))),
        ("goodput tokens/s, average and peak",
         f"{f.count(s.get('goodput_tokens_per_s_avg'))} and {f.count(s.get('goodput_tokens_per_s_peak'))}"),
        ("tokens/s per MW", f.count(s.get("tokens_per_s_per_mw"))),
        ("carbon a year, and per million output tokens",
         f"{f.count((s.get('carbon') or {}).get('t_per_year'))} tCO2eq, "
         f"{f.count(GRAMS_PER_KG * ((s.get('carbon') or {}).get('kg_per_million_tokens') or 0))} g"),
        ("reserved share of GPU-hours", f.pct(s.get("reserved_share_of_gpu_hours"))),
        ("average utilisation", f.pct(s.get("average_utilization"))),
        ("unserved demand", f.pct(s.get("unserved_fraction"), 3)),
        ("GPUs at peak", ", ".join(f"{g} {f.count(n)}" for g, n in (s.get("gpus_by_type_peak") or {}).items())),
        ("hand-made baseline a year", f.usd(s.get("baseline_cost_usd"))),
        ("solver mode", f.text(s.get("mode"))),
        ("overrides", ", ".join(map(str, s.get("overrides") or [])) or "none"),
        *kv_cache_figures(s.get("kv_cache")),
        *prompt_split_figures(s.get("prompt_split")),
    ]
    return pd.DataFrame(rows, columns=["figure", "value"])


def prompt_split_figures(block: dict | None) -> list[tuple[str, str]]:
    """The prompt-length splits the plan weighed (none without candidates): the whole plans
    with and without the split, and per workload the split kept and its parts."""
    if not block:
        return []
    rows = [("whole plan without and with the prompt-length split",
             f"{f.usd(block['whole_plan_usd'])} and "
             + (f.usd(block["split_plan_usd"]) if block["split_plan_usd"] is not None else "no split chosen"))]
    for k, b in block["workloads"].items():
        if b["threshold_tokens"] is None:
            rows.append((f"prompt-length split of {k}", "none: served whole"))
            continue
        parts = "; ".join(f"{wid}: {f.pct(p['share'])} of requests, mean prompt {f.count(p['isl_mean_tokens'])} tokens"
                          for wid, p in b["parts"].items())
        rows.append((f"prompt-length split of {k}", f"at {f.count(b['threshold_tokens'])} tokens — {parts}"))
    return rows


def kv_cache_figures(kv: dict | None) -> list[tuple[str, str]]:
    """The KV-cache tiers the plan chose (none without them): their cost, the prefill they
    save, and per workload the hit rate served and the candidates' shares of its requests."""
    if not kv:
        return []
    rows = [("KV-cache tiers a year (cost category kv_cache), prefill saved",
             f"{f.usd(kv['cache_usd'])}, {f.usd(kv['prefill_usd_saved'])}; with the tiers "
             f"{f.usd(kv['total_cost_with_cache_usd'])}")]
    for k, w in kv["workloads"].items():
        shares = ", ".join(f"{f.pct(o['hit_rate'])} hits on {f.pct(o['request_share'])}"
                           for o in w.get("options", []) if o["request_share"] > 0)
        rows.append((f"KV-cache hit rate of {k}", f"{f.pct(w['hit_rate'])}" + (f" ({shares})" if shares else "")))
    return rows


def appendix_html(folder: PlanFolder) -> str:
    columns = [TableColumn("figure", "figure"), TableColumn("value", "value")]
    curves = folder.tables["curves"]
    return ("<h3>Headline figures</h3>" + f.table(key_figures(folder.summary), columns, table_id="key-figures")
            + "<h3>Serving configurations the plan uses</h3>"
            + f.table(curves, [c for c in CURVE_COLUMNS if c.key in curves])
            + "<h3>Procurement (US$ a year)</h3>"
            + f.table(folder.tables["procurement"], [c for c in PROCUREMENT_COLUMNS if c.key in folder.tables["procurement"]])
            + fleet_html(folder.summary) + churn_html(folder.summary))


def render(plan_dir: str | Path) -> str:
    folder = read_plan_folder(plan_dir)
    s = folder.summary
    sections = [section("opening", "The answer", lambda: opening_html(folder), "The answer")]
    for sid, (title, nav, draw) in CHARTS.items():
        sections.append(section(sid, title, lambda draw=draw, title=title: chart_html(draw(folder), title), nav))
    if has_calibration(folder):
        sections.append(section("calibration", "Calibration: predicted against measured",
                                lambda: calibration_html(folder), "Calibration"))
    sections.append(section("appendix", "Appendix: figures, serving configurations, procurement",
                            lambda: appendix_html(folder), "Appendix"))
    overrides = ", ".join(map(str, s.get("overrides") or []))
    versions = s.get("versions") if isinstance(s.get("versions"), dict) else {}
    sha = s.get("scenario_sha256")  # optional (folder/read.py SUMMARY_OPTIONAL): a hand-edited summary may lack it
    about = "; ".join(([f"sha256 {esc(sha[:12])}…"] if sha else []) + ([f"overrides {esc(overrides)}"] if overrides else []))
    subtitle = (f"Annual plan of scenario <b>{esc(s['scenario'])}</b>" + (f" ({about})" if about else "")
                + f", fleetplan {esc(versions.get('fleetplan', ''))}")
    return page(f"fleetplan — {s['scenario']}", subtitle, sections)


def write_report(plan_dir: str | Path) -> Path:
    return write_page(Path(plan_dir) / "report.html", render(plan_dir))
