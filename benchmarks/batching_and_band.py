"""Batched prefill and the calibration band, measured: the batching pool's predicted p99
against the FIFO-with-batching simulation; a scenario planned with batched prefill offered
and not; `plan --robust` with the calibration band against the fixed derate.

    python benchmarks/batching_and_band.py [--scenario SCENARIO] [--parts queue,plans,robust]
                                           [--calibration FILE] [--verify]

Prints Markdown tables (README "Calibrate to your hardware" and RESULTS.md "Batched prefill
and the error band" read them). ``--calibration`` plans the robust rows with a calibration
file (the band then comes from it where it covers an accelerator); without one the robust
rows ask for the shipped defaults' bands (``robust.use_calibration_band=true``). The
reference scenario's plans take 30–60 s each (a robust plan is two), so ``plans`` and
``robust`` together take about ten minutes on two shared cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from optimizer.commands.pipeline import make_plan
from optimizer.commands.verify import fifo_pool, verify_plan
from optimizer.curves.lengths import LengthDistribution
from optimizer.curves.prefill_batch import pass_time_s
from optimizer.curves.queueing import wait_law
from optimizer.curves.roofline import prefill_time_s
from optimizer.curves.tail import geometric_weights, law, sojourn_quantile_s
from optimizer.folder.write import write_plan
from optimizer.scenario import load_scenario
from optimizer.serving.budget import Stages
from optimizer.serving.configs import make_replica, prefill_config

QUEUE_CASES = [("code-completion", "h100-sxm", 4, 2048), ("code-completion", "h100-sxm", 4, 8192),
               ("chat", "b200", 8, 8192)]


def pool_p99_s(stages: Stages, c, lam: float, servers: int) -> float:
    """The predicted p99 of a batching pool's wait + the pass a prompt rides in (the tail of
    the sum, `optimizer.curves.tail`): alone when it found a server free, beside a geometric
    count of others when it waited."""
    kw = c.batching()
    wait = wait_law(lam, servers, c.service_mean_s, c.service_scv, kw["full_prompts"], kw["full_pass_s"])
    p, passes = stages.prompts(c.workload), stages.prefill_passes(c)
    weights = geometric_weights(float(wait.queued) - 1.0, len(passes))
    riding = law(np.concatenate(passes), np.concatenate([p.probs * x for x in weights]))
    return sojourn_quantile_s(float(wait.waits), float(wait.rate_per_s), law(passes[0], p.probs), riding)


def queue_table(requests: int = 40_000) -> str:
    """Predicted p99 (wait + the pass a prompt rides in) against the simulated p99 of arrival
    to the end of its pass, at 50 / 70 / 85 % of the full-pass capacity."""
    s, _ = load_scenario()
    stages = Stages(s)
    rows = ["| workload, replica, budget | prompts per full pass | capacity × one at a time | servers | load | "
            "simulated p99 (ms) | predicted p99 (ms) | predicted / simulated |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rng = np.random.default_rng(1)
    for k, gpu, tp, budget in QUEUE_CASES:
        w = s.workloads[k]
        m, a = s.models[w.model], s.accelerators[gpu]
        r = make_replica(m, a, s.serving, tp, w.weight_dtype, w.kv_dtype)
        c = prefill_config(w, m, a, r, s.serving, batch_tokens=budget)
        lengths = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, m.max_context)
        for n in (1, 4, 16):
            for load in (0.5, 0.7, 0.85):
                lam = load * n * c.lane_rps()
                t = np.cumsum(rng.exponential(1 / lam, requests))
                tokens = lengths.sample(rng, requests)
                cached = np.where(rng.random(requests) < w.prompt_cache_hit_rate,
                                  np.minimum(tokens - 1, w.shared_prefix_tokens), 0)
                _, end = fifo_pool(t, n, prefill_time_s(r, tokens, cached), tokens=tokens, cached=cached,
                                   batch_tokens=budget, batch_service=lambda x, y: pass_time_s(r, x, y))
                simulated = 1e3 * np.quantile((end - t)[requests // 10:], 0.99)
                predicted = 1e3 * pool_p99_s(stages, c, lam, n)
                rows.append(f"| {k}, {gpu} ×{tp}, {budget:,} | {c.batch_prompts:.2f} | "
                            f"{c.lane_rps() * c.service_mean_s:.2f} | {n} | {load:.0%} | {simulated:,.1f} | "
                            f"{predicted:,.1f} | {predicted / simulated:.2f} |")
    return "\n".join(rows)


def _gpus(plan, role: str | None = None) -> int:
    pools = plan.tables["pools"]
    pools = pools[pools["lost_site"].isna()]
    if role:
        pools = pools[pools["role"] == role]
    per_slice = (pools["replicas"] * pools["gpus_per_replica"]).groupby(
        [pools["period"], pools["day_type"], pools["hour"]]).sum()
    return int(per_slice.max()) if len(per_slice) else 0


def plans_table(scenario, verify: bool) -> str:
    rows = ["| batched prefill | cost/year | gap | GPUs at peak | prefill GPUs at peak | prefill configs | wall s |"
            + (" verify |" if verify else ""), "|---|---:|---:|---|---:|---|---:|" + ("---|" if verify else "")]
    for label, overrides in (("offered (2,048 / 4,096 / 8,192 tokens)", []),
                             ("not offered", ["serving.prefill_batch_tokens=[]"])):
        t0 = time.perf_counter()
        plan = make_plan(scenario, overrides)
        wall = time.perf_counter() - t0
        sm = plan.summary
        curves = plan.tables["curves"]
        prefill = curves[curves["role"] == "prefill"]
        used = ", ".join(sorted(prefill["id"]))
        row = (f"| {label} | ${sm['total_cost_usd']:,.0f} | {100 * sm['mip_gap']:.1f} % | "
               + ", ".join(f"{g} {n:,}" for g, n in sm["gpus_by_type_peak"].items())
               + f" | {_gpus(plan, 'prefill'):,} | {used} | {wall:.0f} |")
        if verify:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                checked = verify_plan(write_plan(plan, Path(tmp) / "plan"), requests=20000)
                sm_v = checked.summary
                row += (f" TTFT attainment ≥ {sm_v['ttft_attainment_min']:.4f}, "
                        f"{'every objective met' if sm_v['all_objectives_met'] else 'MISSED'} |")
        rows.append(row)
    return "\n".join(rows)


def robust_table(scenario, calibration: str | None) -> str:
    base = [f"calibration={calibration}"] if calibration else []
    rows = ["| robust plan | efficiencies | cost/year | nominal cost/year | price of robustness | GPUs added at peak |",
            "|---|---|---:|---:|---:|---:|"]
    for label, overrides in (("all margins", []), ("efficiencies only", ["robust.demand_factor=1",
                                                                         "robust.rtt_margin_ms=0"])):
        for how, switch in (("calibration band (p90)", "true"), ("fixed ×0.85", "false")):
            plan = make_plan(scenario, base + overrides + [f"robust.use_calibration_band={switch}"], robust=True)
            r = plan.summary["robust"]
            rows.append(f"| {label} | {how} | ${plan.summary['total_cost_usd']:,.0f} | ${r['nominal_cost_usd']:,.0f} | "
                        f"{100 * r['price_of_robustness']:.1f} % | {r['extra_gpus_peak']:+,} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=None, help="scenario file (default: the reference)")
    ap.add_argument("--parts", default="queue,plans,robust")
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--verify", action="store_true", help="also simulate the plans of the plans table")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    if "queue" in parts:
        print("### The batching pool's p99 against the simulation\n\n" + queue_table() + "\n")
        sys.stdout.flush()
    if "plans" in parts:
        print("### Batched prefill offered and not\n\n" + plans_table(args.scenario, args.verify) + "\n")
        sys.stdout.flush()
    if "robust" in parts:
        print("### Robust plans: the calibration band against the fixed derate\n\n"
              + robust_table(args.scenario, args.calibration) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
