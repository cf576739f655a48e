"""A scenario: every input of a plan, typed and validated (pydantic).

A scenario is a YAML file. Each table (accelerators, models, prices, owned, metros, sites,
supply, workloads, diurnal) may be

* omitted — the shipped catalogue in ``data/`` is used;
* a list of ids — those rows of the catalogue;
* a CSV path (relative to the YAML) or a list of inline rows — used instead of the catalogue;
* a mapping ``{csv: PATH, ids: [...], rows: [...], patch: {id: {field: value}}}`` — a base
  (the CSV, else the catalogue), filtered to ``ids``, with ``rows`` added or replaced whole
  and ``patch`` merged field by field.

Loading goes in three steps, so that overrides and sweeps share one mechanism:
`load_raw` (files → plain, JSON-able data with the origin of every row), `apply_overrides`
(``--set`` dotted paths), `validate` (→ `Scenario`). Errors name the file, the row and the
field and say what was expected.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from optimizer.calibration.files import calibration_data
from optimizer.calibration.params import PARAMETERS, Calibration, shipped_calibration
from optimizer.errors import Origin, ScenarioError, unknown_id_message
from optimizer.sources import LineDict, Row, read_csv, read_yaml

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
REFERENCE_SCENARIO = DATA_DIR / "scenarios" / "reference.yaml"
HOURS_PER_DAY = 24
DAYS_PER_YEAR = 365


# --------------------------------------------------------------------------- field types


def _fraction_check(value: float, name: str) -> float:
    if 1.0 < value <= 100.0:
        raise ValueError(f"expected a fraction between 0 and 1; {value} looks like a percentage — write {value / 100:g}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a fraction between 0 and 1, got {value}")
    return value


def _fraction_before(value):
    """A 'before' validator: the percentage hint of `_fraction_check` ahead of the range check."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _fraction_check(float(value), "")
    return value


def _latency_ms_check(value: float) -> float:
    if 0 < value < 5:
        raise ValueError(
            f"expected milliseconds; {value} looks like seconds — write {value * 1000:g} for {value} s"
        )
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class _Catalogued(_Strict):
    """Provenance every shipped row carries: where the figures come from, and when."""

    source: str | None = Field(None, description="citation for the figures of this row")
    as_of: date | None = Field(None, description="date the source states for its figures")
    assumed_fields: str | None = Field(None, description="semicolon-separated fields whose values are assumptions")


# --------------------------------------------------------------------------- catalogue rows


class Accelerator(_Catalogued):
    id: str
    name: str
    vendor: str
    bf16_dense_tflops: float = Field(gt=0, le=1e6)
    fp8_dense_tflops: float | None = Field(None, gt=0, le=1e6, description="empty where FP8 is not supported")
    hbm_gb: float = Field(gt=0, le=1e4)
    hbm_tb_s: float = Field(gt=0, le=1e3)
    tdp_w: float = Field(gt=0, le=1e5)
    gpus_per_node: int = Field(gt=0, le=1024)
    node_kw: float = Field(gt=0, le=1e4, description="maximum IT power of one node")
    scaleup_domain_gpus: int = Field(gt=0, le=1e5)
    scaleup_gb_s: float = Field(gt=0, le=1e6, description="scale-up bandwidth per GPU, both directions")
    nic_gbps_per_gpu: float = Field(gt=0, le=1e6, description="scale-out NIC bandwidth per GPU, Gb/s")


class Model(_Catalogued):
    id: str
    name: str
    total_params_b: float = Field(gt=0, le=1e5)
    active_params_b: float = Field(gt=0, le=1e5)
    layers: int = Field(gt=0, le=1e4)
    hidden: int = Field(gt=0, le=1e6)
    heads: int = Field(gt=0, le=1e5)
    kv_heads: int = Field(gt=0, le=1e5)
    head_dim: int = Field(gt=0, le=1e5)
    attention: Literal["gqa", "mla"] = "gqa"
    kv_lora_rank: int | None = Field(None, gt=0, le=1e6)
    qk_rope_head_dim: int | None = Field(None, gt=0, le=1e5)
    experts: int | None = Field(None, gt=0, le=1e5)
    experts_per_token: int | None = Field(None, gt=0)
    vocab: int | None = Field(None, gt=0)
    max_context: int = Field(gt=0, le=1e9)

    @model_validator(mode="after")
    def _consistent(self):
        if self.active_params_b > self.total_params_b:
            raise ValueError("active_params_b cannot exceed total_params_b")
        if self.attention == "mla" and not (self.kv_lora_rank and self.qk_rope_head_dim):
            raise ValueError("attention 'mla' needs kv_lora_rank and qk_rope_head_dim")
        if (self.experts is None) != (self.experts_per_token is None):
            raise ValueError("give both experts and experts_per_token, or neither")
        if self.experts and self.experts_per_token >= self.experts:
            raise ValueError("experts_per_token must be smaller than experts")
        return self


class Price(_Catalogued):
    provider: str
    gpu: str
    ondemand_usd_per_gpu_hour: float = Field(gt=0, le=1e4)
    reserved_1y_usd_per_gpu_hour: float | None = Field(None, gt=0, le=1e4)
    reserved_3y_usd_per_gpu_hour: float | None = Field(None, gt=0, le=1e4)


class Owned(_Catalogued):
    gpu: str
    capex_usd_per_node: float = Field(gt=0, le=1e9)
    life_years: float = Field(gt=0.1, le=100)


class Metro(_Catalogued):
    id: str
    name: str
    country: str | None = None
    continent: str | None = None
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    utc_offset_hours: float = Field(ge=-12, le=14)
    population: float = Field(ge=0, le=1e10, description="people (at most 1e10: more than live on Earth)")
    demand_weight: float | None = Field(None, ge=0, le=1e4, description="relative demand; default population in millions")

    @property
    def weight(self) -> float:
        return self.demand_weight if self.demand_weight is not None else self.population / 1e6


