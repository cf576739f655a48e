"""A plan folder is consistent with itself: costs add up, routed arcs meet their objectives,
the reference plan serves everything and beats the hand-made baseline; infeasible scenarios
get a diagnosis."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from optimizer.base.errors import InfeasibleError
from optimizer.cli.main import main
from optimizer.commands.pipeline import make_plan
from optimizer.folder.read import read_plan
from optimizer.folder.write import write_plan

TINY = Path(__file__).parent / "data" / "tiny.yaml"


@pytest.fixture(scope="module")
def reference_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("plans") / "reference"
    assert main(["plan", "--out", str(out), "--quiet"]) in (0, 4)
    return read_plan(out), out


def test_plan_folder_has_every_table(reference_plan):
    _, out = reference_plan
    for name in ("summary.json", "procurement.csv", "pools.csv", "routing.csv", "slo.csv", "curves.csv",
                 "scenario.json", "plan.xlsx"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    for key in ("scenario", "status", "objective_usd", "best_bound_usd", "mip_gap", "solve_seconds", "total_cost_usd",
                "cost_per_million_tokens_usd", "goodput_tokens_per_s_avg", "goodput_tokens_per_s_peak",
                "tokens_per_s_per_mw", "unserved_fraction", "reserved_share_of_gpu_hours"):
        assert key in summary, key


def test_costs_add_up_from_procurement(reference_plan):
    plan, _ = reference_plan
    proc = plan.tables["procurement"]
    assert proc["cost_usd"].sum() == pytest.approx(plan.summary["total_cost_usd"], rel=1e-9)
    parts = ["cost_reserved_usd", "cost_owned_usd", "cost_energy_usd", "cost_ondemand_usd", "cost_ramp_usd"]
    nodes = proc[proc["gpu"] != "egress"]
    assert ((nodes[parts].sum(axis=1) - nodes["cost_usd"]).abs() <= 1e-9 * nodes["cost_usd"].abs() + 1e-6).all()
    assert plan.summary["objective_usd"] == pytest.approx(plan.summary["total_cost_usd"] + plan.summary["unserved_penalty_usd"])
    by_workload = sum(plan.summary["cost_usd_by_workload"].values())
    assert by_workload == pytest.approx(plan.summary["total_cost_usd"], rel=1e-6)


def test_every_routed_arc_meets_its_objectives(reference_plan):
    plan, _ = reference_plan
    slo, routing = plan.tables["slo"], plan.tables["routing"]
    assert (slo["ttft_p99_ms_predicted"] <= slo["ttft_p99_ms_objective"] + 1e-6).all()
    parts = slo[["network_ms", "overhead_ms", "queue_ms", "prefill_ms", "transfer_ms", "first_token_ms"]].sum(axis=1)
    assert (parts - slo["ttft_p99_ms_predicted"]).abs().max() < 1e-6
    routed = set(map(tuple, routing[["metro", "workload", "site", "tier"]].drop_duplicates().to_numpy()))
    assert routed == set(map(tuple, slo[["metro", "workload", "site", "tier"]].to_numpy()))


def test_every_routed_arc_meets_its_itl_objective(reference_plan):
    plan, _ = reference_plan
    slo = plan.tables["slo"]
    assert (slo["itl_p99_ms_predicted"] <= slo["itl_p99_ms_objective"] + 1e-6).all()


def test_reference_serves_all_demand_and_beats_the_baseline(reference_plan):
    plan, _ = reference_plan
    s = plan.summary
    assert s["unserved_fraction"] < 1e-6
    assert s["baseline_cost_usd"] > s["total_cost_usd"]
    assert 0 <= s["best_bound_usd"] <= s["objective_usd"]


def test_pools_hold_whole_replicas_within_their_nodes(reference_plan):
    plan, _ = reference_plan
    pools, proc = plan.tables["pools"], plan.tables["procurement"]
    assert (pools["replicas"] == pools["replicas"].round()).all()
    nominal = pools[pools["lost_site"].isna()]
    gpus = (nominal["replicas"] * nominal["gpus_per_replica"]).groupby(
        [nominal["site"], nominal["gpu"], nominal["period"], nominal["hour"]]).sum()
    reserved = proc.set_index(["site", "gpu"])["reserved_nodes"]
    for (site, gpu, _, _), used in gpus.items():
        assert used <= 8 * (reserved.get((site, gpu), 0) + proc.set_index(["site", "gpu"]).loc[(site, gpu), "ondemand_nodes_peak"])


def test_written_plan_reads_back_identically(tmp_path):
    plan = make_plan(TINY, exact=True)
    out = write_plan(plan, tmp_path / "tiny")
    back = read_plan(out)
    assert back.summary["total_cost_usd"] == pytest.approx(plan.summary["total_cost_usd"])
    pd.testing.assert_frame_equal(back.tables["procurement"], plan.tables["procurement"], check_dtype=False, atol=1e-3)
    assert not list(tmp_path.glob(".tiny*")), "no temporary folder left behind"


def test_unreachable_demand_gets_a_diagnosis(tmp_path):
    """Chat from Chicago with a 60 ms TTFT objective is out of reach of every site."""
    with pytest.raises(InfeasibleError) as err:
        make_plan(TINY, ["workloads.code-completion.ttft_p99_ms=85"], exact=True)
    text = str(err.value)
    assert "code-completion from chicago cannot meet its 85 ms p99 TTFT" in text
    assert "ms over" in text


def test_a_round_trip_just_over_a_tier_is_diagnosed_as_the_tier(tmp_path):
    """A 13.5 ms round trip fits a 400 ms objective, but above the 1 ms tier it is planned in
    the 390 ms one, which leaves nothing: the diagnosis names the tier and a bound that works."""
    with pytest.raises(InfeasibleError) as err:
        make_plan(TINY, ["serving.tier_rtt_ms=[1, 390]"], exact=True)
    text = str(err.value)
    assert "just over the 1 ms latency tier" in text and "sized for the 390 ms tier" in text
    suggested = text.split("e.g. ")[1].splitlines()[0]
    out = str(tmp_path / "p")
    assert main(["plan", str(TINY), "--out", out, "--quiet", "--no-report", "--exact",
                 "--set", f"serving.tier_rtt_ms={suggested}"]) == 0


def test_cli_infeasible_exit_code_and_no_folder(tmp_path, capsys):
    out = tmp_path / "never"
    code = main(["plan", str(TINY), "--out", str(out), "--quiet", "--exact", "--set", "workloads.code-completion.ttft_p99_ms=85"])
    assert code == 3
    assert not out.exists()
    assert "cannot meet" in capsys.readouterr().err


def test_reference_plan_exports_to_the_stacks_that_can_express_it(reference_plan, tmp_path):
    """Every manifest of the reference plan validates against its vendored schema and reads
    back to the plan's replicas (tests/test_export.py does the same, and more, on us-east)."""
    from manifests import manifest_kind, manifests_in

    from optimizer.commands.export import validate
    from optimizer.commands.export.fleet import POOL_KEY, read_fleet

    _, out = reference_plan
    for fmt in ("dynamo", "llm-d", "vllm-stack"):
        assert main(["export", str(out), "--to", fmt, "--out", str(tmp_path / fmt)]) == 0
        for path, doc in manifests_in(tmp_path / fmt):
            validate.check(manifest_kind(doc), doc, str(path))
    assert main(["export", str(out), "--to", "skyserve", "--out", str(tmp_path / "sky")]) == 2  # disaggregated pools
    assert main(["import-deployment", *map(str, (tmp_path / "dynamo").glob("*/*.yaml")), "--out",
                 str(tmp_path / "running"), "--against", str(out)]) == 0
    running = pd.read_csv(tmp_path / "running" / "pools.csv", keep_default_na=False)
    fleet = read_fleet(out)
    t = fleet.busiest_slice()
    assert {tuple(r[k] for k in POOL_KEY): r["replicas"] for _, r in running.iterrows()} == \
        {p.key: p.replicas.get(t, 0) for p in fleet.pools}
