"""Prefix reuse from request logs with prefix or session ids (`optimizer.commands.traces.reuse`).

A synthetic log whose prefixes recur in renewal chains — each use followed by another with
probability p after a log-normal time — must give back p, T₅₀ and σ within four standard
errors of its sample; 10-row logs are checked against values worked by hand; the streaming
pass, fed in small chunks, must agree with a whole-log pandas computation; a log without
the columns writes the same demand folder as before and no kv_reuse.csv; bad values and bad
kv_reuse files are refused with file, line and field.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from optimizer.base.errors import ScenarioError
from optimizer.commands.traces import read
from optimizer.commands.traces.derive import derive
from optimizer.commands.traces.read import ReadState, iter_chunks
from optimizer.commands.traces.reuse import KV_REUSE_COLUMNS, MINUTE_NS, ReuseAccumulator
from optimizer.commands.traces.write import write_demand
from optimizer.scenario import DATA_DIR, load_scenario
from optimizer.scenario.kvcache import resolved_reuse
from optimizer.scenario.trace_spec import TraceSpec

START = pd.Timestamp("2024-05-02 10:00:00")


def _write(path, seconds, prompt, output, **extra):
    t = START + pd.to_timedelta(np.asarray(seconds, float), unit="s")
    pd.DataFrame({"timestamp": t.strftime("%Y-%m-%d %H:%M:%S.%f"), "prompt_tokens": prompt,
                  "completion_tokens": output, **extra}).to_csv(path, index=False)
    return path


def _reuse(path, window_s: float, **spec):
    acc = ReuseAccumulator(window_s)
    spec = TraceSpec(path, workload="chat", **spec)
    state = ReadState(spec, "csv")
    for chunk in iter_chunks(spec, state):
        acc.add(chunk, state)
    return acc.results()


def chains(rng, starts_per_s: float, span_s: float, p: float, t50_s: float, sigma: float):
    """Renewal chains: chains start as a Poisson process over [0, span); each use is followed
    by another after T ~ lognormal(ln T₅₀, σ²) with probability p. In the steady state a
    share p of requests are reuses (a chain of geometric length has p/(1 − p) reuses per start)."""
    t0 = np.sort(rng.uniform(0, span_s, rng.poisson(starts_per_s * span_s)))
    times, ids = [t0], [np.arange(len(t0))]
    t, i = t0, ids[0]
    while len(t):
        go = rng.random(len(t)) < p
        t, i = t[go] + np.exp(math.log(t50_s) + sigma * rng.standard_normal(go.sum())), i[go]
        t, i = t[t < span_s], i[t < span_s]
        times.append(t)
        ids.append(i)
    t, i = np.concatenate(times), np.concatenate(ids)
    order = np.argsort(t, kind="stable")
    return t[order], i[order]


def test_lognormal_reuse_times_are_recovered_within_sampling_error(tmp_path):
    """p = 0.6, T₅₀ = 20 s, σ = 1, a 3-hour log (about 54,000 requests, 28,000 reuses
    counted after the first hour): tolerances of four standard errors, √(p(1−p)/n) ≈ 0.003
    on p∞, σ/√h ≈ 0.006 on ln T₅₀ and σ/√(2h) ≈ 0.004 on σ. The window (1 h) is 5.2 σ
    above T₅₀, so truncation moves nothing measurable."""
    rng = np.random.default_rng(7)
    p, t50, sigma = 0.6, 20.0, 1.0
    t, ids = chains(rng, 2.0, 3 * 3600, p, t50, sigma)
    prompt = rng.integers(500, 3000, len(t))
    path = _write(tmp_path / "log.csv", t, prompt, rng.integers(1, 300, len(t)),
                  prefix_id=[f"system-{i}" for i in ids], prefix_tokens=prompt * 2 // 5)
    (r,) = _reuse(path, 3600)
    assert r.corrected and r.by == "prefix_id" and r.rows == len(t)
    n, h = r.requests, r.reuses
    assert h > 20_000
    assert abs(r.reuse_probability - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert abs(math.log(r.median_reuse_s) - math.log(t50)) < 4 * sigma / math.sqrt(h)
    assert abs(r.reuse_sigma - sigma) < 4 * sigma / math.sqrt(2 * h)
    assert r.reusable_prefix_share == pytest.approx(0.4, abs=0.002)  # ⌊2·prompt/5⌋ / prompt


def test_the_whole_log_reads_p_low_where_the_window_correction_does_not(tmp_path):
    """Chains begin with the log, so its first minutes hold few reuses — as a real log's
    first minutes miss the reuses of prefixes used before it began: p∞ over the whole log
    reads below p, the count from an hour in does not (T₅₀ = 300 s, σ = 0.5: the window is
    5 σ above T₅₀, so both windows see every reuse)."""
    rng = np.random.default_rng(8)
    t, ids = chains(rng, 2.0, 2 * 3600, 0.6, 300.0, 0.5)
    path = _write(tmp_path / "log.csv", t, np.full(len(t), 100), np.full(len(t), 10),
                  prefix_id=[f"p{i}" for i in ids])
    (corrected,) = _reuse(path, 3600)
    (whole,) = _reuse(path, 2 * 3600)  # no request is a window after the start: the whole log
    assert corrected.corrected and not whole.corrected and "biased down" in whole.notes[0]
    se = lambda r: math.sqrt(0.6 * 0.4 / r.requests)  # noqa: E731
    assert abs(corrected.reuse_probability - 0.6) < 4 * se(corrected)
    assert whole.reuse_probability < 0.6 - 4 * se(whole)
    assert corrected.reusable_prefix_share is None  # no prefix tokens in the log


# ---------------------------------------------------------------------------- by hand

SECONDS = [0, 30, 50, 70, 80, 100, 120, 210, 215, 219]
KEYS = ["A", "B", "A", "A", "B", "C", "A", "C", "D", "C"]
PROMPT = [100, 200, 120, 100, 200, 300, 80, 300, 50, 100]
PREFIX = [40, 50, 40, 40, 50, 60, 40, 60, 0, 60]


def test_p_and_share_of_a_ten_row_log_by_hand(tmp_path):
    path = _write(tmp_path / "log.csv", SECONDS, PROMPT, [10] * 10, prefix_id=KEYS, prefix_tokens=PREFIX)
    # window 60 s: counted from 10:01:00 (rows 4–10); reuses: row 4 (A, 20 s), 5 (B, 50 s), 7 (A, 50 s),
    # 10 (C, 9 s); row 8 (C, 110 s after row 6) is beyond the window
    (r,) = _reuse(path, 60)
    assert r.corrected and (r.requests, r.reuses) == (7, 4)
    assert r.reuse_probability == pytest.approx(4 / 7)
    assert r.reusable_prefix_share == pytest.approx((40 + 50 + 40 + 60) / (100 + 200 + 80 + 100))
    assert r.median_reuse_s is None and "at least 10" in r.notes[-1]  # 4 reuses fit nothing
    # window 1 h, longer than the log: all 10 counted; reuses rows 3, 4, 5, 7, 8 (110 s), 10
    (r,) = _reuse(path, 3600)
    assert not r.corrected and (r.requests, r.reuses) == (10, 6)
    assert r.reusable_prefix_share == pytest.approx((40 + 40 + 50 + 40 + 60 + 60) / (120 + 100 + 200 + 80 + 300 + 100))
    row = r.kv_reuse_row()
    assert list(row) == KV_REUSE_COLUMNS and row["as_of"] == "2024-05-02" and "log.csv (10 rows)" in row["source"]


def test_sessions_reuse_the_previous_turn_and_a_prefix_id_wins_over_them(tmp_path):
    seconds, sessions = [0, 10, 20, 40, 45, 50], ["s1", "s2", "s1", "s1", "s2", "s3"]
    prompt, output = [100, 200, 300, 400, 150, 100], [50, 20, 30, 10, 5, 10]
    path = _write(tmp_path / "log.csv", seconds, prompt, output, session_id=sessions)
    (r,) = _reuse(path, 3600)
    # reuses: s1's 2nd turn (the 1st's 100 + 50 of its 300), s1's 3rd (300 + 30 of 400), s2's 2nd (200 + 20,
    # capped at its 150)
    assert r.by == "session_id" and (r.requests, r.reuses) == (6, 3)
    assert r.reusable_prefix_share == pytest.approx((150 + 330 + 150) / (300 + 400 + 150))
    both = _write(tmp_path / "both.csv", seconds, prompt, output, session_id=sessions, prefix_id=["system"] * 6)
    (r,) = _reuse(both, 3600)
    assert r.by == "prefix_id" and r.reuses == 5 and r.reusable_prefix_share is None


def test_the_streaming_pass_in_small_chunks_is_the_whole_log_by_pandas(tmp_path, monkeypatch):
    """Sessions of a random log read in ~4 kB chunks (keys cross chunks, expire from the
    recent keys) against a whole-log groupby: the same counts, moments and share."""
    rng = np.random.default_rng(3)
    n, window = 3000, 120.0
    df = pd.DataFrame({"t": np.sort(rng.uniform(0, 900, n)), "key": rng.integers(0, 400, n), "prompt": rng.integers(1, 500, n),
                       "output": rng.integers(0, 100, n)})
    path = _write(tmp_path / "log.csv", df["t"], df["prompt"], df["output"], session_id=df["key"])
    monkeypatch.setattr(read, "CSV_BLOCK_BYTES", 1 << 12)
    (r,) = _reuse(path, window)
    t_ns = pd.to_datetime(pd.read_csv(path)["timestamp"]).astype("datetime64[ns]").astype(np.int64)
    df["t_ns"] = t_ns - t_ns.min()  # from the first request: exact as a float after the NaN of shift()
    prev = df.groupby("key")[["t_ns", "prompt", "output"]].shift()
    gap = (df["t_ns"] - prev["t_ns"]) / 1e9
    reuse = gap.notna() & (gap <= window)
    counted = df["t_ns"] + t_ns.min() >= -(-(t_ns.min() + int(window * 1e9)) // MINUTE_NS) * MINUTE_NS
    hits = reuse & counted
    ln = np.log(np.maximum(gap[hits], 1e-3))
    assert (r.requests, r.reuses) == (counted.sum(), hits.sum())
    assert math.log(r.median_reuse_s) == pytest.approx(ln.mean(), rel=1e-9)
    assert r.reuse_sigma == pytest.approx(ln.std(ddof=1), rel=1e-9)
    cached = np.minimum(prev["prompt"] + prev["output"], df["prompt"])[hits]
    assert r.reusable_prefix_share == pytest.approx(cached.sum() / df["prompt"][hits].sum(), rel=1e-12)


# ---------------------------------------------------------------------------- the demand folder


def _log(path, **extra):
    """A 12-minute log of 720 requests, one a second (enough for the demand figures)."""
    s = np.arange(720) + 0.25
    return _write(path, s, 100 + (np.arange(720) % 50), np.full(720, 10), **extra)


def test_without_id_columns_nothing_changes_and_with_them_kv_reuse_is_added(tmp_path):
    s, _ = load_scenario()
    plain = derive([TraceSpec(_log(tmp_path / "plain.csv"), workload="chat", metro="chicago")])
    assert plain.reuse == [] and "reuse" not in plain.as_dict()
    ids = {"session_id": [f"s{i % 97}" for i in range(720)]}
    spec = TraceSpec(_log(tmp_path / "ids.csv", **ids), workload="chat", metro="chicago")
    with_ids = derive([spec], reuse_window_s=120)
    a = write_demand(plain, s, [TraceSpec(tmp_path / "plain.csv", workload="chat", metro="chicago")], tmp_path / "a")
    b = write_demand(with_ids, s, [spec], tmp_path / "b")
    assert not (a / "kv_reuse.csv").exists() and "kv_cache" not in (a / "scenario.yaml").read_text()
    for name in ("demand.csv", "workloads.csv", "hours.csv", "lengths.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    table = pd.read_csv(b / "kv_reuse.csv")
    assert list(table.columns) == list(pd.read_csv(DATA_DIR / "kv_reuse.csv").columns)
    # 97 sessions, one turn a second: every key recurs after 97 s, within the 120-s window
    (row,) = table.to_dict("records")
    assert row["reuse_probability"] == 1.0 and row["median_reuse_s"] == pytest.approx(97, rel=1e-6)
    assert row["reuse_sigma"] == 0.01  # all 97 s apart: σ 0, given as the least the scenario takes
    assert "kv_cache:\n  reuse: kv_reuse.csv" in (b / "scenario.yaml").read_text()
    scenario = tmp_path / "s.yaml"  # the folder's file, as a scenario takes it
    scenario.write_text("name: t\nkv_cache: {reuse: b/kv_reuse.csv}\n")
    s, _ = load_scenario(scenario)
    chat = resolved_reuse(s.kv_cache, s.workloads)["chat"]
    assert (chat.reuse_probability, chat.reuse_sigma) == (1.0, 0.01) and chat.median_reuse_s == pytest.approx(97)


def test_the_scenario_reads_kv_reuse_under_its_own_fields(write_scenario, tmp_path):
    rows = "workload,reuse_probability,reusable_prefix_share,median_reuse_s,reuse_sigma,source,as_of,assumed_fields\n"
    path = write_scenario({"name": "t", "kv_cache": {"reuse": "reuse.csv", "workloads": {"chat": {"reuse_sigma": 0.7}}}},
                          files={"reuse.csv": rows + "chat,0.3,,42,1.1,from a log,2024-05-02,\n"})
    s, _ = load_scenario(path)
    chat = resolved_reuse(s.kv_cache, s.workloads)["chat"]
    shipped = pd.read_csv(DATA_DIR / "kv_reuse.csv").set_index("workload").loc["chat"]
    assert (chat.reuse_probability, chat.median_reuse_s, chat.reuse_sigma) == (0.3, 42.0, 0.7)
    assert chat.reusable_prefix_share == shipped["reusable_prefix_share"]  # empty in the file: the shipped value


@pytest.mark.parametrize("row,line,field,words", [
    ("chat,1.5,0.5,10,1", 2, "reuse_probability", "less than or equal to 1"),
    ("chat,0.5,0.5,-3,1", 2, "median_reuse_s", "greater than 0"),
    ("chat,0.5,0.5,10,x", 2, "reuse_sigma", "valid number"),
    ("chatt,0.5,0.5,10,1", 2, "workload", "did you mean chat"),
    ("chat,0.5,0.5,10,1\nchat,0.5,0.5,10,1", 3, "workload", "a second row"),
    ("", 2, "workload", "no workload rows"),
])
def test_a_bad_kv_reuse_file_is_refused_by_file_line_and_field(write_scenario, row, line, field, words):
    header = "workload,reuse_probability,reusable_prefix_share,median_reuse_s,reuse_sigma\n"
    path = write_scenario({"name": "t", "kv_cache": {"reuse": "r.csv"}}, files={"r.csv": header + row + "\n"})
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert err.origin.file.endswith("r.csv") and err.origin.line == line and err.field == field
    assert words in err.message


def test_a_missing_kv_reuse_file_names_the_scenario_field(write_scenario):
    path = write_scenario({"name": "t", "kv_cache": {"reuse": "none.csv"}})
    with pytest.raises(ScenarioError, match="no such file") as info:
        load_scenario(path)
    assert info.value.field == "kv_cache.reuse"
    path = write_scenario({"name": "t", "kv_cache": {"reuse": "."}})
    with pytest.raises(ScenarioError, match="a folder") as info:
        load_scenario(path)
    assert info.value.field == "kv_cache.reuse"


# ---------------------------------------------------------------------------- bad logs


HEADER = "timestamp,prompt_tokens,completion_tokens,prefix_id,prefix_tokens\n"
GOOD = "2024-05-02 10:00:00.1234567,100,10,a,40\n2024-05-02 10:00:01.2345678,200,20,b,50\n"


@pytest.mark.parametrize("row,field,words", [
    ("2024-05-02 10:00:02.5,100,10,,40", "prefix_id", "missing prefix_id (an empty cell; expected an id"),
    ("2024-05-02 10:00:02.5,100,10,a,140", "prefix_tokens", "140 prefix tokens exceed the prompt's 100"),
    ("2024-05-02 10:00:02.5,100,10,a,-1", "prefix_tokens", "prefix_tokens tokens '-1' is below 0"),
    ("2024-05-02 10:00:02.5,100,10,a,4.5", "prefix_tokens", "not a whole number"),
])
def test_bad_ids_and_prefix_lengths_are_named_by_file_line_and_column(tmp_path, row, field, words):
    path = tmp_path / "log.csv"
    path.write_text(HEADER + GOOD + row + "\n")
    with pytest.raises(ScenarioError) as info:
        derive([TraceSpec(path, workload="chat")])
    err = info.value
    assert words in err.message and err.origin.line == 4 and err.field == field


def test_prefix_tokens_without_an_id_column_are_refused(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("timestamp,prompt_tokens,completion_tokens,prefix_tokens\n2024-05-02 10:00:00.1,100,10,40\n")
    with pytest.raises(ScenarioError, match="needs a prefix_id or session_id") as info:
        derive([TraceSpec(path, workload="chat")])
    assert info.value.origin.line == 1 and info.value.field == "prefix_tokens"


def test_rows_alike_but_for_their_prefix_are_two_requests(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(HEADER + GOOD + "2024-05-02 10:00:01.2345678,200,20,c,50\n")
    (r,) = _reuse(path, 60)
    assert r.rows == 3
    path.write_text(HEADER + GOOD + "2024-05-02 10:00:01.2345678,200,20,b,50\n")
    with pytest.raises(ScenarioError, match="repeats the one before it") as info:
        _reuse(path, 60)
    assert info.value.origin.line == 4
