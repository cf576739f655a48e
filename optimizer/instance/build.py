"""Everything the MIP needs, precomputed as index sets and parameter tables.

An `Instance` is plain data (tuples, dicts, numpy arrays) — the only contract
`formulations/` knows. It is built from a validated scenario, the curves and the network:

* **states**: the time slices (period × day type × hour, weighted in hours), plus — with
  N−1 resilience — one contingency state per site: the peak slice with that site lost and
  the TTFT objective relaxed;
* **serving configs** per workload and accelerator (`optimizer.serving.configs`), pre-screened for
  memory fit and ITL;
* **latency tiers**: a metro routes to site s in the tier whose RTT bound is the smallest
  ≥ RTT(m, s); the tier's pool budget is TTFT − overheads − bound, shared by the wait and the
  stages after it (prefill, and disaggregated the KV transfer and the decode side's first
  step) — in the tail of their sum (`optimizer.serving.budget`, `curves.tail`), not stage by stage;
* **pools**: per (regime, site, workload, tier, accelerator) a prefill pool and a colocated
  pool, each with the best config for its tier's budget and its SLO capacity table f(n);
  per (site, workload, accelerator) a decode pool;
* **arcs** (metro, site, workload, tier) only where some pool of that tier exists, at most
  the K nearest sites per (metro, workload);
* **prices** per (site, accelerator) as $/node-hour for each procurement contract.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from optimizer.base.contracts import COST_CATEGORIES, TERMS
from optimizer.base.units import HOURS_PER_YEAR, MS_PER_S, SECONDS_PER_HOUR, Regime, Role
from optimizer.curves.economics import owned_usd_per_node_hour
from optimizer.curves.queueing import slo_capacity_rps
from optimizer.curves.tail import Law, SlackTable, compress, quantile_s, slack_table, stack
from optimizer.curves.transfer import kv_transfer_time_s
from optimizer.geography.demand import build_demand, build_slices
from optimizer.scenario import Scenario
from optimizer.serving.budget import Stages
from optimizer.serving.configs import ServingConfig, kv_bytes_per_token, workload_configs

NOMINAL, RELAXED = Regime.NOMINAL, Regime.RELAXED
REFERENCE_POOL_REPLICAS = 16  # pool size at which configs are compared per GPU
TRANSFER_SHARE_OF_TTFT = 0.1  # a replica whose own NIC needs more than this share of TTFT is not disaggregated


@dataclass(frozen=True)
class State:
    """An operating state: a slice (weight = the hours of the year it stands for; days = how
    often its hour recurs, which is how often a rise into it is paid) or a contingency
    (weight 0)."""

    id: int
    slice: int
    regime: str
    lost_site: str | None
    weight_hours: float
    penalty_hours: float
    days: float


@dataclass(frozen=True)
class Arc:
    metro: str
    site: str
    workload: str
    tier: int
    rtt_ms: float


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

    @property
    def gpus(self) -> int:
        return self.config.gpus


@dataclass(frozen=True)
class CommittedPrice:
    """What one committed node of a term costs per hour of the year, and where it is booked."""

    rate: float  # $/node-hour, paid for every hour of the year
    energy: float  # $/node-hour of energy the rate leaves out (0 where it is included)
    category: str  # cost category (`optimizer.base.contracts`)


@dataclass(frozen=True)
class Contract:
    """Prices of one (site, accelerator) in $ per node-hour."""

    ondemand: float
    committed: dict[str, CommittedPrice]  # term id → its price


@dataclass
class Instance:
    name: str
    slices: pd.DataFrame
    states: list[State]
    metros: list[str]
    sites: list[str]
    workloads: list[str]
    gpus: list[str]
    demand: dict[tuple[str, str, int], float]  # (metro, workload, slice) → mean req/s
    peak_to_mean: dict[str, float]  # workload → intra-hour peak factor its pools are sized for
    peak_slice: int
    arcs: dict[str, list[Arc]]  # regime → arcs
    pools: list[Pool]
    tier_pools: dict[tuple, list[int]]  # (regime, site, workload, tier) → prefill/colocated pool ids
    decode_pools: dict[tuple, list[int]]  # (site, workload, speed class) → decode pool ids
    site_gpus: list[tuple[str, str]]
    gpus_per_node: dict[str, int]
    node_kw: dict[str, float]
    pue: dict[str, float]
    power_kw: dict[str, float]
    contracts: dict[tuple[str, str], Contract]
    committed_max: dict[tuple[str, str], int]
    ondemand_max: dict[tuple[str, str], int]
    allow_ondemand: bool
    cold_start_hours: float
    warm_fraction: float
    penalty_usd_per_request: dict[str, float]
    egress_usd_per_request: dict[str, float]
    output_tokens: dict[str, float]
    input_tokens: dict[str, float]
    handoff_ms: dict[tuple, float]  # (site, workload, speed class) → KV transfer + first token
    transfer_ms: dict[tuple[str, str], float]  # (site, workload) → KV transfer of the p99 prompt
    unreachable: list[dict] = field(default_factory=list)
    # What the formulation reads of fleetplan's vocabulary, through this contract (formulations/
    # imports nothing of optimizer/): the cost categories it may write, the hours a committed
    # node is paid for, and the unit conversions of its coefficients.
    cost_categories: ClassVar[tuple[str, ...]] = COST_CATEGORIES
    horizon_hours: ClassVar[float] = HOURS_PER_YEAR
    seconds_per_hour: ClassVar[float] = SECONDS_PER_HOUR
    ms_per_s: ClassVar[float] = MS_PER_S

    def arcs_in(self, state: State) -> list[Arc]:
        return [a for a in self.arcs[state.regime] if a.site != state.lost_site]

    def pools_in(self, state: State, role: str | None = None) -> list[Pool]:
        return [
            p for p in self.pools
            if p.site != state.lost_site
            and (p.role == Role.DECODE or p.regime == state.regime)
            and (role is None or p.role == role)
        ]


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
        return slack_table(self.alone, list(self.riding), self.budget_ms / 1e3)

    @property
    def queue_ms(self) -> float:
        """What the budget leaves for queueing beyond the q-quantile of the stages (< 0: the
        tier is out of reach)."""
        return self.budget_ms - self.stages_ms


def _capacity_args(c: ServingConfig) -> tuple[float, float]:
    """(k_B, S_B) of a config's prefill lane for `curves.queueing` (1 and S̄ unbatched)."""
    batching = c.batching()
    return batching.get("full_prompts", 1.0), batching.get("full_pass_s", c.service_mean_s)


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
    ) / n
    decode = np.array([o.config.decode_rps if o.config.role == Role.COLOCATED else np.inf for o in options])
    gpus = np.array([o.config.gpus for o in options], dtype=float)
    return np.minimum(cap, decode) / gpus


