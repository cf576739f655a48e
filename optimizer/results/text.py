"""The plan's text: `plan_text`, the lines `fleetplan plan` prints from summary.json, and
`text_table`, the fixed-width table the commands print their rows with."""

from __future__ import annotations

from pathlib import Path

from optimizer.results.churn import churn_lines
from optimizer.results.fleet import fleet_lines
from optimizer.results.kvcache import kv_cache_lines
from optimizer.results.prompt_split import prompt_split_lines
from optimizer.results.spot import spot_line


def text_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Fixed-width text table; columns are (key, header, format)."""
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append([("-" if row.get(k) is None else format(row[k], f)) for k, _, f in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _or_dash(value, fmt: str) -> str:
    """A figure, or "–" where the plan has none (no tokens served, no power drawn)."""
    return "–" if value is None else fmt.format(value)


def _carbon_lines(carbon: dict | None) -> list[str]:
    """Tonnes a year and per million tokens; the price paid, the cap and any excess; the
    sites whose grid is not known (not counted)."""
    if not carbon:
        return []
    line = f"  carbon {carbon['t_per_year']:,.0f} tCO2eq/year"
    if carbon.get("kg_per_million_tokens") is not None:
        line += f", {carbon['kg_per_million_tokens']:.3f} kg per million output tokens"
    if carbon["price_usd_per_t"]:
        line += f"; priced at ${carbon['price_usd_per_t']:,.0f}/t: ${carbon['cost_usd']:,.0f}/year"
    if carbon.get("cap_t_per_year") is not None:
        line += f"; cap {carbon['cap_t_per_year']:,.0f} t" + (
            f" — EXCEEDED by {carbon['over_cap_t']:,.0f} t (the whole plan; the bound keeps the cap)"
            if carbon["over_cap_t"] > 1e-6 else " kept")
    missing = carbon.get("sites_without_grid_data") or []
    return [line] + ([f"  no grid carbon data for {', '.join(missing)}: their tonnes are not counted"] if missing else [])


def plan_text(sm: dict, out) -> str:
    """What `fleetplan plan` prints: the summary ``sm`` of the plan written to ``out``."""
    lines = [
        f"plan of '{sm['scenario']}' written to {out}",
        f"  cost ${sm['total_cost_usd']:,.0f}/year"
        + (f" + ${sm['unserved_penalty_usd']:,.0f} penalty for unserved demand" if sm["unserved_penalty_usd"] else "")
        + f": {sm['quality']}; best bound ${sm['best_bound_usd']:,.0f} (a better plan could save at most "
        f"${max(sm['objective_usd'] - sm['best_bound_usd'], 0):,.0f}/year)"
        + (" — stopped by the wall clock: this plan may differ on another machine"
           if sm.get("stopped_by_wall_clock") else ""),
        f"  {_or_dash(sm['cost_per_million_tokens_usd'], '${:.3f}')} per million goodput output tokens; "
        f"{sm['goodput_tokens_per_s_avg']:,.0f} tok/s on average, {sm['goodput_tokens_per_s_peak']:,.0f} at peak; "
        f"{_or_dash(sm['tokens_per_s_per_mw'], '{:,.0f}')} tok/s per MW",
        f"  reserved share of GPU-hours {100 * sm['reserved_share_of_gpu_hours']:.0f} %, average utilisation "
        f"{100 * sm['average_utilization']:.0f} %, unserved {100 * sm['unserved_fraction']:.3f} %",
        "  GPUs at peak: " + ", ".join(f"{g} {n:,}" for g, n in sm["gpus_by_type_peak"].items()),
        *_carbon_lines(sm.get("carbon")),
        *fleet_lines(sm.get("fleet")),
        *churn_lines(sm.get("churn")),
        *spot_line(sm.get("spot")),
        *kv_cache_lines(sm.get("kv_cache")),
        *prompt_split_lines(sm.get("prompt_split")),
    ]
    lines += _robust_lines(sm)
    lines += _baseline_lines(sm)
    for k, v in sm["cost_per_million_tokens_usd_by_workload"].items():
        if v is not None:
            lines.append(f"    {k:20s} ${v:8.3f} per million output tokens")
    if sm["repair_violations"]:
        lines.append("  WARNING: " + "; ".join(sm["repair_violations"][:5]))
    first = f", first whole plan at {sm['first_plan_seconds']:.1f} s" if sm.get("first_plan_seconds") is not None else ""
    lines.append(f"  solved in {sm['solve_seconds']:.1f} s (build {sm['build_seconds']:.1f} s, hand-off "
                 f"{sm['handoff_seconds']:.1f} s{first})")
    return "\n".join(lines)


def _robust_lines(sm: dict) -> list[str]:
    """A robust plan: its margins and its price against the nominal plan."""
    if not sm.get("robust"):
        return []
    r = sm["robust"]
    derate = (f"efficiencies × each accelerator's p90 band of {Path(r['band_source']).name}" if r.get("band")
              else f"efficiencies ×{r['efficiency_derate']:g}")
    return [f"  robust plan (demand ×{r['demand_factor']:g}, {derate}, "
            f"RTT +{r['rtt_margin_ms']:g} ms): {100 * r['price_of_robustness']:.1f} % above the nominal "
            f"plan's ${r['nominal_cost_usd']:,.0f}"
            + (f", {r['extra_gpus_peak']:+,} GPUs at peak" if r.get("extra_gpus_peak") is not None else "")]


def _baseline_lines(sm: dict) -> list[str]:
    """The hand-made baseline: where it cannot serve, and the saving where both serve."""
    lines = [f"  the hand-made baseline cannot serve {k}: {why}" for k, why in (sm.get("baseline_cannot_serve") or {}).items()]
    compared = sm.get("baseline_comparison")
    if sm.get("savings_vs_baseline") is not None and compared:
        partly = set(compared["workloads"]) != set(sm["cost_usd_by_workload"])
        scope = f" for {', '.join(compared['workloads'])}" if partly else ""
        lines.append(f"  hand-made baseline ${compared['baseline_cost_usd']:,.0f}/year{scope}: the plan saves "
                     f"{100 * sm['savings_vs_baseline']:.1f} %")
    return lines
