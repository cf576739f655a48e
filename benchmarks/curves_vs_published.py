"""The analytic curves against published serving measurements (FACTS.md §7).

    python benchmarks/curves_vs_published.py

Prints a Markdown table of modelled vs published tokens/s with their ratio, a one-line
verdict, and how the `roofline_sharpness` setting (and, for contrast, `decode_mfu`) moves the
median ratio. Not part of the test suite; it runs in a couple of seconds.

Assumptions (stated again in the printed output):

* MLPerf Inference v4.1 closed, Llama-2-70B, Offline (FACTS §7.1, status C). Llama-2-70B has
  the shape of Llama-3.1-70B (80 layers, hidden 8192, 64 heads, 8 KV heads) except a 4k
  context and a 32k vocabulary (68.98 B vs 70.55 B parameters, 2.3 % fewer weight bytes): the
  catalogue's `llama-3.1-70b` row stands in for it.
* OpenOrca requests: mean input ≈ 294 tokens, mean output ≈ 286 tokens; Offline measures
  output tokens/s at saturation.
* FP8 weights and FP8 KV on every accelerator (H100/H200/B200 TensorRT-LLM, MI300X vLLM, L40S).
  NB: NVIDIA's v4.1 B200 entry actually ran FP4 (reported by Tom's Hardware, copy at
  https://worldnl.com/nvidia-publishes-first-blackwell-b200-mlperf-results-up-to-4x-faster-than-its-h100-predecessor-when-31162.html);
  an extra row models it at FP4 (weights 0.5 B, 2× the FP8 rate) for information.
* Saturation: the largest batch the KV budget holds with prompt + output reserved per
  sequence, no ITL limit, decode stepping at the mean context (prompt + half the output).
  Prefill is charged as extra compute: each request adds FLOPs(prompt)/(p·F·η_prefill) of
  replica time, spread over its output tokens, so
      tokens/s per replica = 1 / (step(b)/b + t_prefill/output_tokens).
  Where the saturated step is compute-bound (every HBM part here) prefill has nothing to hide
  behind, so the additive charge is right; where it is memory-bound (L40S, the 8B row) chunked
  prefill could overlap the weight reads and the additive charge errs low, by at most the
  prefill share of the time.
* The best parallel degree (tokens/s per GPU) within the submitted system size is used, as a
  submitter tuning for Offline would.
* Framework points (FACTS §7.2, status S): the vLLM 1×H100 Llama-3.1-8B saturation figure
  (prompt/output lengths not given; assumed 512 in / 256 out, as in [R6]); and the
  Llama-3.3-70B FP8 1×H100 closed-loop points at concurrency 1/10/50 with 512 in / 256 out
  (Llama-3.3-70B has the Llama-3.1-70B shape): throughput = c·256 / (prefill(512) + 256·step(c)),
  with c capped by the KV ceiling. These are secondary sources; they are shown, flagged when
  they exceed the physical roofline ceiling, and kept out of the MLPerf medians.

The "ceiling" column is physics, not a model: peak FLOP/s and HBM bandwidth at 100 %, no
overheads or communication; compute per output token includes its share of prefill, memory
counts the weights and KV read per step at the run's concurrency (unbounded for Offline).
A published figure above its ceiling cannot be output tokens/s as stated.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.configs import make_replica, parallel_degrees  # noqa: E402
from optimizer.curves.memory import kv_budget_bytes, max_concurrency  # noqa: E402
from optimizer.curves.roofline import (  # noqa: E402
    decode_step_parts,
    decode_step_time_s,
    prefill_flops,
    prefill_time_s,
)
from optimizer.curves.shapes import Replica  # noqa: E402
from optimizer.scenario import Serving, load_scenario  # noqa: E402

MLPERF_ISL, MLPERF_OSL = 294, 286
R6_ISL, R6_OSL = 512, 256
SHARPNESS = [1.5, 2.0, 3.0, 5.0, math.inf]


@dataclass(frozen=True)
class Point:
    label: str
    source: str
    model: str
    gpu: str
    gpus: int  # GPUs in the published system (per-GPU figures for MLPerf)
    published: float  # tokens/s (per GPU for MLPerf rows)
    kind: str  # "offline" | "closed"
    isl: int
    osl: int
    dtype: str = "fp8"
    concurrency: int = 0
    fp4: bool = False
    in_median: bool = True  # primary (C) figures calibrate; secondary (S) are shown only


POINTS = [
    Point("MLPerf v4.1 Offline, 8×H100 (NVIDIA)", "§7.1 [R1]", "llama-3.1-70b", "h100-sxm", 8, 24_524.9 / 8,
          "offline", MLPERF_ISL, MLPERF_OSL),
    Point("MLPerf v4.1 Offline, 8×H200 (NVIDIA, 700 W)", "§7.1 [R1]", "llama-3.1-70b", "h200-sxm", 8,
          31_302.7 / 8, "offline", MLPERF_ISL, MLPERF_OSL),
    Point("MLPerf v4.1 Offline, 8×MI300X (AMD)", "§7.1 [R1]", "llama-3.1-70b", "mi300x", 8, 23_514.8 / 8,
          "offline", MLPERF_ISL, MLPERF_OSL),
    Point("MLPerf v4.1 Offline, 1×B200 (NVIDIA)", "§7.1 [R1]", "llama-3.1-70b", "b200", 1, 11_264.4,
          "offline", MLPERF_ISL, MLPERF_OSL),
    Point("MLPerf v4.1 Offline, 8×L40S (Fujitsu)", "§7.1 [R1]", "llama-3.1-70b", "l40s", 8, 3_717.74 / 8,
          "offline", MLPERF_ISL, MLPERF_OSL),
    Point("  same 1×B200 modelled at FP4 (as submitted)", "§7.1 [R1]", "llama-3.1-70b", "b200", 1, 11_264.4,
          "offline", MLPERF_ISL, MLPERF_OSL, fp4=True, in_median=False),
    Point("vLLM saturation, Llama-3.1-8B bf16, 1×H100", "§7.2 [R5] (S)", "llama-3.1-8b", "h100-sxm", 1, 5_333,
          "offline", R6_ISL, R6_OSL, dtype="bf16", in_median=False),
    Point("vLLM, Llama-3.3-70B FP8, 1×H100, concurrency 1", "§7.2 [R6] (S)", "llama-3.1-70b", "h100-sxm", 1, 120,
          "closed", R6_ISL, R6_OSL, concurrency=1, in_median=False),
    Point("vLLM, Llama-3.3-70B FP8, 1×H100, concurrency 10", "§7.2 [R6] (S)", "llama-3.1-70b", "h100-sxm", 1, 650,
          "closed", R6_ISL, R6_OSL, concurrency=10, in_median=False),
    Point("vLLM, Llama-3.3-70B FP8, 1×H100, concurrency 50", "§7.2 [R6] (S)", "llama-3.1-70b", "h100-sxm", 1,
          1_850, "closed", R6_ISL, R6_OSL, concurrency=50, in_median=False),
]


def catalogue():
    """Every catalogue row (a scenario with no tables named takes all of data/)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "all.yaml"
        path.write_text("name: all\n")
        scenario, _ = load_scenario(path)
    return scenario


