"""fleetplan export / import-deployment: manifests that validate against the vendored
schemas, replicas and configs that survive the round trip, autoscaler bounds equal to the
plan's committed and peak capacity, a rollout that never leaves a pool short, and bad input
refused with nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from manifests import manifest_kind, manifests_in

from optimizer.base.errors import ScenarioError
from optimizer.cli.main import main
from optimizer.commands.export import validate
from optimizer.commands.export.fleet import POOL_KEY, read_fleet
from optimizer.commands.export.rollout import steps
from optimizer.scenario import DATA_DIR

US_EAST = DATA_DIR / "scenarios" / "us-east.yaml"
TINY = Path(__file__).parent / "data" / "tiny.yaml"  # colocated pools only
DISAGGREGATED = ("dynamo", "llm-d", "vllm-stack")


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    # us-east-low: less demand served colocated only, so that moving to us-east starts and grows
    # some pools and stops others
    made = {"us-east": (US_EAST, []),
            "us-east-low": (US_EAST, ["--set", "demand.scale=0.7", "--set", "serving.modes=[colocated]"]),
            "tiny": (TINY, [])}
    for name, (scenario, extra) in made.items():
        assert main(["plan", str(scenario), "--out", str(root / name), "--quiet", "--no-report", *extra]) == 0
    return root


@pytest.fixture(scope="module")
def exported(plans):
    """Every format of the plan that suits it: us-east (disaggregated) and tiny (colocated)."""
    out = {}
    for fmt, plan in [*((f, "us-east") for f in DISAGGREGATED), *((f, "tiny") for f in (*DISAGGREGATED, "skyserve"))]:
        target = plans / f"{plan}-{fmt}"
        assert main(["export", str(plans / plan), "--to", fmt, "--out", str(target)]) == 0
        out[(fmt, plan)] = target
    return out


def test_every_manifest_validates_against_its_vendored_schema(exported):
    kinds = set()
    for folder in exported.values():
        for path, doc in manifests_in(folder):
            validate.check(manifest_kind(doc), doc, str(path))
            kinds.add(manifest_kind(doc))
    assert kinds == set(validate.SCHEMAS)


@pytest.mark.parametrize("kind, path", [
    ("DynamoGraphDeployment", ("spec", "services", "*", "replicaCount")),
    ("DynamoGraphDeploymentScalingAdapter", ("spec", "scalingPolicy", "ceiling")),
    ("DynamoGraphDeploymentRequest", ("spec", "profilingConfig", "config", "sla", "p99")),
    ("LLMInferenceService", ("spec", "parallelism", "tensorParallel")),
    ("production-stack values", ("servingEngineSpec", "modelSpec", 0, "gpus")),
    ("SkyServe service", ("service", "replica_policy", "ceiling")),
])
def test_a_field_the_schema_does_not_know_fails(exported, kind, path):
    doc = next(d for folder in exported.values() for _, d in manifests_in(folder) if manifest_kind(d) == kind)
    node = doc
    for step in path[:-1]:
        node = node[next(k for k in node if k != "Frontend")] if step == "*" else node[step]
    node[path[-1]] = 1
    with pytest.raises(ScenarioError, match=path[-1]):
        validate.check(kind, doc, "edited.yaml")


@pytest.mark.parametrize("fmt, plan", [*((f, "us-east") for f in DISAGGREGATED),
                                       *((f, "tiny") for f in (*DISAGGREGATED, "skyserve"))])
def test_export_then_import_round_trips_replicas_and_configs(plans, exported, fmt, plan):
    folder = exported[(fmt, plan)]
    fleet_dir = plans / f"imported-{plan}-{fmt}"
    manifests = [str(p) for p in sorted(folder.glob("*/*.yaml"))]
    assert main(["import-deployment", *manifests, "--out", str(fleet_dir), "--against", str(plans / plan)]) == 0
    running = pd.read_csv(fleet_dir / "pools.csv", keep_default_na=False)
    fleet = read_fleet(plans / plan)
    t = tuple(yaml.safe_load((folder / "export.json").read_text())["slice"].split("/"))
    t = (t[0], t[1], int(t[2]))
    planned = {p.key: p.replicas.get(t, 0) for p in fleet.pools}
    got = {tuple(r[k] for k in POOL_KEY): r["replicas"] for _, r in running.iterrows()}
    assert got == planned
    assert (pd.read_csv(fleet_dir / "against.csv")["difference"] == 0).all()
    per_pool = {p.key: p for p in fleet.pools}
    for _, r in running.iterrows():
        p = per_pool[tuple(r[k] for k in POOL_KEY)]
        assert (r["gpus_per_replica"], r["tp"], r["nodes"]) == (p.gpus, p.tp, p.nodes)


def test_bounds_are_the_committed_and_peak_replicas_of_every_pool_and_hour(plans, exported):
    """Recomputed here from pools.csv and procurement.csv: floor = the pool's share of the
    committed GPUs, ceiling = its share of the busiest hour's GPUs (optimizer/commands/export/bounds.py)."""
    plan = plans / "us-east"
    pools = pd.read_csv(plan / "pools.csv", keep_default_na=False)
    pools = pools[pools["lost_site"] == ""]
    proc = pd.read_csv(plan / "procurement.csv").set_index(["site", "gpu"])
    per_node = {"b200": 8, "mi300x": 8, "h100-sxm": 8, "h200-sxm": 8, "l40s": 8}
    used = (pools["replicas"] * pools["gpus_per_replica"]).groupby(
        [pools["site"], pools["gpu"], pools["period"], pools["day_type"], pools["hour"]]).sum()
    bounds = pd.concat(pd.read_csv(f, keep_default_na=False) for f in exported[("dynamo", "us-east")].glob("*/bounds.csv"))
    checked = 0
    for _, b in bounds.iterrows():
        n = b["replicas"]
        u = used.get((b["site"], b["gpu"], b["period"], b["day_type"], b["hour"]), 0)
        committed = proc.loc[(b["site"], b["gpu"]), "reserved_nodes"] * per_node[b["gpu"]]
        busiest = (proc.loc[(b["site"], b["gpu"]), "reserved_nodes"]
                   + proc.loc[(b["site"], b["gpu"]), "ondemand_nodes_peak"]) * per_node[b["gpu"]]
        expect_floor = n * min(u, committed) // u if u else 0  # integers: a float product may read 31.999…
        expect_ceiling = n * busiest // u if u else 0
        assert (b["floor"], b["ceiling"]) == (expect_floor, expect_ceiling), b.to_dict()
        assert b["floor"] <= n <= b["ceiling"]
        checked += n > 0
    assert checked > 20
    # together the pools never hold more than the committed nodes (floor) or the peak's (ceiling)
    gpus = bounds.assign(f=bounds["floor"] * bounds["config"].str.extract(r"/x(\d+)/")[0].astype(int),
                         c=bounds["ceiling"] * bounds["config"].str.extract(r"/x(\d+)/")[0].astype(int))
    for (site, gpu, *_), g in gpus.groupby(["site", "gpu", "period", "day_type", "hour"]):
        reserved, peak = proc.loc[(site, gpu), ["reserved_nodes", "ondemand_nodes_peak"]]
        assert g["f"].sum() <= reserved * per_node[gpu] and g["c"].sum() <= (reserved + peak) * per_node[gpu]
    # the adapters' native bounds are those of the exported slice
    slice_ = yaml.safe_load((exported[("dynamo", "us-east")] / "export.json").read_text())["slice"]
    at = bounds[bounds[["period", "day_type", "hour"]].astype(str).agg("/".join, axis=1) == slice_]
    native = {}
    for _, doc in manifests_in(exported[("dynamo", "us-east")]):
        if doc["kind"] == "DynamoGraphDeploymentScalingAdapter":
            meta = doc["metadata"]
            key = (meta["labels"]["fleetplan.io/site"], meta["annotations"]["fleetplan.io/config"],
                   int(meta["annotations"]["fleetplan.io/tier"]), int(meta["annotations"]["fleetplan.io/speed"]))
            assert key not in native  # one adapter per pool
            native[key] = doc["spec"]["scalingPolicy"]
    for _, b in at.iterrows():
        policy = native[(b["site"], b["config"], b["tier"], b["speed"])]
        assert policy["minReplicas"] == b["floor"] and policy.get("maxReplicas", 0) == b["ceiling"]


