"""Predicted latencies of a plan — one prediction behind slo.csv, `stress` and `verify`'s
predicted columns.

Per (site, workload, slice) the plan's pools at their loads (× the workload's peak factor):

* a decode pool settles at the batch b* of Little's law, b* = λ_replica·(output/E)·step(b*)
  (E tokens a step, speculative); its steps fluctuate around step(b*) with the batch and
  the batch's mean context (`curves.tail.step_states`), which gives its inter-token gaps
  (`curves.tail.gap_law`) and the mean step a first token waits for. A colocated replica
  settles likewise, its iterations carrying a prefill chunk a share ρ of the time (its
  lane's utilisation);
* a prefill (or colocated) pool's wait (`curves.queueing.wait_law`) and the stages after it
  (`optimizer.serving.budget.Stages`: the pass, the KV transfer over the slower of the two NICs, the
  decode pool's first step) give the TTFT of a request entering it; a tier's requests mix
  over its entry pools and their decode pools by the plan's flow shares
  (`curves.tail.Mixtures`), and its gaps over those decode pools by their tokens.

A route adds its round trip and the fixed overheads: slo.csv gives each routed arc's p99 at
its worst slice, `stress` each arc at each slice, `verify` the p99 of the mixture of a
simulated group's routes (rate-weighted) beside the simulated one — like with like.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from optimizer.base.units import MS_PER_S, Regime, Role
from optimizer.curves.lengths import LengthDistribution, prompt_lengths
from optimizer.curves.queueing import wait_law
from optimizer.curves.roofline import decode_step_time_s, mixed_step_time_s
from optimizer.curves.speculative import speculative_step_time_s
from optimizer.curves.tail import (
    GapLaw,
    Law,
    Mixtures,
    compress,
    gap_law,
    gap_quantile_s,
    geometric_weights,
    inflight_context,
    law,
    pack,
    settled_batch,
    step_states,
)
from optimizer.serving.budget import Stages, TtftPath, path
from optimizer.serving.configs import ServingConfig, make_replica
from optimizer.serving.experts import speculation

SLICE = ["period", "day_type", "hour"]
TIER_KEYS = ["site", "workload", "tier", *SLICE]
LAW_POINTS = 128  # points of each stage law in a prediction (the upper tail finely)
QUANTILE = 0.99  # the columns are p99s, whatever attainment a workload requires


@dataclass(frozen=True)
class Steps:
    """A batching pool at its settled batch: the mean step a joining request waits for (a
    colocated replica: the iteration carrying a chunk, its prefill lane's pace) and the
    pool's gaps."""

    step_s: float
    gaps: GapLaw


@dataclass(frozen=True)
class Component:
    """Requests of a tier that enter one pool (and, disaggregated, hand off to one decode
    pool): their share of the tier, their wait and the stages after it (indices into the
    prediction's laws), and what the stages were made of (to split a p99 into parts)."""

    weight: float
    waits: float
    rate_per_s: float
    alone: int
    riding: int
    config: ServingConfig | None
    nic_bytes_per_s: float = 0.0
    step_s: float = 0.0  # disaggregated: the decode pool's mean step
    batch: float = 0.0  # colocated: the settled batch beside the lane


class Predictor:
    """The physics a prediction needs for one scenario's configs, kept per config."""

    def __init__(self, s, configs: dict[str, ServingConfig | None]):
        self.s = s
        self.configs = configs
        self.stages = Stages(s)
        self._steps: dict = {}
        self._bases: dict = {}
        self._chunks: dict = {}

    def _step_of(self, c: ServingConfig):
        """(step(b, context) broadcasting, the replica, the mean in-flight context and its
        variance, the step at b = 1 … slots at the mean context) of a decode or colocated
        config (colocated: its decode step without a chunk)."""
        if c.id not in self._steps:
            s = self.s
            w = s.workloads[c.workload]
            m = s.models[w.model]
            r = make_replica(m, s.accelerators[c.gpu], s.serving, c.gpus, c.weight_dtype, c.kv_dtype,
                             expert_parallel=c.expert_parallel)
            isl = prompt_lengths(w, m.max_context)
            osl = LengthDistribution(w.osl_mean_tokens, w.osl_p99_tokens, m.max_context)
            context, spread = inflight_context(w.isl_mean_tokens, isl.spread_sigma, osl.mu, osl.sigma)
            spec = speculation(s.serving, c.expert_parallel)
            if c.speculative:
                def step(b, ctx):
                    return speculative_step_time_s(r, b, ctx, spec.draft_tokens, spec.draft_cost_ratio)
            else:
                def step(b, ctx):
                    return decode_step_time_s(r, b, ctx)
            b = np.arange(1, max(c.batch, 1) + 1, dtype=float)
            self._steps[c.id] = (step, r, context, spread, np.asarray(step(b, context), dtype=float))
        return self._steps[c.id]

    def decode_steps(self, c: ServingConfig, load_rps: float, replicas: int) -> Steps:
        """A decode pool of ``replicas`` carrying ``load_rps`` (peak-sized) at its settled batch."""
        step, _, context, spread, table = self._step_of(c)
        per_request = self.s.workloads[c.workload].osl_mean_tokens / c.tokens_per_step
        b = settled_batch(lambda x: np.interp(x, np.arange(1, len(table) + 1), table), per_request,
                          load_rps / max(replicas, 1), len(table))
        d, pi, batch = step_states(step, b, replicas, context, spread, len(table))
        return Steps(float(np.sum(pi * d)), gap_law(d, pi, batch, c.tokens_per_step))

    def _lane(self, c: ServingConfig) -> tuple[np.ndarray, np.ndarray, Law]:
        """A colocated config's prefill lane: (batches, mean lane time per prompt at each —
        linear in between — and the extra time a chunk adds to an iteration at the middle
        batch, over the chunks of the workload's prompts, each chunk one iteration)."""
        if c.id not in self._chunks:
            step, r, context, _, table = self._step_of(c)
            p = self.stages.prompts(c.workload)
            batches = np.unique(np.linspace(1, len(table), 9).round())
            lanes = [float(np.dot(x.alone.values_s, x.alone.probs)) for x in (self.stages.colocated(c, b) for b in batches)]
            new = np.maximum(p.new, 1.0)
            count = np.ceil(new / c.chunk_tokens).astype(int)
            j = np.concatenate([np.arange(n) for n in count])
            size = np.minimum(np.repeat(new, count) - j * c.chunk_tokens, c.chunk_tokens)
            start = np.repeat(p.cached, count) + j * c.chunk_tokens
            middle = batches[len(batches) // 2]
            extra = np.asarray(mixed_step_time_s(r, middle, context, size, start), dtype=float) - float(step(middle, context))
            self._chunks[c.id] = (batches, np.array(lanes), compress(law(extra, np.repeat(p.probs, count)), 16))
        return self._chunks[c.id]

    def colocated_steps(self, c: ServingConfig, load_rps: float, replicas: int) -> tuple[Steps, float]:
        """(steps, settled batch b*) of a colocated pool: iterations without a chunk take the
        decode step, with one that step plus the chunk's extra (`_lane`), a share ρ of the
        time — the lane's utilisation λ·(lane time per prompt); b* from Little's law at the
        mean iteration."""
        step, _, context, spread, table = self._step_of(c)
        w = self.s.workloads[c.workload]
        batches, lanes, extra = self._lane(c)
        rate = load_rps / max(replicas, 1)
        b_all = np.arange(1, len(table) + 1)
        busy = np.minimum(rate * np.interp(b_all, batches, lanes), 0.95)
        mean = (1.0 - busy) * table + busy * (table + extra.mean_s)
        b = settled_batch(lambda x: np.interp(x, b_all, mean), w.osl_mean_tokens, rate, len(mean))
        rho = float(np.interp(b, b_all, busy))
        d, pi, batch = step_states(step, b, replicas, context, spread, len(table))
        mixed = d[..., None] + extra.values_s
        durations = np.concatenate((d.ravel(), mixed.ravel()))
        probs = np.concatenate(((1.0 - rho) * pi.ravel(), rho * (pi[..., None] * extra.probs).ravel()))
        batches_ = np.concatenate((batch.ravel(), np.broadcast_to(batch[..., None], mixed.shape).ravel()))
        return Steps(float(np.sum(pi * d)), gap_law(durations, probs, batches_)), b

    def prefill_bases(self, c: ServingConfig, nic_bytes_per_s: float):
        """(X₀ before the decode step, riding passes before it sorted, their probabilities,
        which riding count each is) of prefill config ``c`` handing off over ``nic``."""
        key = (c.id, nic_bytes_per_s)
        if key not in self._bases:
            p = self.stages.prompts(c.workload)
            transfer = self.stages.transfer_s(c.workload, nic_bytes_per_s)
            passes = self.stages.prefill_passes(c)
            alone = compress(law(passes[0] + transfer, p.probs), LAW_POINTS)
            values = np.concatenate([x + transfer for x in passes])
            order = np.argsort(values, kind="stable")
            probs = np.tile(p.probs, len(passes))[order]
            count = np.repeat(np.arange(len(passes)), len(p.probs))[order]
            self._bases[key] = (alone, values[order], probs, count)
        return self._bases[key]


def flow_shares(weights, replicas) -> np.ndarray:
    """Flow shares among pools (by load; by replicas where none carries any) — as verify splits."""
    w = np.asarray(weights, dtype=float)
    if w.sum() <= 0:
        w = np.asarray(replicas, dtype=float)
    if w.sum() <= 0:
        w = np.ones(len(w))
    return w / w.sum()


@dataclass
class Prediction:
    """Per tier (site, workload, tier, period, day type, hour): its TTFT components and its
    gaps; quantiles of any mixture of tiers behind round trips."""

    s: object
    predictor: Predictor
    laws: list[Law] = field(default_factory=list)
    tiers: dict = field(default_factory=dict)  # tier key → [Component]
    gaps: dict = field(default_factory=dict)  # tier key → [(weight, GapLaw)]

    def add_law(self, x: Law) -> int:
        self.laws.append(x)
        return len(self.laws) - 1

    def ttft_p99_ms(self, groups: list[list[tuple]], stages_only: bool = False, quantile: float = QUANTILE) -> np.ndarray:
        """Per group of routes [(tier key, weight, round trip ms), …]: the q-quantile of their
        TTFT mixture in ms (inf where some route's tier serves nothing); ``stages_only``:
        with no waits (the q-quantile of overheads + stages)."""
        parts = defaultdict(list)
        overhead = self.s.serving.fixed_overhead_ms
        for g, routes in enumerate(groups):
            for key, weight, rtt_ms in routes:
                for c in self.tiers.get(key) or [Component(1.0, 1.0, 0.0, 0, 0, None)]:
                    parts["item"].append(g)
                    parts["weight"].append(weight * c.weight)
                    parts["offset_s"].append((rtt_ms + overhead) / MS_PER_S)
                    parts["waits"].append(0.0 if stages_only else c.waits)
                    parts["rate_per_s"].append(c.rate_per_s)
                    parts["alone"].append(c.alone)
                    parts["riding"].append(c.riding)
        if not parts:
            return np.full(len(groups), np.nan)
        mix = Mixtures(**{k: np.asarray(v) for k, v in parts.items()}, laws=pack(self.laws or [law([0.0])], LAW_POINTS))
        return mix.quantiles_s(len(groups), quantile) * MS_PER_S

    def itl_p99_ms(self, groups: list[list[tuple]], quantile: float = QUANTILE) -> np.ndarray:
        """Per group of [(tier key, weight), …]: the q-quantile of their gaps in ms."""
        out = []
        for routes in groups:
            laws = [(weight * w, g) for key, weight in routes for w, g in self.gaps.get(key, [])]
            out.append(gap_quantile_s(laws, quantile) * MS_PER_S if laws else np.inf)
        return np.array(out)

    def path(self, key: tuple, rtt_ms: float, total_ms: float, stages_ms: float) -> TtftPath:
        """A tier's p99 TTFT ``total_ms`` behind ``rtt_ms``, in parts: the queue is what the
        waits add to the p99 of the overheads and stages (``stages_ms``, `ttft_p99_ms` with
        ``stages_only``); the stages split the rest as in the tier's largest component
        (`optimizer.serving.budget.split_stages`)."""
        c = max(self.tiers[key], key=lambda x: x.weight)
        stages = self.predictor.stages
        x = stages.disaggregated(c.config, c.nic_bytes_per_s, c.step_s) if c.config.role == Role.PREFILL else \
            stages.colocated(c.config, c.batch)
        after = (stages_ms - rtt_ms - self.s.serving.fixed_overhead_ms) / MS_PER_S
        return path(self.s, rtt_ms, max(total_ms - stages_ms, 0.0), x, max(after, 0.0))


@dataclass(frozen=True)
class PoolRow:
    """One pools.csv row, as `predict` reads it."""

    site: str
    workload: str
    tier: int
    role: str
    speed: int
    config: str
    period: str
    day_type: str
    hour: int
    replicas: int
    requests_per_s: float


def _rows(pools: pd.DataFrame) -> list[PoolRow]:
    columns = [f.name for f in PoolRow.__dataclass_fields__.values()]
    values = [pools[c].tolist() for c in columns]
    return [PoolRow(site, k, int(tier), role, int(speed), config, period, day, int(hour), round(n), float(lam))
            for site, k, tier, role, speed, config, period, day, hour, n, lam in zip(*values)]


def predict(s, configs: dict[str, ServingConfig | None], pools: pd.DataFrame) -> Prediction:
    """The `Prediction` of a plan's nominal pools (pools.csv rows: site, workload, tier,
    role, speed, config, period, day_type, hour, replicas, requests_per_s) with the plan's
    configs (None: a config that no longer fits — its pools serve nothing)."""
    out = Prediction(s, Predictor(s, configs))
    groups: dict = defaultdict(list)
    for row in _rows(pools):
        groups[(row.site, row.workload, row.period, row.day_type, row.hour)].append(row)
    entries = []  # (tier key, pool row, share of the tier, [(decode share, (row, Steps, config))])
    for (site, k, *slice_), rows in sorted(groups.items()):
        ptm = s.peak_to_mean(k)
        decode = defaultdict(list)
        tiers = defaultdict(list)
        for row in rows:
            if row.role == Role.DECODE:
                c = configs.get(row.config)
                steps = out.predictor.decode_steps(c, ptm * row.requests_per_s, row.replicas) \
                    if c is not None and row.replicas > 0 else None
                decode[row.speed].append((row, steps, c))
            elif row.requests_per_s > 0:
                tiers[row.tier].append(row)
        for tier, tier_rows in sorted(tiers.items()):
            share = flow_shares([r.requests_per_s for r in tier_rows], [r.replicas for r in tier_rows])
            for row, w in zip(tier_rows, share):
                after = decode.get(row.speed, [])
                split = flow_shares([r.requests_per_s for r, _, _ in after], [r.replicas for r, _, _ in after]) if after else []
                entries.append(((site, k, tier, *slice_), row, w, list(zip(split, after))))
    _add_entries(out, s, configs, entries)
    return out


def _add_entries(out: Prediction, s, configs, entries) -> None:
    """Each tier's TTFT components and gaps, with the waits of all entry pools computed at once."""
    colocated = {}
    for i, (_, row, _, _) in enumerate(entries):
        c = configs.get(row.config)
        if c is not None and row.role == Role.COLOCATED and row.replicas > 0:
            steps, b = out.predictor.colocated_steps(c, s.peak_to_mean(row.workload) * row.requests_per_s,
                                                     int(row.replicas))
            colocated[i] = (steps, b, out.predictor.stages.colocated(c, b))
    waits = _waits(s, configs, entries, colocated)
    for i, (key, row, share, after) in enumerate(entries):
        c = configs.get(row.config)
        C, theta, queued = waits[i]
        if c is None or row.replicas <= 0:
            out.tiers.setdefault(key, []).append(Component(share, 1.0, 0.0, 0, 0, None))
            continue
        if row.role == Role.COLOCATED:
            steps, b, x = colocated[i]
            at = out.add_law(compress(x.alone, LAW_POINTS))
            out.tiers.setdefault(key, []).append(Component(share, C, theta, at, at, c, batch=b))
            out.gaps.setdefault(key, []).append((share, steps.gaps))
            continue
        if not after:  # nowhere to hand off: it never ends
            out.tiers.setdefault(key, []).append(Component(share, 1.0, 0.0, 0, 0, None))
        for split, (d_row, steps, d_config) in after:
            if steps is None:
                out.tiers.setdefault(key, []).append(Component(share * split, 1.0, 0.0, 0, 0, None))
                continue
            nic = min(c.nic_bytes_per_s, d_config.nic_bytes_per_s)
            alone, values, probs, count = out.predictor.prefill_bases(c, nic)
            d = steps.step_s
            at = out.add_law(alone.shifted(d, d))
            riding = at
            if c.prefill_batch_tokens:
                mix = probs * geometric_weights(queued - 1.0, int(count.max()) + 1)[count]
                riding = out.add_law(compress(Law(values + d, mix / mix.sum(), d), LAW_POINTS))
            out.tiers.setdefault(key, []).append(Component(share * split, C, theta, at, riding, c, nic, d))
            out.gaps.setdefault(key, []).append((share * split, steps.gaps))


def _waits(s, configs, entries, colocated) -> list[tuple[float, float, float]]:
    """(C, θ, m_q) of each entry pool, one vectorised `wait_law` call at its workload's
    attainment; a colocated lane's service time is its prompts' lane time at the settled batch."""
    rows = []
    for i, (_, row, _, _) in enumerate(entries):
        c = configs.get(row.config)
        lam = s.peak_to_mean(row.workload) * row.requests_per_s
        q = s.workloads[row.workload].slo_attainment
        if c is None or row.replicas <= 0:
            rows.append((1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, q))
        elif i in colocated:
            lane = colocated[i][2].alone
            mean = float(np.dot(lane.values_s, lane.probs))
            scv = max(float(np.dot(lane.values_s ** 2, lane.probs)) / mean ** 2 - 1.0, 0.0)
            third = float(np.dot(lane.values_s ** 3, lane.probs)) / mean ** 3
            rows.append((lam, row.replicas, mean, scv, 1.0, mean, third, q))
        else:
            batching = c.batching()
            rows.append((lam, row.replicas, c.service_mean_s, c.service_scv, batching.get("full_prompts", 1.0),
                         batching.get("full_pass_s", c.service_mean_s), c.service_third_ratio, q))
    if not rows:
        return []
    a = np.array(rows, dtype=float).T
    law_ = wait_law(a[0], a[1], a[2], a[3], a[4], a[5], service_third_ratio=a[6], quantile=a[7])
    return list(zip(law_.waits.tolist(), law_.rate_per_s.tolist(), law_.queued.tolist()))


def slo_table(s, inst, sol, pools_df: pd.DataFrame) -> pd.DataFrame:
    """Predicted p99 TTFT and ITL per (metro, workload, site, tier) routed in any nominal
    slice, at its worst slice (`predict`), with the TTFT's parts."""
    nominal = pools_df[pools_df["lost_site"].isna()] if len(pools_df) else pools_df
    rtt_of = {(a.metro, a.site): a.rtt_ms for a in inst.arcs[Regime.NOMINAL]}
    slice_of = {t: (r.period, r.day_type, int(r.hour)) for t, r in zip(inst.slices.index, inst.slices.itertuples())}
    routes = [{"metro": m, "workload": k, "site": site, "tier": tier,
               **dict(zip(SLICE, slice_of[inst.states[sid].slice])), "rtt_ms": rtt_of[(m, site)]}
              for (m, site, k, tier, sid), x in sorted(sol.routes.items()) if inst.states[sid].lost_site is None]
    configs = {p.config.id: p.config for p in inst.pools}
    return arc_table(s, configs, nominal, pd.DataFrame(routes, columns=["metro", "workload", "site", "tier", *SLICE,
                                                                         "rtt_ms"]))


def route_predictions(s, configs, pools: pd.DataFrame, routes: pd.DataFrame) -> tuple[pd.DataFrame, Prediction]:
    """Each route row (metro, workload, site, tier, slice, rtt_ms) with its predicted p99
    TTFT and ITL in ms (``ttft_p99_ms``, ``itl_p99_ms``, ``stages_ms`` — the p99 with no
    waits), and the prediction they came from."""
    prediction = predict(s, configs, pools)
    keys = sorted(set(map(tuple, routes[TIER_KEYS].itertuples(index=False)))) if len(routes) else []
    tiers = pd.DataFrame(keys, columns=TIER_KEYS)
    tiers["ttft_ms"] = prediction.ttft_p99_ms([[(k, 1.0, 0.0)] for k in keys]) if keys else []
    tiers["stages_ms"] = prediction.ttft_p99_ms([[(k, 1.0, 0.0)] for k in keys], stages_only=True) if keys else []
    tiers["itl_p99_ms"] = prediction.itl_p99_ms([[(k, 1.0)] for k in keys]) if keys else []
    out = routes.merge(tiers, on=TIER_KEYS, how="left")
    out["ttft_p99_ms"] = out["ttft_ms"] + out["rtt_ms"]
    out["stages_ms"] = out["stages_ms"] + out["rtt_ms"]
    return out.drop(columns="ttft_ms"), prediction


def arc_table(s, configs, pools: pd.DataFrame, routes: pd.DataFrame) -> pd.DataFrame:
    """slo.csv: per routed arc, the slice with the highest predicted p99 TTFT (its ITL: the
    highest of any slice), in parts."""
    columns = ["metro", "workload", "site", "tier", "ttft_p99_ms_predicted", "ttft_p99_ms_objective",
               "itl_p99_ms_predicted", "itl_p99_ms_objective", "network_ms", "overhead_ms", "queue_ms", "prefill_ms",
               "transfer_ms", "first_token_ms", "mode"]
    if routes.empty:
        return pd.DataFrame(columns=columns)
    rows, prediction = route_predictions(s, configs, pools, routes)
    arcs = ["metro", "workload", "site", "tier"]
    worst = rows.sort_values(["ttft_p99_ms", *SLICE], kind="stable").groupby(arcs, sort=True).tail(1)
    itl = rows.groupby(arcs)["itl_p99_ms"].max()
    out = []
    for r in worst.sort_values(arcs).itertuples(index=False):
        w = s.workloads[r.workload]
        key = (r.site, r.workload, int(r.tier), r.period, r.day_type, int(r.hour))
        if key not in prediction.tiers:  # a solver's residue (1e-8 requests/s) into a tier no pool serves
            continue
        parts = prediction.path(key, r.rtt_ms, r.ttft_p99_ms, r.stages_ms)
        out.append({"metro": r.metro, "workload": r.workload, "site": r.site, "tier": int(r.tier),
                    "ttft_p99_ms_predicted": parts.total_ms, "ttft_p99_ms_objective": w.ttft_p99_ms,
                    "itl_p99_ms_predicted": float(itl[(r.metro, r.workload, r.site, r.tier)]),
                    "itl_p99_ms_objective": w.itl_p99_ms, "network_ms": parts.network_ms,
                    "overhead_ms": parts.overhead_ms, "queue_ms": parts.queue_ms, "prefill_ms": parts.prefill_ms,
                    "transfer_ms": parts.transfer_ms, "first_token_ms": parts.first_token_ms, "mode": parts.mode})
    return pd.DataFrame(out, columns=columns)
