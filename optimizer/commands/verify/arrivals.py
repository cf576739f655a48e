"""Where a simulated group's requests come from: Poisson arrivals with lognormal lengths (the
plan's own assumptions), or a request log replayed.

A source gives, for one group, the mean rate of each route while simulated (`route_rates`:
it sets the flow shares and the warm start) and the requests themselves (`draw`): arrival
times, routes, prompt, output and cached tokens, and which requests are counted.

`Poisson` (the default) is `verify`'s model: arrivals at the routed rate × the workload's
peak factor, lognormal prompt and output lengths, prompt-cache hits at the workload's rate;
the first `warmup_fraction` of arrivals (at least half a mean decode duration) are not
counted, and arrivals go on for a cool-down after the counted ones.

`Trace` replays a log: per (metro, workload) a `Stream` of arrivals with their lengths.
* The window: for a slice at UTC hour h, the hour h of the log's day with the most requests
  in it, if the log covers that hour for at least 30 minutes and it has requests; else the
  log's busiest 60 minutes (a log of an hour or less: the whole log). Every request of the window is
  counted; the window's last stretch is replayed before it as a warm-up (10 % of the
  window, at least half a mean decode duration) and its first stretch after it as the
  cool-down, so the queues at the window's start are those of a running hour.
* Scaled ("planned"): the window's arrivals are resampled to the routes' planned rate
  (mean over the hour; the log's own burstiness replaces the peak factor). A log request
  stands for f = planned rate / the window's rate requests: with f ≤ 1 each is kept with
  probability f (a thinning, which keeps the log's timing); with f > 1 it arrives as itself
  plus ⌊f⌋ − 1 or ⌊f⌋ further copies (⌈f⌉ with probability f − ⌊f⌋) spread uniformly over
  `JITTER_GAPS` mean gaps of the log around it. The log's rate profile is kept at time
  scales above those few gaps (its busiest minute stays its busiest minute, in clock time)
  while copies do not arrive at one instant. Compressing the log's clock instead would shrink
  a one-minute burst to seconds; replicating without jitter would turn the log's sampling
  noise into bursts. Copies keep their original's lengths.
* As recorded ("recorded"): the window at the log's own rate, shared among the routes that
  draw on the stream (all groups of the slice) by their planned rates.
A workload the log does not cover is simulated with `Poisson`, and said so.

`Poisson(lengths=…)` keeps Poisson arrivals but draws lengths from a log's empirical
distributions (prompt and output independently: in the shipped Azure logs their log-lengths
correlate at 0.09 and −0.005), which separates what the lengths change from what the
arrivals change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from optimizer.base.units import HOURS_PER_DAY, SECONDS_PER_HOUR

NS = 1_000_000_000
WINDOW_S = SECONDS_PER_HOUR
HOUR_NS = int(SECONDS_PER_HOUR) * NS  # log times are integer nanoseconds
DAY_NS = HOURS_PER_DAY * HOUR_NS
MIN_HOUR_COVER_S = 1800.0
JITTER_GAPS = 10.0


@dataclass
class Requests:
    """One group's requests, in arrival order."""

    t: np.ndarray  # arrival, s
    route: np.ndarray  # index into the group's routes
    isl: np.ndarray
    osl: np.ndarray
    cached: np.ndarray
    counted: np.ndarray  # bool
    extra: dict = field(default_factory=dict)


@dataclass
class DrawInputs:
    """What a source needs to draw a group's requests."""

    group: object  # the verify Group
    workload: object  # the scenario's Workload row
    routes: list
    rates: np.ndarray  # requests/s per route, from `route_rates`
    requests: int  # requested arrivals of the measured window (Poisson)
    fill: float  # longest mean decode duration of the group's batching pools, s
    opt: object  # verify Options
    isl_dist: object
    osl_dist: object
    rng_arrival: np.random.Generator
    rng_route: np.random.Generator
    rng_length: np.random.Generator


def _cache(ctx: DrawInputs, isl: np.ndarray) -> np.ndarray:
    w = ctx.workload
    hit = ctx.rng_length.random(len(isl)) < w.prompt_cache_hit_rate
    return np.where(hit, np.minimum(int(w.shared_prefix_tokens), isl - 1), 0).astype(np.int64)


