"""Pools by prompt length: the truncated length law, the parts a split writes, the program's
choice among the thresholds, and a split plan end to end (plan, verify, stress, export)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from optimizer.base.errors import ScenarioError
from optimizer.commands.export import export_plan
from optimizer.commands.pipeline import make_plan
from optimizer.commands.report.plan_page import key_figures
from optimizer.commands.stress import analyze
from optimizer.commands.verify import verify_plan
from optimizer.curves.lengths import LengthDistribution, prompt_lengths
from optimizer.folder.read import read_plan, scenario_of
from optimizer.folder.write import write_plan
from optimizer.instance.checks import preflight
from optimizer.instance.prompt_split import (
    SHORT_MISS_SHARE,
    part_attainments,
    part_ids,
    with_every_option,
    with_split,
)
from optimizer.results.prompt_split import prompt_split_lines
from optimizer.scenario import load_scenario
from optimizer.solve.prompt_split import weigh_options

ROOT = Path(__file__).resolve().parent.parent
LONG = ROOT / "data" / "scenarios" / "long-prompts.yaml"
ONE_SITE = ROOT / "data" / "scenarios" / "one-site-70b.yaml"


# ---------------------------------------------------------------------------- the length law


def test_a_parts_share_mean_and_quantiles_are_the_lognormals_by_hand():
    d = LengthDistribution(2000.0, 12000.0)
    t = 4096.0
    alpha = (math.log(t) - d.mu) / d.sigma
    short, long = d.part(below_tokens=t), d.part(from_tokens=t)
    assert short.share == pytest.approx(norm.cdf(alpha), rel=1e-12)
    assert long.share == pytest.approx(norm.sf(alpha), rel=1e-12)
    # E[X | X < t] = e^{μ+σ²/2} Φ(α − σ) / Φ(α)
    assert short.conditional_mean_tokens == pytest.approx(
        math.exp(d.mu + d.sigma**2 / 2) * norm.cdf(alpha - d.sigma) / norm.cdf(alpha), rel=1e-10)
    # the parts' means, weighted by their shares, give back the whole's mean
    assert short.share * short.conditional_mean_tokens + long.share * long.conditional_mean_tokens == \
        pytest.approx(2000.0, rel=1e-9)
    # a part's q-quantile is the whole's at F(from) + q·share
    assert long.quantile(0.5) == pytest.approx(d.quantile(short.share + 0.5 * long.share), rel=1e-9)
    assert d.quantile(0.99) == pytest.approx(12000.0, rel=1e-9)
    assert d.spread_sigma == d.sigma and not d.is_part


def test_a_parts_draws_grids_and_moments_stay_in_its_range():
    d = LengthDistribution(3000.0, 40000.0, 131072)
    long = d.part(from_tokens=16384.0)
    x = long.sample(np.random.default_rng(7), 200_000)
    assert x.min() >= 16384 and x.max() <= 131072
    assert x.mean() == pytest.approx(long.conditional_mean_tokens, rel=0.01)
    grid = long.quantile_grid()
    assert grid.min() >= 16384 and grid.mean() == pytest.approx(long.conditional_mean_tokens, rel=0.01)
    lengths, weights = long.moment_grid()
    assert lengths.min() >= 16384 and weights.sum() == pytest.approx(1.0)
    assert float(np.dot(lengths, weights)) == pytest.approx(long.conditional_mean_tokens, rel=0.02)
    short = d.part(below_tokens=16384.0)
    assert short.sample(np.random.default_rng(7), 10_000).max() <= 16384
    assert short.spread_sigma < d.sigma  # a cut tail spreads less


def test_the_whole_distribution_draws_as_before():
    """No cut: the same draws and grid as the untruncated law (plans without splits unchanged)."""
    d = LengthDistribution(2000.0, 4500.0, 131072)
    direct = np.clip(np.rint(np.random.default_rng(3).lognormal(d.mu, d.sigma, 1000)), 1, 131072)
    assert np.array_equal(d.sample(np.random.default_rng(3), 1000), direct)
    probs = (np.arange(400) + 0.5) / 400
    assert np.array_equal(d.quantile_grid(), np.clip(np.exp(d.mu + d.sigma * norm.ppf(probs)), 1.0, 131072))


@settings(max_examples=60, deadline=None)
@given(st.floats(0.5, 0.999), st.floats(0.05, 0.995))
def test_the_parts_attainments_keep_the_parents(attainment, short_share):
    a_s, a_l = part_attainments(attainment, short_share)
    assert a_s == pytest.approx(1 - SHORT_MISS_SHARE * (1 - attainment))
    assert a_s >= attainment >= a_l - 1e-12 or a_l == a_s
    if a_l > 0.5:  # not at the field's floor: exactly the parent's attainment over both parts
        assert short_share * a_s + (1 - short_share) * a_l == pytest.approx(attainment, abs=1e-12)
    else:
        assert short_share * a_s + (1 - short_share) * a_l >= attainment - 1e-12


# ---------------------------------------------------------------------------- the scenarios


@pytest.fixture(scope="module")
def long_prompts():
    return load_scenario(LONG)


def test_a_split_writes_two_parts_that_add_up_to_the_parent(long_prompts):
    s, _ = long_prompts
    w = s.workloads["chat"]
    split = with_split(s, {"chat": 8192.0})
    short_id, long_id = part_ids("chat", 8192.0)
    assert set(split.workloads) == {short_id, long_id}
    short, long = split.workloads[short_id], split.workloads[long_id]
    whole = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, s.models[w.model].max_context)
    assert short.prompt_part.share == pytest.approx(whole.cdf(8192.0))
    assert short.prompt_part.share + long.prompt_part.share == pytest.approx(1.0)
    assert short.isl_mean_tokens < 8192 <= long.isl_mean_tokens
    for part in (short, long):
        assert (part.ttft_p99_ms, part.itl_p99_ms, part.osl_mean_tokens) == (w.ttft_p99_ms, w.itl_p99_ms,
                                                                           w.osl_mean_tokens)
        assert part.prompt_split_candidates_tokens is None
        # the part's own law is its parent's cut to its range
        assert prompt_lengths(part, 131072).conditional_mean_tokens == pytest.approx(part.isl_mean_tokens)
    # demand: each table row copied to both parts, at the part's share
    rows = {(r.workload, r.hour): r.requests_per_s for r in split.demand.table}
    for hour in (0, 6, 12, 18):
        assert rows[(short_id, hour)] + rows[(long_id, hour)] == pytest.approx(300.0)
        assert rows[(long_id, hour)] == pytest.approx(300.0 * long.prompt_part.share)
    kept = with_split(s, {"chat": None})
    assert list(kept.workloads) == ["chat"] and kept.workloads["chat"].prompt_split_candidates_tokens is None


def test_every_option_lists_the_parent_whole_first(long_prompts):
    s, _ = long_prompts
    every, options = with_every_option(s)
    assert [o.threshold_tokens for o in options["chat"]] == [None, 4096.0, 8192.0, 16384.0]
    assert options["chat"][0].parts == (("chat", 1.0),)
    for o in options["chat"][1:]:
        assert sum(share for _, share in o.parts) == pytest.approx(1.0)
        assert all(wid in every.workloads for wid, _ in o.parts)
    assert len(every.workloads) == 7


@pytest.mark.parametrize("setting, expected", [
    ("workloads.chat.prompt_split_candidates_tokens=[200000]", "prompt_split_candidates_tokens"),
    ("workloads.chat.prompt_split_candidates_tokens=[2]", "at least 0.5 %"),
])
def test_a_threshold_that_leaves_a_part_empty_is_refused(setting, expected):
    s, raw = load_scenario(LONG, [setting])
    with pytest.raises(ScenarioError) as err:
        preflight(s, raw)
    assert expected in str(err.value) and "chat" in str(err.value)


@pytest.mark.parametrize("setting, expected", [
    ("workloads.chat.prompt_split_candidates_tokens=[2000,3000,4000,5000,6000]", "at most 4"),
    ("workloads.chat.prompt_split_candidates_tokens=[1]", "more than 1"),
    ("workloads.chat.prompt_split_candidates_tokens=[4096,4096]", "distinct"),
])
def test_bad_candidates_are_refused_naming_the_field(setting, expected):
    with pytest.raises(ScenarioError) as err:
        load_scenario(LONG, [setting])
    assert expected in str(err.value) and "prompt_split_candidates_tokens" in str(err.value)


def test_a_hand_written_part_is_refused(tmp_path):
    text = LONG.read_text().replace("      prompt_split_candidates_tokens: [4096, 8192, 16384]\n", (
        "      prompt_part: {parent: chat, from_tokens: 0, below_tokens: 4096, share: 0.5,"
        " parent_isl_mean_tokens: 3000, parent_isl_p99_tokens: 40000}\n"))
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(tmp_path / "s.yaml")
    assert "set by the plan" in str(err.value) and "prompt_part" in str(err.value)


def test_splits_and_kv_cache_tiers_are_not_planned_together(tmp_path):
    text = LONG.read_text() + "\nkv_cache:\n  tiers: [hbm]\n"
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(tmp_path / "s.yaml")
    assert "kv_cache" in str(err.value)


def test_candidates_read_from_a_csv_cell(long_prompts):
    s, _ = load_scenario(LONG, ["workloads.chat.prompt_split_candidates_tokens=16384;8192"])
    assert s.workloads["chat"].prompt_split_candidates_tokens == [8192.0, 16384.0]
    s, _ = load_scenario(LONG, ["workloads.chat.prompt_split_candidates_tokens=16384"])
    assert s.workloads["chat"].prompt_split_candidates_tokens == [16384.0]


# ---------------------------------------------------------------------------- the program's choice


def _weights(s, raw):
    return weigh_options(s, raw.path.parent, 60.0, 1)


def _fixed_lp(s, raw, threshold):
    return weigh_options(with_split(s, {"chat": threshold}), raw.path.parent, 60.0, 1)[0].objective_usd


def test_the_program_weighs_the_options_and_never_costs_more_than_any_one(long_prompts):
    s, raw = long_prompts
    w, offered = _weights(s, raw)
    assert sum(w.weights["chat"]) == pytest.approx(1.0) and min(w.weights["chat"]) >= -1e-9
    fixed = {o.threshold_tokens: _fixed_lp(s, raw, o.threshold_tokens) for o in offered["chat"]}
    # the options' program contains each option alone: its optimum is at most the cheapest
    assert w.objective_usd <= min(fixed.values()) * (1 + 1e-7)
    chosen = offered["chat"][w.chosen()["chat"]].threshold_tokens
    assert fixed[chosen] == pytest.approx(min(fixed.values()), rel=1e-6)
    assert chosen is not None  # the heavy tail pays for pools of its own


def test_a_narrow_prompt_law_stays_whole():
    s, raw = load_scenario(ONE_SITE, ["workloads.chat.prompt_split_candidates_tokens=[1024,4096]"])
    w, offered = _weights(s, raw)
    assert offered["chat"][w.chosen()["chat"]].threshold_tokens is None


# ---------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def split_plan(tmp_path_factory):
    plan = make_plan(LONG, effort="first", exact=False)
    return write_plan(plan, tmp_path_factory.mktemp("split") / "plan")


def test_the_split_plan_is_kept_only_when_cheaper_and_records_its_choice(split_plan):
    summary = json.loads((split_plan / "summary.json").read_text())
    block = summary["prompt_split"]
    chat = block["workloads"]["chat"]
    assert chat["threshold_tokens"] == chat["program_choice_tokens"] == 16384.0
    assert block["split_plan_usd"] < block["whole_plan_usd"]
    assert summary["total_cost_usd"] == pytest.approx(block["split_plan_usd"])
    assert sum(p["share"] for p in chat["parts"].values()) == pytest.approx(1.0)
    pools = read_plan(split_plan).tables["pools"]
    assert set(pools["workload"]) == set(part_ids("chat", 16384.0))
    s = scenario_of(read_plan(split_plan), split_plan)
    assert set(s.workloads) == set(part_ids("chat", 16384.0))


def test_verify_serves_each_part_its_own_prompts_and_the_parent_keeps_its_attainment(split_plan):
    result = verify_plan(split_plan, requests=6000, seed=1)
    assert result.summary["all_objectives_met"], result.side_by_side().to_dict("records")
    rollup = result.summary["prompt_split"]["chat"]
    assert rollup["required"] == pytest.approx(0.99, abs=1e-9)
    assert rollup["ttft_attainment"] >= 0.99 and rollup["passes"]
    # goodput counts each part by its traffic: about the attainment over both parts, not the parts' mean
    assert result.summary["goodput_fraction"] == pytest.approx(rollup["ttft_attainment"], abs=0.01)
    side = result.side_by_side().set_index("workload")
    short_id, long_id = part_ids("chat", 16384.0)
    # the short part's tail is its own short prompts: far below the objective, the long part's above it
    assert side.loc[short_id, "ttft_p99_ms_measured"] < 1500 < side.loc[long_id, "ttft_p99_ms_measured"]


def test_stress_and_export_read_the_split(split_plan, tmp_path):
    per_workload, _ = analyze(split_plan)
    assert set(per_workload["workload"]) == set(part_ids("chat", 16384.0)) and per_workload["passes"].all()
    out, _ = export_plan(split_plan, "dynamo", tmp_path / "dynamo")
    meta = json.loads((out / "export.json").read_text())
    rules = {r["deployments_of"]: r for r in meta["prompt_routing"]}
    short_id, long_id = part_ids("chat", 16384.0)
    assert rules[short_id]["prompt_tokens_below"] == 16384.0 and rules[long_id]["prompt_tokens_from"] == 16384.0
    assert any("gateway" in w for w in meta["warnings"])


def test_the_plan_text_and_the_report_name_the_split(split_plan):
    summary = json.loads((split_plan / "summary.json").read_text())
    text = "\n".join(prompt_split_lines(summary["prompt_split"]))
    assert "split at 16,384 tokens" in text and "chat-ge16384" in text
    figures = key_figures(summary).set_index("figure")["value"]
    assert figures["prompt-length split of chat"].startswith("at 16,384 tokens")


def test_a_hand_edited_threshold_in_the_summary_is_a_one_line_error(split_plan, tmp_path):
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(split_plan, folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary["prompt_split"]["workloads"]["chat"]["threshold_tokens"] = "abc"
    (folder / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ScenarioError) as err:
        read_plan(folder)
    assert "summary.json" in str(err.value) and "threshold_tokens" in str(err.value) and "\n" not in str(err.value)


def test_goodput_weights_each_group_by_its_planned_traffic(long_prompts):
    """Groups simulate about as many requests whatever their rate: a group of a tenth of the
    traffic counts a tenth, not a half."""
    from types import SimpleNamespace

    from optimizer.commands.verify.tables import goodput_tokens

    s, _ = long_prompts
    objective = s.workloads["chat"].ttft_p99_ms

    def result(rate, ttft_ms):
        group = SimpleNamespace(workload="chat", routes=[SimpleNamespace(requests_per_s=rate)])
        n = 100
        return SimpleNamespace(group=group, ttft_ms=np.full(n, ttft_ms), tokens=np.full(n, 10.0),
                               ok_gaps=np.full(n, 9.0))

    good, tokens = goodput_tokens(s, [result(9.0, objective / 2), result(1.0, objective * 2)])
    assert good["chat"] / tokens["chat"] == pytest.approx(0.9)


def test_a_log_replays_to_each_part_its_range_of_prompts(split_plan, tmp_path):
    import pandas as pd

    from optimizer.commands.traces.replay import trace_arrivals
    from optimizer.scenario.trace_spec import TraceSpec

    rng = np.random.default_rng(5)
    prompts = LengthDistribution(3000.0, 40000.0, 131072).sample(rng, 4000)
    stamps = pd.Timestamp("2024-05-02 03:00") + pd.to_timedelta(np.sort(rng.random(4000)) * 3600, unit="s")
    log = tmp_path / "log.csv"
    pd.DataFrame({"timestamp": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "prompt_tokens": prompts,
                  "completion_tokens": 500}).to_csv(log, index=False)
    s = scenario_of(read_plan(split_plan), split_plan)
    streams = trace_arrivals([TraceSpec(log, workload="chat")], s.workloads).streams
    short_id, long_id = part_ids("chat", 16384.0)
    short, long = streams[(None, short_id)], streams[(None, long_id)]
    assert short.isl.max() < 16384 <= long.isl.min()
    assert len(short.isl) + len(long.isl) == 4000
    assert len(long.isl) / 4000 == pytest.approx(s.workloads[long_id].prompt_part.share, abs=0.012)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(prompt_split="x"), "prompt_split.workloads"),
    (lambda d: d["prompt_split"].update(workloads=[]), "prompt_split.workloads"),
    (lambda d: d["prompt_split"]["workloads"].update(chat={}), "prompt_split.workloads.chat.threshold_tokens"),
    (lambda d: d["prompt_split"]["workloads"].update(chat=5), "prompt_split.workloads.chat.threshold_tokens"),
])
def test_a_malformed_split_record_is_a_one_line_error(split_plan, tmp_path, edit, field):
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(split_plan, folder)
    summary = json.loads((folder / "summary.json").read_text())
    edit(summary)
    (folder / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ScenarioError) as err:
        read_plan(folder)
    assert f"field '{field}'" in str(err.value) and "summary.json" in str(err.value) and "\n" not in str(err.value)
