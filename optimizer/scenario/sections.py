"""Scenario sections: the horizon, demand, network, serving stack, policy and robust
margins — the parts of a scenario that are not catalogue tables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from optimizer.base.contracts import RESERVED_POLICY_KEYS
from optimizer.base.units import DAYS_PER_YEAR
from optimizer.scenario.calibration.params import PARAMETERS, Calibration, shipped_calibration
from optimizer.scenario.experts import ExpertParallel
from optimizer.scenario.fields import Strict, bounded, fraction_before, fraction_check
from optimizer.scenario.fleet import iso_date


class Period(Strict):
    id: str
    days: float = bounded(gt=0, le=DAYS_PER_YEAR, unit="days", why="a period is part of a 365-day year")


class DayType(Strict):
    id: str
    share: float = bounded(gt=0, le=1, description="share of the period's days of this type")
    demand_multiplier: float = bounded(1.0, ge=0, le=100, description="this day type's demand over the modelled demand")

    _share = field_validator("share", mode="before")(fraction_before)


def _quarters() -> list[Period]:
    return [Period(id="Q1", days=90), Period(id="Q2", days=91), Period(id="Q3", days=92), Period(id="Q4", days=92)]


class Horizon(Strict):
    """Periods × day types × representative UTC hours; a slice stands for its hour on each of
    its days, weight = days · share · 24 / len(hours) hours (the year adds up to 8,760 h)."""

    periods: list[Period] = Field(default_factory=_quarters)
    day_types: list[DayType] = Field(default_factory=lambda: [DayType(id="all", share=1.0)])
    hours: list[int] = bounded(default_factory=lambda: list(range(24)), ge=0, le=23, each=True,
                               description="UTC hours to plan (default all 24); each stands for 24/len(hours) hours")
    start: str | None = Field(None, description="the plan's first day (YYYY-MM-DD): where the fleet's contracts "
                              "(fleet:) and the accelerators' availability (years.available_from) fall")
    years: int = bounded(1, ge=1, le=5, unit="years", description="plan years (more than one: `years:` says how they "
                         "differ)", why="prices and generations beyond five years are guesses")

    _start = field_validator("start", mode="before")(lambda v: iso_date(v))

    # One validator per field, so that an error names the field ('periods', 'day_types', 'hours').
    @field_validator("periods")
    @classmethod
    def _periods(cls, periods):
        if not periods:
            raise ValueError("the horizon has no periods (expected e.g. four quarters)")
        ids = [p.id for p in periods]
        if len(set(ids)) != len(ids):
            raise ValueError(f"period ids must be unique, got {ids}")
        days = sum(p.days for p in periods)
        if abs(days - DAYS_PER_YEAR) > 1e-6:
            raise ValueError(
                f"periods add up to {days:g} days ({days * 24:g} h); a planning year has "
                f"{DAYS_PER_YEAR} days (8,760 h)"
            )
        return periods

    @field_validator("day_types")
    @classmethod
    def _day_types(cls, day_types):
        ids = [d.id for d in day_types]
        if len(set(ids)) != len(ids):
            raise ValueError(f"day type ids must be unique, got {ids}")
        share = sum(d.share for d in day_types)
        if abs(share - 1.0) > 1e-6:
            raise ValueError(f"day_types shares add up to {share:g}; they must add up to 1")
        return day_types

    @field_validator("hours")
    @classmethod
    def _hours(cls, hours):
        if not hours or len(set(hours)) != len(hours):
            raise ValueError(f"hours must be distinct UTC hours 0–23, got {hours}")
        return hours


class DemandRow(Strict):
    metro: str
    workload: str
    period: str
    hour: int = bounded(ge=0, le=23, description="UTC hour")
    requests_per_s: float = bounded(ge=0, le=1e9, unit="requests/s",
                                    why="a billion requests a second is ~100× the busiest web services")
    day_type: str | None = None


class MixRow(Strict):
    metro: str
    workload: str
    multiplier: float = bounded(ge=0, le=1e6, description="this metro's demand for this workload × this")


class Demand(Strict):
    """Requests/s per metro × workload × slice:
    peak_rps_per_million · weight(metro) · mix · scale · diurnal(local hour) · day-type · (1+g)^period.
    Or, given directly, ``table`` rows (metro, workload, period, hour, requests_per_s)."""

    growth_per_period: float = bounded(0.0, gt=-1, le=5, description="compound demand growth from one period to the next",
                                       why="above −1: demand cannot fall by 100 % or more")
    peak_to_mean_intra_hour: float = bounded(1.2, ge=1, le=5, description="pools are sized for the hour's mean × this factor")
    scale: float = bounded(1.0, ge=1e-6, le=1e6, description="multiplies every metro's demand")
    mix: list[MixRow] = Field(default_factory=list, description="per (metro, workload) multipliers")
    table: list[DemandRow] | None = Field(None, description="demand given directly (replaces the model above)")

    @field_validator("growth_per_period", mode="before")
    @classmethod
    def _growth(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 5 < v <= 100:
            raise ValueError(f"expected a fraction per period; {v} looks like a percentage — write {v / 100:g} for {v:g} %")
        return v


class NetworkSpec(Strict):
    """Default graph: every metro and site joined by an edge of one-way latency
    great-circle km × route_factor / fiber_km_per_ms + site_rtt_ms / 2; users add access_rtt_ms."""

    route_factor: float = bounded(
        1.45, ge=1, le=4,
        description="path length over great-circle distance; 1.45 with site_rtt_ms 8.5 fits the 42 Azure P95 "
                    "region pairs of data/latency_reference.csv (median error 13 %, no bias; tests/test_network.py)",
        why="no path is shorter than the great circle; 2.1 is the measured internet average (FACTS.md §4.1)")
    fiber_km_per_ms: float = bounded(
        200.0, ge=100, le=299.792458, unit="km/ms", description="light in fibre, one way",
        why="standard fibre carries light at ~204 km/ms (FACTS.md §4.1); nothing is faster than light in vacuum, "
            "299.79 km/ms; slower paths are a larger route_factor")
    site_rtt_ms: float = bounded(
        8.5, ge=0, le=1000, unit="ms",
        description="round trip that does not grow with distance (switching, routing, detours of short paths, "
                    "P95 jitter at the two ends); 8.5 ms is the intercept of the same fit",
        why="a second is a geostationary satellite hop and back, twice over")
    access_rtt_ms: float = bounded(5.0, ge=0, le=1000, unit="ms", description="last-mile round trip at the user's end",
                                   why="a second is a geostationary satellite hop and back, twice over")
    graph: str | None = Field(None, description="GraphML or edge CSV (from,to,one_way_ms) replacing the default graph")


def _calibrated(name: str, unit: str, description: str):
    """A serving parameter a calibration fits, overridable here for every accelerator: its
    range is the one the fit keeps to (`optimizer.scenario.calibration.params.PARAMETERS`)."""
    low, high, _ = PARAMETERS[name]
    return bounded(None, ge=low, le=high, unit=unit, description=description,
                   why="the range a calibration fit keeps to")


class Speculative(Strict):
    enabled: bool = True
    draft_tokens: int = bounded(3, ge=1, le=16, description="tokens the draft model proposes per step")
    acceptance_rate: float = bounded(0.7, ge=0, le=1, description="share of draft tokens the target accepts")
    draft_cost_ratio: float = bounded(0.1, ge=0.001, lt=1, description="draft step time / target step time",
                                      why="a draft model costs something, and less than the target")

    _fractions = field_validator("acceptance_rate", "draft_cost_ratio", mode="before")(fraction_before)


class Serving(Strict):
    """Efficiencies and overheads of the serving stack.

    The physical parameters (prefill_mfu … roofline_sharpness, meanings in
    `optimizer.scenario.calibration.params.ParameterSet`) come per accelerator, engine and dtype from
    the calibration: a scenario's top-level ``calibration: FILE`` (`fleetplan calibrate`),
    else the shipped defaults fitted to public measurements (data/serving_calibration.csv,
    sources in data/SOURCES.md). A value set here overrides them for every accelerator
    (scenario override > calibration file > shipped defaults); a multiplier given to an unset
    one (``--set serving.decode_mbu=×0.8``) scales each accelerator's value instead
    (kept in ``calibration_scale``). Reasons for the other defaults
    (sources in ../shared/reference/FACTS.md §7.3, data/SOURCES.md):
    - usable_hbm_fraction 0.90: vLLM's default gpu_memory_utilization.
    - workspace_gb_per_gpu 2: activations, CUDA graphs and fragmentation (assumed).
    - itl_tail_factor 1.15: p99 step over mean step from batch composition and jitter (assumed).
    - nic_efficiency 0.7: share of the scale-out NIC a KV transfer or a collective across
      nodes reaches (assumed; the pre-calibration link efficiency — the measured tables
      cover only collectives inside a node).
    """

    prefill_mfu: float | None = _calibrated("prefill_mfu", "", "compute efficiency of a large prefill pass")
    prefill_half_tokens: float | None = _calibrated("prefill_half_tokens", "tokens",
                                                    "tokens in a pass at which prefill reaches half its efficiency")
    decode_mbu: float | None = _calibrated("decode_mbu", "", "HBM bandwidth efficiency of a decode step")
    decode_mfu: float | None = _calibrated("decode_mfu", "", "compute efficiency of a compute-bound decode step")
    step_overhead_ms: float | None = _calibrated("step_overhead_ms", "ms", "fixed cost of one forward pass")
    layer_overhead_us: float | None = _calibrated("layer_overhead_us", "µs", "fixed cost per layer of a pass")
    collective_latency_us: float | None = _calibrated("collective_latency_us", "µs",
                                                      "latency of one collective (low-latency protocol)")
    link_efficiency: float | None = _calibrated("link_efficiency", "", "share of the link the bulk protocol reaches")
    bulk_extra_latency_us: float | None = _calibrated("bulk_extra_latency_us", "µs",
                                                      "extra latency of the bulk protocol")
    small_link_share: float | None = _calibrated("small_link_share", "",
                                                 "share of the bulk bandwidth the low-latency protocol reaches")
    pcie_p2p_gpus: int | None = _calibrated("pcie_p2p_gpus", "GPUs", "GPUs under one PCIe switch (parts without NVLink)")
    attention_factor: float | None = _calibrated("attention_factor", "", "attention FLOPs and KV reads × this")
    moe_load_factor: float | None = _calibrated("moe_load_factor", "", "routed-expert compute × this (imbalance)")
    roofline_sharpness: float | None = _calibrated("roofline_sharpness", "",
                                                   "how memory and compute time overlap near the ridge")
    engine: str | None = Field(None, description="serving engine whose calibrated parameters to use (any if unset)")
    calibration_scale: dict[str, float] = bounded(
        default_factory=dict, ge=0.01, le=100, each=True, description="multipliers on calibrated values",
        why="an estimate off by more than 100× is a different parameter: set the value instead")
    calibration: Calibration = Field(default_factory=shipped_calibration, description="resolved calibration")
    usable_hbm_fraction: float = bounded(0.90, ge=0.05, le=1, description="share of HBM the engine may use")
    nic_efficiency: float = bounded(0.7, ge=0.05, le=1,
                                    description="share of the scale-out NIC a KV transfer or cross-node collective reaches")
    workspace_gb_per_gpu: float = bounded(2.0, ge=0, le=1000, unit="GB",
                                          description="activations, CUDA graphs and fragmentation per GPU",
                                          why="more than any accelerator's memory")
    itl_tail_factor: float = bounded(1.15, ge=1, le=10, description="p99 step over mean step")
    tp_degrees: list[int] = bounded(default_factory=lambda: [1, 2, 4, 8], ge=1, le=1024, each=True, unit="GPUs",
                                    description="GPUs per replica to consider")
    max_gpus_per_replica: int = bounded(16, ge=1, le=4096, unit="GPUs",
                                        description="MoE replicas may span nodes up to this many GPUs")
    modes: list[Literal["colocated", "disaggregated"]] = Field(default_factory=lambda: ["colocated", "disaggregated"])
    colocated_chunk_tokens: list[int] = bounded(
        default_factory=lambda: [256, 512, 1024], ge=1, le=1_000_000, each=True, unit="tokens",
        description="chunked-prefill token budgets per iteration (colocated)", why="no context window holds more per pass")
    prefill_batch_tokens: list[int] = bounded(
        default_factory=lambda: [2048, 4096, 8192], ge=1, le=1_000_000, each=True, unit="tokens",
        description="new-token budgets of batched prefill passes offered beside one prompt at a time (disaggregated)",
        why="no context window holds more per pass")
    speculative: Speculative = Field(default_factory=Speculative)
    expert_parallel: ExpertParallel = Field(default_factory=ExpertParallel)
    tokenization_ms: float = bounded(3.0, ge=0, le=60_000, unit="ms", description="tokenising the prompt",
                                     why="a minute is the longest inter-token objective")
    safety_ms: float = bounded(15.0, ge=0, le=60_000, unit="ms", description="input safety classifier",
                               why="a minute is the longest inter-token objective")
    admission_ms: float = bounded(5.0, ge=0, le=60_000, unit="ms", description="gateway, auth, routing",
                                  why="a minute is the longest inter-token objective")
    kv_transfer_latency_ms: float = bounded(1.0, ge=0, le=60_000, unit="ms",
                                            description="fixed latency of a prefill → decode KV transfer",
                                            why="a minute is the longest inter-token objective")
    prefill_max_utilization: float = bounded(0.85, ge=0.05, lt=1, description="cap on prefill pool utilisation",
                                             why="a queue at 100 % grows without bound")
    slo_hours_met: float | None = bounded(
        None, ge=0.5, lt=1,
        description="size queueing pools so that one hour's own p99 meets the objective in this share of hours, "
                    "as verify judges an hour (null: the long-run p99)",
        why="below half, the long run is the stricter; at 1, no finite pool")
    decode_max_utilization: float = bounded(0.85, ge=0.05, le=1,
                                            description="share of decode slots a plan may fill on average")
    decode_speeds: list[float] = bounded(
        default_factory=lambda: [1.0, 0.6], ge=0.05, le=1, each=True,
        description="decode operating points offered, as fractions of the ITL objective: faster decode costs "
                    "GPUs but its shorter first step leaves TTFT budget for prefill queueing")
    tier_rtt_ms: list[float] = bounded(
        default_factory=lambda: [20.0, 45.0, 90.0, 180.0], ge=1, le=2000, each=True, unit="ms",
        description="latency tiers: metros route to the tier with the smallest bound ≥ their RTT",
        why="the far side of the planet is ~200 ms away by fibre")
    resident_prefixes: float = bounded(4, ge=0, le=10_000, description="shared prefixes each replica keeps cached")
    max_pool_replicas: int = bounded(512, ge=8, le=20_000, description="largest pool the SLO capacity table covers",
                                     why="the table is computed for every size; larger pools are extended linearly")

    _fractions = field_validator(
        "prefill_mfu", "decode_mbu", "decode_mfu", "usable_hbm_fraction", "link_efficiency",
        "small_link_share", "nic_efficiency", "prefill_max_utilization", "decode_max_utilization", mode="before",
    )(lambda v: fraction_check(float(v), "") if isinstance(v, (int, float)) else v)

    @property
    def fixed_overhead_ms(self) -> float:
        return self.tokenization_ms + self.safety_ms + self.admission_ms

    @model_validator(mode="after")
    def _lists(self):
        if not self.tp_degrees:
            raise ValueError("tp_degrees must list positive GPU counts, e.g. [1, 2, 4, 8]")
        if not self.modes:
            raise ValueError("modes must allow colocated, disaggregated or both")
        for name in self.calibration_scale:
            if name not in PARAMETERS:
                raise ValueError(f"calibration_scale: {name!r} is not a calibrated parameter; known: "
                                 f"{', '.join(PARAMETERS)}")
        tiers = list(self.tier_rtt_ms)
        if not tiers or sorted(set(tiers)) != tiers:
            raise ValueError(f"tier_rtt_ms must be a non-empty increasing list of positive RTT bounds in ms, e.g. "
                             f"[20, 45, 90, 180]; got {self.tier_rtt_ms}")
        if "colocated" in self.modes and not self.colocated_chunk_tokens:
            raise ValueError(f"colocated_chunk_tokens must list positive token budgets, e.g. [256, 512, 1024]; "
                             f"got {self.colocated_chunk_tokens}")
        return self


class Policy(Strict):
    cold_start_minutes: float = bounded(10.0, ge=0, le=1440, unit="minutes",
                                        description="time to bring an on-demand node into service")
    warm_pool_fraction: float = bounded(0.1, ge=0, lt=1, description="share of on-demand nodes kept warm and idle")
    n_minus_1: bool = Field(False, description="survive the loss of any one site at the peak slice")
    resilience_ttft_factor: float = bounded(1.5, ge=1, le=10, description="TTFT objective × this during a site loss")
    unserved_penalty_usd_per_million_tokens: float = bounded(
        500.0, ge=0, le=1e6, unit="US$ per million tokens", why="a dollar a token is ~1,000× list prices",
        description="what a request left unserved costs the plan; raised where needed to 1.25× the costliest way "
                    "to serve one, so demand goes unserved only where no capacity can serve it")
    reserved_terms: list[Literal[RESERVED_POLICY_KEYS]] = Field(default_factory=lambda: list(RESERVED_POLICY_KEYS))
    allow_ondemand: bool = True
    allow_owned: bool = False
    egress_usd_per_gb: float = bounded(0.05, ge=0, le=10, unit="US$/GB", why="~100× cloud list prices")
    egress_bytes_per_output_token: float = bounded(150.0, ge=0, le=100_000, unit="bytes",
                                                   description="streamed response payload per token")
    k_nearest_sites: int = bounded(4, ge=1, le=1000, description="routing arcs per metro and workload")
    token_price_provider: str = Field(
        "reference", description="per-token price list (data/token_prices.csv) the plan's costs are compared with")
    time_limit_s: float | None = bounded(None, ge=0.1, le=1e7, unit="s",
                                         description="a wall-clock safety cap on the whole solve (default: the "
                                                     "effort's); a plan it stops may differ on another machine",
                                         why="1e7 s is ~116 days")
    effort: Literal["first", "quick", "thorough"] = Field(
        "quick", description="the solve's work, counted so that the plan does not depend on the machine: first: the "
                             "first whole plan, improved by moves; quick: more moves and, where it fits, the exact "
                             "model (about a minute on the reference); thorough: more of both and slice programs")
    mip_gap: float = bounded(0.005, ge=1e-9, lt=1, description="relative gap at which a plan counts as optimal")
    threads: int | None = bounded(None, ge=1, le=1024, description="solver threads")

    _warm = field_validator("warm_pool_fraction", "mip_gap", mode="before")(fraction_before)


class Carbon(Strict):
    """What the plan pays for the grid's emissions: every powered node draws node kW × PUE in
    every hour it is powered, at its site's grid intensity of that hour (`grid_carbon`)."""

    price_usd_per_t: float = bounded(
        0.0, ge=0, le=10_000, unit="US$/tCO2eq", description="a carbon price (internal fee, tax or allowance) on "
        "every tonne the fleet's power emits; 0: emissions reported, not priced",
        why="EU allowances traded ~€75 in 2025; the US EPA's 2023 social cost of carbon is $190")
    cap_t_per_year: float | None = bounded(
        None, ge=0, le=1e9, unit="tCO2eq per year", description="at most these tonnes a year (the plan's "
        "slices, weighted); empty: no cap", why="a 100 MW fleet on a 500 g/kWh grid emits ~440,000 t a year")


