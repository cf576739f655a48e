"""The report's opening section: the answers before the charts, in plain words.

What to sign (committed nodes by site, accelerator and term, a month and a year), what is
rented on demand and when, what a million output tokens costs by workload against the
hand-made baseline and per-token list prices, the latency the simulator measured (when
`fleetplan verify` ran), the risks the stress test and the operational year found (when they
ran), and how far the plan may be from the best one. Every figure comes from summary.json,
procurement.csv or the later checks' files; the tables' data functions return them as
frames."""

from __future__ import annotations

import pandas as pd

from optimizer.base.contracts import COST_COLUMNS, TERMS
from optimizer.base.units import HOURS_PER_DAY
from optimizer.commands.report import formatting as f
from optimizer.commands.report.charts import cost_per_token_data, provisioning_data
from optimizer.commands.report.folder import MissingInput, PlanFolder
from optimizer.commands.report.formatting import TableColumn, esc

STATUS_WORDS = {"optimal": "proven within the {} target", "gap_above_target": "not proven within the {} target",
                "time_limit": "the wall clock stopped the solve before it proved the {} target (the plan may differ on another machine)"}


def _nodes(proc: pd.DataFrame) -> pd.DataFrame:
    return proc[proc["gpu"] != "egress"]


def _gpus_per_node(folder: PlanFolder) -> dict:
    try:
        return folder.gpus_per_node()
    except MissingInput:
        return {}


def commitment_data(folder: PlanFolder) -> pd.DataFrame:
    """One row per (site, accelerator, cost category of its committed terms: reserved, owned
    — `optimizer.base.contracts`) with committed nodes: nodes, GPUs and cost a year (the contract;
    owned: depreciation and energy) and a month (÷ 12). One procurement row holds one cost per
    category; terms of one category (reserved 1 and 3 years) share a row."""
    per_node = _gpus_per_node(folder)
    rows = []
    for r in _nodes(folder.tables["procurement"]).to_dict("records"):
        for category in dict.fromkeys(t.category for t in TERMS):
            terms = [t for t in TERMS if t.category == category and r.get(t.nodes_column, 0)]
            if terms:
                energy = r["cost_energy_usd"] if any(not t.energy_included for t in terms) else 0.0
                rows.append({"site": r["site"], "gpu": r["gpu"], "term": " and ".join(t.label for t in terms),
                             "nodes": sum(r[t.nodes_column] for t in terms),
                             "usd_per_year": r[COST_COLUMNS[category]] + energy})
    out = pd.DataFrame(rows, columns=["site", "gpu", "term", "nodes", "usd_per_year"])
    out["gpus"] = [n * per_node[g] if g in per_node else None for n, g in zip(out["nodes"], out["gpu"])]
    out["usd_per_month"] = out["usd_per_year"] / 12
    return out[["site", "gpu", "term", "nodes", "gpus", "usd_per_month", "usd_per_year"]]


def ondemand_table_data(folder: PlanFolder) -> pd.DataFrame:
    """Per (site, accelerator) renting on demand: the peak nodes, node-hours and cost a year
    (rental and cold starts), and in words the hours and periods it rents (from
    `charts.provisioning_data`; '–' without the scenario)."""
    proc = _nodes(folder.tables["procurement"])
    proc = proc[(proc["ondemand_node_hours"] > 0) | (proc["ondemand_nodes_peak"] > 0)]
    try:
        prov = provisioning_data(folder)
    except MissingInput:
        prov = None
    rows = []
    for r in proc.to_dict("records"):
        rows.append({"site": r["site"], "gpu": r["gpu"], "peak_nodes": r["ondemand_nodes_peak"],
                     "node_hours": r["ondemand_node_hours"], "usd_per_year": r["cost_ondemand_usd"],
                     "cold_start_usd_per_year": r.get("cost_ramp_usd", 0.0),
                     "when": _when(prov[(prov["site"] == r["site"]) & (prov["gpu"] == r["gpu"])]) if prov is not None
                     else f.MISSING})
    return pd.DataFrame(rows, columns=["site", "gpu", "peak_nodes", "node_hours", "usd_per_year",
                                       "cold_start_usd_per_year", "when"])


