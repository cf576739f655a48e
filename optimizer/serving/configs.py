"""Serving configurations: a workload's model on an accelerator at a parallel degree, in a
role (prefill, decode, colocated), at its operating point — the curves evaluated for the
scenario's catalogue rows.

Rules (reasons in the README's "Modelling choices"):
- tensor parallelism stays inside a scale-up domain (a node over PCIe for parts without
  NVLink/Infinity Fabric); a MoE model too large for one node may span nodes with expert
  parallelism over the scale-out NIC (`Serving.max_gpus_per_replica`);
- a decode replica reserves KV for a full request (prompt + output) per slot and steps at the
  mean context (prompt + half the output);
- speculative decoding is offered on decode replicas; colocated replicas use chunked prefill
  and plain decoding;
- a dedicated prefill replica serves one prompt at a time or, for each budget B in
  `Serving.prefill_batch_tokens`, packs the waiting prompts into passes of up to B new
  tokens (`optimizer.curves.prefill_batch`); the configs compete like any others;
- the p99 prompt is assumed a cache miss unless nearly every request hits;
- with ``serving.expert_parallel`` on, a MoE model is also offered expert-parallel decode
  replicas (`optimizer.serving.experts`: EP degrees, MTP, the fabric in the config);
- every (weight, KV) precision the workload accepts (`Workload.precisions`) and the part serves
  (`Accelerator.precisions`, `kv_precisions`) gives configs of its own, at the bytes and matmul
  rate of `optimizer.base.precision`; a precision other than the workload's own tags the id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.base.precision import bytes_per_value, matmul_flops, runs_natively
from optimizer.base.units import MS_PER_S, US_PER_S, Role
from optimizer.curves import memory
from optimizer.curves.batching import colocated_balance_batch, decode_operating_point
from optimizer.curves.cache import cache_kv_share, p99_cached_tokens
from optimizer.curves.expert_parallel import fabric
from optimizer.curves.lengths import LengthDistribution, prompt_lengths, service_moments
from optimizer.curves.memory import kv_budget_bytes, max_concurrency, replica_kv_copies
from optimizer.curves.prefill_batch import chunked_prefill_s, full_pass_s, p99_pass_s
from optimizer.curves.roofline import (
    decode_step_time_s,
    mixed_step_time_s,
    prefill_time_s,
)
from optimizer.curves.shapes import Efficiency, Hardware, ModelShape, Replica
from optimizer.curves.speculative import (
    expected_tokens_per_step,
    speculative_step_time_s,
)
from optimizer.curves.transfer import replica_nic_bytes_per_s
from optimizer.scenario import Accelerator, Model, Scenario, Serving, Workload
from optimizer.serving.experts import ep_degrees, kv_receive_bytes_per_s, speculation

MIN_BATCH_PROMPTS = 1.5  # a batching budget whose full pass holds fewer prompts on average gains too little


def model_shape(m: Model) -> ModelShape:
    return ModelShape(
        params_total=m.total_params_b * 1e9,
        params_active=m.active_params_b * 1e9,
        layers=m.layers,
        hidden=m.hidden,
        heads=m.heads,
        kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        attention=m.attention,
        kv_lora_rank=m.kv_lora_rank or 0,
        qk_rope_head_dim=m.qk_rope_head_dim or 0,
        experts=m.experts or 0,
        experts_per_token=m.experts_per_token or 0,
        max_context=m.max_context,
    )


def hardware(a: Accelerator, dtype: str) -> Hardware | None:
    """The accelerator serving weights in format ``dtype`` (`optimizer.base.precision`: the
    matmul rate that format runs at there); None where the part does not serve it (A100 FP8,
    NVFP4 before Blackwell)."""
    tflops = matmul_flops(dtype, a.bf16_dense_tflops, a.fp8_dense_tflops, a.fp4_dense_tflops)
    if tflops is None or dtype not in a.precisions:
        return None
    return Hardware(
        dense_flops_per_s=tflops * 1e12,
        # Vendors' HBM capacities are binary gigabytes: the driver reports 81,559 MiB for an
        # "80 GB" H100, 143,771 MiB for a "141 GB" H200, 183,359 MiB for a "180 GB" B200 (hbm_gb
        # GiB is 0.4–0.5 % above each), and usable_hbm_fraction (vLLM's gpu_memory_utilization)
        # applies to those bytes.
        hbm_bytes=a.hbm_gb * 2**30,
        hbm_bytes_per_s=a.hbm_tb_s * 1e12,
        scaleup_domain_gpus=a.scaleup_domain_gpus,
        scaleup_bytes_per_s=a.scaleup_gb_s * 1e9 / 2.0,
        nic_bytes_per_s=a.nic_gbps_per_gpu * 1e9 / 8.0,
        gpus_per_node=a.gpus_per_node,
    )


FRACTIONS = ("prefill_mfu", "decode_mbu", "decode_mfu", "link_efficiency", "small_link_share")


def efficiency(s: Serving, accelerator: str = "*", dtype: str = "bf16") -> Efficiency:
    """The parameters a replica of ``accelerator`` at weight ``dtype`` runs with: the
    scenario's value where set, else the calibration's (file, then shipped; see
    `optimizer.scenario.calibration.params.Calibration.lookup`) × ``serving.calibration_scale``
    (fractions capped at 1)."""
    calibrated = s.calibration.lookup(accelerator, dtype, s.engine).values()
    v = {}
    for name, value in calibrated.items():
        override = getattr(s, name)
        v[name] = override if override is not None else value * s.calibration_scale.get(name, 1.0)
        if name in FRACTIONS:
            v[name] = min(v[name], 1.0)
    return Efficiency(
        prefill_mfu=v["prefill_mfu"],
        prefill_half_tokens=v["prefill_half_tokens"],
        decode_mbu=v["decode_mbu"],
        decode_mfu=v["decode_mfu"],
        step_overhead_s=v["step_overhead_ms"] / MS_PER_S,
        layer_overhead_s=v["layer_overhead_us"] / US_PER_S,
        usable_hbm_fraction=s.usable_hbm_fraction,
        workspace_bytes_per_gpu=s.workspace_gb_per_gpu * 1e9,
        collective_latency_s=v["collective_latency_us"] / US_PER_S,
        link_efficiency=v["link_efficiency"],
        bulk_extra_latency_s=v["bulk_extra_latency_us"] / US_PER_S,
        small_link_share=v["small_link_share"],
        pcie_p2p_gpus=int(v["pcie_p2p_gpus"]),
        nic_efficiency=s.nic_efficiency,
        alltoall_nic_efficiency=s.expert_parallel.nic_efficiency,
        alltoall_scaleup_latency_s=(None if s.expert_parallel.scaleup_latency_us is None
                                    else s.expert_parallel.scaleup_latency_us / US_PER_S),
        scaleout_latency_s=s.expert_parallel.scaleout_latency_us / US_PER_S,
        roofline_sharpness=v["roofline_sharpness"],
        attention_factor=v["attention_factor"],
        moe_load_factor=v["moe_load_factor"],
    )


def kv_bytes_per_token(w: Workload, m: Model, kv_dtype: str | None = None) -> float:
    """KV bytes per token of the workload's model at ``kv_dtype``; by default at the largest KV
    precision the workload accepts — what a prefill-to-decode hand-off is sized for, as the two
    pools may run different precisions (the KV converted on arrival)."""
    shape = model_shape(m)
    beta = bytes_per_value(kv_dtype) if kv_dtype else max(bytes_per_value(kv) for _, kv in w.precisions)
    return memory.kv_bytes_per_token(shape, beta)


def calibration_dtype(a: Accelerator, weight_dtype: str, s: Serving | None = None) -> str:
    """The calibration rows a precision runs with: the rows fitted at that precision on the
    part where the calibration has them (e.g. B200 nvfp4); else the bf16 or fp8 rows — a
    format the part computes in natively below 16 bits takes the fp8 rows, a weight-only
    (dequantised) one the bf16 rows."""
    if weight_dtype not in ("bf16", "fp8") and s is not None and s.calibration.fitted_at(a.id, weight_dtype):
        return weight_dtype
    if weight_dtype == "bf16" or not runs_natively(weight_dtype, a.fp4_dense_tflops):
        return "bf16"
    return "fp8"


def parallel_degrees(m: Model, a: Accelerator, s: Serving) -> list[int]:
    """GPUs per replica to consider: the allowed TP degrees inside the scale-up domain (the
    node for PCIe parts); for MoE models, also whole multiples of a node up to
    `Serving.max_gpus_per_replica` (expert parallelism across nodes)."""
    domain = a.scaleup_domain_gpus if a.scaleup_domain_gpus > 1 else a.gpus_per_node
    degrees = sorted({p for p in s.tp_degrees if p <= domain})
    if m.experts:
        node = a.gpus_per_node
        degrees += [node * k for k in range(2, s.max_gpus_per_replica // node + 1)]
    return degrees


def make_replica(m: Model, a: Accelerator, s: Serving, gpus: int, weight_dtype: str, kv_dtype: str,
                 expert_parallel: bool = False) -> Replica | None:
    """A replica at weight and KV precisions (``expert_parallel``: experts sharded, attention
    data-parallel); None where the part serves either not."""
    hw = hardware(a, weight_dtype)
    if hw is None or kv_dtype not in a.kv_precisions():
        return None
    return Replica(
        model_shape(m), hw, efficiency(s, a.id, calibration_dtype(a, weight_dtype, s)), gpus,
        weight_bytes_per_param=bytes_per_value(weight_dtype),
        kv_bytes_per_value=bytes_per_value(kv_dtype), precision=(weight_dtype, kv_dtype),
        attention_dp=bool(expert_parallel),
    )


def precision_tag(w: Workload, weight_dtype: str, kv_dtype: str) -> str:
    """What a config id adds for a precision other than the workload's own: ``:WEIGHT-KV``."""
    return "" if (weight_dtype, kv_dtype) == (w.weight_dtype, w.kv_dtype) else f":{weight_dtype}-{kv_dtype}"


