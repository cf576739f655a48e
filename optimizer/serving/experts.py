"""Which expert-parallel (EP) replicas a MoE model is offered, and what speculation and NIC
bandwidth they run with (``serving.expert_parallel``, off by default).

- EP degrees: each listed degree that fits one scale-up group (the NVLink domain — 72 GPUs in an
  NVL72 rack — or the node) or is a whole number of nodes (wide EP over the scale-out NICs);
  only MoE models.
- An EP replica is a decode replica (attention data-parallel, experts sharded;
  `optimizer.curves.expert_parallel`); its prompts are prefilled by the workload's prefill pools,
  which may span nodes themselves (MoE replicas of whole nodes), the KV crossing the scale-out
  NIC: multi-node disaggregated prefill and decode.
- A request's KV lands on the one GPU whose attention serves it, so its transfer runs at one
  GPU's NIC, not the replica's.
- Speculation on an EP replica is the model's MTP module (``expert_parallel.mtp``), not a
  separate draft model.
"""

from __future__ import annotations

from optimizer.curves.shapes import Replica
from optimizer.scenario import Accelerator, Model, Serving


def ep_degrees(m: Model, a: Accelerator, s: Serving) -> list[int]:
    """EP degrees (GPUs per replica) offered to model ``m`` on ``a``: none unless the section is
    enabled and the model routes experts; else each listed degree g with g ≤ the scale-up group
    or g a multiple of the node."""
    ep = s.expert_parallel
    if not ep.enabled or not m.experts:
        return []
    group = max(a.scaleup_domain_gpus, a.gpus_per_node)
    return sorted({g for g in ep.gpus if g <= group or g % a.gpus_per_node == 0})


def speculation(s: Serving, expert_parallel: bool):
    """The speculation settings (draft_tokens, acceptance_rate, draft_cost_ratio) of a config:
    MTP on an expert-parallel replica, the draft model of ``serving.speculative`` elsewhere."""
    return s.expert_parallel.mtp if expert_parallel else s.speculative


def kv_receive_bytes_per_s(r: Replica) -> float:
    """Scale-out bandwidth a request's KV reaches an EP replica at: the NIC of the one GPU that
    holds it, B_nic·η_nic."""
    return r.hw.nic_bytes_per_s * r.eff.nic_efficiency
