"""The TTFT path: where a request's time-to-first-token goes — one definition for the budget
the plan sizes its pools with, the p99s it predicts (slo.csv, verify) and the stress test.

    TTFT = RTT + overheads + W + X

W is the wait for a prefill server or a colocated replica's prefill lane
(`curves.queueing.wait_law`); X the stages after it, a law over the workload's prompts
(`Stages`, on a quantile grid of the prompt length, cache hits and misses apart):

Disaggregated (prefill and decode replicas apart):
    X = prefill(s) + KV transfer(s) + first token
    prefill(s): the pass carrying the prompt — alone, or (batched, having waited) beside
        J others (`curves.prefill_batch.riding_pass_s`)
    KV transfer(s) = latency + s·kv / (the slower replica's NIC)
    first token = d·U + d: the rest of the step the decode replica is in when the KV lands
        (uniform), then one step d
Colocated (chunked prefill inside decode iterations):
    X = d·U + Σ_j mixed(b, min(C, new − j·C) at context cached + j·C)
        (the rest of the running decode step d, then a chunk per iteration beside the b
        sequences decoding; the one carrying the last chunk emits the first token —
        `prefill_batch.chunked_prefill_s`)

The p99 of the sum is not the sum of the stage p99s (`curves.tail`). The budget
(`Waterfall`, `fleetplan budget`) is the path with no wait: the q-quantile of X, split into
its stages' shares (`split_stages`), and what is left of the objective for queueing; a path
is feasible when that is ≥ 0 — when at most 1 − q of the requests miss with no wait at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.base.units import MS_PER_S, Role, ServingMode
from optimizer.curves.lengths import prompt_lengths
from optimizer.curves.prefill_batch import chunked_prefill_s, riding_pass_s
from optimizer.curves.roofline import attention_flops, decode_step_time_s, prefill_time_s
from optimizer.curves.tail import Law, law, lognormal_points, probability_edges, quantile_s
from optimizer.curves.transfer import kv_transfer_time_s
from optimizer.scenario import Scenario, Workload
from optimizer.serving.configs import ServingConfig, kv_bytes_per_token, make_replica

PROMPT_POINTS = 256  # quantile grid of the prompt length (each of hit and miss)
MAX_RIDERS = 24  # at most this many prompts beside a waiting one are told apart


@dataclass(frozen=True)
class Prompts:
    """A workload's prompts as points: ``tokens``, ``cached`` tokens (a hit brings the
    shared prefix, at most all but one token — as the simulator draws them) and ``probs``."""

    tokens: np.ndarray
    cached: np.ndarray
    probs: np.ndarray

    @property
    def new(self) -> np.ndarray:
        return self.tokens - self.cached

    @property
    def mean_new(self) -> float:
        return float(np.dot(self.new, self.probs))


def prompt_points(w: Workload, max_tokens: float) -> Prompts:
    """The lognormal prompt lengths on `PROMPT_POINTS` bins, each a hit (probability h) or a
    miss."""
    lengths = prompt_lengths(w, max_tokens)
    if lengths.is_part:  # the bins' probabilities are the part's own
        edges = probability_edges(PROMPT_POINTS)
        tokens, probs = lengths.quantiles(0.5 * (edges[:-1] + edges[1:])), np.diff(edges)
    else:
        tokens, probs = lognormal_points(lengths.mu, lengths.sigma, PROMPT_POINTS, 1.0, max_tokens)
    hit = np.minimum(float(w.shared_prefix_tokens), np.maximum(tokens - 1.0, 0.0))
    h = w.prompt_cache_hit_rate
    return Prompts(np.concatenate((tokens, tokens)), np.concatenate((hit, np.zeros_like(tokens))),
                   np.concatenate((h * probs, (1.0 - h) * probs)))


@dataclass(frozen=True)
class StageLaws:
    """X for an arrival that finds a server (``alone``) and for one that waited beside j =
    0, 1, … other prompts (``riding[j]``; one law when the server does not batch). Also the
    parts of X per prompt point (s), for `split_stages`."""

    alone: Law
    riding: list[Law]
    mode: str
    prefill_s: np.ndarray  # per point of ``alone``, in its order
    transfer_s: np.ndarray  # likewise
    first_step_s: float  # the step after the join (0 colocated)


def _stage_laws(mode: str, passes: list[np.ndarray], transfer_s: np.ndarray, probs: np.ndarray,
                step_s: float, smear_s: float) -> StageLaws:
    """X = pass + transfer + step + smear·U per prompt point, for each pass (alone first)."""
    riding = [law(x + transfer_s + step_s, probs, smear_s) for x in passes]
    order = np.argsort(passes[0] + transfer_s + step_s, kind="stable")  # as `law` sorts the first
    return StageLaws(riding[0], riding, mode, passes[0][order], transfer_s[order], step_s)


class Stages:
    """The stages after the wait for one scenario's configs (per-config results kept)."""

    def __init__(self, s: Scenario):
        self.s = s
        self._prompts: dict = {}
        self._prefill: dict = {}
        self._replicas: dict = {}

    def replica(self, c: ServingConfig):
        if c.id not in self._replicas:
            w = self.s.workloads[c.workload]
            self._replicas[c.id] = make_replica(self.s.models[w.model], self.s.accelerators[c.gpu], self.s.serving,
                                                c.gpus, c.weight_dtype, c.kv_dtype, expert_parallel=c.expert_parallel)
        return self._replicas[c.id]

    def prompts(self, workload: str) -> Prompts:
        if workload not in self._prompts:
            w = self.s.workloads[workload]
            self._prompts[workload] = prompt_points(w, self.s.models[w.model].max_context)
        return self._prompts[workload]

    def prefill_passes(self, c: ServingConfig) -> list[np.ndarray]:
        """Per prompt point, the pass a dedicated prefill replica of ``c`` runs for it: [alone]
        or, batching up to B new tokens, beside j = 0 … J others of the mix's mean new tokens
        (as many as fit beside it; J = ⌈B / mean new⌉, at most `MAX_RIDERS`)."""
        if c.id not in self._prefill:
            r = self.replica(c)
            p = self.prompts(c.workload)
            passes = [np.asarray(prefill_time_s(r, p.tokens, p.cached), dtype=float)]
            if c.prefill_batch_tokens:
                mean_new = p.mean_new
                attention = float(np.dot(attention_flops(r.model, p.tokens, p.cached), p.probs)) / mean_new
                room = np.maximum(c.prefill_batch_tokens - p.new, 0.0)
                count = min(int(np.ceil(c.prefill_batch_tokens / mean_new)), MAX_RIDERS)
                for j in range(1, count + 1):
                    others = np.minimum(j * mean_new, room)
                    passes.append(np.asarray(riding_pass_s(r, p.tokens, p.cached, others, others * attention)))
            self._prefill[c.id] = passes
        return self._prefill[c.id]

    def transfer_s(self, workload: str, nic_bytes_per_s: float) -> np.ndarray:
        """KV transfer of each prompt point over ``nic_bytes_per_s`` (the slower replica's)."""
        w = self.s.workloads[workload]
        kv = kv_bytes_per_token(w, self.s.models[w.model])
        return np.asarray(kv_transfer_time_s(self.prompts(workload).tokens, kv, nic_bytes_per_s,
                                             self.s.serving.kv_transfer_latency_ms / MS_PER_S), dtype=float)

    def disaggregated(self, c: ServingConfig, nic_bytes_per_s: float, decode_step_s: float) -> StageLaws:
        """X of prefill config ``c`` handing off over ``nic_bytes_per_s`` to decode replicas
        stepping every ``decode_step_s``."""
        return _stage_laws(ServingMode.DISAGGREGATED, self.prefill_passes(c), self.transfer_s(c.workload, nic_bytes_per_s),
                           self.prompts(c.workload).probs, decode_step_s, decode_step_s)

    def colocated(self, c: ServingConfig, batch: float) -> StageLaws:
        """X of colocated config ``c`` with ``batch`` sequences decoding beside its lane."""
        w = self.s.workloads[c.workload]
        p = self.prompts(c.workload)
        r = self.replica(c)
        context = w.isl_mean_tokens + w.osl_mean_tokens / 2.0
        lane = chunked_prefill_s(r, batch, context, p.tokens, p.cached, c.chunk_tokens)
        step = float(decode_step_time_s(r, batch, context))
        return _stage_laws(ServingMode.COLOCATED, [lane], np.zeros_like(lane), p.probs, 0.0, step)


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


