"""Colocated replicas under an ITL objective (Server) against no objective (Offline): the
balance batch of decode side and prefill lane, the p99 iteration with a late chunk, and the
orderings a physical fleet obeys — a tighter ITL never serves more per GPU, Server never
beats Offline, and the share Server keeps falls with the prompt length."""

from __future__ import annotations

import functools

import pytest

from optimizer.base.units import MS_PER_S
from optimizer.curves.batching import colocated_balance_batch
from optimizer.curves.queueing import slo_capacity_rps
from optimizer.curves.roofline import mixed_step_time_s
from optimizer.curves.tail import law, slack_table
from optimizer.scenario import Workload, load_scenario
from optimizer.serving.configs import colocated_config, make_replica

OFFLINE_ITL_MS = 60_000.0  # no objective binds: the batch is the KV's or the balance's


@functools.lru_cache(maxsize=1)
def reference():
    return load_scenario()[0]


def probe(isl: float, itl_ms: float, osl: float = 750.0) -> Workload:
    return Workload(id="probe", model="llama-3.1-70b", isl_mean_tokens=isl, isl_p99_tokens=isl, osl_mean_tokens=osl,
                    osl_p99_tokens=osl, ttft_p99_ms=2000, itl_p99_ms=itl_ms, peak_requests_per_s_per_million_people=0)


def rate_per_gpu(isl: float, itl_ms: float, gpu: str = "h100-sxm", chunk: int = 512) -> float:
    """Requests/s per GPU of the colocated replica the plan builds (0 where none meets the ITL):
    min(decode side, ρ_p × prefill lane) / GPUs."""
    s = reference()
    m, a = s.models["llama-3.1-70b"], s.accelerators[gpu]
    r = make_replica(m, a, s.serving, 8, "bf16", "bf16")
    c = colocated_config(probe(isl, itl_ms), m, a, r, s.serving, chunk)
    return 0.0 if c is None else min(c.decode_rps, s.serving.prefill_max_utilization * c.lane_rps()) / c.gpus


@pytest.mark.parametrize("osl,chunks,decode_u,prefill_u,expected", [
    (750, 32, 0.85, 0.85, 24),  # 750 / 32 = 23.44 → 24
    (500, 4, 0.85, 0.85, 125),  # exactly 125: no rounding up
    (500, 4, 0.5, 1.0, 250),  # a decode side held to half its slots needs twice the batch
    (1, 100, 0.85, 0.85, 1),  # never below one sequence
])
def test_balance_batch_hand_values(osl, chunks, decode_u, prefill_u, expected):
    assert colocated_balance_batch(osl, chunks, decode_u, prefill_u) == expected


def test_p99_gap_is_the_iteration_with_a_late_chunk():
    """ITL p99 = tail · iteration(b) with the chunk over the prompt's last C tokens (context
    isl − C), above the mean iteration (chunk at mid-prompt) and inside the objective."""
    s = reference()
    m, a = s.models["llama-3.1-70b"], s.accelerators["h100-sxm"]
    r = make_replica(m, a, s.serving, 8, "bf16", "bf16")
    c = colocated_config(probe(16_000, 50), m, a, r, s.serving, 512)
    late = float(mixed_step_time_s(r, c.batch, 16_000 + 375, 512, 16_000 - 512))
    mid = float(mixed_step_time_s(r, c.batch, 16_000 + 375, 512, 8_000))
    assert c.itl_p99_ms == pytest.approx(s.serving.itl_tail_factor * late * MS_PER_S, rel=1e-12)
    assert c.step_ms == pytest.approx(mid * MS_PER_S, rel=1e-12)
    assert mid < late
    assert c.itl_p99_ms <= 50.0


def test_colocated_batch_stops_at_the_balance():
    """No objective binds at 2k prompts: the batch is the balance batch or the one below, not
    the KV ceiling (a larger batch only lengthens the iterations the prefill lane waits on)."""
    s = reference()
    m, a = s.models["llama-3.1-70b"], s.accelerators["h100-sxm"]
    r = make_replica(m, a, s.serving, 8, "bf16", "bf16")
    c = colocated_config(probe(2000, OFFLINE_ITL_MS), m, a, r, s.serving, 512)
    k = colocated_balance_batch(750, 4, s.serving.decode_max_utilization, s.serving.prefill_max_utilization)
    assert k == 188
    assert c.batch in (k - 1, k) and c.batch < c.max_concurrency


@pytest.mark.parametrize("isl", [2000, 8000, 16_000])
def test_tighter_itl_never_serves_more_and_server_never_beats_offline(isl):
    itls = [20, 25, 30, 35, 40, 45, 50, 60, 80, 120]
    rates = [rate_per_gpu(isl, itl) for itl in itls]
    assert any(rates)
    assert all(a <= b * (1 + 1e-9) for a, b in zip(rates, rates[1:]))
    assert max(rates) <= rate_per_gpu(isl, OFFLINE_ITL_MS) * (1 + 1e-9)


def pool_rate_per_gpu(isl: float, itl_ms: float, chunk: int, gpu: str = "h100-sxm") -> float:
    """As `rate_per_gpu`, the prefill lane as a pool of 16 replicas sees it under the p99 TTFT
    objective (2 s less the fixed overheads): min(decode side, f(16)/16) / GPUs."""
    s = reference()
    m, a = s.models["llama-3.1-70b"], s.accelerators[gpu]
    c = colocated_config(probe(isl, itl_ms), m, a, make_replica(m, a, s.serving, 8, "bf16", "bf16"), s.serving, chunk)
    if c is None:
        return 0.0
    alone = law([c.prefill_p99_ms / MS_PER_S])
    slack = slack_table(alone, [alone], (2000 - s.serving.fixed_overhead_ms) / MS_PER_S)
    lane = float(slo_capacity_rps(16, c.service_mean_s, c.service_scv, slack, s.serving.prefill_max_utilization)[0]) / 16
    return min(c.decode_rps, lane) / c.gpus


@pytest.mark.parametrize("itl_ms", [30, 40])
def test_server_share_of_offline_falls_with_prompt_length(itl_ms):
    """At a tight ITL, with the TTFT objective, the share of Offline a colocated pool keeps
    falls as prompts lengthen: a long prompt's chunks each wait a whole iteration, so its
    prefill fills more of the TTFT budget and the pool runs emptier."""
    def share(isl):
        offline = max(rate_per_gpu(isl, OFFLINE_ITL_MS, chunk=c) for c in (256, 512, 1024, 2048, 4096, 8192))
        return max(pool_rate_per_gpu(isl, itl_ms, c) for c in (256, 512, 1024)) / offline
    shares = [share(isl) for isl in (2000, 8000, 16_000)]
    assert 0 < shares[2] < shares[1] < shares[0] < 1
