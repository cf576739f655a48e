"""NVIDIA Dynamo: per deployment a DynamoGraphDeployment, a DynamoGraphDeploymentScalingAdapter
per worker service and a DynamoGraphDeploymentRequest — nvidia.com/v1alpha1, field names from
the operator's CRDs in ai-dynamo/dynamo deploy/cloud/operator/config/crd/bases/ (commits in
schemas/README.md).

Fields and where they come from (CRD paths of the vendored schemas):
- DynamoGraphDeployment spec.services: a Frontend (componentType frontend) and one worker
  service per pool: componentType worker, subComponentType prefill|decode (none for a
  colocated pool, which Dynamo serves aggregated), replicas = the pool's replicas in the
  exported slice, resources.limits.gpu = GPUs per node of a replica (Dynamo multiplies by
  multinode.nodeCount for a replica over several nodes), gpuType for non-NVIDIA parts,
  extraPodSpec.mainContainer: `python3 -m dynamo.vllm` with vLLM's engine arguments
  (`common.vllm_args`) and --is-prefill-worker / --is-decode-worker (the worker flags of the
  profiler's generated DGD, benchmarks/profiler/deploy/dgdr-output.yaml);
- DynamoGraphDeploymentScalingAdapter (the operator's autoscaling interface; the services'
  own `autoscaling` field is deprecated and ignored in this CRD version): spec.replicas and
  scalingPolicy.minReplicas / maxReplicas = the pool's floor and ceiling in the slice
  (`bounds`); a ceiling of 0 (the plan does not run the pool then) has no native form
  (maxReplicas ≥ 1) and is left to bounds.csv;
- DynamoGraphDeploymentRequest spec.profilingConfig.config.sla: isl and osl = the workload's
  mean prompt and output tokens, ttft = its p99 objective less the largest network round trip
  and fixed overheads of the metros the site serves (slo.csv), itl = its p99 objective; planner:
  minEndpoint = the smallest floor of the workers, maxGpuBudget = Σ ceiling × GPUs (the SLA
  planner's --min-endpoint and --max-gpu-budget).
"""

from __future__ import annotations

from optimizer.base.units import Role
from optimizer.commands.export.common import (
    ExportJob,
    Running,
    annotations,
    engine_of,
    gpu_resource,
    labels,
    pool_from,
    vllm_args,
)
from optimizer.commands.export.fleet import ANNOTATION, NODE_LABEL, Deployment, ServingPool, dns_name

API = "nvidia.com/v1alpha1"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0"  # the runtime image of the profiler's sample DGDR
WORKER_FLAG = {Role.PREFILL: "--is-prefill-worker", Role.DECODE: "--is-decode-worker"}


def _worker(p: ServingPool, ctx: ExportJob) -> dict:
    args = vllm_args(p, ctx) + ([WORKER_FLAG[p.role]] if p.role in WORKER_FLAG else [])
    limits = {"gpu": str(p.gpus_per_node)}
    resource = gpu_resource(p, ctx)
    if resource != "nvidia.com/gpu":
        limits["gpuType"] = resource
    svc = {"componentType": "worker", "replicas": ctx.replicas(p), "resources": {"limits": limits},
           "labels": labels(p), "annotations": annotations(p, ctx),
           "extraPodSpec": {"mainContainer": {"name": "main", "image": IMAGE,
                                              "command": ["python3", "-m", "dynamo.vllm"], "args": args},
                            "nodeSelector": {NODE_LABEL: p.gpu}}}
    if p.role != Role.COLOCATED:
        svc["subComponentType"] = str(p.role)
    if p.nodes > 1:
        svc["multinode"] = {"nodeCount": p.nodes}
    return svc


