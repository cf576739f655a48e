"""What every exporter writes the same way: the slice a manifest stands for, the pool's
labels and annotations (how `import-deployment` finds a manifest's pool again), and vLLM's
engine arguments.

Annotations (prefix fleetplan.io/): config (the plan's config id), tier, speed (decode class),
accelerator, slice (PERIOD/DAY_TYPE/HOUR the replicas are of) and bounds (the site's
bounds.csv, the floor and ceiling of every hour). Labels: site and workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.units import Role
from optimizer.commands.export.bounds import bounds_at
from optimizer.commands.export.fleet import ANNOTATION, GPU_RESOURCES, Fleet, PoolKey, ServingPool, Slice, model_repo

BOUNDS_FILE = "bounds.csv"


@dataclass
class ExportJob:
    """One export: the fleet, the slice whose replicas the manifests carry, the bounds."""

    fleet: Fleet
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


def vllm_args(p: ServingPool, ctx: ExportJob) -> list[str]:
    """vLLM engine arguments of the pool's replicas: the model, TP and, for a replica over
    several nodes, data parallelism across them with expert parallelism (`fleet.engine`)."""
    args = ["--model", ctx.repo(p), "--tensor-parallel-size", str(p.tp)]
    if p.nodes > 1:
        args += ["--data-parallel-size", str(p.nodes), "--enable-expert-parallel"]
    return args


@dataclass(frozen=True)
class Running(PoolKey):
    """A pool as a manifest states it (what `import-deployment` reads)."""

    gpus_per_replica: int
    tp: int
    nodes: int
    replicas: int
    manifest: str


def role_of(meta: dict, default: str) -> str:
    """The role the annotated config names (its tag starts with it), else ``default``."""
    tag = str(meta.get(f"{ANNOTATION}config", "")).split("/")[-1]
    return next((str(r) for r in Role if tag.startswith(str(r))), default)


def pool_from(meta: dict, *, role: str, tp: int, nodes: int, replicas: int, model: str, gpu: str | None,
              site: str | None, where: str) -> Running:
    """A Running pool from a manifest's native fields and its fleetplan annotations and labels
    (``meta``: both merged). Without annotations (a manifest fleetplan did not write) the
    config id is made from the native fields: MODEL/ACCELERATOR/xGPUS/ROLE."""
    gpu = meta.get(f"{ANNOTATION}accelerator") or gpu
    site = meta.get(f"{ANNOTATION}site") or site
    if not gpu:
        raise ScenarioError("the accelerator is not stated (expected the node selector or annotation "
                            f"{ANNOTATION}accelerator)", Origin(where), field=f"{ANNOTATION}accelerator")
    gpus = tp * nodes
    config = meta.get(f"{ANNOTATION}config") or f"{model}/{gpu}/x{gpus}/{role}"
    parts = config.split("/")
    if len(parts) < 4 or parts[1] != gpu or parts[2] != f"x{gpus}" or not parts[3].startswith(role):
        raise ScenarioError(f"the manifest runs {role} replicas of {gpus} {gpu} GPUs but its annotation names config "
                            f"'{config}'; the manifest was edited after export?", Origin(where),
                            field=f"{ANNOTATION}config")
    return Running(site or "", meta.get(f"{ANNOTATION}workload") or parts[0], int(meta.get(f"{ANNOTATION}tier", -1)),
                   role, int(meta.get(f"{ANNOTATION}speed", -1)), gpu, config, gpus, tp, nodes, int(replicas), where)
