"""The MI300X row against a public small-batch measurement: how far its per-step overheads,
copied from H100 (data/serving_calibration.csv, "assumed"), are from what a MI300X node did.

    python benchmarks/mi300x_small_batch.py

data/calibration/mi300x_latency.csv holds one public run (Llama 3.1 405B FP8 on 8 × MI300X,
vLLM's latency benchmark, 128 prompt and 128 output tokens, batch 1–256, average latency; its
source in the file). The model's time for such a run is one prefill pass over the batch's
prompts plus 128 decode steps at a mean context of 128 + 64 tokens (`decode_step_time_s`,
`prefill_time_s` through `optimizer.commands.calibrate.model.predict_ms`), under the shipped
MI300X row, and under that row with only ``layer_overhead_us`` changed: first to the value
whose model meets the median measured run at batch 1–16 (where the step is overhead and
bandwidth, not compute), found by bisection. Prints two Markdown tables. Runs in seconds.
"""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd

from optimizer.commands.calibrate.model import predict_ms, serving_with
from optimizer.scenario.calibration.params import PARAMETERS, SHIPPED_FILE

POINTS = SHIPPED_FILE.parent / "calibration" / "mi300x_latency.csv"
SMALL_BATCH = 16  # at most: the batches the overhead is fitted to


def shipped_row(accelerator: str) -> dict:
    with SHIPPED_FILE.open(newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["accelerator"] == accelerator)
    return {k: float(row[k]) for k in PARAMETERS}


def run_seconds(points: pd.DataFrame, parameters: dict) -> np.ndarray:
    """Model time of each run: prefill of the batch's prompts + output_tokens decode steps."""
    serving = serving_with(parameters)
    base = {"model": points["model"], "accelerator": points["accelerator"], "tp": points["tp"], "ep": 1.0,
            "weight_dtype": points["weight_dtype"], "kv_dtype": points["weight_dtype"], "batch": points["batch"],
            "prompt_tokens": points["prompt_tokens"]}
    decode = pd.DataFrame({**base, "kind": "decode",
                           "context_tokens": points["prompt_tokens"] + points["output_tokens"] / 2.0})
    prefill = pd.DataFrame({**base, "kind": "prefill", "context_tokens": 0.0})
    return (predict_ms(prefill, serving) + points["output_tokens"].to_numpy(float) * predict_ms(decode, serving)) / 1e3


def fitted_overhead_us(points: pd.DataFrame, parameters: dict) -> float:
    """layer_overhead_us at which the median model/measured ratio over batches ≤ SMALL_BATCH is 1."""
    small = points[points["batch"] <= SMALL_BATCH]
    lo, hi = 0.0, PARAMETERS["layer_overhead_us"][1]
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        ratio = np.median(run_seconds(small, {**parameters, "layer_overhead_us": mid}) / small["latency_s"])
        lo, hi = (mid, hi) if ratio < 1.0 else (lo, mid)
    return 0.5 * (lo + hi)


def main() -> int:
    points = pd.read_csv(POINTS)
    shipped = shipped_row("mi300x")
    fitted = fitted_overhead_us(points, shipped)
    print(f"{POINTS.name}: {len(points)} runs; the shipped MI300X row's layer_overhead_us "
          f"{shipped['layer_overhead_us']:.1f} (H100's, assumed); fitted to batches ≤ {SMALL_BATCH}: {fitted:.1f}\n")
    print("| batch | measured s | measured ms a step | model s, as shipped | ratio | model s, fitted overhead | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    before = run_seconds(points, shipped)
    after = run_seconds(points, {**shipped, "layer_overhead_us": fitted})
    for r, b, a in zip(points.itertuples(), before, after):
        print(f"| {r.batch} | {r.latency_s:.3f} | {1e3 * r.latency_s / r.output_tokens:.1f} | {b:.3f} | "
              f"{b / r.latency_s:.2f} | {a:.3f} | {a / r.latency_s:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
