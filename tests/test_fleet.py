"""The fleet a plan starts from: reserved nodes cost nothing more (their rent is sunk), owned
nodes cost what keeping them a year costs, a contract ending inside the year is up for
renewal, and the plan with a fleet is still the brute-force optimum on the tiny instance."""

from __future__ import annotations

import json

import pytest
from instances import TINY, brute_force, tiny_instance

from optimizer.base.errors import ScenarioError
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.cli.main import main
from optimizer.commands.pipeline import make_plan
from optimizer.commands.report.fleet_tables import churn_html, fleet_html
from optimizer.folder.read import read_plan
from optimizer.folder.write import write_plan
from optimizer.instance.fleet import fleet_year
from optimizer.scenario import load_scenario
from optimizer.solve import SolverSettings, solve

START = "horizon.start=2027-01-01"


def _fleet(*rows: str) -> str:
    return "fleet.contracts=[" + ", ".join("{" + r + "}" for r in rows) + "]"


SIGNED = "site: chicago, gpu: h100-sxm, nodes: 1, contract: reserved, start: 2026-01-01, end: 2028-12-31"


def test_reserved_nodes_already_signed_are_free_and_the_exact_plan_is_the_optimum(optimum):
    inst = tiny_instance([START, _fleet(SIGNED)])
    assert inst.existing_nodes == {("chicago", "h100-sxm", "existing-reserved"): 1}
    assert inst.contracts[("chicago", "h100-sxm")].committed["existing-reserved"].rate == 0.0
    with_fleet = brute_force(inst)
    assert with_fleet < optimum  # a free node is worth something on this instance
    result = solve(inst, SolverSettings(exact=True, mip_gap=1e-9, time_limit_s=60))
    assert result.status == "optimal"
    assert result.objective_usd == pytest.approx(with_fleet, rel=1e-6)
    assert result.solution.committed.get(("chicago", "h100-sxm", "existing-reserved"), 0) <= 1


def test_the_default_solve_brackets_the_optimum_with_a_fleet():
    inst = tiny_instance([START, _fleet(SIGNED)])
    best = brute_force(inst)
    result = solve(inst, SolverSettings(mip_gap=1e-6, time_limit_s=60))
    assert result.best_bound_usd <= best * (1 + 1e-9)
    assert best <= result.objective_usd * (1 + 1e-9)


def test_a_contract_ending_inside_the_year_is_up_for_renewal_and_its_rent_sunk():
    """2 nodes × 8 GPUs at $2/GPU-hour until 2027-06-30: 181 days of 2027 are sunk rent."""
    s, _ = load_scenario(TINY, [START, _fleet(
        "site: dallas, gpu: h100-sxm, nodes: 2, contract: reserved, start: 2026-07-01, end: 2027-06-30, "
        "usd_per_gpu_hour: 2.0")])
    year = fleet_year(s)
    assert year.nodes == {}
    assert year.lapsing == [{"site": "dallas", "gpu": "h100-sxm", "nodes": 2, "end": "2027-06-30"}]
    assert year.sunk_usd == pytest.approx(2.0 * 8 * 2 * 181 * 24)


def test_keeping_an_owned_node_costs_colocation_and_the_value_it_loses_in_the_year():
    """Bought 2025-01-01 for $300,000 over 5 years: at 2027-01-01 (730 days, 2.0 years) its book
    value is $180,000, a year later $120,000."""
    s, _ = load_scenario(TINY, [START, _fleet(
        "site: chicago, gpu: h100-sxm, nodes: 3, contract: owned, purchased: 2025-01-01, "
        "capex_usd_per_node: 300000, life_years: 5")])
    inst = tiny_instance([START, _fleet("site: chicago, gpu: h100-sxm, nodes: 3, contract: owned, "
                                        "purchased: 2025-01-01, capex_usd_per_node: 300000, life_years: 5")])
    site, a = s.sites["chicago"], s.accelerators["h100-sxm"]
    colo = a.node_kw * site.colo_usd_per_kw_month * 12 / HOURS_PER_YEAR
    energy = a.node_kw * site.pue * site.energy_usd_per_mwh / 1000
    price = inst.contracts[("chicago", "h100-sxm")].committed["existing-owned"]
    assert price.rate == pytest.approx(colo + 60_000 / HOURS_PER_YEAR)
    assert price.energy == pytest.approx(energy)
    assert inst.existing_nodes == {("chicago", "h100-sxm", "existing-owned"): 3}


def test_the_plan_reports_the_fleet_and_an_old_folder_without_its_columns_still_reads(tmp_path):
    plan = make_plan(TINY, [START, _fleet(SIGNED)], effort="first")
    fleet = plan.summary["fleet"]
    assert fleet["existing"][0]["nodes"] == 1
    proc = plan.tables["procurement"].set_index(["site", "gpu"])
    assert proc.loc[("chicago", "h100-sxm"), "existing_reserved_nodes"] == fleet["existing"][0]["used_nodes"]
    write_plan(plan, tmp_path / "p")
    table = tmp_path / "p" / "procurement.csv"
    old = [",".join(c for i, c in enumerate(line.split(",")) if i not in (5, 6)) for line in table.read_text().splitlines()]
    assert "existing" in table.read_text().splitlines()[0] and "existing" not in old[0]
    table.write_text("\n".join(old) + "\n")
    again = read_plan(tmp_path / "p").tables["procurement"]
    assert (again["existing_reserved_nodes"] == 0).all()