@dataclass(frozen=True)
class ServingConfig:
    """One way to serve a workload. Times in ms, rates per replica."""

    id: str
    workload: str
    gpu: str
    gpus: int
    role: str  # a `Role`
    batch: int = 0
    speculative: bool = False
    chunk_tokens: int = 0
    prefill_p99_ms: float = 0.0  # prefill (colocated: all chunks) of the p99 prompt
    service_mean_s: float = 0.0  # prefill-lane service time per request
    service_scv: float = 0.0
    service_third_ratio: float = 0.0  # E[S³]/E[S]³ of the prefill-lane service time (0: not known)
    step_ms: float = 0.0  # decode step / colocated iteration at the operating batch
    itl_p99_ms: float = 0.0
    tokens_per_step: float = 1.0
    decode_rps: float = 0.0  # requests/s the decode side sustains (with utilisation headroom)
    speed: float = 1.0  # decode: the share of the ITL objective its p99 step is held to
    decode_tokens_per_s: float = 0.0
    nic_bytes_per_s: float = 0.0
    kv_budget_gb: float = 0.0
    weights_gb_per_gpu: float = 0.0
    max_concurrency: int = 0
    input_share: float = 0.0  # estimated share of the replica's busy time spent on prompts (prefill)
    prefill_batch_tokens: int = 0  # prefill: 0 one prompt at a time, else the new-token budget of a pass
    batch_prompts: float = 1.0  # batched prefill: mean prompts in a full pass (k_B)
    batch_pass_ms: float = 0.0  # batched prefill: time of a full pass (S_B)
    weight_dtype: str = "bf16"  # the precision this config serves at (`optimizer.base.precision`)
    kv_dtype: str = "bf16"
    expert_parallel: bool = False  # experts sharded, attention data-parallel (`optimizer.serving.experts`)
    fabric: str = ""  # expert parallel: the fabric its all-to-all crosses (scale-up / scale-out)

    def batching(self) -> dict:
        """The batching arguments of `optimizer.curves.queueing`'s wait and capacity functions."""
        if not self.prefill_batch_tokens:
            return {}
        return {"full_prompts": self.batch_prompts, "full_pass_s": self.batch_pass_ms / MS_PER_S}

    def lane_rps(self) -> float:
        """Requests/s one replica's prefill lane completes when never idle: 1/S̄, or with
        batching k_B/S_B (full passes)."""
        if self.prefill_batch_tokens and self.batch_prompts > 1.0:
            return self.batch_prompts / (self.batch_pass_ms / MS_PER_S)
        return 1.0 / self.service_mean_s


