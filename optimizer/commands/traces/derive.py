"""What a request log says about demand, per (metro, workload), in one streaming pass.

The pass (`derive`) keeps, per (metro, workload), counts of requests per clock second
(only seconds that have requests) and counts of requests per prompt and per output length
— memory grows with the log's span and the number of distinct lengths, not with its rows
(`benchmarks/trace_demand.py`). From them, exactly:

* ``requests``; ``rate_per_s_mean`` = requests / (last − first arrival) of the log's files
  that hold the pair (the log's window).
* Hourly rate profile: for each UTC hour of the day, requests in that hour ÷ its seconds
  inside the window (whole clock seconds, summed over the log's days); local time is the
  metro's UTC offset later.
* Burstiness, over the log's hours: consecutive 3,600-s stretches of whole seconds from the
  window's first whole second (a last, shorter stretch counts if it lasts 30 minutes, or
  if it is the only one and lasts 10). In each stretch with requests, of mean rate m per s:
      peak_to_mean_per_minute = max over 60-s windows (sliding by 1 s) of requests ÷ (60·m)
      peak_to_mean_per_10s    = the same over 10-s windows
      peak_to_mean_per_second = max over clock seconds of requests ÷ m
      dispersion_per_minute  = variance / mean of requests per consecutive 60-s bin (n − 1)
  each averaged over the stretches (Poisson arrivals give a dispersion of 1).
* Lengths: mean, p50, p90, p99 (the smallest length with at least 99 % of requests at or
  below it) and the whole distribution; cache hits where the log has a cached column.
* Growth: with at least `GROWTH_MIN_DAYS` whole UTC days, the slope b of a least-squares
  line through ln(requests per day); growth per period = exp(b · days per period) − 1.

With a prefix or session id column, each workload's prefix reuse (`reuse`) in the same pass.

Too short a log for what is asked is an error naming what was estimated from how many
requests: fewer than `MIN_REQUESTS_P99` requests for a p99, under 10 whole minutes for the
burstiness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.units import DAYS_PER_YEAR, HOURS_PER_DAY, SECONDS_PER_HOUR
from optimizer.commands.traces.read import NS, ReadState, file_kind, iter_chunks
from optimizer.commands.traces.reuse import REUSE_WINDOW_S, ReuseAccumulator, ReuseStats
from optimizer.scenario.trace_spec import TraceSpec

EPOCH0_S = pd.Timestamp("1990-01-01").value // NS  # seconds are keyed from here (timestamps start in 1990)
SECOND_BITS = 33
LENGTH_BITS = 24  # lengths are at most MAX_TOKENS < 2**24
MERGE_ENTRIES = 2_000_000
HOUR_S = int(SECONDS_PER_HOUR)  # the log is binned by whole seconds: an hour and a day of them as integers
DAY_S = HOURS_PER_DAY * HOUR_S
MIN_LAST_STRETCH_S = 1800
MIN_ONLY_STRETCH_S = 600
MIN_REQUESTS_P99 = 100
GROWTH_MIN_DAYS = 14


class _SparseCounts:
    """Counts per int64 key: each chunk's sorted distinct keys and their counts, kept as they
    come (a log in time order thus holds each (pair, second) about once) and merged when the
    pieces add up to twice the distinct keys of the last merge, at least `MERGE_ENTRIES`:
    memory stays within about twice the distinct keys, merges are few."""

    def __init__(self):
        self.keys: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.entries = 0
        self.limit = MERGE_ENTRIES

    def add(self, keys: np.ndarray) -> None:
        k, c = np.unique(keys, return_counts=True)
        self.keys.append(k)
        self.counts.append(c.astype(np.int64))
        self.entries += len(k)
        if self.entries > self.limit:
            k, c = _summed(self.keys, self.counts)
            self.keys, self.counts, self.entries = [k], [c], len(k)
            self.limit = max(MERGE_ENTRIES, 2 * len(k))

    def of(self, group: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
        """(values, counts) of one group, values ascending."""
        lo, hi = group << bits, (group + 1) << bits
        keys, counts = [], []
        for k, c in zip(self.keys, self.counts):
            a, b = np.searchsorted(k, [lo, hi])
            keys.append(k[a:b])
            counts.append(c[a:b])
        u, c = _summed(keys, counts)
        return u - lo, c


def _summed(keys: list[np.ndarray], counts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys (ascending) and their summed counts."""
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, inv = np.unique(np.concatenate(keys), return_inverse=True)
    return u, np.bincount(inv, weights=np.concatenate(counts), minlength=len(u)).astype(np.int64)