def _adapter(dep: Deployment, p: ServingPool, ctx: ExportJob) -> dict:
    policy = {"minReplicas": ctx.floor(p)}
    if ctx.ceiling(p) >= 1:
        policy["maxReplicas"] = ctx.ceiling(p)
    return {"apiVersion": API, "kind": "DynamoGraphDeploymentScalingAdapter",
            "metadata": {"name": dns_name(dep.name, p.name), "labels": labels(p), "annotations": annotations(p, ctx)},
            "spec": {"dgdRef": {"name": dep.name, "service": p.name}, "replicas": ctx.replicas(p),
                     "scalingPolicy": policy}}


def _server_ttft_ms(dep: Deployment, ctx: ExportJob) -> float:
    w = ctx.fleet.scenario.workloads[dep.workload]
    slo = ctx.fleet.slo
    rows = slo[(slo["site"] == dep.site) & (slo["workload"] == dep.workload)]
    spent = float((rows["network_ms"] + rows["overhead_ms"]).max()) if len(rows) else 0.0
    return round(w.ttft_p99_ms - spent, 1)


def _request(dep: Deployment, ctx: ExportJob) -> dict:
    w = ctx.fleet.scenario.workloads[dep.workload]
    workers = dep.pools
    planner = {"minEndpoint": min(ctx.floor(p) for p in workers)}
    budget = sum(ctx.ceiling(p) * p.gpus for p in workers)
    if budget >= 1:
        planner["maxGpuBudget"] = budget
    sla = {"isl": round(w.isl_mean_tokens), "osl": round(w.osl_mean_tokens), "ttft": _server_ttft_ms(dep, ctx),
           "itl": float(w.itl_p99_ms)}
    return {"apiVersion": API, "kind": "DynamoGraphDeploymentRequest",
            "metadata": {"name": dep.name, "labels": labels(workers[0])},
            "spec": {"model": ctx.repo(workers[0]), "backend": "vllm", "autoApply": False,
                     "profilingConfig": {"profilerImage": IMAGE, "config": {"sla": sla, "planner": planner}}}}


def render(dep: Deployment, ctx: ExportJob) -> list[tuple[str, dict]]:
    """(kind, document) of one deployment's manifest: the graph, its adapters, its request."""
    services = {"Frontend": {"componentType": "frontend", "replicas": 1,
                             "extraPodSpec": {"mainContainer": {"name": "main", "image": IMAGE}}}}
    for p in dep.pools:
        services[p.name] = _worker(p, ctx)
    graph = {"apiVersion": API, "kind": "DynamoGraphDeployment",
             "metadata": {"name": dep.name, "labels": labels(dep.pools[0]),
                          "annotations": {f"{ANNOTATION}slice": ctx.slice_text()}},
             "spec": {"backendFramework": "vllm", "services": services}}
    return [("DynamoGraphDeployment", graph), *(("DynamoGraphDeploymentScalingAdapter", _adapter(dep, p, ctx))
                                                for p in dep.pools),
            ("DynamoGraphDeploymentRequest", _request(dep, ctx))]


def read(doc: dict, where: str, site: str | None) -> list[Running]:
    """The worker services of a DynamoGraphDeployment (adapters and requests carry no pool)."""
    if doc.get("kind") != "DynamoGraphDeployment":
        return []
    out = []
    for name, svc in (doc.get("spec", {}).get("services") or {}).items():
        if svc.get("componentType") != "worker":
            continue
        main = svc.get("extraPodSpec", {}).get("mainContainer", {})
        args = [str(a) for a in main.get("args", [])]
        role = svc.get("subComponentType") or str(Role.COLOCATED)
        nodes = int(svc.get("multinode", {}).get("nodeCount", 1))
        engine = engine_of(args, int(svc.get("resources", {}).get("limits", {}).get("gpu", 1)))
        model = args[args.index("--model") + 1] if "--model" in args else name
        meta = {**svc.get("labels", {}), **svc.get("annotations", {})}
        gpu = svc.get("extraPodSpec", {}).get("nodeSelector", {}).get(NODE_LABEL)
        out.append(pool_from(meta, role=role, engine=engine, nodes=nodes, replicas=svc.get("replicas", 1), model=model,
                             gpu=gpu, site=site, where=f"{where}: services.{name}"))
    return out
