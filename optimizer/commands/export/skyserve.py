"""SkyPilot / SkyServe: a service YAML (a SkyPilot task with a `service` section) per pool —
field names from skypilot-org/skypilot sky/utils/schemas.py (get_task_schema, the resources
and service schemas) at 00052dfe0d13 (schemas/README.md).

Fields: resources.accelerators = {NAME: GPUs per node of a replica} in SkyPilot's
accelerator names; num_nodes for a replica over several nodes; resources.infra =
--infra SITE=CLOUD/REGION where given (a plan's site is a place, not a cloud region);
resources.use_spot = true for a pool on a plan's spot accelerator (``<gpu>-spot``, the README's
"Spot capacity"; SkyPilot's name is the base accelerator's), else false; service.replica_policy.min_replicas / max_replicas = floor and ceiling (`bounds`);
run = `vllm serve` with the engine arguments (`common.vllm_args`). SkyServe has no field for
a starting count beside its policy, so the replicas of the exported slice and the pool's
annotations are kept in envs (FLEETPLAN_*), which `import-deployment` reads back.

SkyServe balances one kind of replica per service and has no prefill/decode roles, so a
disaggregated pool cannot be expressed: it is refused, naming the pool and the field.
"""

from __future__ import annotations

import shlex

from optimizer.base.errors import ScenarioError
from optimizer.base.spot import base_gpu, is_spot, spot_id
from optimizer.base.units import Role
from optimizer.commands.export.common import ExportJob, Running, annotations, engine_of, labels, pool_from, vllm_args
from optimizer.commands.export.fleet import ANNOTATION, Deployment, ServingPool, dns_name

PORT = 8000
# SkyPilot's accelerator names for the catalogue's accelerators (`sky show-gpus`)
ACCELERATORS = {"h100-sxm": "H100", "h200-sxm": "H200", "b200": "B200", "a100-80gb-sxm": "A100-80GB",
                "l40s": "L40S", "mi300x": "MI300X", "mi325x": "MI325X"}
ENV = "FLEETPLAN_"


def _env_name(key: str) -> str:
    return ENV + key.removeprefix(ANNOTATION).upper()


def _service(dep: Deployment, p: ServingPool, ctx: ExportJob) -> dict:
    if p.role != Role.COLOCATED:
        raise ScenarioError(f"pool {p.config} at {p.site} is a {p.role} pool; SkyServe runs one kind of replica per "
                            "service, with no prefill/decode roles — export this plan to dynamo, llm-d or "
                            "vllm-stack, or plan with --set 'serving.modes=[colocated]'", field="role")
    if base_gpu(p.gpu) not in ACCELERATORS:
        raise ScenarioError(f"no SkyPilot accelerator name is known for {p.gpu} (pool {p.config} at {p.site})",
                            field="gpu")
    envs = {_env_name(k): v for k, v in {**labels(p), **annotations(p, ctx)}.items()}
    envs[ENV + "REPLICAS"] = str(ctx.replicas(p))
    resources = {"accelerators": {ACCELERATORS[base_gpu(p.gpu)]: p.gpus_per_node}, "use_spot": is_spot(p.gpu)}
    if p.site in ctx.infra:
        resources["infra"] = ctx.infra[p.site]
    policy = {"min_replicas": ctx.floor(p), "max_replicas": ctx.ceiling(p)}
    args = vllm_args(p, ctx)  # --model REPO …: `vllm serve` takes the model as its first argument
    doc = {"name": dns_name(dep.name, p.name), "resources": resources, "envs": envs,
           "run": shlex.join(["vllm", "serve", args[1], *args[2:], "--port", str(PORT)]),
           "service": {"readiness_probe": "/v1/models", "replica_policy": policy, "ports": PORT}}
    if p.nodes > 1:
        doc["num_nodes"] = p.nodes
    return doc


def render(dep: Deployment, ctx: ExportJob) -> list[tuple[str, dict]]:
    return [("SkyServe service", _service(dep, p, ctx)) for p in dep.pools]


def read(doc: dict, where: str, site: str | None) -> list[Running]:
    envs = doc.get("envs") or {}
    meta = {ANNOTATION + k.removeprefix(ENV).lower(): v for k, v in envs.items() if k.startswith(ENV)}
    accelerators = (doc.get("resources") or {}).get("accelerators") or {}
    if isinstance(accelerators, str):
        name, _, count = accelerators.partition(":")
        accelerators = {name: int(count or 1)}
    names = {v: k for k, v in ACCELERATORS.items()}
    (name, per_node), = accelerators.items() if len(accelerators) == 1 else ((None, 1),)
    gpu = names.get(name)
    if gpu and (doc.get("resources") or {}).get("use_spot"):
        gpu = spot_id(gpu)
    policy = (doc.get("service") or {}).get("replica_policy") or {}
    replicas = int(envs.get(ENV + "REPLICAS", policy.get("min_replicas", (doc.get("service") or {}).get("replicas", 1))))
    run = shlex.split(str(doc.get("run", "")))
    model = run[run.index("serve") + 1] if "serve" in run and run.index("serve") + 1 < len(run) else doc.get("name", "")
    return [pool_from(meta, role=str(Role.COLOCATED), engine=engine_of(run, int(per_node)), nodes=int(doc.get("num_nodes", 1)),
                      replicas=replicas, model=model, gpu=gpu, site=site, where=where)]
