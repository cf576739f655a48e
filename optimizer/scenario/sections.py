"""Scenario sections: the horizon, demand, network, serving stack, policy and robust
margins — the parts of a scenario that are not catalogue tables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from optimizer.calibration.params import PARAMETERS, Calibration, shipped_calibration
from optimizer.contracts import RESERVED_POLICY_KEYS
from optimizer.scenario.fields import Strict, fraction_before, fraction_check
from optimizer.units import DAYS_PER_YEAR


class Period(Strict):
    id: str
    days: float = Field(gt=0)


class DayType(Strict):
    id: str
    share: float = Field(gt=0, le=1, description="share of the period's days of this type")
    demand_multiplier: float = Field(1.0, ge=0, le=100)

    _share = field_validator("share", mode="before")(fraction_before)


def _quarters() -> list[Period]:
    return [Period(id="Q1", days=90), Period(id="Q2", days=91), Period(id="Q3", days=92), Period(id="Q4", days=92)]


class Horizon(Strict):
    """Periods × day types × representative UTC hours; a slice stands for its hour on each of
    its days, weight = days · share · 24 / len(hours) hours (the year adds up to 8,760 h)."""

    periods: list[Period] = Field(default_factory=_quarters)
    day_types: list[DayType] = Field(default_factory=lambda: [DayType(id="all", share=1.0)])
    hours: list[int] = Field(default_factory=lambda: list(range(24)),
                             description="UTC hours to plan (default all 24); each stands for 24/len(hours) hours")

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
        if not hours or len(set(hours)) != len(hours) or any(not 0 <= h <= 23 for h in hours):
            raise ValueError(f"hours must be distinct UTC hours 0–23, got {hours}")
        return hours


class DemandRow(Strict):
    metro: str
    workload: str
    period: str
    hour: int = Field(ge=0, le=23, description="UTC hour")
    requests_per_s: float = Field(ge=0, le=1e9)
    day_type: str | None = None


class MixRow(Strict):
    metro: str
    workload: str
    multiplier: float = Field(ge=0, le=1e6)


class Demand(Strict):
    """Requests/s per metro × workload × slice:
    peak_rps_per_million · weight(metro) · mix · scale · diurnal(local hour) · day-type · (1+g)^period.
    Or, given directly, ``table`` rows (metro, workload, period, hour, requests_per_s)."""

    growth_per_period: float = Field(0.0, gt=-1, le=5, description="compound demand growth from one period to the next")
    peak_to_mean_intra_hour: float = Field(1.2, ge=1, le=5, description="pools are sized for the hour's mean × this factor")
    scale: float = Field(1.0, gt=0, le=1e6, description="multiplies every metro's demand")
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

    route_factor: float = Field(
        1.45, ge=1, le=4,
        description="path length over great-circle distance; 1.45 with site_rtt_ms 8.5 fits the 42 Azure P95 "
                    "region pairs of data/latency_reference.csv (median error 13 %, no bias; tests/test_network.py)")
    fiber_km_per_ms: float = Field(200.0, gt=0, description="light in fibre, one way")
    site_rtt_ms: float = Field(
        8.5, ge=0,
        description="round trip that does not grow with distance (switching, routing, detours of short paths, "
                    "P95 jitter at the two ends); 8.5 ms is the intercept of the same fit")
    access_rtt_ms: float = Field(5.0, ge=0, description="last-mile round trip at the user's end")
    graph: str | None = Field(None, description="GraphML or edge CSV (from,to,one_way_ms) replacing the default graph")


class Speculative(Strict):
    enabled: bool = True
    draft_tokens: int = Field(3, ge=1, le=16)
    acceptance_rate: float = Field(0.7, ge=0, le=1)
    draft_cost_ratio: float = Field(0.1, gt=0, lt=1, description="draft step time / target step time")

    _fractions = field_validator("acceptance_rate", "draft_cost_ratio", mode="before")(fraction_before)


class Serving(Strict):
    """Efficiencies and overheads of the serving stack.

    The physical parameters (prefill_mfu … roofline_sharpness, meanings in
    `optimizer.calibration.params.ParameterSet`) come per accelerator, engine and dtype from
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

    prefill_mfu: float | None = Field(None, gt=0, le=1)
    prefill_half_tokens: float | None = Field(None, ge=0)
    decode_mbu: float | None = Field(None, gt=0, le=1)
    decode_mfu: float | None = Field(None, gt=0, le=1)
    step_overhead_ms: float | None = Field(None, ge=0)
    layer_overhead_us: float | None = Field(None, ge=0)
    collective_latency_us: float | None = Field(None, ge=0)
    link_efficiency: float | None = Field(None, gt=0, le=1)
    bulk_extra_latency_us: float | None = Field(None, ge=0)
    small_link_share: float | None = Field(None, gt=0, le=1)
    pcie_p2p_gpus: int | None = Field(None, ge=1)
    attention_factor: float | None = Field(None, gt=0)
    moe_load_factor: float | None = Field(None, ge=1)
    roofline_sharpness: float | None = Field(None, ge=1)
    engine: str | None = Field(None, description="serving engine whose calibrated parameters to use (any if unset)")
    calibration_scale: dict[str, float] = Field(default_factory=dict, description="multipliers on calibrated values")
    calibration: Calibration = Field(default_factory=shipped_calibration, description="resolved calibration")
    usable_hbm_fraction: float = Field(0.90, gt=0, le=1)
    nic_efficiency: float = Field(0.7, gt=0, le=1)
    workspace_gb_per_gpu: float = Field(2.0, ge=0)
    itl_tail_factor: float = Field(1.15, ge=1)
    tp_degrees: list[int] = Field(default_factory=lambda: [1, 2, 4, 8], description="GPUs per replica to consider")
    max_gpus_per_replica: int = Field(16, ge=1, description="MoE replicas may span nodes up to this many GPUs")
    modes: list[Literal["colocated", "disaggregated"]] = Field(default_factory=lambda: ["colocated", "disaggregated"])
    colocated_chunk_tokens: list[int] = Field(
        default_factory=lambda: [256, 512, 1024], description="chunked-prefill token budgets per iteration (colocated)"
    )
    prefill_batch_tokens: list[int] = Field(
        default_factory=lambda: [2048, 4096, 8192],
        description="new-token budgets of batched prefill passes offered beside one prompt at a time (disaggregated)",
    )
    speculative: Speculative = Field(default_factory=Speculative)
    tokenization_ms: float = Field(3.0, ge=0)
    safety_ms: float = Field(15.0, ge=0, description="input safety classifier")
    admission_ms: float = Field(5.0, ge=0, description="gateway, auth, routing")
    kv_transfer_latency_ms: float = Field(1.0, ge=0)
    prefill_max_utilization: float = Field(0.85, gt=0, lt=1, description="cap on prefill pool utilisation")
    decode_max_utilization: float = Field(0.85, gt=0, le=1, description="share of decode slots a plan may fill on average")
    decode_speeds: list[float] = Field(
        default_factory=lambda: [1.0, 0.6],
        description="decode operating points offered, as fractions of the ITL objective: faster decode costs "
                    "GPUs but its shorter first step leaves TTFT budget for prefill queueing",
    )
    tier_rtt_ms: list[float] = Field(
        default_factory=lambda: [20.0, 45.0, 90.0, 180.0],
        description="latency tiers: metros route to the tier with the smallest bound ≥ their RTT",
    )
    resident_prefixes: float = Field(4, ge=0, description="shared prefixes each replica keeps cached")
    max_pool_replicas: int = Field(512, ge=8, description="largest pool the SLO capacity table covers")

    _fractions = field_validator(
        "prefill_mfu", "decode_mbu", "decode_mfu", "usable_hbm_fraction", "link_efficiency",
        "small_link_share", "nic_efficiency", "prefill_max_utilization", "decode_max_utilization", mode="before",
    )(lambda v: fraction_check(float(v), "") if isinstance(v, (int, float)) else v)

    @property
    def fixed_overhead_ms(self) -> float:
        return self.tokenization_ms + self.safety_ms + self.admission_ms

    @model_validator(mode="after")
    def _lists(self):
        if not self.tp_degrees or any(p < 1 for p in self.tp_degrees):
            raise ValueError("tp_degrees must list positive GPU counts, e.g. [1, 2, 4, 8]")
        if not self.modes:
            raise ValueError("modes must allow colocated, disaggregated or both")
        for name, factor in self.calibration_scale.items():
            if name not in PARAMETERS:
                raise ValueError(f"calibration_scale: {name!r} is not a calibrated parameter; known: "
                                 f"{', '.join(PARAMETERS)}")
            if not 0 < factor < float("inf"):
                raise ValueError(f"calibration_scale: the multiplier of {name} must be greater than 0 and finite; "
                                 f"got {factor}")
        tiers = list(self.tier_rtt_ms)
        if not tiers or sorted(set(tiers)) != tiers or tiers[0] <= 0:
            raise ValueError(f"tier_rtt_ms must be a non-empty increasing list of positive RTT bounds in ms, e.g. "
                             f"[20, 45, 90, 180]; got {self.tier_rtt_ms}")
        if any(b < 1 for b in self.prefill_batch_tokens):
            raise ValueError(f"prefill_batch_tokens must list positive token budgets, e.g. [2048, 8192], or be empty; "
                             f"got {self.prefill_batch_tokens}")
        if "colocated" in self.modes and (not self.colocated_chunk_tokens or min(self.colocated_chunk_tokens) < 1):
            raise ValueError(f"colocated_chunk_tokens must list positive token budgets, e.g. [256, 512, 1024]; "
                             f"got {self.colocated_chunk_tokens}")
        return self


