"""KV-cache size, the KV budget of a replica, and its concurrency ceiling (curves 1–2)."""

from __future__ import annotations

import numpy as np

from optimizer.curves.shapes import ModelShape, Replica


def kv_bytes_per_token(model: ModelShape, kv_bytes_per_value: float) -> float:
    """KV bytes cached per token over all layers.

    GQA/MHA: 2·L·n_kv·d_h·β_kv.   MLA: L·(r_kv + d_rope)·β_kv.
    Llama-3.1-70B at bf16: 2·80·8·128·2 = 327,680 B.
    """
    return model.layers * model.kv_values_per_token_per_layer * kv_bytes_per_value


def kv_replication(model: ModelShape, gpus: int) -> float:
    """How many copies of each KV head a tensor-parallel replica stores.

    With p > n_kv GPUs, GQA heads are replicated p / n_kv times (each GPU needs the head its
    queries use). MLA is assumed served with data-parallel attention, so its latent is not
    replicated.
    """
    if model.attention == "mla":
        return 1.0
    return max(1.0, gpus / model.kv_heads)


def replica_kv_copies(replica: Replica) -> float:
    """`kv_replication` of a replica; 1 with attention data-parallelism, where each GPU runs
    whole attention for its own sequences and holds their KV alone."""
    return 1.0 if replica.attention_dp else kv_replication(replica.model, replica.gpus)


def kv_budget_bytes(replica: Replica) -> float:
    """M_kv = p·H·u − N·β_w − p·workspace: HBM left for KV after weights and scratch.

    No replica exists where M_kv ≤ 0 (the weights do not fit).
    """
    p = replica.gpus
    return (
        p * replica.hw.hbm_bytes * replica.eff.usable_hbm_fraction
        - replica.weight_bytes
        - p * replica.eff.workspace_bytes_per_gpu
    )


def weights_fit(replica: Replica) -> bool:
    return kv_budget_bytes(replica) > 0


def max_concurrency(replica: Replica, context_tokens, cache_share=0.0):
    """Concurrency ceiling b_max = ⌊M_kv·(1 − cache share) / (kv·r·context)⌋.

    ``cache_share`` is the fraction of the KV budget held by resident shared prefixes
    (prompt cache); r is the KV replication of `kv_replication`. Zero where nothing fits.
    """
    budget = max(kv_budget_bytes(replica), 0.0)
    per_seq = replica.kv_bytes_per_token * replica_kv_copies(replica)
    per_seq = per_seq * np.maximum(np.asarray(context_tokens, dtype=float), 1.0)
    share = np.clip(np.asarray(cache_share, dtype=float), 0.0, 1.0)
    return np.floor(budget * (1.0 - share) / per_seq).astype(int)
