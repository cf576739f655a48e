"""Years planned together: a year's scenario by hand, contracts that end are renewed when
demand needs them and lapse when it does not, a generation that arrives later is waited for,
a two-year optimum by brute force, the present cost of a signing by hand, and the multi-year
folder read by verify and compare."""

from __future__ import annotations

import itertools
import json

import pytest
from instances import TINY, US_EAST, brute_force, load_instance

from optimizer.base.units import HOURS_PER_YEAR
from optimizer.cli.main import main
from optimizer.commands.horizon import make_horizon_plan
from optimizer.commands.report.horizon import write_horizon_report
from optimizer.results.horizon import Signing
from optimizer.scenario import load_scenario
from optimizer.scenario.years import price_paths, year_overrides, year_scenario

START = ["horizon.start=2027-01-01"]
H100_ONLY = "accelerators=[h100-sxm]"


def _schedule(plan, method="together"):
    table = plan.schedule
    return table[table["plan"] == method]


def test_a_year_of_the_scenario_by_hand():
    """Year 3 (k = 2) of us-east under the falling path: demand × 1.08^8 (eight quarters at 8 %),
    prices × 0.75², B200 absent before 2028-06-01 and present after."""
    s, raw = load_scenario(US_EAST, [*START, "horizon.years=3", "years.available_from={b200: 2028-06-01}"])
    paths = price_paths(s)
    assert paths["falling"]["*"][:3] == [1.0, 0.75, 0.5625]
    k1, _ = year_scenario(raw, year_overrides(s, 1, paths, "falling", None))
    k2, _ = year_scenario(raw, year_overrides(s, 2, paths, "falling", None))
    assert k2.horizon.start == "2029-01-01" and k2.horizon.years == 1
    assert k2.demand.scale == pytest.approx(s.demand.scale * 1.08 ** 8)
    assert k2.prices["h100-sxm"].ondemand_usd_per_gpu_hour == pytest.approx(
        s.prices["h100-sxm"].ondemand_usd_per_gpu_hour * 0.5625)
    assert k1.supply["ashburn"]["b200"].reserved_nodes_max == 0  # 2028-01-01 is before 2028-06-01
    assert k2.supply["ashburn"]["b200"].reserved_nodes_max == s.supply["ashburn"]["b200"].reserved_nodes_max


def test_the_present_cost_of_a_signing_by_hand():
    """A node at $1/node-hour on a 3-year term signed in year 2 (k = 1) of 3, at 10 %: full
    counts years 1, 2, 3 (discounted 1/1.1, 1/1.21, 1/1.331); prorated only years 1 and 2."""
    x = Signing(1, "a", "g", "reserved-3y", 2, 1.0, 3)
    full = 2 * HOURS_PER_YEAR * (1 / 1.1 + 1 / 1.21 + 1 / 1.331)
    assert x.present_cost_usd(0.10, 3, "full") == pytest.approx(full)
    assert x.present_cost_usd(0.10, 3, "prorated") == pytest.approx(2 * HOURS_PER_YEAR * (1 / 1.1 + 1 / 1.21))
    assert x.runs_in(1) and x.runs_in(3) and not x.runs_in(0) and not x.runs_in(4)


ENDING = "fleet.contracts=[{site: chicago, gpu: h100-sxm, nodes: 3, contract: reserved, start: 2026-01-01, end: 2027-12-31}]"


def test_a_reservation_ending_mid_horizon_is_renewed_as_far_as_demand_needs_it():
    """Three H100 nodes reserved until the end of year 1: year 1 runs on them; year 2's demand
    needs one node there, so one is renewed and two lapse."""
    plan = make_horizon_plan(TINY, [*START, "horizon.years=2", H100_ONLY, ENDING], effort="first")
    table = _schedule(plan)
    year1 = plan.plans[0].tables["procurement"].set_index(["site", "gpu"])
    assert year1.loc[("chicago", "h100-sxm"), "existing_reserved_nodes"] == 3
    year2 = table[table["year"] == 2].set_index(["action", "site", "gpu"])
    needed = plan.plans[1].tables["procurement"].set_index(["site", "gpu"]).loc[("chicago", "h100-sxm"), "reserved_nodes"]
    assert needed == 1
    assert year2.loc[("renew", "chicago", "h100-sxm"), "nodes"] == needed
    assert year2.loc[("lapse", "chicago", "h100-sxm"), "nodes"] == 3 - needed


