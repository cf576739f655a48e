"""Per-GPU serving figures of every shipped accelerator, before and after calibration.

    python benchmarks/accelerator_defaults.py

For Llama-3.1-70B at fp8 and Llama-3.1-8B at bf16 (prompt 2,000, output 500 tokens, ITL
objective 50 ms, as `fleetplan curves` by default) it prints, per accelerator:

* decode tokens/s per GPU: the best over the allowed TP degrees of the decode operating
  point (the largest batch whose p99 step meets the ITL objective) ÷ GPUs;
* prefill ms of one 2,000-token prompt at the fastest TP, and prefill tokens/s per GPU at
  the most efficient TP (2,000 / (prefill time × GPUs));
* MLPerf Inference v4.1 Llama-2-70B Offline tokens/s per GPU: modelled as in
  `benchmarks/curves_vs_published.py` (OpenOrca 294 in / 286 out, fp8, KV-bound
  saturation) beside the published figure (FACTS §7.1 [R1]) where there is one.

"before" is the pre-calibration global parameters (prefill MFU 0.45, MBU 0.75, decode MFU
0.40, 1.5 ms per pass, α 15 µs, link 0.7, q 3) through today's curves; "after" is the
shipped defaults (data/serving_calibration.csv, TensorRT-LLM rows where a part has them).
Runs in a few seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.commands.calibrate.defaults import offline_tokens_per_gpu  # noqa: E402
from optimizer.commands.calibrate.model import shipped_catalogue  # noqa: E402
from optimizer.scenario import Serving  # noqa: E402
from optimizer.scenario.calibration.params import Calibration  # noqa: E402
from optimizer.serving.table import operating_table  # noqa: E402

MODELS = (("llama-3.1-70b", "fp8"), ("llama-3.1-8b", "bf16"))
MLPERF_PER_GPU = {"h100-sxm": 24_524.9 / 8, "h200-sxm": 31_302.7 / 8, "mi300x": 23_514.8 / 8, "l40s": 3_717.74 / 8}
ISL, OSL, ITL_MS = 2000, 500, 50.0


def figures(serving: Serving, model: str, dtype: str, gpu: str) -> dict | None:
    cat = shipped_catalogue()
    a = cat.accelerators[gpu]
    if dtype == "fp8" and a.fp8_dense_tflops is None:
        return None
    out = operating_table(cat.models[model], a, serving, ISL, OSL, ITL_MS, 1.0, dtype, dtype)
    configs = [c for c in out["configs"] if c["prefill_ms"] is not None]
    if not configs:
        return None
    return {
        "decode_tok_s_per_gpu": max((c["decode_tokens_per_s"] or 0) / c["tp"] for c in configs),
        "prefill_ms": min(c["prefill_ms"] for c in configs),
        "prefill_tok_s_per_gpu": max(ISL / (c["prefill_ms"] / 1e3) / c["tp"] for c in configs),
    }


def main() -> int:
    cat = shipped_catalogue()
    runs = {"before": Serving(calibration=Calibration()), "after": Serving()}
    for model, dtype in MODELS:
        print(f"\n{model} {dtype}: prompt {ISL}, output {OSL}, ITL ≤ {ITL_MS:g} ms")
        print("| accelerator | decode tok/s/GPU before → after | prefill ms (fastest TP) before → after "
              "| prefill tok/s/GPU before → after |")
        print("|---|---:|---:|---:|")
        for gpu in cat.accelerators:
            b, a = (figures(s, model, dtype, gpu) for s in runs.values())
            if a is None:
                continue
            print(f"| {gpu} | {b['decode_tok_s_per_gpu']:,.0f} → {a['decode_tok_s_per_gpu']:,.0f} "
                  f"| {b['prefill_ms']:,.0f} → {a['prefill_ms']:,.0f} "
                  f"| {b['prefill_tok_s_per_gpu']:,.0f} → {a['prefill_tok_s_per_gpu']:,.0f} |")
    print("\nMLPerf v4.1 Llama-2-70B Offline, tokens/s per GPU (modelled at fp8; published [R1])")
    print("| accelerator | before | after | published | after / published |")
    print("|---|---:|---:|---:|---:|")
    for gpu in cat.accelerators:
        if cat.accelerators[gpu].fp8_dense_tflops is None:
            continue
        b, a = (offline_tokens_per_gpu(s.calibration.lookup(gpu, "fp8"), gpu) for s in runs.values())
        pub = MLPERF_PER_GPU.get(gpu)
        ratio = f"{a / pub:.2f}" if pub else "—"
        print(f"| {gpu} | {b:,.0f} | {a:,.0f} | {f'{pub:,.0f}' if pub else '—'} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
