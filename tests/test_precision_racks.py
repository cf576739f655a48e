"""Precisions as a serving choice and racks as a site's limit (the 2026 catalogue).

Hand-computed: bytes per value of each format with its block scales, weight and KV bytes of
catalogue models, the matmul rate each format runs at on each part. The offering filter: a
rack a site cannot power or cool is not offered there; a planner's row asking for one is an
error that says why. A workload accepting only bf16 never gets a 4-bit config; accepting
more precisions never makes the tiny plan dearer (its optimum checked by enumeration)."""

from __future__ import annotations

import json

import pytest
from instances import TINY, brute_force, tiny_instance

from optimizer.base.errors import ScenarioError
from optimizer.base.precision import bytes_per_value, default_kv
from optimizer.cli.main import main
from optimizer.curves.memory import kv_budget_bytes
from optimizer.scenario import load_scenario
from optimizer.serving.configs import hardware, make_replica, workload_configs
from optimizer.solve import SolverSettings, solve

NEW_GPUS = "accelerators=[h100-sxm, h200-sxm, b200, mi300x, l40s, b300, gb200-nvl72, gb300-nvl72, mi355x]"


@pytest.fixture(scope="module")
def catalogue():
    """The reference scenario with the 2026 accelerators added (their catalogue rows come along)."""
    return load_scenario(None, [NEW_GPUS])[0]


@pytest.mark.parametrize("name, bits", [("bf16", 16), ("fp8", 8), ("nvfp4", 4 + 8 / 16), ("mxfp4", 4 + 8 / 32),
                                        ("int4", 4 + 16 / 128)])
def test_bytes_per_value_with_block_scales(name, bits):
    # NVFP4: an FP8 scale per 16 values = 4.5 bits; MXFP4: an 8-bit scale per 32 = 4.25; int4 g128 FP16 = 4.125
    assert bytes_per_value(name) == bits / 8
    assert {"nvfp4": 0.5625, "mxfp4": 0.53125, "int4": 0.515625}.get(name, bits / 8) == bits / 8


def test_weight_and_kv_bytes_by_hand(catalogue):
    s = catalogue
    sv = s.serving
    oss = make_replica(s.models["gpt-oss-120b"], s.accelerators["gb200-nvl72"], sv, 1, "mxfp4", "fp8")
    assert oss.weight_bytes == pytest.approx(116.83e9 * 0.53125)  # 62.07 GB
    assert oss.kv_bytes_per_token == 36 * 2 * 8 * 64 * 1  # all 36 layers, fp8: 36,864 B
    llama = make_replica(s.models["llama-3.3-70b"], s.accelerators["b200"], sv, 2, "nvfp4", "nvfp4")
    assert llama.weight_bytes == pytest.approx(70.554e9 * 0.5625)  # 39.69 GB
    assert llama.kv_bytes_per_token == 80 * 2 * 8 * 128 * 0.5625  # 92,160 B
    r1 = make_replica(s.models["deepseek-r1"], s.accelerators["b300"], sv, 8, "fp8", "fp8")
    assert r1.weight_bytes == pytest.approx(671e9) and r1.kv_bytes_per_token == 61 * (512 + 64)  # 35,136 B
    qwen = make_replica(s.models["qwen3-235b-a22b"], s.accelerators["mi355x"], sv, 4, "bf16", "bf16")
    assert qwen.kv_bytes_per_token == 94 * 2 * 4 * 128 * 2  # 192,512 B
    kimi = make_replica(s.models["kimi-k2"], s.accelerators["gb300-nvl72"], sv, 8, "int4", "fp8")
    assert kimi.weight_bytes == pytest.approx(1040e9 * 4.125 / 8)


@pytest.mark.parametrize("gpu, fmt, tflops", [
    ("h100-sxm", "mxfp4", 989.4),     # Hopper: no FP4 tensor cores, weight-only at the bf16 rate
    ("h100-sxm", "int4", 989.4),
    ("h100-sxm", "nvfp4", None),      # not served before Blackwell
    ("b200", "nvfp4", 9000),          # native FP4
    ("b200", "int4", 2250),           # int4 is weight-only everywhere
    ("gb300-nvl72", "mxfp4", 15000),
    ("mi355x", "mxfp4", 10066.3),
    ("mi355x", "nvfp4", None),        # AMD serves MX formats only
    ("mi325x", "mxfp4", 1307.4),      # CDNA3: weight-only
    ("a100-80gb-sxm", "fp8", None),
])
def test_matmul_rate_per_format(catalogue, gpu, fmt, tflops):
    s = load_scenario(None, [NEW_GPUS.replace("]", ", mi325x, a100-80gb-sxm]")])[0]
    hw = hardware(s.accelerators[gpu], fmt)
    assert (hw is None) if tflops is None else hw.dense_flops_per_s == pytest.approx(tflops * 1e12)