def _when(prov: pd.DataFrame) -> str:
    """'14:00–24:00 in every period; most (24) in Q4 · 20:00 UTC'."""
    rented = prov[prov["ondemand_nodes"] > 0]
    if rented.empty:
        return "never in the planned hours"
    planned = sorted(prov["hour"].unique())
    hours = sorted(rented["hour"].unique())
    if len(planned) == HOURS_PER_DAY:
        spans = ", ".join(f"{a:02d}:00–{b + 1:02d}:00" for a, b in f.ranges(hours, wrap=24))
    else:
        spans = ", ".join(f"{h:02d}:00" for h in hours) + " (planned hours)"
    periods = list(dict.fromkeys(rented["period"]))
    where = "in every period" if len(periods) == prov["period"].nunique() else "in " + ", ".join(map(str, periods))
    top = rented.loc[rented["ondemand_nodes"].idxmax()]
    return f"{spans} {where}; most ({f.count(top['ondemand_nodes'])}) in {top['when']}"


def cost_per_token_table_data(folder: PlanFolder) -> pd.DataFrame:
    """Workload × measure of `charts.cost_per_token_data`, with the model and plan / list."""
    long = cost_per_token_data(folder)
    wide = long.pivot(index="workload", columns="measure", values="usd_per_million_tokens").reset_index()
    billing = (folder.summary.get("token_billing") or {}).get("by_workload") or {}
    wide["model"] = [(billing.get(k) or {}).get("model") for k in wide["workload"]]
    if "per-token list price" in wide:
        wide["plan_over_list"] = wide["plan"] / wide["per-token list price"]
    return wide


# ---------------------------------------------------------------------------- words


def lead(folder: PlanFolder, commitment: pd.DataFrame, rented: pd.DataFrame) -> str:
    s = folder.summary
    sites = commitment["site"].nunique()
    gpus = commitment["gpus"].sum() if commitment["gpus"].notna().all() else None
    accelerators = ", ".join(dict.fromkeys(commitment["gpu"]))
    terms = ", ".join(dict.fromkeys(commitment["term"]))
    parts = []
    if len(commitment):
        parts.append(f"Sign for {f.count(commitment['nodes'].sum())} nodes"
                     + (f" ({f.count(gpus)} GPUs)" if gpus else "")
                     + f" of {accelerators} at {sites} site{'s' if sites != 1 else ''} ({terms}): "
                     f"{f.usd(commitment['usd_per_month'].sum())} a month, {f.usd(commitment['usd_per_year'].sum())} a year.")
    else:
        parts.append("The plan commits to no nodes.")
    if len(rented):
        parts.append(f"Rent {f.count(rented['node_hours'].sum())} node-hours on demand in the busy hours: "
                     f"{f.usd(rented['usd_per_year'].sum() + rented['cold_start_usd_per_year'].sum())} a year "
                     "with cold starts.")
    total = f"All in, {f.usd(s['total_cost_usd'])} a year"
    if s.get("cost_per_million_tokens_usd") is not None:
        total += f", {f.usd(s['cost_per_million_tokens_usd'])} per million output tokens"
    compared = s.get("baseline_comparison")
    if s.get("savings_vs_baseline") is not None and compared:
        partly = set(compared["workloads"]) != set(s.get("cost_usd_by_workload") or {})
        total += (f" — {f.pct(s['savings_vs_baseline'])} less than the hand-made baseline "
                  f"({f.usd(compared['baseline_cost_usd'])}" + (f" for {', '.join(compared['workloads'])}" if partly
                                                                else "") + ")")
    parts.append(total + ".")
    parts += [f"The hand-made baseline cannot serve {k}: {why}." for k, why in
              (s.get("baseline_cannot_serve") or {}).items()]
    return " ".join(parts)


