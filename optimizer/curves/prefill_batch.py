"""Batched prefill: a server that packs the prompts waiting for it into one forward pass, up
to a budget of B new tokens (curve 3 for several prompts at once).

One pass over prompts i = 1 … k of s_i tokens, c_i of them cached (`pass_time_s`):

    τ₀ + smax( Σ_i (2·N_a'·(s_i − c_i) + κ·attention(s_i, c_i)) / (p·F·η(T)),  N·β_w / (p·B·η_m) )
       + comms(T),        T = Σ_i (s_i − c_i)

The linear layers see all T new tokens at once (η(T), `roofline.prefill_efficiency`), each
prompt attends only to itself, and the weights are read, the per-pass and per-layer
overheads and the collectives' latencies paid once per pass instead of once per prompt —
which is what batching buys: a large share of a short prompt's time.

Packing, head of line first. The server takes prompts in arrival order while their new
tokens fit B (always at least one). From a long queue the prompt that does not fit starts
the next pass, so a pass's first prompt is biased towards long ones (the inspection
paradox): packing i.i.d. prompts independently would overstate how many fit. `full_pass`
follows that chain — the first prompt's length from pass to pass — to its stationary law,
on a grid of B/256 tokens, and returns the mean prompts k_B and new tokens T_B of a pass
taken from a long queue. The renewal density of the new-token law,
u(t) = 1[t = 0] + Σ_j P(X = j)·u(t − j), gives what follows a first prompt of length f:
Σ_{t ≤ B − f} u(t) − 1 more prompts fit, and the one that does not has length y with
probability P(X = y)·Σ_{t ≤ B − f, t + y > B − f} u(t). Their tokens are tracked beside u
with each bin's true mean length, so only which prompts fit is subject to the grid.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from optimizer.curves.lengths import LengthDistribution
from optimizer.curves.roofline import (
    attention_flops,
    collective_time_s,
    linear_flops,
    mixed_step_time_s,
    pass_overhead_s,
    prefill_efficiency,
    prefill_time_s,
    smooth_max,
)
from optimizer.curves.shapes import Replica

GRID_BINS = 256  # packing grid: B / GRID_BINS tokens per bin


def pass_time_s(replica: Replica, tokens, cached_tokens) -> float:
    """One prefill pass over several prompts (``tokens`` and ``cached_tokens``: one entry per
    prompt), as in the module docstring. For k equal prompts it equals
    `roofline.prefill_time_s(replica, s, c, prompts=k)`."""
    s = np.atleast_1d(np.asarray(tokens, dtype=float))
    c = np.minimum(np.atleast_1d(np.asarray(cached_tokens, dtype=float)), s)
    return pass_of_s(replica, float(np.sum(s - c)), float(np.sum(attention_flops(replica.model, s, c))))


def pass_of_s(replica: Replica, new_tokens: float, attention: float) -> float:
    """A pass of ``new_tokens`` new tokens in all, its prompts' attention adding up to
    ``attention`` FLOPs (`roofline.attention_flops`, before the attention factor)."""
    eff = replica.eff
    flops = float(linear_flops(replica.model, new_tokens, eff.moe_load_factor)) + eff.attention_factor * attention
    total = max(new_tokens, 1.0)
    compute = flops / (replica.gpus * replica.hw.dense_flops_per_s * float(prefill_efficiency(eff, total)))
    memory = replica.weight_bytes / (replica.gpus * replica.hw.hbm_bytes_per_s * eff.decode_mbu)
    return float(pass_overhead_s(replica) + smooth_max(compute, memory, eff.roofline_sharpness)
                 + collective_time_s(replica, total))


def riding_pass_s(replica: Replica, tokens, cached_tokens, other_new_tokens, other_attention_flops):
    """A pass carrying one prompt of ``tokens`` (``cached_tokens`` cached) beside others that
    bring ``other_new_tokens`` new tokens and ``other_attention_flops`` of attention —
    `pass_time_s` vectorised over the first prompt (all arguments broadcast; a pass's
    overheads are paid once, whatever it carries). With no others it is
    `roofline.prefill_time_s` of the prompt alone."""
    s = np.asarray(tokens, dtype=float)
    c = np.minimum(np.asarray(cached_tokens, dtype=float), s)
    others = np.asarray(other_new_tokens, dtype=float)
    eff = replica.eff
    new = s - c + others
    flops = (linear_flops(replica.model, new, eff.moe_load_factor)
             + eff.attention_factor * (attention_flops(replica.model, s, c) + np.asarray(other_attention_flops)))
    total = np.maximum(np.maximum(s - c, 1.0) + others, 1.0)
    compute = flops / (replica.gpus * replica.hw.dense_flops_per_s * prefill_efficiency(eff, total))
    memory = replica.weight_bytes / (replica.gpus * replica.hw.hbm_bytes_per_s * eff.decode_mbu)
    return pass_overhead_s(replica) + smooth_max(compute, memory, eff.roofline_sharpness) + collective_time_s(replica, total)


def new_token_law(lengths: LengthDistribution, hit_rate: float, cached_on_hit: float):
    """(new tokens, probability, cached tokens) on a quantile grid of the prompt length: a
    prompt hits the cache with probability h and then brings min(s, cached_on_hit) tokens
    already in KV."""
    grid = lengths.quantile_grid()
    cached = np.minimum(grid, cached_on_hit)
    weight = 1.0 / len(grid)
    new = np.concatenate((grid - cached, grid))
    prob = np.concatenate((np.full(len(grid), hit_rate * weight), np.full(len(grid), (1.0 - hit_rate) * weight)))
    return new, prob, np.concatenate((cached, np.zeros(len(grid))))


def full_pass(new_tokens, probability, budget_tokens: float) -> tuple[float, float]:
    """(mean prompts k_B, mean new tokens T_B) of a pass taken from a long queue under a
    budget of ``budget_tokens`` (see the module docstring). A prompt longer than the budget
    goes alone. Lengths are rounded to the grid, so each prompt is off by at most half a bin."""
    x = np.asarray(new_tokens, dtype=float)
    p = np.asarray(probability, dtype=float) / np.sum(probability)
    width = budget_tokens / GRID_BINS
    top = GRID_BINS  # bins 0 … top hold lengths within the budget; bin top + 1: longer ones
    where = np.where(x > budget_tokens, top + 1, np.minimum(np.rint(x / width), top)).astype(int)
    pmf = np.bincount(where, weights=p, minlength=top + 2)
    mean_tokens = np.bincount(where, weights=p * x, minlength=top + 2) / np.maximum(pmf, 1e-300)
    u = np.zeros(top + 1)  # u(t) = 1[t = 0] + Σ_j pmf(j)·u(t − j), solved for u(t)
    v = np.zeros(top + 1)  # v(t): the true tokens of those partial sums, Σ_j pmf(j)·(v(t − j) + x̄_j·u(t − j))
    for t in range(top + 1):
        back = slice(t - 1, None, -1) if t else slice(0, 0)
        u[t] = ((t == 0) + np.dot(pmf[1:t + 1], u[back])) / (1.0 - pmf[0])
        v[t] = (np.dot(pmf[1:t + 1], v[back] + mean_tokens[1:t + 1] * u[back])
                + pmf[0] * mean_tokens[0] * u[t]) / (1.0 - pmf[0])
    below = np.concatenate(([0.0], np.cumsum(u)))  # below[r + 1] = Σ_{t ≤ r} u(t)
    at_least = np.cumsum(pmf[::-1])[::-1]  # P(bin ≥ j)
    states = top + 2
    move = np.tile(pmf, (states, 1))  # a prompt longer than the budget goes alone; a fresh one follows
    taken = np.ones(states)
    tokens = mean_tokens.copy()
    y = np.arange(states)
    for f in range(top + 1):
        r = top - f  # bins left after the first prompt
        move[f] = pmf * (below[r + 1] - below[np.clip(r - y + 1, 0, r + 1)])  # overflow from t > r − y
        taken[f] = below[r + 1]
        t = np.arange(r + 1)
        tokens[f] += float(np.dot(v[:r + 1], at_least[r - t + 1]))
    move /= move.sum(axis=1, keepdims=True)
    # stationary law: π = π·M with Σ π = 1 (the last balance equation, implied by the
    # others, makes way for the normalisation)
    system = move.T - np.eye(states)
    system[-1] = 1.0
    law = np.linalg.solve(system, np.concatenate((np.zeros(states - 1), [1.0])))
    law = np.clip(law, 0.0, None) / np.clip(law, 0.0, None).sum()
    return float(law @ taken), float(law @ tokens)


@lru_cache(maxsize=256)
def _packing(lengths: LengthDistribution, hit_rate: float, cached_on_hit: float, budget_tokens: int):
    """(k_B, T_B, mean cached tokens per prompt, the prompt law `new_token_law`) of a
    workload's prompts (no replica in it)."""
    new, prob, cached = new_token_law(lengths, hit_rate, cached_on_hit)
    prompts, tokens = full_pass(new, prob, budget_tokens)
    return prompts, tokens, float(np.dot(prob / prob.sum(), cached)), (new, prob, cached)