def _lengths(w: Workload, m: Model):
    return (
        prompt_lengths(w, m.max_context),
        LengthDistribution(w.osl_mean_tokens, w.osl_p99_tokens, m.max_context),
    )


def _base(w: Workload, a: Accelerator, r: Replica, role: str, tag: str, s: Serving) -> dict:
    return dict(
        id=f"{w.id}/{a.id}/x{r.gpus}/{tag}{precision_tag(w, *r.precision)}",
        weight_dtype=r.precision[0],
        kv_dtype=r.precision[1],
        workload=w.id,
        gpu=a.id,
        gpus=r.gpus,
        role=role,
        nic_bytes_per_s=kv_receive_bytes_per_s(r) if r.attention_dp
        else replica_nic_bytes_per_s(r.gpus, r.hw.nic_bytes_per_s, r.eff.nic_efficiency),
        kv_budget_gb=kv_budget_bytes(r) / 1e9,
        weights_gb_per_gpu=r.weight_bytes / r.gpus / 1e9,
        **({"expert_parallel": True, "fabric": fabric(r)} if r.attention_dp else {}),
    )


def prefill_config(w: Workload, m: Model, a: Accelerator, r: Replica, s: Serving,
                   check_fit: bool = True, batch_tokens: int = 0) -> ServingConfig | None:
    """A dedicated prefill replica: FIFO prompts, one at a time or (``batch_tokens`` B > 0)
    packed into passes of up to B new tokens, cached prefixes resident (None, unless
    ``check_fit`` is off, where the p99 prompt — or a full pass — and the prefixes do not fit;
    None where a budget cannot hold two prompts of the mix on average).

    Batched: k_B prompts in a full pass of S_B (`prefill_batch.full_pass_s`) feed the queue
    (`optimizer.curves.queueing`); the p99 prefill is the pass the p99 prompt may ride in,
    `prefill_batch.p99_pass_s`."""
    isl, _ = _lengths(w, m)
    in_pass = max(w.isl_p99_tokens, batch_tokens)
    kv_need = (in_pass + s.resident_prefixes * w.shared_prefix_tokens) * r.kv_bytes_per_token * replica_kv_copies(r)
    if check_fit and kv_budget_bytes(r) < kv_need:
        return None
    cached_p99 = p99_cached_tokens(w.prompt_cache_hit_rate, w.shared_prefix_tokens, w.slo_attainment)
    p99_s = float(prefill_time_s(r, w.isl_p99_tokens, cached_p99))
    mean_s, scv, third = service_moments(lambda t, c: prefill_time_s(r, t, c), isl, w.prompt_cache_hit_rate,
                                         w.shared_prefix_tokens)
    batch = {}
    if batch_tokens > 0:
        prompts, pass_s = full_pass_s(r, isl, w.prompt_cache_hit_rate, w.shared_prefix_tokens, batch_tokens)
        if check_fit and prompts < MIN_BATCH_PROMPTS:
            return None
        p99_s = p99_pass_s(r, isl, w.prompt_cache_hit_rate, w.shared_prefix_tokens, batch_tokens, w.isl_p99_tokens,
                           cached_p99)
        batch = dict(prefill_batch_tokens=int(batch_tokens), batch_prompts=prompts, batch_pass_ms=pass_s * MS_PER_S)
    return ServingConfig(
        **_base(w, a, r, "prefill", f"prefill-b{batch_tokens}" if batch_tokens else "prefill", s),
        prefill_p99_ms=p99_s * MS_PER_S, service_mean_s=mean_s, service_scv=scv, service_third_ratio=third,
        input_share=1.0, **batch,
    )