def test_a_reservation_nobody_needs_lapses_whole():
    """With almost no demand left in year 2, what serves it is cheapest elsewhere: all three lapse."""
    plan = make_horizon_plan(TINY, [*START, "horizon.years=2", H100_ONLY, ENDING,
                                    "years.demand_growth_per_year=-0.9"], effort="first")
    year2 = _schedule(plan).query("year == 2")
    assert not ((year2["action"] == "renew") & (year2["site"] == "chicago")).any()
    assert year2.query("action == 'lapse' and site == 'chicago'")["nodes"].sum() == 3


def test_a_cheaper_generation_arriving_in_year_2_is_waited_for():
    """L40S (cheaper for this workload) can be had from 2028: planned together, year 1 rents
    H100 for one year and year 2 moves to L40S; planned year by year, year 1 locks H100 in for
    three years (the cheapest term it sees), which costs more over the three years."""
    plan = make_horizon_plan(TINY, [*START, "horizon.years=3", "years.available_from={l40s: 2028-01-01}"],
                             effort="first")
    together, myopic = _schedule(plan), _schedule(plan, "myopic")
    assert not ((together["year"] == 1) & (together["term"] == "reserved-3y")).any()
    assert ((together["year"] == 2) & (together["gpu"] == "l40s") & together["action"].isin(["sign", "renew"])).any()
    assert ((myopic["year"] == 1) & (myopic["gpu"] == "h100-sxm") & (myopic["term"] == "reserved-3y")).any()
    sm = plan.summary
    assert sm["method"] == "together" and sm["together_saves_usd"] > 0
    assert sm["together_present_cost_usd"] < sm["myopic_present_cost_usd"]


def test_one_year_contracts_renewed_for_a_whole_term_become_that_term():
    """Without a new generation the same node is needed every year: a 3-year term (signed in
    year 1) is cheaper than three one-year contracts, and the plan signs it."""
    plan = make_horizon_plan(TINY, [*START, "horizon.years=3"], effort="first")
    together = _schedule(plan)
    assert (together["term"] == "reserved-3y").any() and not (together["term"] == "reserved-1y").any()
    assert plan.summary["together_present_cost_usd"] <= plan.summary["myopic_present_cost_usd"] + 1e-6


def _two_year_optimum(sets: list[str]) -> float:
    """The cheapest two-year schedule by enumeration: x[s,g] nodes on 3-year terms signed in
    year 1 (counted for the two years: prorated), then each year's cheapest plan on top of them
    (`instances.brute_force`): year 1 signing one-year terms, year 2 any term (a 3-year term
    prorated to its one year inside the horizon)."""
    s, _ = load_scenario(TINY, sets)
    paths, d = price_paths(s), 1 / (1 + s.years.discount_rate)
    pairs = [(site, g) for site, per in sorted(s.supply.items()) for g in sorted(per)]
    base = load_instance(TINY, [*sets, *year_overrides(s, 0, paths, "flat", None)])
    best = float("inf")
    for xs in itertools.product(range(3), repeat=len(pairs)):
        rows = [{"site": p[0], "gpu": p[1], "nodes": x, "contract": "reserved", "start": "2027-01-01",
                 "end": "2029-12-31"} for p, x in zip(pairs, xs) if x]
        signed = sum(x * base.contracts[p].committed["reserved-3y"].rate * HOURS_PER_YEAR * (1 + d)
                     for p, x in zip(pairs, xs))
        y1 = load_instance(TINY, [*sets, *year_overrides(s, 0, paths, "flat", rows, {"reserved_terms": ["1y"]})])
        y2 = load_instance(TINY, [*sets, *year_overrides(s, 1, paths, "flat", rows)])
        best = min(best, signed + brute_force(y1) + d * brute_force(y2))
    return best


