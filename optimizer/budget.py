"""The TTFT path: where a request's time-to-first-token goes — one definition for the budget
the plan sizes its pools with, the p99s it predicts (slo.csv) and the stress test.

Disaggregated (prefill and decode replicas apart):
    TTFT = RTT + overheads + queue + prefill(p99 prompt) + KV transfer + first token
    KV transfer = KV of the p99 prompt over the slower replica's NIC + its latency
    first token = the decode replica's join wait (≤ one step) + its p99 step
                = (1 + tail) · step
Colocated (chunked prefill inside decode iterations):
    TTFT = RTT + overheads + queue + ⌈(s − cached)/C⌉ · iteration   (the last chunk emits it)

For the budget, the queue is what is left of the objective after everything else (the
queueing budget; the path is feasible when it is ≥ 0); for a prediction, it is the pool's
p99 wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.configs import ServingConfig
from optimizer.curves.transfer import kv_transfer_time_s
from optimizer.scenario import Scenario, Workload
from optimizer.units import MS_PER_S, Role, ServingMode


@dataclass(frozen=True)
class TtftPath:
    """The parts of a p99 TTFT, in ms."""

    mode: str
    network_ms: float
    overhead_ms: float
    queue_ms: float
    prefill_ms: float
    transfer_ms: float = 0.0
    first_token_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.network_ms + self.overhead_ms + self.queue_ms + self.prefill_ms + self.transfer_ms + self.first_token_ms


def first_token_ms(decode_step_ms: float, tail_factor: float) -> float:
    """The decode side's share of TTFT: joining the running batch (≤ one step) + a p99 step."""
    return (1.0 + tail_factor) * decode_step_ms


def transfer_ms(w: Workload, kv_bytes_per_token: float, nic_bytes_per_s: float, latency_ms: float) -> float:
    """KV of the p99 prompt over a NIC of ``nic_bytes_per_s`` (the slower of the two replicas')."""
    return float(kv_transfer_time_s(w.isl_p99_tokens, kv_bytes_per_token, nic_bytes_per_s, latency_ms / MS_PER_S)) * MS_PER_S


def disaggregated_path(s: Scenario, network_ms: float, queue_ms: float, prefill_ms: float, transfer: float,
                       decode_step_ms: float) -> TtftPath:
    return TtftPath(ServingMode.DISAGGREGATED, network_ms, s.serving.fixed_overhead_ms, queue_ms, prefill_ms, transfer,
                    first_token_ms(decode_step_ms, s.serving.itl_tail_factor))


def colocated_path(s: Scenario, network_ms: float, queue_ms: float, prefill_ms: float) -> TtftPath:
    return TtftPath(ServingMode.COLOCATED, network_ms, s.serving.fixed_overhead_ms, queue_ms, prefill_ms)


@dataclass(frozen=True)
class Waterfall:
    """A TTFT budget: the path with no queue, and what is left for queueing."""

    workload: str
    prefill_config: str
    decode_config: str
    path: TtftPath
    ttft_p99_ms: float

    @property
    def queue_budget_ms(self) -> float:
        return self.ttft_p99_ms - self.path.total_ms

    @property
    def feasible(self) -> bool:
        return self.queue_budget_ms >= 0

    mode = property(lambda self: self.path.mode)
    rtt_ms = property(lambda self: self.path.network_ms)
    overhead_ms = property(lambda self: self.path.overhead_ms)
    prefill_ms = property(lambda self: self.path.prefill_ms)
    kv_transfer_ms = property(lambda self: self.path.transfer_ms)
    first_token_ms = property(lambda self: self.path.first_token_ms)

    def as_dict(self) -> dict:
        keys = ("workload", "mode", "prefill_config", "decode_config", "rtt_ms", "overhead_ms", "prefill_ms",
                "kv_transfer_ms", "first_token_ms", "queue_budget_ms", "ttft_p99_ms", "feasible")
        return {k: getattr(self, k) for k in keys}


def disaggregated(w: Workload, s: Scenario, rtt_ms: float, prefill: ServingConfig, decode: ServingConfig,
                  kv_bytes_per_token: float) -> Waterfall:
    xfer = transfer_ms(w, kv_bytes_per_token, min(prefill.nic_bytes_per_s, decode.nic_bytes_per_s),
                       s.serving.kv_transfer_latency_ms)
    path = disaggregated_path(s, rtt_ms, 0.0, prefill.prefill_p99_ms, xfer, decode.step_ms)
    return Waterfall(w.id, prefill.id, decode.id, path, w.ttft_p99_ms)


def colocated(w: Workload, s: Scenario, rtt_ms: float, config: ServingConfig) -> Waterfall:
    return Waterfall(w.id, config.id, config.id, colocated_path(s, rtt_ms, 0.0, config.prefill_p99_ms), w.ttft_p99_ms)


def best_waterfall(w: Workload, s: Scenario, rtt_ms: float, configs: list[ServingConfig], kv_bytes_per_token: float) -> Waterfall | None:
    """The path with the most queueing budget among ``configs`` (None if there are none)."""
    prefill = [c for c in configs if c.role == Role.PREFILL]
    decode = [c for c in configs if c.role == Role.DECODE]
    options = [colocated(w, s, rtt_ms, c) for c in configs if c.role == Role.COLOCATED]
    options += [disaggregated(w, s, rtt_ms, p, d, kv_bytes_per_token) for p in prefill for d in decode]
    return max(options, key=lambda f: f.queue_budget_ms, default=None)