def split_stages(x: StageLaws, stages_s: float) -> tuple[float, float, float]:
    """(prefill, transfer, first token) in seconds, adding up to ``stages_s`` (a quantile of
    X): each stage's share of the requests beyond it — their mean prefill, transfer and
    first token, E[stage | X > x], scaled to sum to x. A request at the quantile of X is
    there because of all its stages at once, in these proportions."""
    d = x.first_step_s
    smear = x.alone.smear_s
    z = stages_s - x.alone.values_s  # room left for the uniform part
    if smear > 0:
        beyond = 1.0 - np.clip(z / smear, 0.0, 1.0)
        rest = np.where(z <= 0, 0.5 * smear, 0.5 * (smear + np.clip(z, 0.0, smear)))  # E[s·U | s·U > z]
    else:
        beyond, rest = (z < 0).astype(float), np.zeros_like(z)
    weight = x.alone.probs * beyond
    if weight.sum() <= 0:  # the quantile is X's largest value
        weight = x.alone.probs * (x.alone.values_s >= x.alone.values_s.max())
    prefill = float(np.dot(weight, x.prefill_s))
    transfer = float(np.dot(weight, x.transfer_s))
    first = float(np.dot(weight, d + rest)) if x.mode == ServingMode.DISAGGREGATED else 0.0
    if x.mode == ServingMode.COLOCATED:  # the rest of the running iteration is part of the prefill stage
        prefill += float(np.dot(weight, rest))
    scale = stages_s / max(prefill + transfer + first, 1e-300)
    return prefill * scale, transfer * scale, first * scale


