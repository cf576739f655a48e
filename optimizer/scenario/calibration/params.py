"""The physical serving parameters, per (accelerator, engine, dtype), and how a plan finds
the set that applies to a replica.

A `Calibration` is a list of `ParameterSet` entries, the ones from a user's calibration file
first, then the shipped defaults (``data/serving_calibration.csv``). For an accelerator,
weight dtype and (optional) engine, `Calibration.lookup` takes the first source that has an
entry for the accelerator and, within it, the most specific entry ("*" matches anything):

    (acc, engine, dtype) > (acc, engine, *) > (acc, *, dtype) > (acc, *, *) > (*, *, dtype) > (*, *, *)

With no engine asked for, the first entry of the accelerator and dtype wins (file order).
The scenario's ``serving`` fields, where set, override the looked-up values for every
accelerator (`optimizer.serving.configs.efficiency`): scenario override > calibration file > shipped.

This module knows nothing of scenarios, so that the scenario layer can import it.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from optimizer.base.sources import shipped_data_dir

SHIPPED_FILE = shipped_data_dir() / "serving_calibration.csv"
# an engine release as engines number them: 1.3.0rc23, 0.5.16, 0.27.0, 25.04-trtllm
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){1,3}([A-Za-z0-9.+-]*[A-Za-z0-9])?$"
KINDS = ("prefill", "decode", "e2e")

# name → (lower bound, upper bound, value where nothing is known) — the bounds a fit keeps
# to; the neutral values are the pre-calibration global defaults
PARAMETERS = {
    "prefill_mfu": (0.05, 1.0, 0.45),
    "prefill_half_tokens": (0.0, 8192.0, 0.0),
    "decode_mbu": (0.05, 1.0, 0.75),
    "decode_mfu": (0.05, 1.0, 0.40),
    "step_overhead_ms": (0.0, 20.0, 1.5),
    "layer_overhead_us": (0.0, 200.0, 0.0),
    "collective_latency_us": (0.0, 200.0, 15.0),
    "link_efficiency": (0.05, 1.0, 0.7),
    "bulk_extra_latency_us": (0.0, 500.0, 0.0),
    "small_link_share": (0.02, 1.0, 1.0),
    "pcie_p2p_gpus": (1, 8, 8),
    "attention_factor": (0.25, 8.0, 1.0),
    "moe_load_factor": (1.0, 4.0, 1.0),
    "roofline_sharpness": (1.0, 50.0, 3.0),
}


class Spread(BaseModel):
    """Residual spread of one kind of point: |predicted / measured − 1| statistics and the
    signed median of ln(predicted / measured) (its bias), over ``points`` points."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    points: int = Field(ge=0, le=10_000_000)
    median_abs_error: float = Field(ge=0, le=100, description="accepted: 0 to 100 (a prediction 100× off)")
    p90_abs_error: float = Field(ge=0, le=100, description="accepted: 0 to 100 (a prediction 100× off)")
    median_log_ratio: float = Field(0.0, ge=-10, le=10, description="accepted: -10 to 10 (e^10 ≈ 22,000×)")


def _parameter(name: str):
    """A parameter of a set, within the range a fit keeps to (a calibration file is input
    too: a step overhead of 1e308 ms must stop where it is read)."""
    low, high, neutral = PARAMETERS[name]
    return Field(neutral, ge=low, le=high, description=f"accepted: {low:g} to {high:g}")