class Churn(Strict):
    """How far a plan may move from a previous fleet (`fleetplan plan --from-plan OLD`): a
    pair's nodes are its committed nodes plus its on-demand peak (`optimizer.instance.churn`).
    Every field is optional; none set: no limit."""

    growth_factor: float | None = bounded(
        None, ge=0, le=100, description="γ: the nodes of a (site, accelerator) may grow by at most γ × its previous "
        "nodes + growth_nodes", why="energy-system planners bound yearly build-out at tens of % of the installed base")
    growth_nodes: float | None = bounded(
        None, ge=0, le=100_000, unit="nodes", description="Γ: nodes a (site, accelerator) may add beyond γ × its "
        "previous nodes (lets a pair with none start)")
    max_removed_nodes: int | None = bounded(
        None, ge=0, le=100_000, unit="nodes per (site, accelerator)", description="committed nodes a (site, "
        "accelerator) may end or take out at most")
    max_changes: int | None = bounded(
        None, ge=0, le=1_000_000, unit="nodes", description="a budget of node changes: Σ over (site, accelerator) of "
        "|committed − previous committed| + on-demand peak nodes beyond the previous peak")
    migration_usd_per_node: float | None = bounded(
        None, ge=0, le=10_000_000, unit="US$ per node", description="what moving replicas to a committed node added at "
        "a (site, accelerator) costs once: its cold start and the traffic displaced while it warms (on-demand nodes "
        "pay their cold starts already); a node-hour of on-demand × the cold start's hours is the floor",
        why="ten million dollars a node is several times its purchase price")

    @property
    def limited(self) -> bool:
        """Whether any limit or price is set (none: the plan moves freely, nothing to keep)."""
        return any(v is not None for v in (self.growth_factor, self.growth_nodes, self.max_removed_nodes,
                                           self.max_changes, self.migration_usd_per_node))