def build(cat, point: Point, gpus: int, serving: Serving, sharpness: float) -> Replica | None:
    r = make_replica(cat.models[point.model], cat.accelerators[point.gpu], serving, gpus, point.dtype, point.dtype)
    if r is None:
        return None
    r = dataclasses.replace(r, eff=dataclasses.replace(r.eff, roofline_sharpness=sharpness))
    if point.fp4:  # FP4 weights: half a byte each, twice the FP8 tensor rate; KV stays FP8
        r = dataclasses.replace(r, weight_bytes_per_param=0.5,
                                hw=dataclasses.replace(r.hw, dense_flops_per_s=2 * r.hw.dense_flops_per_s))
    return r


@dataclass
class Modelled:
    tokens_per_s: float  # per GPU for offline rows, per replica for closed-loop rows
    gpus: int
    batch: int
    step_ms: float
    compute_share: float  # compute / memory time of the step (>1: compute-bound)
    note: str = ""


def offline(r: Replica, isl: int, osl: int) -> Modelled | None:
    b = int(max_concurrency(r, isl + osl))
    if b < 1:
        return None
    context = isl + osl / 2
    step = float(decode_step_time_s(r, b, context))
    prefill_s = float(prefill_flops(r.model, isl)) / (r.gpus * r.hw.dense_flops_per_s * r.eff.prefill_mfu)
    per_replica = 1.0 / (step / b + prefill_s / osl)
    mem, comp, _ = decode_step_parts(r, b, context)
    return Modelled(per_replica / r.gpus, r.gpus, b, step * 1e3, float(comp / mem))


