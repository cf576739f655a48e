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

The pools are chosen in `pools`; the one-state views the one-state programs use are in `views`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from optimizer.base.contracts import COST_CATEGORIES, TERMS
from optimizer.base.spot import is_spot, spot_loss, spot_lost_site
from optimizer.base.units import (
    GRAMS_PER_KG,
    HOURS_PER_YEAR,
    KG_PER_TONNE,
    KW_PER_MW,
    MS_PER_S,
    SECONDS_PER_HOUR,
    Regime,
    Role,
)
from optimizer.curves.economics import owned_usd_per_node_hour
from optimizer.geography.demand import build_demand, build_slices, profile_at
from optimizer.instance.churn import ChurnLimits
from optimizer.instance.fleet import OWNED_TERM, FleetYear, fleet_year
from optimizer.instance.kvcache import CacheChoice
from optimizer.instance.pools import (
    Handoff,
    Pool,
    PoolFactory,
    admissible_configs,
    best_decode,
    best_tier_pools,
    p99_transfer_ms,
)
from optimizer.scenario import Scenario
from optimizer.serving.budget import Stages
from optimizer.serving.configs import kv_bytes_per_token

NOMINAL, RELAXED = Regime.NOMINAL, Regime.RELAXED


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

    @property
    def lost_spot_site(self) -> str | None:
        """The site whose spot nodes this state loses (a spot-loss contingency), or None."""
        return spot_lost_site(self.lost_site)


@dataclass(frozen=True)
class Arc:
    metro: str
    site: str
    workload: str
    tier: int
    rtt_ms: float


@dataclass(frozen=True)
class CommittedPrice:
    """What one committed node of a term costs per hour of the year, and where it is booked."""

    rate: float  # $/node-hour, paid for every hour of the year
    energy: float  # $/node-hour of energy the rate leaves out (0 where it is included)
    category: str  # cost category (`optimizer.base.contracts`)
    signed: float = 0.0  # the part of the rate a signing commits to for the term (rent; owned: capital)


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
    carbon_kg_per_node_hour: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (site, gpu, slice)
    carbon_usd_per_t: float = 0.0  # the scenario's carbon price
    carbon_cap_t: float | None = None  # tonnes a year at most (None: no cap)
    # what the whole-plan searches pay a tonne: the price plus a binding cap's shadow price from
    # the master LP (None: the price); cost lines always use the price
    carbon_search_usd_per_t: float | None = None
    # the fleet the plan starts from: nodes of each existing term there all year (`instance.fleet`)
    existing_nodes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    churn: ChurnLimits | None = None  # a previous fleet and the limits on moving from it (None: none)
    # KV-cache tiers: (workload, candidate cache) → the tiers' $ an hour per request/s at a site's
    # peak (`instance.kvcache`; empty without tiers)
    kv_usd_per_rps_hour: dict[tuple[str, int], float] = field(default_factory=dict)
    kv_hit_rate: dict[tuple[str, int], float] = field(default_factory=dict)  # same key → the candidate's hit rate
    # Prompt-length splits the program chooses among (`prompt_split.with_every_option`): parent
    # workload → its options, each the workloads that serve it (the parent whole, or its two
    # parts), whose demand is as if that option took all of the parent's; empty: none to choose
    prompt_options: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    # What the formulation reads of fleetplan's vocabulary, through this contract (formulations/
    # imports nothing of optimizer/): the cost categories it may write, the hours a committed
    # node is paid for, and the unit conversions of its coefficients.
    cost_categories: ClassVar[tuple[str, ...]] = COST_CATEGORIES
    horizon_hours: ClassVar[float] = HOURS_PER_YEAR
    seconds_per_hour: ClassVar[float] = SECONDS_PER_HOUR
    ms_per_s: ClassVar[float] = MS_PER_S
    kg_per_tonne: ClassVar[float] = KG_PER_TONNE

    def arcs_in(self, state: State) -> list[Arc]:
        return [a for a in self.arcs[state.regime] if a.site != state.lost_site]

    def site_gpus_in(self, state: State) -> list[tuple[str, str]]:
        """The (site, accelerator) pairs whose nodes exist in ``state``: all but the lost
        site's, and but the spot accelerators of a site whose spot zone is lost."""
        spot_site = state.lost_spot_site
        return [(s, g) for s, g in self.site_gpus if s != state.lost_site and not (s == spot_site and is_spot(g))]

    def pools_in(self, state: State, role: str | None = None) -> list[Pool]:
        spot_site = state.lost_spot_site
        return [
            p for p in self.pools
            if p.site != state.lost_site and not (p.site == spot_site and is_spot(p.gpu))
            and (p.role == Role.DECODE or p.regime == state.regime)
            and (role is None or p.role == role)
        ]


