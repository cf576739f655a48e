"""One (site, workload, slice) of a plan, simulated request by request.

A group is everything that shares replicas: the tiers' prefill and colocated pools of the
site and workload, and the site's decode pools they hand off to. Its arrivals are the
routes (metro → site, tier) of that slice at requests/s × peak-to-mean, or a log replayed
(`arrivals`).

Warm-up and cool-down. Queues start empty. The first 10 % of arrivals are not counted. A
decode batch, though, takes several mean decode durations (output × time per token, tens of
seconds for chat) to fill from empty — longer than 10 % of 20,000 arrivals lasts at a few
hundred requests/s — and while it fills, steps are shorter than in steady state. So, unless
``Options.warm_start`` is off, every decode and colocated replica starts with its steady-state
batch already mid-decode (`steady_state`, `initial_sequences`: Little's law on the step
curve; these sequences are never counted), and the warm-up lasts at least half a mean decode
duration. After the counted arrivals, arrivals go on (uncounted) for one more mean decode
duration, so that counted requests finish beside a full batch rather than a draining one.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from optimizer.base.units import MS_PER_S, SECONDS_PER_HOUR, Role
from optimizer.commands.verify.arrivals import POISSON, DrawInputs
from optimizer.commands.verify.engine import fifo_pool, simulate_pool
from optimizer.commands.verify.replicas import PoolSpec
from optimizer.commands.verify.steps import StepModel, TabulatedSteps
from optimizer.curves.cache import cache_kv_share
from optimizer.curves.lengths import LengthDistribution, prompt_lengths
from optimizer.curves.memory import kv_budget_bytes, replica_kv_copies
from optimizer.curves.prefill_batch import pass_time_s
from optimizer.curves.roofline import prefill_time_s
from optimizer.curves.speculative import expected_tokens_per_step
from optimizer.results.latency import flow_shares
from optimizer.serving.configs import config_precision, kv_bytes_per_token, make_replica
from optimizer.serving.experts import speculation

# ITL histogram: bin 0 holds zero gaps (tokens of one speculative step after its first);
# bin i ≥ 1 holds gaps in [G0·R^(i−1), G0·R^i) ms — quantiles are read to within 0.1 %.
HIST_G0_MS = 1e-3
HIST_RATIO = 1.001
HIST_BINS = int(math.ceil(math.log(1e7 / HIST_G0_MS) / math.log(HIST_RATIO))) + 2


@dataclass
class Options:
    """Simulation settings (defaults are the documented behaviour of `verify_plan`)."""

    # None: each prefill pool as planned (one prompt at a time, or batched up to its config's
    # budget); 0 or N > 0 overrides every prefill pool (a what-if: one at a time, or N new tokens)
    prefill_batch_tokens: int | None = None
    warmup_fraction: float = 0.1
    warm_start: bool = True  # batching pools start with their steady-state batch mid-decode
    warmup_decode_durations: float = 0.5  # warm-up lasts at least this many mean decode durations
    cooldown_decode_durations: float = 1.0
    cap_s: float = SECONDS_PER_HOUR  # at most this long a measured window (fewer requests at low load)
    check: bool = False  # assert the slot/KV limits inside the replica pools
    exact_steps: bool = False  # evaluate every decode step on the curve instead of its table


@dataclass(frozen=True)
class Route:
    metro: str
    tier: int
    requests_per_s: float
    rtt_ms: float


@dataclass(frozen=True)
class GroupPool:
    role: str
    tier: int
    config: str
    replicas: int
    requests_per_s: float
    speed: int = -1  # prefill feeds the decode pools of its speed class
    cache_option: int = -1  # KV-cache tiers: the candidate cache the pool serves with (-1: the workload's own)
    cache_hit_rate: float = 0.0  # that candidate's hit rate


@dataclass(frozen=True)
class Group:
    site: str
    workload: str
    period: str
    day_type: str
    hour: int
    routes: tuple
    pools: tuple

    @property
    def key(self) -> str:
        return f"{self.site}|{self.workload}|{self.period}|{self.day_type}|{self.hour}"


@dataclass
class GroupResult:
    """Counted requests of one group, and the ITL histogram of their gaps."""

    group: Group
    simulated: int
    metro: np.ndarray  # metro name per counted request
    ttft_ms: np.ndarray
    tokens: np.ndarray
    gaps: np.ndarray  # inter-token gaps per request (tokens − 1)
    ok_gaps: np.ndarray  # of them inside the ITL objective
    hist: np.ndarray
    extra: dict = field(default_factory=dict)


class PlanModel:
    """The physics of a plan: replicas rebuilt from the scenario for each config in curves.csv;
    ``reads``: per workload served from KV-cache tiers, the share of its hits each tier serves
    and the tier's read in ms (`optimizer.instance.kvcache.read_law`)."""

    def __init__(self, scenario, curves, exact_steps: bool = False, reads: dict | None = None):
        self.s = scenario
        self.exact_steps = exact_steps
        self.reads = reads or {}
        self.curves = {row["id"]: row for row in curves.to_dict("records")}
        self._cache: dict = {}

    def replica(self, cid: str):
        if ("r", cid) not in self._cache:
            c = self.curves[cid]
            w = self.s.workloads[c["workload"]]
            r = make_replica(self.s.models[w.model], self.s.accelerators[c["gpu"]], self.s.serving, int(c["gpus"]),
                             *config_precision(c, w), expert_parallel=_truthy(c.get("expert_parallel", False)))
            self._cache[("r", cid)] = r
        return self._cache[("r", cid)]

    def steps(self, cid: str) -> StepModel:
        if ("s", cid) not in self._cache:
            c = self.curves[cid]
            spec = speculation(self.s.serving, _truthy(c.get("expert_parallel", False)))
            speculative = _truthy(c["speculative"]) and c["role"] == Role.DECODE
            steps = StepModel(self.replica(cid), (spec.draft_tokens, spec.draft_cost_ratio) if speculative else None)
            self._cache[("s", cid)] = steps if self.exact_steps else TabulatedSteps(steps)
        return self._cache[("s", cid)]

    def pool_spec(self, cid: str, replicas: int) -> PoolSpec:
        c = self.curves[cid]
        r = self.replica(cid)
        w = self.s.workloads[c["workload"]]
        kvt = r.kv_bytes_per_token * replica_kv_copies(r)
        budget = kv_budget_bytes(r)
        spec = speculation(self.s.serving, r.attention_dp)
        if c["role"] == Role.COLOCATED:
            share = cache_kv_share(self.s.serving.resident_prefixes, w.shared_prefix_tokens, kvt, budget)
            return PoolSpec(replicas, int(c["batch"]), budget * (1.0 - share), kvt, self.steps(cid),
                            int(c["chunk_tokens"]))
        speculative = _truthy(c["speculative"])
        return PoolSpec(replicas, int(c["batch"]), budget, kvt, self.steps(cid), 0,
                        (spec.draft_tokens, spec.acceptance_rate) if speculative else None)

    def prefill_batch_tokens(self, cid: str, opt: Options) -> int:
        """The new-token budget a prefill pool's passes take: its config's (0 for one prompt at
        a time; folders from before batched prefill have none), unless ``opt`` overrides it."""
        if opt.prefill_batch_tokens is not None:
            return int(opt.prefill_batch_tokens)
        return int(self.curves[cid].get("prefill_batch_tokens", 0))

    def decode_seconds(self, cid: str) -> float:
        """Mean time a request spends decoding on this config at its operating point."""
        c = self.curves[cid]
        w = self.s.workloads[c["workload"]]
        return w.osl_mean_tokens * float(c["step_ms"]) / MS_PER_S / max(float(c["tokens_per_step"]), 1.0)