def test_kv_formats_per_part(catalogue):
    assert catalogue.accelerators["b200"].kv_precisions() == ("bf16", "fp8", "nvfp4")
    assert catalogue.accelerators["h100-sxm"].kv_precisions() == ("bf16", "fp8")
    assert catalogue.accelerators["mi355x"].kv_precisions() == ("bf16", "fp8")
    assert make_replica(catalogue.models["llama-3.1-70b"], catalogue.accelerators["h100-sxm"], catalogue.serving, 4,
                        "fp8", "nvfp4") is None
    assert (default_kv("bf16"), default_kv("fp8"), default_kv("nvfp4"), default_kv("int4")) == ("bf16", "fp8", "fp8", "fp8")


def test_fewer_weight_bytes_leave_more_kv_and_decode_faster(catalogue):
    """Monotone in the format's bytes: on one B200 × 2 replica of Llama-3.3-70B, fp8 → nvfp4
    frees KV memory and raises decode throughput at the same ITL objective."""
    s = catalogue
    chat = s.workloads["chat"].model_copy(update={"model": "llama-3.3-70b"})
    budgets, rates = [], []
    for fmt in ("bf16", "fp8", "nvfp4"):
        w = chat.model_copy(update={"weight_dtype": fmt, "kv_dtype": "fp8"})
        r = make_replica(s.models["llama-3.3-70b"], s.accelerators["b200"], s.serving, 2, fmt, "fp8")
        budgets.append(kv_budget_bytes(r))
        decode = [c for c in workload_configs(w, s.models["llama-3.3-70b"], s.accelerators["b200"], s.serving)
                  if c.role == "decode" and c.gpus == 2 and not c.speculative and c.speed == 1.0]
        rates.append(decode[0].decode_tokens_per_s)
    assert budgets[0] < budgets[1] < budgets[2]
    assert rates[0] < rates[1] < rates[2]


def test_a_bf16_only_workload_never_gets_a_4_bit_config(catalogue):
    s = catalogue
    w, m, a = s.workloads["code-completion"], s.models["llama-3.1-8b"], s.accelerators["gb200-nvl72"]
    assert w.precisions == [("bf16", "bf16")]
    configs = workload_configs(w, m, a, s.serving)
    assert configs and {(c.weight_dtype, c.kv_dtype) for c in configs} == {("bf16", "bf16")}
    wider = w.model_copy(update={"accepted_precisions": ["nvfp4/fp8", "bf16/bf16"]})
    assert wider.precisions == [("bf16", "bf16"), ("nvfp4", "fp8")]
    both = workload_configs(wider, m, a, s.serving)
    assert {(c.weight_dtype, c.kv_dtype) for c in both} == {("bf16", "bf16"), ("nvfp4", "fp8")}
    # the workload's own precision keeps today's ids; another adds its tag
    assert {c.id for c in configs} <= {c.id for c in both}
    assert all(c.id.endswith(":nvfp4-fp8") for c in both if c.weight_dtype == "nvfp4")


def test_accepted_precisions_are_checked():
    with pytest.raises(ScenarioError, match="WEIGHT/KV pairs"):
        load_scenario(TINY, ["workloads.code-completion.accepted_precisions=[fp4/fp8]"])


def test_accepting_int4_never_makes_the_plan_dearer(optimum):
    """Tiny (H100 and L40S, Llama-3.1-8B): also accepting int4 weights (weight-only at the bf16
    rate, a quarter of the weight reads) gives an optimum no dearer, found by the MIP and by
    enumeration alike."""
    wider = tiny_instance(["workloads.code-completion.accepted_precisions=[bf16/bf16, int4/bf16]"])
    best = brute_force(wider)
    result = solve(wider, SolverSettings(exact=True, mip_gap=1e-9, time_limit_s=60))
    assert result.status == "optimal" and result.objective_usd == pytest.approx(best, rel=1e-6)
    assert best <= optimum + 1e-6
    assert any(p.config.weight_dtype == "int4" for p in wider.pools)


