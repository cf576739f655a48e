"""A plan folder as the fleet a serving stack runs: pools with their engine parallelism,
grouped into the deployments the stacks know.

Read from the plan folder (`optimizer.folder.read.read_plan`, every file checked first):
pools.csv (one row per pool and slice with replicas; the rows of a lost site, the N−1 case,
are a contingency and not part of the fleet), curves.csv (GPUs per replica) and scenario.json
(model of each workload, GPUs per node of each accelerator). Extra columns are ignored.

Engine parallelism of a config of g GPUs on an accelerator of n GPUs per node (the rules of
`optimizer.serving.configs.parallel_degrees`): g ≤ n is tensor parallelism TP = g on one node; g > n
(MoE models only) spans N = g / n nodes, TP = n inside each node and expert parallelism
across them (data parallelism DP = N). An expert-parallel config of curves.csv
(``expert_parallel``: experts sharded, attention data-parallel, `optimizer.serving.experts`)
runs TP = 1 and DP = g with expert parallelism, on N = ⌈g / n⌉ nodes. Its weight and KV
precisions (``weight_dtype``, ``kv_dtype``; a folder written before precisions were a choice:
the workload's) and speculative decoding (``speculative``: MTP on an expert-parallel replica,
a draft model elsewhere, as `optimizer.serving.experts.speculation` says) go with it.

Deployments (one manifest each, per site): the prefill and decode pools of one workload and
decode class (`speed`; prefill pools of class k hand their requests to decode pools of class
k) form one disaggregated deployment; a workload's colocated pools form one colocated
deployment.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.units import Role
from optimizer.folder.read import read_plan, scenario_of

Slice = tuple[str, str, int]  # (period, day type, UTC hour)
POOL_KEY = ("site", "workload", "tier", "role", "speed", "gpu", "config")

# Hugging Face repositories of the shipped catalogue's models (each model's page on huggingface.co)
MODEL_REPOS = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B-Instruct",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "deepseek-v3.1": "deepseek-ai/DeepSeek-V3.1",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "llama-3.3-70b": "meta-llama/Llama-3.3-70B-Instruct",
}
# Kubernetes extended resource of each vendor's device plugin (NVIDIA and AMD GPU operators)
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
NODE_LABEL = "fleetplan.io/accelerator"  # nodes of an accelerator carry this label with its catalogue id
ANNOTATION = "fleetplan.io/"


DNS_NAME_MAX = 63


def dns_name(*parts) -> str:
    """A Kubernetes object name (RFC 1123 label): lower case, digits and '-', at most 63. A
    longer one is cut and ends in 8 hex digits of its whole text's SHA-1, so that two names
    differing only past the cut (two latency tiers of a pool) stay two."""
    text = "-".join(str(p) for p in parts if str(p))
    text = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(text) <= DNS_NAME_MAX:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{text[:DNS_NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"


@dataclass(frozen=True)
class PoolKey:
    """What names a pool in pools.csv, in a plan and in a manifest alike."""

    site: str
    workload: str
    tier: int
    role: str
    speed: int
    gpu: str
    config: str


@dataclass(frozen=True)
class ServingPool(PoolKey):
    """One pool of a plan: its key in pools.csv, its engine and its replicas per slice."""

    model: str
    gpus: int  # per replica
    tp: int
    nodes: int  # per replica
    expert_parallel: bool
    dp: int = 1  # data-parallel ranks per replica
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    speculative: str = ""  # "" (none), "mtp" or "draft"
    draft_tokens: int = 0  # tokens proposed per step where speculative
    replicas: dict = field(default_factory=dict, compare=False, hash=False)  # Slice → replicas (> 0 only)

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, k) for k in POOL_KEY)

    @property
    def name(self) -> str:
        """The pool's service name inside its deployment: its config's tag, accelerator and
        GPUs, and its latency tier (prefill and colocated pools), e.g. prefill-b4096-b200-x4-t1."""
        tag = self.config.split("/")[-1]
        return dns_name(tag.replace("@", "-s").replace(".", ""), self.gpu, f"x{self.gpus}",
                        f"t{self.tier}" if self.tier >= 0 else "")

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes


@dataclass
class Deployment:
    """The pools of one site that one manifest deploys together."""

    site: str
    workload: str
    kind: str  # "disaggregated" | "colocated"
    speed: int  # decode class (-1 for colocated)
    pools: list[ServingPool]

    @property
    def name(self) -> str:
        cls = f"c{self.speed}" if self.kind == "disaggregated" else "colocated"
        return dns_name(self.workload, self.site, cls)

    def of_role(self, role: str) -> list[ServingPool]:
        return [p for p in self.pools if p.role == role]


@dataclass
class ExportedFleet:
    """Everything an exporter needs from a plan folder."""

    plan_dir: Path
    scenario: object  # the validated Scenario
    pools: list[ServingPool]
    slices: list[Slice]
    procurement: pd.DataFrame
    slo: pd.DataFrame

    def deployments(self) -> list[Deployment]:
        groups: dict[tuple, Deployment] = {}
        for p in sorted(self.pools, key=lambda p: p.key):
            kind = "colocated" if p.role == Role.COLOCATED else "disaggregated"
            speed = -1 if kind == "colocated" else p.speed
            key = (p.site, p.workload, kind, speed)
            groups.setdefault(key, Deployment(p.site, p.workload, kind, speed, [])).pools.append(p)
        return list(groups.values())

    def busiest_slice(self) -> Slice:
        """The slice with the most GPUs in the fleet's pools (the first in horizon order on a tie)."""
        used = {t: 0 for t in self.slices}
        for p in self.pools:
            for t, n in p.replicas.items():
                used[t] += n * p.gpus
        return max(self.slices, key=lambda t: (used[t], -self.slices.index(t)))


