"""What every exporter writes the same way: the slice a manifest stands for, the pool's
labels and annotations (how `import-deployment` finds a manifest's pool again), and vLLM's
engine arguments.

Annotations (prefix fleetplan.io/): config (the plan's config id), tier, speed (decode class),
accelerator, slice (PERIOD/DAY_TYPE/HOUR the replicas are of) and bounds (the site's
bounds.csv, the floor and ceiling of every hour). Labels: site and workload.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.units import Role
from optimizer.commands.export.bounds import bounds_at
from optimizer.commands.export.fleet import (
    ANNOTATION,
    GPU_RESOURCES,
    ExportedFleet,
    PoolKey,
    ServingPool,
    Slice,
    model_repo,
)

BOUNDS_FILE = "bounds.csv"


@dataclass
class ExportJob:
    """One export: the fleet, the slice whose replicas the manifests carry, the bounds."""

    fleet: ExportedFleet
    slice: Slice
    bounds: pd.DataFrame
    model_repos: dict[str, str] = field(default_factory=dict)
    infra: dict[str, str] = field(default_factory=dict)  # site → SkyPilot infra (cloud/region)
    strict: bool = False  # refuse, not warn, where a KV-transfer rule is broken
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self):
        self._at = bounds_at(self.bounds, self.slice)

    def replicas(self, p: ServingPool) -> int:
        return p.replicas.get(self.slice, 0)

    def floor(self, p: ServingPool) -> int:
        return self._at[p.key][0]

    def ceiling(self, p: ServingPool) -> int:
        return self._at[p.key][1]

    def repo(self, p: ServingPool) -> str:
        return model_repo(p.model, self.model_repos)

    def slice_text(self) -> str:
        return "/".join(str(x) for x in self.slice)


def labels(p: ServingPool) -> dict[str, str]:
    return {f"{ANNOTATION}site": p.site, f"{ANNOTATION}workload": p.workload}


def annotations(p: ServingPool, ctx: ExportJob) -> dict[str, str]:
    return {f"{ANNOTATION}config": p.config, f"{ANNOTATION}tier": str(p.tier), f"{ANNOTATION}speed": str(p.speed),
            f"{ANNOTATION}accelerator": p.gpu, f"{ANNOTATION}slice": ctx.slice_text(),
            f"{ANNOTATION}bounds": BOUNDS_FILE}


def gpu_resource(p: ServingPool, ctx: ExportJob) -> str:
    vendor = ctx.fleet.scenario.accelerators[p.gpu].vendor
    if vendor not in GPU_RESOURCES:
        raise ScenarioError(f"no Kubernetes GPU resource is known for vendor '{vendor}' of accelerator {p.gpu} "
                            f"(pool {p.config} at {p.site})", field="gpu")
    return GPU_RESOURCES[vendor]


# vLLM engine arguments (docs.vllm.ai, "Engine Arguments"; docs/features/speculative_decoding/mtp.md):
# --quantization of each weight format (fp8 quantises a bf16 checkpoint online; the 4-bit formats
# need a checkpoint quantised so: ModelOpt NVFP4, OCP MXFP4, AWQ), --kv-cache-dtype of each KV format
QUANTIZATION = {"fp8": "fp8", "nvfp4": "modelopt_fp4", "mxfp4": "mxfp4", "int4": "awq"}
KV_CACHE_DTYPE = {"fp8": "fp8"}
FLAG_VALUE = ("--tensor-parallel-size", "--data-parallel-size", "--quantization", "--kv-cache-dtype",
              "--speculative-config")


def parallel_args(p: ServingPool) -> list[str]:
    """TP, DP and expert parallelism of a replica (`fleet.engine`)."""
    args = ["--tensor-parallel-size", str(p.tp)]
    if p.dp > 1:
        args += ["--data-parallel-size", str(p.dp)]
    return args + (["--enable-expert-parallel"] if p.expert_parallel else [])


def precision_args(p: ServingPool, ctx: ExportJob) -> list[str]:
    """Weight and KV formats and speculative decoding of a replica; what vLLM cannot state is
    a warning naming the pool."""
    args = []
    if p.weight_dtype in QUANTIZATION:
        args += ["--quantization", QUANTIZATION[p.weight_dtype]]
        if p.weight_dtype not in ("fp8",):
            _warn(ctx, f"{p.site}/{p.config}: {p.weight_dtype} weights need a checkpoint quantised so "
                       f"(--model-repo {p.model}=ORG/NAME)")
    if p.kv_dtype in KV_CACHE_DTYPE:
        args += ["--kv-cache-dtype", KV_CACHE_DTYPE[p.kv_dtype]]
    elif p.kv_dtype != "bf16":
        _warn(ctx, f"{p.site}/{p.config}: vLLM has no {p.kv_dtype} KV cache; written as fp8, which holds fewer "
                   "sequences than the plan sized")
        args += ["--kv-cache-dtype", "fp8"]
    if p.speculative == "mtp":
        args += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": p.draft_tokens})]
    elif p.speculative:
        _warn(ctx, f"{p.site}/{p.config}: planned with speculative decoding by a draft model; the catalogue names no "
                   "draft model, so none is written")
    return args


def _warn(ctx: ExportJob, text: str) -> None:
    if text not in ctx.warnings:
        ctx.warnings.append(text)


def vllm_args(p: ServingPool, ctx: ExportJob) -> list[str]:
    """vLLM engine arguments of the pool's replicas: the model, its parallelism, precisions
    and speculation."""
    return ["--model", ctx.repo(p), *parallel_args(p), *precision_args(p, ctx)]


def engine_of(args: list[str], tp: int) -> dict:
    """What vLLM engine arguments say of a replica (``tp`` where they do not): TP, DP, expert
    parallelism, weight and KV formats, speculation — the inverse of `vllm_args`."""
    value = {f: str(args[args.index(f) + 1]) for f in FLAG_VALUE if f in args[:-1]}
    weights = {q: w for w, q in QUANTIZATION.items()}
    spec = json.loads(value["--speculative-config"]) if "--speculative-config" in value else {}
    return {"tp": int(value.get("--tensor-parallel-size", tp)), "dp": int(value.get("--data-parallel-size", 1)),
            "expert_parallel": "--enable-expert-parallel" in args,
            "weight_dtype": weights.get(value.get("--quantization"), "bf16"),
            "kv_dtype": "fp8" if value.get("--kv-cache-dtype", "auto").startswith("fp8") else "bf16",
            "speculative": "mtp" if spec.get("method") in ("mtp", "deepseek_mtp") else "",
            "draft_tokens": int(spec.get("num_speculative_tokens", 0))}


@dataclass(frozen=True)
class Running(PoolKey):
    """A pool as a manifest states it (what `import-deployment` reads)."""

    gpus_per_replica: int
    tp: int
    nodes: int
    replicas: int
    manifest: str
    dp: int = 1
    expert_parallel: bool = False
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    speculative: str = ""
    draft_tokens: int = 0


def role_of(meta: dict, default: str) -> str:
    """The role the annotated config names (its tag starts with it), else ``default``."""
    tag = str(meta.get(f"{ANNOTATION}config", "")).split("/")[-1]
    return next((str(r) for r in Role if tag.startswith(str(r))), default)


def pool_from(meta: dict, *, role: str, engine: dict, nodes: int, replicas: int, model: str, gpu: str | None,
              site: str | None, where: str) -> Running:
    """A Running pool from a manifest's native fields and its fleetplan annotations and labels
    (``meta``: both merged; ``engine``: `engine_of`, where a replica over several nodes without
    DP states TP per node). Without annotations (a manifest fleetplan did not write) the
    config id is made from the native fields: MODEL/ACCELERATOR/xGPUS/ROLE."""
    gpu = meta.get(f"{ANNOTATION}accelerator") or gpu
    site = meta.get(f"{ANNOTATION}site") or site
    if not gpu:
        raise ScenarioError("the accelerator is not stated (expected the node selector or annotation "
                            f"{ANNOTATION}accelerator)", Origin(where), field=f"{ANNOTATION}accelerator")
    tp, dp = engine["tp"], engine["dp"]
    gpus = tp * max(dp, nodes)
    config = meta.get(f"{ANNOTATION}config") or f"{model}/{gpu}/x{gpus}/{role}"
    parts = config.split("/")
    if len(parts) < 4 or parts[1] != gpu or parts[2] != f"x{gpus}" or not parts[3].startswith(role):
        raise ScenarioError(f"the manifest runs {role} replicas of {gpus} {gpu} GPUs but its annotation names config "
                            f"'{config}'; the manifest was edited after export?", Origin(where),
                            field=f"{ANNOTATION}config")
    return Running(site or "", meta.get(f"{ANNOTATION}workload") or parts[0], int(meta.get(f"{ANNOTATION}tier", -1)),
                   role, int(meta.get(f"{ANNOTATION}speed", -1)), gpu, config, gpus, tp, nodes, int(replicas), where,
                   dp, bool(engine["expert_parallel"]), engine["weight_dtype"], engine["kv_dtype"], engine["speculative"],
                   engine["draft_tokens"])
