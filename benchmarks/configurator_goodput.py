"""Goodput per GPU of a one-site plan, for comparison with an external configurator.

A configurator such as NVIDIA AIConfigurator answers "what is the best serving configuration
of this model on this GPU for these objectives", in output tokens/s per GPU. fleetplan's
answer to the same question is a plan: one metro, one site at that metro, one accelerator,
one workload with fixed prompt and output lengths at a fixed request rate, nothing else in
the way — no network round trip, no tokenisation, safety or admission time, no prompt cache,
no intra-hour burst. Its goodput per GPU is

    goodput output tokens/s at the peak / GPUs in the plan's replicas

(replicas' GPUs, not whole nodes: a configurator counts the GPUs of its configuration).
The objectives are the same numbers, but fleetplan reads them as p99s (TTFT and inter-token
gap, with its ITL tail factor), a configurator as the values of its static estimate.

The recorded configurator figures (``data/calibration/aiconfigurator_best.csv``) and the
comparison are in ``benchmarks/configurator_comparison.py``.
"""

from __future__ import annotations

import csv
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from optimizer.scenario.calibration.params import SHIPPED_FILE

RECORDED = SHIPPED_FILE.parent / "calibration" / "aiconfigurator_best.csv"


@dataclass(frozen=True)
class Case:
    """One comparison: a model at fixed lengths and objectives on one accelerator."""

    accelerator: str
    isl: int
    osl: int
    ttft_ms: float
    itl_ms: float
    model: str = "llama-3.1-70b"
    weight_dtype: str = "bf16"
    requests_per_s: float = 40.0

    @property
    def name(self) -> str:
        return f"{self.model} {self.weight_dtype} {self.isl}/{self.osl} TTFT {self.ttft_ms:g} ms ITL {self.itl_ms:g} ms " \
               f"on {self.accelerator}"


def scenario(case: Case) -> dict:
    """The one-site scenario of ``case`` (see the module docstring)."""
    workload = {
        "id": "probe", "model": case.model, "weight_dtype": case.weight_dtype, "kv_dtype": case.weight_dtype,
        "isl_mean_tokens": case.isl, "isl_p99_tokens": case.isl, "osl_mean_tokens": case.osl,
        "osl_p99_tokens": case.osl, "prompt_cache_hit_rate": 0.0, "shared_prefix_tokens": 0,
        "ttft_p99_ms": case.ttft_ms, "itl_p99_ms": case.itl_ms, "diurnal_profile": "flat",
        "peak_requests_per_s_per_million_people": 1, "source": "configurator comparison case", "as_of": "2026-12-03",
    }
    return {
        "name": "one-site",
        "horizon": {"periods": [{"id": "Y", "days": 365}], "hours": [12]},
        "accelerators": [case.accelerator],
        "metros": ["chicago"],
        "sites": ["chicago"],
        "workloads": {"rows": [workload]},
        "supply": {"rows": [{"site": "chicago", "gpu": case.accelerator, "reserved_nodes_max": 10_000,
                             "ondemand_nodes_max": 0}]},
        "demand": {"peak_to_mean_intra_hour": 1.0,
                   "table": [{"metro": "chicago", "workload": "probe", "period": "Y", "hour": 12,
                              "requests_per_s": case.requests_per_s}]},
        "network": {"access_rtt_ms": 0.0, "site_rtt_ms": 0.0},
        "serving": {"tokenization_ms": 0.0, "safety_ms": 0.0, "admission_ms": 0.0},
        "policy": {"allow_ondemand": False},
    }


def plan_goodput(case: Case, overrides: list[str] | None = None) -> dict:
    """Plan ``case``; its goodput per GPU and the pools that give it."""
    from optimizer.commands.pipeline import make_plan

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "one-site.yaml"
        path.write_text(yaml.safe_dump(scenario(case), sort_keys=False))
        plan = make_plan(path, overrides or [], allow_unserved=True)
    pools = plan.tables["pools"]
    gpus = float((pools["replicas"] * pools["gpus_per_replica"]).sum())
    goodput = float(plan.summary["goodput_tokens_per_s_peak"])
    shape = " + ".join(f"{row.role} tp{row.gpus_per_replica} ×{row.replicas:g}" for row in pools.itertuples())
    return {"goodput_tokens_per_s": goodput, "gpus": gpus, "tokens_per_s_per_gpu": goodput / gpus, "pools": shape,
            "mode": str(plan.tables["slo"]["mode"].iloc[0]), "status": plan.summary["status"]}


def recorded(path: Path = RECORDED) -> list[dict]:
    """The configurator's best configurations as recorded (one row per case)."""
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def case_of(row: dict) -> Case:
    return Case(accelerator=row["accelerator"], isl=int(row["isl"]), osl=int(row["osl"]),
                ttft_ms=float(row["ttft_ms"]), itl_ms=float(row["itl_ms"]), model=row["model"],
                weight_dtype=row["weight_dtype"], requests_per_s=float(row["fleetplan_requests_per_s"]))