def full_pass_s(replica: Replica, lengths: LengthDistribution, hit_rate: float, cached_on_hit: float,
                budget_tokens: int) -> tuple[float, float]:
    """(k_B, S_B): the mean prompts of a full pass (`full_pass`) and its time in seconds —
    `pass_time_s` of T_B new tokens whose attention is k_B times a prompt's mean one,
    k_B·E[attention(s, c)] over the prompt law. Each prompt rides in one pass, so by
    renewal–reward a pass carries on average k_B prompts' worth of every per-prompt term;
    attention grows with s², so timing a pass at the mean length would miss E[s²] − E[s]²."""
    prompts, tokens, _, (new, prob, cached) = _packing(lengths, hit_rate, cached_on_hit, int(budget_tokens))
    attention = prompts * float(np.dot(prob / prob.sum(), attention_flops(replica.model, new + cached, cached)))
    return prompts, pass_of_s(replica, tokens, attention)


def p99_pass_s(replica: Replica, lengths: LengthDistribution, hit_rate: float, cached_on_hit: float,
               budget_tokens: int, p99_tokens: float, p99_cached: float) -> float:
    """The pass the p99 prompt may ride in: with prompts of the mix's mean filling the budget
    beside it, or alone when it alone fills it — max(alone, that pass). The first prompt of a
    batch waits for the others' tokens; this is that wait, at its worst."""
    alone = float(prefill_time_s(replica, p99_tokens, p99_cached))
    _, _, cached, (new, prob, _) = _packing(lengths, hit_rate, cached_on_hit, int(budget_tokens))
    room = budget_tokens - (p99_tokens - p99_cached)
    if room <= 0:
        return alone
    mean_new = float(np.dot(prob, new) / prob.sum())
    others = room / mean_new  # prompts of the mean new tokens that fill the rest of the budget
    share = others - np.floor(others)
    tokens_of = [p99_tokens] + [mean_new + cached] * int(others) + ([share * mean_new + cached] if share > 0 else [])
    cached_of = [p99_cached] + [cached] * (len(tokens_of) - 1)
    return max(alone, pass_time_s(replica, tokens_of, cached_of))