@dataclass
class Lengths:
    """An empirical length distribution: distinct lengths and how many requests had each."""

    tokens: np.ndarray
    requests: np.ndarray

    @property
    def mean(self) -> float:
        return float((self.tokens * self.requests).sum() / self.requests.sum())

    def quantile(self, q: float) -> float:
        """Smallest length with at least a share q of requests at or below it."""
        cum = np.cumsum(self.requests)
        return float(self.tokens[np.searchsorted(cum, q * cum[-1] - 1e-9 * cum[-1])])

    def summary(self) -> dict:
        return {"mean": self.mean, "p50": self.quantile(0.5), "p90": self.quantile(0.9), "p99": self.quantile(0.99),
                "max": float(self.tokens[-1])}

    @staticmethod
    def merge(parts: list["Lengths"]) -> "Lengths":
        return Lengths(*_summed([p.tokens for p in parts], [p.requests for p in parts]))


@dataclass
class PairStats:
    """What the log says about one (metro, workload)."""

    metro: str | None
    workload: str | None
    requests: int
    first_ns: int
    last_ns: int
    isl: Lengths
    osl: Lengths
    hours: pd.DataFrame  # utc_hour, requests, seconds, requests_per_s
    stretches: pd.DataFrame  # start_utc, seconds, requests, peak_to_mean_per_minute, …
    per_minute: pd.Series  # requests per consecutive 60-s bin of the window, by the bin's start (UTC)
    cache_hit_rate: float | None = None
    cached_tokens_on_hit: float | None = None
    growth: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def span_s(self) -> float:
        return (self.last_ns - self.first_ns) / NS

    @property
    def rate_per_s_mean(self) -> float:
        return self.requests / self.span_s

    def burstiness(self, column: str) -> float:
        """A burstiness figure of the log's hours (module docstring), averaged over them."""
        return float(self.stretches[column].mean())

    def as_dict(self) -> dict:
        isl, osl = self.isl.summary(), self.osl.summary()
        return {
            "metro": self.metro, "workload": self.workload, "requests": self.requests,
            "first_utc": str(pd.Timestamp(self.first_ns)), "last_utc": str(pd.Timestamp(self.last_ns)),
            "span_s": self.span_s, "rate_per_s_mean": self.rate_per_s_mean,
            "isl_mean_tokens": isl["mean"], "isl_p50_tokens": isl["p50"], "isl_p90_tokens": isl["p90"],
            "isl_p99_tokens": isl["p99"], "isl_max_tokens": isl["max"],
            "osl_mean_tokens": osl["mean"], "osl_p50_tokens": osl["p50"], "osl_p90_tokens": osl["p90"],
            "osl_p99_tokens": osl["p99"], "osl_max_tokens": osl["max"],
            "peak_to_mean_per_minute": self.burstiness("peak_to_mean_per_minute"),
            "peak_to_mean_per_10s": self.burstiness("peak_to_mean_per_10s"),
            "peak_to_mean_per_second": self.burstiness("peak_to_mean_per_second"),
            "dispersion_per_minute": self.burstiness("dispersion_per_minute"),
            "hours_of_log": int(len(self.stretches)),
            "utc_hours": [int(h) for h in self.hours["utc_hour"]],
            "cache_hit_rate": self.cache_hit_rate, "cached_tokens_on_hit": self.cached_tokens_on_hit,
            "growth": self.growth, "notes": list(self.notes),
        }


@dataclass
class Derived:
    pairs: list[PairStats]
    files: list[dict]  # per log: path, rows, first/last UTC, columns used, resolution
    warnings: list[str]
    label_rows: dict  # (kind, name) → Origin of the first row carrying it
    reuse: list[ReuseStats] = field(default_factory=list)  # per workload, where the log has prefix or session ids

    def as_dict(self) -> dict:
        out = {"pairs": [p.as_dict() for p in self.pairs], "files": self.files, "warnings": self.warnings}
        if self.reuse:
            out["reuse"] = [r.as_dict() for r in self.reuse]
        return out


# ---------------------------------------------------------------------------- the pass


