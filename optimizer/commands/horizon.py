"""A plan over several years (``horizon.years`` > 1): what to sign, renew, let lapse, buy and
retire each year, from the fleet the company has.

1. The years together (`optimizer.solve.horizon`): one linear program over every year decides
   the long contracts (3-year reservations, owned nodes) and the year they are signed in.
2. Each year made whole on them: the year's scenario (`optimizer.scenario.years`) with the
   fleet it has by then — what the company had, what the years before signed, the long
   contracts of this year — planned as one-year plans are, signing only one-year
   reservations and renting on demand on top; owned nodes it does not use are retired.
3. The same years planned myopically for comparison: each year planned alone, signing any term
   priced as one year of its rent (as a one-year plan does), its signings carried forward.

Both schedules are costed alike (`optimizer.results.horizon`); the cheaper is the plan (the
years together normally; where rounding left it dearer, the summary says so), and its present
cost is also given under every named price path.
"""

from __future__ import annotations

import math
import time
from importlib.metadata import version

import pandas as pd

from optimizer.base.contracts import TERM, TERMS
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.commands.pipeline import fleet_of_plan, plan_instance, settings_from
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import Instance, build_instance
from optimizer.instance.checks import preflight
from optimizer.results.horizon import PRICE_COLUMNS, HorizonPlan, Signing, YearsPlan, schedule_table, years_table
from optimizer.scenario import RawScenario, Scenario, load_scenario
from optimizer.scenario.fleet import term_end
from optimizer.scenario.years import (
    check_price_scenario,
    demand_growth_per_year,
    price_factor,
    year_overrides,
    year_scenario,
    year_start,
)
from optimizer.solve import SolverSettings
from optimizer.solve.horizon import joint_signings


def make_horizon_plan(path=None, overrides=(), *, progress=None, allow_unserved=False, **flags) -> HorizonPlan:
    """Plan a multi-year scenario file with ``--set`` overrides; ``flags``: `settings_from`'s."""
    s, raw = load_scenario(path, list(overrides))
    return plan_horizon(s, raw, settings_from(s, **flags), progress=progress, allow_unserved=allow_unserved)


def term_years(s: Scenario, term: str, gpu: str) -> int:
    """A term's length in whole years (owned: the depreciation life, rounded up)."""
    return TERM[term].years if TERM[term].years is not None else math.ceil(s.owned[gpu].life_years)