class ParameterSet(BaseModel):
    """One accelerator (× engine × weight dtype) worth of physical parameters, with the engine
    release they were fitted to (``engine_version``; empty where no one release stands behind
    them) — engine releases move a part's figures by tens of percent.

    prefill_mfu            η_max: compute efficiency of a large prefill pass
    prefill_half_tokens    s½: tokens in a pass at which prefill reaches η_max / 2,
                           η(s) = η_max · s / (s + s½)  (small GEMMs are inefficient)
    decode_mbu             HBM bandwidth efficiency of a decode step
    decode_mfu             compute efficiency of a compute-bound decode step
    step_overhead_ms       τ₀: fixed cost of one forward pass (scheduler, launches, sampling)
    layer_overhead_us      τ_L: fixed cost per layer of a pass (norms, activations, kernel
                           launches and synchronisation the roofline does not count)
    collective_latency_us  α: latency of one collective in the low-latency protocol
    link_efficiency        η: share of the scale-up (or NIC) bandwidth the bulk protocol reaches
    bulk_extra_latency_us  Δα: extra latency of the bulk protocol
    small_link_share       r: share of the bulk bandwidth the low-latency protocol reaches; a
                           collective takes min(α + b/(r·B·η), α + Δα + b/(B·η))
    pcie_p2p_gpus          GPUs that exchange data peer-to-peer under one PCIe switch (parts
                           without a scale-up fabric; larger replicas go through the host)
    attention_factor       κ: attention FLOPs and KV reads cost κ × their roofline time
                           (attention kernels run below the GEMMs' efficiency)
    moe_load_factor        λ: the routed-expert part of MoE compute × λ (expert imbalance)
    roofline_sharpness     q of the smooth maximum of memory and compute time
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    accelerator: str = "*"
    engine: str = "*"
    engine_version: str | None = Field(
        None, pattern=VERSION_PATTERN, description="the engine release the parameters were fitted to, e.g. 1.3.0rc23")
    dtype: str = "*"
    prefill_mfu: float = _parameter("prefill_mfu")
    prefill_half_tokens: float = _parameter("prefill_half_tokens")
    decode_mbu: float = _parameter("decode_mbu")
    decode_mfu: float = _parameter("decode_mfu")
    step_overhead_ms: float = _parameter("step_overhead_ms")
    layer_overhead_us: float = _parameter("layer_overhead_us")
    collective_latency_us: float = _parameter("collective_latency_us")
    link_efficiency: float = _parameter("link_efficiency")
    bulk_extra_latency_us: float = _parameter("bulk_extra_latency_us")
    small_link_share: float = _parameter("small_link_share")
    pcie_p2p_gpus: int = _parameter("pcie_p2p_gpus")
    attention_factor: float = _parameter("attention_factor")
    moe_load_factor: float = _parameter("moe_load_factor")
    roofline_sharpness: float = _parameter("roofline_sharpness")
    spread: dict[str, Spread] = Field(default_factory=dict, description="residual spread per kind of point")
    origin: str = Field("shipped", description="'shipped' or the calibration file it came from")
    source: str | None = None
    as_of: str | None = None
    fitted: list[str] = Field(default_factory=list, description="the parameters its rows identified and moved")
    kept: dict[str, str] = Field(default_factory=dict,
                                 description="the parameters kept at their starting values, and why")
    provenance: dict[str, str] = Field(default_factory=dict,
                                       description="where its rows' weight_dtype, kv_dtype, engine and version came from")

    def values(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in PARAMETERS}

    @property
    def key(self) -> str:
        return f"{self.accelerator}/{self.engine}/{self.dtype}"


def _match_rank(entry: ParameterSet, accelerator: str, engine: str | None, dtype: str) -> int | None:
    """Lower is more specific; None when the entry does not apply."""
    if entry.accelerator not in (accelerator, "*") or entry.dtype not in (dtype, "*"):
        return None
    if engine is not None and entry.engine not in (engine, "*"):
        return None
    return (entry.accelerator == "*") * 4 + (engine is not None and entry.engine == "*") * 2 + (entry.dtype == "*")


class CalibrationPoint(BaseModel):
    """One measured point a calibration file was fitted to (``split`` "fit") or scored on
    ("held-out"), with the latency its parameters predict — what the report's
    predicted-vs-measured plot and residual table are drawn from."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    table: str
    kind: Literal[KINDS]
    split: Literal["fit", "held-out"]
    accelerator: str
    engine: str = "*"
    dtype: str = "*"
    model: str = ""
    tp: int = Field(1, ge=1, le=1024)
    measured_ms: float = Field(gt=0, le=86_400_000)
    predicted_ms: float = Field(gt=0, le=86_400_000)


class Calibration(BaseModel):
    """Parameter sets in precedence order (a calibration file's, then the shipped ones); with
    a file, its measured points and residual table too."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    entries: list[ParameterSet] = Field(default_factory=list)
    file: str | None = Field(None, description="the calibration file a scenario named, if any")
    sha256: str | None = Field(None, description="sha256 of that file's content")
    points: list[CalibrationPoint] = Field(default_factory=list, description="the file's measured points")
    residuals: dict = Field(default_factory=dict, description="the file's residual table (fit and held out)")

    def lookup(self, accelerator: str, dtype: str, engine: str | None = None) -> ParameterSet:
        origins = list(dict.fromkeys(e.origin for e in self.entries))
        for origin in origins:
            ranked = [(r, i, e) for i, e in enumerate(self.entries)
                      if e.origin == origin and (r := _match_rank(e, accelerator, engine, dtype)) is not None]
            if ranked:
                return min(ranked, key=lambda x: (x[0], x[1]))[2]
        return ParameterSet()

    def fitted_at(self, accelerator: str, dtype: str) -> bool:
        """Whether some entry was fitted to ``accelerator`` at exactly ``dtype`` (no "*")."""
        return any(e.accelerator == accelerator and e.dtype == dtype for e in self.entries)


def _cell(value: str):
    return None if value is None or value.strip() == "" else value.strip()


@lru_cache(maxsize=4)
def _shipped_rows(path: Path, mtime: float) -> tuple[dict, ...]:
    with path.open(newline="") as f:
        return tuple({k: _cell(v) for k, v in row.items()} for row in csv.DictReader(f))


def shipped_rows(path: Path = SHIPPED_FILE) -> list[dict]:
    """The rows of ``data/serving_calibration.csv`` as plain dicts (empty cells dropped)."""
    if not path.is_file():
        return []
    return [{k: v for k, v in row.items() if v is not None} for row in _shipped_rows(path, path.stat().st_mtime)]


def entry_from_row(row: dict, origin: str = "shipped") -> ParameterSet:
    """A flat row (the shipped CSV's columns: parameters, ``<kind>_points``,
    ``<kind>_median_abs_error``, ``<kind>_p90_abs_error``, source, as_of) → a `ParameterSet`."""
    values = dict(row)
    spread = {}
    for kind in KINDS:
        stats = {k: values.pop(f"{kind}_{k}", None) for k in ("points", "median_abs_error", "p90_abs_error",
                                                               "median_log_ratio")}
        if stats["points"] is not None:
            spread[kind] = Spread(**{k: v for k, v in stats.items() if v is not None})
    return ParameterSet(**values, spread=spread, origin=origin)


def shipped_calibration() -> Calibration:
    return Calibration(entries=[entry_from_row(row) for row in shipped_rows()])
