"""Residuals of the 2026 shapes per source, accelerator, model and dtype: the groups fitted
to the AIConfigurator 0.12 database beyond the 2024 parts (B300, GB200 NVL72, GB300 NVL72 at
bf16/fp8/nvfp4, B200 at nvfp4), and the mixture-of-experts points of the same database, which
no shipped row is fitted to (scored as shipped: uncalibrated).

    python benchmarks/calibration_residuals_2026.py

Every prediction goes through the planner's own path: ``Serving(engine=ENGINE)`` and the
shipped defaults (data/serving_calibration.csv), so a fitted row the planner does not find
shows here as a bad residual. The split is the fit's: the same seeded 20 % of each group and
kind held out as in ``python -m optimizer.commands.calibrate.defaults``. Error of a point:
|predicted / measured − 1|; log ratio ln(predicted / measured) (negative: the curves are
faster than measured).

Per-GPU throughput at a stated interactivity: a decode row of batch b at step time τ is
b / (τ · GPUs) output tokens/s per GPU at 1/τ tokens/s per user; at the largest batch of a
group whose measured step is within ``ITL_MS`` (20 tokens/s per user), measured against
predicted at the same batch (the ratio is that of the latencies, inverted).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.commands.calibrate.defaults import screened_groups  # noqa: E402
from optimizer.commands.calibrate.fit import FIT_KEY, split_holdout  # noqa: E402
from optimizer.commands.calibrate.model import measured_ms, predict_ms  # noqa: E402
from optimizer.scenario import Serving  # noqa: E402
from optimizer.scenario.calibration.tables import read_table  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data" / "calibration"
NEW_ACCELERATORS = ("b300", "gb200-nvl72", "gb300-nvl72")
FOUR_BIT = ("nvfp4", "mxfp4", "int4")
ITL_MS = 50.0
SAME_AS_V3 = "deepseek-r1"
STATS = ["points", "median_abs_error", "p90_abs_error", "median_log_ratio"]


def scored(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with predicted_ms (each engine's rows with that engine's shipped defaults),
    measured_ms, error and log_ratio."""
    out = table.copy()
    out["predicted_ms"] = np.nan
    for engine, rows in table.groupby("engine"):
        out.loc[rows.index, "predicted_ms"] = predict_ms(rows, Serving(engine=engine))
    out["measured_ms"] = measured_ms(table)
    out["error"] = (out["predicted_ms"] / out["measured_ms"] - 1.0).abs()
    out["log_ratio"] = np.log(out["predicted_ms"] / out["measured_ms"])
    return out


def held_out(table: pd.DataFrame) -> np.ndarray:
    """The fit's split: per (accelerator, engine, dtype), over the rows the planner can size."""
    held = np.zeros(len(table), dtype=bool)
    for _, rows in table.groupby(FIT_KEY, sort=True):
        rows = rows[np.isfinite(rows["predicted_ms"])]
        held[rows.index.to_numpy()[split_holdout(rows.reset_index(drop=True), 0.2, 0)]] = True
    return held


def stats(rows: pd.DataFrame) -> dict:
    r = rows.dropna(subset=["error"])
    if r.empty:
        return {"points": 0, "median_abs_error": np.nan, "p90_abs_error": np.nan, "median_log_ratio": np.nan}
    return {"points": len(r), "median_abs_error": float(r["error"].median()),
            "p90_abs_error": float(r["error"].quantile(0.9)), "median_log_ratio": float(r["log_ratio"].median())}


def cell(s: dict) -> str:
    if not s["points"]:
        return "—"
    return (f"{s['points']}: {100 * s['median_abs_error']:.1f} % / {100 * s['p90_abs_error']:.1f} % / "
            f"{s['median_log_ratio']:+.3f}")


def source(row) -> str:
    return f"AIConfigurator 0.12 {row.engine} {row.version}"


def fitted_table(table: pd.DataFrame, screened: dict) -> None:
    """The new fitted groups: per source, accelerator, model, dtype; fit and held out, prefill and
    decode. Groups ``screened`` (`defaults.screened_groups`) are scored against the points they
    were not fitted to, marked, and left out of the totals."""
    print("| source | accelerator | model | dtype | prefill fit | prefill held out | decode fit | decode held out |")
    print("|---|---|---|---|---|---|---|---|")
    keys = ["engine", "version", "accelerator", "model", "weight_dtype"]
    left_out = pd.Series([k in screened for k in zip(*(table[c] for c in FIT_KEY))], index=table.index)
    for key, rows in table.groupby(keys, sort=True):
        row = rows.iloc[0]
        cells = [cell(stats(rows[(rows["kind"] == kind) & (rows["held_out"] == held)]))
                 for kind in ("prefill", "decode") for held in (False, True)]
        mark = " (screened out, not fitted)" if left_out[rows.index[0]] else ""
        print(f"| {source(row)}{mark} | {row.accelerator} | {row.model} | {row.weight_dtype} | " + " | ".join(cells)
              + " |")
    kept = table[~left_out]
    for held in (False, True):
        s = {k: cell(stats(kept[(kept["kind"] == k) & (kept["held_out"] == held)])) for k in ("prefill", "decode")}
        print(f"| **all, {'held out' if held else 'fit'}** | | | | prefill {s['prefill']} | | decode {s['decode']} | |")
    print(f"(totals without the {int(left_out.sum())} screened points)")