def plan_horizon(s: Scenario, raw: RawScenario, settings: SolverSettings, *, progress=None,
                 allow_unserved=False) -> HorizonPlan:
    say = progress or (lambda msg: None)
    started = time.perf_counter()
    paths = check_price_scenario(s, raw)
    initial = [r.model_dump(exclude_none=True) for r in s.fleet.contracts]
    insts = [_instance(s, raw, paths, k, initial) for k in range(s.horizon.years)]
    lengths = {(site, g, term): term_years(s, term, g) for inst in insts for (site, g), c in inst.contracts.items()
               for term in c.committed}
    say(f"the {s.horizon.years} years together: one linear program")
    t = time.perf_counter()
    joint = joint_signings(insts, lengths, s.years.discount_rate, s.years.end_value, threads=settings.threads)
    joint_s = time.perf_counter() - t
    say(f"  {joint.columns:,} columns, {joint.rows:,} rows: {joint.status}, ${joint.objective_usd:,.0f} "
        f"present cost as a linear plan ({joint_s:.1f} s)")
    lower = joint_signings(insts, lengths, s.years.discount_rate, s.years.end_value, threads=settings.threads,
                           bound=True)
    say(f"  bound: ${lower.objective_usd:,.0f} present cost (every pool priced at its largest size's capacity)")
    long = [Signing(k, site, g, term, round(v), insts[k].contracts[(site, g)].committed[term].signed,
                    lengths[(site, g, term)])
            for (k, site, g, term), v in sorted(joint.signed.items()) if term != "reserved-1y" and round(v) > 0]
    one_year = {"reserved_terms": ["1y"] if "1y" in s.policy.reserved_terms else [], "allow_owned": False}
    together = _year_by_year(s, raw, paths, settings, "together", long, one_year, say, allow_unserved)
    longer = lengthen(s, together, [signing_rates(inst) for inst in insts])
    if longer != long:  # one-year contracts renewed for a term's length are cheaper as that term
        say(f"{sum(x.nodes for x in longer) - sum(x.nodes for x in long)} node-terms of one-year contracts renewed "
            "year after year are cheaper as longer terms: the years made whole again on them")
        again = _year_by_year(s, raw, paths, settings, "together", longer, one_year, say, allow_unserved)
        rate, end = s.years.discount_rate, s.years.end_value
        if again.present_cost_usd(rate, end) < together.present_cost_usd(rate, end):
            together = again
    myopic = _year_by_year(s, raw, paths, settings, "myopic", [], None, say, allow_unserved)
    rate, end = s.years.discount_rate, s.years.end_value
    pv = {p.method: p.present_cost_usd(rate, end) for p in (together, myopic)}
    chosen = together if pv["together"] <= pv["myopic"] else myopic
    starts = [_iso(year_start(s, k)) for k in range(s.horizon.years)]
    demand = [(1 + demand_growth_per_year(s)) ** k for k in range(s.horizon.years)]
    schedule = pd.concat([schedule_table(p, starts, rate, end) for p in (chosen, together if chosen is myopic else myopic)],
                         ignore_index=True)
    prices = price_table(s, paths, together, myopic)
    summary = _summary(s, raw, settings, chosen, pv, joint, joint_s, prices, time.perf_counter() - started)
    summary["bound_present_cost_usd"] = lower.objective_usd
    summary["gap"] = max(0.0, 1 - lower.objective_usd / summary["present_cost_usd"]) if summary["present_cost_usd"] else 0.0
    return HorizonPlan(summary, chosen.plans, schedule, years_table(chosen, together, myopic, starts, demand, rate),
                       prices, raw.data, raw.files())


def _iso(day) -> str | None:
    return day.isoformat() if day is not None else None


def _instance(s: Scenario, raw: RawScenario, paths: dict, k: int, fleet: list[dict]) -> Instance:
    ys, yraw = year_scenario(raw, year_overrides(s, k, paths, s.years.price_scenario, fleet))
    preflight(ys, yraw)
    return build_instance(ys, rtt_matrix(build_graph(ys, yraw.path.parent), ys))


def _year_by_year(s: Scenario, raw: RawScenario, paths: dict, settings: SolverSettings, method: str,
                  long: list[Signing], policy: dict | None, say, allow_unserved: bool) -> YearsPlan:
    """Each year made whole on the fleet it has by then (module docstring, 2 and 3)."""
    out = YearsPlan(method, [], list(long), [], [], given=list(long))
    carried = [r.model_dump(exclude_none=True) for r in s.fleet.contracts]
    previous = _first_fleet(s) if s.churn.limited else None  # each year keeps the limits against the year before
    for k in range(s.horizon.years):
        rows = carried + [fleet_row(s, x) for x in long if x.year == k]
        unlimited = ["churn={}"] if s.churn.limited and previous is None else []  # nothing to move from yet
        ys, yraw = year_scenario(raw, year_overrides(s, k, paths, s.years.price_scenario, rows, policy) + unlimited)
        say(f"year {k + 1} ({method}): {ys.horizon.start}, fleet of {sum(r['nodes'] for r in rows)} nodes")
        plan, inst = plan_instance(ys, yraw, settings, allow_unserved=allow_unserved, previous=previous)
        previous = fleet_of_plan(plan) if s.churn.limited else None
        own = own_signings(s, plan, inst, k)
        fleet = plan.summary.get("fleet") or {}
        gone = [{"site": r["site"], "gpu": r["gpu"], "nodes": r["retired_nodes"]}
                for r in fleet.get("existing", []) if r.get("retired_nodes")]
        out.plans.append(plan)
        out.own_rent_usd.append(sum(x.nodes * x.usd_per_node_hour * HOURS_PER_YEAR for x in own))
        out.expired.append(list(fleet.get("up_for_renewal", [])))
        out.retired.append(gone)
        out.signings += own
        carried = retire(rows, gone) + [fleet_row(s, x) for x in own]
    return out