class Site(_Catalogued):
    id: str
    name: str
    metro: str
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    region: str = Field(description="fault domain")
    power_mw: float = Field(gt=0, le=1e5, description="facility megawatts available to the fleet")
    pue: float = Field(ge=1.0, le=3.0)
    energy_usd_per_mwh: float = Field(ge=0, le=1e5)
    colo_usd_per_kw_month: float = Field(ge=0, le=1e5)
    price_multiplier: float = Field(1.0, gt=0, le=100)


class Supply(_Catalogued):
    site: str
    gpu: str
    reserved_nodes_max: int = Field(ge=0, le=1e7)
    ondemand_nodes_max: int = Field(ge=0, le=1e7)


class Workload(_Catalogued):
    id: str
    model: str
    weight_dtype: Literal["bf16", "fp8"] = "bf16"
    kv_dtype: Literal["bf16", "fp8"] = "bf16"
    isl_mean_tokens: float = Field(gt=0)
    isl_p99_tokens: float = Field(gt=0)
    osl_mean_tokens: float = Field(gt=0)
    osl_p99_tokens: float = Field(gt=0)
    prompt_cache_hit_rate: float = 0.0
    shared_prefix_tokens: float = Field(0.0, ge=0)
    ttft_p99_ms: float = Field(gt=0, le=8.64e7, description="at most a day")
    itl_p99_ms: float = Field(gt=0, le=6e4, description="at most a minute")
    slo_attainment: float = Field(0.99, description="fraction of requests that must meet both objectives")
    diurnal_profile: str = "consumer"
    peak_requests_per_s_per_million_people: float = Field(ge=0, le=1e6)
    rationale: str | None = None

    _frac = field_validator("prompt_cache_hit_rate")(lambda v: _fraction_check(v, "prompt_cache_hit_rate"))
    _ms = field_validator("ttft_p99_ms", "itl_p99_ms")(lambda v: _latency_ms_check(v))

    @field_validator("slo_attainment")
    @classmethod
    def _attainment(cls, v):
        _fraction_check(v, "slo_attainment")
        if not 0.5 <= v < 1.0:
            raise ValueError(f"expected a fraction in [0.5, 1), e.g. 0.99 for p99; got {v}")
        return v

    @model_validator(mode="after")
    def _lengths(self):
        from optimizer.curves.lengths import MAX_P99_OVER_MEAN

        for name in ("isl", "osl"):
            mean = getattr(self, f"{name}_mean_tokens")
            p99 = getattr(self, f"{name}_p99_tokens")
            if p99 < mean:
                raise ValueError(f"{name}_p99_tokens ({p99:g}) must be at least {name}_mean_tokens ({mean:g})")
            if p99 > MAX_P99_OVER_MEAN * mean:
                raise ValueError(
                    f"{name}_p99_tokens is more than {MAX_P99_OVER_MEAN:.1f}× the mean; "
                    "a lognormal length cannot have so heavy a tail"
                )
        return self


# --------------------------------------------------------------------------- sections


class Period(_Strict):
    id: str
    days: float = Field(gt=0)


class DayType(_Strict):
    id: str
    share: float = Field(gt=0, le=1, description="share of the period's days of this type")
    demand_multiplier: float = Field(1.0, ge=0, le=100)

    _share = field_validator("share", mode="before")(_fraction_before)


def _quarters() -> list[Period]:
    return [Period(id="Q1", days=90), Period(id="Q2", days=91), Period(id="Q3", days=92), Period(id="Q4", days=92)]


class Horizon(_Strict):
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


class DemandRow(_Strict):
    metro: str
    workload: str
    period: str
    hour: int = Field(ge=0, le=23, description="UTC hour")
    requests_per_s: float = Field(ge=0, le=1e9)
    day_type: str | None = None


class MixRow(_Strict):
    metro: str
    workload: str
    multiplier: float = Field(ge=0, le=1e6)


class Demand(_Strict):
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


class NetworkSpec(_Strict):
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


class Speculative(_Strict):
    enabled: bool = True
    draft_tokens: int = Field(3, ge=1, le=16)
    acceptance_rate: float = Field(0.7, ge=0, le=1)
    draft_cost_ratio: float = Field(0.1, gt=0, lt=1, description="draft step time / target step time")

    _fractions = field_validator("acceptance_rate", "draft_cost_ratio", mode="before")(_fraction_before)


class Serving(_Strict):
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
    )(lambda v: _fraction_check(float(v), "") if isinstance(v, (int, float)) else v)

    @property
    def fixed_overhead_ms(self) -> float:
        return self.tokenization_ms + self.safety_ms + self.admission_ms

    @model_validator(mode="after")
    def _lists(self):
        if not self.tp_degrees or any(p < 1 for p in self.tp_degrees):
            raise ValueError("tp_degrees must list positive GPU counts, e.g. [1, 2, 4, 8]")
        if not self.modes:
            raise ValueError("modes must allow colocated, disaggregated or both")
        tiers = list(self.tier_rtt_ms)
        if not tiers or sorted(set(tiers)) != tiers or tiers[0] <= 0:
            raise ValueError(f"tier_rtt_ms must be a non-empty increasing list of positive RTT bounds in ms, e.g. "
                             f"[20, 45, 90, 180]; got {self.tier_rtt_ms}")
        if "colocated" in self.modes and (not self.colocated_chunk_tokens or min(self.colocated_chunk_tokens) < 1):
            raise ValueError(f"colocated_chunk_tokens must list positive token budgets, e.g. [256, 512, 1024]; "
                             f"got {self.colocated_chunk_tokens}")
        return self


