"""The terminal summary of a multi-year plan: its present cost, the years planned together
against year by year, the signing schedule, the cost of each year and under each price path."""

from __future__ import annotations

from pathlib import Path

from optimizer.results.horizon import HorizonPlan, term_label

ACTIONS = {"sign": "sign", "renew": "renew", "buy": "buy", "lapse": "let lapse", "retire": "retire"}


def horizon_text(plan: HorizonPlan, out: Path) -> str:
    sm = plan.summary
    lines = [f"multi-year plan written to {out}/ ({sm['years']} years from {sm['start']}, prices: "
             f"{sm['price_scenario']}, discount {100 * sm['discount_rate']:.1f} %/year)",
             f"  present cost ${sm['present_cost_usd']:,.0f} (the schedule {_method(sm['method'])}); committed beyond "
             f"the horizon ${sm['committed_beyond_horizon_usd']:,.0f} (" + (
                 "counted in full)" if sm["end_value"] == "full" else "not counted: prorated)")]
    if sm.get("bound_present_cost_usd") is not None:
        lines.append(f"  within {100 * sm['gap']:.2f} % of the best bound (${sm['bound_present_cost_usd']:,.0f}: the "
                     "years' linear program with every pool at its largest size's capacity)")
    saving = sm["together_saves_usd"]
    lines.append(f"  planning the years together: ${sm['together_present_cost_usd']:,.0f}; year by year (myopic): "
                 f"${sm['myopic_present_cost_usd']:,.0f} — " + (
                     f"together saves ${saving:,.0f} ({100 * sm['together_saves_fraction']:.1f} %)" if saving >= 0 else
                     f"year by year is ${-saving:,.0f} cheaper here, so it is the plan"))
    if sm.get("sunk_usd"):
        lines.append(f"  rent already sunk in the fleet the company had: ${sm['sunk_usd']:,.0f} over the years "
                     "(not in these costs)")
    lines.append("  year   start        operations    commitments     cash cost   present cost   GPUs at peak")
    for r in plan.years.itertuples():
        lines.append(f"  {r.year:>4}   {str(r.start):<10} ${r.operating_usd:>13,.0f} ${r.commitments_usd:>13,.0f} "
                     f"${r.cost_usd:>12,.0f} ${r.present_cost_usd:>13,.0f}   {r.gpus_peak:>8,}")
    lines.append("  schedule:")
    chosen = plan.schedule[plan.schedule["plan"] == sm["method"]]
    for r in chosen.itertuples():
        ends = f" until {r.ends}" if isinstance(r.ends, str) and r.action not in ("lapse", "retire") else ""
        lines.append(f"    year {r.year}: {ACTIONS[r.action]} {r.nodes} × {r.gpu} at {r.site}, {term_label(r.term)}{ends}")
    if chosen.empty:
        lines.append("    nothing to sign: the fleet and on-demand rental carry every year")
    lines.append("  under each price path (the schedule as planned): " + "; ".join(
        f"{name} ${v['together' if sm['method'] == 'together' else 'myopic']:,.0f}"
        for name, v in sorted(sm["price_scenarios"].items())))
    lines.append(f"  each year's plan: {out}/year-1 … year-{sm['years']} (plan folders: verify, report and compare read them)")
    return "\n".join(lines)


def _method(method: str) -> str:
    return "made for the years together" if method == "together" else "made year by year"