def build_instance(s: Scenario, rtt: pd.DataFrame, caches: CacheChoice | None = None) -> Instance:
    """Scenario + RTT matrix (metros × sites, ms) → Instance. ``caches``: the workloads'
    candidate KV caches (`kvcache.cache_choice`), whose prefill and colocated pools are built
    once per candidate (`cache_tier_pools`); None: the scenario's own pools. BLAS runs on one
    thread meanwhile, whoever calls: a multithreaded BLAS sums in an order set by its thread
    count, and an instance built on the machine's two threads moved the reference's default
    plan from $16,610,147 to $16,561,276."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _build_instance(s, rtt, caches)


def _build_instance(s: Scenario, rtt: pd.DataFrame, caches: CacheChoice | None) -> Instance:
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
    configs = admissible_configs(s)
    factory = PoolFactory(s, _peak_load(s, demand_df))
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
            transfer[(site, k)] = p99_transfer_ms(s, w, kv, slowest)
            for h, speed in enumerate(s.serving.decode_speeds):
                decode = {g: best_decode(configs[(k, g)], speed) for g in gpus_at[site]}
                decode = {g: c for g, c in decode.items() if c is not None}
                if not decode:
                    continue
                handoff[(site, k, h)] = Handoff(min(c.nic_bytes_per_s for c in decode.values()),
                                                max(c.step_ms for c in decode.values()) / MS_PER_S)
                handoff_ms[(site, k, h)] = transfer[(site, k)] + 2 * MS_PER_S * handoff[(site, k, h)].step_s
                decode_pools[(site, k, h)] = [factory.add("decode", NOMINAL, site, k, -1, c, speed=h)
                                              for _, c in sorted(decode.items())]

    if caches is None:
        tier_pools = best_tier_pools(s, factory, configs, gpus_at, handoff, regimes, Stages(s))
    else:
        tier_pools = cache_tier_pools(caches, factory, gpus_at, handoff, regimes, _peak_load(s, demand_df))
    arcs, unreachable = _arcs(s, rtt, tier_pools, regimes)
    states = _states(s, slices, peak_slice, site_gpus)
    fleet = fleet_year(s)
    contracts = {(site, g): _contract(s, site, g, fleet) for site, g in site_gpus}
    return Instance(
        name=s.name, slices=slices, states=states,
        metros=list(s.metros), sites=list(s.sites), workloads=list(s.workloads), gpus=list(s.accelerators),
        demand=demand, peak_to_mean={k: s.peak_to_mean(k) for k in s.workloads}, peak_slice=peak_slice,
        arcs=arcs, pools=factory.pools, tier_pools=tier_pools, decode_pools=decode_pools,
        site_gpus=site_gpus,
        gpus_per_node={g: a.gpus_per_node for g, a in s.accelerators.items()},
        node_kw={g: a.node_kw for g, a in s.accelerators.items()},
        pue={x: site.pue for x, site in s.sites.items()},
        power_kw={x: site.power_mw * KW_PER_MW for x, site in s.sites.items()},
        contracts=contracts,
        committed_max={(site, g): s.supply[site][g].reserved_nodes_max for site, g in site_gpus},
        ondemand_max={(site, g): max(s.supply[site][g].ondemand_nodes_max, fleet.ondemand_quota.get((site, g), 0))
                      if s.policy.allow_ondemand else 0 for site, g in site_gpus},
        existing_nodes=fleet.nodes,
        allow_ondemand=s.policy.allow_ondemand,
        cold_start_hours=s.policy.cold_start_minutes / 60.0,
        warm_fraction=s.policy.warm_pool_fraction,
        penalty_usd_per_request=_penalties(s, factory.pools, contracts),
        egress_usd_per_request={k: s.policy.egress_usd_per_gb * s.policy.egress_bytes_per_output_token * w.osl_mean_tokens / 1e9 for k, w in s.workloads.items()},
        output_tokens={k: w.osl_mean_tokens for k, w in s.workloads.items()},
        input_tokens={k: w.isl_mean_tokens for k, w in s.workloads.items()},
        handoff_ms=handoff_ms, transfer_ms=transfer, unreachable=unreachable,
        carbon_kg_per_node_hour=_carbon_kg_per_node_hour(s, slices, site_gpus),
        carbon_usd_per_t=s.carbon.price_usd_per_t, carbon_cap_t=s.carbon.cap_t_per_year,
        kv_usd_per_rps_hour=dict(caches.usd_per_rps_hour) if caches is not None else {},
        kv_hit_rate=dict(caches.hit_rate) if caches is not None else {},
    )


def cache_tier_pools(caches: CacheChoice, factory: PoolFactory, gpus_at, handoff, regimes,
                     peak_load: dict[str, float]) -> dict[tuple, list[int]]:
    """`best_tier_pools` once per candidate cache i, from the scenario of the workloads as
    candidate i gives them (`kvcache.CacheChoice`), into one list of pools: the pools of
    every candidate of a (regime, site, workload, tier) serve it side by side, each marked
    with its candidate (`Pool.cache_option`)."""
    out: dict[tuple, list[int]] = defaultdict(list)
    for i, si in enumerate(caches.scenarios):
        made = PoolFactory(si, peak_load, factory.pools, cache_option=i)
        for key, ids in best_tier_pools(si, made, admissible_configs(si), gpus_at, handoff, regimes,
                                        Stages(si)).items():
            out[key].extend(ids)
    return dict(out)


PENALTY_MARGIN = 1.25  # the unserved penalty's floor over the costliest way to serve a request


def _penalties(s: Scenario, pools: list[Pool], contracts: dict) -> dict[str, float]:
    """$ per unserved request of each workload: the policy's penalty per million output
    tokens × its mean output tokens, raised where needed to PENALTY_MARGIN × the costliest
    way the plan could serve one (`serving_ceiling_usd`) — so that demand goes unserved only
    where no capacity can serve it, never because leaving it is cheaper."""
    return {k: max(s.policy.unserved_penalty_usd_per_million_tokens * w.osl_mean_tokens / 1e6,
                   PENALTY_MARGIN * serving_ceiling_usd(s, k, pools, contracts))
            for k, w in s.workloads.items()}


def serving_ceiling_usd(s: Scenario, k: str, pools: list[Pool], contracts: dict) -> float:
    """The most one request of ``k`` can cost to serve: on demand, in a pool of one replica
    (the smallest pool carries the least per replica), at the dearest entry pool (prefill or
    colocated: f(1), a colocated one also bounded by its decode) plus the dearest decode pool
    (decode rps); × 1/(1 − warm share) for the idle warm nodes rented beside it, × 2 when a
    lost site's traffic must be carried too (N-1):

        c = (max_entry p_g·G/(3600·f(1)) + max_decode p_g·G/(3600·r_d)) / (1 − φ) · (2 if N-1)

    with p_g the on-demand $ per GPU-hour at the pool's site and G its GPUs per replica."""
    entry = decode = 0.0
    for p in pools:
        if p.workload != k:
            continue
        usd_per_s = contracts[(p.site, p.gpu)].ondemand / s.accelerators[p.gpu].gpus_per_node * p.gpus / SECONDS_PER_HOUR
        if p.role == Role.DECODE:
            decode = max(decode, usd_per_s / p.decode_rps) if p.decode_rps > 0 else decode
            continue
        rps = float(p.table[0]) if p.table is not None and len(p.table) else p.decode_rps
        if p.role == Role.COLOCATED:
            rps = min(rps, p.decode_rps)
        entry = max(entry, usd_per_s / rps) if rps > 0 else entry
    return (entry + decode) / (1.0 - s.policy.warm_pool_fraction) * (2.0 if s.policy.n_minus_1 else 1.0)


