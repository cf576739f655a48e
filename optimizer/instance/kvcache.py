"""The KV-cache tiers' candidate caches, per workload, generated before the solve; the plan
chooses among them (`formulations.kvcache`).

For each workload a grid gives the capacity c_k each tier k may give it per request/s at the
peak (bytes per request/s; a site with λ_site requests/s at its peak holds c_k · λ_site) on a
grid — c_k ∈ {0} ∪ {D₅₀ · 2^j, j = −6 … 6}, D₅₀ = T₅₀ · s̄ · κ the median reuse distance of
one request/s — evaluating every combination exactly and keeping the one with the least

    net $/h per peak request/s = Σ_k p_k · c_k  −  hit(Σ_k c_k) · 3600 · (λ̄/λ̂) · v

p_k the tier's $/byte-hour, hit the stack-distance hit rate (`curves.kvtiers`), λ̄/λ̂ the
workload's mean over peak demand (capacity is held for the peak, hits are saved on every
request) and v the prefill $ one hit saves: the cheapest accelerator's GPU-seconds
(t(s̄, 0) − t(s̄, s_p)) · gpus · $/GPU-h / 3600 at its cheapest contract term, over
``prefill_utilization`` (a GPU is not busy every second it is paid for). A tier whose read of s_p takes more than
``max_read_share_of_ttft`` of the workload's p99 TTFT is not offered; a tier with
``fixed_gb_per_rps`` has that one capacity (a sweep). Ties go to the first combination in
grid order (the smaller capacities). That minimum is the pre-solve optimum; the candidates
are the grid's Pareto frontier of ($/h, hit rate) thinned around it (`workload_options`).

Each candidate o gives the workload hit rate hit(Σ c_{o,k}), its prefix s_p and its p99 TTFT
less the slowest read among the tiers it uses (`with_kv_cache`); the prefill and colocated
pools are built once per candidate from the workload as it gives it (`CacheChoice`), so
they are sized for the prefill that is left and a hit's read is inside their objective. The
program splits each tier's requests among the candidates' pools and pays each candidate's
tiers at its busiest slice: the capacity trades against the pools, their sites and their
latency tiers. The decode side, the preflight checks and the predictions of slo.csv take
the workloads as the pre-solve optimum gives them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from optimizer.base.contracts import TERMS
from optimizer.base.units import SECONDS_PER_HOUR
from optimizer.curves.kvtiers import cached_tokens, hit_rate, read_time_ms, tier_hit_shares
from optimizer.curves.roofline import prefill_time_s
from optimizer.geography.demand import build_demand, build_slices
from optimizer.scenario import Scenario
from optimizer.scenario.kvcache import Reuse, Tier, resolved_reuse, resolved_tiers
from optimizer.serving.configs import kv_bytes_per_token, make_replica

GRID_EXPONENTS = np.arange(-6, 7)  # capacity per request/s as D₅₀ · 2^j
MAX_OPTIONS = 4  # candidate caches per workload the plan chooses among
# a neighbour of the pre-solve optimum is a candidate only this far from its hit rate: closer
# ones are near-duplicates whose pools would only split a tier's requests (smaller pools queue worse)
MIN_HIT_STEP = 0.02
PREFILL_PASS_TOKENS = 16384  # the prompts of one prefill pass, so that its fixed cost is shared


@dataclass(frozen=True)
class WorkloadCache:
    """One workload's tiers as sized: capacity per peak request/s and the hits they give."""

    workload: str
    tiers: tuple[str, ...]
    capacity_bytes_per_rps: tuple[float, ...]
    hit_share: tuple[float, ...]  # of all requests, served from each tier
    read_ms: tuple[float, ...]
    usd_per_byte_hour: tuple[float, ...]
    cached_tokens: float
    prefill_usd_per_hit: float
    mean_over_peak: float
    reuse_probability: float

    @property
    def hit_rate(self) -> float:
        return float(sum(self.hit_share))

    @property
    def usd_per_rps_hour(self) -> float:
        """The tiers' $ an hour per request/s at the peak: Σ_k p_k · c_k."""
        return float(sum(p * c for p, c in zip(self.usd_per_byte_hour, self.capacity_bytes_per_rps)))

    @property
    def ttft_added_ms(self) -> float:
        """The slowest read among the tiers that serve hits (0 without hits)."""
        return max((r for r, h in zip(self.read_ms, self.hit_share) if h > 0), default=0.0)


def cheapest_usd_per_gpu_hour(price) -> float:
    """The lowest $/GPU-hour among an accelerator's on-demand price and its committed terms."""
    terms = [getattr(price, t.price_column) for t in TERMS if t.price_column]
    return min([price.ondemand_usd_per_gpu_hour] + [p for p in terms if p is not None])


