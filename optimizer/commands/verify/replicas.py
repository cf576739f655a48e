"""The event loop of a pool of continuously batching replicas (disaggregated decode, or
colocated with chunked prefill): `PoolSpec` describes the pool, `PoolSim` runs it.

Replica pools advance by *segments*: between two changes of a replica's batch (a sequence
joins at a step boundary, one finishes, the prefill lane finishes a prompt) the batch is
fixed, so the times of all its steps come from one vectorised call of the step curve and
are committed at once. A join that lands inside a planned segment truncates it at the next
step boundary (lazily: the superseded event is dropped by a version check). The cost of a
simulation therefore grows with the number of joins and completions, not with tokens.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

INF = math.inf
SEGMENT_CAP = 512  # at most this many steps are planned at once (then re-planned)


class InvariantError(AssertionError):
    """A replica broke its slot or KV limit (raised only when checks are on)."""


@dataclass
class PoolSpec:
    """One pool of identical replicas.

    ``batch`` decode slots per replica; ``kv_budget_bytes`` and ``kv_bytes_per_token`` (with
    the KV replication of tensor parallelism folded in); ``chunk_tokens`` > 0 makes the
    replicas colocated (they prefill their own prompts in chunks); ``speculative`` =
    (draft tokens k, acceptance α) draws each sequence's tokens per step.
    """

    replicas: int
    batch: int
    kv_budget_bytes: float
    kv_bytes_per_token: float
    steps: object
    chunk_tokens: int = 0
    speculative: tuple[int, float] | None = None


class _Replica:
    __slots__ = ("t", "k", "busy", "ends", "durs", "chunks", "nsteps", "version", "heap", "b", "S", "count",
                 "kv", "pending", "lane", "lane_left", "lane_ctx", "lane_pending", "growth", "log_d", "log_e")

    def __init__(self):
        self.t = 0.0
        self.k = 0
        self.busy = False
        self.ends = self.durs = self.chunks = None
        self.nsteps = 0
        self.version = 0
        self.heap: list = []
        self.b = 0
        self.S = 0.0
        self.count = 0
        self.kv = 0.0
        self.pending: list = []
        self.lane = -1
        self.lane_left = 0
        self.lane_ctx = 0
        self.lane_pending = -1
        self.growth = None
        self.log_d: list = []
        self.log_e: list = []


class PoolSim:
    def __init__(self, spec: PoolSpec, prompt, output, cached, rng, check, rep_of, first, last):
        self.spec = spec
        self.steps = spec.steps
        self.batch = max(int(spec.batch), 1)
        self.budget = float(spec.kv_budget_bytes)
        self.kvt = float(spec.kv_bytes_per_token)
        self.chunk = int(spec.chunk_tokens)
        self.spec_k = None
        if spec.speculative is not None:
            self.spec_k, alpha = spec.speculative
            if rng is None:
                raise ValueError("speculative decoding needs an rng")
        self.rng = rng
        self.check = check
        self.prompt, self.output, self.cached = prompt, output, cached
        self.need = [(p + o) * self.kvt for p, o in zip(prompt, output)]
        if self.spec_k:
            self.draw_speculative(float(spec.speculative[1]))
        self.rep_of, self.first, self.last = rep_of, first, last
        self.reps = [_Replica() for _ in range(int(spec.replicas))]
        if self.spec_k:
            for r in self.reps:
                r.growth = np.zeros(1024)
        self.free_lanes = set(range(len(self.reps)))  # colocated: lane idle, none pending
        self.queue: deque = deque()
        self.events: list = []
        self.seq = 0

    # -- main loop -------------------------------------------------------------------

    def warm_start(self, replicas: list, first_id: int):
        """Sequences ``first_id``, ``first_id`` + 1, … start decoding at time 0 on ``replicas``."""
        touched = set()
        for j, ri in enumerate(replicas):
            rep = self.reps[ri % len(self.reps)]
            rid = first_id + j
            if self.room(rep, rid):
                self.reserve(rep, rid)
                self.join(rep, ri % len(self.reps), rid)
                touched.add(ri % len(self.reps))
        for ri in sorted(touched):
            self.plan(self.reps[ri], ri)

    def run(self, times: list, order: list):
        events = self.events
        n = len(times)
        ai = 0
        while True:
            ta = times[ai] if ai < n else INF
            te = events[0][0] if events else INF
            if ta == INF and te == INF:
                break
            if ta <= te:
                self.arrive(order[ai], ta)
                ai += 1
                continue
            te, _, ri, version = heapq.heappop(events)
            rep = self.reps[ri]
            if version != rep.version:
                continue
            self.commit(rep, ri)
            self.admit(rep, ri)
            self.plan(rep, ri)

    def room(self, rep: _Replica, rid: int) -> bool:
        if rep.count == 0:
            return True
        return rep.count < self.batch and rep.kv + self.need[rid] <= self.budget

    def reserve(self, rep: _Replica, rid: int):
        rep.count += 1
        rep.kv += self.need[rid]

    def arrive(self, rid: int, ta: float):
        if self.queue:
            self.queue.append(rid)
            return
        # the replica with the fewest sequences (then the lowest index) among those with a
        # free slot and KV room — and, colocated, a free prefill lane
        best = -1
        best_count = 1 << 60
        need = self.need[rid]
        batch, budget, reps = self.batch, self.budget, self.reps
        for i in (self.free_lanes if self.chunk > 0 else range(len(reps))):
            rep = reps[i]
            c = rep.count
            if (c < best_count or (c == best_count and i < best)) and (
                    c == 0 or (c < batch and rep.kv + need <= budget)):
                best, best_count = i, c
        if best < 0:
            self.queue.append(rid)
            return
        rep = self.reps[best]
        self.reserve(rep, rid)
        if self.chunk > 0:
            rep.lane_pending = rid
            self.free_lanes.discard(best)
        else:
            rep.pending.append(rid)
        if not rep.busy:
            rep.t = ta
            self.admit(rep, best)
            self.plan(rep, best)
        else:
            j = int(np.searchsorted(rep.ends, ta, side="left"))
            if j < rep.nsteps - 1:
                rep.nsteps = j + 1
                rep.version += 1
                self.seq += 1
                heapq.heappush(self.events, (float(rep.ends[j]), self.seq, best, rep.version))

    # -- a segment ends --------------------------------------------------------------

    def commit(self, rep: _Replica, ri: int):
        J = rep.nsteps
        k0 = rep.k
        rep.log_d.append(rep.durs[:J])
        rep.log_e.append(rep.ends[:J])
        rep.t = float(rep.ends[J - 1])
        rep.k = k0 + J
        rep.busy = False
        if self.spec_k:
            rep.S += float(rep.growth[k0:k0 + J].sum())
        else:
            rep.S += rep.b * J
        last_step = rep.k - 1
        if rep.lane >= 0:
            rep.lane_left -= int(rep.chunks[:J].sum())
            rep.lane_ctx += int(rep.chunks[:J].sum())
            if rep.lane_left <= 0:
                rid = rep.lane
                rep.lane = -1
                self.free_lanes.add(ri)
                self.rep_of[rid] = ri
                self.first[rid] = last_step
                if self.output[rid] <= 1:
                    self.last[rid] = last_step
                    rep.count -= 1
                    rep.kv -= self.need[rid]
                else:
                    rep.b += 1
                    rep.S += self.prompt[rid] + 1
                    heapq.heappush(rep.heap, (last_step + self.output[rid] - 1, rid))
        heap = rep.heap
        while heap and heap[0][0] <= last_step:
            _, rid = heapq.heappop(heap)
            self.last[rid] = last_step
            rep.b -= 1
            rep.S -= self.prompt[rid] + self.output[rid]
            rep.count -= 1
            rep.kv -= self.need[rid]
        if rep.b == 0:
            rep.S = 0.0
        if self.check:
            self.verify_limits(rep)

    def verify_limits(self, rep: _Replica):
        decoding_and_lane = rep.b + (1 if rep.lane >= 0 else 0)
        held = (rep.S + (rep.lane_ctx if rep.lane >= 0 else 0)) * self.kvt
        if decoding_and_lane > self.batch or rep.count > self.batch:
            raise InvariantError(f"{decoding_and_lane} sequences on a replica with {self.batch} slots")
        if held > self.budget * (1 + 1e-9) and rep.count > 1:
            raise InvariantError(f"KV held {held:.4g} B exceeds the budget {self.budget:.4g} B")
        if rep.kv > self.budget * (1 + 1e-9) and rep.count > 1:
            raise InvariantError(f"KV reserved {rep.kv:.4g} B exceeds the budget {self.budget:.4g} B")

    # -- joins at a step boundary ----------------------------------------------------

    def join(self, rep: _Replica, ri: int, rid: int):
        """A disaggregated request starts decoding at the replica's next step."""
        k = rep.k
        self.rep_of[rid] = ri
        self.first[rid] = k
        out = self.output[rid]
        if self.spec_k:
            steps = self.spec_steps[rid]
            o = self.spec_offset[rid]
            g = rep.growth
            if k + steps > len(g):
                bigger = np.zeros(max(2 * len(g), k + steps + 1024))
                bigger[:len(g)] = g
                rep.growth = g = bigger
            g[k:k + steps] += self.spec_e[o:o + steps]
            g[k + steps - 1] -= self.spec_overshoot[rid]
        else:
            steps = out
        rep.b += 1
        rep.S += self.prompt[rid]
        heapq.heappush(rep.heap, (k + steps - 1, rid))

    def draw_speculative(self, alpha: float):
        """Tokens per verify step for every request, drawn up front: 1 + accepted drafts
        (each accepted with probability α until the first rejection, at most k). Request i
        owns the slice [offset_i, offset_i + output_i) of one array (a step emits at least
        one token, so that is enough); it needs the steps until its tokens reach its output,
        and its last step emits only what is left."""
        k = self.spec_k
        out = np.asarray(self.output, dtype=np.int64)
        total = int(out.sum())
        if alpha >= 1.0:
            e = np.full(total, k + 1, np.int64)
        elif alpha <= 0.0:
            e = np.ones(total, np.int64)
        else:
            e = 1 + np.minimum(self.rng.geometric(1.0 - alpha, total) - 1, k)
        offset = np.concatenate(([0], np.cumsum(out)[:-1]))
        c = np.cumsum(e)
        before = np.where(offset > 0, c[np.maximum(offset - 1, 0)], 0)
        end = np.searchsorted(c, before + out, side="left")  # index of each request's last step
        steps = end - offset + 1
        self.spec_e = e.astype(float)
        self.spec_offset = offset.tolist()
        self.spec_steps = steps.tolist()
        self.spec_overshoot = (c[end] - before - out).astype(float).tolist()

    def admit(self, rep: _Replica, ri: int):
        queue = self.queue
        if self.chunk > 0:
            if rep.lane < 0:
                rid = rep.lane_pending
                if rid < 0 and queue and self.room(rep, queue[0]):
                    rid = queue.popleft()
                    self.reserve(rep, rid)
                if rid >= 0:
                    self.free_lanes.discard(ri)
                    rep.lane_pending = -1
                    rep.lane = rid
                    rep.lane_ctx = self.cached[rid]
                    rep.lane_left = max(self.prompt[rid] - self.cached[rid], 1)
            return
        if rep.pending:
            for rid in rep.pending:
                self.join(rep, ri, rid)
            rep.pending = []
        while queue and self.room(rep, queue[0]):
            rid = queue.popleft()
            self.reserve(rep, rid)
            self.join(rep, ri, rid)

    # -- plan the next segment -------------------------------------------------------

    def plan(self, rep: _Replica, ri: int):
        b = rep.b
        lane = rep.lane >= 0
        if b == 0 and not lane:
            rep.busy = False
            return
        k = rep.k
        J = SEGMENT_CAP
        if b:
            J = min(J, rep.heap[0][0] - k + 1)
        C = self.chunk
        if lane:
            J = min(J, -(-rep.lane_left // C))
        if b:
            if self.spec_k:
                g = rep.growth[k:k + J]
                S = rep.S + np.concatenate(([0.0], np.cumsum(g[:-1])))
            else:
                S = rep.S + b * np.arange(J, dtype=float)
            mean = S / b
        else:
            mean = np.zeros(J)
        if lane:
            done = C * np.arange(J)
            chunks = np.minimum(C, rep.lane_left - done)
            durs = self.steps.mixed(b, mean, chunks, rep.lane_ctx + done)
            rep.chunks = chunks
        else:
            durs = self.steps.decode(b, mean)
        durs = np.asarray(durs, dtype=float)
        if durs.ndim == 0:
            durs = np.full(J, float(durs))
        rep.durs = durs
        rep.ends = rep.t + np.cumsum(durs)
        rep.nsteps = J
        rep.busy = True
        rep.version += 1
        self.seq += 1
        heapq.heappush(self.events, (float(rep.ends[J - 1]), self.seq, ri, rep.version))