class _Accumulator:
    def __init__(self, reuse_window_s: float = REUSE_WINDOW_S):
        self.pairs: dict[tuple, int] = {}
        self.windows: dict[int, list] = {}  # pair → [first_ns, last_ns] (union of its files' windows)
        self.seconds = _SparseCounts()
        self.isl = _SparseCounts()
        self.osl = _SparseCounts()
        self.cached_sum: dict[int, float] = {}
        self.cached_hits: dict[int, int] = {}
        self.reuse = ReuseAccumulator(reuse_window_s)

    def pair_ids(self, state: ReadState, metro: np.ndarray, workload: np.ndarray) -> np.ndarray:
        """The (metro, workload) pair of each row of a chunk, numbered across files as first met."""
        width = max(len(state.workloads), 1)
        present, inverse = np.unique(metro.astype(np.int64) * width + workload, return_inverse=True)
        ids = [self.pairs.setdefault((state.metros[c // width], state.workloads[c % width]), len(self.pairs))
               for c in present]
        return np.asarray(ids, np.int64)[inverse]

    def add_file(self, spec: TraceSpec) -> dict:
        state = ReadState(spec, file_kind(spec.path))
        first = last = None
        seen: set[int] = set()
        for chunk in iter_chunks(spec, state):
            pid = self.pair_ids(state, chunk.metro, chunk.workload)
            seen.update(np.unique(pid).tolist())
            t = chunk.t_ns
            lo, hi = int(t.min()), int(t.max())
            first, last = (lo, hi) if first is None else (min(first, lo), max(last, hi))
            self.seconds.add((pid << SECOND_BITS) + (t // NS - EPOCH0_S))
            self.isl.add((pid << LENGTH_BITS) + chunk.prompt)
            self.osl.add((pid << LENGTH_BITS) + chunk.output)
            self.reuse.add(chunk, state)
            if chunk.cached is not None:
                for p in np.unique(pid):
                    c = chunk.cached[pid == p]
                    self.cached_sum[p] = self.cached_sum.get(p, 0.0) + float(c.sum())
                    self.cached_hits[p] = self.cached_hits.get(p, 0) + int((c > 0).sum())
        if first is None:
            raise ScenarioError("the log has a header but no requests", Origin(str(spec.path)))
        for p in seen:
            w = self.windows.setdefault(p, [first, last])
            w[0], w[1] = min(w[0], first), max(w[1], last)
        return {"state": state, "first_ns": first, "last_ns": last}


def derive(specs: list[TraceSpec], days_per_period: float = DAYS_PER_YEAR / 4,
           reuse_window_s: float = REUSE_WINDOW_S) -> Derived:
    """One streaming pass over the logs → statistics per (metro, workload) found, and per
    workload the prefix reuse where the logs carry prefix or session ids."""
    acc = _Accumulator(reuse_window_s)
    files, warnings, label_rows = [], [], {}
    for spec in specs:
        info = acc.add_file(spec)
        state = info["state"]
        warnings.extend(state.warnings())
        for (kind, name), row in state.first_rows.items():
            label_rows.setdefault((kind, name), state.origin(row))
        files.append({"path": str(spec.path), "rows": state.rows, "columns": state.columns,
                      "first_utc": str(pd.Timestamp(info["first_ns"])), "last_utc": str(pd.Timestamp(info["last_ns"])),
                      "duplicates_checked": bool(state.sub_ms),
                      "epoch_unit": state.epoch_unit[2] if state.epoch_unit else None})
        if not state.sub_ms:
            warnings.append(f"{spec.path}: timestamps have no digits below the millisecond, so repeated rows "
                            "cannot be told from distinct requests and were not checked")
    pairs = [_pair_stats(acc, key, pid, days_per_period) for key, pid in sorted(acc.pairs.items(), key=_key_order)]
    return Derived(pairs, files, warnings, label_rows, acc.reuse.results())


def _key_order(item):
    (metro, workload), _ = item
    return (str(metro), str(workload))


# ---------------------------------------------------------------------------- statistics


def _pair_stats(acc: _Accumulator, key: tuple, pid: int, days_per_period: float) -> PairStats:
    metro, workload = key
    first_ns, last_ns = acc.windows[pid]
    isl = Lengths(*acc.isl.of(pid, LENGTH_BITS))
    osl = Lengths(*acc.osl.of(pid, LENGTH_BITS))
    requests = int(isl.requests.sum())
    name = f"metro {metro or '(none)'} / workload {workload or '(none)'}"
    if requests < MIN_REQUESTS_P99:
        raise ScenarioError(f"{name}: {requests} requests; a p99 length needs at least {MIN_REQUESTS_P99} (only the "
                            f"mean could be estimated: prompt {isl.mean:.0f}, output {osl.mean:.0f} tokens)",
                            field="requests")
    sec, count = acc.seconds.of(pid, SECOND_BITS)
    lo = -(-first_ns // NS) - EPOCH0_S  # first whole second
    hi = last_ns // NS - EPOCH0_S  # end of the last whole second
    dense = np.zeros(max(hi - lo, 0), np.int64)
    inside = (sec >= lo) & (sec < hi)
    dense[sec[inside] - lo] = count[inside]
    stretches = _stretches(dense, lo + EPOCH0_S, name, requests)
    minutes = dense[: len(dense) // 60 * 60].reshape(-1, 60).sum(axis=1)
    per_minute = pd.Series(minutes, index=pd.to_datetime((lo + EPOCH0_S + 60 * np.arange(len(minutes))) * NS))
    out = PairStats(metro, workload, requests, first_ns, last_ns, isl, osl, _hours(dense, lo + EPOCH0_S), stretches,
                    per_minute)
    if pid in acc.cached_sum:
        hits = acc.cached_hits[pid]
        out.cache_hit_rate = hits / requests
        out.cached_tokens_on_hit = acc.cached_sum[pid] / hits if hits else 0.0
    out.growth, note = _growth(dense, lo + EPOCH0_S, days_per_period)
    out.notes.append(note)
    out.notes.append(f"lengths from {requests:,} requests; burstiness from {len(stretches)} hour(s) of the log "
                     f"({int(stretches['seconds'].sum()) // 60:,} whole minutes); hourly rates for UTC hours "
                     + hour_ranges(out.hours["utc_hour"]))
    ratio = osl.quantile(0.99) / osl.mean, isl.quantile(0.99) / isl.mean
    if max(ratio) > 14.9:
        out.notes.append("a p99 more than 14.9× its mean cannot be a lognormal: the workload row caps it there, "
                         "the empirical distribution keeps the tail")
    return out


def hour_ranges(hours) -> str:
    """[0, 1, 2, 5, 7, 8] → '0–2, 5, 7–8'."""
    hours = sorted(int(h) for h in hours)
    runs: list[list[int]] = []
    for h in hours:
        if runs and h == runs[-1][-1] + 1:
            runs[-1].append(h)
        else:
            runs.append([h])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _stretches(dense: np.ndarray, start_s: int, name: str, requests: int) -> pd.DataFrame:
    total = len(dense)
    bounds = [(i, min(i + HOUR_S, total)) for i in range(0, total, HOUR_S)]
    keep = [(a, b) for a, b in bounds if b - a == HOUR_S or b - a >= MIN_LAST_STRETCH_S]
    if not keep and bounds and bounds[0][1] - bounds[0][0] >= MIN_ONLY_STRETCH_S:
        keep = bounds[:1]
    rows = []
    for a, b in keep:
        c = dense[a:b]
        n = int(c.sum())
        if n == 0:
            continue
        mean_s = n / len(c)
        cs = np.concatenate(([0], np.cumsum(c)))
        busiest = {w: int((cs[w:] - cs[:-w]).max()) for w in (60, 10)}
        minutes = c[: len(c) // 60 * 60].reshape(-1, 60).sum(axis=1)
        rows.append({"start_utc": pd.Timestamp((start_s + a) * NS), "seconds": len(c), "requests": n,
                     "peak_to_mean_per_minute": busiest[60] / (60 * mean_s),
                     "peak_to_mean_per_10s": busiest[10] / (10 * mean_s),
                     "peak_to_mean_per_second": float(c.max()) / mean_s,
                     "dispersion_per_minute": float(minutes.var(ddof=1) / minutes.mean()) if minutes.mean() > 0
                     else float("nan")})
    if not rows:
        raise ScenarioError(f"{name}: the log spans {total / 60:.1f} whole minutes ({requests:,} requests); the "
                            "per-minute peak-to-mean needs at least 10 whole minutes with requests", field="timestamp")
    return pd.DataFrame(rows)


def _hours(dense: np.ndarray, start_s: int) -> pd.DataFrame:
    hour = ((start_s + np.arange(len(dense))) // HOUR_S) % HOURS_PER_DAY
    seconds = np.bincount(hour, minlength=HOURS_PER_DAY)
    requests = np.bincount(hour, weights=dense, minlength=HOURS_PER_DAY)
    covered = np.flatnonzero(seconds)
    return pd.DataFrame({"utc_hour": covered, "requests": requests[covered].astype(np.int64),
                         "seconds": seconds[covered], "requests_per_s": requests[covered] / seconds[covered]})


def _growth(dense: np.ndarray, start_s: int, days_per_period: float) -> tuple[dict | None, str]:
    day = DAY_S
    first_day = -(-start_s // day)
    days = max((start_s + len(dense)) // day - first_day, 0)
    if days < GROWTH_MIN_DAYS:
        span = f"{len(dense) / SECONDS_PER_HOUR:.2f} hours" if len(dense) < 2 * day else \
            f"{len(dense) / day:.1f} days ({days} whole UTC days)"
        return None, f"growth not estimated: the log spans {span}; {GROWTH_MIN_DAYS} whole UTC days are needed"
    a = first_day * day - start_s
    daily = dense[a:a + days * day].reshape(days, day).sum(axis=1)
    if (daily <= 0).any():
        return None, "growth not estimated: some whole day of the log has no requests"
    x = np.arange(days, dtype=float)
    slope, _ = np.polyfit(x, np.log(daily), 1)
    g = math.exp(slope * days_per_period) - 1.0
    return ({"per_day": math.exp(slope) - 1.0, "per_period": g, "days_per_period": days_per_period, "days": int(days)},
            f"growth {100 * g:+.1f} % per period of {days_per_period:g} days, fitted to {days} whole days")
