"""The instance's pools: the `Pool` record (a config serving one tier or one site, with its
SLO capacity table f(n)), what a pool of n replicas carries (`kappa`), and how pools are
chosen — the admissible configs per (workload, accelerator), each sized for a tier's budget
(`Option`), compared per GPU at a reference pool size, the best per (regime, site, workload,
tier, accelerator) made a pool (`best_tier_pools`), their capacity tables computed many at once
(`PoolFactory`)."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from optimizer.base.spot import is_spot
from optimizer.base.units import MS_PER_S, SECONDS_PER_HOUR, Regime, Role
from optimizer.curves.queueing import slo_capacity_rps
from optimizer.curves.tail import Law, SlackTable, compress, quantile_s, slack_table, stack
from optimizer.curves.transfer import kv_transfer_time_s
from optimizer.scenario import Scenario
from optimizer.serving.budget import Stages
from optimizer.serving.configs import ServingConfig, kv_bytes_per_token, workload_configs

RELAXED = Regime.RELAXED
REFERENCE_POOL_REPLICAS = 16  # pool size at which configs are compared per GPU
TRANSFER_SHARE_OF_TTFT = 0.1  # a replica whose own NIC needs more than this share of TTFT is not disaggregated


@dataclass(frozen=True)
class Pool:
    """Replicas of one config serving one tier (prefill, colocated) or one site (decode).

    ``table`` holds the SLO capacity f(n) for n = 1 … len(table) in requests/s (prefill and
    colocated); ``decode_rps`` is a replica's decode capacity in requests/s;
    ``queue_budget_ms`` what the tier's budget leaves for queueing beyond the q-quantile of
    the stages after the wait (the pool's table counts wait and stages together).
    """

    id: int
    role: str
    regime: str
    site: str
    workload: str
    tier: int
    gpu: str
    config: ServingConfig
    queue_budget_ms: float = 0.0
    table: np.ndarray | None = None
    decode_rps: float = 0.0
    speed: int = -1  # disaggregated pools: the decode speed class (prefill feeds decode of its class)
    peak_to_mean: float = 1.0  # the workload's intra-hour peak factor: the pool is sized for mean load × this
    cache_option: int = -1  # prefill/colocated with KV-cache tiers: the workload's candidate cache it serves with

    @property
    def gpus(self) -> int:
        return self.config.gpus



def kappa(pool: Pool, n: int) -> float:
    """Requests/s per replica of a pool of n replicas (peak-sized): f(n)/n for a queueing
    pool (capped by the decode slots when colocated), the decode capacity for decode."""
    if pool.table is None:
        return pool.decode_rps
    n = max(1, min(n, len(pool.table)))
    per = float(pool.table[n - 1]) / n
    return min(per, pool.decode_rps) if pool.role == Role.COLOCATED else per


def _ttft(s: Scenario, k: str, regime: str) -> float:
    factor = s.policy.resilience_ttft_factor if regime == RELAXED else 1.0
    return s.workloads[k].ttft_p99_ms * factor


SLACK_POINTS = 128  # points of a stage law in a capacity table's slack (the tail finely)


@dataclass(frozen=True)
class Option:
    """A config sized for a tier: its stages after the wait (compressed to `SLACK_POINTS`;
    X₀ and the riding laws, `optimizer.serving.budget.StageLaws`), the tier's budget (ms) and the
    q-quantile of the stages alone (ms)."""

    config: ServingConfig
    alone: Law
    riding: tuple
    budget_ms: float
    stages_ms: float
    key: tuple  # what its capacity table depends on besides the config: the budget and the hand-off

    @functools.cached_property
    def slack(self) -> SlackTable:
        return slack_table(self.alone, list(self.riding), self.budget_ms / MS_PER_S)

    @property
    def queue_ms(self) -> float:
        """What the budget leaves for queueing beyond the q-quantile of the stages (< 0: the
        tier is out of reach)."""
        return self.budget_ms - self.stages_ms


def _capacity_args(c: ServingConfig) -> tuple[float, float]:
    """(k_B, S_B) of a config's prefill lane for `curves.queueing` (1 and S̄ unbatched)."""
    batching = c.batching()
    return batching.get("full_prompts", 1.0), batching.get("full_pass_s", c.service_mean_s)


def hour_window(s: Scenario) -> dict[str, float]:
    """The window arguments of `curves.queueing.slo_capacity_rps`: an hour at the standard
    normal quantile of ``serving.slo_hours_met`` (none: the long run)."""
    met = s.serving.slo_hours_met
    return {} if met is None else {"window_s": SECONDS_PER_HOUR, "window_z": float(norm.ppf(met))}


def _per_gpu_scores(options: list[Option], s: Scenario) -> np.ndarray:
    """Requests/s per GPU of a pool of REFERENCE_POOL_REPLICAS replicas of each option at its
    tier's budget (colocated: also limited by its decode side) — how configs compete."""
    if not options:
        return np.zeros(0)
    n = REFERENCE_POOL_REPLICAS
    args = np.array([_capacity_args(o.config) for o in options])
    cap = slo_capacity_rps(
        n,
        np.array([o.config.service_mean_s for o in options]),
        np.array([o.config.service_scv for o in options]),
        stack([o.slack for o in options]),
        s.serving.prefill_max_utilization,
        np.array([s.workloads[o.config.workload].slo_attainment for o in options]),
        args[:, 0], args[:, 1], law=np.arange(len(options)),
        service_third_ratio=np.array([o.config.service_third_ratio for o in options]), **hour_window(s),
    ) / n
    decode = np.array([o.config.decode_rps if o.config.role == Role.COLOCATED else np.inf for o in options])
    gpus = np.array([o.config.gpus for o in options], dtype=float)
    return np.minimum(cap, decode) / gpus


class PoolFactory:
    """Builds pools; SLO capacity tables are made for many options at once (`prepare`) and
    kept by (config, budget, hand-off)."""

    def __init__(self, s: Scenario, peak_load: dict[str, float], pools: list[Pool] | None = None,
                 cache_option: int = -1):
        self.s = s
        self.peak_load = peak_load
        self.pools: list[Pool] = [] if pools is None else pools  # shared by the factories of one instance
        self.cache_option = cache_option  # the candidate cache ``s`` is the scenario of (-1: none)
        self._tables: dict[tuple, np.ndarray] = {}

    def _size(self, c: ServingConfig) -> int:
        """Enough replicas to carry the workload's whole peak at half the utilisation cap."""
        rho = self.s.serving.prefill_max_utilization
        return min(math.ceil(self.peak_load[c.workload] / c.lane_rps() / (0.5 * rho)) + 8,
                   self.s.serving.max_pool_replicas)

    def prepare(self, options: list[Option]) -> None:
        """The capacity tables f(1 … size) of ``options`` not made yet, in one vectorised call."""
        todo = list({(o.config.id, o.key): o for o in options if (o.config.id, o.key) not in self._tables}.values())
        if not todo:
            return
        sizes = np.array([self._size(o.config) for o in todo])
        which = np.repeat(np.arange(len(todo)), sizes)
        n = np.concatenate([np.arange(1, size + 1) for size in sizes])
        args = np.array([_capacity_args(o.config) for o in todo])
        caps = slo_capacity_rps(
            n, np.array([o.config.service_mean_s for o in todo])[which],
            np.array([o.config.service_scv for o in todo])[which], stack([o.slack for o in todo]),
            self.s.serving.prefill_max_utilization,
            np.array([self.s.workloads[o.config.workload].slo_attainment for o in todo])[which],
            args[which, 0], args[which, 1], law=which,
            service_third_ratio=np.array([o.config.service_third_ratio for o in todo])[which], **hour_window(self.s))
        for o, table in zip(todo, np.split(caps, np.cumsum(sizes)[:-1])):
            table.setflags(write=False)
            self._tables[(o.config.id, o.key)] = table

    def add(self, role, regime, site, k, tier, c: ServingConfig, option: Option | None = None, speed: int = -1) -> int:
        table = queue_ms = None
        if option is not None:
            self.prepare([option])
            table, queue_ms = self._tables[(c.id, option.key)], option.queue_ms
        self.pools.append(Pool(len(self.pools), role, regime, site, k, tier, c.gpu, c, queue_ms or 0.0, table,
                               c.decode_rps, speed, self.s.peak_to_mean(k), self.cache_option))
        return len(self.pools) - 1


@dataclass(frozen=True)
class Handoff:
    """What a prefill pool hands its prompts to: the decode replicas of one speed class at a
    site — the slowest NIC among them and their slowest operating step (sizing takes the
    worst of the class)."""

    nic_bytes_per_s: float
    step_s: float


def _compact_stages(stages: Stages, c: ServingConfig, after: tuple, bases: dict) -> tuple[Law, tuple]:
    """(X₀, riding laws) of an option compressed to `SLACK_POINTS`. A prefill config's laws
    differ between hand-offs over one NIC only by the decode step added to every point, so
    they are compressed once per NIC and shifted."""
    if c.role != Role.PREFILL:
        x = stages.colocated(c, *after)
        return compress(x.alone, SLACK_POINTS), (compress(x.alone, SLACK_POINTS),)
    nic, step = after
    if (c.id, nic) not in bases:
        x = stages.disaggregated(c, nic, 0.0)
        bases[(c.id, nic)] = tuple(compress(r, SLACK_POINTS) for r in x.riding)
    riding = tuple(r.shifted(step, step) for r in bases[(c.id, nic)])
    return riding[0], riding


def best_tier_pools(s: Scenario, factory: PoolFactory, configs, gpus_at, handoff, regimes,
                stages: Stages) -> dict[tuple, list[int]]:
    """Per (regime, site, workload, tier) and accelerator, the colocated pool and — for each
    decode speed class — the prefill pool of the config with the most capacity per GPU at
    that tier's budget (TTFT − overheads − the tier's RTT bound, for the wait and the stages
    after it together); a config whose stages alone miss the budget in more than 1 − q of
    the requests is not offered."""
    classes = range(len(s.serving.decode_speeds))
    options: list[tuple[tuple, Option]] = []
    laws: dict = {}  # (config, hand-off) → (X₀, riding laws, the q-quantile of X₀ in ms)
    bases: dict = {}  # (prefill config, NIC) → its stages before the decode step, compressed
    made: dict = {}  # (config, budget, hand-off) → its option
    for regime in regimes:
        for site in s.sites:
            for k in s.workloads:
                ttft = _ttft(s, k, regime)
                q = s.workloads[k].slo_attainment
                for tier, bound in enumerate(s.serving.tier_rtt_ms):
                    budget = ttft - s.serving.fixed_overhead_ms - bound
                    for g in gpus_at[site]:
                        for c in configs[(k, g)]:
                            if c.role == Role.COLOCATED:
                                paths = [(-1, (float(c.batch),))]
                            elif c.role == Role.PREFILL:
                                paths = [(h, (min(c.nic_bytes_per_s, handoff[(site, k, h)].nic_bytes_per_s),
                                              handoff[(site, k, h)].step_s))
                                         for h in classes if (site, k, h) in handoff]
                            else:
                                continue
                            for h, after in paths:
                                if (c.id, after) not in laws:
                                    alone, riding = _compact_stages(stages, c, after, bases)
                                    laws[(c.id, after)] = (alone, riding, MS_PER_S * quantile_s(alone, q))
                                if (c.id, budget, after) not in made:
                                    made[(c.id, budget, after)] = Option(c, *laws[(c.id, after)][:2], budget,
                                                                         laws[(c.id, after)][2], (budget, after))
                                o = made[(c.id, budget, after)]
                                if o.queue_ms >= 0:
                                    options.append(((regime, site, k, tier, g, c.role, h), o))
    unique = sorted({(o.config.id, o.key): o for _, o in options}.items())
    scores = dict(zip((key for key, _ in unique), _per_gpu_scores([o for _, o in unique], s)))
    best: dict[tuple, tuple[float, Option]] = {}
    for key, o in options:
        score = scores[(o.config.id, o.key)]
        if score > 0 and (key not in best or score > best[key][0]):
            best[key] = (score, o)
    factory.prepare([o for _, o in best.values()])
    out: dict[tuple, list[int]] = defaultdict(list)
    for key in sorted(best):
        regime, site, k, tier, _, role, h = key
        _, o = best[key]
        out[(regime, site, k, tier)].append(factory.add(role, regime, site, k, tier, o.config, o, h))
    return dict(out)


def admissible_configs(s: Scenario) -> dict[tuple[str, str], list[ServingConfig]]:
    """Admissible configs per (workload, accelerator); disaggregated ones must move the p99
    prompt's KV within a tenth of the TTFT objective over their own NIC; none on spot
    accelerators for a workload that does not allow spot."""
    out = {}
    for k, w in s.workloads.items():
        m = s.models[w.model]
        for g, a in s.accelerators.items():
            if is_spot(g) and not w.spot_allowed:
                out[(k, g)] = []
                continue
            configs = workload_configs(w, m, a, s.serving)
            kv = kv_bytes_per_token(w, m)
            limit_s = TRANSFER_SHARE_OF_TTFT * w.ttft_p99_ms / MS_PER_S
            out[(k, g)] = [
                c for c in configs
                if c.role == Role.COLOCATED or float(kv_transfer_time_s(w.isl_p99_tokens, kv, c.nic_bytes_per_s)) <= limit_s
            ]
    return out


def best_decode(configs: list[ServingConfig], speed: float) -> ServingConfig | None:
    decode = [c for c in configs if c.role == Role.DECODE and c.speed == speed]
    return max(decode, key=lambda c: c.decode_rps / c.gpus, default=None)


def p99_transfer_ms(s: Scenario, w, kv_bytes_per_token: float, nic_bytes_per_s: float) -> float:
    """KV transfer of the p99 prompt over ``nic_bytes_per_s`` (reported; sizing takes every prompt's)."""
    return float(kv_transfer_time_s(w.isl_p99_tokens, kv_bytes_per_token, nic_bytes_per_s,
                                    s.serving.kv_transfer_latency_ms / MS_PER_S)) * MS_PER_S
