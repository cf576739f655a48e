"""Expert parallelism (EP) with attention data-parallelism: the all-to-all of a MoE layer and
the fabric it crosses.

An EP replica of p GPUs shards the E routed experts over its GPUs and runs attention (and the
always-read weights: embeddings, dense layers, shared experts) whole on every GPU, each GPU on
its own sequences (attention data-parallelism, DP = p). A decode step of t tokens puts t/p on
each GPU; every MoE layer dispatches each token's hidden state to the GPUs of its k experts and
combines their k outputs back, so per token

    bytes dispatched and combined = 2 · k · h · β_act

(β_act the activation bytes per value: 2 at bf16; DeepEP's FP8 dispatch would halve the first
half). Of a GPU's v = (t/p) · 2·k·h·β_act bytes a layer, the share (p − 1)/p goes to other GPUs.

Fabric. While the replica fits one scale-up group of g GPUs (an NVLink domain — 72 GPUs in an
NVL72 rack, 8 in an HGX node — or a PCIe node) all of it crosses the scale-up links:

    layer time = 2·α_up + v·(p − 1)/p / (B_up·η_link)

Beyond it (wide EP over whole nodes) the share (p − g)/p leaves the node over the GPU's
scale-out NIC while (g − 1)/p stays on the scale-up links, the two in parallel:

    layer time = 2·α_out + max(v·(p − g)/p / (B_nic·η_nic),  v·(g − 1)/p / (B_up·η_link))

α is the latency per hop (one for the dispatch, one for the combine): ``alltoall_scaleup_latency_s``
on the scale-up fabric (by default the calibrated collective latency), ``scaleout_latency_s``
over the NICs; η_nic is ``alltoall_nic_efficiency`` (the hops and η_nic fitted to measured
decode steps: `optimizer.commands.calibrate.alltoall`). A decode step pays L
layers of it (all layers counted as MoE layers: DeepSeek-V3's 3 dense of 61 are overstated).
There is no all-reduce: attention is whole on each GPU.
"""

from __future__ import annotations

import numpy as np

from optimizer.curves.shapes import ModelShape, Replica

SCALE_UP = "scale-up"
SCALE_OUT = "scale-out"


def alltoall_bytes_per_token(model: ModelShape, activation_bytes_per_value: float) -> float:
    """Bytes one token sends through one MoE layer's dispatch and combine: 2·k·h·β_act."""
    return 2.0 * model.experts_per_token * model.hidden * activation_bytes_per_value


def scaleup_group_gpus(replica: Replica) -> int:
    """GPUs that reach each other over the scale-up links: the NVLink domain, else the node."""
    return max(replica.hw.scaleup_domain_gpus, replica.hw.gpus_per_node)


def fabric(replica: Replica) -> str:
    """Which fabric the replica's all-to-all crosses: scale-up inside one group, else scale-out."""
    return SCALE_UP if replica.gpus <= scaleup_group_gpus(replica) else SCALE_OUT


def alltoall_layer_s(replica: Replica, tokens):
    """Dispatch + combine of one MoE layer for ``tokens`` tokens of the whole replica (module
    docstring)."""
    p = replica.gpus
    t = np.asarray(tokens, dtype=float)
    eff = replica.eff
    v = t / p * alltoall_bytes_per_token(replica.model, replica.activation_bytes_per_value)
    up = replica.hw.scaleup_bytes_per_s * eff.link_efficiency
    g = scaleup_group_gpus(replica)
    if p <= g:
        hop = eff.collective_latency_s if eff.alltoall_scaleup_latency_s is None else eff.alltoall_scaleup_latency_s
        return 2.0 * hop + v * (p - 1) / p / up
    out = replica.hw.nic_bytes_per_s * eff.alltoall_nic_efficiency
    return 2.0 * eff.scaleout_latency_s + np.maximum(v * (p - g) / p / out, v * (g - 1) / p / up)


def ep_comms_s(replica: Replica, tokens):
    """All-to-all time of one forward pass of ``tokens`` tokens: L · `alltoall_layer_s`."""
    return replica.model.layers * alltoall_layer_s(replica, tokens)