class Poisson:
    """Poisson arrivals × the peak factor, lognormal lengths (module docstring) — or, for the
    workloads in ``lengths`` (workload → (prompt, output) distributions with a ``sample(rng,
    n)``, e.g. `curves.lengths.EmpiricalLengths` from a log), lengths drawn from those."""

    def __init__(self, lengths: dict | None = None):
        self.lengths = lengths or {}
        self.name = "poisson" + (" (lengths of the log)" if self.lengths else "")

    def prepare(self, groups) -> None:
        """Nothing to learn from the other groups."""

    def route_rates(self, scenario, group, routes) -> np.ndarray:
        return np.array([r.requests_per_s for r in routes]) * scenario.peak_to_mean(group.workload)

    def draw(self, ctx: DrawInputs) -> Requests:
        opt, lam = ctx.opt, float(ctx.rates.sum())
        main = max(min(int(ctx.requests), int(math.ceil(lam * opt.cap_s))), 10)
        n_warm0 = int(math.ceil(opt.warmup_fraction * main))
        counted_n = main - n_warm0
        n_warm = max(n_warm0, int(math.ceil(lam * opt.warmup_decode_durations * ctx.fill)))
        n_cool = int(math.ceil(lam * opt.cooldown_decode_durations * ctx.fill))
        n = n_warm + counted_n + n_cool
        t = np.cumsum(ctx.rng_arrival.exponential(1.0 / lam, n))
        route = ctx.rng_route.choice(len(ctx.routes), n, p=ctx.rates / lam)
        isl_dist, osl_dist = self.lengths.get(ctx.workload.id, (ctx.isl_dist, ctx.osl_dist))
        isl = isl_dist.sample(ctx.rng_length, n)
        osl = osl_dist.sample(ctx.rng_length, n)
        cached = _cache(ctx, isl)
        counted = np.zeros(n, bool)
        counted[n_warm:n_warm + counted_n] = True
        return Requests(t, route, isl, osl, cached, counted, {"warmup": n_warm, "cooldown": n_cool,
                                                              "arrivals": self.name})


POISSON = Poisson()