class Robust(Strict):
    """Margins `fleetplan plan --robust` plans with. The plan folder keeps the nominal
    scenario; its summary reports the margins and the price of robustness (the robust plan's
    cost over the nominal plan's). Efficiencies are derated by ``efficiency_derate``, or —
    when the scenario names a calibration file (``use_calibration_band`` unset), or always
    (set true) — by each accelerator's calibration band (`optimizer.commands.calibrate.band`)."""

    demand_factor: float = bounded(1.25, ge=1, le=5, description="demand at a high percentile of its forecast, × the nominal")
    efficiency_derate: float = bounded(0.85, ge=0.1, le=1, description="prefill MFU, decode MBU and decode MFU × this")
    rtt_margin_ms: float = bounded(10.0, ge=0, le=1000, unit="ms", description="added to every round trip and latency tier bound")
    use_calibration_band: bool | None = Field(
        None, description="derate by the calibration's residual band instead of efficiency_derate: unset = when the "
                          "scenario names a calibration file")

    def overrides(self, s, banded: bool = False) -> list[str]:
        """The margins as `--set` overrides on the nominal scenario ``s`` (a `Scenario`);
        ``banded``: the calibration band derates the calibrated efficiencies, so only those
        the scenario sets itself get ``efficiency_derate``."""
        d = self.efficiency_derate
        derates = [f"serving.{name}=×{d}" for name in ("prefill_mfu", "decode_mbu", "decode_mfu")
                   if not banded or getattr(s.serving, name) is not None]
        return [
            f"demand.scale={s.demand.scale * self.demand_factor}",
            *derates,
            f"network.access_rtt_ms={s.network.access_rtt_ms + self.rtt_margin_ms}",
            # the tiers move with the round trips: a metro keeps its tier, whose pools give
            # the margin up from their queueing budget (else one just inside a bound would
            # fall into the next tier, sized for a far longer trip)
            f"serving.tier_rtt_ms={[b + self.rtt_margin_ms for b in s.serving.tier_rtt_ms]}",
        ]