def test_a_rack_a_site_cannot_power_or_cool_is_not_offered(catalogue):
    s = catalogue
    # catalogue supply rows come along with the accelerator; only liquid-cooled 140 kW sites keep NVL72 racks
    nvl72 = sorted(site for site, per in s.supply.items() if "gb200-nvl72" in per)
    assert nvl72 == sorted(x for x, site in s.sites.items() if site.liquid_cooling and site.rack_kw_max >= 120)
    assert "london" in s.sites and "gb200-nvl72" not in s.supply["london"] and "b300" in s.supply["london"]
    london = s.sites["london"].model_copy(update={"rack_kw_max": 40.0, "liquid_cooling": True})
    rack = s.accelerators["gb200-nvl72"].model_copy(update={"node_kw": 130.0})
    assert "draws 130 kW" in london.hosts(rack) and "40 kW per rack" in london.hosts(rack)
    assert "liquid cooling" in s.sites["chicago"].hosts(s.accelerators["mi355x"])
    assert s.sites["ashburn"].hosts(rack) is None and s.sites["london"].hosts(s.accelerators["h100-sxm"]) is None
    # a site's racks lowered below the rack's power: no longer offered there
    lowered = load_scenario(None, [NEW_GPUS, "sites.ashburn.rack_kw_max=100"])[0]
    assert "gb200-nvl72" not in lowered.supply["ashburn"] and "gb300-nvl72" not in lowered.supply["ashburn"]
    # no liquid-cooled site left: the racks are offered nowhere, and validation says so
    none, raw = load_scenario(None, [NEW_GPUS, *(f"sites.{x}.liquid_cooling=false" for x in ("ashburn", "dallas", "phoenix"))])
    assert not any("gb200-nvl72" in per for per in none.supply.values())
    assert any(w.startswith("accelerator 'gb200-nvl72' is offered at no site: one gb200-nvl72 node")
               for w in raw.warnings)


def test_a_planner_row_asking_for_an_impossible_pair_is_an_error(tmp_path):
    path = tmp_path / "racks.yaml"
    path.write_text(TINY.read_text().replace("accelerators: [h100-sxm, l40s]", "accelerators: [h100-sxm, gb200-nvl72]")
                    + "supply:\n  rows:\n    - {site: chicago, gpu: gb200-nvl72, reserved_nodes_max: 2, "
                      "ondemand_nodes_max: 1}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert "gb200-nvl72 node (a rack of 72 GPUs) draws 120 kW" in text and "site 'chicago'" in text
    assert "rack_kw_max" in text and err.value.field == "gpu"


def test_curves_and_budget_take_any_catalogue_entry(capsys):
    """Neither gpt-oss-120b nor GB200 NVL72 is in the reference scenario."""
    assert main(["curves", "--model", "gpt-oss-120b", "--gpu", "gb200-nvl72", "--dtype", "nvfp4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["weight_dtype"], out["kv_dtype"]) == ("nvfp4", "fp8")
    assert out["configs"][0]["weights_gb_per_gpu"] == pytest.approx(116.83 * 0.5625 / out["configs"][0]["tp"])
    assert main(["curves", "--model", "llama-3.1-70b", "--gpu", "mi325x", "--json"]) == 0
    capsys.readouterr()
    assert main(["curves", "--model", "kimi-k2", "--gpu", "h100-sxm", "--dtype", "nvfp4"]) == 2
    assert "h100-sxm does not serve nvfp4 weights" in capsys.readouterr().err
    args = ["budget", "--metro", "new-york", "--workload", "chat", "--gpu", "gb200-nvl72", "--json"]
    assert main([*args, "--site", "ashburn", "--dtype", "nvfp4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == ["gb200-nvl72"] and out["feasible"] is True
    # without --gpu: the site's accelerators that serve the precision (B200 at ashburn serves nvfp4, H100 not)
    assert main(["budget", "--metro", "new-york", "--workload", "chat", "--site", "ashburn", "--dtype", "nvfp4",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["feasible"] is True
    assert main(["budget", "--metro", "new-york", "--workload", "chat", "--site", "ashburn", "--gpu", "h100-sxm",
                 "--dtype", "nvfp4"]) == 2
    assert "h100-sxm does not serve nvfp4 weights" in capsys.readouterr().err
    assert main([*args, "--site", "london"]) == 2
    assert "draws 120 kW but site 'london' takes at most 40 kW per rack" in capsys.readouterr().err