def signing_rates(inst: Instance) -> dict:
    """(site, gpu, term) → $/node-hour a signing of the year commits to, for every term it offers."""
    return {(site, g, term): price.signed for (site, g), c in inst.contracts.items()
            for term, price in c.committed.items() if not TERM[term].existing}


def lengthen(s: Scenario, plan: YearsPlan, rates: list[dict]) -> list[Signing]:
    """The plan's long signings, plus one-year contracts a year plan signed again and again at
    one (site, accelerator) turned into a longer term where its present cost is lower:

        m = min_{j ∈ window} one-year nodes signed in year j,   window = k … min(k + L, K) − 1
        signed as term L in year k when PV(L-term from k) < Σ_{j ∈ window} PV(one year in j)

    (operations unchanged: the same nodes run in the same years; ``rates``: each year's
`signing_rates` with every term the scenario allows). Earliest windows first."""
    rate, end, years = s.years.discount_rate, s.years.end_value, len(plan.plans)
    one = {}
    for x in plan.signings:
        if x.term == "reserved-1y":
            one[(x.year, x.site, x.gpu)] = one.get((x.year, x.site, x.gpu), 0) + x.nodes
    out = list(plan.given)
    for term in [t.id for t in TERMS if t.years is not None and t.years > 1]:
        for (site, g) in sorted({(st, gg) for _, st, gg in one}):
            for k in range(years):
                length = TERM[term].years
                window = range(k, min(k + length, years))
                m = min(one.get((j, site, g), 0) for j in window)
                long_rate = rates[k].get((site, g, term))
                if m <= 0 or long_rate is None:
                    continue
                longer = Signing(k, site, g, term, 1, long_rate, length).present_cost_usd(rate, years, end)
                short = sum(Signing(j, site, g, "reserved-1y", 1, rates[j][(site, g, "reserved-1y")], 1)
                            .present_cost_usd(rate, years, end) for j in window)
                if longer < short - 1e-6:
                    out.append(Signing(k, site, g, term, m, long_rate, length))
                    for j in window:
                        one[(j, site, g)] -= m
    return sorted(out, key=lambda x: (x.year, x.site, x.gpu, x.term))


def _first_fleet(s: Scenario) -> tuple[dict, dict] | None:
    """What year 1 moves from: the fleet the company has (its committed nodes), or nothing."""
    if not s.fleet.contracts:
        return None
    committed: dict = {}
    for r in s.fleet.contracts:
        if r.contract == "owned" or (r.contract == "reserved" and r.end >= s.horizon.start):
            committed[(r.site, r.gpu)] = committed.get((r.site, r.gpu), 0) + r.nodes
    return committed, {}


def own_signings(s: Scenario, plan, inst: Instance, k: int) -> list[Signing]:
    """What a year's plan signs itself (its new terms' nodes)."""
    out = []
    for r in plan.tables["procurement"].itertuples():
        if r.site == "*":
            continue
        for term, price in sorted(inst.contracts[(r.site, r.gpu)].committed.items()):
            nodes = int(getattr(r, TERM[term].nodes_column))
            if nodes and not TERM[term].existing:
                out.append(Signing(k, r.site, r.gpu, term, nodes, price.signed, term_years(s, term, r.gpu)))
    return out


def fleet_row(s: Scenario, x: Signing) -> dict:
    """A signing as the fleet rows of the years after it: a reservation until its term ends,
    an owned node bought at its capital (its value already paid: keeping it costs colocation
    and energy)."""
    start = year_start(s, x.year)
    if x.term == "owned":
        return {"site": x.site, "gpu": x.gpu, "nodes": x.nodes, "contract": "owned", "purchased": start.isoformat(),
                "capex_usd_per_node": max(1000.0, x.usd_per_node_hour * HOURS_PER_YEAR * x.years),
                "life_years": float(x.years), "residual_usd_per_node": 0.0}
    last = term_end(start, x.years)
    return {"site": x.site, "gpu": x.gpu, "nodes": x.nodes, "contract": "reserved", "start": start.isoformat(),
            "end": last.isoformat(),
            "usd_per_gpu_hour": round(x.usd_per_node_hour / s.accelerators[x.gpu].gpus_per_node, 6)}