class Policy(_Strict):
    cold_start_minutes: float = Field(10.0, ge=0, description="time to bring an on-demand node into service")
    warm_pool_fraction: float = Field(0.1, ge=0, lt=1, description="share of on-demand nodes kept warm and idle")
    n_minus_1: bool = Field(False, description="survive the loss of any one site at the peak slice")
    resilience_ttft_factor: float = Field(1.5, ge=1, description="TTFT objective × this during a site loss")
    unserved_penalty_usd_per_million_tokens: float = Field(500.0, ge=0)
    reserved_terms: list[Literal["1y", "3y"]] = Field(default_factory=lambda: ["1y", "3y"])
    allow_ondemand: bool = True
    allow_owned: bool = False
    egress_usd_per_gb: float = Field(0.05, ge=0)
    egress_bytes_per_output_token: float = Field(150.0, ge=0, description="streamed response payload per token")
    k_nearest_sites: int = Field(4, ge=1, description="routing arcs per metro and workload")
    token_price_provider: str = Field(
        "reference", description="per-token price list (data/token_prices.csv) the plan's costs are compared with")
    time_limit_s: float = Field(60.0, gt=0)
    mip_gap: float = Field(0.005, gt=0, lt=1)
    threads: int | None = Field(None, ge=1)

    _warm = field_validator("warm_pool_fraction", "mip_gap", mode="before")(_fraction_before)


class Robust(_Strict):
    """Margins `fleetplan plan --robust` plans with. The plan folder keeps the nominal
    scenario; its summary reports the margins and the price of robustness (the robust plan's
    cost over the nominal plan's)."""

    demand_factor: float = Field(1.25, ge=1, le=5, description="demand at a high percentile of its forecast, × the nominal")
    efficiency_derate: float = Field(0.85, gt=0, le=1, description="prefill MFU, decode MBU and decode MFU × this")
    rtt_margin_ms: float = Field(10.0, ge=0, description="added to every round trip and latency tier bound")

    def overrides(self, s: "Scenario") -> list[str]:
        """The margins as `--set` overrides on the nominal scenario ``s``."""
        d = self.efficiency_derate
        return [
            f"demand.scale={s.demand.scale * self.demand_factor}",
            f"serving.prefill_mfu=×{d}",
            f"serving.decode_mbu=×{d}",
            f"serving.decode_mfu=×{d}",
            f"network.access_rtt_ms={s.network.access_rtt_ms + self.rtt_margin_ms}",
            # the tiers move with the round trips: a metro keeps its tier, whose pools give
            # the margin up from their queueing budget (else one just inside a bound would
            # fall into the next tier, sized for a far longer trip)
            f"serving.tier_rtt_ms={[b + self.rtt_margin_ms for b in s.serving.tier_rtt_ms]}",
        ]


class Scenario(_Strict):
    name: str
    description: str = ""
    horizon: Horizon
    accelerators: dict[str, Accelerator]
    models: dict[str, Model]
    price_provider: str
    prices: dict[str, Price]
    owned: dict[str, Owned]
    metros: dict[str, Metro]
    sites: dict[str, Site]
    supply: dict[str, dict[str, Supply]]
    workloads: dict[str, Workload]
    diurnal: dict[str, list[float]]
    demand: Demand
    network: NetworkSpec
    serving: Serving
    policy: Policy
    robust: Robust = Field(default_factory=Robust)


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableSpec:
    """How one catalogue table is read and keyed."""

    name: str
    file: str
    model: type[BaseModel]
    key: tuple[str, ...]

    def label(self, values: dict) -> str:
        return f"{self.name} " + "/".join(f"'{values.get(k)}'" for k in self.key)


TABLES = {
    "accelerators": TableSpec("accelerators", "accelerators.csv", Accelerator, ("id",)),
    "models": TableSpec("models", "models.csv", Model, ("id",)),
    "prices": TableSpec("prices", "prices.csv", Price, ("provider", "gpu")),
    "owned": TableSpec("owned", "owned.csv", Owned, ("gpu",)),
    "metros": TableSpec("metros", "metros.csv", Metro, ("id",)),
    "sites": TableSpec("sites", "sites.csv", Site, ("id",)),
    "supply": TableSpec("supply", "supply.csv", Supply, ("site", "gpu")),
    "workloads": TableSpec("workloads", "workloads.csv", Workload, ("id",)),
}
DIURNAL_FILE = "diurnal.csv"
SECTIONS = {"horizon": Horizon, "demand": Demand, "network": NetworkSpec, "serving": Serving, "policy": Policy,
            "robust": Robust}
TOP_LEVEL = {"name", "description", "catalogue", "calibration", *TABLES, "diurnal", *SECTIONS}


def _fields(model: type[BaseModel]) -> tuple[list[str], list[str]]:
    required = [n for n, f in model.model_fields.items() if f.is_required()]
    optional = [n for n in model.model_fields if n not in required]
    return required, optional


@dataclass
class RawScenario:
    """A scenario resolved to plain data (tables keyed by id) plus where each row came from."""

    data: dict
    origins: dict[tuple, Origin]
    path: Path
    warnings: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)

    def origin(self, *key) -> Origin:
        for n in range(len(key), 0, -1):
            if key[:n] in self.origins:
                return self.origins[key[:n]]
        return Origin(str(self.path))

    def canonical_json(self) -> str:
        return json.dumps(self.data, sort_keys=True, separators=(",", ":"), default=str)

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def _read_table_csv(spec: TableSpec, path: Path, warnings: list[str]) -> list[Row]:
    required, optional = _fields(spec.model)
    table = read_csv(path, required, optional)
    warnings.extend(table.warnings)
    defaulted = {n for n in optional if spec.model.model_fields[n].default is not None}
    for row in table.rows:
        # an empty cell of a field with a default takes the default (price_multiplier 1, …)
        row.values = {k: v for k, v in row.values.items() if v is not None or k not in defaulted}
        row.origin = Origin(row.origin.file, row.origin.line, spec.label(row.values))
    return table.rows


def _is_id(value) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _item_line(items, i: int) -> int | None:
    """Line of item ``i`` of a YAML list (else of the list)."""
    lines = getattr(items, "lines", [])
    return lines[i] if i < len(lines) else getattr(items, "line", None)