def decode_config(w: Workload, m: Model, a: Accelerator, r: Replica, s: Serving, speculative: bool,
                  speed: float = 1.0) -> ServingConfig | None:
    """A decode replica at the largest batch whose p99 step (with tail factor) meets
    ``speed`` × the ITL objective — a faster operating point than needed trades GPUs for a
    shorter first step (it is in every request's TTFT)."""
    b_max = int(max_concurrency(r, w.isl_mean_tokens + w.osl_mean_tokens))
    step_of, _ = _decode_step(w, r, s, speculative)
    b, _ = decode_operating_point(step_of, b_max, speed * w.itl_p99_ms / MS_PER_S, s.itl_tail_factor)
    return decode_at(w, a, r, s, speculative, b, speed) if b else None


def _decode_step(w: Workload, r: Replica, s: Serving, speculative: bool):
    """(step time as a function of the batch, expected tokens per step) of a decode replica.

    Plain: step(b); speculative: T_spec(b) = verify(k+1) + k·ρ_d·step, E tokens per step."""
    context = w.isl_mean_tokens + w.osl_mean_tokens / 2.0
    spec = speculation(s, r.attention_dp)
    if speculative:
        def step_of(b):
            return speculative_step_time_s(r, b, context, spec.draft_tokens, spec.draft_cost_ratio)
        return step_of, float(expected_tokens_per_step(spec.acceptance_rate, spec.draft_tokens))

    def plain(b):
        return decode_step_time_s(r, b, context)
    return plain, 1.0