def test_rollout_never_leaves_a_pool_below_its_objective(plans, tmp_path):
    old, new = read_fleet(plans / "us-east-low"), read_fleet(plans / "us-east")
    t = new.busiest_slice()
    need = {"old": {p.key: p.replicas.get(t, 0) for p in old.pools},
            "new": {p.key: p.replicas.get(t, 0) for p in new.pools}}
    plan = steps(old, new, t)
    assert [s.name for s in plan] == ["scale-up", "switch-routing", "scale-down"]
    assert any(need["old"].get(k, 0) != n for k, n in need["new"].items())  # the plans differ
    for step in plan:
        for key, n in need[step.routing].items():
            assert step.replicas.get(key, 0) >= n, (step.name, key)
    assert plan[-1].replicas == {k: need["new"].get(k, 0) for k in plan[-1].replicas}
    out = tmp_path / "rollout"
    assert main(["export", str(plans / "us-east"), "--from-plan", str(plans / "us-east-low"), "--to", "dynamo",
                 "--out", str(out)]) == 0
    table = pd.read_csv(out / "rollout.csv", keep_default_na=False)
    assert list(table["action"].drop_duplicates()) == ["scale-up", "switch-routing", "scale-down"]
    up = table[table["action"] == "scale-up"]
    assert (up["replicas_to"].astype(int) > up["replicas_from"].astype(int)).all()
    fleet_dir = tmp_path / "step1"
    assert main(["import-deployment", *map(str, (out / "steps" / "1-scale-up").glob("*/*.yaml")),
                 "--out", str(fleet_dir)]) == 0
    running = pd.read_csv(fleet_dir / "pools.csv", keep_default_na=False)
    assert {tuple(r[k] for k in POOL_KEY): r["replicas"] for _, r in running.iterrows()} == plan[0].replicas


