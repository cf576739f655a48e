"""vLLM production-stack: a Helm values file per deployment (one release of the chart),
servingEngineSpec.modelSpec with one entry per pool — field names from
vllm-project/production-stack helm/values.schema.json and helm/README.md at a6c01db05f65
(chart 0.1.12; schemas/README.md).

Fields: name = the pool's service name; modelURL = the model repository; replicaCount = the
pool's replicas in the exported slice; requestGPU = GPUs per replica and requestGPUType for
non-NVIDIA parts; vllmConfig.tensorParallelSize = TP; nodeSelectorTerms = the accelerator's
node label; keda.minReplicaCount / maxReplicaCount = floor and ceiling (`bounds`); for a
disaggregated deployment lmcacheConfig.kvRole kv_producer (prefill) / kv_consumer (decode)
with NIXL sender / receiver, and routerSpec.routingLogic disaggregated_prefill (the chart's
README, "LMCache Configuration" and "Router Configuration"); labels and annotations carry
the pool (`common`).

The chart runs a replica over several nodes only as a Ray cluster (raySpec), which fleetplan
does not write: such a pool is refused, naming it.
"""

from __future__ import annotations

from optimizer.base.errors import ScenarioError
from optimizer.base.units import Role
from optimizer.commands.export.common import (
    ExportJob,
    Running,
    annotations,
    engine_of,
    gpu_resource,
    labels,
    parallel_args,
    pool_from,
    precision_args,
    role_of,
)
from optimizer.commands.export.fleet import ANNOTATION, NODE_LABEL, Deployment, ServingPool

REPOSITORY, TAG = "vllm/vllm-openai", "latest"  # the chart's default serving-engine image
KV_ROLE = {Role.PREFILL: ("kv_producer", "sender"), Role.DECODE: ("kv_consumer", "receiver")}


def _model_spec(p: ServingPool, ctx: ExportJob) -> dict:
    if p.nodes > 1:
        raise ScenarioError(f"pool {p.config} at {p.site} runs replicas over {p.nodes} nodes; the production-stack "
                            "chart does that only as a Ray cluster (raySpec), which fleetplan does not write",
                            field="requestGPU")
    spec = {"name": p.name, "repository": REPOSITORY, "tag": TAG, "modelURL": ctx.repo(p),
            "replicaCount": ctx.replicas(p), "requestGPU": p.gpus,
            "nodeSelectorTerms": [{"matchExpressions": [{"key": NODE_LABEL, "operator": "In", "values": [p.gpu]}]}],
            "vllmConfig": _vllm_config(p, ctx),
            "keda": {"enabled": True, "minReplicaCount": ctx.floor(p), "maxReplicaCount": ctx.ceiling(p)},
            "labels": labels(p), "annotations": annotations(p, ctx)}
    resource = gpu_resource(p, ctx)
    if resource != "nvidia.com/gpu":
        spec["requestGPUType"] = resource
    if p.role in KV_ROLE:
        kv_role, nixl_role = KV_ROLE[p.role]
        spec["lmcacheConfig"] = {"enabled": True, "kvRole": kv_role, "enableNixl": True, "nixlRole": nixl_role}
    return spec


def _vllm_config(p: ServingPool, ctx: ExportJob) -> dict:
    """TP in its own field; DP, expert parallelism, precisions and speculation as vLLM's
    engine arguments in extraArgs (the chart passes them to `vllm serve`)."""
    extra = parallel_args(p)[2:] + precision_args(p, ctx)
    return {"tensorParallelSize": p.tp, **({"extraArgs": extra} if extra else {})}


def render(dep: Deployment, ctx: ExportJob) -> list[tuple[str, dict]]:
    logic = "disaggregated_prefill" if dep.kind == "disaggregated" else "roundrobin"
    return [("production-stack values", {"servingEngineSpec": {"modelSpec": [_model_spec(p, ctx) for p in dep.pools]},
                                         "routerSpec": {"enableRouter": True, "routingLogic": logic}})]


def read(doc: dict, where: str, site: str | None) -> list[Running]:
    out = []
    for i, spec in enumerate((doc.get("servingEngineSpec") or {}).get("modelSpec") or []):
        meta = {**(spec.get("labels") or {}), **(spec.get("annotations") or {})}
        kv = (spec.get("lmcacheConfig") or {}).get("kvRole")
        role = role_of(meta, {"kv_producer": str(Role.PREFILL), "kv_consumer": str(Role.DECODE)}.get(kv, str(Role.COLOCATED)))
        gpu = None
        for term in spec.get("nodeSelectorTerms") or []:
            for e in term.get("matchExpressions") or []:
                if e.get("key") == NODE_LABEL and e.get("values"):
                    gpu = e["values"][0]
        config = spec.get("vllmConfig") or {}
        engine = engine_of([str(a) for a in config.get("extraArgs") or []],
                           int(config.get("tensorParallelSize", spec.get("requestGPU", 1))))
        out.append(pool_from(meta, role=role, engine=engine, nodes=1, replicas=spec.get("replicaCount", 1),
                             model=spec.get("modelURL") or spec.get("name", ""), gpu=gpu or meta.get(f"{ANNOTATION}accelerator"),
                             site=site, where=f"{where}: servingEngineSpec.modelSpec[{i}]"))
    return out