def decode_at(w: Workload, a: Accelerator, r: Replica, s: Serving, speculative: bool, batch: int,
              speed: float = 1.0) -> ServingConfig:
    """A decode replica at batch ``batch``: requests/s = ρ_max · b · E / (osl_mean · T)."""
    b_max = int(max_concurrency(r, w.isl_mean_tokens + w.osl_mean_tokens))
    step_of, per_step = _decode_step(w, r, s, speculative)
    step = float(step_of(batch))
    draft = ("+mtp" if r.attention_dp else "+spec") if speculative else ""
    tag = "decode" + ("-ep" if r.attention_dp else "") + draft + ("" if speed == 1.0 else f"@{speed:g}")
    return ServingConfig(
        **_base(w, a, r, "decode", tag, s), speed=speed,
        batch=batch, speculative=speculative, step_ms=step * MS_PER_S, itl_p99_ms=s.itl_tail_factor * step * MS_PER_S,
        tokens_per_step=per_step,
        decode_rps=s.decode_max_utilization * batch * per_step / (w.osl_mean_tokens * step),
        decode_tokens_per_s=batch * per_step / step, max_concurrency=b_max,
    )


def colocated_config(w: Workload, m: Model, a: Accelerator, r: Replica, s: Serving, chunk: int) -> ServingConfig | None:
    """A replica that prefills in chunks of C tokens inside its decode iterations: at most the
    largest batch whose p99 iteration (its chunk late in the prompt, `_iteration`) meets the
    ITL objective, held to where decode side and prefill lane balance
    (`batching.colocated_balance_batch`: a larger batch only lengthens every iteration) — the
    better of the balance batch and the one below it. A looser objective never serves less."""
    b, _ = decode_operating_point(_iteration(w, r, chunk, late=True), _colocated_ceiling(w, r, s),
                                  w.itl_p99_ms / MS_PER_S, s.itl_tail_factor)
    if not b:
        return None
    k = colocated_balance_batch(w.osl_mean_tokens, _chunks(w, m, chunk), s.decode_max_utilization,
                                s.prefill_max_utilization)
    configs = [colocated_at(w, m, a, r, s, chunk, x) for x in sorted({min(b, k), min(b, max(k - 1, 1))})]
    return max(configs, key=lambda c: min(c.decode_rps, s.prefill_max_utilization * c.lane_rps()))


def _iteration(w: Workload, r: Replica, chunk: int, late: bool = False):
    """Iteration time as a function of the batch, its chunk at mid-prompt (the mean) or, for
    the p99 gap, at the last full chunk of the mean prompt (``late``): chunk positions are
    uniform through a prompt, the chunk attending to nearly all of it is among the slowest."""
    context = w.isl_mean_tokens + w.osl_mean_tokens / 2.0
    chunk_context = max(w.isl_mean_tokens - chunk, 0.0) if late else w.isl_mean_tokens / 2.0

    def step_of(b):
        return mixed_step_time_s(r, b, context, chunk, chunk_context)
    return step_of


