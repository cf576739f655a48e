"""Prefill and decode time from the roofline, with tensor/expert-parallel communication
(curves 3–4 and the MoE all-to-all).

Symbols: N params (N_a active), L layers, n_h query heads, (d_qk, d_v) attention dims per
head, kv bytes per token, β_w bytes per weight, p GPUs per replica, F dense FLOP/s,
B HBM bytes/s, η_c / η_m compute / memory efficiencies, τ₀ per-pass overhead, κ the
attention cost factor, λ the MoE expert-load factor (parameters: `Efficiency`,
`optimizer.scenario.calibration.params`).

Prefill efficiency depends on the tokens s in one forward pass (small GEMMs are
inefficient): η(s) = η_max · s / (s + s½). The per-pass overhead τ₀ applies to prefill passes
as to decode steps.

Where memory and compute times are comparable (near the ridge point) kernels overlap them
imperfectly, so the two are combined with a smooth maximum
    smax(a, b) = (a^q + b^q)^(1/q),
which is the pure max() for q → ∞ and costs 2^(1/q) × max at the ridge itself. q is the
`roofline_sharpness` efficiency setting, calibrated against published measurements in
`benchmarks/curves_vs_published.py`.
"""

from __future__ import annotations

import numpy as np

from optimizer.curves.expert_parallel import ep_comms_s
from optimizer.curves.memory import replica_kv_copies
from optimizer.curves.shapes import ModelShape, Replica


def pass_overhead_s(replica: Replica) -> float:
    """Fixed cost of one forward pass: τ₀ + L·τ_L (per-layer kernels and synchronisation the
    roofline does not see; τ_L = ``layer_overhead_s``)."""
    return replica.eff.step_overhead_s + replica.model.layers * replica.eff.layer_overhead_s