def _key_line(mapping, key) -> int | None:
    """Line of ``key`` in a YAML mapping (else of the mapping)."""
    return getattr(mapping, "key_lines", {}).get(key) or getattr(mapping, "line", None)


def _line(value, default=None):
    return getattr(value, "line", None) or default


def _inline_rows(spec: TableSpec, items, yaml_path: Path, where: str, line: int | None = None) -> list[Row]:
    if not isinstance(items, list):
        raise ScenarioError(f"{where} should be a list of rows (mappings of fields), got {items!r}",
                            Origin(str(yaml_path), _line(items, line)), field=where)
    rows = []
    for i, item in enumerate(items):
        line = getattr(item, "line", None) or _item_line(items, i)
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}: row {i + 1} should be a mapping of fields, got {item!r}",
                                Origin(str(yaml_path), line))
        rows.append(Row(dict(item), Origin(str(yaml_path), line, spec.label(item))))
    return rows


def _resolve_table(spec: TableSpec, value, yaml_path: Path, catalogue: Path, warnings: list[str],
                   line: int | None = None) -> list[Row]:
    """Apply the table forms described in the module docstring; returns rows with origins."""
    base_dir = yaml_path.parent
    catalogue_file = catalogue / spec.file
    if value is None:
        return _read_table_csv(spec, catalogue_file, warnings)
    if isinstance(value, str):
        return _read_table_csv(spec, base_dir / value, warnings)
    if isinstance(value, list):
        if all(_is_id(v) for v in value):
            value = LineDict(ids=value)
            value.line = _line(value["ids"])
        elif any(_is_id(v) for v in value) or not any(isinstance(v, dict) for v in value):
            i, bad = next((i, v) for i, v in enumerate(value) if not _is_id(v))
            raise ScenarioError(
                f"'{spec.name}' should be a list of ids (names) or a list of rows (mappings of fields); "
                f"item {i + 1} is {bad!r}", Origin(str(yaml_path), _item_line(value, i) or line), field=spec.name)
        else:
            return _inline_rows(spec, value, yaml_path, spec.name)
    if not isinstance(value, dict):
        raise ScenarioError(
            f"'{spec.name}' should be a CSV path, a list of ids or rows, or a mapping with csv/ids/rows/patch; "
            f"got {value!r}", Origin(str(yaml_path), _line(value, line)), field=spec.name,
        )
    allowed = {"csv", "ids", "rows", "patch", "provider"} if spec.name == "prices" else {"csv", "ids", "rows", "patch"}
    for k in value:
        if k not in allowed:
            raise ScenarioError(
                f"unknown key '{k}' in table '{spec.name}' (expected {', '.join(sorted(allowed))})",
                Origin(str(yaml_path), _key_line(value, k)), field=spec.name,
            )
    for k, kinds, expected in (("csv", str, "a CSV path"), ("ids", list, "a list of ids"),
                               ("patch", dict, "a mapping id → {field: value}"), ("provider", str, "a provider name")):
        if k in value and not isinstance(value[k], kinds):
            raise ScenarioError(f"expected {expected}, got {value[k]!r}", Origin(str(yaml_path), _key_line(value, k)),
                                field=f"{spec.name}.{k}")
    rows = _read_table_csv(spec, base_dir / value["csv"] if "csv" in value else catalogue_file, warnings)
    if "ids" in value:
        for i in value["ids"]:
            if not _is_id(i):
                raise ScenarioError(f"expected a list of ids, found {i!r}", Origin(str(yaml_path), _line(value["ids"], value.line)),
                                    field=f"{spec.name}.ids")
        wanted = [str(i) for i in value["ids"]]
        present = {r.values.get(spec.key[0]) for r in rows}
        item_lines = getattr(value["ids"], "lines", [])
        for n, i in enumerate(wanted):
            if i not in present:
                line = item_lines[n] if n < len(item_lines) else getattr(value["ids"], "line", None) or value.line
                raise ScenarioError(
                    unknown_id_message(spec.name.rstrip("s"), i, present),
                    Origin(str(yaml_path), line),
                    field=f"{spec.name}.ids",
                )
        rows = [r for r in rows if r.values.get(spec.key[0]) in set(wanted)]
    if "rows" in value:
        extra = _inline_rows(spec, value["rows"], yaml_path, f"{spec.name}.rows", _line(value))
        keys = {tuple(r.values.get(k) for k in spec.key) for r in extra}
        rows = [r for r in rows if tuple(r.values.get(k) for k in spec.key) not in keys] + extra
    if "patch" in value:
        rows = _patch_rows(spec, rows, value["patch"], yaml_path, value.get("provider", "reference"))
    return rows


def _patch_rows(spec: TableSpec, rows: list[Row], patch, yaml_path: Path, provider: str = "reference") -> list[Row]:
    if spec.name == "prices":  # keyed by gpu: patch the chosen provider's row, not another's
        by_key = {r.values.get("gpu"): r for r in rows if r.values.get("provider") == provider}
    else:
        by_key = {r.values.get(spec.key[0]): r for r in rows}
    for key, fields in patch.items():
        if not isinstance(fields, dict):
            raise ScenarioError(f"the patch of '{key}' should be a mapping of fields to new values, got {fields!r}",
                                Origin(str(yaml_path), _key_line(patch, key)), field=f"{spec.name}.patch")
        if key not in by_key:
            raise ScenarioError(
                unknown_id_message(spec.name.rstrip("s"), key, by_key),
                Origin(str(yaml_path), getattr(patch, "line", None)),
                field=f"{spec.name}.patch",
            )
        row = by_key[key]
        row.values = {**row.values, **dict(fields)}
        row.origin = Origin(str(yaml_path), getattr(fields, "line", None), spec.label(row.values) + " (patched)")
    return rows


