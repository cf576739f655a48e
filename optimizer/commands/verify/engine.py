"""The simulation engine: a FIFO multi-server pool (dedicated prefill, `fifo_pool`) and a pool
of continuously batching replicas (disaggregated decode, or colocated with chunked prefill,
`simulate_pool`; its event loop is `replicas.PoolSim`, its step times a `steps.StepModel`).

Nothing here knows about plans or scenarios: times come from a `StepModel` (the roofline
curves of one replica, or any stand-in a test supplies), requests are plain arrays.

What is recorded per request is the replica it ran on and the steps of its first and last
token; per replica the duration and end time of every step. Tokens of one request are
emitted at consecutive steps of its replica (a sequence is never preempted), so its TTFT
end is the end of its first step and its non-zero inter-token gaps are exactly the
durations of the following steps up to its last one.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from optimizer.commands.verify.replicas import INF, PoolSim, PoolSpec

ENGINE = "own event loop"  # what verify's summary names as its engine

# ---------------------------------------------------------------------------- FIFO pool


def fifo_pool(arrivals, servers: int, service_s, *, tokens=None, cached=None, batch_tokens: int = 0,
              batch_service=None):
    """First-come-first-served pool of ``servers`` identical servers.

    ``arrivals`` must be sorted. Without batching a job holds one server for
    ``service_s[i]``. With ``batch_tokens`` > 0, a server that starts work takes the waiting
    jobs at the head of the queue (already arrived when it starts) while their new tokens
    (``tokens`` − ``cached``) add up to at most ``batch_tokens`` — always at least one — and
    serves them in one pass of ``batch_service(tokens, cached)`` seconds (the batch's
    prompts as arrays); all of them finish together. Returns (start, end) arrays.
    """
    a = np.asarray(arrivals, dtype=float)
    n = len(a)
    start = np.empty(n)
    end = np.empty(n)
    if n == 0:
        return start, end
    if servers <= 0:
        start.fill(INF)
        end.fill(INF)
        return start, end
    free = [0.0] * int(servers)
    al = a.tolist()
    sl = np.asarray(service_s, dtype=float).tolist()
    if batch_tokens <= 0 or tokens is None:
        for i in range(n):
            f = free[0]
            t = al[i] if al[i] > f else f
            e = t + sl[i]
            heapq.heapreplace(free, e)
            start[i] = t
            end[i] = e
        return start, end
    tok_a = np.asarray(tokens, dtype=float)
    cac_a = np.zeros(n) if cached is None else np.asarray(cached, dtype=float)
    tok, cac = tok_a.tolist(), cac_a.tolist()
    i = 0
    while i < n:
        f = free[0]
        t = al[i] if al[i] > f else f
        j = i + 1
        new = tok[i] - cac[i]
        while j < n and al[j] <= t and new + tok[j] - cac[j] <= batch_tokens:
            new += tok[j] - cac[j]
            j += 1
        if j == i + 1:
            e = t + sl[i]
        else:
            e = t + float(batch_service(tok_a[i:j], cac_a[i:j]))
        heapq.heapreplace(free, e)
        start[i:j] = t
        end[i:j] = e
        i = j
    return start, end


# ---------------------------------------------------------------------------- replica pool


@dataclass
class PoolOutcome:
    """Per request (in the caller's order): replica index, step of the first token, step of
    the last token (−1 where never served); per replica: step durations and end times."""

    replica: np.ndarray
    first_step: np.ndarray
    last_step: np.ndarray
    durations: list
    ends: list

    def concatenated(self):
        """(durations, ends, offset per replica) over all replicas' steps back to back."""
        sizes = [len(d) for d in self.durations]
        offset = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes else np.zeros(0, np.int64)
        d = np.concatenate(self.durations) if sizes else np.zeros(0)
        e = np.concatenate(self.ends) if sizes else np.zeros(0)
        return d, e, offset


def simulate_pool(spec: PoolSpec, arrivals, prompt, output, cached=None, rng=None, check: bool = False,
                  initial=None) -> PoolOutcome:
    """Run one replica pool over requests arriving at ``arrivals`` (seconds, any order).

    Disaggregated decode (``chunk_tokens`` = 0): a request arrives with its prompt's KV and
    joins a replica at that replica's next step boundary; it is offered to the replica with
    the fewest sequences among those with a free slot and room in the KV budget, else it
    waits in the pool's FIFO queue. Its first token is emitted by its first step.
    Colocated (``chunk_tokens`` > 0): prompts wait in one FIFO queue for a replica whose
    prefill lane is free; the lane prefills ``chunk_tokens`` per iteration beside the decode
    batch and the iteration that carries the last chunk emits the first token.

    Admission reserves a decode slot and the KV of the whole request, (prompt + output) ·
    kv bytes, for as long as it runs (a colocated request from the start of its prefill),
    so the KV actually held, Σ (prompt + generated) · kv, never exceeds the budget. A
    request alone larger than the budget is admitted only to an empty replica.

    ``initial`` = (replica, context, remaining) arrays: sequences already decoding at time 0
    (a warm start; they are not reported), each holding ``context`` tokens of KV with
    ``remaining`` tokens still to emit.
    """
    arr = np.asarray(arrivals, dtype=float)
    n = len(arr)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    cached = np.zeros(n, np.int64) if cached is None else np.asarray(cached, dtype=np.int64)
    if spec.replicas <= 0 or n == 0:
        return PoolOutcome(np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64), [], [])
    init_rep = np.zeros(0, np.int64)
    if initial is not None and len(initial[0]):
        init_rep = np.asarray(initial[0], dtype=np.int64)
        prompt = np.concatenate((prompt, np.asarray(initial[1], dtype=np.int64)))
        output = np.concatenate((output, np.maximum(np.asarray(initial[2], dtype=np.int64), 1)))
        cached = np.concatenate((cached, np.zeros(len(init_rep), np.int64)))
    total = len(prompt)
    rep_of = np.full(total, -1, np.int64)
    first = np.full(total, -1, np.int64)
    last = np.full(total, -1, np.int64)
    sim = PoolSim(spec, prompt.tolist(), output.tolist(), cached.tolist(), rng, check, rep_of, first, last)
    sim.warm_start(init_rep.tolist(), n)
    order = np.argsort(arr, kind="stable")
    sim.run(arr[order].tolist(), order.tolist())
    return PoolOutcome(rep_of[:n], first[:n], last[:n],
                       [np.concatenate(r.log_d) if r.log_d else np.zeros(0) for r in sim.reps],
                       [np.concatenate(r.log_e) if r.log_e else np.zeros(0) for r in sim.reps])
