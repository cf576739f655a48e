"""Carbon: the grid's intensity by hour, the tonnes a plan's powered nodes emit (counted by
hand here), a price paid on them, a cap that moves load to the cleaner site, and the operated
year counting the same tonnes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from instances import DEARER_DALLAS, TINY, load_instance

from optimizer.base.errors import InfeasibleError, ScenarioError
from optimizer.commands.operate import OperatedCommitment, operate_slices
from optimizer.commands.pipeline import make_plan
from optimizer.folder.read import read_plan
from optimizer.folder.write import write_plan
from optimizer.instance.build import grid_gco2_per_kwh
from optimizer.instance.checks import preflight
from optimizer.scenario import load_scenario


def _site_rows(plan) -> pd.DataFrame:
    proc = plan.tables["procurement"]
    return proc[proc["gpu"] != "egress"].set_index(["site", "gpu"])


def _served_at(plan, site: str) -> float:
    routing = plan.tables["routing"]
    return float(routing.loc[routing["site"] == site, "requests_per_s"].sum() / routing["requests_per_s"].sum())


def test_the_grid_follows_the_sites_local_hour_and_keeps_its_annual_mean():
    """Chicago (UTC−6) has an hourly profile: at UTC hour h it reads the profile at h − 6,
    scaled so that the day's mean is the annual value; Dallas has none and reads its annual
    value every hour."""
    s, _ = load_scenario(TINY)
    row = s.grid_carbon["chicago"]
    profile = np.array(row.hourly_gco2_per_kwh)
    utc = np.arange(24)
    got = grid_gco2_per_kwh(s, "chicago", utc)
    assert got.mean() == pytest.approx(row.gco2_per_kwh)
    for h in (0, 6, 13, 20):
        assert got[h] == pytest.approx(profile[(h - 6) % 24] * row.gco2_per_kwh / profile.mean())
    assert np.all(grid_gco2_per_kwh(s, "dallas", utc) == s.grid_carbon["dallas"].gco2_per_kwh)
    assert grid_gco2_per_kwh(s, "nowhere", utc) is None


def test_a_plans_tonnes_counted_by_hand():
    """Every committed node is powered in every planned hour, an on-demand node in the hours it
    is rented: tonnes = Σ_hours h · node kW · PUE · g/kWh · nodes / 10⁶."""
    s, _ = load_scenario(TINY)
    plan = make_plan(TINY)
    slices = plan.tables["nodes"]
    hours = {(r.period, r.day_type, r.hour): r.weight_hours for r in slices.itertuples()}
    for (site, gpu), row in _site_rows(plan).iterrows():
        kw = s.accelerators[gpu].node_kw * s.sites[site].pue
        mine = slices[(slices["site"] == site) & (slices["gpu"] == gpu)]
        grams = sum(r.weight_hours * kw * float(grid_gco2_per_kwh(s, site, [r.hour])[0])
                    * (r.committed_nodes + r.ondemand_nodes) for r in mine.itertuples())
        assert row["carbon_t"] == pytest.approx(grams / 1e6, rel=1e-9)
        assert row["cost_carbon_usd"] == 0.0
    assert sum(hours.values()) == pytest.approx(8760)
    assert plan.summary["carbon"]["t_per_year"] == pytest.approx(_site_rows(plan)["carbon_t"].sum())


def test_a_carbon_price_is_paid_on_the_tonnes_and_never_raises_them():
    free = make_plan(TINY)
    priced = make_plan(TINY, ["carbon.price_usd_per_t=2000"])
    rows = _site_rows(priced)
    np.testing.assert_allclose(rows["cost_carbon_usd"], 2000 * rows["carbon_t"], rtol=1e-9)
    assert priced.summary["carbon"]["cost_usd"] == pytest.approx(2000 * priced.summary["carbon"]["t_per_year"])
    assert priced.summary["carbon"]["t_per_year"] <= free.summary["carbon"]["t_per_year"] + 1e-9
    assert priced.summary["total_cost_usd"] >= free.summary["total_cost_usd"]


def test_a_binding_cap_moves_load_to_the_cleaner_site():
    """Chicago's grid (418 g/kWh) is dirtier than Dallas's (363) and either site serves the
    tiny scenario; with Dallas's GPUs 1 % dearer the plan picks Chicago; a cap below its tonnes
    moves the load to Dallas at a higher cost, and the plan keeps the cap."""
    free = make_plan(TINY, [DEARER_DALLAS])
    tonnes = free.summary["carbon"]["t_per_year"]
    assert _served_at(free, "chicago") > 0.5  # the premise: the cap has something to move
    cap = 0.95 * tonnes
    capped = make_plan(TINY, [DEARER_DALLAS, f"carbon.cap_t_per_year={cap}"])
    assert capped.summary["carbon"]["t_per_year"] <= cap * (1 + 1e-6)
    assert capped.summary["carbon"]["over_cap_t"] == pytest.approx(0.0, abs=1e-6)
    assert _served_at(capped, "dallas") > _served_at(free, "dallas") + 0.5
    assert capped.summary["total_cost_usd"] >= free.summary["total_cost_usd"] - 1e-6
    assert capped.summary["unserved_fraction"] == 0.0


@pytest.mark.default_steps
def test_without_the_exact_model_a_capped_plan_still_keeps_its_cap():
    """Through the master and its whole plans (the default steps, not the exact model of a small
    instance): the first whole plan emits more than the master's fractional nodes and is over
    the cap, the master is solved again below it ("cap"), and the plan kept keeps the cap. L40S
    only: the master's fractional H100 replicas round to an H100 node emitting twice the cap,
    which no lower cap can undo (the moves then bring it down to an L40S node)."""
    l40s = [DEARER_DALLAS, "accelerators=[l40s]"]
    free = make_plan(TINY, l40s, exact=False)
    cap = 0.95 * free.summary["carbon"]["t_per_year"]
    capped = make_plan(TINY, [*l40s, f"carbon.cap_t_per_year={cap}"], exact=False)
    kinds = [step["kind"] for step in capped.summary["steps"]]
    assert "cap" in kinds  # the premise: the first whole plan was over the cap
    assert capped.summary["carbon"]["t_per_year"] <= cap * (1 + 1e-6)
    assert _served_at(capped, "dallas") > _served_at(free, "dallas") + 0.5
    assert capped.summary["unserved_fraction"] == 0.0


def test_a_cap_no_fleet_can_keep_is_diagnosed_as_the_cap():
    """Below what the cleanest site emits, demand can only go unserved: the error says the cap."""
    free = make_plan(TINY)
    with pytest.raises(InfeasibleError, match="carbon cap of .* is reached"):
        make_plan(TINY, [f"carbon.cap_t_per_year={0.5 * free.summary['carbon']['t_per_year']}"])


def test_the_operated_slices_count_the_plans_tonnes():
    """The plan's own slices operated on its commitment emit, and pay for, what the plan says."""
    overrides = ["carbon.price_usd_per_t=150"]
    plan = make_plan(TINY, overrides)
    inst = load_instance(TINY, overrides)
    lines = operate_slices(inst, OperatedCommitment.of_plan(inst, plan.tables)).set_index(["site", "gpu"])
    rows = _site_rows(plan)
    rows = rows[rows["carbon_t"] > 0]
    assert len(rows) > 0
    for column in ("carbon_t", "cost_carbon_usd"):
        np.testing.assert_allclose(lines[column].reindex(rows.index).fillna(0.0), rows[column], rtol=1e-6)