def test_two_years_against_the_brute_force_optimum():
    sets = [*START, "horizon.years=2", "years.end_value=prorated", "accelerators=[l40s]",
            "years.demand_growth_per_year=1.0"]
    optimum = _two_year_optimum(sets)
    plan = make_horizon_plan(TINY, sets, exact=True)
    cost = plan.summary["present_cost_usd"]
    assert cost == pytest.approx(optimum, rel=1e-6)
    assert plan.summary["bound_present_cost_usd"] <= optimum * (1 + 1e-9)


def test_the_multi_year_folder_is_read_by_verify_and_compare(tmp_path, capsys):
    out, one = tmp_path / "years", tmp_path / "one"
    assert main(["plan", str(TINY), "--effort", "first", "--no-report", "--quiet", "--out", str(out),
                 "--set", "horizon.start=2027-01-01", "--set", "horizon.years=2"]) == 0
    summary = json.loads((out / "horizon.json").read_text())
    assert summary["years"] == 2 and (out / "year-2" / "summary.json").is_file()
    for name in ("years.csv", "schedule.csv", "price_scenarios.csv", "scenario.json"):
        assert (out / name).is_file()
    assert main(["plan", str(TINY), "--effort", "first", "--no-report", "--quiet", "--out", str(one)]) == 0
    capsys.readouterr()
    assert main(["compare", str(one), str(out)]) == 0
    assert "year-2" in capsys.readouterr().out
    page = write_horizon_report(out).read_text()
    assert "Signing schedule" in page and "Cost of each year" in page and 'href="year-2/report.html"' in page
    assert main(["verify", str(out), "--requests", "2000"]) == 0
    assert (out / "year-1" / "verify.csv").is_file() and (out / "year-2" / "verify.csv").is_file()
    capsys.readouterr()
    years = (out / "years.csv").read_text()
    (out / "years.csv").write_text(years[:30])  # truncated by hand: refused by name, nothing rewritten
    before = (out / "year-1" / "report.html").stat().st_mtime_ns if (out / "year-1" / "report.html").exists() else None
    assert main(["report", str(out)]) == 2
    assert "years.csv" in capsys.readouterr().err
    after = (out / "year-1" / "report.html").stat().st_mtime_ns if (out / "year-1" / "report.html").exists() else None
    assert after == before
    (out / "horizon.json").write_text('{"years": 2, "trunc')
    assert main(["compare", str(one), str(out)]) == 2
    assert "horizon.json" in capsys.readouterr().err


def test_each_year_keeps_the_churn_limits_against_the_year_before():
    """Demand tripling every year, at most one node added a year at each (site, accelerator)
    (Γ = 1, γ = 0): each pair's nodes (committed + on-demand peak) grow by one at most, where
    unlimited some pair grows faster."""
    sets = [*START, "horizon.years=3", "years.demand_growth_per_year=2.0"]

    def nodes(plan):
        out = []
        for p in plan.plans:
            proc = p.tables["procurement"].query("site != '*'")
            out.append({(r.site, r.gpu): int(r.reserved_nodes + r.ondemand_nodes_peak) for r in proc.itertuples()})
        return out

    def growth(years):
        return [b[pair] - a.get(pair, 0) for a, b in zip(years, years[1:]) for pair in b]

    assert max(growth(nodes(make_horizon_plan(TINY, sets, effort="first")))) > 1
    limited = make_horizon_plan(TINY, [*sets, "churn.growth_nodes=1", "churn.growth_factor=0"], effort="first")
    assert max(growth(nodes(limited))) <= 1
    assert limited.plans[1].summary["churn"]["growth_nodes"] == 1