def moe_table(table: pd.DataFrame) -> None:
    """MoE points as shipped (no row fitted to them): per source, accelerator, model and dtype,
    tensor-parallel (TP 4, 8) and expert-parallel with attention data-parallel (EP 8, 16, 32)
    apart; then per accelerator and layout degree, every source together (which fabric the
    all-to-all crosses: EP 16 and 32 leave an 8-GPU node, not an NVL72 rack)."""
    wide = table["ep"] > 1
    print("| source | accelerator | model | dtype | prefill TP | decode TP | prefill EP | decode EP |")
    print("|---|---|---|---|---|---|---|---|")
    for _, rows in table[table["model"] != SAME_AS_V3].groupby(["engine", "version", "accelerator", "model",
                                                                 "weight_dtype"], sort=True):
        row = rows.iloc[0]
        cells = [cell(stats(rows[(rows["kind"] == kind) & (wide[rows.index] == ep)]))
                 for ep in (False, True) for kind in ("prefill", "decode")]
        print(f"| {source(row)} | {row.accelerator} | {row.model} | {row.weight_dtype} | " + " | ".join(cells) + " |")
    print(f"({SAME_AS_V3}: the same rows as deepseek-v3, whose architecture and database operations it shares; "
          "counted in the totals)")
    for ep in (False, True):
        s = [cell(stats(table[(table["kind"] == k) & (wide == ep)])) for k in ("prefill", "decode")]
        print(f"| **all, {'EP' if ep else 'TP'}** | | | | " + (f"| | {s[0]} | {s[1]} |" if ep else
                                                                f"{s[0]} | {s[1]} | | |"))
    layout = np.where(wide, "EP " + table["ep"].astype(int).astype(str), "TP " + table["tp"].astype(int).astype(str))
    print("\n| accelerator | layout | prefill | decode |")
    print("|---|---|---|---|")
    for (acc, lay), rows in table.assign(layout=layout).groupby(["accelerator", "layout"], sort=True):
        print(f"| {acc} | {lay} | " + " | ".join(cell(stats(rows[rows["kind"] == k])) for k in ("prefill", "decode"))
              + " |")


def throughput_table(table: pd.DataFrame) -> None:
    """Decode tokens/s per GPU at ≥ 1000/ITL_MS tokens/s per user, measured and predicted."""
    print("| source | accelerator | model | dtype | TP×EP | context | batch | measured ITL ms | tok/s/GPU measured "
          "| predicted | predicted / measured |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    decode = table[(table["model"] != SAME_AS_V3) & (table["kind"] == "decode") & (table["measured_ms"] <= ITL_MS) & table["predicted_ms"].notna()
                   & (table["context_tokens"] == 4096)]
    keys = ["engine", "version", "accelerator", "model", "weight_dtype"]
    for _, rows in decode.groupby(keys, sort=True):
        gpus = rows["tp"] * rows["ep"]
        per_gpu = rows["batch"] * 1000.0 / (rows["measured_ms"] * gpus)
        best = rows.loc[per_gpu.idxmax()]
        g = best.tp * best.ep
        measured = best.batch * 1000.0 / (best.measured_ms * g)
        predicted = best.batch * 1000.0 / (best.predicted_ms * g)
        print(f"| {source(best)} | {best.accelerator} | {best.model} | {best.weight_dtype} | {int(best.tp)}×"
              f"{int(best.ep)} | 4,096 | {int(best.batch)} | {best.measured_ms:.1f} | {measured:,.0f} | "
              f"{predicted:,.0f} | {predicted / measured:.2f} |")


def main() -> int:
    dense = read_table(DATA / "aiconfigurator.csv")
    screened = screened_groups(dense)
    dense = dense[dense["accelerator"].isin(NEW_ACCELERATORS) | dense["weight_dtype"].isin(FOUR_BIT)]
    dense = scored(dense.reset_index(drop=True))
    dense["held_out"] = held_out(dense)
    print("Fitted 2026 groups — cell: points: median / p90 |predicted/measured − 1| / median ln(pred/meas)\n")
    fitted_table(dense, screened)
    moe = scored(read_table(DATA / "aiconfigurator_moe.csv"))
    print("\nMixture-of-experts points, as shipped (uncalibrated) — same cells\n")
    moe_table(moe)
    print(f"\nDecode tokens/s per GPU at ≥ {1000 / ITL_MS:g} tokens/s per user (measured ITL ≤ {ITL_MS:g} ms), "
          "4,096-token context, TensorRT-LLM\n")
    both = pd.concat([dense, moe], ignore_index=True)
    throughput_table(both[both["engine"] == "trtllm"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