def closed_loop(r: Replica, isl: int, osl: int, concurrency: int) -> Modelled | None:
    b_max = int(max_concurrency(r, isl + osl))
    if b_max < 1:
        return None
    b = min(concurrency, b_max)
    context = isl + osl / 2
    step = float(decode_step_time_s(r, b, context))
    per_request = float(prefill_time_s(r, isl)) + osl * step
    mem, comp, _ = decode_step_parts(r, b, context)
    note = f"KV holds {b_max}; {concurrency - b} queued" if b < concurrency else ""
    return Modelled(b * osl / per_request, r.gpus, b, step * 1e3, float(comp / mem), note)


def model_point(cat, point: Point, serving: Serving, sharpness: float) -> Modelled | None:
    best = None
    for p in parallel_degrees(cat.models[point.model], cat.accelerators[point.gpu], serving):
        if p > point.gpus:
            continue
        r = build(cat, point, p, serving, sharpness)
        if r is None or kv_budget_bytes(r) <= 0:
            continue
        m = offline(r, point.isl, point.osl) if point.kind == "offline" else closed_loop(
            r, point.isl, point.osl, point.concurrency)
        if m is not None and (best is None or m.tokens_per_s > best.tokens_per_s):
            best = m
    return best


def ceiling(cat, point: Point) -> float:
    """Physical upper bound on output tokens/s (per GPU for offline rows): 100 % of peak
    FLOP/s and HBM bandwidth, no overhead, no communication, one GPU's share."""
    r = build(cat, point, 1, Serving(), math.inf)
    m = r.model
    context = point.isl + point.osl / 2
    d_qk, d_v = m.attention_dims
    decode_flops = 2 * m.params_active + m.layers * m.heads * (d_qk + d_v) * 2 * context
    per_token_flops = decode_flops + float(prefill_flops(m, point.isl)) / point.osl
    compute_bound = r.hw.dense_flops_per_s / per_token_flops
    if point.kind == "offline":
        return compute_bound
    c = point.concurrency
    step_bytes = r.weight_bytes + c * context * r.kv_bytes_per_token
    return min(compute_bound, c * r.hw.hbm_bytes_per_s / step_bytes)


def typical_error(ratios) -> float:
    """exp(mean |ln ratio|): 1.25 means off by 25 % either way on average."""
    return float(np.exp(np.mean(np.abs(np.log(np.asarray(ratios, dtype=float))))))


def fmt(x: float, digits: int = 0) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:,.{digits}f}"


