"""KV transfer between disaggregated prefill and decode replicas (curve 10)."""

from __future__ import annotations

import numpy as np


def replica_nic_bytes_per_s(gpus: int, nic_bytes_per_s_per_gpu: float, link_efficiency: float) -> float:
    """Scale-out bandwidth of a replica: every GPU's NIC carries its shard of the KV."""
    return gpus * nic_bytes_per_s_per_gpu * link_efficiency


def kv_transfer_time_s(tokens, kv_bytes_per_token: float, bytes_per_s: float, latency_s: float = 0.0):
    """Time to move a prompt's KV from the prefill to the decode replica:
    latency + s·kv / bw, with bw the slower side's replica NIC bandwidth."""
    return latency_s + np.asarray(tokens, dtype=float) * kv_bytes_per_token / bytes_per_s