def retire(rows: list[dict], gone: list[dict]) -> list[dict]:
    """Fleet rows without the owned nodes retired (the oldest first)."""
    rows = [dict(r) for r in rows]
    for g in gone:
        left = g["nodes"]
        for r in sorted((r for r in rows if r["contract"] == "owned" and (r["site"], r["gpu"]) == (g["site"], g["gpu"])),
                        key=lambda r: r["purchased"]):
            n = min(left, r["nodes"])
            r["nodes"] -= n
            left -= n
    return [r for r in rows if r["nodes"] > 0]


def repriced_usd(s: Scenario, plan: YearsPlan, paths: dict, name: str) -> float:
    """Present cost of a schedule under another price path: as planned (the same nodes, rentals
    and signings), its on-demand hours, cold starts and signings at that path's prices."""
    base, rate, end = s.years.price_scenario, s.years.discount_rate, s.years.end_value
    ratio = lambda g, k: price_factor(paths, name, g, k) / price_factor(paths, base, g, k)  # noqa: E731
    total = plan.present_cost_usd(rate, end)
    for k, year_plan in enumerate(plan.plans):
        proc = year_plan.tables["procurement"]
        proc = proc[proc["site"] != "*"]
        moved = sum((r.cost_ondemand_usd + r.cost_ramp_usd) * (ratio(r.gpu, k) - 1) for r in proc.itertuples())
        total += (1 + rate) ** -k * moved
    years = len(plan.plans)
    total += sum(x.present_cost_usd(rate, years, end) * (ratio(x.gpu, x.year) - 1) for x in plan.signings)
    return total


def price_table(s: Scenario, paths: dict, together: YearsPlan, myopic: YearsPlan) -> pd.DataFrame:
    """Both schedules' present cost under every named price path."""
    rows = [{"price_scenario": name, "planned_under": name == s.years.price_scenario,
             "together_present_cost_usd": repriced_usd(s, together, paths, name),
             "myopic_present_cost_usd": repriced_usd(s, myopic, paths, name)} for name in sorted(paths)]
    return pd.DataFrame(rows, columns=PRICE_COLUMNS)


def _summary(s: Scenario, raw: RawScenario, settings: SolverSettings, chosen: YearsPlan, pv: dict, joint, joint_s: float,
             prices: pd.DataFrame, wall_s: float) -> dict:
    saving = pv["myopic"] - pv["together"]
    return {
        "kind": "multi-year plan", "scenario": s.name, "years": s.horizon.years, "start": s.horizon.start,
        "price_scenario": s.years.price_scenario, "discount_rate": s.years.discount_rate,
        "end_value": s.years.end_value, "demand_growth_per_year": demand_growth_per_year(s),
        "method": chosen.method, "present_cost_usd": pv[chosen.method],
        "together_present_cost_usd": pv["together"], "myopic_present_cost_usd": pv["myopic"],
        "together_saves_usd": saving, "together_saves_fraction": saving / pv["myopic"] if pv["myopic"] else 0.0,
        "committed_beyond_horizon_usd": chosen.beyond_usd(),
        "sunk_usd": sum((p.summary.get("fleet") or {}).get("sunk_usd", 0.0) for p in chosen.plans),
        "joint_program": {"status": joint.status, "linear_present_cost_usd": joint.objective_usd,
                          "columns": joint.columns, "rows": joint.rows, "seconds": joint_s},
        "price_scenarios": {r.price_scenario: {"together": r.together_present_cost_usd, "myopic": r.myopic_present_cost_usd}
                            for r in prices.itertuples()},
        "year_costs_usd": [p.summary["total_cost_usd"] for p in chosen.plans],
        "scenario_sha256": raw.sha256(), "overrides": list(raw.overrides),
        "settings": {"effort": settings.effort, "exact": settings.exact},
        "fleetplan_version": version("fleetplan"), "wall_seconds": wall_s,
    }
