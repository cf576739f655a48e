"""The MI300X row against a public small-batch measurement: the per-layer overhead it once
copied from H100 against the one fitted to what a MI300X node did.

    python benchmarks/mi300x_small_batch.py

data/calibration/mi300x_latency.csv holds one public run (Llama 3.1 405B FP8 on 8 × MI300X,
vLLM's latency benchmark, 128 prompt and 128 output tokens, batch 1–256, average latency; its
source in the file). The model's time for such a run is one prefill pass over the batch's
prompts plus 128 decode steps (`calibrate.defaults.small_batch_run_s`). Prints one Markdown
table: the shipped MI300X row with H100's per-layer overhead, and as shipped (its overhead
fitted to batches 1–16 by `calibrate.defaults.amd_layer_overhead_us`). Runs in seconds.
"""

from __future__ import annotations

import pandas as pd

from optimizer.commands.calibrate.defaults import AMD_POINTS, SMALL_BATCH, amd_layer_overhead_us, small_batch_run_s
from optimizer.scenario.calibration.params import shipped_calibration


def main() -> int:
    points = pd.read_csv(AMD_POINTS)
    rows = shipped_calibration()
    shipped = rows.lookup("mi300x", "fp8")
    h100 = rows.lookup("h100-sxm", "fp8").layer_overhead_us  # the TensorRT-LLM row, the first for H100
    copied = shipped.model_copy(update={"layer_overhead_us": h100})
    print(f"{AMD_POINTS.name}: {len(points)} runs; MI300X layer_overhead_us as shipped {shipped.layer_overhead_us:.1f} "
          f"(H100's {h100:.1f}); the fit to batches ≤ {SMALL_BATCH} from the shipped row: "
          f"{amd_layer_overhead_us(points, shipped):.1f}\n")
    print("| batch | measured s | measured ms a step | model s, H100's overhead | ratio | model s, as shipped "
          "| ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r, b, a in zip(points.itertuples(), small_batch_run_s(points, copied), small_batch_run_s(points, shipped)):
        print(f"| {r.batch} | {r.latency_s:.3f} | {1e3 * r.latency_s / r.output_tokens:.1f} | {b:.3f} | "
              f"{b / r.latency_s:.2f} | {a:.3f} | {a / r.latency_s:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
