"""A synthetic request log whose prefixes recur with a known law, for `fleetplan demand`.

    python benchmarks/reuse_log.py LOG.csv [--hours 4] [--starts-per-s 5] [--p 0.6] [--t50 20] [--sigma 1]

Prefix chains start as a Poisson process (``--starts-per-s``); each use of a prefix is
followed by another with probability p after a time T, ln T ~ N(ln T₅₀, σ²). In the steady
state a share p of requests reuse a prefix (a chain of geometric length has p/(1 − p) reuses
per start), so `fleetplan demand --from-trace chat=LOG.csv` should read back p, T₅₀ and σ
— and the reusable share 0.4, each prefix being 40 % of its prompt. Prompts are uniform in
500–2,999 tokens, outputs in 10–299; timestamps from 2024-05-02 00:00 UTC to the µs.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

PREFIX_SHARE = 0.4


def chain_times(rng: np.random.Generator, starts_per_s: float, span_s: float, p: float, t50_s: float,
                sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times (s, sorted) and the chain (prefix) of each request."""
    t = np.sort(rng.uniform(0, span_s, rng.poisson(starts_per_s * span_s)))
    chain = np.arange(len(t))
    times, chains = [t], [chain]
    while len(t):
        go = rng.random(len(t)) < p
        t, chain = t[go] + np.exp(np.log(t50_s) + sigma * rng.standard_normal(go.sum())), chain[go]
        inside = t < span_s
        t, chain = t[inside], chain[inside]
        times.append(t)
        chains.append(chain)
    t, chain = np.concatenate(times), np.concatenate(chains)
    order = np.argsort(t, kind="stable")
    return t[order], chain[order]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--starts-per-s", type=float, default=5.0)
    ap.add_argument("--p", type=float, default=0.6)
    ap.add_argument("--t50", type=float, default=20.0, help="median time between two uses of a prefix, s")
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t, chain = chain_times(rng, args.starts_per_s, args.hours * 3600, args.p, args.t50, args.sigma)
    prompt = rng.integers(500, 3000, len(t))
    stamps = pd.Timestamp("2024-05-02") + pd.to_timedelta(t, unit="s")
    pd.DataFrame({"timestamp": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "prompt_tokens": prompt,
                  "completion_tokens": rng.integers(10, 300, len(t)), "prefix_id": [f"prefix-{c}" for c in chain],
                  "prefix_tokens": (prompt * PREFIX_SHARE).astype(np.int64)}).to_csv(args.log, index=False)
    print(f"{args.log}: {len(t):,} requests over {args.hours:g} h")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
