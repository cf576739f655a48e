"""Catalogue rows: accelerators, models, prices, owned hardware, metros, sites, supply and
workloads — each a validated row whose fields carry units in their names."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model, field_validator, model_validator

from optimizer.base.contracts import TERMS
from optimizer.base.precision import KV_FORMATS, WEIGHT_FORMATS
from optimizer.scenario.fields import MAX_P99_OVER_MEAN, Catalogued, Strict, bounded, fraction_before, latency_ms_check

WeightFormat = Literal[WEIGHT_FORMATS]
KvFormat = Literal[KV_FORMATS]
MAX_PROMPT_SPLIT_CANDIDATES = 4  # each adds two workloads to the program that chooses


def split_cell(value):
    """A CSV cell of a list field: values separated by semicolons (commas also accepted)."""
    if isinstance(value, str):
        value = [v.strip() for v in value.replace(",", ";").split(";") if v.strip()] or None
    return value


class Accelerator(Catalogued):
    id: str
    name: str
    vendor: str
    bf16_dense_tflops: float = bounded(ge=1, le=100_000, unit="TFLOPS", why="a B200 is 2,250 dense")
    fp8_dense_tflops: float | None = bounded(None, ge=1, le=100_000, unit="TFLOPS",
                                             description="empty where FP8 is not supported", why="a B200 is 4,500 dense")
    hbm_gb: float = bounded(ge=1, le=10_000, unit="GB", why="the largest parts carry 288 GB")
    hbm_tb_s: float = bounded(ge=0.05, le=1000, unit="TB/s", why="HBM3e reaches 8 TB/s")
    tdp_w: float = bounded(ge=10, le=100_000, unit="W", why="a B200 draws 1,000 W")
    gpus_per_node: int = bounded(ge=1, le=1024, unit="GPUs")
    node_kw: float = bounded(ge=0.05, le=10_000, unit="kW", description="maximum IT power of one node",
                             why="a 72-GPU NVL72 rack draws ~120 kW")
    scaleup_domain_gpus: int = bounded(ge=1, le=100_000, unit="GPUs", description="GPUs on one NVLink-class fabric")
    scaleup_gb_s: float = bounded(ge=1, le=100_000, unit="GB/s", description="scale-up bandwidth per GPU, both directions",
                                  why="NVLink 5 is 1,800 GB/s")
    nic_gbps_per_gpu: float = bounded(ge=1, le=100_000, unit="Gb/s", description="scale-out NIC bandwidth per GPU",
                                      why="today's NICs run at 400–800 Gb/s")
    fp4_dense_tflops: float | None = bounded(None, ge=1, le=1_000_000, unit="TFLOPS",
                                             description="dense FP4 tensor rate; empty where the part has no FP4 "
                                                         "tensor cores (4-bit weights are then weight-only)",
                                             why="a B200 is 9,000 dense")
    weight_precisions: list[WeightFormat] | None = Field(
        None, description="weight formats engines serve on this part (semicolon separated in CSV); empty: bf16, and "
                          "fp8 where fp8_dense_tflops is given")
    liquid_cooling_required: bool = Field(False, description="a node cannot be air-cooled (direct liquid cooling)")
    node_is_rack: bool = Field(False, description="a node is a whole rack, bought, powered and rented as one unit "
                                                  "(GB200/GB300 NVL72: 72 GPUs)")

    _split = field_validator("weight_precisions", mode="before")(split_cell)

    @property
    def precisions(self) -> tuple[str, ...]:
        """The weight formats this part serves (`weight_precisions`, or its default)."""
        if self.weight_precisions:
            return tuple(self.weight_precisions)
        return ("bf16", "fp8") if self.fp8_dense_tflops else ("bf16",)

    def kv_precisions(self) -> tuple[str, ...]:
        """KV formats: bf16 and fp8 on every part (FP8 KV is stored, not computed in), NVFP4
        where the part serves NVFP4 natively (TensorRT-LLM's NVFP4 KV is Blackwell-only)."""
        native_nvfp4 = "nvfp4" in self.precisions and self.fp4_dense_tflops is not None
        return ("bf16", "fp8", "nvfp4") if native_nvfp4 else ("bf16", "fp8")


class Model(Catalogued):
    id: str
    name: str
    total_params_b: float = bounded(ge=0.001, le=100_000, unit="billion parameters")
    active_params_b: float = bounded(ge=0.001, le=100_000, unit="billion parameters")
    layers: int = bounded(ge=1, le=10_000)
    hidden: int = bounded(ge=1, le=1_000_000)
    heads: int = bounded(ge=1, le=100_000)
    kv_heads: int = bounded(ge=1, le=100_000)
    head_dim: int = bounded(ge=1, le=100_000)
    attention: Literal["gqa", "mla"] = "gqa"
    kv_lora_rank: int | None = bounded(None, ge=1, le=1_000_000)
    qk_rope_head_dim: int | None = bounded(None, ge=1, le=100_000)
    experts: int | None = bounded(None, ge=1, le=100_000)
    experts_per_token: int | None = bounded(None, ge=1, le=100_000)
    vocab: int | None = bounded(None, ge=1, le=100_000_000, unit="tokens")
    max_context: int = bounded(ge=1, le=1_000_000_000, unit="tokens")

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
    ondemand_usd_per_gpu_hour: float = bounded(ge=0.001, le=10_000, unit="US$/GPU-hour",
                                               why="list prices run from ~$0.40 to ~$13")


# one optional $/GPU-hour column per committed term priced by the catalogue (`optimizer.base.contracts`)
Price = create_model(
    "Price", __base__=PriceBase, __doc__="Prices of one accelerator from one provider, $/GPU-hour.",
    **{t.price_column: (float | None, bounded(None, ge=0.001, le=10_000, unit="US$/GPU-hour",
                                             description=t.label, why="list prices run from ~$0.40 to ~$13"))
       for t in TERMS if t.price_column})


class Owned(Catalogued):
    """Hardware bought rather than rented: a node's capital and its depreciation life."""

    gpu: str
    capex_usd_per_node: float = bounded(ge=100, le=1e9, unit="US$", why="an 8-GPU H100 node is ~$300,000")
    life_years: float = bounded(ge=0.25, le=30, unit="years", why="hyperscalers depreciate servers over 4–6 years")


class Place(Catalogued):
    """A named point on the map."""

    id: str
    name: str
    lat: float = bounded(ge=-90, le=90, unit="degrees")
    lon: float = bounded(ge=-180, le=180, unit="degrees")


class Metro(Place):
    country: str | None = None
    continent: str | None = None
    utc_offset_hours: float = bounded(ge=-12, le=14, unit="hours", why="the world's time zones")
    population: float = bounded(ge=0, le=1e10, unit="people", why="more than live on Earth")
    demand_weight: float | None = bounded(None, ge=0, le=1e4, description="relative demand; default population in millions")

    @property
    def weight(self) -> float:
        return self.demand_weight if self.demand_weight is not None else self.population / 1e6


class Site(Place):
    metro: str
    region: str = Field(description="fault domain")
    power_mw: float = bounded(ge=0.01, le=10_000, unit="MW", description="facility megawatts available to the fleet",
                              why="the largest campuses plan a few GW")
    pue: float = bounded(ge=1.0, le=3.0, why="no facility uses less than its IT load; the average is ~1.56")
    energy_usd_per_mwh: float = bounded(ge=0, le=10_000, unit="US$/MWh", why="market price caps are ~$5,000")
    colo_usd_per_kw_month: float = bounded(ge=0, le=10_000, unit="US$/kW-month", why="primary markets ask $120–450")
    price_multiplier: float = bounded(1.0, ge=0.01, le=100, description="this site's GPU prices × this")
    rack_kw_max: float = bounded(40.0, ge=1, le=10_000, unit="kW per rack",
                                 description="IT power one rack position can take; default 40 (assumed: the limit "
                                             "of air halls with rear-door heat exchangers)",
                                 why="air-cooled halls run 10–40 kW, liquid-cooled AI halls 120–200 kW")
    liquid_cooling: bool = Field(False, description="direct liquid cooling to the rack; default no (assumed)")

    def hosts(self, a: "Accelerator") -> str | None:
        """Why this site cannot host one node of ``a`` (its power and cooling), None if it can."""
        unit = f"one {a.id} node{' (a rack of ' + str(a.gpus_per_node) + ' GPUs)' if a.node_is_rack else ''}"
        if a.node_kw > self.rack_kw_max:
            return (f"{unit} draws {a.node_kw:g} kW but site '{self.id}' takes at most {self.rack_kw_max:g} kW per "
                    "rack (rack_kw_max)")
        if a.liquid_cooling_required and not self.liquid_cooling:
            return f"{unit} needs direct liquid cooling, which site '{self.id}' lacks (liquid_cooling)"
        return None


class GridCarbon(Catalogued):
    """A site's grid: its carbon intensity (gCO2eq per kWh drawn) as the annual mean and —
    where a public hourly series exists — its mean by hour of day in the local standard time of
    the site's metro (hour 0 first), which the plan scales to the annual mean."""

    site: str
    grid_zone: str | None = None
    gco2_per_kwh: float = bounded(ge=0, le=2000, unit="gCO2eq/kWh",
                                  why="lignite plants emit ~1,100 per kWh; no grid averages above ~900")
    hourly_gco2_per_kwh: list[float] | None = bounded(
        None, ge=0, le=2000, unit="gCO2eq/kWh", each=True,
        description="24 values, local standard time, hour 0 first (semicolon separated in CSV); empty: the annual "
                    "value every hour", why="lignite plants emit ~1,100 per kWh")
    basis: str | None = Field(None, description="lifecycle or direct; consumption- or production-based; the year")

    @field_validator("hourly_gco2_per_kwh", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):  # a CSV cell: values separated by semicolons
            value = [v for v in value.replace(",", ";").split(";") if v.strip()] or None
        return value

    @field_validator("hourly_gco2_per_kwh")
    @classmethod
    def _a_day(cls, value):
        if value is not None and len(value) != 24:  # after each value's range is checked (`Strict`)
            raise ValueError(f"expected 24 hourly values (hour 0 first), got {len(value)}")
        return value


class Supply(Catalogued):
    """How many nodes of an accelerator a site can commit to and rent at once."""

    site: str
    gpu: str
    reserved_nodes_max: int = bounded(ge=0, le=1_000_000, unit="nodes")
    ondemand_nodes_max: int = bounded(ge=0, le=1_000_000, unit="nodes")


class PromptPart(Strict):
    """Set by the plan (`optimizer.instance.prompt_split`), never written by hand: this workload
    is the part of ``parent`` whose prompts are from_tokens ≤ length < below_tokens (None: no
    upper end), ``share`` of its requests; its lengths are the parent's lognormal conditioned
    on that range (`optimizer.curves.lengths.LengthDistribution.part`)."""

    parent: str
    from_tokens: float = bounded(ge=0, le=10_000_000, unit="tokens", why="the longest context windows")
    below_tokens: float | None = bounded(None, ge=1, le=10_000_000, unit="tokens", why="the longest context windows")
    share: float = bounded(gt=0, le=1, description="the part's share of the parent's requests")
    parent_isl_mean_tokens: float = bounded(ge=1, le=10_000_000, unit="tokens", why="the longest context windows")
    parent_isl_p99_tokens: float = bounded(ge=1, le=10_000_000, unit="tokens", why="the longest context windows")


class Workload(Catalogued):
    """A traffic class: its model and precision, its prompt and output lengths, its prompt
    cache, its latency objectives and its demand per million people at the daily peak."""

    id: str
    model: str
    weight_dtype: WeightFormat = "bf16"
    kv_dtype: KvFormat = "bf16"
    accepted_precisions: list[str] | None = Field(
        None, description="weight/KV precision pairs the workload may be served at, e.g. fp8/fp8;nvfp4/fp8 (semicolon "
                          "separated in CSV); the plan picks among them; default: weight_dtype/kv_dtype only")
    isl_mean_tokens: float = bounded(ge=1, le=10_000_000, unit="tokens", why="the longest context windows")
    isl_p99_tokens: float = bounded(ge=1, le=10_000_000, unit="tokens", why="the longest context windows")
    osl_mean_tokens: float = bounded(ge=1, le=10_000_000, unit="tokens", why="the longest context windows")
    osl_p99_tokens: float = bounded(ge=1, le=10_000_000, unit="tokens", why="the longest context windows")
    prompt_cache_hit_rate: float = bounded(0.0, ge=0, le=1, description="share of prompts that hit the shared prefix")
    shared_prefix_tokens: float = bounded(0.0, ge=0, le=10_000_000, unit="tokens", why="the longest context windows")
    ttft_p99_ms: float = bounded(ge=5, le=8.64e7, unit="ms", why="at most a day; less than 5 is seconds written as ms")
    itl_p99_ms: float = bounded(ge=5, le=6e4, unit="ms", why="at most a minute; less than 5 is seconds written as ms")
    slo_attainment: float = bounded(0.99, ge=0.5, lt=1, description="fraction of requests that must meet both objectives",
                                    why="e.g. 0.99 for p99")
    diurnal_profile: str = "consumer"
    peak_requests_per_s_per_million_people: float = bounded(ge=0, le=1e6, unit="requests/s per million people")
    peak_to_mean_intra_hour: float | None = bounded(
        None, ge=1, le=20,
        description="this workload's pools are sized for the hour's mean × this factor (burstiness within the "
                    "hour, e.g. the busiest minute over the hour's mean); default: demand.peak_to_mean_intra_hour")
    spot_allowed: bool = Field(True, description="may run on spot nodes where the scenario offers them (the "
                               "planner's call); false: never")
    prompt_split_candidates_tokens: list[float] | None = bounded(
        None, gt=1, lt=10_000_000, each=True, unit="tokens", why="a prompt of one token cannot be split",
        description="prompt lengths at which the plan may split this workload into two pools of its own "
                    "(prompts below / at or above), e.g. 4096;16384 (semicolon separated in CSV); the plan picks one "
                    "or none")
    prompt_part: PromptPart | None = Field(None, description="set by the plan: a part of a workload split at a "
                                                             "prompt length")
    rationale: str | None = None

    _frac = field_validator("prompt_cache_hit_rate", "slo_attainment", mode="before")(fraction_before)
    _pairs = field_validator("accepted_precisions", "prompt_split_candidates_tokens", mode="before")(split_cell)

    @field_validator("prompt_split_candidates_tokens", mode="before")
    @classmethod
    def _one_threshold(cls, value):
        """A single number is a list of one (``--set …=16384``)."""
        return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("prompt_split_candidates_tokens")
    @classmethod
    def _thresholds(cls, value):
        if value is None:
            return None
        if len(value) > MAX_PROMPT_SPLIT_CANDIDATES:
            raise ValueError(f"at most {MAX_PROMPT_SPLIT_CANDIDATES} candidate thresholds (each adds two workloads "
                             f"to the program that chooses), got {len(value)}")
        if len(set(value)) != len(value):
            raise ValueError(f"expected distinct thresholds, got {value}")
        return sorted(value) or None

    @field_validator("accepted_precisions")
    @classmethod
    def _known_pairs(cls, value):
        for pair in value or []:
            weight, _, kv = pair.partition("/")
            if weight not in WEIGHT_FORMATS or kv not in KV_FORMATS:
                raise ValueError(f"expected WEIGHT/KV pairs with WEIGHT one of {', '.join(WEIGHT_FORMATS)} and KV one "
                                 f"of {', '.join(KV_FORMATS)}, got {pair!r}")
        return value

    @property
    def precisions(self) -> list[tuple[str, str]]:
        """The (weight, KV) precisions this workload accepts, its own first."""
        pairs = [(self.weight_dtype, self.kv_dtype)]
        for pair in self.accepted_precisions or []:
            weight, _, kv = pair.partition("/")
            if (weight, kv) not in pairs:
                pairs.append((weight, kv))
        return pairs
    _ms = field_validator("ttft_p99_ms", "itl_p99_ms", mode="before")(latency_ms_check)

    @model_validator(mode="after")
    def _lengths(self):
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