class Policy(Strict):
    cold_start_minutes: float = Field(10.0, ge=0, description="time to bring an on-demand node into service")
    warm_pool_fraction: float = Field(0.1, ge=0, lt=1, description="share of on-demand nodes kept warm and idle")
    n_minus_1: bool = Field(False, description="survive the loss of any one site at the peak slice")
    resilience_ttft_factor: float = Field(1.5, ge=1, description="TTFT objective × this during a site loss")
    unserved_penalty_usd_per_million_tokens: float = Field(500.0, ge=0)
    reserved_terms: list[Literal[RESERVED_POLICY_KEYS]] = Field(default_factory=lambda: list(RESERVED_POLICY_KEYS))
    allow_ondemand: bool = True
    allow_owned: bool = False
    egress_usd_per_gb: float = Field(0.05, ge=0)
    egress_bytes_per_output_token: float = Field(150.0, ge=0, description="streamed response payload per token")
    k_nearest_sites: int = Field(4, ge=1, description="routing arcs per metro and workload")
    token_price_provider: str = Field(
        "reference", description="per-token price list (data/token_prices.csv) the plan's costs are compared with")
    time_limit_s: float | None = Field(None, gt=0, le=1e7,
                                       description="a wall-clock safety cap on the whole solve in seconds (at most ~116 "
                                                   "days; default: the effort's); a plan it stops may differ on "
                                                   "another machine")
    effort: Literal["first", "quick", "thorough"] = Field(
        "quick", description="the solve's work, counted so that the plan does not depend on the machine: first: the "
                             "first whole plan, improved by moves; quick: more moves and, where it fits, the exact "
                             "model (about a minute on the reference); thorough: more of both and slice programs")
    mip_gap: float = Field(0.005, gt=0, lt=1)
    threads: int | None = Field(None, ge=1, le=1024)

    _warm = field_validator("warm_pool_fraction", "mip_gap", mode="before")(fraction_before)


class Robust(Strict):
    """Margins `fleetplan plan --robust` plans with. The plan folder keeps the nominal
    scenario; its summary reports the margins and the price of robustness (the robust plan's
    cost over the nominal plan's). Efficiencies are derated by ``efficiency_derate``, or —
    when the scenario names a calibration file (``use_calibration_band`` unset), or always
    (set true) — by each accelerator's calibration band (`optimizer.calibration.band`)."""

    demand_factor: float = Field(1.25, ge=1, le=5, description="demand at a high percentile of its forecast, × the nominal")
    efficiency_derate: float = Field(0.85, gt=0, le=1, description="prefill MFU, decode MBU and decode MFU × this")
    rtt_margin_ms: float = Field(10.0, ge=0, description="added to every round trip and latency tier bound")
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
