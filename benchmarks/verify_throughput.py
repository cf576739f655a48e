"""Throughput of `fleetplan verify`'s simulation, and the engine choice behind it.

    python benchmarks/verify_throughput.py [--plan DIR] [--slices peak] [--requests 20000]
                                           [--workers 1,2] [--skip-plan]

Prints one Markdown table: engine, case, requests simulated, seconds, requests/minute.

* Synthetic cases run the same model in two engines — the own event loop of
  `optimizer.commands.verify.engine` and a simpy version written here — so the engine cost alone is
  compared:
  - a FIFO M/M/4 pool (the dedicated prefill queue): 200,000 jobs at utilisation 0.8;
  - a decode pool: 4 replicas of Llama-3.1-8B on one H100 each, 64 slots, 20,000 requests
    (output lengths lognormal, mean 200, p99 800 tokens) at 60 % of the slots' capacity; the
    step time comes from the same tabulated roofline curve in both engines. simpy wakes each
    replica once per step; the own loop plans the steps between two batch changes in one
    vectorised call.
* The real plan: `verify_plan` on a plan folder (default: the reference scenario planned into
  a temporary folder first, ~1 min) at its peak slices, once per worker count.

simpy is optional (the library does not depend on it); without it its rows are skipped.

Measured 2026-12-02 on 2 cores shared with other jobs (load average 2–5, so the 2-process
row is no faster than one: each worker got about a third of a core):

| engine | case | requests simulated | seconds | requests/minute |
|---|---|---:|---:|---:|
| own event loop | FIFO M/M/4 pool, ρ 0.8 | 200,000 | 0.06 | 196,638,211 |
| simpy | FIFO M/M/4 pool, ρ 0.8 | 200,000 | 2.68 | 4,480,973 |
| own event loop | decode pool, 4 × 64 slots | 20,000 | 0.80 | 1,500,150 |
| simpy | decode pool, 4 × 64 slots | 20,000 | 5.96 | 201,410 |
| own event loop, 1 process | reference plan, peak slices (62 groups) | 1,303,929 | 86.40 | 905,504 |
| own event loop, 2 processes | reference plan, peak slices (62 groups) | 1,303,929 | 127.18 | 615,153 |
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np

from optimizer.commands.verify import PoolSpec, StepModel, fifo_pool, simulate_pool, verify_plan
from optimizer.commands.verify.steps import TabulatedSteps
from optimizer.curves.lengths import LengthDistribution
from optimizer.curves.memory import kv_budget_bytes
from optimizer.scenario import load_scenario
from optimizer.serving.configs import make_replica

try:
    import simpy
except ImportError:  # optional
    simpy = None


def _row(engine, case, n, seconds, note=""):
    return {"engine": engine, "case": case, "requests": n, "seconds": seconds,
            "per_minute": n / seconds * 60.0 if seconds > 0 else float("inf"), "note": note}


# ---------------------------------------------------------------------------- FIFO pool


def fifo_case(n=200_000, servers=4, rho=0.8, seed=0):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / (rho * servers), n))
    service = rng.exponential(1.0, n)
    return arrivals, service, servers


def simpy_fifo(arrivals, service, servers):
    env = simpy.Environment()
    pool = simpy.Resource(env, capacity=servers)
    waits = np.empty(len(arrivals))

    def job(i):
        with pool.request() as req:
            yield req
            waits[i] = env.now - arrivals[i]
            yield env.timeout(service[i])

    def source():
        last = 0.0
        for i, t in enumerate(arrivals.tolist()):
            yield env.timeout(t - last)
            last = t
            env.process(job(i))

    env.process(source())
    env.run()
    return waits


# ---------------------------------------------------------------------------- decode pool


def decode_case(n=20_000, replicas=4, slots=64, load=0.6, seed=1):
    s, _ = load_scenario()
    w = s.workloads["code-completion"]
    r = make_replica(s.models[w.model], s.accelerators["h100-sxm"], s.serving, 1, w.weight_dtype, w.kv_dtype)
    steps = TabulatedSteps(StepModel(r))
    rng = np.random.default_rng(seed)
    prompt = LengthDistribution(800, 3000).sample(rng, n)
    output = LengthDistribution(200, 800).sample(rng, n)
    step = float(steps.decode(slots, np.array([1000.0]))[0])
    rate = load * replicas * slots / (output.mean() * step)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    spec = PoolSpec(replicas, slots, kv_budget_bytes(r), r.kv_bytes_per_token, steps)
    return spec, arrivals, prompt, output


def simpy_decode(spec: PoolSpec, arrivals, prompt, output):
    """The same continuous batching in simpy: one process per replica, one timeout per step
    (slots only; the own loop also keeps the KV limit, which does not bind here)."""
    env = simpy.Environment()
    waiting: deque = deque()
    idle: list = []
    first = np.full(len(arrivals), np.nan)
    steps = spec.steps

    def replica():
        active: dict = {}
        context = 0.0
        while True:
            while waiting and len(active) < spec.batch:
                i = waiting.popleft()
                active[i] = int(output[i])
                context += prompt[i]
            if not active:
                wake = env.event()
                idle.append(wake)
                yield wake
                continue
            b = len(active)
            dt = float(steps.decode(b, np.array([context / b]))[0])
            yield env.timeout(dt)
            context += b
            done = []
            for i in active:
                if np.isnan(first[i]):
                    first[i] = env.now
                active[i] -= 1
                if active[i] == 0:
                    done.append(i)
            for i in done:
                context -= prompt[i] + output[i]
                del active[i]

    def source():
        last = 0.0
        for i, t in enumerate(arrivals.tolist()):
            yield env.timeout(t - last)
            last = t
            waiting.append(i)
            if idle:
                idle.pop().succeed()

    for _ in range(spec.replicas):
        env.process(replica())
    env.process(source())
    env.run()
    return first - arrivals


def synthetic_rows():
    rows = []
    arrivals, service, c = fifo_case()
    t0 = time.perf_counter()
    start, _ = fifo_pool(arrivals, c, service)
    own = time.perf_counter() - t0
    rows.append(_row("own event loop", "FIFO M/M/4 pool, ρ 0.8", len(arrivals), own,
                     f"mean wait {np.mean(start - arrivals):.3f} s"))
    if simpy is not None:
        t0 = time.perf_counter()
        waits = simpy_fifo(arrivals, service, c)
        rows.append(_row("simpy", "FIFO M/M/4 pool, ρ 0.8", len(arrivals), time.perf_counter() - t0,
                         f"mean wait {waits.mean():.3f} s"))
    spec, arrivals, prompt, output = decode_case()
    t0 = time.perf_counter()
    out = simulate_pool(spec, arrivals, prompt, output)
    own = time.perf_counter() - t0
    _, e, off = out.concatenated()
    ttft = e[off[out.replica] + out.first_step] - arrivals
    rows.append(_row("own event loop", "decode pool, 4 × 64 slots", len(arrivals), own,
                     f"first-token p50 {np.median(ttft) * 1e3:.1f} ms"))
    if simpy is not None:
        t0 = time.perf_counter()
        ttft = simpy_decode(spec, arrivals, prompt, output)
        rows.append(_row("simpy", "decode pool, 4 × 64 slots", len(arrivals), time.perf_counter() - t0,
                         f"first-token p50 {np.nanmedian(ttft) * 1e3:.1f} ms"))
    return rows


# ---------------------------------------------------------------------------- a real plan


def plan_rows(plan_dir, slices, requests, workers):
    rows = []
    for n in workers:
        res = verify_plan(plan_dir, slices=slices, requests=requests, seed=0, workers=n)
        sm = res.summary
        rows.append(_row(f"own event loop, {n} process{'es' if n > 1 else ''}",
                         f"{Path(plan_dir).name} plan, {slices} slices ({sm['groups']} groups)",
                         sm["requests_simulated"], sm["seconds"],
                         f"all objectives met: {sm['all_objectives_met']}"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", help="plan folder (default: plan the reference scenario into a temp folder)")
    ap.add_argument("--slices", default="peak")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--skip-plan", action="store_true", help="synthetic cases only")
    args = ap.parse_args(argv)
    rows = synthetic_rows()
    if not args.skip_plan:
        plan = args.plan
        if plan is None:
            plan = str(Path(tempfile.mkdtemp(prefix="verify-bench-")) / "reference")
            subprocess.run([sys.executable, "-m", "optimizer.cli", "plan", "--out", plan, "--quiet"], check=False)
        rows += plan_rows(plan, args.slices, args.requests, [int(x) for x in args.workers.split(",")])
    print("| engine | case | requests simulated | seconds | requests/minute | note |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['case']} | {r['requests']:,} | {r['seconds']:.2f} | "
              f"{r['per_minute']:,.0f} | {r['note']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