def _key_rows(spec: TableSpec, rows: list[Row], origins: dict) -> dict:
    """Rows → nested dict keyed by the table key; a duplicate key is an error."""
    out: dict = {}
    for row in rows:
        key = tuple(row.values.get(k) for k in spec.key)
        if any(k is None or k == "" for k in key):
            raise ScenarioError(f"missing key {'/'.join(spec.key)}", row.origin, field=spec.key[0])
        key = tuple(str(k) for k in key)
        path = (spec.name, *key) if spec.name != "prices" else ("prices", key[1])
        if path in origins and origins[path] is not row.origin:
            raise ScenarioError(
                f"duplicate {'/'.join(spec.key)} {'/'.join(key)} (first at {origins[path].describe()})",
                row.origin,
                field=spec.key[0],
            )
        origins[path] = row.origin
        node = out
        for k in path[1:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = dict(row.values)
    return _sorted_by_key(out)


def _sorted_by_key(tree: dict) -> dict:
    """Tables keyed in sorted order (a row, whose values are not mappings, is left as it is),
    so that the order rows were written in never changes a plan."""
    if tree and all(isinstance(v, dict) for v in tree.values()):
        return {k: _sorted_by_key(v) for k, v in sorted(tree.items())}
    return tree


def _read_diurnal(value, yaml_path: Path, catalogue: Path, origins: dict, warnings: list[str],
                  line: int | None = None) -> dict:
    """Diurnal profiles: CSV (profile, hour, multiplier) or a mapping profile → 24 values."""
    if isinstance(value, dict):
        for name, values in value.items():
            origin = Origin(str(yaml_path), _line(values, _key_line(value, name)), f"profile '{name}'")
            if not isinstance(values, list):
                raise ScenarioError(f"expected a list of 24 hourly multipliers, got {values!r}", origin)
            origins[("diurnal", str(name))] = origin
        return {str(k): list(v) for k, v in value.items()}
    if value is not None and not isinstance(value, str):
        raise ScenarioError("'diurnal' should be a CSV path (profile, hour, multiplier) or a mapping profile → "
                            f"24 multipliers, got {value!r}", Origin(str(yaml_path), _line(value, line)), field="diurnal")
    path = catalogue / DIURNAL_FILE if value is None else yaml_path.parent / value
    table = read_csv(path, ["profile", "hour", "multiplier"], ["source", "as_of", "assumed_fields"])
    warnings.extend(table.warnings)
    profiles: dict[str, list] = {}
    for row in table.rows:
        name = row.values["profile"]
        origins.setdefault(("diurnal", name), Origin(str(path), row.origin.line, f"profile '{name}'"))
        try:
            hour = int(row.values["hour"])
            mult = float(row.values["multiplier"])
        except (TypeError, ValueError):
            raise ScenarioError("expected an integer hour 0–23 and a number multiplier", row.origin) from None
        if not 0 <= hour <= 23 or not math.isfinite(mult) or mult < 0:
            raise ScenarioError(f"expected hour 0–23 and multiplier ≥ 0, got {hour}, {mult}", row.origin)
        if profiles.get(name, [None] * 24)[hour] is not None:
            raise ScenarioError(f"profile '{name}' gives hour {hour} twice; expected one row per hour",
                                row.origin, field="hour")
        profiles.setdefault(name, [None] * 24)[hour] = mult
    return profiles


def _read_rows_section(value, yaml_path: Path, name: str, warnings: list[str], line: int | None = None) -> list | None:
    """demand.table / demand.mix given as a CSV path or inline rows → list of dicts."""
    if value is None:
        return None
    if isinstance(value, str):
        model = DemandRow if name == "table" else MixRow
        required, optional = _fields(model)
        table = read_csv(yaml_path.parent / value, required, optional)
        warnings.extend(table.warnings)
        return [dict(r.values, _origin=r.origin) for r in table.rows]
    if isinstance(value, list):
        for i, v in enumerate(value):
            if not isinstance(v, dict):
                raise ScenarioError(f"demand.{name}: row {i + 1} should be a mapping of fields, got {v!r}",
                                    Origin(str(yaml_path), _item_line(value, i) or line), field=f"demand.{name}")
        return [dict(v, _origin=Origin(str(yaml_path), getattr(v, "line", None), f"demand.{name} row {i + 1}"))
                for i, v in enumerate(value)]
    raise ScenarioError(f"demand.{name} should be a CSV path or a list of rows, got {value!r}",
                        Origin(str(yaml_path), _line(value, line)), field=f"demand.{name}")


def load_raw(path: str | Path | None = None) -> RawScenario:
    """Read a scenario file (default: the embedded reference scenario) into plain data."""
    yaml_path = Path(path) if path else REFERENCE_SCENARIO
    doc = read_yaml(yaml_path)
    for key in doc:
        if key not in TOP_LEVEL:
            raise ScenarioError(
                unknown_id_message("scenario section", key, TOP_LEVEL), Origin(str(yaml_path), _key_line(doc, key))
            )
    catalogue = DATA_DIR
    if doc.get("catalogue"):
        catalogue = yaml_path.parent / str(doc["catalogue"])
        if not isinstance(doc["catalogue"], str) or not catalogue.is_dir():
            raise ScenarioError(f"expected a folder of catalogue CSVs (accelerators.csv, …) relative to the scenario; "
                                f"{catalogue} is not one", Origin(str(yaml_path), _key_line(doc, "catalogue")),
                                field="catalogue")
    warnings: list[str] = []
    origins: dict[tuple, Origin] = {}
    data: dict = {"name": str(doc.get("name") or yaml_path.stem), "description": str(doc.get("description") or "")}

    for name, spec in TABLES.items():
        rows = _resolve_table(spec, doc.get(name), yaml_path, catalogue, warnings, _key_line(doc, name))
        for row in rows:  # key fields are names: a list or a mapping there is a slip
            for k in spec.key:
                if row.values.get(k) is not None and not _is_id(row.values[k]):
                    raise ScenarioError(f"expected a name, got {row.values[k]!r}", row.origin, field=k)
        if name == "prices":
            provider = (doc.get("prices") or {}).get("provider", "reference") if isinstance(doc.get("prices"), dict) else "reference"
            provider = str(provider)
            providers = {r.values.get("provider") for r in rows}
            if provider not in providers:
                raise ScenarioError(unknown_id_message("price provider", provider, providers),
                                    Origin(str(yaml_path), getattr(doc.get("prices"), "line", None)), field="prices.provider")
            rows = [r for r in rows if r.values.get("provider") == provider]
            data["price_provider"] = provider
        data[name] = _key_rows(spec, rows, origins)
    data["diurnal"] = _read_diurnal(doc.get("diurnal"), yaml_path, catalogue, origins, warnings, _key_line(doc, "diurnal"))
    data["calibration"] = calibration_data(doc.get("calibration"), yaml_path, _key_line(doc, "calibration"))

    for name in SECTIONS:
        section = doc.get(name) or LineDict()
        if not isinstance(section, dict):
            raise ScenarioError(f"section '{name}' should be a mapping of fields, got {section!r}",
                                Origin(str(yaml_path), _key_line(doc, name)), field=name)
        origins[(name,)] = Origin(str(yaml_path), getattr(section, "line", None), f"section '{name}'")
        data[name] = _plain(section)
    graph = data["network"].get("graph")
    if isinstance(graph, str) and graph:
        # recorded absolute, so that a plan folder's scenario.json replans from anywhere
        data["network"]["graph"] = str((yaml_path.parent / graph).resolve())
    demand = doc.get("demand") or {}
    for part in ("table", "mix"):
        rows = _read_rows_section(demand.get(part), yaml_path, part, warnings, _key_line(demand, part))
        if rows is not None:
            # canonical order, so that the order rows were written in changes neither hash nor plan
            rows.sort(key=lambda r: json.dumps(_plain({k: v for k, v in r.items() if k != "_origin"}), sort_keys=True, default=str))
            for i, row in enumerate(rows):
                origins[("demand", part, i)] = row.pop("_origin")
            data["demand"][part] = [_plain(r) for r in rows]
    _select_dependent_rows(data, origins, catalogue, warnings)
    return RawScenario(data, origins, yaml_path, warnings)


def _select_dependent_rows(data: dict, origins: dict, catalogue: Path = DATA_DIR, warnings: list | None = None) -> None:
    """Keep supply and owned rows for the chosen sites and accelerators only. A row the planner
    wrote (not a catalogue row) that names no chosen site or accelerator is dropped with a
    warning: it is most often a typo."""
    sites, gpus = set(data["sites"]), set(data["accelerators"])
    if warnings is not None:
        for path, origin in sorted(origins.items(), key=lambda x: str(x[0])):
            if path[0] not in ("supply", "owned", "prices") or Path(origin.file).parent.resolve() == catalogue.resolve():
                continue
            refs = [("site", path[1], sites)] if path[0] == "supply" else []
            refs.append(("accelerator", path[-1], gpus))
            for kind, value, known in refs:
                if value not in known:
                    warnings.append(f"{origin.describe()}: {unknown_id_message(kind, value, known)} — the row is ignored")
                    break
    data["supply"] = {
        s: {g: row for g, row in per_gpu.items() if g in gpus} for s, per_gpu in data["supply"].items() if s in sites
    }
    data["owned"] = {g: row for g, row in data["owned"].items() if g in gpus}
    data["prices"] = {g: row for g, row in data["prices"].items() if g in gpus}


def _plain(value):
    """LineDict/LineList → dict/list, recursively (JSON-able data)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    return value


# --------------------------------------------------------------------------- overrides


def apply_overrides(raw: RawScenario, overrides: list[str]) -> RawScenario:
    """Return a copy with ``KEY=VALUE`` overrides applied. KEY is a dotted path into the
    scenario (``workloads.chat.ttft_p99_ms``, ``prices.h200-sxm.ondemand_usd_per_gpu_hour``,
    ``serving.decode_mbu``); VALUE is YAML (``500``, ``[1,2,4]``, ``true``) or a multiplier of
    the current value (``×1.5`` or ``x1.5``)."""
    out = RawScenario(copy.deepcopy(raw.data), dict(raw.origins), raw.path, list(raw.warnings), list(raw.overrides))
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"override '{item}' should look like KEY=VALUE", Origin("--set"))
        set_path(out, key.strip(), text.strip())
        out.overrides.append(f"{key.strip()}={text.strip()}")
    return out


def _submodel(model: type[BaseModel] | None, name: str) -> type[BaseModel] | None:
    if model is None or name not in model.model_fields:
        return None
    ann = model.model_fields[name].annotation
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def set_path(raw: RawScenario, key: str, text: str) -> None:
    """Set one dotted path in ``raw.data`` (see `apply_overrides`)."""
    parts = key.split(".")
    head = parts[0]
    if parts == ["calibration"]:  # a calibration file (relative to the working directory), read whole
        raw.data["calibration"] = calibration_data(text or None, Path.cwd() / "--set")
        return
    node = raw.data
    # the model of the node the last part is set in (none at the top level: raw data's keys)
    model: type[BaseModel] | None = SECTIONS.get(head) if len(parts) > 1 else None
    table_depth = (2 if head == "supply" else 1) if head in TABLES else None
    for depth, part in enumerate(parts[:-1]):
        if depth > 0 and model is not None:
            sub = _submodel(model, part)
            if sub is not None and part not in node:
                node[part] = {}
            model = sub
        if not isinstance(node, dict) or part not in node:
            known = node.keys() if isinstance(node, dict) else ()
            raise ScenarioError(unknown_id_message("key", part, known), Origin("--set"), field=key)
        node = node[part]
        if table_depth is not None and depth == table_depth:
            model = TABLES[head].model
    last = parts[-1]
    if not isinstance(node, dict):
        raise ScenarioError(f"'{'.'.join(parts[:-1])}' is a value, not a group of fields", Origin("--set"), field=key)
    known_fields = set(node) | set(model.model_fields if model else ())
    if last not in known_fields:
        raise ScenarioError(unknown_id_message("field", last, known_fields), Origin("--set"), field=key)
    if text[:1] in ("×", "x", "*") and _is_number(text[1:]):
        current = node.get(last)
        if current is None and model is Serving and last in PARAMETERS:
            scale = node.setdefault("calibration_scale", {})  # a calibrated value (per accelerator) is scaled
            scale[last] = float(scale.get(last, 1.0)) * float(text[1:])
            return
        if current is None and model is not None:
            current = model.model_fields[last].default
        try:
            node[last] = float(current) * float(text[1:])
        except (TypeError, ValueError):
            raise ScenarioError(f"cannot multiply the non-numeric value {current!r}", Origin("--set"), field=key) from None
    else:
        try:
            node[last] = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            node[last] = text
        _check_override_shape(parts, node[last], key)


def _check_override_shape(parts: list[str], value, key: str) -> None:
    """A table, a table row or a diurnal profile replaced whole must keep its shape."""
    head = parts[0]
    if head in TABLES:
        row_len = 3 if head == "supply" else 2
        if len(parts) < row_len:
            ok = isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())
            expected = "a mapping of rows (id → {field: value})"
        elif len(parts) == row_len:
            ok, expected = isinstance(value, dict), "a row, a mapping of fields"
        else:
            return
    elif head == "diurnal":
        if len(parts) == 1:
            ok = isinstance(value, dict) and all(isinstance(v, list) for v in value.values())
            expected = "a mapping profile → 24 multipliers"
        else:
            ok, expected = isinstance(value, list), "a list of 24 hourly multipliers"
    else:
        return
    if not ok:
        raise ScenarioError(f"expected {expected}, got {value!r}; to change one value, name it, e.g. "
                            "workloads.chat.ttft_p99_ms=500", Origin("--set"), field=key)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- validation


def _explain(err: dict) -> str:
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif msg.startswith("Input should be"):
        msg = "expected " + msg[len("Input should be "):]
    elif msg == "Field required":
        msg = "missing (this field is required)"
    elif msg.startswith("Extra inputs are not permitted"):
        msg = "not a known field"
    if "input" in err and not isinstance(err["input"], (dict, list)) and msg != "missing (this field is required)":
        got = repr(err["input"])
        got = got if len(got) <= 80 else got[:77] + "…"
        msg += "; got nothing (an empty cell or null)" if err["input"] is None else f"; got {got}"
    return msg


def _field_of(err: dict, model: type[BaseModel]) -> str | None:
    """The field an error is about: its location, or — for a check across fields (a model
    validator, whose location is empty) — the first field its message names."""
    loc = ".".join(str(p) for p in err["loc"])
    if loc:
        return loc
    for word in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", err["msg"]):
        if word in model.model_fields:
            return word
    return None


def _validate_row(model: type[BaseModel], values: dict, origin: Origin):
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = _field_of(err, model)
        if err["msg"].startswith("Extra inputs"):
            msg = unknown_id_message("field", err["loc"][-1], model.model_fields)
            raise ScenarioError(msg, origin, field=loc) from None
        raise ScenarioError(_explain(err), origin, field=loc) from None


def validate(raw: RawScenario) -> Scenario:
    """Validate every row and section, then the references between tables."""
    d = raw.data
    tables = {}
    for name, spec in TABLES.items():
        if name == "supply":
            tables[name] = {
                s: {g: _validate_row(Supply, row, raw.origin("supply", s, g)) for g, row in per.items()}
                for s, per in d["supply"].items()
            }
        else:
            tables[name] = {k: _validate_row(spec.model, row, raw.origin(name, k)) for k, row in d[name].items()}
    for name, spec in TABLES.items():  # a row's key fields are its place in the table (--set can break that)
        rows = [((s, g), r) for s, per in tables[name].items() for g, r in per.items()] if name == "supply" else \
            [((k,), r) for k, r in tables[name].items()]
        for key, row in rows:
            fields = spec.key[-len(key):]
            wrong = [f for f, k in zip(fields, key) if str(getattr(row, f)) != k]
            if wrong:
                raise ScenarioError(
                    f"this row is {name} '{'/'.join(key)}' but its {'/'.join(fields)} says "
                    f"'{'/'.join(str(getattr(row, f)) for f in fields)}'; expected them to agree (rename a row in "
                    "the file, not with --set)", raw.origin(name, *key), field=wrong[0])
    sections = {}
    for name, model in SECTIONS.items():
        values = d.get(name) or {}
        if name == "demand" and isinstance(values, dict):
            for part, row_model in (("table", DemandRow), ("mix", MixRow)):
                if isinstance(values.get(part), list):  # else the section's validation says what is wrong
                    for i, row in enumerate(values[part]):
                        _validate_row(row_model, row, raw.origin("demand", part, i))
        sections[name] = _validate_row(model, values, raw.origin(name))
    if "calibration" in (d.get("serving") or {}):
        raise ScenarioError("write the calibration file at the top level (calibration: FILE), not in serving",
                            raw.origin("serving"), field="serving.calibration")
    if d.get("calibration"):  # recorded content; a scenario.json from before calibrations has none
        sections["serving"] = sections["serving"].model_copy(update={"calibration": Calibration(**d["calibration"])})
    diurnal = _validate_diurnal(d["diurnal"], raw)
    try:
        scenario = Scenario(
            name=str(d["name"]),
            description=str(d.get("description") or ""),
            price_provider=d["price_provider"],
            diurnal=diurnal,
            **tables,
            **sections,
        )
    except ValidationError as exc:  # the top-level values an override can reach (price_provider, …)
        err = exc.errors()[0]
        raise ScenarioError(_explain(err), Origin(str(raw.path)), field=_field_of(err, Scenario)) from None
    _cross_check(scenario, raw)
    return scenario


def _validate_diurnal(profiles: dict, raw: RawScenario) -> dict[str, list[float]]:
    out = {}
    for name, values in profiles.items():
        origin = raw.origin("diurnal", name)
        if len(values) != 24 or any(v is None for v in values):
            missing = [h for h, v in enumerate(values) if v is None] if len(values) == 24 else None
            detail = f"hours {missing} are missing" if missing else f"found {len(values)} values"
            raise ScenarioError(f"a diurnal profile needs one multiplier per hour 0–23; {detail}", origin)
        try:
            values = [float(v) for v in values]
        except (TypeError, ValueError):
            bad = next(h for h, v in enumerate(values) if not _is_number(str(v)) or isinstance(v, (list, dict)))
            raise ScenarioError(f"expected a number for hour {bad}, got {values[bad]!r}", origin) from None
        if any(not math.isfinite(v) or v < 0 for v in values) or max(values) <= 0:
            raise ScenarioError("diurnal multipliers must be finite, ≥ 0 and not all zero", origin)
        top = max(values)
        out[name] = [v / top for v in values]
    return out


def _check_ref(kind: str, value: str, known, origin: Origin, field: str) -> None:
    if value not in known:
        raise ScenarioError(unknown_id_message(kind, value, known), origin, field=field)


def _cross_check(s: Scenario, raw: RawScenario) -> None:
    """References between tables, and inputs no plan could use."""
    if not s.metros:
        raise ScenarioError("the scenario has no metros (demand origins)", raw.origin("metros"))
    if not s.sites:
        raise ScenarioError("the scenario has no candidate sites", raw.origin("sites"))
    if not s.workloads:
        raise ScenarioError("the scenario has no workloads", raw.origin("workloads"))
    for sid, site in s.sites.items():
        _check_ref("metro", site.metro, s.metros, raw.origin("sites", sid), "metro")
    for sid, per in s.supply.items():
        _check_ref("site", sid, s.sites, raw.origin("supply", sid), "site")
        for gid in per:
            _check_ref("accelerator", gid, s.accelerators, raw.origin("supply", sid, gid), "gpu")
    for sid in s.sites:
        if not s.supply.get(sid):
            raise ScenarioError(
                f"site '{sid}' can supply none of the offered accelerators ({', '.join(sorted(s.accelerators))}); "
                "add supply rows for it or drop the site",
                raw.origin("sites", sid),
            )
    for gid in s.accelerators:
        if gid not in s.prices:
            raise ScenarioError(
                f"no price for offered accelerator '{gid}' from provider '{s.price_provider}'; add a prices row "
                f"(provider {s.price_provider}, gpu {gid}) or drop the accelerator",
                raw.origin("accelerators", gid),
                field="prices",
            )
    for wid, w in s.workloads.items():
        origin = raw.origin("workloads", wid)
        _check_ref("model", w.model, s.models, origin, "model")
        _check_ref("diurnal profile", w.diurnal_profile, s.diurnal, origin, "diurnal_profile")
        model = s.models[w.model]
        if w.isl_p99_tokens + w.osl_p99_tokens > model.max_context:
            raise ScenarioError(
                f"p99 prompt + output ({w.isl_p99_tokens + w.osl_p99_tokens:g} tokens) exceeds the context of "
                f"{w.model} ({model.max_context} tokens)", origin, field="isl_p99_tokens")
        if w.shared_prefix_tokens > w.isl_mean_tokens * 50:
            raise ScenarioError("shared_prefix_tokens is far longer than the prompts", origin, field="shared_prefix_tokens")
        if w.weight_dtype == "fp8" and not any(a.fp8_dense_tflops for a in s.accelerators.values()):
            raise ScenarioError("fp8 weights need an accelerator with FP8 support", origin, field="weight_dtype")
    periods = {p.id for p in s.horizon.periods}
    day_types = {d.id for d in s.horizon.day_types}
    seen: dict[tuple, int] = {}
    for i, mix in enumerate(s.demand.mix):
        origin = raw.origin("demand", "mix", i)
        _check_ref("metro", mix.metro, s.metros, origin, "metro")
        _check_ref("workload", mix.workload, s.workloads, origin, "workload")
        _check_unique(seen, ("mix", mix.metro, mix.workload), i, raw, "demand.mix", "metro/workload")
    for i, row in enumerate(s.demand.table or []):
        origin = raw.origin("demand", "table", i)
        _check_ref("metro", row.metro, s.metros, origin, "metro")
        _check_ref("workload", row.workload, s.workloads, origin, "workload")
        _check_ref("period", row.period, periods, origin, "period")
        if row.day_type is not None:
            _check_ref("day type", row.day_type, day_types, origin, "day_type")
        _check_unique(seen, ("table", row.metro, row.workload, row.period, row.hour, row.day_type), i, raw,
                      "demand.table", "metro/workload/period/hour/day_type")


def _check_unique(seen: dict, key: tuple, i: int, raw: RawScenario, where: str, fields: str) -> None:
    """Two demand rows for the same key would be added up (table) or one lost (mix): a slip."""
    part = where.split(".")[1]
    if key in seen:
        first = raw.origin("demand", part, seen[key])
        shown = "/".join("-" if k is None else str(k) for k in key[1:])
        raise ScenarioError(f"duplicate {where} row for {fields} {shown} (first at {first.describe()}); "
                            "expected one row per key", raw.origin("demand", part, i), field=fields.split("/")[0])
    seen[key] = i


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> tuple[Scenario, RawScenario]:
    """File → validated `Scenario`, with the resolved raw data (for hashing and recording)."""
    raw = load_raw(path)
    if overrides:
        raw = apply_overrides(raw, overrides)
    return validate(raw), raw