@dataclass
class Stream:
    """A log's requests of one (metro, workload), in arrival order."""

    t_ns: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    cached: np.ndarray | None = None

    def window(self, utc_hour: int) -> tuple[int, int, int, float]:
        """The replayed window for a slice at ``utc_hour`` (module docstring): index range
        [a, b) of its requests, its start (ns) and its length (s)."""
        t = self.t_ns
        first, last = int(t[0]), int(t[-1])
        day0 = first // DAY_NS
        best = None
        for day in range(day0, last // DAY_NS + 1):
            lo = max(day * DAY_NS + utc_hour * HOUR_NS, first)
            hi = min(day * DAY_NS + (utc_hour + 1) * HOUR_NS, last + 1)
            if hi - lo >= MIN_HOUR_COVER_S * NS:
                a, b = np.searchsorted(t, [lo, hi])
                if b > a and (best is None or b - a > best[1] - best[0]):
                    best = (int(a), int(b), lo, (hi - lo) / NS)
        if best is None:
            if last - first <= WINDOW_S * NS:
                return 0, len(t), first, (last - first) / NS + 1e-6
            ends = np.searchsorted(t, t + int(WINDOW_S * NS))
            a = int(np.argmax(ends - np.arange(len(t))))
            best = (a, int(ends[a]), int(t[a]), WINDOW_S)
        return best


class Trace:
    """A log replayed, scaled to the planned rates or as recorded (module docstring)."""

    def __init__(self, streams: dict, scale: str = "planned", jitter_gaps: float = JITTER_GAPS):
        if scale not in ("planned", "recorded"):
            raise ValueError(f"scale is 'planned' or 'recorded', got {scale!r}")
        self.streams = streams  # (metro or None, workload) → Stream
        self.scale = scale
        self.jitter_gaps = jitter_gaps
        self.name = f"trace ({scale})"
        self.slice_totals: dict = {}

    def stream_key(self, metro: str, workload: str):
        for key in ((metro, workload), (None, workload)):
            if key in self.streams:
                return key
        return None

    def prepare(self, groups) -> None:
        """Planned requests/s of every stream in every slice (all groups): the recorded
        window is shared among its routes by these."""
        for g in groups:
            for r in g.routes:
                key = (self.stream_key(r.metro, g.workload), g.period, g.day_type, g.hour)
                self.slice_totals[key] = self.slice_totals.get(key, 0.0) + r.requests_per_s

    def covers(self, group) -> bool:
        return any(self.stream_key(r.metro, group.workload) is not None for r in group.routes)

    def route_rates(self, scenario, group, routes) -> np.ndarray:
        if not self.covers(group):
            return POISSON.route_rates(scenario, group, routes)
        planned = np.array([r.requests_per_s for r in routes])
        if self.scale == "planned":
            return planned
        out = np.empty(len(routes))
        for i, r in enumerate(routes):
            key = self.stream_key(r.metro, group.workload)
            stream = self.streams[key]
            a, b, _, length_s = stream.window(group.hour)
            total = self.slice_totals.get((key, group.period, group.day_type, group.hour), r.requests_per_s)
            out[i] = (b - a) / length_s * r.requests_per_s / total
        return out

    def draw(self, ctx: DrawInputs) -> Requests:
        group = ctx.group
        if not self.covers(group):
            req = POISSON.draw(ctx)
            req.extra["arrivals"] = "poisson (the log has no requests of this workload)"
            return req
        opt = ctx.opt
        parts = []
        by_stream: dict = {}
        for i, r in enumerate(ctx.routes):
            by_stream.setdefault(self.stream_key(r.metro, ctx.workload.id), []).append(i)
        warm = cool = 0.0
        for key, idx in sorted(by_stream.items(), key=lambda x: str(x[0])):
            stream = self.streams[key]
            a, b, start_ns, length_s = stream.window(group.hour)
            warm = max(opt.warmup_fraction * length_s, opt.warmup_decode_durations * ctx.fill)
            cool = opt.cooldown_decode_durations * ctx.fill
            rel = (stream.t_ns[a:b] - start_ns) / NS
            pos, t = cyclic_window(rel, length_s, warm, cool)
            rate = (b - a) / length_s
            f = float(ctx.rates[idx].sum()) / rate
            copy_of, t = resample(t, f, self.jitter_gaps / rate, ctx.rng_arrival)
            src = a + pos[copy_of]
            share = ctx.rates[idx] / ctx.rates[idx].sum()
            route = np.asarray(idx)[ctx.rng_route.choice(len(idx), len(src), p=share)]
            cached = None if stream.cached is None else stream.cached[src]
            parts.append((t, route, stream.isl[src], stream.osl[src], cached, (t >= 0) & (t < length_s)))
        t = np.concatenate([p[0] for p in parts])
        order = np.argsort(t, kind="stable")
        t, route, isl, osl, counted = (np.concatenate([p[i] for p in parts])[order] for i in (0, 1, 2, 3, 5))
        top = ctx.isl_dist.max_tokens
        isl = np.clip(isl, 1, top).astype(np.int64)
        osl = np.clip(osl, 1, top).astype(np.int64)
        if all(p[4] is not None for p in parts):
            cached = np.minimum(np.concatenate([p[4] for p in parts])[order], isl - 1)
        else:
            cached = _cache(ctx, isl)
        return Requests(t - t[0], route, isl, osl, cached, counted,
                        {"warmup": int((t < 0).sum()), "cooldown": int((~counted & (t >= 0)).sum()),
                         "arrivals": self.name})


def cyclic_window(rel: np.ndarray, length_s: float, before_s: float, after_s: float):
    """The window's arrivals repeated around it so that they cover [−before, length + after):
    (index into the window, time)."""
    lo = -int(math.ceil(before_s / length_s))
    hi = int(math.ceil(after_s / length_s))
    pos = np.concatenate([np.arange(len(rel))] * (hi - lo + 1))
    t = np.concatenate([rel + k * length_s for k in range(lo, hi + 1)])
    keep = (t >= -before_s) & (t < length_s + after_s)
    return pos[keep], t[keep]


def resample(t: np.ndarray, f: float, jitter_s: float, rng: np.random.Generator):
    """Each arrival stands for f arrivals (module docstring): (index of the original, time)."""
    whole = math.floor(f)
    copies = whole + (rng.random(len(t)) < f - whole)
    src = np.repeat(np.arange(len(t)), copies)
    first = np.concatenate(([True], src[1:] != src[:-1])) if len(src) else np.zeros(0, bool)
    times = t[src] + np.where(first, 0.0, (rng.random(len(src)) - 0.5) * jitter_s)
    return src, times
