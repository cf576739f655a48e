"""The TTFT budget: where a request's time-to-first-token goes before any queueing.

Disaggregated (prefill and decode replicas apart):
    TTFT = RTT + overheads + queue + prefill(p99 prompt) + KV transfer + first token
    first token = the decode replica's join wait (≤ one step) + its p99 step
                = (1 + tail) · step
Colocated (chunked prefill inside decode iterations):
    TTFT = RTT + overheads + queue + ⌈(s − cached)/C⌉ · iteration   (the last chunk emits it)
What is left after everything but the queue is the queueing budget; the path is feasible
when that budget is ≥ 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from optimizer.configs import ServingConfig
from optimizer.curves.transfer import kv_transfer_time_s
from optimizer.scenario import Scenario, Workload


@dataclass(frozen=True)
class Waterfall:
    workload: str
    mode: str
    prefill_config: str
    decode_config: str
    rtt_ms: float
    overhead_ms: float
    prefill_ms: float
    kv_transfer_ms: float
    first_token_ms: float
    queue_budget_ms: float
    ttft_p99_ms: float

    @property
    def feasible(self) -> bool:
        return self.queue_budget_ms >= 0

    def as_dict(self) -> dict:
        return {**asdict(self), "feasible": self.feasible}


def first_token_ms(decode: ServingConfig, tail_factor: float) -> float:
    return (1.0 + tail_factor) * decode.step_ms


def transfer_ms(w: Workload, kv_bytes_per_token: float, a: ServingConfig, b: ServingConfig, latency_ms: float) -> float:
    """KV of the p99 prompt over the slower of the two replicas' NICs."""
    bw = min(a.nic_bytes_per_s, b.nic_bytes_per_s)
    return float(kv_transfer_time_s(w.isl_p99_tokens, kv_bytes_per_token, bw, latency_ms / 1e3)) * 1e3


def disaggregated(w: Workload, s: Scenario, rtt_ms: float, prefill: ServingConfig, decode: ServingConfig, kv_bytes_per_token: float) -> Waterfall:
    xfer = transfer_ms(w, kv_bytes_per_token, prefill, decode, s.serving.kv_transfer_latency_ms)
    first = first_token_ms(decode, s.serving.itl_tail_factor)
    used = rtt_ms + s.serving.fixed_overhead_ms + prefill.prefill_p99_ms + xfer + first
    return Waterfall(w.id, "disaggregated", prefill.id, decode.id, rtt_ms, s.serving.fixed_overhead_ms,
                     prefill.prefill_p99_ms, xfer, first, w.ttft_p99_ms - used, w.ttft_p99_ms)


def colocated(w: Workload, s: Scenario, rtt_ms: float, config: ServingConfig) -> Waterfall:
    used = rtt_ms + s.serving.fixed_overhead_ms + config.prefill_p99_ms
    return Waterfall(w.id, "colocated", config.id, config.id, rtt_ms, s.serving.fixed_overhead_ms,
                     config.prefill_p99_ms, 0.0, 0.0, w.ttft_p99_ms - used, w.ttft_p99_ms)


def best_waterfall(w: Workload, s: Scenario, rtt_ms: float, configs: list[ServingConfig], kv_bytes_per_token: float) -> Waterfall | None:
    """The path with the most queueing budget among ``configs`` (None if there are none)."""
    prefill = [c for c in configs if c.role == "prefill"]
    decode = [c for c in configs if c.role == "decode"]
    options = [colocated(w, s, rtt_ms, c) for c in configs if c.role == "colocated"]
    options += [disaggregated(w, s, rtt_ms, p, d, kv_bytes_per_token) for p in prefill for d in decode]
    return max(options, key=lambda f: f.queue_budget_ms, default=None)