def test_a_price_without_a_sites_grid_is_refused(tmp_path):
    doc = yaml.safe_load(TINY.read_text())
    doc["grid_carbon"] = {"ids": ["dallas"]}
    doc["carbon"] = {"price_usd_per_t": 50}
    path = tmp_path / "no-grid.yaml"
    path.write_text(yaml.safe_dump(doc))
    s, raw = load_scenario(path)
    with pytest.raises(ScenarioError, match="chicago") as err:
        preflight(s, raw)
    assert err.value.field == "carbon"
    doc.pop("carbon")
    path.write_text(yaml.safe_dump(doc))
    preflight(*load_scenario(path))  # unpriced, uncapped: the tonnes are reported where known


def test_an_hourly_profile_needs_24_hours(tmp_path):
    doc = yaml.safe_load(TINY.read_text())
    doc["grid_carbon"] = {"ids": ["chicago", "dallas"], "patch": {"dallas": {"hourly_gco2_per_kwh": "300;310"}}}
    path = tmp_path / "short-profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match="24 hourly values") as err:
        load_scenario(path)
    assert "hourly_gco2_per_kwh" in (err.value.field or "")


def test_a_plan_folder_from_before_carbon_reads_with_none(tmp_path):
    folder = write_plan(make_plan(TINY), tmp_path / "plan")
    proc = pd.read_csv(folder / "procurement.csv").drop(columns=["carbon_t", "cost_carbon_usd"])
    proc.to_csv(folder / "procurement.csv", index=False)
    tables = read_plan(folder).tables
    assert (tables["procurement"]["carbon_t"] == 0).all()