def _chunks(w: Workload, m: Model, chunk: int) -> float:
    """Mean chunks per prompt: E[⌈(s − s_c)/C⌉] over the prompt lengths and cache hits."""
    return service_moments(lambda t, c: np.ceil(np.maximum(np.asarray(t) - c, 1.0) / chunk), _lengths(w, m)[0],
                           w.prompt_cache_hit_rate, w.shared_prefix_tokens)[0]


def _colocated_ceiling(w: Workload, r: Replica, s: Serving) -> int:
    """The batch the KV budget holds beside the resident shared prefixes."""
    share = cache_kv_share(s.resident_prefixes, w.shared_prefix_tokens,
                           r.kv_bytes_per_token * replica_kv_copies(r), kv_budget_bytes(r))
    return int(max_concurrency(r, w.isl_mean_tokens + w.osl_mean_tokens, share))


def colocated_at(w: Workload, m: Model, a: Accelerator, r: Replica, s: Serving, chunk: int, batch: int) -> ServingConfig:
    """A colocated replica at batch ``batch``.

    iteration(b) = decode step + a full C-token chunk at mid-prompt (`mixed_step_time_s`);
    ITL p99 = tail · iteration with its chunk late (`_iteration`); a prompt's lane time is its
    chunks' iterations (`chunked_prefill_s`; the prefill lane's service time); decode
    requests/s = ρ_max · b / (osl_mean · iteration).

    Input share of the busy time (an estimate): a request's chunks cost its lane time less
    as many decode steps, its tokens osl · step(b) / b; the share is the first over the sum.
    """
    isl, _ = _lengths(w, m)
    context = w.isl_mean_tokens + w.osl_mean_tokens / 2.0
    iteration = float(_iteration(w, r, chunk)(batch))

    def service(tokens, cached):
        return chunked_prefill_s(r, batch, context, tokens, cached, chunk)

    cached_p99 = p99_cached_tokens(w.prompt_cache_hit_rate, w.shared_prefix_tokens, w.slo_attainment)
    mean_s, scv, third = service_moments(service, isl, w.prompt_cache_hit_rate, w.shared_prefix_tokens)
    decode_step = float(decode_step_time_s(r, batch, context))
    prompt_s = max(mean_s - _chunks(w, m, chunk) * decode_step, 0.0)
    tokens_s = w.osl_mean_tokens * decode_step / batch
    return ServingConfig(
        **_base(w, a, r, "colocated", f"colocated-c{chunk}", s),
        input_share=prompt_s / (prompt_s + tokens_s),
        batch=batch, chunk_tokens=chunk,
        prefill_p99_ms=float(service(w.isl_p99_tokens, cached_p99)[0]) * MS_PER_S,
        service_mean_s=mean_s, service_scv=scv, service_third_ratio=third,
        step_ms=iteration * MS_PER_S,
        itl_p99_ms=s.itl_tail_factor * float(_iteration(w, r, chunk, late=True)(batch)) * MS_PER_S,
        decode_rps=s.decode_max_utilization * batch / (w.osl_mean_tokens * iteration),
        decode_tokens_per_s=batch / iteration, max_concurrency=_colocated_ceiling(w, r, s),
    )


def config_precision(c, w: Workload) -> tuple[str, str]:
    """(weight, KV) precision of a config or a curves.csv row (one written before precisions were
    a choice has none: the workload's)."""
    get = (lambda k: getattr(c, k, None)) if isinstance(c, ServingConfig) else (lambda k: c.get(k))
    weight, kv = get("weight_dtype"), get("kv_dtype")
    if not isinstance(weight, str) or not isinstance(kv, str) or not weight or not kv:
        return w.weight_dtype, w.kv_dtype
    return weight, kv