def smooth_max(a, b, sharpness: float):
    """(a^q + b^q)^(1/q); the pure maximum when q is infinite."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if np.isinf(sharpness):
        return np.maximum(a, b)
    top = np.maximum(np.maximum(a, b), 1e-300)
    return top * ((a / top) ** sharpness + (b / top) ** sharpness) ** (1.0 / sharpness)


def attention_flops(model: ModelShape, tokens, cached_tokens=0):
    """Causal attention of the new queries over all keys: L·n_h·(d_qk + d_v)·(s² − s_c²)
    (each query–key pair costs 2·d_qk for the score and 2·d_v for the value product, halved
    by causality)."""
    s = np.asarray(tokens, dtype=float)
    sc = np.minimum(np.asarray(cached_tokens, dtype=float), s)
    d_qk, d_v = model.attention_dims
    return model.layers * model.heads * (d_qk + d_v) * (s * s - sc * sc)


def linear_flops(model: ModelShape, tokens, moe_load_factor: float = 1.0):
    """2·N_a·t for t tokens; in a MoE model the routed experts' share 2·k·e·t counts λ times
    (the step waits for the busiest expert)."""
    active = model.params_active + (moe_load_factor - 1.0) * model.experts_per_token * model.params_per_expert
    return 2.0 * active * np.asarray(tokens, dtype=float)


def prefill_flops(model: ModelShape, tokens, cached_tokens=0):
    """FLOPs to prefill ``tokens`` of which the first ``cached_tokens`` are in the prompt cache.

    FLOPs = 2·N_a·(s − s_c) + L·n_h·(d_qk + d_v)·(s² − s_c²)
    (linear layers on new tokens; `attention_flops` of the new queries over all keys).
    """
    s = np.asarray(tokens, dtype=float)
    sc = np.minimum(np.asarray(cached_tokens, dtype=float), s)
    return linear_flops(model, s - sc) + attention_flops(model, s, sc)


def prefill_efficiency(eff, tokens_in_pass):
    """Compute efficiency of a prefill pass over s tokens: η(s) = η_max · s / (s + s½).

    Equivalently the pass costs as if s½ more tokens went through the linear layers at
    η_max: the fixed part of small GEMMs (weight loads, tile quantisation, launches).
    """
    s = np.maximum(np.asarray(tokens_in_pass, dtype=float), 1.0)
    return eff.prefill_mfu * s / (s + eff.prefill_half_tokens)


def prefill_compute_s(replica: Replica, tokens, cached_tokens=0, prompts=1):
    """Compute time of one pass over ``prompts`` prompts of ``tokens`` (``cached_tokens``
    of each already cached): prompts · (2·N_a'·(s − s_c) + κ·attention) / (p·F·η(prompts·(s − s_c)))."""
    s = np.asarray(tokens, dtype=float)
    sc = np.minimum(np.asarray(cached_tokens, dtype=float), s)
    eff = replica.eff
    flops = prompts * (linear_flops(replica.model, s - sc, eff.moe_load_factor)
                       + eff.attention_factor * attention_flops(replica.model, s, sc))
    return flops / (replica.gpus * replica.hw.dense_flops_per_s * prefill_efficiency(eff, prompts * (s - sc)))


def host_routed(replica: Replica) -> bool:
    """True when a replica's collectives pass through the host: a part without a scale-up
    fabric (PCIe only) whose replica spans more GPUs than exchange data peer-to-peer under
    one PCIe switch (``pcie_p2p_gpus``)."""
    return replica.hw.scaleup_domain_gpus <= 1 and 1 < replica.gpus <= replica.hw.gpus_per_node \
        and replica.gpus > replica.eff.pcie_p2p_gpus


def collective_s(replica: Replica, per_gpu_bytes):
    """One collective in which every GPU of the replica sends ``per_gpu_bytes`` bytes b.

    Over a switched fabric (NVLink, Infinity Fabric, PCIe peer-to-peer) each GPU sends over
    its own link of bandwidth B·η (`Replica.link_bytes_per_s`): latency a = α, bytes on the
    busiest link v = b.  Through the host (`host_routed`) the p GPUs share one PCIe link and
    a ring pays one latency per step: a = α·(p − 1), v = p·b.  The library picks the faster
    of two protocols,

        min(a + v / (r·B·η),  a + Δα + v / (B·η))

    a low-latency one (a share r of the bulk bandwidth) for small messages and a bulk one
    (Δα more latency) for large ones — why the mid-size messages of decode at large batches
    cost more than one latency + bandwidth line through both ends gives.
    """
    b = np.asarray(per_gpu_bytes, dtype=float)
    eff = replica.eff
    bw = replica.link_bytes_per_s
    latency, volume = eff.collective_latency_s, b
    if host_routed(replica):
        latency, volume = latency * (replica.gpus - 1), replica.gpus * b
    return np.minimum(latency + volume / (eff.small_link_share * bw), latency + eff.bulk_extra_latency_s + volume / bw)


def collective_time_s(replica: Replica, tokens):
    """Communication per forward pass of ``tokens`` tokens across the p GPUs of a replica.

    Dense models do two ring all-reduces per layer (attention and MLP outputs) of
    m = tokens·hidden·β_act bytes, each GPU sending 2(p−1)/p · m.  MoE models do one
    all-reduce (attention) and an all-to-all dispatch + combine per layer, each GPU sending
    tokens·k·hidden·β_act/p · (p−1)/p bytes each way; expert-parallel replicas with attention
    data-parallelism only the all-to-all (`expert_parallel.ep_comms_s`).  B is the scale-up link when the
    replica fits the scale-up domain, else the scale-out NIC (`Replica.link_bytes_per_s`);
    the time of one collective is `collective_s`.  In decode the 2·L latency terms dominate
    — why achieved MBU falls as p grows.
    """
    p = replica.gpus
    t = np.asarray(tokens, dtype=float)
    if p <= 1:
        return np.zeros_like(t)
    if replica.attention_dp:
        return ep_comms_s(replica, t)
    m = replica.model
    message = t * m.hidden * replica.activation_bytes_per_value
    allreduce = collective_s(replica, 2.0 * (p - 1) / p * message)
    if not m.is_moe:
        return 2.0 * m.layers * allreduce
    per_gpu = message * m.experts_per_token / p * (p - 1) / p
    return m.layers * (allreduce + 2.0 * collective_s(replica, per_gpu))


def prefill_time_s(replica: Replica, tokens, cached_tokens=0, prompts=1):
    """Time of one prefill pass over ``prompts`` prompts of s tokens (one prompt: its TTFT
    share):

    τ₀ + smax(`prefill_compute_s`,  N·β_w / (p·B·η_m)) + TP/EP communication of the new tokens.
    """
    p = replica.gpus
    compute = prefill_compute_s(replica, tokens, cached_tokens, prompts)
    memory = replica.weight_bytes / (p * replica.hw.hbm_bytes_per_s * replica.eff.decode_mbu)
    new_tokens = np.maximum(np.asarray(tokens, dtype=float) - np.asarray(cached_tokens, dtype=float), 1.0)
    return (pass_overhead_s(replica) + smooth_max(compute, memory, replica.eff.roofline_sharpness)
            + collective_time_s(replica, prompts * new_tokens))


def weight_bytes_read(replica: Replica, tokens_in_step):
    """Weights one decode step reads.

    Dense: all of N·β_w. MoE: the always-read part plus the distinct experts the step's
    tokens route to; with E experts, top-k routing and T tokens the expected share of
    experts touched per layer is 1 − (1 − k/E)^T, so small batches read few experts. With
    attention data-parallelism each of the p GPUs reads its own copy of the always-read part.
    """
    m = replica.model
    beta = replica.weight_bytes_per_param
    if not m.is_moe:
        return np.full_like(np.asarray(tokens_in_step, dtype=float), m.params_total * beta)
    t = np.asarray(tokens_in_step, dtype=float)
    touched = 1.0 - (1.0 - m.experts_per_token / m.experts) ** t
    copies = replica.gpus if replica.attention_dp else 1  # attention data-parallel: each GPU reads its own copy
    return (copies * m.params_always_read + m.experts * m.params_per_expert * touched) * beta


def decode_step_parts(replica: Replica, batch, context_tokens, tokens_per_sequence=1):
    """(memory s, compute s, communication s) of one decode step; see `decode_step_time_s`."""
    m = replica.model
    p = replica.gpus
    b = np.asarray(batch, dtype=float)
    c = np.asarray(context_tokens, dtype=float)
    tokens = b * tokens_per_sequence
    eff = replica.eff
    kv_read = eff.attention_factor * b * c * replica.kv_bytes_per_token * replica_kv_copies(replica)
    memory = (weight_bytes_read(replica, tokens) + kv_read) / (p * replica.hw.hbm_bytes_per_s * eff.decode_mbu)
    d_qk, d_v = m.attention_dims
    flops = (linear_flops(m, tokens, eff.moe_load_factor)
             + eff.attention_factor * tokens * m.layers * m.heads * (d_qk + d_v) * 2.0 * c)
    compute = flops / (p * replica.hw.dense_flops_per_s * eff.decode_mfu)
    return memory, compute, collective_time_s(replica, tokens)


def decode_step_time_s(replica: Replica, batch, context_tokens, tokens_per_sequence=1):
    """One decode step for ``batch`` sequences of mean context c (curve 4):

    τ₀ + smax((W_read(b·q) + κ·b·c·kv·r) / (p·B·η_m),
              (2·N_a'·b·q + κ·b·q·L·n_h·(d_qk + d_v)·2c) / (p·F·η_c)) + comms(b·q)

    q = tokens per sequence verified in the step (1 normally, k+1 for speculative verify);
    r = KV replication across the p GPUs; N_a' the active parameters with the routed experts
    × λ (`linear_flops`). Per-user ITL = step; replica tokens/s = b / step.
    """
    memory, compute, comms = decode_step_parts(replica, batch, context_tokens, tokens_per_sequence)
    return pass_overhead_s(replica) + smooth_max(memory, compute, replica.eff.roofline_sharpness) + comms


def decode_floor_s(replica: Replica):
    """The physical floor of a decode step: the weights a one-token step must read over the
    replica's bandwidth, N_read(1)·β_w / (p·B·η_m). No batch or context makes a step shorter."""
    return float(weight_bytes_read(replica, 1.0)) / (
        replica.gpus * replica.hw.hbm_bytes_per_s * replica.eff.decode_mbu
    )


def mixed_step_time_s(replica: Replica, batch, context_tokens, chunk_tokens, chunk_context_tokens):
    """One colocated iteration (chunked prefill): decode ``batch`` sequences and prefill a
    chunk of C prompt tokens whose first ``chunk_context_tokens`` are already in KV:

    τ₀ + smax(mem_decode(b) + κ·ctx·kv·r/(p·B·η_m),
              comp_decode(b) + `prefill_compute_s`(ctx + C | ctx cached)) + comms(b + C)

    This is the iteration a decode token waits for whenever a prompt is being prefilled
    beside it — the ITL interference of colocated serving.
    """
    p = replica.gpus
    memory, compute, _ = decode_step_parts(replica, batch, context_tokens)
    ctx = np.asarray(chunk_context_tokens, dtype=float)
    compute = compute + prefill_compute_s(replica, ctx + chunk_tokens, ctx)
    memory = memory + replica.eff.attention_factor * ctx * replica.kv_bytes_per_token * replica_kv_copies(replica) / (
        p * replica.hw.hbm_bytes_per_s * replica.eff.decode_mbu
    )
    tokens = np.asarray(batch, dtype=float) + chunk_tokens
    return (
        pass_overhead_s(replica)
        + smooth_max(memory, compute, replica.eff.roofline_sharpness)
        + collective_time_s(replica, tokens)
    )
