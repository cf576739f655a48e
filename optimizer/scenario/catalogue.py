"""Catalogue rows: accelerators, models, prices, owned hardware, metros, sites, supply and
workloads — each a validated row whose fields carry units in their names."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model, field_validator, model_validator

from optimizer.contracts import TERMS
from optimizer.scenario.fields import Catalogued, fraction_check, latency_ms_check


class Accelerator(Catalogued):
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


class Model(Catalogued):
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


class PriceBase(Catalogued):
    provider: str
    gpu: str
    ondemand_usd_per_gpu_hour: float = Field(gt=0, le=1e4)


# one optional $/GPU-hour column per committed term priced by the catalogue (`optimizer.contracts`)
Price = create_model(
    "Price", __base__=PriceBase, __doc__="Prices of one accelerator from one provider, $/GPU-hour.",
    **{t.price_column: (float | None, Field(None, gt=0, le=1e4, description=f"{t.label}, $/GPU-hour"))
       for t in TERMS if t.price_column})


class Owned(Catalogued):
    """Hardware bought rather than rented: a node's capital and its depreciation life."""

    gpu: str
    capex_usd_per_node: float = Field(gt=0, le=1e9)
    life_years: float = Field(gt=0.1, le=100)


class Place(Catalogued):
    """A named point on the map."""

    id: str
    name: str
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)


class Metro(Place):
    country: str | None = None
    continent: str | None = None
    utc_offset_hours: float = Field(ge=-12, le=14)
    population: float = Field(ge=0, le=1e10, description="people (at most 1e10: more than live on Earth)")
    demand_weight: float | None = Field(None, ge=0, le=1e4, description="relative demand; default population in millions")

    @property
    def weight(self) -> float:
        return self.demand_weight if self.demand_weight is not None else self.population / 1e6


class Site(Place):
    metro: str
    region: str = Field(description="fault domain")
    power_mw: float = Field(gt=0, le=1e5, description="facility megawatts available to the fleet")
    pue: float = Field(ge=1.0, le=3.0)
    energy_usd_per_mwh: float = Field(ge=0, le=1e5)
    colo_usd_per_kw_month: float = Field(ge=0, le=1e5)
    price_multiplier: float = Field(1.0, gt=0, le=100)


class Supply(Catalogued):
    """How many nodes of an accelerator a site can commit to and rent at once."""

    site: str
    gpu: str
    reserved_nodes_max: int = Field(ge=0, le=1e7)
    ondemand_nodes_max: int = Field(ge=0, le=1e7)


class Workload(Catalogued):
    """A traffic class: its model and precision, its prompt and output lengths, its prompt
    cache, its latency objectives and its demand per million people at the daily peak."""

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
    peak_to_mean_intra_hour: float | None = Field(
        None, ge=1, le=20,
        description="this workload's pools are sized for the hour's mean × this factor (burstiness within the "
                    "hour, e.g. the busiest minute over the hour's mean); default: demand.peak_to_mean_intra_hour")
    rationale: str | None = None

    _frac = field_validator("prompt_cache_hit_rate")(lambda v: fraction_check(v, "prompt_cache_hit_rate"))
    _ms = field_validator("ttft_p99_ms", "itl_p99_ms")(lambda v: latency_ms_check(v))

    @field_validator("slo_attainment")
    @classmethod
    def _attainment(cls, v):
        fraction_check(v, "slo_attainment")
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
