"""Prefix reuse per workload, from logs with prefix or session ids, in the same streaming pass.

A request *reuses* when its key — its prefix id or, without one, its session id — was used
before, at most W seconds earlier (the reuse window, ``--reuse-window``, default an hour):
it would hit an unbounded cache that keeps a prefix W seconds. "Before" is in the order the
rows are read (each chunk's rows taken by key in read order); the time since that use is
taken as |Δt|, at least `MIN_GAP_S` (a reuse in the same instant of a coarse log). Per
workload, over the h reuses among the n requests counted:

    p∞  = h / n                                  (standard error √(p∞(1 − p∞)/n))
    ln T ~ N(μ, σ²) by the moments of ln T:  μ̂ = Σ ln T / h,  σ̂² = Σ (ln T − μ̂)² / (h − 1)
    T₅₀ = exp μ̂  (the log-normal's median; standard errors σ/√h on μ̂, ≈ σ/√(2h) on σ̂)
    ρ   = Σ cached / Σ prompt tokens over the reuses, with cached = the row's prefix tokens
          where the log gives them, else (sessions) the previous turn's prompt + output, at
          most this prompt — token-weighted, as a hit saves ρ · s̄ tokens (`curves.kvtiers`)

Censoring at the log's start: a key last used before the log began reads as a first use, so
p∞ over a whole log is biased down, the more so the shorter the log. Corrected here by
counting only the requests from the first whole minute at least W after the workload's first
request: each of them sees its whole window inside the log, so p∞ is, without that bias,
the share of requests whose key was used in the W before. A log no longer than that is
counted whole and the note says p∞ is biased down. T is cut at W: when W is not far above
T₅₀ the moments read T₅₀ and σ low; the note gives the share of the fitted law below W.

Memory per workload: the keys used in the last W (hash, last time, last turn's tokens: 24
bytes each) and sums per minute of the log — not the log's rows. A chunk sorted by key is
merged into the sorted keys by a stable sort of the two sorted runs (linear in the keys).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import ndtr

from optimizer.commands.traces.read import NS, Chunk, ReadState

REUSE_WINDOW_S = 3600.0
MIN_GAP_S = 1e-3
MIN_FIT_REUSES = 10
MIN_SIGMA = 0.01  # kv_reuse.csv's σ must be > 0: reuse times all alike get this one
MINUTE_NS = 60 * NS
MERGE_ROWS = 200_000
SUMS = ("requests", "reuses", "ln_t", "ln_t_squared", "cached_tokens", "prompt_tokens", "reuses_with_tokens")
KV_REUSE_COLUMNS = ["workload", "reuse_probability", "reusable_prefix_share", "median_reuse_s", "reuse_sigma",
                    "source", "as_of", "assumed_fields"]


class _RecentKeys:
    """The keys of one workload used in the last W: sorted hashes, last use (ns), the tokens
    of that turn (prompt + output)."""

    def __init__(self):
        self.key = np.zeros(0, np.int64)
        self.t_ns = np.zeros(0, np.int64)
        self.turn_tokens = np.zeros(0, np.int64)

    def previous(self, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, last use, that turn's tokens) of each key (sorted)."""
        if not len(self.key):
            return np.zeros(len(key), bool), np.zeros(len(key), np.int64), np.zeros(len(key), np.int64)
        pos = np.minimum(np.searchsorted(self.key, key), len(self.key) - 1)
        return self.key[pos] == key, self.t_ns[pos], self.turn_tokens[pos]

    def update(self, key: np.ndarray, t_ns: np.ndarray, turn_tokens: np.ndarray, oldest_ns: int) -> None:
        """Each key's latest use (the new ones win a tie), keys last used before ``oldest_ns`` dropped."""
        k = np.concatenate((self.key, key))
        order = np.argsort(k, kind="stable")  # two sorted runs: timsort merges them in linear time
        k = k[order]
        last = np.ones(len(k), bool)
        last[:-1] = k[1:] != k[:-1]
        t = np.concatenate((self.t_ns, t_ns))[order]
        keep = last & (t >= oldest_ns)
        self.key, self.t_ns = k[keep], t[keep]
        self.turn_tokens = np.concatenate((self.turn_tokens, turn_tokens))[order][keep]