def grid_gco2_per_kwh(s: Scenario, site: str, utc_hours) -> np.ndarray | None:
    """A site's grid intensity at UTC ``utc_hours``: its hourly profile (local standard time of
    the site's metro) scaled to the annual mean, or the annual mean every hour; None where the
    scenario has no grid row for the site."""
    row = s.grid_carbon.get(site)
    if row is None:
        return None
    hours = np.asarray(utc_hours, dtype=float)
    if not row.hourly_gco2_per_kwh:
        return np.full(hours.shape, row.gco2_per_kwh)
    profile = np.asarray(row.hourly_gco2_per_kwh, dtype=float)
    scaled = profile * (row.gco2_per_kwh / profile.mean()) if profile.mean() > 0 else profile
    return profile_at(list(scaled), hours + s.metros[s.sites[site].metro].utc_offset_hours)


def _carbon_kg_per_node_hour(s: Scenario, slices: pd.DataFrame, site_gpus) -> dict[tuple[str, str, int], float]:
    """(site, accelerator, slice) → kg CO2eq a powered node emits in an hour of the slice:
    node kW × PUE × grid g/kWh at the slice's hour ÷ 1000. Sites without a grid row have none."""
    out = {}
    for site, g in site_gpus:
        grid = grid_gco2_per_kwh(s, site, slices["hour"].to_numpy())
        if grid is None:
            continue
        kw = s.accelerators[g].node_kw * s.sites[site].pue
        out.update({(site, g, int(t)): float(kw * v / GRAMS_PER_KG) for t, v in zip(slices.index, grid)})
    return out


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