class _PoolFactory:
    """Builds pools; SLO capacity tables are made for many options at once (`prepare`) and
    kept by (config, budget, hand-off)."""

    def __init__(self, s: Scenario, peak_load: dict[str, float]):
        self.s = s
        self.peak_load = peak_load
        self.pools: list[Pool] = []
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
            args[which, 0], args[which, 1], law=which)
        for o, table in zip(todo, np.split(caps, np.cumsum(sizes)[:-1])):
            table.setflags(write=False)
            self._tables[(o.config.id, o.key)] = table

    def add(self, role, regime, site, k, tier, c: ServingConfig, option: Option | None = None, speed: int = -1) -> int:
        table = queue_ms = None
        if option is not None:
            self.prepare([option])
            table, queue_ms = self._tables[(c.id, option.key)], option.queue_ms
        self.pools.append(Pool(len(self.pools), role, regime, site, k, tier, c.gpu, c, queue_ms or 0.0, table,
                               c.decode_rps, speed, self.s.peak_to_mean(k)))
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


def _tier_pools(s: Scenario, factory: _PoolFactory, configs, gpus_at, handoff, regimes,
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
                                    laws[(c.id, after)] = (alone, riding, 1e3 * quantile_s(alone, q))
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


def _configs(s: Scenario) -> dict[tuple[str, str], list[ServingConfig]]:
    """Admissible configs per (workload, accelerator); disaggregated ones must move the p99
    prompt's KV within a tenth of the TTFT objective over their own NIC."""
    out = {}
    for k, w in s.workloads.items():
        m = s.models[w.model]
        for g, a in s.accelerators.items():
            configs = workload_configs(w, m, a, s.serving)
            kv = kv_bytes_per_token(w, m)
            limit_s = TRANSFER_SHARE_OF_TTFT * w.ttft_p99_ms / 1e3
            out[(k, g)] = [
                c for c in configs
                if c.role == Role.COLOCATED or float(kv_transfer_time_s(w.isl_p99_tokens, kv, c.nic_bytes_per_s)) <= limit_s
            ]
    return out


def _best_decode(configs: list[ServingConfig], speed: float) -> ServingConfig | None:
    decode = [c for c in configs if c.role == Role.DECODE and c.speed == speed]
    return max(decode, key=lambda c: c.decode_rps / c.gpus, default=None)


def build_instance(s: Scenario, rtt: pd.DataFrame) -> Instance:
    """Scenario + RTT matrix (metros × sites, ms) → Instance."""
    slices = build_slices(s)
    demand_df = build_demand(s, slices)
    demand = {(r.metro, r.workload, int(r.slice)): float(r.requests_per_s) for r in demand_df.itertuples() if r.requests_per_s > 0}
    per_slice = demand_df.assign(tokens=demand_df["requests_per_s"] * demand_df["workload"].map(
        {k: w.osl_mean_tokens for k, w in s.workloads.items()})).groupby("slice")["tokens"].sum()
    peak_slice = int(per_slice.idxmax()) if len(per_slice) else 0

    site_gpus = sorted((site, g) for site, per in s.supply.items() for g in per)
    gpus_at = defaultdict(list)
    for site, g in site_gpus:
        gpus_at[site].append(g)
    configs = _configs(s)
    factory = _PoolFactory(s, _peak_load(s, demand_df))
    regimes = [NOMINAL, RELAXED] if s.policy.n_minus_1 else [NOMINAL]

    # decode pools per speed class, and the hand-off each (site, workload, class) sizes its prefill pools for
    decode_pools: dict[tuple, list[int]] = {}
    handoff: dict[tuple, Handoff] = {}
    handoff_ms: dict[tuple, float] = {}
    transfer: dict[tuple[str, str], float] = {}
    for site in s.sites:
        for k, w in s.workloads.items():
            prefill_nics = [c.nic_bytes_per_s for g in gpus_at[site] for c in configs[(k, g)] if c.role == Role.PREFILL]
            all_decode = [c for g in gpus_at[site] for c in configs[(k, g)] if c.role == Role.DECODE]
            if not all_decode or not prefill_nics:
                continue
            kv = kv_bytes_per_token(w, s.models[w.model])
            slowest = min(prefill_nics + [c.nic_bytes_per_s for c in all_decode])
            transfer[(site, k)] = _p99_transfer_ms(s, w, kv, slowest)
            for h, speed in enumerate(s.serving.decode_speeds):
                decode = {g: _best_decode(configs[(k, g)], speed) for g in gpus_at[site]}
                decode = {g: c for g, c in decode.items() if c is not None}
                if not decode:
                    continue
                handoff[(site, k, h)] = Handoff(min(c.nic_bytes_per_s for c in decode.values()),
                                                max(c.step_ms for c in decode.values()) / 1e3)
                handoff_ms[(site, k, h)] = transfer[(site, k)] + 2e3 * handoff[(site, k, h)].step_s
                decode_pools[(site, k, h)] = [factory.add("decode", NOMINAL, site, k, -1, c, speed=h)
                                              for _, c in sorted(decode.items())]

    tier_pools = _tier_pools(s, factory, configs, gpus_at, handoff, regimes, Stages(s))
    arcs, unreachable = _arcs(s, rtt, tier_pools, regimes)
    states = _states(s, slices, peak_slice)
    return Instance(
        name=s.name, slices=slices, states=states,
        metros=list(s.metros), sites=list(s.sites), workloads=list(s.workloads), gpus=list(s.accelerators),
        demand=demand, peak_to_mean={k: s.peak_to_mean(k) for k in s.workloads}, peak_slice=peak_slice,
        arcs=arcs, pools=factory.pools, tier_pools=tier_pools, decode_pools=decode_pools,
        site_gpus=site_gpus,
        gpus_per_node={g: a.gpus_per_node for g, a in s.accelerators.items()},
        node_kw={g: a.node_kw for g, a in s.accelerators.items()},
        pue={x: site.pue for x, site in s.sites.items()},
        power_kw={x: site.power_mw * 1000.0 for x, site in s.sites.items()},
        contracts={(site, g): _contract(s, site, g) for site, g in site_gpus},
        committed_max={(site, g): s.supply[site][g].reserved_nodes_max for site, g in site_gpus},
        ondemand_max={(site, g): s.supply[site][g].ondemand_nodes_max if s.policy.allow_ondemand else 0 for site, g in site_gpus},
        allow_ondemand=s.policy.allow_ondemand,
        cold_start_hours=s.policy.cold_start_minutes / 60.0,
        warm_fraction=s.policy.warm_pool_fraction,
        penalty_usd_per_request={k: s.policy.unserved_penalty_usd_per_million_tokens * w.osl_mean_tokens / 1e6 for k, w in s.workloads.items()},
        egress_usd_per_request={k: s.policy.egress_usd_per_gb * s.policy.egress_bytes_per_output_token * w.osl_mean_tokens / 1e9 for k, w in s.workloads.items()},
        output_tokens={k: w.osl_mean_tokens for k, w in s.workloads.items()},
        input_tokens={k: w.isl_mean_tokens for k, w in s.workloads.items()},
        handoff_ms=handoff_ms, transfer_ms=transfer, unreachable=unreachable,
    )


def _p99_transfer_ms(s: Scenario, w, kv_bytes_per_token: float, nic_bytes_per_s: float) -> float:
    """KV transfer of the p99 prompt over ``nic_bytes_per_s`` (reported; sizing takes every prompt's)."""
    return float(kv_transfer_time_s(w.isl_p99_tokens, kv_bytes_per_token, nic_bytes_per_s,
                                    s.serving.kv_transfer_latency_ms / 1e3)) * 1e3


def _peak_load(s: Scenario, demand_df: pd.DataFrame) -> dict[str, float]:
    """Each workload's largest total load (req/s, peak-sized) in any slice: no pool carries more."""
    peak = demand_df.groupby(["workload", "slice"])["requests_per_s"].sum().groupby("workload").max()
    return {k: float(peak.get(k, 0.0)) * s.peak_to_mean(k) for k in s.workloads}


def _tier_of(rtt_ms: float, bands: list[float]) -> int | None:
    for tier, bound in enumerate(bands):
        if rtt_ms <= bound:
            return tier
    return None


def _arcs(s: Scenario, rtt: pd.DataFrame, tier_pools: dict, regimes: list[str]):
    """Routing arcs: per (metro, workload) the K nearest sites with a pool in a tier the
    metro may use — its own (smallest bound ≥ RTT) or any looser one, so that near metros
    can share a pool with farther ones (pooling). Metros with demand but no arc at all are
    reported with their nearest site."""
    bands = s.serving.tier_rtt_ms
    k_near = s.policy.k_nearest_sites
    arcs: dict[str, list[Arc]] = {}
    unreachable = []
    for regime in regimes:
        out = []
        for m in s.metros:
            order = rtt.loc[m].sort_values(kind="stable")
            for k in s.workloads:
                chosen = 0
                for site, ms in order.items():
                    own = _tier_of(float(ms), bands)
                    tiers = [] if own is None else [t for t in range(own, len(bands)) if (regime, site, k, t) in tier_pools]
                    if not tiers:
                        continue
                    out.extend(Arc(m, site, k, t, float(ms)) for t in tiers)
                    chosen += 1
                    if chosen == k_near:
                        break
                if chosen == 0 and regime == NOMINAL:
                    unreachable.append({"metro": m, "workload": k, "nearest_site": order.index[0],
                                        "rtt_ms": float(order.iloc[0])})
        arcs[regime] = out
    return arcs, unreachable


def _states(s: Scenario, slices: pd.DataFrame, peak_slice: int) -> list[State]:
    states = [State(int(t), int(t), NOMINAL, None, float(r.weight_hours), float(r.weight_hours), float(r.days))
              for t, r in slices.iterrows()]
    if s.policy.n_minus_1:
        for site in s.sites:
            states.append(State(len(states), peak_slice, RELAXED, site, 0.0, RESILIENCE_PENALTY_HOURS, 0.0))
    return states


RESILIENCE_PENALTY_HOURS = 1000.0  # unserved demand in a site-loss state costs as if it lasted this long


def _contract(s: Scenario, site: str, g: str) -> Contract:
    """The terms the policy allows, priced (`optimizer.base.contracts.TERMS`): a reserved term at its
    $/GPU-hour × GPUs per node × the site's price multiplier; owned nodes at their TCO."""
    a, price, where = s.accelerators[g], s.prices[g], s.sites[site]
    per_node = a.gpus_per_node * where.price_multiplier
    committed = {}
    for term in TERMS:
        if term.price_column is not None:
            rate = getattr(price, term.price_column)
            if term.policy_key in s.policy.reserved_terms and rate is not None:
                committed[term.id] = CommittedPrice(rate * per_node, 0.0, term.category)
        elif s.policy.allow_owned and g in s.owned:
            tco = owned_usd_per_node_hour(s.owned[g].capex_usd_per_node, s.owned[g].life_years, a.node_kw, where.pue,
                                          where.energy_usd_per_mwh, where.colo_usd_per_kw_month)
            committed[term.id] = CommittedPrice(tco["capital"] + tco["colo"], tco["energy"], term.category)
    return Contract(price.ondemand_usd_per_gpu_hour * per_node, committed)


def open_pools_view(inst: Instance, open_pools) -> Instance:
    """The instance as one hour of operation on a fixed plan: a single nominal state (the
    peak slice's, weighing one hour), every (metro, workload) that has demand in any slice
    (at its largest rate, so that each gets its demand row; the hour's own rates are set per
    solve), and only the arcs into tiers where one of ``open_pools`` takes requests. The
    formulation of the plan, built on this view in operate-fixed mode
    (`formulations.Mode.operate_fixed`), is the program that operates a commitment."""
    demand: dict = {}
    for (m, k, _), lam in inst.demand.items():
        demand[(m, k, inst.peak_slice)] = max(demand.get((m, k, inst.peak_slice), 0.0), lam)
    return _one_state(inst, inst.peak_slice, 1.0, demand, open_pools)


def slice_view(inst: Instance, state: State, open_pools=None) -> Instance:
    """One nominal state of the instance on its own (its slice's demand and hours): the unit
    the slice programs (a bound per slice, a slice re-planned on a fixed commitment) work on."""
    demand = {key: lam for key, lam in inst.demand.items() if key[2] == state.slice}
    return _one_state(inst, state.slice, state.weight_hours, demand, open_pools)


def _one_state(inst: Instance, slice_id: int, hours: float, demand: dict, open_pools) -> Instance:
    """The instance reduced to one nominal state (id 0) of ``slice_id`` weighing ``hours``,
    with ``demand``; arcs only into tiers where an open pool (all, where ``open_pools`` is
    None) takes requests."""
    st = State(0, slice_id, NOMINAL, None, hours, hours, float(inst.slices.loc[slice_id, "days"]))
    entry = {(p.site, p.workload, p.tier) for p in inst.pools_in(st)
             if (open_pools is None or p.id in open_pools) and p.role != Role.DECODE}
    arcs = [a for a in inst.arcs[NOMINAL] if (a.site, a.workload, a.tier) in entry]
    return replace(inst, states=[st], demand=demand, arcs={NOMINAL: arcs})


def reach(inst: Instance) -> dict[tuple[int, int], float]:
    """Demand that could reach each (pool, state): Σ λ over the arcs into the pool's tier
    (prefill, colocated) or site (decode). Bounds any pool's load."""
    by_tier: dict[tuple, float] = defaultdict(float)
    by_site: dict[tuple, float] = defaultdict(float)
    for st in inst.states:
        for a in inst.arcs_in(st):
            lam = inst.demand.get((a.metro, a.workload, st.slice), 0.0)
            if lam:
                by_tier[(st.regime, a.site, a.workload, a.tier, st.id)] += lam
                by_site[(a.site, a.workload, st.id)] += lam
    out = {}
    for st in inst.states:
        for p in inst.pools_in(st):
            if p.role == Role.DECODE:
                out[(p.id, st.id)] = by_site.get((p.site, p.workload, st.id), 0.0)
            else:
                out[(p.id, st.id)] = by_tier.get((p.regime, p.site, p.workload, p.tier, st.id), 0.0)
    return out


def kappa(pool: Pool, n: int) -> float:
    """Requests/s per replica of a pool of n replicas (peak-sized): f(n)/n for a queueing
    pool (capped by the decode slots when colocated), the decode capacity for decode."""
    if pool.table is None:
        return pool.decode_rps
    n = max(1, min(n, len(pool.table)))
    per = float(pool.table[n - 1]) / n
    return min(per, pool.decode_rps) if pool.role == Role.COLOCATED else per