def margin_words(s: dict) -> str | None:
    """What a robust plan planned for and what that costs (summary.json → robust); None for a
    plan without margins."""
    r = s.get("robust")
    if not r:
        return None
    if r.get("band"):
        per = "; ".join(f"{row['accelerator']} {row['dtype']}: prefill "
                        f"{f.pct(row['factors'].get('prefill_mfu', 1.0) - 1.0, 1, True)}, decode "
                        f"{f.pct(row['factors'].get('decode_mbu', 1.0) - 1.0, 1, True)}" for row in r["band"])
        efficiencies = (f"each accelerator's efficiencies at the slow edge of its calibration's error band, the p90 "
                        f"residual ({per}; from {r['band_source'].rsplit('/', 1)[-1]})")
    else:
        efficiencies = f"efficiencies ×{r['efficiency_derate']:g} (a fixed derate)"
    text = (f"Planned with margins against estimates that may be wrong: demand ×{r['demand_factor']:g}, round trips "
            f"+{r['rtt_margin_ms']:g} ms and {efficiencies}. The margins cost {f.pct(r.get('price_of_robustness'))} "
            f"({f.usd(s['total_cost_usd'])} against {f.usd(r['nominal_cost_usd'])} a year without them)")
    if r.get("extra_gpus_peak") is not None:
        text += (f" and {f.count(r['extra_gpus_peak'])} more GPUs at the peak hour "
                 f"({f.count(r['nominal_gpus_peak'] + r['extra_gpus_peak'])} against {f.count(r['nominal_gpus_peak'])})")
    return text + "."


def gap_words(s: dict) -> str:
    total, bound, gap, target = s["total_cost_usd"], s.get("best_bound_usd"), s.get("mip_gap"), s.get("mip_gap_target")
    if bound is None or gap is None:
        return f"The solver gave no bound; the plan costs {f.usd(total)} and nothing says how close that is to the best."
    head = (f"No plan can cost less than {f.usd(bound)} a year (a proven lower bound), so this plan "
            f"({f.usd(total)}) is at most {f.pct(gap)} above the cheapest possible one")
    target_words = (" — " + STATUS_WORDS.get(s["status"], s["status"] + " ({} target)").format(f.pct(target))
                    if target is not None else "")
    tail = ("." if s["status"] == "optimal" else
            ". The bound comes from an optimistic relaxation of the problem, so the true distance is probably smaller.")
    return head + target_words + tail


def latency_html(folder: PlanFolder) -> str:
    s = folder.summary
    v = s.get("verification")
    predicted = (f"Predicted: {f.pct(s.get('predicted_ttft_attainment'), 2)} of requests on arcs whose p99 TTFT meets "
                 f"its objective, {f.pct(s.get('predicted_itl_attainment'), 2)} for ITL.")
    if not v:
        return (f"<p>{esc(predicted)} Not verified by simulation: run <code>fleetplan verify DIR</code>, then "
                "<code>fleetplan report DIR</code>.</p>")
    frame = pd.DataFrame(v.get("by_workload") or [])
    verdict = ("every objective met" if v.get("all_objectives_met") else "SOME OBJECTIVES MISSED")
    words = (f"Simulated request by request ({f.count(v.get('requests_simulated'))} requests at "
             f"{esc(', '.join(v.get('slices', [])))}): {verdict}; goodput {f.pct(v.get('goodput_fraction'), 2)} of "
             "output tokens.")
    columns = [TableColumn("workload", "workload"),
               TableColumn("ttft_p99_ms_predicted", "p99 TTFT predicted", f.ms, True),
               TableColumn("ttft_p99_ms_measured", "p99 TTFT measured", f.ms, True),
               TableColumn("ttft_p99_ms_objective", "p99 TTFT objective", f.ms, True),
               TableColumn("itl_p99_ms_measured", "p99 ITL measured", f.ms, True),
               TableColumn("itl_p99_ms_objective", "p99 ITL objective", f.ms, True),
               TableColumn("ttft_attainment", "TTFT attainment", lambda x: f.pct(x, 2), True),
               TableColumn("passes", "meets objectives", lambda x: "yes" if x else "NO")]
    return f"<p>{esc(words)}</p>" + (f.table(frame, columns, table_id="latency") if len(frame) else "")