def _truthy(x) -> bool:
    return str(x).strip().lower() in ("true", "1", "1.0", "yes")


def tier_reads_ms(law: tuple[np.ndarray, np.ndarray], hit: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each request's read of its cached prefix: 0 on a miss, on a hit the read of a tier
    drawn by the shares of hits the tiers serve."""
    shares, read_ms = law
    tier = rng.choice(len(shares), len(hit), p=shares)
    return np.where(hit, read_ms[tier], 0.0)


def group_seed(seed: int, group: Group) -> np.random.SeedSequence:
    """Each group's random streams depend only on the seed and the group's key, so results
    do not depend on which groups run, in which order, or in how many processes."""
    return np.random.SeedSequence([int(seed), zlib.crc32(group.key.encode())])



def steady_state(spec: PoolSpec, rate_per_replica: float, w, speculative_tokens: float = 1.0):
    """(sequences decoding per replica, mean seconds a request decodes) in steady state, by
    Little's law N = λ · (output / tokens per step) · iteration(N), iterated to its fixed
    point. A colocated replica spends the share ρ = λ · chunks per prompt · chunk iteration
    of its time on iterations that carry a chunk, so its mean iteration is
    1 / ((1 − ρ)/decode step + ρ/chunk iteration). Only a warm start and the length of
    warm-up/cool-down depend on it, never a measured figure."""
    steps = spec.steps
    context = np.array([w.isl_mean_tokens + w.osl_mean_tokens / 2.0])
    per_request = w.osl_mean_tokens / max(speculative_tokens, 1.0)
    kv_cap = spec.kv_budget_bytes / ((w.isl_mean_tokens + w.osl_mean_tokens) * spec.kv_bytes_per_token)
    cap = max(0.95 * min(spec.batch, kv_cap), 1.0)
    new = max(w.isl_mean_tokens - w.prompt_cache_hit_rate * min(w.shared_prefix_tokens, w.isl_mean_tokens), 1.0)
    n, iteration = 1.0, 0.0
    for _ in range(40):
        b = max(int(round(n)), 1)
        iteration = float(steps.decode(b, context)[0])
        if spec.chunk_tokens:
            c = spec.chunk_tokens
            mixed = float(np.asarray(steps.mixed(b, context, np.array([float(c)]), np.array([new / 2.0])))[0])
            busy = min(0.95, rate_per_replica * (new / c + 0.5) * mixed)
            iteration = 1.0 / ((1.0 - busy) / iteration + busy / mixed)  # mean time per iteration
        n = 0.5 * n + 0.5 * min(rate_per_replica * per_request * iteration, cap)
    return n, per_request * iteration


def initial_sequences(rng, replicas: int, per_replica: float, isl: LengthDistribution, osl: LengthDistribution):
    """Sequences caught mid-decode at a random instant of steady state: Poisson(N) per
    replica; the output of one in progress is length-biased (∝ its length), its progress
    uniform within it."""
    counts = rng.poisson(per_replica, replicas)
    total = int(counts.sum())
    if total == 0:
        return None
    candidates = osl.sample(rng, max(256, 8 * total)).astype(float)
    length = candidates[rng.choice(len(candidates), total, p=candidates / candidates.sum())].astype(np.int64)
    done = np.floor(rng.random(total) * length).astype(np.int64)
    prompt = isl.sample(rng, total)
    return np.repeat(np.arange(replicas), counts), prompt + done, np.maximum(length - done, 1)


def simulate_group(model: PlanModel, g: Group, requests: int, seed: int, opt: Options,
                   arrivals=POISSON) -> GroupResult | None:
    """``arrivals``: where the requests come from (`arrivals.Poisson`, the default, or a
    `arrivals.Trace` replaying a log)."""
    s = model.s
    w = s.workloads[g.workload]
    m = s.models[w.model]
    routes = [r for r in g.routes if r.requests_per_s > 0]
    if not routes:
        return None
    rates = arrivals.route_rates(s, g, routes)
    lam = float(rates.sum())
    entry = [p for p in g.pools if p.role in (Role.PREFILL, Role.COLOCATED)]
    decode = [p for p in g.pools if p.role == Role.DECODE]
    isl_dist = prompt_lengths(w, m.max_context)
    osl_dist = LengthDistribution(w.osl_mean_tokens, w.osl_p99_tokens, m.max_context)
    flows = _flows(routes, rates, entry, decode)
    steady = _steady_states(model, w, entry, decode, flows.pool_rate)
    fill = max((sec for _, sec in steady.values()), default=0.0)

    streams = [np.random.default_rng(x) for x in group_seed(seed, g).spawn(7)]
    rng_arr, rng_len, rng_route, rng_spec_seed, rng_pool, rng_warm, rng_read = streams
    drawn = arrivals.draw(DrawInputs(g, w, routes, rates, requests, fill, opt, isl_dist, osl_dist, rng_arr, rng_route,
                                     rng_len))
    pool_of = _entry_pools(flows, drawn.route, rng_pool)
    if any(p.cache_option >= 0 for p in entry):  # each pool serves its own candidate cache's hit rate
        drawn = replace(drawn, cached=pool_cached(entry, pool_of, drawn.isl, w.shared_prefix_tokens, rng_read))
    spec_seeds = np.random.SeedSequence(rng_spec_seed.integers(2**63)).spawn(len(entry) + len(decode))
    sim = _Measured(model, opt, drawn, steady, isl_dist, osl_dist, w.itl_p99_ms / MS_PER_S, rng_warm,
                    iter(np.random.default_rng(x) for x in spec_seeds))
    _run_pools(sim, entry, decode, flows, pool_of, rng_pool, kv_bytes_per_token(w, m))

    rtt = np.array([r.rtt_ms for r in routes])[drawn.route]
    ttft = rtt + s.serving.fixed_overhead_ms + (sim.first_time - drawn.t) * MS_PER_S
    ttft = ttft + _reads_ms(model, w.id, entry, pool_of, drawn.cached > 0, rng_read)
    c = drawn.counted
    metros = np.array([r.metro for r in routes], dtype=object)[drawn.route]
    return GroupResult(g, len(drawn.t), metros[c], ttft[c], drawn.osl[c], drawn.osl[c] - 1, sim.ok_gaps[c], sim.hist,
                       {**drawn.extra, "arrival_rate": lam, "decode_seconds": fill,
                        "steady_batch": {f"{k[0]}{k[1]}": v[0] for k, v in steady.items()}})


@dataclass
class _Flows:
    """The plan's flow shares in a group: a tier's load over its prefill/colocated pools,
    prefill output over the decode pools of its speed class, and each batching pool's rate."""

    route_tier: np.ndarray  # tier per route
    entry_share: dict  # tier → (entry pool indices, shares)
    decode_share: dict  # speed class → (decode pool indices, shares)
    pool_rate: dict  # ("entry", i) of a colocated pool or ("decode", j) → requests/s


def _flows(routes, rates, entry, decode) -> _Flows:
    route_tier = np.array([r.tier for r in routes])
    entry_share = {}
    for tier in np.unique(route_tier):
        cands = [i for i, p in enumerate(entry) if p.tier == tier]
        if cands:
            entry_share[int(tier)] = (cands, flow_shares([entry[i].requests_per_s for i in cands],
                                                    [entry[i].replicas for i in cands]))
    decode_share = {}
    for speed in {q.speed for q in decode}:
        cands = [j for j, q in enumerate(decode) if q.speed == speed]
        decode_share[speed] = (cands, flow_shares([decode[j].requests_per_s for j in cands], [decode[j].replicas for j in cands]))
    entry_rate = np.zeros(len(entry))
    for tier, (cands, p) in entry_share.items():
        entry_rate[cands] += rates[route_tier == tier].sum() * p
    pool_rate = {("entry", i): entry_rate[i] for i, p in enumerate(entry) if p.role == Role.COLOCATED}
    for speed, (cands, share) in decode_share.items():
        prefill_rate = sum(entry_rate[i] for i, p in enumerate(entry) if p.role == Role.PREFILL and p.speed == speed)
        pool_rate.update({("decode", j): prefill_rate * sh for j, sh in zip(cands, share)})
    return _Flows(route_tier, entry_share, decode_share, pool_rate)


def _steady_states(model: PlanModel, w, entry, decode, pool_rate: dict) -> dict:
    """The steady state of every batching pool with replicas (`steady_state`): the warm start,
    and how long warm-up and cool-down last."""
    steady = {}
    for key, rate in pool_rate.items():
        pool = entry[key[1]] if key[0] == "entry" else decode[key[1]]
        if pool.replicas <= 0:
            continue
        spec = model.pool_spec(pool.config, pool.replicas)
        per_step = float(expected_tokens_per_step(spec.speculative[1], spec.speculative[0])) if spec.speculative else 1.0
        steady[key] = steady_state(spec, rate / pool.replicas, w, per_step)
    return steady


def pool_cached(entry, pool_of: np.ndarray, isl: np.ndarray, prefix_tokens: float, rng) -> np.ndarray:
    """Cached tokens per request with KV-cache tiers: a hit with its entry pool's candidate's
    hit rate, reading the prefix (at most the prompt less one token)."""
    hit_rate = np.array([p.cache_hit_rate for p in entry] + [0.0])[pool_of]  # -1 (no pool): index the 0
    hit = rng.random(len(isl)) < hit_rate
    return np.where(hit, np.minimum(int(prefix_tokens), isl - 1), 0).astype(np.int64)


def _reads_ms(model: PlanModel, k: str, entry, pool_of: np.ndarray, hit: np.ndarray, rng) -> np.ndarray:
    """Each request's tier read: by its workload's read law, or with candidate caches by its
    entry pool's candidate's (`optimizer.instance.kvcache.read_law`)."""
    if k in model.reads:
        return tier_reads_ms(model.reads[k], hit, rng)
    out = np.zeros(len(hit))
    option = np.array([p.cache_option for p in entry] + [-1])[pool_of]
    for o in sorted(set(option.tolist()) - {-1}):
        if (k, o) in model.reads:
            mask = option == o
            out[mask] = tier_reads_ms(model.reads[(k, o)], hit[mask], rng)
    return out


def _entry_pools(flows: _Flows, route: np.ndarray, rng_pool) -> np.ndarray:
    """Each request enters one prefill/colocated pool of its route's tier, by the plan's flow shares."""
    tiers = flows.route_tier[route]
    pool_of = np.full(len(route), -1, np.int64)
    for tier, (cands, p) in flows.entry_share.items():
        mask = tiers == tier
        pool_of[mask] = np.asarray(cands)[rng_pool.choice(len(cands), int(mask.sum()), p=p)]
    return pool_of


class _Measured:
    """The group's requests through its replica pools: first-token times, the count of gaps
    within the ITL objective per request, and the histogram of counted requests' gaps."""

    def __init__(self, model: PlanModel, opt: Options, drawn, steady: dict, isl_dist, osl_dist, obj_s: float,
                 rng_warm, spec_streams):
        self.model, self.opt, self.drawn, self.steady = model, opt, drawn, steady
        self.isl_dist, self.osl_dist, self.obj_s = isl_dist, osl_dist, obj_s
        self.rng_warm, self.spec_streams = rng_warm, spec_streams
        n = len(drawn.t)
        self.first_time = np.full(n, np.inf)
        self.ok_gaps = np.zeros(n, np.int64)
        self.hist = np.zeros(HIST_BINS)

    def run_replicas(self, key, pool, idx, arrive) -> None:
        """Simulate one replica pool for requests ``idx`` arriving at ``arrive``; fill their
        first-token times, ITL counts and the histogram."""
        if len(idx) == 0:
            return
        drawn, opt = self.drawn, self.opt
        spec = self.model.pool_spec(pool.config, pool.replicas)
        initial = None
        if opt.warm_start and key in self.steady:
            initial = initial_sequences(self.rng_warm, pool.replicas, self.steady[key][0], self.isl_dist, self.osl_dist)
        out = simulate_pool(spec, arrive, drawn.isl[idx], drawn.osl[idx], drawn.cached[idx],
                            rng=next(self.spec_streams), check=opt.check, initial=initial)
        served = out.replica >= 0
        if not served.any():
            return
        d, e, off = out.concatenated()
        base = off[out.replica[served]]
        fs = base + out.first_step[served]
        ls = base + out.last_step[served]
        sel = idx[served]
        self.first_time[sel] = e[fs]
        okc = np.concatenate(([0], np.cumsum(d <= self.obj_s)))
        steps_with_gap = ls - fs
        zero = drawn.osl[sel] - 1 - steps_with_gap
        self.ok_gaps[sel] = okc[ls + 1] - okc[fs + 1] + zero
        c = drawn.counted[sel]
        delta = np.bincount(np.concatenate((fs[c] + 1, ls[c] + 1)),
                            weights=np.concatenate((np.ones(c.sum()), -np.ones(c.sum()))), minlength=len(d) + 2)
        weight = np.cumsum(delta)[:len(d)]
        self.hist[:] += np.bincount(_bins(d), weights=weight, minlength=HIST_BINS)
        self.hist[0] += zero[c].sum()


def _run_pools(sim: _Measured, entry, decode, flows: _Flows, pool_of: np.ndarray, rng_pool, kv: float) -> None:
    """The entry pools in order (a colocated pool serves its requests whole; a prefill pool
    hands each prompt's KV cache to a decode pool of its speed class), then the decode pools."""
    model, opt, drawn = sim.model, sim.opt, sim.drawn
    t, isl, cached = drawn.t, drawn.isl, drawn.cached
    decode_in: list[list] = [[] for _ in decode]
    for i, p in enumerate(entry):
        idx = np.flatnonzero(pool_of == i)
        if p.role == Role.COLOCATED:
            sim.run_replicas(("entry", i), p, idx, t[idx])
            continue
        r = model.replica(p.config)
        service = prefill_time_s(r, isl[idx], cached[idx])
        _, done = fifo_pool(t[idx], p.replicas, service, tokens=isl[idx], cached=cached[idx],
                            batch_tokens=model.prefill_batch_tokens(p.config, opt),
                            batch_service=lambda tok, cac, r=r: pass_time_s(r, tok, cac))
        if p.speed not in flows.decode_share:
            continue
        cands, share = flows.decode_share[p.speed]
        to = np.asarray(cands)[rng_pool.choice(len(cands), len(idx), p=share)]
        for j, q in enumerate(decode):
            sel = to == j
            if not sel.any():
                continue
            nic = min(float(model.curves[p.config]["nic_gb_s"]), float(model.curves[q.config]["nic_gb_s"])) * 1e9
            xfer = model.s.serving.kv_transfer_latency_ms / MS_PER_S + isl[idx[sel]] * kv / nic
            decode_in[j].append((idx[sel], done[sel] + xfer))
    for j, q in enumerate(decode):
        if decode_in[j]:
            idx = np.concatenate([a for a, _ in decode_in[j]])
            arrive = np.concatenate([b for _, b in decode_in[j]])
            sim.run_replicas(("decode", j), q, idx, arrive)


def _bins(d_s: np.ndarray) -> np.ndarray:
    ms = np.maximum(np.asarray(d_s) * MS_PER_S, HIST_G0_MS)
    i = np.floor(np.log(ms / HIST_G0_MS) / math.log(HIST_RATIO)).astype(np.int64) + 1
    i = np.where(np.asarray(d_s) <= 0, 0, i)
    return np.clip(i, 0, HIST_BINS - 1)


def hist_quantile(hist: np.ndarray, q: float) -> float:
    """q-quantile (ms) of the gaps a histogram holds (the geometric middle of its bin)."""
    total = hist.sum()
    if total <= 0:
        return float("nan")
    i = int(np.searchsorted(np.cumsum(hist), q * total - 1e-9 * total, side="left"))
    if i == 0:
        return 0.0
    return float(HIST_G0_MS * HIST_RATIO ** (i - 0.5))