@pytest.mark.parametrize("rows, field", [
    (["site: nowhere, gpu: h100-sxm, nodes: 1, contract: reserved, end: 2028-01-01"], "site"),
    (["site: chicago, gpu: h100-sxm, nodes: 1, contract: reserved"], "end"),
    (["site: chicago, gpu: h100-sxm, nodes: 1, contract: owned"], "purchased"),
    (["site: chicago, gpu: h100-sxm, nodes: 1, contract: reserved, end: 2028-13-01"], "YYYY-MM-DD"),
])
def test_a_bad_fleet_row_is_named(rows, field):
    with pytest.raises(ScenarioError) as err:
        load_scenario(TINY, [START, _fleet(*rows)])
    assert "fleet" in str(err.value) and field in str(err.value)


def test_a_fleet_needs_the_plans_first_day():
    with pytest.raises(ScenarioError, match="horizon.start"):
        load_scenario(TINY, [_fleet(SIGNED)])


def test_the_report_shows_the_fleet_and_the_churn_it_moved_by():
    plan = make_plan(TINY, [START, _fleet(SIGNED)], effort="first")
    summary = dict(plan.summary, churn={
        "growth_factor": None, "growth_nodes": 1, "max_removed_nodes": None, "max_changes": None, "previous_nodes": 1,
        "nodes": 2, "changes_used": 1, "changes": [{"site": "chicago", "gpu": "h100-sxm", "previous_committed": 1,
                                                    "committed": 2, "previous_ondemand_peak": 0, "ondemand_peak": 0}],
        "shadow_prices": [{"limit": "growth", "site": "chicago", "gpu": "h100-sxm", "usd_per_node": 1234.5}],
        "shadow_price_method": "dual"})
    page = fleet_html(summary) + churn_html(summary)
    assert "The fleet it started from (2027-01-01)" in page and "already signed" in page
    assert "Moving from the previous fleet" in page
    assert "$1,234" in page or "$1,235" in page or "$1.23" in page


def test_a_fleet_from_a_csv_and_its_bad_row_named(tmp_path):
    text = TINY.read_text() + "fleet:\n  contracts: fleet.csv\n"
    (tmp_path / "s.yaml").write_text(text.replace("horizon:\n", "horizon:\n  start: 2027-01-01\n", 1))
    (tmp_path / "fleet.csv").write_text("site,gpu,nodes,contract,start,end\n"
                                        "chicago,h100-sxm,1,reserved,2026-01-01,2028-12-31\n")
    s, _ = load_scenario(tmp_path / "s.yaml")
    assert [(r.site, r.nodes, r.end) for r in s.fleet.contracts] == [("chicago", 1, "2028-12-31")]
    (tmp_path / "fleet.csv").write_text("site,gpu,nodes,contract,start,end\n"
                                        "chicago,h100-sxm,1,reserved,2026-01-01,2028-12-31\n"
                                        "chicago,h100-sxm,many,reserved,2026-01-01,2028-12-31\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(tmp_path / "s.yaml")
    assert "fleet.csv" in str(err.value) and "line 3" in str(err.value) and "nodes" in str(err.value)


def test_a_plan_folder_is_the_next_years_fleet(tmp_path):
    """What plan A signed becomes plan B's fleet a year later: its 3-year reservations still run
    (rent sunk, counted), its 1-year ones ended the day before B's first day (up for renewal);
    a multi-year folder gives its last year's."""
    a = tmp_path / "a"
    assert main(["plan", str(TINY), "--effort", "first", "--no-report", "--quiet", "--out", str(a),
                 "--set", "policy.reserved_terms=[1y, 3y]"]) == 0
    proc = read_plan(a).tables["procurement"].query("site != '*'")
    b = tmp_path / "b"
    assert main(["plan", str(TINY), "--effort", "first", "--no-report", "--quiet", "--out", str(b),
                 "--set", START, "--fleet-from-plan", str(a)]) == 0
    fleet = json.loads((b / "summary.json").read_text())["fleet"]
    held = {(r["site"], r["gpu"]): r["nodes"] for r in fleet["existing"] if r["term"] == "existing-reserved"}
    assert held == {(r.site, r.gpu): int(r.reserved_3y_nodes) for r in proc.itertuples() if r.reserved_3y_nodes}
    ended = {(r["site"], r["gpu"]): r["nodes"] for r in fleet["up_for_renewal"]}
    assert ended == {(r.site, r.gpu): int(r.reserved_1y_nodes) for r in proc.itertuples() if r.reserved_1y_nodes}
    assert held or ended  # the tiny plan signs something
