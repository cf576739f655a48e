"""`verify --trace`: a request log replayed through a plan, beside the Poisson run.

The replay's mechanics are checked on their own (resampling, the cyclic warm-up, the window
of a slice); through a small plan, a log of Poisson arrivals at the planned rate must read
like the Poisson run, and a log with the same mean but one busy minute in four must not.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optimizer.base.errors import ScenarioError
from optimizer.cli.main import main
from optimizer.commands.pipeline import make_plan
from optimizer.commands.traces.derive import derive
from optimizer.commands.traces.replay import read_lengths, trace_arrivals
from optimizer.commands.verify import verify_plan
from optimizer.commands.verify.arrivals import NS, Poisson, Stream, cyclic_window, resample
from optimizer.curves.lengths import LengthDistribution
from optimizer.folder.read import read_plan, scenario_of
from optimizer.folder.write import write_plan
from optimizer.scenario.trace_spec import TraceSpec

TINY = Path(__file__).parent / "data" / "tiny.yaml"
WORKLOAD = "code-completion"
PLANNED_RPS = 10.0  # the tiny plan's hour 3: 5 req/s from each of two metros


# ---------------------------------------------------------------------------- mechanics


def test_thinning_keeps_a_share_of_arrivals_at_their_own_times():
    t = np.sort(np.random.default_rng(0).random(20_000)) * 1000
    src, times = resample(t, 0.3, 1.0, np.random.default_rng(1))
    np.testing.assert_array_equal(times, t[src])
    assert len(src) == pytest.approx(6_000, abs=4 * np.sqrt(20_000 * 0.3 * 0.7))
    assert (np.diff(src) > 0).all()


def test_replicas_keep_the_original_and_spread_copies_within_the_jitter():
    t = np.arange(10_000, dtype=float)
    src, times = resample(t, 2.5, 4.0, np.random.default_rng(2))
    assert len(src) == pytest.approx(25_000, abs=4 * np.sqrt(10_000 * 0.25))
    counts = np.bincount(src, minlength=len(t))
    assert set(np.unique(counts)) == {2, 3}
    first = np.concatenate(([True], src[1:] != src[:-1]))
    np.testing.assert_array_equal(times[first], t)
    assert np.abs(times - t[src]).max() <= 2.0


def test_cyclic_extension_wraps_the_window_around():
    pos, t = cyclic_window(np.array([1.0, 5.0, 9.0]), 10.0, before_s=3.0, after_s=2.0)
    assert list(zip(pos.tolist(), t.tolist())) == [(2, -1.0), (0, 1.0), (1, 5.0), (2, 9.0), (0, 11.0)]
    pos, t = cyclic_window(np.array([1.0, 5.0, 9.0]), 10.0, before_s=25.0, after_s=0.0)
    assert sorted(t.tolist()) == [-25.0, -21.0, -19.0, -15.0, -11.0, -9.0, -5.0, -1.0, 1.0, 5.0, 9.0]


def test_the_window_of_a_slice():
    """Two days: hour 3 is replayed from the day it carried more requests; an hour without
    requests in the log falls back to the log's busiest 60 minutes."""
    day0 = pd.Timestamp("2024-05-02").value
    hour = 3600 * NS
    t = np.sort(np.concatenate([
        day0 + 3 * hour + np.arange(100) * 30 * NS,  # day 1, hour 3: 100 requests
        day0 + 27 * hour + np.arange(300) * 10 * NS,  # day 2, hour 3: 300 requests
        day0 + 30 * hour + np.arange(1000) * NS,  # day 2, 06:00–06:17: the busiest stretch
    ]))
    stream = Stream(t, np.ones(len(t), np.int64), np.ones(len(t), np.int64))
    a, b, start, length = stream.window(3)
    assert (b - a, start, length) == (300, day0 + 27 * hour, 3600.0)
    a, b, start, length = stream.window(12)
    assert (b - a, start, length) == (1000, day0 + 30 * hour, 3600.0)


# ---------------------------------------------------------------------------- through a plan


def _log(path: Path, rates_per_minute: list[float], seed: int, scenario) -> Path:
    """Poisson arrivals within each minute at the given rates, lengths from the workload's
    lognormals: the plan's own assumptions, minute by minute."""
    rng = np.random.default_rng(seed)
    w = scenario.workloads[WORKLOAD]
    t = np.concatenate([m * 60 + np.sort(rng.random(rng.poisson(r * 60))) * 60 for m, r in enumerate(rates_per_minute)])
    isl = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens).sample(rng, len(t))
    osl = LengthDistribution(w.osl_mean_tokens, w.osl_p99_tokens).sample(rng, len(t))
    stamps = pd.Timestamp("2024-05-02 03:00") + pd.to_timedelta(t, unit="s")
    pd.DataFrame({"timestamp": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "prompt_tokens": isl,
                  "completion_tokens": osl}).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def lean(tmp_path_factory):
    """The tiny plan with hour 3 run on two replicas (the analytic model leaves the solved
    plan far more slack than a burst needs), a flat log at its planned 10 req/s and a log
    with the same mean in one minute of four."""
    root = tmp_path_factory.mktemp("replay")
    plan = write_plan(make_plan(TINY, exact=True), root / "plan")
    pools = pd.read_csv(plan / "pools.csv")
    at3 = pools["hour"] == 3
    assert pools.loc[at3, "replicas"].min() >= 2
    pools.loc[at3, "replicas"] = 2
    pools.to_csv(plan / "pools.csv", index=False)
    (plan / "nodes.csv").unlink()  # the plan's nodes per slice no longer describe the edited pools
    s = scenario_of(read_plan(plan), plan)
    flat = _log(root / "flat.csv", [PLANNED_RPS] * 20, 1, s)
    bursty = _log(root / "bursty.csv", [4 * PLANNED_RPS, 0, 0, 0] * 5, 2, s)
    return plan, s, flat, bursty


