"""Derive the shipped defaults, ``data/serving_calibration.csv``, from the public tables in
``data/calibration/``:

    python -m optimizer.commands.calibrate.defaults [--new-groups-only | --amd-only]

``--new-groups-only`` keeps the shipped rows byte for byte (the curves have moved since
they were fitted: a re-fit today would move every plan) and adds a fit for each group of the
tables they lack — how the 2026 groups were added. ``--amd-only`` keeps them too and derives
the MI300X and MI325X rows again from the shipped H100 row.

* NVIDIA H100/H200/B200/A100/L40S × TensorRT-LLM/vLLM/SGLang × bf16/fp8, and B300/GB200/GB300
  × bf16/fp8/nvfp4 and B200 × nvfp4: the fit of `optimizer.commands.calibrate.fit` to
  ``aiconfigurator.csv`` (kernel-measured per-operation latencies composed by AIConfigurator
  0.12, Llama-3.1-8B/70B/405B, prefill 512–8,192 tokens, decode batch 1–256 at 1,024 and 4,096
  context, TP 1/2/4/8), 20 % of each kind held out; TensorRT-LLM rows first, so they apply
  where a scenario names no engine. Each row names the engine release of its database
  (``engine_version``) and its date is its own rows' export date. A group whose small-batch
  decode steps are more than twice as slow as the same engine's bf16 steps is no native
  kernel (`screened_groups`: vLLM 0.27.0 fp8 on B300/GB200/GB300): its points are left
  out, and its row is the TensorRT-LLM row of its part and precision (assumed, said in its
  source).
* AMD MI300X: no kernel database covers it. Its compute efficiencies (prefill and decode)
  are the H100 TensorRT-LLM fp8 ones × k, with k set so that the modelled
  MLPerf Inference v4.1 Llama-2-70B Offline throughput per GPU relative to the H100's equals
  the published one (8×MI300X 23,514.8 tok/s vs 8×H100 24,524.9 tok/s, FACTS §7.1 [R1]);
  the MLPerf workload is modelled as in `benchmarks/curves_vs_published.py` (OpenOrca
  294 in / 286 out, fp8, KV-bound saturation, best TP ≤ 8). Offline saturation is
  compute-bound, so it says nothing of bandwidth or overheads: the per-layer overhead is
  fitted to one public MI300X latency run at batch 1–16 (``mi300x_latency.csv``: Llama 3.1
  405B FP8 on 8 × MI300X, where a step is overheads and weight reads), the two fits
  alternated; decode_mbu and the other overheads stay the H100's (assumed).
* AMD MI325X: the MI300X row with both compute efficiencies × the MI325X/MI300X Offline
  throughput per GPU of one MLPerf Inference v5.1 round, submitter and engine (`MI325X_RATIO`).
* every other accelerator: a "*" row with the pre-calibration global values (assumed).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
import tempfile

import numpy as np
import pandas as pd

from optimizer.commands.calibrate.fit import FIT_KEY, calibrate
from optimizer.commands.calibrate.model import predict_ms, serving_with
from optimizer.scenario.calibration.params import (
    KINDS,
    PARAMETERS,
    SHIPPED_FILE,
    Calibration,
    ParameterSet,
    entry_from_row,
    shipped_calibration,
)
from optimizer.scenario.calibration.tables import read_table

DATA = SHIPPED_FILE.parent / "calibration"
ENGINE_ORDER = {"trtllm": 0, "vllm": 1, "sglang": 2}
MLPERF = {"h100-sxm": 24_524.9 / 8, "mi300x": 23_514.8 / 8}  # tok/s per GPU, v4.1 Offline, Llama-2-70B
MLPERF_SOURCE = ("MLPerf Inference v4.1 closed Llama-2-70B Offline (mlcommons/inference_results_v4.1, "
                 "FACTS §7.1 [R1]): 8×MI300X 23,514.8 tok/s vs 8×H100 24,524.9 tok/s")
MI325X_RATIO = 4_315.1 / 3_475.5  # tok/s per GPU, v5.1 Offline, Llama-2-70B, AMD, vLLM 0.9.0.2 on ROCm 6.4.1
MI325X_SOURCE = (
    "prefill_mfu and decode_mfu: the MI300X row × {ratio:.4f}, the ratio of MI325X to MI300X Llama-2-70B Offline "
    "throughput per GPU in the same MLPerf Inference v5.1 closed round, same submitter and engine (AMD, vLLM 0.9.0.2 "
    "on ROCm 6.4.1): 8xMI325X 4,315.1 vs 8xMI300X 3,475.5 tok/s per GPU (mlperf_log_summary.txt of "
    "closed/AMD/results/8xMI325X_2xEPYC_9575F_1 and 8xMI300X_2xEPYC_9575F, llama2-70b-99/Offline) [R21] repo "
    "mlcommons/inference_results_v5.1; MI325X runs the same CDNA3 compute at 1000 W instead of 750 W, and its 6.0 vs "
    "5.3 TB/s HBM is in accelerators.csv; other parameters the MI300X row's (assumed)")
SCALED = ("prefill_mfu", "decode_mfu")  # Offline saturation is compute-bound: it informs these only
AMD_POINTS = DATA / "mi300x_latency.csv"  # one public MI300X run at batch 1–256 (its source in the file)
SMALL_BATCH = 16  # the batches of that run the per-layer overhead is fitted to
SCREEN_BATCH = 16  # decode batches bound by weight reads, where a precision's step is compared with bf16's
SCREEN_RATIO = 2.0  # a step at most bf16's bytes taking more than twice bf16's time is not a native kernel
AMD_ROUNDS = 3  # alternations of the overhead fit and the MLPerf scale (the overhead settles within 0.1 µs)


def offline_tokens_per_s(replica, isl: int, osl: int) -> tuple[float, int]:
    """Offline (saturated) output tokens/s per GPU of one replica, and its batch: the largest
    batch the KV budget holds with prompt + output reserved per sequence, decode at the mean
    context, prefill charged per output token with prompts packed into passes of ~8k tokens:

        tokens/s per GPU = 1 / (step(b)/b + prefill(prompts)/prompts/osl) / p
    """
    from optimizer.curves.memory import max_concurrency
    from optimizer.curves.roofline import decode_step_time_s, prefill_time_s

    b = int(max_concurrency(replica, isl + osl))
    if b < 1:
        return 0.0, 0
    prompts = max(1, 8192 // isl)
    prefill_s = float(prefill_time_s(replica, isl, 0, prompts)) / prompts
    step_s = float(decode_step_time_s(replica, b, isl + osl / 2))
    return 1.0 / (step_s / b + prefill_s / osl) / replica.gpus, b


def offline_tokens_per_gpu(entry: ParameterSet, accelerator: str, isl: int = 294, osl: int = 286) -> float:
    """Modelled MLPerf Offline output tokens/s per GPU of Llama-3.1-70B (Llama-2-70B's shape)
    at fp8 on ``accelerator`` with ``entry``'s parameters (`offline_tokens_per_s`), best
    TP ≤ 8."""
    from optimizer.commands.calibrate.model import shipped_catalogue
    from optimizer.curves.memory import kv_budget_bytes
    from optimizer.scenario import Serving
    from optimizer.serving.configs import make_replica, parallel_degrees

    cat = shipped_catalogue()
    m, a = cat.models["llama-3.1-70b"], cat.accelerators[accelerator]
    serving = Serving(calibration=Calibration(entries=[entry.model_copy(update={"accelerator": accelerator})]))
    best = 0.0
    for p in parallel_degrees(m, a, serving):
        r = make_replica(m, a, serving, p, "fp8", "fp8")
        if r is None or kv_budget_bytes(r) <= 0 or p > 8:
            continue
        best = max(best, offline_tokens_per_s(r, isl, osl)[0])
    return best


def amd_entry(h100: ParameterSet) -> tuple[ParameterSet, float]:
    """The MI300X row: H100's parameters, its per-layer overhead fitted to a MI300X run at
    small batch (`amd_layer_overhead_us`) and its efficiencies × k (bisection on the MLPerf
    ratio) — the two alternated until they settle (each moves the other a little)."""
    target = MLPERF["mi300x"] / MLPERF["h100-sxm"] * offline_tokens_per_gpu(h100, "h100-sxm")
    points = pd.read_csv(AMD_POINTS)
    base, k = h100, 1.0
    for _ in range(AMD_ROUNDS):
        k = _mlperf_scale(base, target)
        base = h100.model_copy(update={"layer_overhead_us": amd_layer_overhead_us(points, _scaled(base, k))})
    k = _mlperf_scale(base, target)
    return _scaled(base, k), k


def _scaled(entry: ParameterSet, k: float) -> ParameterSet:
    """``entry`` with its compute efficiencies (`SCALED`) × k, at most 1."""
    return entry.model_copy(update={n: min(getattr(entry, n) * k, 1.0) for n in SCALED})


def _mlperf_scale(base: ParameterSet, target: float) -> float:
    """k at which ``base`` with its efficiencies × k reaches ``target`` Offline tokens/s per
    MI300X (bisection)."""
    lo, hi = 0.2, 1.5
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if offline_tokens_per_gpu(_scaled(base, mid), "mi300x") < target else (lo, mid)
    return 0.5 * (lo + hi)


def small_batch_run_s(points: pd.DataFrame, entry: ParameterSet) -> np.ndarray:
    """Model time of each latency run of ``points`` (mi300x_latency.csv's columns) under
    ``entry``: one prefill pass over the batch's prompts, then ``output_tokens`` decode steps at
    the mean context prompt + output / 2 (`calibrate.model.predict_ms`)."""
    serving = serving_with({n: getattr(entry, n) for n in PARAMETERS})
    base = {"model": points["model"], "accelerator": points["accelerator"], "tp": points["tp"], "ep": 1.0,
            "weight_dtype": points["weight_dtype"], "kv_dtype": points["weight_dtype"], "batch": points["batch"],
            "prompt_tokens": points["prompt_tokens"]}
    decode = pd.DataFrame({**base, "kind": "decode",
                           "context_tokens": points["prompt_tokens"] + points["output_tokens"] / 2.0})
    prefill = pd.DataFrame({**base, "kind": "prefill", "context_tokens": 0.0})
    return (predict_ms(prefill, serving) + points["output_tokens"].to_numpy(float) * predict_ms(decode, serving)) / 1e3


def amd_layer_overhead_us(points: pd.DataFrame, entry: ParameterSet) -> float:
    """τ_L at which the model meets the median run of ``points`` at batch ≤ SMALL_BATCH (where
    a step is overheads and weight reads, not compute): the median of model / measured is 1
    (bisection within the parameter's bounds; the model time rises with τ_L)."""
    small = points[points["batch"] <= SMALL_BATCH]
    lo, hi = PARAMETERS["layer_overhead_us"][:2]
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        trial = entry.model_copy(update={"layer_overhead_us": mid})
        ratio = float(np.median(small_batch_run_s(small, trial) / small["latency_s"].to_numpy(float)))
        lo, hi = (mid, hi) if ratio < 1.0 else (lo, mid)
    return 0.5 * (lo + hi)


def flat(entry: ParameterSet) -> dict:
    row = {"accelerator": entry.accelerator, "engine": entry.engine, "engine_version": entry.engine_version or "",
           "dtype": entry.dtype}
    row.update({n: round(float(getattr(entry, n)), 4) for n in PARAMETERS})
    row["pcie_p2p_gpus"] = int(entry.pcie_p2p_gpus)
    for kind in KINDS:
        s = entry.spread.get(kind)
        row.update({f"{kind}_points": s.points if s else "",
                    f"{kind}_median_abs_error": round(s.median_abs_error, 4) if s else "",
                    f"{kind}_p90_abs_error": round(s.p90_abs_error, 4) if s else "",
                    f"{kind}_median_log_ratio": round(s.median_log_ratio, 4) if s else ""})
    row.update({"source": entry.source or "", "as_of": entry.as_of or ""})
    return row


def one_version(rows) -> str:
    """The engine release of a group's rows: one, or the group mixes databases (refused)."""
    found = sorted(set(rows["version"].dropna().astype(str)))
    if len(found) != 1:
        first = rows.iloc[0]
        raise ValueError(f"{first['accelerator']}/{first['engine']}/{first['weight_dtype']}: expected the rows of one "
                         f"engine release, got {found or 'none'}")
    return found[0]


def screened_groups(table: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """(accelerator, engine, dtype) → the median ratio of its decode step to the same engine's
    bf16 step (same model, TP, batch and context; batches ≤ `SCREEN_BATCH`), for the groups
    above `SCREEN_RATIO`. Such a step reads at most the weight bytes of bf16 and small
    batches are bound by those reads, so no kernel that runs the precision natively takes
    twice as long. In the AIConfigurator 0.12 database only vLLM 0.27.0 fp8 on B300, GB200
    and GB300 do (median 6.9–15×: 92 ms for a Llama-3.1-70B step at TP 1 and batch 1 on B300,
    where TensorRT-LLM and SGLang take 17–18 ms and vLLM's own bf16 24 ms); their prefill
    passes carry the same fixed 20–60 ms (a 512-token Llama-3.1-8B pass: 25 ms against 6 ms
    in bf16), so no point of theirs measures the engine's native path."""
    keys = ["accelerator", "engine", "model", "tp", "batch", "context_tokens"]
    small = table[(table["kind"] == "decode") & (table["batch"] <= SCREEN_BATCH)]
    bf16 = small[small["weight_dtype"] == "bf16"].set_index(keys)["latency_ms"].rename("bf16_ms")
    other = small[small["weight_dtype"] != "bf16"].join(bf16, on=keys).dropna(subset=["bf16_ms"])
    ratio = (other["latency_ms"] / other["bf16_ms"]).groupby([other[k] for k in FIT_KEY]).median()
    return {key: float(r) for key, r in ratio.items() if r > SCREEN_RATIO}


def fitted_entries(table: pd.DataFrame, donors: Calibration | None = None,
                   screen_against: pd.DataFrame | None = None) -> list[ParameterSet]:
    """The fit of every (accelerator, engine, dtype) group of ``table``, sorted (TensorRT-LLM
    first). A group `screened_groups` flags (judged on ``screen_against``, default ``table``)
    is not fitted: its row is the TensorRT-LLM row of its accelerator and precision (of
    ``donors``, default the fits of ``table``'s other groups), its source says so."""
    screened = screened_groups(table if screen_against is None else screen_against)
    flagged = pd.Series(list(zip(*(table[k] for k in FIT_KEY))), index=table.index).isin(screened.keys())
    entries = [_entry(g, table) for g in calibrate(table[~flagged], holdout=0.2, seed=0,
                                                   start=Calibration()).groups] if (~flagged).any() else []
    donors = donors or Calibration(entries=entries)
    for (accelerator, engine, dtype), rows in table[flagged].groupby(FIT_KEY, sort=True):
        donor = donors.lookup(accelerator, dtype, "trtllm")
        if (donor.accelerator, donor.engine, donor.dtype) != (accelerator, "trtllm", dtype):
            raise ValueError(f"{accelerator}/{engine}/{dtype}: its points are screened out and there is no "
                             f"TensorRT-LLM {dtype} row of {accelerator} to stand in")
        version = one_version(rows)
        source = (f"not fitted: the {len(rows)} points of data/calibration/aiconfigurator.csv (AIConfigurator 0.12 "
                  f"database, {engine} {version}) are left out, their decode steps at batch ≤ {SCREEN_BATCH} taking "
                  f"{screened[(accelerator, engine, dtype)]:.1f} × the same engine's bf16 steps at the median "
                  f"(defaults.screened_groups: no native kernel); the parameters are the {accelerator} trtllm {dtype} "
                  "row's (assumed)")
        entries.append(donor.model_copy(update={"engine": engine, "engine_version": version, "spread": {},
                                                "source": source, "as_of": str(rows["as_of"].dropna().max())}))
    return sorted(entries, key=lambda e: (e.accelerator, ENGINE_ORDER.get(e.engine, 9), e.dtype))


def _entry(g, table: pd.DataFrame) -> ParameterSet:
    """A group's fit as a shipped entry: its source names the database, the engine release and the points."""
    rows = table[(table.accelerator == g.accelerator) & (table.engine == g.engine) & (table.weight_dtype == g.dtype)]
    version = one_version(rows)
    entry = g.entry(source=f"fit to data/calibration/aiconfigurator.csv (AIConfigurator 0.12 database, "
                           f"{g.engine} {version}; {len(g.train)} points fitted, {len(g.holdout)} held out)",
                    as_of=str(rows["as_of"].dropna().max()))
    return entry.model_copy(update={"engine_version": version})


def derive() -> list[dict]:
    """Every row of the shipped defaults, re-fitted."""
    entries = fitted_entries(read_table(DATA / "aiconfigurator.csv"))
    h100 = next(e for e in entries if (e.accelerator, e.engine, e.dtype) == ("h100-sxm", "trtllm", "fp8"))
    entries += amd_rows(h100)
    entries.append(ParameterSet(source="assumed: pre-calibration global values, for accelerators no measured table "
                                       "covers", as_of="2026-11-09"))
    return [flat(e) for e in entries]


def amd_rows(h100: ParameterSet) -> list[ParameterSet]:
    """The MI300X and MI325X rows from the H100 TensorRT-LLM fp8 row (`amd_entry`)."""
    mi300x, k = amd_entry(h100)
    note = (f"prefill_mfu and decode_mfu: H100 TensorRT-LLM fp8 values × {k:.3f} to match {MLPERF_SOURCE}; "
            f"layer_overhead_us fitted to one public MI300X run at batch 1–{SMALL_BATCH} (data/calibration/"
            f"{AMD_POINTS.name}: Llama 3.1 405B FP8 on 8 × MI300X, vLLM, 128 in / 128 out; "
            "benchmarks/mi300x_small_batch.py); decode_mbu, step_overhead_ms, collective_latency_us and the other "
            "parameters the H100's (assumed)")
    rows = [mi300x.model_copy(update={"accelerator": "mi300x", "engine": "*", "dtype": "*", "spread": {},
                                      "engine_version": None, "source": note, "as_of": "2024-08-28"})]
    mi325x = {n: getattr(_scaled(mi300x, MI325X_RATIO), n) for n in SCALED}
    rows.append(mi300x.model_copy(update={"accelerator": "mi325x", "engine": "*", "dtype": "*", "spread": {},
                                          "engine_version": None, **mi325x,
                                          "source": MI325X_SOURCE.format(ratio=MI325X_RATIO), "as_of": "2025-09-09"}))
    return rows


def with_amd_rows(shipped: list[dict]) -> list[dict]:
    """The shipped rows as they are, the MI300X and MI325X rows derived again from the shipped
    H100 TensorRT-LLM fp8 row (`amd_rows`)."""
    key = ("h100-sxm", "trtllm", "fp8")
    h100 = next((r for r in shipped if (r.get("accelerator"), r.get("engine"), r.get("dtype")) == key), None)
    if h100 is None:
        raise ValueError(f"{SHIPPED_FILE}: no {'/'.join(key)} row to derive the MI300X and MI325X rows from")
    new = {e.accelerator: flat(e) for e in amd_rows(entry_from_row({k: v for k, v in h100.items() if v != ""}))}
    return [{**r, **{k: v for k, v in new[r["accelerator"]].items() if k in r}} if r["accelerator"] in new else r
            for r in shipped]


def release_in(source: str, engine: str) -> str:
    """The engine release a fitted row's source names ("…, trtllm 1.3.0rc23; …"), else ""."""
    found = re.search(rf"\b{re.escape(engine)} ([^;,)\s]+);", source or "")
    return found.group(1) if found and engine != "*" else ""


def add_new_groups(shipped: list[dict]) -> list[dict]:
    """The shipped rows as they are (each with the ``engine_version`` its source names), and a
    fitted row for every group of the table the shipped file lacks, in the derived order:
    fitted rows by (accelerator, engine, dtype), then the rows of no engine as shipped."""
    table = read_table(DATA / "aiconfigurator.csv")
    have = {(r["accelerator"], r["engine"], r["dtype"]) for r in shipped}
    new = table[[(a, e, d) not in have for a, e, d in zip(table.accelerator, table.engine, table.weight_dtype)]]
    kept = [{**{k: v for k, v in r.items() if k != "engine_version"},
             "engine_version": r.get("engine_version") or release_in(r["source"], r["engine"])} for r in shipped]
    rows = [flat(e) for e in fitted_entries(new, shipped_calibration(), table)] if len(new) else []
    columns = list(rows[0]) if rows else ["accelerator", "engine", "engine_version", *kept[0]]
    rows += [{c: r.get(c, "") for c in dict.fromkeys(columns)} for r in kept]
    named = sorted((r for r in rows if r["engine"] != "*"),
                   key=lambda r: (r["accelerator"], ENGINE_ORDER.get(r["engine"], 9), r["dtype"]))
    return named + [r for r in rows if r["engine"] == "*"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--amd-only", action="store_true",
                    help="keep the shipped rows as they are and derive the MI300X and MI325X rows again")
    ap.add_argument("--new-groups-only", action="store_true",
                    help="keep the shipped rows as they are and fit only the (accelerator, engine, dtype) groups of "
                         "the tables the shipped file lacks")
    args = ap.parse_args(argv)
    try:
        if args.new_groups_only or args.amd_only:
            with SHIPPED_FILE.open(newline="") as f:
                shipped = list(csv.DictReader(f))
            rows = with_amd_rows(shipped) if args.amd_only else add_new_groups(shipped)
        else:
            rows = derive()
    except ValueError as e:  # a table or shipped file that cannot give the rows: nothing is written
        print(f"defaults: {e}", file=sys.stderr)
        return 2
    fd, tmp = tempfile.mkstemp(prefix=".serving_calibration.", dir=SHIPPED_FILE.parent)
    with os.fdopen(fd, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.chmod(tmp, 0o644)
    os.replace(tmp, SHIPPED_FILE)
    print(f"{len(rows)} rows → {SHIPPED_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
