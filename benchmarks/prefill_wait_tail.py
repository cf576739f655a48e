"""A prefill pool's p99 wait: the law the plan sizes with against a FIFO simulation of the pool.

    python benchmarks/prefill_wait_tail.py [--scenario data/scenarios/deepseek-moe.yaml]
        [--workload reasoning] [--gpu h200-sxm] [--gpus 8] [--batch-tokens 8192]
        [--servers 1,2] [--arrivals 200000] [--seeds 2]

For each pool size and utilisation (of the full-pass capacity n·k_B/S_B, or n/S̄ one prompt at
a time), Poisson arrivals of the workload's prompts (log-normal lengths, prompt-cache hits)
through `verify`'s FIFO pool with batching, and the p99 wait measured (the first tenth of
arrivals left out), its spread over seeds, against three laws: the two-moment exponential
(`wait_law` without the third moment), the law the plan uses (with the service's third moment,
`queueing.tail_rate_per_s`), and how much of the p99 a single simulated hour moves (the
seeds of one hour's arrivals at the pool's rate). Prints one Markdown table (RESULTS.md,
"The wait's heavy tail").
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from optimizer.commands.verify import fifo_pool
from optimizer.curves.lengths import LengthDistribution
from optimizer.curves.prefill_batch import pass_time_s
from optimizer.curves.queueing import wait_law
from optimizer.curves.roofline import prefill_time_s
from optimizer.scenario import load_scenario
from optimizer.serving.configs import make_replica, prefill_config

UTILISATIONS = (0.5, 0.6, 0.7, 0.8, 0.85)
HOUR_S = 3600.0


def pool_arguments(ap: argparse.ArgumentParser) -> None:
    """The flags that name one prefill pool (shared with `hourly_p99_spread.py`)."""
    ap.add_argument("--scenario", default="data/scenarios/deepseek-moe.yaml")
    ap.add_argument("--workload", default="reasoning")
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--batch-tokens", type=int, default=8192, help="0: one prompt at a time")


def the_pool(args):
    """(workload, replica, prefill config, prompt law) of the pool ``args`` name."""
    s, _ = load_scenario(args.scenario)
    w = s.workloads[args.workload]
    m, a = s.models[w.model], s.accelerators[args.gpu]
    r = make_replica(m, a, s.serving, args.gpus, w.weight_dtype, w.kv_dtype)
    c = prefill_config(w, m, a, r, s.serving, check_fit=False, batch_tokens=args.batch_tokens)
    return w, r, c, LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, m.max_context)


def simulated_waits(r, w, isl, batch_tokens, servers, lam, arrivals, seed):
    """(arrival times, waits) in s of ``arrivals`` Poisson arrivals through `verify`'s FIFO pool."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / lam, arrivals))
    s = isl.sample(rng, arrivals)
    hit = rng.random(arrivals) < w.prompt_cache_hit_rate
    cached = np.where(hit, np.minimum(int(w.shared_prefix_tokens), s - 1), 0)
    start, _ = fifo_pool(t, servers, prefill_time_s(r, s, cached), tokens=s, cached=cached, batch_tokens=batch_tokens,
                         batch_service=lambda tok, cac: pass_time_s(r, tok, cac))
    return t, start - t


def simulate_p99_s(r, w, isl, batch_tokens, servers, lam, arrivals, seed):
    _, wait = simulated_waits(r, w, isl, batch_tokens, servers, lam, arrivals, seed)
    return float(np.quantile(wait[arrivals // 10:], 0.99))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pool_arguments(ap)
    ap.add_argument("--servers", default="1,2")
    ap.add_argument("--arrivals", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args(argv)
    w, r, c, isl = the_pool(args)
    print(f"{c.id}: S̄ {c.service_mean_s * 1e3:.1f} ms, c² {c.service_scv:.3f}, E[S³]/E[S]³ "
          f"{c.service_third_ratio:.2f}, k_B {c.batch_prompts:.3f}, S_B {c.batch_pass_ms:.1f} ms", file=sys.stderr)
    print("| replicas | utilisation | arrivals/s | p99 wait simulated (ms) | one hour's p99 (ms) | exponential law | "
          "law with the third moment | law / simulated |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.servers.split(",")):
        for util in UTILISATIONS:
            lam = util * n * c.lane_rps()
            long_run = [simulate_p99_s(r, w, isl, args.batch_tokens, n, lam, args.arrivals, seed)
                        for seed in range(args.seeds)]
            hour = [simulate_p99_s(r, w, isl, args.batch_tokens, n, lam, int(lam * HOUR_S), 100 + seed)
                    for seed in range(4)]
            two = float(wait_law(lam, n, c.service_mean_s, c.service_scv, **c.batching()).quantile_s(0.99))
            three = float(wait_law(lam, n, c.service_mean_s, c.service_scv, **c.batching(),
                                   service_third_ratio=c.service_third_ratio).quantile_s(0.99))
            sim = float(np.mean(long_run))
            print(f"| {n} | {util:.2f} | {lam:.2f} | {sim * 1e3:,.0f} ({min(long_run) * 1e3:,.0f}–"
                  f"{max(long_run) * 1e3:,.0f}) | {min(hour) * 1e3:,.0f}–{max(hour) * 1e3:,.0f} | {two * 1e3:,.0f} | "
                  f"{three * 1e3:,.0f} | {three / sim:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