def risks_html(folder: PlanFolder) -> str:
    s = folder.summary
    items = []
    if s.get("unserved_fraction"):
        items.append(esc(f"The plan itself leaves {f.pct(s['unserved_fraction'], 3)} of requests unserved."))
    items += [esc(f"Beyond a limit after rounding to whole nodes: {v}") for v in s.get("repair_violations") or []]
    if folder.stress is not None:
        items.append(_stress_words(folder.stress))
    if folder.operations is not None:
        items.append(_operations_words(folder.operations, folder.operations_sites))
    if folder.stress is None and folder.operations is None:
        items.append("No stress test or operational year in this folder yet: <code>fleetplan stress DIR --demand ×1.3"
                     "</code> and <code>fleetplan operate DIR --noise-sigma 0.1</code> add them.")
    problems = [f"{name}: {why}" for name, why in folder.problems.items()]
    items += [esc(p) for p in problems]
    return "<ul class=\"risks\">" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _stress_words(st: dict) -> str:
    what = [*(st.get("perturb") or [])]
    if st.get("demand_factor", 1) != 1:
        what.append(f"demand ×{st['demand_factor']:g}")
    if st.get("rtt_factor", 1) != 1:
        what.append(f"round trips ×{st['rtt_factor']:g}")
    if st.get("lose_site"):
        what.append(f"site {st['lose_site']} lost")
    if st.get("within_band"):
        what.append("efficiencies at the calibration's p90 error band" if st["within_band"] == "p90"
                    else "efficiencies drawn from the calibration's error band")
    rows = pd.DataFrame(st.get("by_workload") or [])
    failing = rows[~rows["passes"].astype(bool)] if len(rows) else rows
    head = f"Stress test ({', '.join(what) or 'no change'}): "
    if failing.empty:
        return esc(head + "every workload still meets its objectives.")
    worst = failing.loc[failing["attainment"].idxmin()]
    unserved = rows.loc[rows["unserved_fraction"].idxmax()] if "unserved_fraction" in rows else None
    text = (head + f"{len(failing)} of {len(rows)} workloads miss their objectives; the worst, {worst['workload']}, "
            f"meets its p99 on {f.pct(worst['attainment'])} of requests (needs {f.pct(worst['required'])})")
    if unserved is not None and unserved["unserved_fraction"] > 0:
        text += f"; up to {f.pct(unserved['unserved_fraction'])} of requests unserved ({unserved['workload']})"
    return esc(text + ".")


def _operations_words(ops: dict, sites: pd.DataFrame | None) -> str:
    text = (f"Operational year ({f.count(ops.get('hours'))} hours, day-to-day noise σ = {ops.get('noise_sigma', 0):g}): "
            f"costs {f.usd(ops.get('total_cost_usd'))} ({f.pct(ops.get('cost_vs_plan'), 2, signed=True)} against the plan); "
            f"{f.count(ops.get('hours_with_unserved'))} hours leave demand unserved "
            f"({f.pct(ops.get('unserved_fraction'), 3)} of requests); {f.count(ops.get('hours_short_of_gpus'))} hours "
            f"need GPUs beyond the on-demand caps")
    if sites is not None and "hours_short" in sites and sites["hours_short"].sum() > 0:
        short = sites[sites["hours_short"] > 0]
        text += " (" + ", ".join(f"{r.site} / {r.gpu} {f.count(r.hours_short)} h, cap {f.count(r.ondemand_cap)} nodes"
                                 for r in short.itertuples()) + ")"
    return esc(text + f"; on-demand peak {f.count(ops.get('ondemand_nodes_peak'))} nodes.")


# ---------------------------------------------------------------------------- page part