@dataclass
class _Workload:
    keys: _RecentKeys = field(default_factory=_RecentKeys)
    minutes: list = field(default_factory=list)  # DataFrames of `SUMS` indexed by minute
    minute_rows: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    by: set = field(default_factory=set)  # the id columns used: prefix_id, session_id
    cached_from: set = field(default_factory=set)  # what a reuse's cached tokens were taken from
    files: dict = field(default_factory=dict)  # file name → rows

    def add_sums(self, frame: pd.DataFrame) -> None:
        self.minutes.append(frame)
        self.minute_rows += len(frame)
        if self.minute_rows > MERGE_ROWS:
            merged = pd.concat(self.minutes).groupby(level=0).sum()
            self.minutes, self.minute_rows = [merged], len(merged)


@dataclass
class ReuseStats:
    """One workload's prefix reuse as the log shows it (module docstring)."""

    workload: str
    by: str
    cached_from: str
    files: dict
    window_s: float
    rows: int
    requests: int
    reuses: int
    corrected: bool
    last_ns: int
    reuse_probability: float
    median_reuse_s: float | None
    reuse_sigma: float | None
    reusable_prefix_share: float | None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("workload", "by", "cached_from", "files", "window_s", "rows", "requests",
                                              "reuses", "corrected", "reuse_probability", "median_reuse_s",
                                              "reuse_sigma", "reusable_prefix_share", "notes")}

    def kv_reuse_row(self) -> dict:
        """A row of kv_reuse.csv; an empty field keeps data/kv_reuse.csv's value."""
        counted = (f"{self.requests:,} requests from the first whole minute {self.window_s:g} s after the log's start"
                   if self.corrected else f"all {self.requests:,} requests (the log is too short to leave out its "
                   f"first {self.window_s:g} s: biased down)")
        files = "; ".join(f"{name} ({rows:,} rows)" for name, rows in self.files.items())
        share = f"Σ cached tokens ({self.cached_from}) / Σ prompt tokens over the reuses" \
            if self.reusable_prefix_share is not None else "not in the log (no prefix tokens): data/kv_reuse.csv's"
        source = (f"derived by fleetplan demand from {files} by {self.by}: {self.reuses:,} reuses within "
                  f"{self.window_s:g} s among {counted}; median_reuse_s and reuse_sigma from the moments of ln T "
                  f"over the reuses; reusable_prefix_share {share}")
        return {"workload": self.workload, "reuse_probability": self.reuse_probability,
                "reusable_prefix_share": self.reusable_prefix_share, "median_reuse_s": self.median_reuse_s,
                "reuse_sigma": self.reuse_sigma, "source": source,
                "as_of": pd.Timestamp(self.last_ns).strftime("%Y-%m-%d"), "assumed_fields": ""}

    def line(self) -> str:
        """One line of the command's text."""
        se = math.sqrt(self.reuse_probability * (1 - self.reuse_probability) / self.requests)
        text = f"reuse by {self.by}: p∞ {self.reuse_probability:.3f} ± {se:.3f} of {self.requests:,} requests"
        if self.median_reuse_s is not None:
            text += f", T50 {self.median_reuse_s:.3g} s, σ {self.reuse_sigma:.2f} from {self.reuses:,} reuses"
        if self.reusable_prefix_share is not None:
            text += f", reusable prefix share {self.reusable_prefix_share:.3f}"
        return "; ".join([text, *self.notes])