def config_at(c, s: Scenario) -> ServingConfig | None:
    """A plan's config ``c`` (a `ServingConfig` or a curves.csv row: workload, gpu, gpus,
    role, batch, chunk_tokens, speculative, speed, prefill_batch_tokens) evaluated under scenario ``s`` with its
    decisions held: what the same replicas do when an estimate behind them changes
    (`optimizer.commands.stress`). The batch drops to what the KV budget still holds; None where the
    weights no longer fit."""
    get = (lambda k: getattr(c, k)) if isinstance(c, ServingConfig) else (lambda k: c[k])
    w = s.workloads[get("workload")]
    m, a = s.models[w.model], s.accelerators[get("gpu")]
    r = make_replica(m, a, s.serving, int(get("gpus")), *config_precision(c, w),
                     expert_parallel=str(get("expert_parallel")).lower() in ("true", "1", "1.0"))
    if r is None or kv_budget_bytes(r) <= 0:
        return None
    role = get("role")
    if role == Role.PREFILL:
        return prefill_config(w, m, a, r, s.serving, check_fit=False, batch_tokens=int(get("prefill_batch_tokens")))
    if role == Role.DECODE:
        ceiling = int(max_concurrency(r, w.isl_mean_tokens + w.osl_mean_tokens))
        batch = max(min(int(get("batch")), ceiling), 1)
        return decode_at(w, a, r, s.serving, str(get("speculative")).lower() in ("true", "1", "1.0"), batch,
                         float(get("speed")))
    batch = max(min(int(get("batch")), _colocated_ceiling(w, r, s.serving)), 1)
    return colocated_at(w, m, a, r, s.serving, int(get("chunk_tokens")), batch)


def workload_configs(w: Workload, m: Model, a: Accelerator, s: Serving) -> list[ServingConfig]:
    """Every admissible config of workload ``w`` on accelerator ``a``, at each precision the
    workload accepts and the part serves (`Workload.precisions`)."""
    out: list[ServingConfig] = []
    for gpus, (weight, kv) in ((g, p) for p in w.precisions for g in parallel_degrees(m, a, s)):
        r = make_replica(m, a, s, gpus, weight, kv)
        if r is None or kv_budget_bytes(r) <= 0:
            continue
        if "disaggregated" in s.modes:
            out += [prefill_config(w, m, a, r, s, batch_tokens=b) for b in [0, *s.prefill_batch_tokens]]
            for speed in s.decode_speeds:
                out.append(decode_config(w, m, a, r, s, speculative=False, speed=speed))
                if s.speculative.enabled:
                    out.append(decode_config(w, m, a, r, s, speculative=True, speed=speed))
        if "colocated" in s.modes:
            out.extend(colocated_config(w, m, a, r, s, c) for c in s.colocated_chunk_tokens)
    return [c for c in out + _expert_parallel_configs(w, m, a, s) if c is not None]


def _expert_parallel_configs(w: Workload, m: Model, a: Accelerator, s: Serving) -> list[ServingConfig | None]:
    """Expert-parallel decode replicas (disaggregated only: their prompts are prefilled by the
    workload's prefill pools), plain and with MTP where enabled."""
    if "disaggregated" not in s.modes:
        return []
    out = []
    for gpus, (weight, kv) in ((g, p) for p in w.precisions for g in ep_degrees(m, a, s)):
        r = make_replica(m, a, s, gpus, weight, kv, expert_parallel=True)
        if r is None or kv_budget_bytes(r) <= 0:
            continue
        for speed in s.decode_speeds:
            out += [decode_config(w, m, a, r, s, spec, speed) for spec in (False, True)[:1 + s.expert_parallel.mtp.enabled]]
    return out


def decode_floor_ms(w: Workload, m: Model, a: Accelerator, s: Serving) -> float:
    """Lowest p99 inter-token gap any replica of ``m`` on ``a`` can reach (batch 1): used to
    say by how much an ITL objective is out of reach."""
    best = math.inf
    for gpus, (weight, kv) in ((g, p) for p in w.precisions for g in parallel_degrees(m, a, s)):
        r = make_replica(m, a, s, gpus, weight, kv)
        if r is None or kv_budget_bytes(r) <= 0:
            continue
        best = min(best, s.itl_tail_factor * float(decode_step_time_s(r, 1.0, w.isl_mean_tokens + w.osl_mean_tokens / 2)) * MS_PER_S)
    return best