def test_a_pool_the_format_cannot_express_is_refused_with_nothing_written(plans, capsys):
    out = plans / "never"
    assert main(["export", str(plans / "us-east"), "--to", "skyserve", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "pools.csv" in err and "field 'role'" in err and "decode pool" in err
    assert not out.exists()


def test_kv_transfer_rule_warns_and_strict_refuses(plans, capsys):
    """A prefill pool at TP 2 handing KV to a decode pool at TP 1 breaks NixlConnector's rule
    (the decode TP a multiple of the prefill's): a warning, or with --strict a refusal."""
    from dataclasses import replace

    from optimizer.commands.export.bounds import bounds_table
    from optimizer.commands.export.common import ExportJob
    from optimizer.commands.export.llmd import check_kv_transfer

    fleet = read_fleet(plans / "us-east")
    dep = next(d for d in fleet.deployments() if d.of_role("prefill") and d.of_role("decode"))
    dep.pools = [replace(p, tp=2 if p.role == "prefill" else 1) for p in dep.pools]
    at, bounds = fleet.slices[0], bounds_table(fleet)
    loose = ExportJob(fleet, at, bounds)
    check_kv_transfer(dep, loose)
    assert loose.warnings and "TP 2" in loose.warnings[0] and "TP 1" in loose.warnings[0]
    with pytest.raises(ScenarioError) as refused:
        check_kv_transfer(dep, ExportJob(fleet, at, bounds, strict=True))
    assert refused.value.field == "parallelism.tensor"
    # the plan as written: --strict exports it where every hand-off keeps the rule, and refuses
    # it naming the rule where one does not
    breaks = [d for d in read_fleet(plans / "us-east").deployments()
              if any(dec.tp % pre.tp for pre in d.of_role("prefill") for dec in d.of_role("decode"))]
    code = main(["export", str(plans / "us-east"), "--to", "llm-d", "--out", str(plans / "kv"), "--strict"])
    assert code == (2 if breaks else 0)
    if breaks:
        assert "NixlConnector" in capsys.readouterr().err and not (plans / "kv").exists()


def test_a_plan_folder_from_an_older_fleetplan_is_refused(plans, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(plans / "tiny", old)
    curves = pd.read_csv(old / "curves.csv")
    curves.drop(columns=["speed"]).to_csv(old / "curves.csv", index=False)
    assert main(["export", str(old), "--to", "dynamo", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "curves.csv" in err and "speed" in err
    assert not (tmp_path / "out").exists()


def test_out_replaces_only_a_previous_export(plans, exported, tmp_path, capsys):
    again = exported[("dynamo", "tiny")]
    assert main(["export", str(plans / "tiny"), "--to", "llm-d", "--out", str(again)]) == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["export", str(plans / "tiny"), "--to", "dynamo", "--out", str(mine)]) == 2
    assert (mine / "notes.txt").read_text() == "keep"
    assert main(["export", str(plans / "tiny"), "--to", "dynamo", "--out", str(tmp_path / "a"), "--slice", "Y/all/7"]) == 2
    assert "--slice" in capsys.readouterr().err


def test_import_refuses_what_it_cannot_read(tmp_path, capsys):
    bad = tmp_path / "deploy.yaml"
    bad.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n")
    assert main(["import-deployment", str(bad), "--out", str(tmp_path / "fleet")]) == 2
    assert "deploy.yaml" in capsys.readouterr().err and not (tmp_path / "fleet").exists()


@pytest.fixture(scope="module")
def moe_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe") / "plan"
    assert main(["plan", str(DATA_DIR / "scenarios" / "deepseek-moe.yaml"), "--effort", "first", "--out", str(out),
                 "--quiet", "--no-report"]) == 0
    return out


@pytest.mark.parametrize("fmt", DISAGGREGATED)
def test_expert_parallel_and_precisions_are_written_and_read_back(moe_plan, tmp_path, fmt):
    fleet = read_fleet(moe_plan)
    ep = [p for p in fleet.pools if p.config.endswith("decode-ep")]
    assert ep and all((p.tp, p.dp, p.expert_parallel, p.weight_dtype, p.kv_dtype) == (1, 8, True, "fp8", "fp8")
                      for p in ep)
    out = tmp_path / fmt
    assert main(["export", str(moe_plan), "--to", fmt, "--out", str(out)]) == 0
    text = "\n".join(p.read_text() for p in out.glob("*/*.yaml"))
    if fmt == "llm-d":
        assert "expert: true" in text and "dataLocal: 8" in text
    else:
        assert "--enable-expert-parallel" in text and "--data-parallel-size" in text
    assert "--quantization" in text and "--kv-cache-dtype" in text
    assert main(["import-deployment", *map(str, out.glob("*/*.yaml")), "--out", str(tmp_path / "fleet")]) == 0
    running = pd.read_csv(tmp_path / "fleet" / "pools.csv", keep_default_na=False)
    per_pool = {p.key: p for p in fleet.pools}
    for _, r in running.iterrows():
        p = per_pool[tuple(r[k] for k in POOL_KEY)]
        assert (r["gpus_per_replica"], r["tp"], r["dp"], r["nodes"], r["expert_parallel"], r["weight_dtype"],
                r["kv_dtype"]) == (p.gpus, p.tp, p.dp, p.nodes, p.expert_parallel, p.weight_dtype, p.kv_dtype)


def test_engine_arguments_round_trip_speculation_and_4bit_formats(plans):
    from dataclasses import replace

    from optimizer.commands.export.bounds import bounds_table
    from optimizer.commands.export.common import ExportJob, engine_of, vllm_args

    fleet = read_fleet(plans / "tiny")
    ctx = ExportJob(fleet, fleet.busiest_slice(), bounds_table(fleet))
    p = replace(fleet.pools[0], tp=2, dp=4, expert_parallel=True, weight_dtype="nvfp4", kv_dtype="fp8",
                speculative="mtp", draft_tokens=2)
    args = vllm_args(p, ctx)
    assert args[args.index("--quantization") + 1] == "modelopt_fp4"
    assert engine_of(args, 99) == {"tp": 2, "dp": 4, "expert_parallel": True, "weight_dtype": "nvfp4",
                                   "kv_dtype": "fp8", "speculative": "mtp", "draft_tokens": 2}
    assert any("nvfp4 weights need a checkpoint" in w for w in ctx.warnings)
    assert engine_of(vllm_args(replace(p, speculative="draft"), ctx), 1)["speculative"] == ""
    assert any("no draft model" in w for w in ctx.warnings)


def test_a_spot_plan_exports_spot_pools(tmp_path):
    plan = tmp_path / "spot"
    assert main(["plan", str(US_EAST), "--effort", "first", "--set", "spot.enabled=true", "--set",
                 "serving.modes=[colocated]", "--out", str(plan), "--quiet", "--no-report"]) == 0
    spot = [p for p in read_fleet(plan).pools if p.gpu.endswith("-spot")]
    assert spot
    for fmt in ("skyserve", "dynamo"):
        out = tmp_path / fmt
        assert main(["export", str(plan), "--to", fmt, "--out", str(out)]) == 0
        assert main(["import-deployment", *map(str, out.glob("*/*.yaml")), "--out", str(tmp_path / f"in-{fmt}"),
                     "--against", str(plan)]) == 0
        assert (pd.read_csv(tmp_path / f"in-{fmt}" / "against.csv")["difference"] == 0).all()
    services = [d for _, d in manifests_in(tmp_path / "skyserve")]
    on_spot = [d for d in services if d["resources"]["use_spot"]]
    assert len(on_spot) == len({(p.site, p.config, p.tier) for p in spot})
    assert all(d["envs"]["FLEETPLAN_ACCELERATOR"].endswith("-spot") and
               "-spot" not in next(iter(d["resources"]["accelerators"])) for d in on_spot)


def test_every_catalogue_model_maps_to_a_repository():
    from optimizer.commands.export.fleet import model_repo

    models = pd.read_csv(DATA_DIR / "models.csv")["id"]
    assert len(models) >= 12
    for m in models:
        org, _, name = model_repo(m, {}).partition("/")
        assert org and name and "/" not in name, m


def test_a_running_fleet_starts_a_plan_and_compares_with_plans(plans, exported, tmp_path, capsys):
    import math

    running = tmp_path / "running"
    assert main(["import-deployment", *map(str, exported[("dynamo", "us-east")].glob("*/*.yaml")),
                 "--out", str(running)]) == 0
    gpus = pd.read_csv(running / "gpus.csv")
    new = tmp_path / "new"
    assert main(["plan", str(US_EAST), "--set", "horizon.start=2027-01-01", "--fleet-from-plan", str(running),
                 "--out", str(new), "--quiet", "--no-report", "--effort", "first"]) == 0
    proc = pd.read_csv(new / "procurement.csv").set_index(["site", "gpu"])
    for r in gpus.itertuples():
        expect = math.ceil(r.gpus / 8)
        got = int(proc.loc[(r.site, r.gpu), "existing_reserved_nodes"]) if (r.site, r.gpu) in proc.index else 0
        assert got == expect, (r.site, r.gpu)
    capsys.readouterr()
    cmp = tmp_path / "cmp"
    assert main(["compare", str(plans / "us-east"), str(running), "--out", str(cmp)]) == 0
    assert "replicas: 0 of" in capsys.readouterr().out
    table = pd.read_csv(cmp / "compare.csv", keep_default_na=False)
    g = table[table["section"] == "gpus"].pivot(index="key", columns="plan", values="value").astype(int)
    assert (g["us-east"] == g["running"]).all() and g["running"].sum() == gpus["gpus"].sum()
    assert main(["compare", str(plans / "us-east-low"), str(running)]) == 0
    assert "replicas: 0 of" not in capsys.readouterr().out


def _native_bounds(fmt: str, doc: dict) -> list[tuple[dict, int, int]]:
    """(annotations and labels, floor, ceiling) of every pool a manifest bounds natively."""
    if fmt == "llm-d":
        parts = [w for w in (doc["spec"], doc["spec"].get("prefill")) if w and w.get("annotations")]
        return [({**w["labels"], **w["annotations"]}, w.get("scaling", {}).get("minReplicas", 0),
                 w.get("scaling", {}).get("maxReplicas", 0)) for w in parts]
    if fmt == "vllm-stack":
        return [({**m["labels"], **m["annotations"]}, m["keda"]["minReplicaCount"], m["keda"]["maxReplicaCount"])
                for m in doc["servingEngineSpec"]["modelSpec"]]
    meta = {"fleetplan.io/" + k.removeprefix("FLEETPLAN_").lower(): v for k, v in doc["envs"].items()}
    policy = doc["service"]["replica_policy"]
    return [(meta, policy["min_replicas"], policy["max_replicas"])]


@pytest.mark.parametrize("fmt, plan", [("llm-d", "us-east"), ("vllm-stack", "us-east"), ("skyserve", "tiny")])
def test_native_bounds_are_those_of_bounds_csv(exported, fmt, plan):
    folder = exported[(fmt, plan)]
    bounds = pd.concat(pd.read_csv(f, keep_default_na=False) for f in folder.glob("*/bounds.csv"))
    slice_ = yaml.safe_load((folder / "export.json").read_text())["slice"]
    at = bounds[bounds[["period", "day_type", "hour"]].astype(str).agg("/".join, axis=1) == slice_]
    want = {(b["site"], b["config"], int(b["tier"]), int(b["speed"])): (b["floor"], b["ceiling"])
            for _, b in at.iterrows()}
    seen = 0
    for _, doc in manifests_in(folder):
        for meta, floor, ceiling in _native_bounds(fmt, doc):
            key = (meta["fleetplan.io/site"], meta["fleetplan.io/config"], int(meta["fleetplan.io/tier"]),
                   int(meta["fleetplan.io/speed"]))
            assert (floor, ceiling) == want[key], key
            seen += 1
    assert seen == len(want)


def test_names_cut_to_63_characters_stay_distinct():
    """Two latency tiers of a pool whose names differ only past character 63 (found: a
    SkyServe file of one tier overwrote the other's): each cut name ends in its own digest."""
    from optimizer.commands.export.fleet import dns_name

    long = ["code-completion", "ashburn", "colocated", "colocated-c256", "b200-spot", "x1"]
    t0, t1 = dns_name(*long, "t0"), dns_name(*long, "t1")
    assert t0 != t1 and len(t0) <= 63 and len(t1) <= 63
    assert t0.startswith("code-completion-ashburn-colocated-colocated-c256-b200")
    assert dns_name("chat", "ashburn", "x4") == "chat-ashburn-x4"  # short names as they were