class ReuseAccumulator:
    """Per workload, the reuse sums of the chunks that carry a prefix or session id."""

    def __init__(self, window_s: float = REUSE_WINDOW_S):
        self.window_s = window_s
        self.window_ns = int(round(window_s * NS))
        self.workloads: dict[str, _Workload] = {}

    def add(self, chunk: Chunk, state: ReadState) -> None:
        if chunk.prefix_key is None:
            return
        by = "prefix_id" if "prefix_id" in state.columns else "session_id"
        codes = np.unique(chunk.workload)
        for code in codes:
            rows = slice(None) if len(codes) == 1 else chunk.workload == code
            w = self.workloads.setdefault(state.workloads[code], _Workload())
            w.by.add(by)
            name = Path(state.spec.path).name
            t = chunk.t_ns[rows]
            w.files[name] = w.files.get(name, 0) + len(t)
            tokens = None if chunk.prefix_tokens is None else chunk.prefix_tokens[rows]
            self._add(w, by, t, chunk.prompt[rows], chunk.output[rows], chunk.prefix_key[rows], tokens)

    def _add(self, w: _Workload, by: str, t, prompt, output, key, prefix_tokens) -> None:
        lo, hi = int(t.min()), int(t.max())
        w.first_ns = lo if w.first_ns is None else min(w.first_ns, lo)
        w.last_ns = hi if w.last_ns is None else max(w.last_ns, hi)
        order = np.argsort(key, kind="stable")
        k, t, prompt = key[order], t[order], prompt[order]
        turn = (prompt + output[order])
        first = np.ones(len(k), bool)
        first[1:] = k[1:] != k[:-1]
        seen, prev_t, prev_turn = np.ones(len(k), bool), np.roll(t, 1), np.roll(turn, 1)
        seen[first], prev_t[first], prev_turn[first] = w.keys.previous(k[first])
        gap_ns = np.abs(t - prev_t)
        reuse = seen & (gap_ns <= self.window_ns)
        if prefix_tokens is not None:
            cached = prefix_tokens[order]
            w.cached_from.add("prefix_tokens")
        elif by == "session_id":
            cached = np.minimum(prev_turn, prompt)
            w.cached_from.add("the previous turn's prompt + output, at most this prompt")
        else:
            cached = None
        with_tokens = reuse & (cached is not None)
        ln_t = np.where(reuse, np.log(np.maximum(gap_ns / NS, MIN_GAP_S)), 0.0)
        sums = pd.DataFrame({"requests": 1, "reuses": reuse.astype(np.int64), "ln_t": ln_t, "ln_t_squared": ln_t ** 2,
                             "cached_tokens": np.where(with_tokens, cached if cached is not None else 0, 0),
                             "prompt_tokens": np.where(with_tokens, prompt, 0),
                             "reuses_with_tokens": with_tokens.astype(np.int64)}, index=t // MINUTE_NS)
        w.add_sums(sums.groupby(level=0).sum())
        last = np.ones(len(k), bool)
        last[:-1] = k[1:] != k[:-1]
        w.keys.update(k[last], t[last], turn[last], w.last_ns - self.window_ns)  # the latest arrival read: the clock

    def results(self) -> list[ReuseStats]:
        return [self._stats(name, self.workloads[name]) for name in sorted(self.workloads)]

    def _stats(self, name: str, w: _Workload) -> ReuseStats:
        m = pd.concat(w.minutes).groupby(level=0).sum()
        cut = -(-(w.first_ns + self.window_ns) // MINUTE_NS)  # the first whole minute W after the start
        counted = m[m.index >= cut]
        corrected = int(counted["requests"].sum()) > 0
        s = (counted if corrected else m).sum()
        n, h = int(s["requests"]), int(s["reuses"])
        p = h / n
        median = sigma = None
        notes = [] if corrected else [f"the log spans less than the {self.window_s:g} s reuse window plus a minute: "
                                      "p∞ is counted over all requests and biased down (prefixes first used before "
                                      "the log read as new)"]
        if h >= MIN_FIT_REUSES:
            mu = s["ln_t"] / h
            sigma = math.sqrt(max(s["ln_t_squared"] - h * mu * mu, 0.0) / (h - 1))
            median = math.exp(mu)
            if sigma < MIN_SIGMA:
                notes.append(f"the reuse times are all alike (σ {sigma:.2g}): σ is given as {MIN_SIGMA}")
                sigma = MIN_SIGMA
            below = float(ndtr((math.log(self.window_s) - mu) / sigma))
            if below < 0.99:
                notes.append(f"the window keeps {100 * below:.0f} % of the fitted reuse times, so T50 and σ read low; "
                             "a longer --reuse-window cuts fewer")
        else:
            notes.append(f"{h} reuses: T50 and σ need at least {MIN_FIT_REUSES} (kept from data/kv_reuse.csv)")
        share = float(s["cached_tokens"] / s["prompt_tokens"]) if s["reuses_with_tokens"] > 0 else None
        return ReuseStats(name, "/".join(sorted(w.by)), "; ".join(sorted(w.cached_from)), dict(w.files), self.window_s, int(m["requests"].sum()), n, h,
                          corrected, w.last_ns, p, median, sigma if median is not None else None, share, notes)


def kv_reuse_table(stats: list[ReuseStats]) -> pd.DataFrame:
    """kv_reuse.csv's rows: the columns of data/kv_reuse.csv."""
    return pd.DataFrame([r.kv_reuse_row() for r in stats], columns=KV_REUSE_COLUMNS)