def prefill_usd_per_hit(s: Scenario, workload: str, cached: float) -> float:
    """v: the prefill $ a hit of ``cached`` tokens saves on the cheapest accelerator, over the
    prefill utilisation."""
    w = s.workloads[workload]
    m = s.models[w.model]
    weight, kv = w.precisions[0]
    prompts = max(1, int(PREFILL_PASS_TOKENS // max(w.isl_mean_tokens, 1.0)))
    best = float("inf")
    for g, a in s.accelerators.items():
        r = make_replica(m, a, s.serving, min(8, a.gpus_per_node), weight, kv)
        if r is None or g not in s.prices:
            continue
        saved_s = (prefill_time_s(r, w.isl_mean_tokens, 0.0, prompts)
                   - prefill_time_s(r, w.isl_mean_tokens, cached, prompts)) / prompts
        best = min(best, float(saved_s) * r.gpus * cheapest_usd_per_gpu_hour(s.prices[g]) / SECONDS_PER_HOUR)
    return 0.0 if best == float("inf") else best / s.kv_cache.prefill_utilization


def mean_over_peak(s: Scenario) -> dict[str, float]:
    """λ̄/λ̂ per workload: its hour-weighted mean requests/s over its busiest slice's."""
    slices = build_slices(s)
    demand = build_demand(s, slices).groupby(["workload", "slice"])["requests_per_s"].sum().reset_index()
    out = {}
    for k, rows in demand.groupby("workload"):
        hours = rows["slice"].map(slices["weight_hours"])
        peak = float(rows["requests_per_s"].max())
        out[k] = float((rows["requests_per_s"] * hours).sum() / hours.sum()) / peak if peak > 0 else 0.0
    return out


def _grid(tiers: list[Tier], reuse: Reuse, prompt_tokens: float, kv_bytes: float, ttft_ms: float,
          max_read_share: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float], float]:
    """(combinations × tiers of capacity per peak request/s, their hit rates, the tiers' $/byte-hour,
    each tier's read in ms, the cached prefix in tokens) of the module docstring's grid."""
    cached = cached_tokens(prompt_tokens, reuse.reusable_prefix_share)
    reads = [read_time_ms(cached, kv_bytes, t.bandwidth_gb_per_s, t.latency_ms) for t in tiers]
    d50 = reuse.median_reuse_s * prompt_tokens * kv_bytes
    steps = np.concatenate(([0.0], d50 * np.exp2(GRID_EXPONENTS)))
    usable = [r <= max_read_share * ttft_ms and cached > 0 and reuse.reuse_probability > 0 for r in reads]
    options = [np.zeros(1) if not ok else steps if t.fixed_gb_per_rps is None else np.array([t.fixed_gb_per_rps * 1e9])
               for t, ok in zip(tiers, usable)]
    combos = np.array(list(itertools.product(*options)))  # (combinations, tiers)
    price = np.array([t.usd_per_gb_hour / 1e9 for t in tiers])
    hit = hit_rate(combos.sum(axis=1), reuse.reuse_probability, reuse.median_reuse_s, reuse.reuse_sigma,
                   prompt_tokens, kv_bytes)
    return combos, hit, price, reads, cached


def _cache(workload: str, tiers: list[Tier], reuse: Reuse, prompt_tokens: float, kv_bytes: float, capacity,
           reads, price, cached: float, usd_per_hit: float, ratio: float) -> WorkloadCache:
    """The cache of one grid combination ``capacity`` (bytes per peak request/s per tier)."""
    cumulative = hit_rate(np.cumsum(capacity), reuse.reuse_probability, reuse.median_reuse_s, reuse.reuse_sigma,
                          prompt_tokens, kv_bytes)
    return WorkloadCache(workload, tuple(t.id for t in tiers), tuple(float(c) for c in capacity),
                         tuple(float(h) for h in tier_hit_shares(cumulative)), tuple(reads),
                         tuple(float(p) for p in price), cached, usd_per_hit, ratio, reuse.reuse_probability)


def workload_options(workload: str, tiers: list[Tier], reuse: Reuse, prompt_tokens: float, kv_bytes: float,
                     ttft_ms: float, max_read_share: float, usd_per_hit: float,
                     ratio: float) -> tuple[tuple[WorkloadCache, ...], WorkloadCache]:
    """(the candidate caches the plan chooses among, the pre-solve optimum).

    Candidates: the grid's Pareto frontier of (tiers' $/h per peak request/s, hit rate) — a
    combination is kept when every cheaper one hits less — thinned to at most
    `MAX_OPTIONS`: the cheapest (no cache, unless a tier's capacity is fixed or free), the
    pre-solve optimum h*, and its frontier neighbours — the dearest point cheaper than it
    with a hit rate ≤ h* − `MIN_HIT_STEP` and the cheapest dearer one with ≥ h* +
    `MIN_HIT_STEP` (where there is one). Only tiers whose read fits the TTFT share are on
    the grid, so every candidate's read does. Ordered by cost."""
    combos, hit, price, reads, cached = _grid(tiers, reuse, prompt_tokens, kv_bytes, ttft_ms, max_read_share)
    usd = combos @ price
    best = int(np.argmin(usd - hit * SECONDS_PER_HOUR * ratio * usd_per_hit))
    frontier, top = [], -1.0
    for i in np.lexsort((-hit, usd)):  # by cost, the higher hit first among equal costs
        if hit[i] > top + 1e-12 or i == best:
            frontier.append(int(i))
            top = max(top, float(hit[i]))
    at = frontier.index(best)
    lower = [i for i in frontier[:at] if hit[i] <= hit[best] - MIN_HIT_STEP][-1:]
    upper = [i for i in frontier[at + 1:] if hit[i] >= hit[best] + MIN_HIT_STEP][:1]
    keep = sorted({frontier[0], *lower, best, *upper}, key=lambda i: (usd[i], -hit[i]))
    made = {i: _cache(workload, tiers, reuse, prompt_tokens, kv_bytes, combos[i], reads, price, cached, usd_per_hit,
                      ratio) for i in keep}
    return tuple(made[i] for i in keep), made[best]


def cache_options(s: Scenario) -> tuple[dict[str, tuple[WorkloadCache, ...]], dict[str, WorkloadCache]] | None:
    """(each workload's candidate caches, its pre-solve optimum) (`workload_options`); None
    where the scenario has no ``kv_cache`` tiers."""
    if not s.kv_cache.tiers:
        return None
    tiers = resolved_tiers(s.kv_cache)
    reuse = resolved_reuse(s.kv_cache, s.workloads)
    ratio = mean_over_peak(s)
    options, best = {}, {}
    for k, w in s.workloads.items():
        kv_bytes = kv_bytes_per_token(w, s.models[w.model])
        cached = cached_tokens(w.isl_mean_tokens, reuse[k].reusable_prefix_share)
        options[k], best[k] = workload_options(k, tiers, reuse[k], w.isl_mean_tokens, kv_bytes, w.ttft_p99_ms,
                                               s.kv_cache.max_read_share_of_ttft, prefill_usd_per_hit(s, k, cached),
                                               ratio.get(k, 0.0))
    return options, best


def with_kv_cache(s: Scenario, sized: dict[str, WorkloadCache] | None, objectives_less_reads: bool = True) -> Scenario:
    """The scenario the plan runs: each workload's hit rate, prefix and p99 TTFT as its tiers
    give them (itself without tiers). ``objectives_less_reads`` off keeps the objectives: the
    scenario a simulation serves, which adds each hit's read to its TTFT (`read_law`). A
    workload ``sized`` leaves out is left out of the scenario."""
    if sized is None:
        return s
    workloads = {k: w.model_copy(update={"prompt_cache_hit_rate": sized[k].hit_rate,
                                         "shared_prefix_tokens": sized[k].cached_tokens if sized[k].hit_rate else 0.0,
                                         "ttft_p99_ms": w.ttft_p99_ms - (sized[k].ttft_added_ms
                                                                         if objectives_less_reads else 0.0)})
                 for k, w in s.workloads.items() if k in sized}
    return s.model_copy(update={"workloads": workloads})


@dataclass(frozen=True)
class CacheChoice:
    """What the plan chooses among (`cache_choice`): per candidate index i the scenario of the
    workloads that have an i-th candidate, each as that candidate gives it (`with_kv_cache`
    on the scenario as written) — the scenario its prefill and colocated pools are built
    from — and (workload, i) → the candidate's $ an hour per request/s at the peak and its
    hit rate."""

    scenarios: tuple[Scenario, ...]
    usd_per_rps_hour: dict[tuple[str, int], float]
    hit_rate: dict[tuple[str, int], float]


def cache_choice(s: Scenario, options: dict[str, tuple[WorkloadCache, ...]]) -> CacheChoice:
    """The `CacheChoice` of ``s`` (as written, before any `with_kv_cache`) and its candidates."""
    most = max((len(o) for o in options.values()), default=0)
    return CacheChoice(tuple(with_kv_cache(s, {k: o[i] for k, o in options.items() if len(o) > i})
                             for i in range(most)),
                       {(k, i): c.usd_per_rps_hour for k, o in options.items() for i, c in enumerate(o)},
                       {(k, i): c.hit_rate for k, o in options.items() for i, c in enumerate(o)})


def read_law(sized: dict[str, WorkloadCache] | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per workload with hits: (the share of its hits each tier that serves some serves, that
    tier's read in ms) — so the slowest read is the plan's `WorkloadCache.ttft_added_ms`."""
    out = {}
    for k, c in (sized or {}).items():
        share, read_ms = np.asarray(c.hit_share, dtype=float), np.asarray(c.read_ms, dtype=float)
        if (share > 0).any():
            out[k] = (share[share > 0] / c.hit_rate, read_ms[share > 0])
    return out