def cards(folder: PlanFolder, commitment: pd.DataFrame) -> str:
    s = folder.summary
    gpus = sum((s.get("gpus_by_type_peak") or {}).values())
    items = [("card-total", f.usd(s["total_cost_usd"]), "a year, all in"),
             ("card-commitment", f.usd(commitment["usd_per_month"].sum()), "a month committed"),
             ("card-token", f.usd(s.get("cost_per_million_tokens_usd")), "per million output tokens"),
             ("card-gpus", f.count(gpus), "GPUs at the peak hour"),
             ("card-savings", f.pct(s.get("savings_vs_baseline")),
              "less than the hand-made baseline" if s.get("savings_vs_baseline") is not None or
              not s.get("baseline_cannot_serve") else "saved: the hand-made baseline cannot serve it"),
             ("card-gap", f.pct(s.get("mip_gap")), "at most above the cheapest plan")]
    return '<div class="cards">' + "".join(
        f'<div class="card" id="{i}"><div class="value">{esc(v)}</div><div class="label">{esc(lbl)}</div></div>'
        for i, v, lbl in items) + "</div>"


COMMITMENT_COLUMNS = [TableColumn("site", "site"), TableColumn("gpu", "accelerator"), TableColumn("term", "term"),
                      TableColumn("nodes", "nodes", f.count, True), TableColumn("gpus", "GPUs", f.count, True),
                      TableColumn("usd_per_month", "a month", f.usd, True), TableColumn("usd_per_year", "a year", f.usd, True)]
ONDEMAND_COLUMNS = [TableColumn("site", "site"), TableColumn("gpu", "accelerator"),
                    TableColumn("peak_nodes", "most nodes at once", f.count, True),
                    TableColumn("node_hours", "node-hours a year", f.count, True),
                    TableColumn("usd_per_year", "rental a year", f.usd, True),
                    TableColumn("cold_start_usd_per_year", "cold starts a year", f.usd, True),
                    TableColumn("when", "when (UTC)")]


def opening_html(folder: PlanFolder) -> str:
    commitment = commitment_data(folder)
    rented = ondemand_table_data(folder)
    total = {"site": "total", "nodes": f.count(commitment["nodes"].sum()),
             "gpus": f.count(commitment["gpus"].sum()) if commitment["gpus"].notna().all() else f.MISSING,
             "usd_per_month": f.usd(commitment["usd_per_month"].sum()), "usd_per_year": f.usd(commitment["usd_per_year"].sum())}
    parts = [f'<p class="lead">{esc(lead(folder, commitment, rented))}</p>', cards(folder, commitment),
             "<h3>The commitment to sign</h3>", f.table(commitment, COMMITMENT_COLUMNS, table_id="commitment", total=total)]
    parts.append("<h3>Rented on demand, and when</h3>")
    parts.append(f.table(rented, ONDEMAND_COLUMNS, table_id="ondemand") if len(rented)
                 else "<p>Nothing is rented on demand.</p>")
    parts.append("<h3>Cost per million output tokens</h3>")
    parts.append(_cost_per_token_html(folder))
    margins = margin_words(folder.summary)
    if margins:
        parts += ["<h3>Margins</h3>", f'<p id="margins">{esc(margins)}</p>']
    parts += ["<h3>Latency</h3>", latency_html(folder), "<h3>Risks</h3>", risks_html(folder),
              "<h3>How close to the best plan</h3>", f"<p>{esc(gap_words(folder.summary))}</p>"]
    return "".join(parts)


def _cost_per_token_html(folder: PlanFolder) -> str:
    try:
        wide = cost_per_token_table_data(folder)
    except MissingInput as exc:
        return f"<p>{esc(exc)}</p>"
    columns = [TableColumn("workload", "workload"), TableColumn("model", "model"),
               TableColumn("plan", "plan", f.usd, True), TableColumn("hand-made baseline", "hand-made baseline", f.usd, True),
               TableColumn("per-token list price", "per-token list price", f.usd, True),
               TableColumn("plan_over_list", "plan / list", f.pct, True),
               TableColumn("plan, measured goodput (verify)", "plan per goodput token (verify)", f.usd, True)]
    columns = [c for c in columns if c.key in wide]
    return f.table(wide, columns, table_id="cost-per-token-table")
