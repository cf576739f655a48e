"""llm-d through KServe's LLMInferenceService — serving.kserve.io/v1alpha2, field names from
kserve/kserve config/crd/full/llmisvc/serving.kserve.io_llminferenceservices.yaml at
aaac4e294dae2c7b1aa1886447793f3aa1c30912 (schemas/README.md).

An LLMInferenceService runs one decode (or colocated) workload — spec.template, replicas,
parallelism, scaling — and optionally one prefill workload (spec.prefill), behind a router
whose scheduler (llm-d's endpoint picker) pairs prefill and decode pods of its InferencePool.
A deployment of the plan may hold several prefill and decode pools (latency tiers,
accelerators), so it becomes several services laid pairwise — the i-th decode pool with the
i-th prefill pool — where the first service creates the router and its pool and the others
join that pool (router.scheduler.pool.ref, KServe names it ``<name>-inference-pool``): the
scheduler then picks among all of the deployment's pods, as the plan's pools of one class
share their load. A service that carries only a prefill pool has a decode workload of
0 replicas (and no fleetplan annotations).

Fields: replicas = the pool's replicas in the exported slice; scaling.minReplicas (≥ 1 in the
CRD, so left out where the floor is 0) and scaling.maxReplicas = floor and ceiling
(`bounds`); parallelism.tensor = TP, parallelism.data and .expert for a replica over several
nodes; template.containers[main].resources.limits = GPUs per pod; template.nodeSelector = the
accelerator's node label; model.uri = hf://REPOSITORY.

KV transfer: vLLM's NixlConnector moves KV between tensor-parallel layouts only where the
decode TP is a whole multiple of the prefill TP (heterogeneous TP, vllm-project/vllm #18833;
prefill TP above decode TP is not supported there, #23917). Every prefill pool of a deployment
can hand to every decode pool, so each pair is checked: a warning, or with --strict an error
naming the pools and the field.
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
    pool_from,
    precision_args,
    role_of,
)
from optimizer.commands.export.fleet import NODE_LABEL, Deployment, ServingPool, dns_name

API = "serving.kserve.io/v1alpha2"


def _workload(p: ServingPool, ctx: ExportJob) -> dict:
    parallelism = {"tensor": p.tp}
    if p.dp > 1:
        parallelism.update(data=p.dp, dataLocal=p.dp // p.nodes)
    if p.expert_parallel:
        parallelism["expert"] = True
    container = {"name": "main", "resources": {"limits": {gpu_resource(p, ctx): str(p.gpus_per_node)}}}
    args = precision_args(p, ctx)
    if args:
        container["args"] = args
    scaling = {"maxReplicas": ctx.ceiling(p)} if ctx.ceiling(p) >= 1 else None
    if scaling is not None and ctx.floor(p) >= 1:
        scaling["minReplicas"] = ctx.floor(p)
    out = {"replicas": ctx.replicas(p), "parallelism": parallelism, "labels": labels(p),
           "annotations": annotations(p, ctx),
           "template": {"containers": [container], "nodeSelector": {NODE_LABEL: p.gpu}}}
    if scaling is not None:
        out["scaling"] = scaling
    return out


def _idle(p: ServingPool, ctx: ExportJob) -> dict:
    """A decode workload of 0 replicas beside a service that carries only a prefill pool."""
    return {"replicas": 0, "parallelism": {"tensor": p.tp},
            "template": {"containers": [{"name": "main", "resources": {"limits": {gpu_resource(p, ctx): str(p.gpus_per_node)}}}],
                         "nodeSelector": {NODE_LABEL: p.gpu}}}


def check_kv_transfer(dep: Deployment, ctx: ExportJob) -> None:
    for pre in dep.of_role(Role.PREFILL):
        for dec in dep.of_role(Role.DECODE):
            if dec.tp % pre.tp:
                text = (f"{dep.site}/{dep.workload}: prefill pool {pre.config} (TP {pre.tp}) hands KV to decode pool "
                        f"{dec.config} (TP {dec.tp}); NixlConnector needs the decode TP to be a multiple of the prefill TP")
                if ctx.strict:
                    raise ScenarioError(text, field="parallelism.tensor")
                if text not in ctx.warnings:  # prefill pools of several tiers share a config
                    ctx.warnings.append(text)


def render(dep: Deployment, ctx: ExportJob) -> list[tuple[str, dict]]:
    check_kv_transfer(dep, ctx)
    decode = dep.of_role(Role.DECODE) or dep.of_role(Role.COLOCATED)
    prefill = dep.of_role(Role.PREFILL)
    docs = []
    for i in range(max(len(decode), len(prefill))):
        main = decode[i] if i < len(decode) else None
        name = dns_name(dep.name, i) if i else dep.name
        spec = {"model": {"uri": f"hf://{ctx.repo(dep.pools[0])}", "name": dep.pools[0].model}}
        spec.update(_workload(main, ctx) if main else _idle(decode[0] if decode else prefill[i], ctx))
        if i < len(prefill):
            spec["prefill"] = _workload(prefill[i], ctx)
        spec["router"] = ({"route": {}, "gateway": {}, "scheduler": {}} if i == 0 else
                          {"scheduler": {"pool": {"ref": {"name": f"{dep.name}-inference-pool"}}}})
        docs.append(("LLMInferenceService", {"apiVersion": API, "kind": "LLMInferenceService",
                                             "metadata": {"name": name, "labels": labels(dep.pools[0])},
                                             "spec": spec}))
    return docs


def _read_workload(w: dict, role: str, model: str, where: str, site: str | None) -> Running | None:
    meta = {**(w.get("labels") or {}), **(w.get("annotations") or {})}
    replicas = int(w.get("replicas", 1))
    if replicas == 0 and not meta:
        return None  # the idle decode side of a prefill-only service
    role = role_of(meta, role)
    par = w.get("parallelism") or {}
    template = w.get("template") or {}
    gpu = template.get("nodeSelector", {}).get(NODE_LABEL)
    main = next((c for c in template.get("containers") or [] if c.get("name") == "main"), {})
    engine = engine_of([str(a) for a in main.get("args") or []], int(par.get("tensor", 1)))
    data = int(par.get("data", 1))
    engine.update(dp=data, expert_parallel=bool(par.get("expert", False)))
    # dataLocal: DP ranks per node; a manifest without it runs one rank per node
    nodes = data // int(par.get("dataLocal", 1))
    return pool_from(meta, role=role, engine=engine, nodes=nodes, replicas=replicas,
                     model=model, gpu=gpu, site=site, where=where)


def read(doc: dict, where: str, site: str | None) -> list[Running]:
    if doc.get("kind") != "LLMInferenceService":
        return []
    spec = doc.get("spec") or {}
    model = (spec.get("model") or {}).get("name") or doc.get("metadata", {}).get("name", "")
    prefill = spec.get("prefill")
    out = [_read_workload(spec, str(Role.DECODE if prefill else Role.COLOCATED), model, f"{where}: spec", site)]
    if prefill:
        out.append(_read_workload(prefill, str(Role.PREFILL), model, f"{where}: spec.prefill", site))
    return [r for r in out if r is not None]
