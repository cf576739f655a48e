"""Plain physical descriptions the curves work on: a model, a GPU, efficiencies, a replica.

Everything here is in base units (parameters as counts, bytes, FLOP/s, bytes/s, seconds) so
the formulas in the other curve modules read as written in DESIGN.md. The scenario layer
(`optimizer.serving.configs`) converts catalogue rows (billions, GB, TB/s, ms) into these.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class ModelShape:
    """Architecture of a transformer, as the roofline needs it.

    For MoE models the routed experts are ``experts`` per layer with ``experts_per_token``
    active; ``params_total`` drives memory, ``params_active`` drives FLOPs.
    Attention is ``gqa`` (grouped-query; MHA is gqa with kv_heads = heads) or ``mla``
    (multi-head latent attention: one latent of ``kv_lora_rank`` plus a rotary part of
    ``qk_rope_head_dim`` is cached per token and layer).
    """

    params_total: float
    params_active: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    attention: str = "gqa"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    experts: int = 0
    experts_per_token: int = 0
    max_context: int = 131_072

    @property
    def is_moe(self) -> bool:
        return self.experts > 0 and self.experts_per_token > 0

    @property
    def kv_values_per_token_per_layer(self) -> int:
        """GQA: 2·n_kv·d_h (K and V); MLA: r_kv + d_rope (one latent plus rotary key)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def attention_dims(self) -> tuple[int, int]:
        """(d_qk, d_v) per head as seen by the attention matmuls.

        MLA in its absorbed (decode) form scores against the latent plus the rotary part and
        reads values from the latent.
        """
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim, self.kv_lora_rank
        return self.head_dim, self.head_dim

    @cached_property
    def params_per_expert(self) -> float:
        """Parameters of one routed expert over all layers: e = (N − N_a) / (E − k)."""
        if not self.is_moe:
            return 0.0
        return (self.params_total - self.params_active) / (self.experts - self.experts_per_token)

    @cached_property
    def params_always_read(self) -> float:
        """Parameters every token touches (attention, embeddings, shared experts): N − E·e."""
        return self.params_total - self.experts * self.params_per_expert


@dataclass(frozen=True)
class Hardware:
    """One accelerator at the serving precision.

    ``scaleup_bytes_per_s`` is one direction per GPU (half the bidirectional figure
    vendors quote); ``nic_bytes_per_s`` is the scale-out bandwidth per GPU.
    """

    dense_flops_per_s: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    scaleup_domain_gpus: int
    scaleup_bytes_per_s: float
    nic_bytes_per_s: float
    gpus_per_node: int


@dataclass(frozen=True, kw_only=True)  # keyword-only: the fields stay grouped by what they cost
class Efficiency:
    """Achieved fractions of peak and fixed costs of one accelerator (× engine × dtype).

    The values come from a calibration (`optimizer.scenario.calibration.params`: meanings, bounds and
    the shipped defaults with their sources) unless the scenario's `Serving` overrides them.
    ``prefill_mfu`` is the efficiency of a large prefill pass, reached as
    η(s) = prefill_mfu · s / (s + prefill_half_tokens) for s tokens in the pass.
    Collectives (`optimizer.curves.roofline.collective_s`) take the faster of a low-latency
    protocol (latency ``collective_latency_s``, a share ``small_link_share`` of the bulk
    bandwidth) and a bulk one (``bulk_extra_latency_s`` more latency, ``link_efficiency`` of
    the link); on a PCIe-only part, replicas of more than ``pcie_p2p_gpus`` GPUs route them
    through the host. ``nic_efficiency`` is the share of the scale-out NIC that KV transfers
    and collectives across nodes reach (not fitted: no measured table covers them);
    ``alltoall_nic_efficiency`` and ``scaleout_latency_s`` the share and the hop latency of an
    expert-parallel all-to-all across nodes, ``alltoall_scaleup_latency_s`` its hop on the
    scale-up fabric (None: ``collective_latency_s``) (`optimizer.curves.expert_parallel`).
    """

    prefill_mfu: float
    prefill_half_tokens: float = 0.0
    decode_mbu: float
    decode_mfu: float
    step_overhead_s: float
    layer_overhead_s: float = 0.0
    usable_hbm_fraction: float
    workspace_bytes_per_gpu: float
    collective_latency_s: float
    bulk_extra_latency_s: float = 0.0
    link_efficiency: float
    small_link_share: float = 1.0
    pcie_p2p_gpus: int = 8
    nic_efficiency: float = 0.7
    alltoall_nic_efficiency: float = 0.7
    alltoall_scaleup_latency_s: float | None = None
    scaleout_latency_s: float = 10e-6
    roofline_sharpness: float
    attention_factor: float = 1.0
    moe_load_factor: float = 1.0


@dataclass(frozen=True)
class Replica:
    """A model served on ``gpus`` accelerators (tensor/expert parallel degree p)."""

    model: ModelShape
    hw: Hardware
    eff: Efficiency
    gpus: int
    weight_bytes_per_param: float = 2.0
    kv_bytes_per_value: float = 2.0
    activation_bytes_per_value: float = 2.0
    precision: tuple[str, str] = ("bf16", "bf16")  # (weight, KV) format names, for labels; the bytes above count
    attention_dp: bool = False  # expert parallel: experts sharded, attention replicated per GPU (`expert_parallel`)

    @property
    def weight_bytes(self) -> float:
        """N·β_w; with attention data-parallelism every GPU holds the always-read weights and the
        experts are sharded: (p·(N − E·e) + E·e)·β_w."""
        m = self.model
        if self.attention_dp and m.is_moe:
            experts = m.experts * m.params_per_expert
            return (self.gpus * m.params_always_read + experts) * self.weight_bytes_per_param
        return m.params_total * self.weight_bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.layers * self.model.kv_values_per_token_per_layer * self.kv_bytes_per_value

    @property
    def link_bytes_per_s(self) -> float:
        """Bandwidth a collective sees: the scale-up link (NVLink, Infinity Fabric, or PCIe
        where a part has no such link) while the replica stays inside one node or scale-up
        domain, else the scale-out NIC."""
        if self.gpus <= max(self.hw.scaleup_domain_gpus, self.hw.gpus_per_node):
            return self.hw.scaleup_bytes_per_s * self.eff.link_efficiency
        return self.hw.nic_bytes_per_s * self.eff.nic_efficiency