def engine(gpus: int, gpus_per_node: int, moe: bool, where: str, attention_dp: bool = False) -> tuple[int, int, int, bool]:
    """(TP, DP, nodes, expert parallel) of a replica of ``gpus`` GPUs (module docstring)."""
    if gpus > gpus_per_node and (gpus % gpus_per_node or not moe):
        raise ScenarioError(f"a replica of {gpus} GPUs on nodes of {gpus_per_node} is neither one node nor whole nodes "
                            "of a MoE model; no serving stack runs it", field=where)
    nodes = max(1, gpus // gpus_per_node)
    if attention_dp:
        return 1, gpus, nodes, True
    if gpus <= gpus_per_node:
        return gpus, 1, 1, False
    return gpus_per_node, nodes, nodes, True


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "1.0")


def _config_engine(s, curves: pd.DataFrame) -> dict[str, dict]:
    """Config id → its expert parallelism, precisions and speculation (curves.csv; absent
    columns of an older folder: none, the workload's precisions)."""
    from optimizer.serving.configs import config_precision
    from optimizer.serving.experts import speculation

    out = {}
    for c in curves.to_dict("records"):
        w = s.workloads.get(c.get("workload"))
        if w is None:
            continue
        ep, spec = _truthy(c.get("expert_parallel", False)), _truthy(c.get("speculative", False))
        weight, kv = config_precision(c, w)
        out[c["id"]] = {"attention_dp": ep, "weight_dtype": weight, "kv_dtype": kv,
                        "speculative": ("mtp" if ep else "draft") if spec else "",
                        "draft_tokens": int(speculation(s.serving, ep).draft_tokens) if spec else 0}
    return out


def read_fleet(plan_dir) -> ExportedFleet:
    """The fleet of a plan folder (module docstring); the folder is checked first."""
    d = Path(plan_dir)
    plan = read_plan(d)
    s = scenario_of(plan, d)
    pools_t = plan.tables["pools"]
    pools_t = pools_t[pools_t["lost_site"].isna()]
    slices = [(p.id, t.id, h) for p in s.horizon.periods for t in s.horizon.day_types for h in s.horizon.hours]
    configs = _config_engine(s, plan.tables["curves"])
    pools = []
    for key, rows in pools_t.groupby(list(POOL_KEY), sort=True):
        site, workload, tier, role, speed, gpu, config = key
        w = s.workloads[workload]
        gpus = int(rows["gpus_per_replica"].iloc[0])
        c = configs.get(config, {"weight_dtype": w.weight_dtype, "kv_dtype": w.kv_dtype})
        tp, dp, nodes, ep = engine(gpus, s.accelerators[gpu].gpus_per_node, bool(s.models[w.model].experts),
                                   f"pools.csv {config} gpus_per_replica", c.get("attention_dp", False))
        replicas = {(r.period, r.day_type, int(r.hour)): int(r.replicas)
                    for r in rows.itertuples() if int(r.replicas) > 0}
        pools.append(ServingPool(site, workload, int(tier), role, int(speed), gpu, config, w.model, gpus, tp, nodes, ep,
                                 dp, c["weight_dtype"], c["kv_dtype"], c.get("speculative", ""),
                                 c.get("draft_tokens", 0), replicas))
    return ExportedFleet(d, s, pools, slices, plan.tables["procurement"], plan.tables["slo"])


def parse_slice(text: str, fleet: ExportedFleet) -> Slice:
    """PERIOD/DAY_TYPE/HOUR as a slice of the plan's horizon."""
    parts = str(text).split("/")
    if len(parts) == 3 and parts[2].isdigit():
        t = (parts[0], parts[1], int(parts[2]))
        if t in fleet.slices:
            return t
    shown = ", ".join("/".join(map(str, t)) for t in fleet.slices[:4])
    raise ScenarioError(f"expected a slice of the plan's horizon as PERIOD/DAY_TYPE/HOUR (e.g. {shown}, …), "
                        f"got {text!r}", Origin("--slice"))


def model_repo(model: str, overrides: dict[str, str]) -> str:
    """The model's Hugging Face repository: --model-repo, else the shipped catalogue's."""
    repo = overrides.get(model) or MODEL_REPOS.get(model)
    if repo is None:
        raise ScenarioError(f"no model repository known for model '{model}'; pass --model-repo {model}=ORG/NAME",
                            Origin("--model-repo"))
    return repo
