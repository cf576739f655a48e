"""`verify`: prove a plan's latency promise by simulating its pools request by request.

The planner promises p99 TTFT and ITL from analytic shortcuts — Erlang C with the
Allen–Cunneen correction for the prefill queue, the p99 prompt for prefill time, a tail
factor on the operating step for ITL. This discrete-event simulation shares none of them:
it samples requests (Poisson arrivals per route at requests/s × peak-to-mean; lognormal
prompt and output lengths; prompt-cache hits — or a request log replayed, `arrivals`) and
runs the plan's pools explicitly, using
only the per-request and per-step curves (`roofline.prefill_time_s`,
`decode_step_time_s`, `mixed_step_time_s`, `speculative.speculative_step_time_s`):

* dedicated prefill pools: FIFO over ``replicas`` servers, as the plan's config says — one
  prompt at a time, or batched: a server that frees takes the waiting prompts up to the
  config's budget of B new tokens in one pass (`prefill_batch.pass_time_s` of those
  prompts), all of which finish together. ``prefill_batch_tokens`` is a what-if that puts
  every prefill pool at one budget (0: one at a time) — on compute-bound prefill batching
  gains little throughput and makes the first prompt of a batch wait for the others. Then
  each KV moves to a decode pool (chosen by the plan's flow shares) over the slower replica
  NIC + the transfer latency;
* decode pools: continuous batching — a request joins a replica with a free slot and KV
  room at its next step boundary (else waits FIFO), each step takes the decode (or
  speculative) step time at the batch's current size and mean context, speculative steps
  emit 1 + accepted drafts per sequence; the first step emits the first token;
* colocated pools: one FIFO of prompts; a replica's prefill lane takes the next prompt
  when free and prefills it in chunks inside its iterations (mixed step time); the
  iteration carrying the last chunk emits the first token.
Details and deviations are in `engine` (slot/KV reservation) and `group` (warm-up: queues
start empty and the first 10 % of arrivals are not counted; decode batches start at their
steady state, since filling them from empty takes longer than that; uncounted arrivals
continue for a cool-down after the counted ones).

Predicted beside it: the p99s of the same mixture of routes through the same pools
(`optimizer.results.latency`: per group, its routes weighted by their rates behind their
round trips; per metro, its routes over the groups it was simulated in) — not the worst
arc of slo.csv, which promises each arc at its worst slice.

Measured per request: TTFT = RTT + fixed overheads + time from arrival at the pool to the
first token; every inter-token gap (tokens of one speculative step after its first have
gap 0). TTFT attainment = share of requests with TTFT ≤ objective; ITL attainment = share
of gaps ≤ objective; goodput fraction = tokens of requests that met TTFT whose gap is inside
the ITL objective (the first token counts as inside) ÷ all tokens. A group passes an
objective when its attainment ≥ the workload's ``slo_attainment``. ITL quantiles are read
from a histogram with 0.1 % bins; per metro they are the mixture of its sites' gap
distributions weighted by its gaps there (requests of all metros share a site's replicas at
random), while its attainments and goodput are counted exactly from its own requests.

Engine: own event loop (heapq + numpy per replica), not simpy. Measured with
``benchmarks/verify_throughput.py`` (2 cores shared with other jobs), the same model in both:
a FIFO M/M/4 pool of 200,000 jobs takes 0.05–0.06 s in the own loop and 2.7–3.4 s with
simpy's Resource (a generator, a request and two events per job: ~50× slower); a decode pool
of 4 replicas × 64 slots serving 20,000 requests takes 0.8 s against 6.0 s (7.5×), because a
simpy replica must wake once per step while the own loop plans all steps between two batch
changes with one vectorised curve call and truncates that plan lazily when a request joins
— its cost follows joins and completions, not steps or tokens. The reference plan's peak
slices (62 groups, 1.3 M requests simulated) take 86–126 s in one process (0.6–0.9 M
requests/minute). simpy's processes, resources and interrupts buy nothing for a model whose
only shared resource is a FIFO queue.

Reproducible: every (site, workload, slice) group draws from its own streams seeded by
(seed, the group's key), so results depend on nothing but the seed — not on the order of
groups or the number of worker processes.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.outputs import write_csv, write_text_atomic
from optimizer.base.units import Role
from optimizer.commands.verify.arrivals import POISSON
from optimizer.commands.verify.engine import ENGINE, fifo_pool, simulate_pool
from optimizer.commands.verify.group import (
    Group,
    Options,
    PlanModel,
    simulate_group,
)
from optimizer.commands.verify.replicas import InvariantError, PoolSpec
from optimizer.commands.verify.slices import plan_groups
from optimizer.commands.verify.steps import ConstantSteps, StepModel
from optimizer.commands.verify.tables import (
    COLUMNS,
    by_metro,
    by_pool,
    goodput_tokens,
    measured_summary,
    predictions,
    verified_token_billing,
)
from optimizer.folder.read import read_plan, scenario_of
from optimizer.instance.kvcache import cache_options, read_law, with_kv_cache

__all__ = ["verify_plan", "write_verify", "record_verification", "VerifyResult", "Options", "fifo_pool", "simulate_pool", "PoolSpec",
           "StepModel", "ConstantSteps", "InvariantError", "ENGINE"]


@dataclass
class VerifyResult:
    tables: dict[str, pd.DataFrame]
    summary: dict
    groups: list = field(default_factory=list, repr=False)

    def side_by_side(self) -> pd.DataFrame:
        """Per workload: predicted p99s (slo.csv) beside measured ones (worst simulated site
        and slice), attainments, goodput, and whether it passes."""
        t = self.tables["by_pool"]
        if t.empty:
            return pd.DataFrame()
        g = t.groupby("workload")
        out = pd.DataFrame({
            "requests": g["requests"].sum(),
            "ttft_p99_ms_predicted": g["ttft_p99_ms_predicted"].max(),
            "ttft_p99_ms_measured": g["ttft_p99_ms"].max(),
            "ttft_p99_ms_objective": g["ttft_p99_ms_objective"].first(),
            "itl_p99_ms_predicted": g["itl_p99_ms_predicted"].max(),
            "itl_p99_ms_measured": g["itl_p99_ms"].max(),
            "itl_p99_ms_objective": g["itl_p99_ms_objective"].first(),
            "ttft_attainment": g["ttft_attainment"].min(),
            "itl_attainment": g["itl_attainment"].min(),
            "goodput_fraction": g["goodput_fraction"].min(),
            "passes": g["ttft_pass"].all() & g["itl_pass"].all(),
        })
        return out.reset_index()


# ---------------------------------------------------------------------------- running


_WORKER: dict = {}


def served_scenario(plan, plan_dir):
    """(the scenario as the plan serves it, the tiers' reads): with KV-cache tiers each
    workload with its own objectives — a hit's read is added to its simulated TTFT — and the
    cached prefix and hit rate of the candidate cache the plan serves most of it with; each
    entry pool then serves its own candidate's hit rate (pools.csv ``cache_hit_rate``) and
    reads by its candidate's law, keyed (workload, candidate). A folder written before the plan
    chose among candidates (no ``options`` rows, no ``cache_option`` column) is served as it
    was planned: every pool of a workload at its pre-solve optimum, reads keyed by workload.
    Else the plan's scenario and no reads."""
    s = scenario_of(plan, plan_dir)
    both = cache_options(s)
    if both is None:
        check_pool_caches(plan.tables["pools"], {}, Path(plan_dir))
        return s, {}
    served = plan.summary.get("kv_cache", {}).get("workloads", {})
    options = {k: planned_options(o, served.get(k, {}).get("options", [])) for k, o in both[0].items()}
    legacy = {k for k in options if not served.get(k, {}).get("options")}
    check_pool_caches(plan.tables["pools"], {k: o for k, o in options.items() if k not in legacy}, Path(plan_dir))
    main = {k: max(range(len(o)), key=lambda i: (_share(served, k, i), -i)) for k, o in options.items()}
    chosen = {k: both[1][k] if k in legacy else o[main[k]] for k, o in options.items()}
    s = with_kv_cache(s, chosen, objectives_less_reads=False)
    s = s.model_copy(update={"workloads": {  # every candidate caches the same prefix; a pool hits at its own rate
        k: w.model_copy(update={"shared_prefix_tokens": options[k][0].cached_tokens}) for k, w in s.workloads.items()}})
    reads = dict(read_law({k: chosen[k] for k in legacy}))
    for k, o in options.items():
        if k not in legacy:
            for i, law in read_law(dict(enumerate(o))).items():
                reads[(k, i)] = law
    return s, reads


def check_pool_caches(pools: pd.DataFrame, options: dict, plan_dir: Path) -> None:
    """Each pool's candidate cache in pools.csv is one the plan chose among, at that
    candidate's hit rate — both follow from the scenario's ``kv_cache`` section, so a
    hand-edited cell would simulate a cache the plan never priced."""
    if "cache_option" not in pools:
        return
    for line, row in enumerate(pools.itertuples(index=False), start=2):
        option = int(row.cache_option)
        if option < 0:
            continue
        cands = options.get(row.workload, ())
        origin = Origin(str(plan_dir / "pools.csv"), line)
        if option >= len(cands):
            chose = f"0 to {len(cands) - 1}" if cands else "none: the scenario has no kv_cache tiers for it"
            raise ScenarioError(f"candidate cache {option} of {row.workload} is not one the plan chose among ({chose})",
                                origin, field="cache_option")
        if abs(float(row.cache_hit_rate) - cands[option].hit_rate) > 1e-6:
            raise ScenarioError(f"hit rate {float(row.cache_hit_rate):g} is not candidate {option}'s "
                                f"{cands[option].hit_rate:.6f} (set by the scenario's kv_cache section; change that "
                                "and plan again)", origin, field="cache_hit_rate")


def planned_options(generated: tuple, rows: list[dict]) -> tuple:
    """The candidate caches the plan chose among (the kv_cache block's ``options`` rows, which
    may be fewer than generated: `pipeline.consolidated`), found among those generated by
    their capacities; all generated where the block has no rows."""
    if not rows:
        return generated
    out = []
    for r in rows:
        want = [1e9 * r["capacity_gb_per_rps"].get(t, 0.0) for t in generated[0].tiers]
        out.append(next(c for c in generated if np.allclose(c.capacity_bytes_per_rps, want, rtol=1e-9, atol=1.0)))
    return tuple(out)


def _share(served: dict, k: str, option: int) -> float:
    """The share of workload k's requests the plan serves with candidate ``option``."""
    rows = served.get(k, {}).get("options", [])
    return float(rows[option]["request_share"]) if option < len(rows) else 0.0


def read_ms_added(plan, reads: dict) -> dict[str, float]:
    """Per workload, the slowest read among the candidate caches the plan serves it with (the
    prediction's added TTFT: the plan budgeted each candidate's own)."""
    served = plan.summary.get("kv_cache", {}).get("workloads", {})
    out: dict[str, float] = {}
    for key, (_, r) in reads.items():
        k, option = key if isinstance(key, tuple) else (key, None)
        if option is None or _share(served, k, option) > 0:
            out[k] = max(out.get(k, 0.0), float(r.max(initial=0.0)))
    return out


def load_model(plan_dir, exact_steps=False) -> PlanModel:
    plan = read_plan(plan_dir)
    s, reads = served_scenario(plan, plan_dir)
    return PlanModel(s, plan.tables["curves"], exact_steps, reads)


def _worker_init(plan_dir, exact_steps, arrivals):
    _WORKER["model"] = load_model(plan_dir, exact_steps)
    _WORKER["arrivals"] = arrivals


def _worker_run(args):
    group, requests, seed, opt = args
    t0 = time.perf_counter()
    res = simulate_group(_WORKER["model"], group, requests, seed, opt, _WORKER["arrivals"])
    return res, time.perf_counter() - t0


def verify_plan(plan_dir, slices="peak", requests=20000, seed=0, progress=None, *, workers=None,
                options: Options | None = None, prefill_batch_tokens: int | None = None,
                arrivals=POISSON, state: str | None = None) -> VerifyResult:
    """Simulate a plan folder's pools at the chosen slices; measured vs predicted p99s.

    ``requests`` — per (site, workload, slice) group, the arrivals of its measured window
    (fewer at low load: at most an hour of arrivals); 90 % of them are counted after the
    warm-up. A group with long decodes at a high rate simulates more arrivals than that: its
    warm-up lasts at least half, and its cool-down one, mean decode duration (`group`).
    ``workers`` — processes (default: 1 for small runs, else up to the CPU count); results
    do not depend on it. ``prefill_batch_tokens`` (None: as planned) overrides ``options``. ``arrivals``: Poisson
    arrivals × the peak factor with lognormal lengths (default), or a log replayed
    (`arrivals.Trace`). ``state``: a contingency state's pools instead (e.g. "spot@ashburn":
    a zone's spot taken, after its notice and before replacements finish their cold start),
    with the routes of its slice scaled to its flows (`slices.state_routing`).
    """
    t0 = time.perf_counter()
    say = progress or (lambda msg: None)
    opt = Options(**vars(options)) if options is not None else Options()
    if prefill_batch_tokens is not None:
        opt.prefill_batch_tokens = int(prefill_batch_tokens)
    plan = read_plan(plan_dir)
    s, reads = served_scenario(plan, plan_dir)
    groups = plan_groups(plan.tables, slices, state, s.serving.tier_rtt_ms)
    arrivals.prepare(groups)
    jobs = [(g, int(requests), int(seed), opt) for g in groups]
    if workers is None:
        workers = 1 if len(groups) * requests < 200_000 else min(os.cpu_count() or 1, len(groups))
    results: list = [None] * len(groups)
    if workers <= 1 or len(groups) <= 1:
        model = PlanModel(s, plan.tables["curves"], opt.exact_steps, reads)
        for i, (g, n, sd, o) in enumerate(jobs):
            t1 = time.perf_counter()
            results[i] = simulate_group(model, g, n, sd, o, arrivals)
            _report(say, i + 1, len(groups), g, results[i], _timed(results[i], time.perf_counter() - t1))
    else:
        model = PlanModel(s, plan.tables["curves"], reads=reads)
        order = sorted(range(len(groups)), key=lambda i: -_expected_work(model, groups[i], requests, opt))
        with ProcessPoolExecutor(workers, initializer=_worker_init,
                                 initargs=(str(plan_dir), opt.exact_steps, arrivals)) as ex:
            futures = {ex.submit(_worker_run, jobs[i]): i for i in order}  # the longest first
            for n, f in enumerate(as_completed(futures)):
                i = futures[f]
                results[i], secs = f.result()
                _report(say, n + 1, len(groups), groups[i], results[i], _timed(results[i], secs))
    done = [r for r in results if r is not None]
    predicted = predictions(s, plan.tables, done, read_ms_added(plan, reads))
    tables = {"by_pool": by_pool(s, predicted, done), "by_metro": by_metro(s, predicted, done)}
    summary = measured_summary(s, tables, done, seed, time.perf_counter() - t0, opt, groups)
    summary["arrivals"] = arrivals.name
    good, tokens = goodput_tokens(s, done)
    goodput = {k: good[k] / tokens[k] for k in tokens if tokens[k]}
    summary["token_billing"] = verified_token_billing(plan.summary.get("token_billing"), goodput)
    result = VerifyResult(tables, summary, done)
    summary["prompt_split"] = split_rollup(s, result.side_by_side())
    return result


def split_rollup(s, side: pd.DataFrame) -> dict:
    """Per workload the plan split at a prompt length: its attainments over both parts, each
    part's weighted by its share of the requests (Σ f_i·a_i), against the workload's own
    (Σ f_i·required_i, which the parts' objectives were set to keep); {} without splits."""
    parts = {k: w.prompt_part for k, w in s.workloads.items() if w.prompt_part is not None}
    if not parts or side.empty:
        return {}
    out: dict = {}
    for row in side.itertuples(index=False):
        part = parts.get(row.workload)
        if part is None:
            continue
        b = out.setdefault(part.parent, {"parts": [], "required": 0.0, "ttft_attainment": 0.0, "itl_attainment": 0.0})
        b["parts"].append(row.workload)
        b["required"] += part.share * s.workloads[row.workload].slo_attainment
        b["ttft_attainment"] += part.share * row.ttft_attainment
        b["itl_attainment"] += part.share * row.itl_attainment
    for b in out.values():
        b["passes"] = bool(min(b["ttft_attainment"], b["itl_attainment"]) >= b["required"] - 1e-9)
    return out


def _expected_work(model: PlanModel, g: Group, requests: int, opt: Options) -> float:
    """Arrivals a group will simulate (as `simulate_group` sizes it), for scheduling."""
    lam = sum(r.requests_per_s for r in g.routes) * model.s.peak_to_mean(g.workload)
    fill = max([model.decode_seconds(p.config) for p in g.pools if p.role != Role.PREFILL], default=0.0)
    colocated = any(p.role == Role.COLOCATED for p in g.pools)
    return (min(requests, lam * opt.cap_s) + lam * fill * 3.0) * (2.0 if colocated else 1.0)


def _timed(res, secs: float) -> float:
    if res is not None:
        res.extra["seconds"] = secs
    return secs


def _report(say, i, n, g: Group, res, secs):
    count = 0 if res is None else len(res.ttft_ms)
    say(f"[{i}/{n}] {g.site} {g.workload} {g.period}/{g.day_type}/{g.hour}: {count} requests counted "
        f"({0 if res is None else res.simulated} simulated) in {secs:.1f} s")


# ---------------------------------------------------------------------------- writing


def record_verification(result: VerifyResult, plan_dir, key: str = "verification") -> None:
    """Put the simulated figures beside the predicted ones in the plan's summary.json."""
    d = Path(plan_dir)
    summary = json.loads((d / "summary.json").read_text())
    summary[key] = {**{k: v for k, v in result.summary.items() if k != "seconds"},
                               "by_workload": result.side_by_side().to_dict("records")}
    write_text_atomic(d / "summary.json", json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")


def write_verify(result: VerifyResult, plan_dir, name: str = "verify") -> Path:
    """NAME.csv (both tables; ``scope`` "site" or "metro") and NAME.json (the summary), each
    written to a temporary file in the plan folder and renamed into place."""
    d = Path(plan_dir)
    site = result.tables["by_pool"].assign(scope="site")
    metro = result.tables["by_metro"].assign(scope="metro")
    cols = ["scope", "metro", "site", "workload", "period", "day_type", "hour"] + COLUMNS + ["requests_simulated"]
    table = pd.concat([site, metro], ignore_index=True).reindex(columns=cols)
    write_csv(table, d / f"{name}.csv", float_format="%.6g")
    write_text_atomic(d / f"{name}.json", json.dumps(result.summary, indent=2, sort_keys=True, default=str) + "\n")
    return d / f"{name}.csv"