def main() -> int:
    cat = catalogue()
    serving = Serving()
    print("# fleetplan curves vs published serving measurements (FACTS.md §7)\n")
    print(f"Serving defaults: prefill_mfu {serving.prefill_mfu}, decode_mbu {serving.decode_mbu}, "
          f"decode_mfu {serving.decode_mfu}, step overhead {serving.step_overhead_ms} ms, "
          f"usable HBM {serving.usable_hbm_fraction}, roofline_sharpness {serving.roofline_sharpness:g}.")
    print("Llama-2-70B is modelled with the llama-3.1-70b row (same shape; 4k context, 32k vocabulary, "
          "2.3 % fewer weights). MLPerf: FP8 weights + FP8 KV, OpenOrca mean 294 in / 286 out, output "
          "tokens/s per GPU at the largest batch the KV budget holds (no ITL limit), prefill charged as "
          "extra compute per output token, best TP within the submitted system. Framework rows "
          "(status S): lengths 512 in / 256 out (assumed for [R5]); closed loop at the stated "
          "concurrency.\n")

    rows = []
    print("| published point | source | modelled config | modelled tok/s | published tok/s | ratio | ceiling tok/s |")
    print("|---|---|---|---:|---:|---:|---:|")
    for point in POINTS:
        m = model_point(cat, point, serving, serving.roofline_sharpness)
        top = ceiling(cat, point)
        unit = "/GPU" if point.kind == "offline" else ""
        flag = " ⚠ above ceiling" if point.published > top else ""
        if m is None:
            config, modelled, ratio = "does not fit", float("nan"), float("nan")
        else:
            regime = "compute" if m.compute_share > 1 else "memory"
            config = (f"{point.dtype if not point.fp4 else 'fp4'} TP{m.gpus}, b={m.batch}, step {m.step_ms:.1f} ms "
                      f"({regime}-bound, compute/memory {m.compute_share:.1f}{', ' + m.note if m.note else ''})")
            modelled, ratio = m.tokens_per_s, m.tokens_per_s / point.published
        rows.append((point, ratio, m))
        print(f"| {point.label.strip()} | {point.source} | {config} | {fmt(modelled)}{unit} | "
              f"{fmt(point.published)}{unit}{flag} | {fmt(ratio, 2)} | {fmt(top)}{unit} |")

    mlperf = [(point, ratio, m) for point, ratio, m in rows if point.in_median and math.isfinite(ratio)]
    values = [ratio for _, ratio, _ in mlperf]
    median = float(np.median(values))
    fp4 = next(ratio for point, ratio, _ in rows if point.fp4)
    as_submitted = [fp4 if point.gpu == "b200" else ratio for point, ratio, _ in mlperf]
    median_fp4 = float(np.median(as_submitted))
    per_row = ", ".join(f"{point.gpu} {ratio:.2f}" for point, ratio, _ in mlperf)
    shares = [m.compute_share for point, _, m in mlperf if m.compute_share > 1]
    direction = "low (pessimistic)" if median < 1 else "high (optimistic)"
    print(f"\n**Verdict:** median modelled/published over the five MLPerf rows is {median:.2f} — the curves "
          f"err {direction} as briefed (B200 at FP8), but {median_fp4:.2f} with the B200 row at FP4 as actually "
          f"submitted; per row ({per_row}) the error runs both ways (typical ×{typical_error(values):.2f}): "
          "H100/H200/B200 (TensorRT-LLM) are under-predicted, MI300X (vLLM 0.4.3) and the GDDR6 L40S "
          "over-predicted — a "
          "software/vendor spread one set of efficiencies cannot capture, not a bias of the roofline. "
          f"The saturated HBM-part steps sit {min(shares):.1f}–{max(shares):.1f}× past the ridge, so their "
          f"ratio is set by decode_mfu ({serving.decode_mfu}), not by the roofline's shape; the secondary "
          "[R6] points at concurrency 1 and 10 exceed what an H100 can deliver as output tokens/s "
          "(see the ceiling) and cannot calibrate anything.")

    print("\n## How `roofline_sharpness` moves the ratio\n")
    print("q is the exponent of the smooth maximum (a^q + b^q)^(1/q) of memory and compute time; "
          "∞ is the pure max. 'Typical error' is exp(mean |ln ratio|): the factor the curves are off by, "
          "whichever way.\n")
    print("| q | median ratio, MLPerf (5) | typical error, MLPerf | median ratio, all rows that fit "
          "| vLLM 8B 1×H100 ratio | 70B 1×H100 c=10 ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for q in SHARPNESS:
        ratios = []
        for point in POINTS:
            m = model_point(cat, point, serving, q)
            ratios.append((point, m.tokens_per_s / point.published if m else float("nan")))
        core = [r for p, r in ratios if p.in_median]
        every = [r for p, r in ratios if math.isfinite(r)]
        r8b = next(r for p, r in ratios if p.model == "llama-3.1-8b")
        r10 = next(r for p, r in ratios if p.concurrency == 10)
        print(f"| {'∞' if math.isinf(q) else f'{q:g}'} | {np.median(core):.3f} | "
              f"×{typical_error(core):.3f} | {np.median(every):.3f} | {r8b:.2f} | {r10:.2f} |")

    print("\nFor contrast, `decode_mfu` (the parameter the saturated MLPerf steps actually depend on), "
          "at the default sharpness:\n")
    print("| decode_mfu | median ratio, MLPerf (5) | typical error, MLPerf |")
    print("|---|---:|---:|")
    for mfu in (0.3, 0.4, 0.5, 0.6):
        s = serving.model_copy(update={"decode_mfu": mfu})
        core = [model_point(cat, p, s, s.roofline_sharpness).tokens_per_s / p.published
                for p in POINTS if p.in_median]
        print(f"| {mfu:.1f} | {np.median(core):.3f} | ×{typical_error(core):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