def _run(plan, s, log=None, scale="planned"):
    arrivals = {} if log is None else {"arrivals": trace_arrivals([TraceSpec(log, workload=WORKLOAD)], s.workloads,
                                                                   scale)}
    return verify_plan(plan, slices=["Y/all/3"], requests=12_000, seed=0, **arrivals).tables["by_pool"].iloc[0]


def test_a_poisson_log_replayed_reads_like_the_poisson_run(lean):
    plan, s, flat, _ = lean
    poisson = _run(plan, s)
    replay = _run(plan, s, flat)
    rows = len(pd.read_csv(flat))
    length_s = (pd.read_csv(flat, parse_dates=["timestamp"])["timestamp"].agg(["min", "max"]).diff().iloc[1]
                .total_seconds())
    assert replay["requests"] == pytest.approx(PLANNED_RPS * length_s, rel=0.03)  # resampled to the planned rate
    assert poisson["ttft_pass"] and replay["ttft_pass"]
    assert replay["ttft_p99_ms"] == pytest.approx(poisson["ttft_p99_ms"], rel=0.15)
    recorded = _run(plan, s, flat, "recorded")
    assert recorded["requests"] == rows  # every request of the window, once


def test_a_bursty_log_fails_where_poisson_passes(lean):
    plan, s, _, bursty = lean
    (pair,) = derive([TraceSpec(bursty, workload=WORKLOAD)]).pairs
    assert pair.burstiness("peak_to_mean_per_minute") > 3
    poisson = _run(plan, s)
    replay = _run(plan, s, bursty)
    assert poisson["ttft_pass"] and not replay["ttft_pass"]
    assert replay["ttft_attainment"] < 0.95 < 0.99 <= poisson["ttft_attainment"]


def test_cli_puts_both_runs_side_by_side(lean, capsys):
    plan, _, flat, bursty = lean
    assert main(["verify", str(plan), "--slices", "Y/all/3", "--requests", "3000",
                 "--trace", f"{WORKLOAD}={flat}"]) == 0
    out = capsys.readouterr().out
    assert "TTFT attainment P / T" in out and "trace (planned)" in out
    table = pd.read_csv(plan / "verify_compare.csv")
    assert list(table["workload"]) == [WORKLOAD]
    for col in ("ttft_attainment_poisson", "ttft_attainment_trace", "ttft_p99_ms_poisson", "ttft_p99_ms_trace",
                "itl_p99_ms_poisson", "itl_p99_ms_trace", "passes_poisson", "passes_trace"):
        assert col in table
    summary = json.loads((plan / "summary.json").read_text())
    assert summary["verification_trace"]["arrivals"] == "trace (planned)"
    assert summary["verification"]["arrivals"] == "poisson"
    assert (plan / "verify_trace.csv").exists() and (plan / "verify.csv").exists()
    assert main(["verify", str(plan), "--slices", "Y/all/3", "--requests", "3000", "--json",
                 "--trace", f"{WORKLOAD}={bursty}"]) == 7
    printed = json.loads(capsys.readouterr().out)
    assert printed["poisson"]["all_objectives_met"] and not printed["trace"]["all_objectives_met"]


def test_a_log_of_a_workload_the_plan_does_not_have(lean, capsys):
    plan, s, flat, _ = lean
    with pytest.raises(ScenarioError, match="unknown workload 'chat'") as info:
        trace_arrivals([TraceSpec(flat, workload="chat")], s.workloads)
    assert info.value.origin.line == 2
    assert main(["verify", str(plan), "--trace", str(flat)]) == 2
    assert "--trace WORKLOAD=FILE" in capsys.readouterr().err


def test_poisson_with_the_logs_lengths(lean, tmp_path):
    plan, s, flat, _ = lean
    assert main(["demand", "--from-trace", str(flat), "--workload", WORKLOAD, "--metro", "chicago",
                 "--out", str(tmp_path / "d"), "--fill", "none", str(TINY)]) == 0
    lengths = read_lengths(tmp_path / "d" / "lengths.csv", s)
    prompt, output = lengths[WORKLOAD]
    raw = pd.read_csv(flat)
    assert prompt.requests.sum() == len(raw) and (prompt.tokens * prompt.requests).sum() == raw["prompt_tokens"].sum()
    res = verify_plan(plan, slices=["Y/all/3"], requests=3000, arrivals=Poisson(lengths))
    assert res.summary["arrivals"] == "poisson (lengths of the log)"
    drawn = prompt.sample(np.random.default_rng(0), 200_000)
    assert drawn.mean() == pytest.approx(raw["prompt_tokens"].mean(), rel=0.02)