def _states(s: Scenario, slices: pd.DataFrame, peak_slice: int, site_gpus) -> list[State]:
    """The slices; with N−1, one site-loss state per site (TTFT relaxed); with spot offered,
    one spot-loss state per site that offers it: the peak slice with that site's spot nodes
    gone and the objectives kept — spot losses are common (a zone was without spot capacity
    10–83 % of the time in data/spot_availability.csv), not a rare disaster."""
    states = [State(int(t), int(t), NOMINAL, None, float(r.weight_hours), float(r.weight_hours), float(r.days))
              for t, r in slices.iterrows()]
    if s.policy.n_minus_1:
        for site in s.sites:
            states.append(State(len(states), peak_slice, RELAXED, site, 0.0, RESILIENCE_PENALTY_HOURS, 0.0))
    for site in sorted({site for site, g in site_gpus if is_spot(g)}):
        states.append(State(len(states), peak_slice, NOMINAL, spot_loss(site), 0.0, RESILIENCE_PENALTY_HOURS, 0.0))
    return states


RESILIENCE_PENALTY_HOURS = 1000.0  # unserved demand in a site-loss state costs as if it lasted this long


def _contract(s: Scenario, site: str, g: str, fleet: FleetYear) -> Contract:
    """The terms the policy allows, priced (`optimizer.base.contracts.TERMS`): a reserved term at its
    $/GPU-hour × GPUs per node × the site's price multiplier; owned nodes at their TCO; the
    existing fleet's nodes at what keeping them costs (`optimizer.instance.fleet`)."""
    a, price, where = s.accelerators[g], s.prices[g], s.sites[site]
    per_node = a.gpus_per_node * where.price_multiplier
    committed = {}
    for term in TERMS:
        if term.existing:
            if fleet.nodes.get((site, g, term.id)):
                rate, energy = fleet.keep_usd_per_node_hour.get((site, g), (0.0, 0.0)) if term.id == OWNED_TERM \
                    else (0.0, 0.0)
                committed[term.id] = CommittedPrice(rate, energy, term.category)
        elif term.price_column is not None:
            rate = getattr(price, term.price_column)
            if term.policy_key in s.policy.reserved_terms and rate is not None:
                committed[term.id] = CommittedPrice(rate * per_node, 0.0, term.category, rate * per_node)
        elif s.policy.allow_owned and g in s.owned:
            tco = owned_usd_per_node_hour(s.owned[g].capex_usd_per_node, s.owned[g].life_years, a.node_kw, where.pue,
                                          where.energy_usd_per_mwh, where.colo_usd_per_kw_month)
            committed[term.id] = CommittedPrice(tco["capital"] + tco["colo"], tco["energy"], term.category, tco["capital"])
    return Contract(price.ondemand_usd_per_gpu_hour * per_node, committed)


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