def chunked_prefill_s(r: Replica, batch: float, context: float, tokens, cached, chunk: int) -> np.ndarray:
    """Time a colocated replica's prefill lane spends on each prompt: its new tokens in
    chunks of C, the j-th at context cached + j·C, the last one only what is left — each
    iteration decoding ``batch`` sequences of mean ``context`` beside it:

        Σ_j mixed_step(b, context, min(C, new − j·C), cached + j·C).

    A full chunk's iteration depends only on where it starts, so the full chunks are summed
    once per distinct cached prefix (running sums over j) and each prompt adds its last."""
    s = np.atleast_1d(np.asarray(tokens, dtype=float))
    c = np.broadcast_to(np.asarray(cached, dtype=float), s.shape)
    new = np.maximum(s - c, 1.0)
    full = np.floor(new / chunk).astype(int)
    rest = new - full * chunk
    starts, which = np.unique(np.where(full > 0, c, -1.0), return_inverse=True)
    j = np.arange(max(int(full.max()), 1))
    runs = np.asarray(mixed_step_time_s(r, batch, context, chunk, np.maximum(starts, 0.0)[:, None] + j * chunk))
    summed = np.concatenate((np.zeros((len(starts), 1)), np.cumsum(runs, axis=1)), axis=1)
    last = np.asarray(mixed_step_time_s(r, batch, context, np.maximum(rest, 1.0), c + full * chunk))
    return summed[which, full] + np.where(rest > 0, last, 0.0)