def path(s: Scenario, network_ms: float, queue_ms: float, x: StageLaws, stages_s: float) -> TtftPath:
    """A TTFT path whose stages after the wait take ``stages_s`` (split by `split_stages`)."""
    prefill, transfer, first = split_stages(x, stages_s)
    return TtftPath(x.mode, network_ms, s.serving.fixed_overhead_ms, queue_ms, prefill * MS_PER_S,
                    transfer * MS_PER_S, first * MS_PER_S)


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


def waterfall(w: Workload, s: Scenario, rtt_ms: float, x: StageLaws, prefill: str, decode: str) -> Waterfall:
    """The budget of stages ``x``: their q-quantile (q = the workload's attainment) with no wait."""
    return Waterfall(w.id, prefill, decode, path(s, rtt_ms, 0.0, x, quantile_s(x.alone, w.slo_attainment)),
                     w.ttft_p99_ms)


def disaggregated(w: Workload, s: Scenario, rtt_ms: float, prefill: ServingConfig, decode: ServingConfig,
                  stages: Stages) -> Waterfall:
    x = stages.disaggregated(prefill, min(prefill.nic_bytes_per_s, decode.nic_bytes_per_s), decode.step_ms / MS_PER_S)
    return waterfall(w, s, rtt_ms, x, prefill.id, decode.id)


def colocated(w: Workload, s: Scenario, rtt_ms: float, config: ServingConfig, stages: Stages) -> Waterfall:
    return waterfall(w, s, rtt_ms, stages.colocated(config, config.batch), config.id, config.id)


def best_waterfall(w: Workload, s: Scenario, rtt_ms: float, configs: list[ServingConfig],
                   stages: Stages | None = None) -> Waterfall | None:
    """The path with the most queueing budget among ``configs`` (None if there are none)."""
    stages = Stages(s) if stages is None else stages
    prefill = [c for c in configs if c.role == Role.PREFILL]
    decode = [c for c in configs if c.role == Role.DECODE]
    options = [colocated(w, s, rtt_ms, c, stages) for c in configs if c.role == Role.COLOCATED]
    options += [disaggregated(w, s, rtt_ms, p, d, stages) for p in prefill for d in decode]
    return max(options, key=lambda f: f.queue_budget_ms, default=None)
