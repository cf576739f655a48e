"""Export NVIDIA AIConfigurator's performance database into the benchmark CSV.

    pip install 'fleetplan[aiconfigurator]'
    python -m optimizer.commands.calibrate.aiconfigurator --out data/calibration/aiconfigurator.csv

AIConfigurator (PyPI ``aiconfigurator``) composes per-operation latencies measured on real
GPUs (GEMMs, attention, NCCL collectives, per engine and engine version) into the latency of
one forward pass. This module asks it for

* prefill: one pass over ``batch`` prompts of ``prompt_tokens`` tokens (static context
  phase, ``context_latency``), and
* decode: one step of ``batch`` sequences at ``context_tokens`` (static generation phase
  with two output tokens, ``tpot``),

for each (accelerator, engine, weight dtype, model, tensor-parallel degree) it covers, skips
the points whose weights and KV do not fit, and writes the rows in the benchmark CSV format
of `optimizer.scenario.calibration.tables` so that neither the tests nor the shipped defaults need
the optional package. The grid is the one the shipped defaults were fitted on.

`best_configuration` runs its end-to-end search (``aiconfigurator cli default``: aggregated
and disaggregated configurations under TTFT and TPOT objectives) for one comparison case of
`benchmarks/configurator_goodput.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import pandas as pd

# fleetplan ids → AIConfigurator's system names, model paths and quantisation names
SYSTEMS = {"h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm", "b200": "b200_sxm", "a100-80gb-sxm": "a100_sxm",
           "l40s": "l40s"}
MODELS = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B",
}
ENGINES = ("trtllm", "vllm", "sglang")
DTYPES = ("bf16", "fp8")
TP_DEGREES = (1, 2, 4, 8)
PREFILL_PROMPTS = (512, 1024, 2048, 4096, 8192)
PREFILL_BATCHES = (1, 4)
DECODE_BATCHES = (1, 4, 16, 64, 256)
DECODE_CONTEXTS = (1024, 4096)


def _session(system: str, engine: str, version: str, model_path: str, tp: int, dtype: str):
    from aiconfigurator.sdk import common, config
    from aiconfigurator.sdk.backends.factory import get_backend
    from aiconfigurator.sdk.inference_session import InferenceSession
    from aiconfigurator.sdk.models import get_model
    from aiconfigurator.sdk.perf_database import get_database_view

    quant = "fp8" if dtype == "fp8" else "bfloat16"
    mc = config.ModelConfig(
        tp_size=tp, moe_tp_size=tp, moe_ep_size=1,
        gemm_quant_mode=common.GEMMQuantMode[quant], moe_quant_mode=common.MoEQuantMode[quant],
        kvcache_quant_mode=common.KVCacheQuantMode[quant], fmha_quant_mode=common.FMHAQuantMode[quant],
    )
    db = get_database_view(system, engine, version)
    return InferenceSession(get_model(model_path, mc, engine), db, get_backend(engine))


def _latency_ms(session, batch: int, isl: int, phase: str) -> float | None:
    from aiconfigurator.sdk import config

    rt = config.RuntimeConfig(batch_size=batch, isl=isl, osl=2)
    with contextlib.redirect_stdout(io.StringIO()):
        summary = session.run_static(rt, "static_ctx" if phase == "prefill" else "static_gen", stride=1)
    if summary.check_oom():
        return None
    row = summary.get_summary_df().iloc[0]
    value = float(row["context_latency"] if phase == "prefill" else row["tpot"])
    return value if value > 0 else None


def versions(system: str, engine: str) -> list[str]:
    from aiconfigurator.sdk.perf_database import get_supported_databases

    return sorted(get_supported_databases().get(system, {}).get(engine, []))


def export_rows(accelerators=tuple(SYSTEMS), engines=ENGINES, models=tuple(MODELS), dtypes=DTYPES,
                log=sys.stderr) -> pd.DataFrame:
    """Every grid point the database covers, as benchmark-table rows."""
    import aiconfigurator

    rows = []
    today = date.today().isoformat()
    for acc in accelerators:
        for engine in engines:
            found = versions(SYSTEMS[acc], engine)
            if not found:
                continue
            version = found[-1]
            for model in models:
                for dtype in dtypes:
                    for tp in TP_DEGREES:
                        try:
                            session = _session(SYSTEMS[acc], engine, version, MODELS[model], tp, dtype)
                        except Exception as exc:  # the database lacks this combination
                            print(f"skip {acc} {engine} {model} {dtype} tp{tp}: {exc}", file=log)
                            continue
                        base = dict(model=model, accelerator=acc, engine=engine, version=version, weight_dtype=dtype,
                                    kv_dtype=dtype, tp=tp, source=f"AIConfigurator {aiconfigurator.__version__} "
                                    f"performance database ({SYSTEMS[acc]}/{engine} {version})", as_of=today)
                        points = [("prefill", b, s, 0) for s in PREFILL_PROMPTS for b in PREFILL_BATCHES
                                  if b == 1 or s <= 2048]
                        points += [("decode", b, 0, c) for c in DECODE_CONTEXTS for b in DECODE_BATCHES]
                        for kind, batch, prompt, context in points:
                            try:
                                ms = _latency_ms(session, batch, prompt or context, kind)
                            except Exception as exc:
                                print(f"skip {acc} {engine} {model} {dtype} tp{tp} {kind} b{batch}: {exc}", file=log)
                                continue
                            if ms is not None:
                                rows.append(dict(base, kind=kind, batch=batch, prompt_tokens=prompt,
                                                 context_tokens=context, latency_ms=round(ms, 4)))
                        print(f"{acc} {engine} {model} {dtype} tp{tp}: {len(rows)} rows so far", file=log)
    return pd.DataFrame(rows)


def _describe(mode: str, row: pd.Series) -> str:
    if mode == "agg":
        return f"{row['parallel'].split('pp')[0]} (batch {row['bs']:g})"
    return (f"prefill {row['(p)parallel'].split('pp')[0]} x{row['(p)workers']:g} + decode "
            f"{row['(d)parallel'].split('pp')[0]} x{row['(d)workers']:g} (batch {row['(d)bs']:g})")


def best_configuration(case, total_gpus: int = 64, engine: str = "trtllm") -> dict:
    """AIConfigurator's best aggregated and disaggregated configurations of ``case`` (a
    `configurator_goodput.Case` in benchmarks/) on ``total_gpus`` GPUs, by output tokens/s per GPU."""
    args = ["cli", "default", "--model-path", MODELS[case.model], "--system", SYSTEMS[case.accelerator],
            "--backend", engine, "--total-gpus", str(total_gpus), "--isl", str(case.isl), "--osl", str(case.osl),
            "--ttft", f"{case.ttft_ms:g}", "--tpot", f"{case.itl_ms:g}", "--top-n", "1", "--log-level", "ERROR"]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-c", "import sys; from aiconfigurator.main import main; sys.exit(main())",
                        *args, "--save-dir", out], check=True, capture_output=True, text=True)
        best = {}
        for mode in ("agg", "disagg"):
            found = sorted(Path(out).glob(f"**/{mode}/best_config_topn.csv"))
            if found:
                row = pd.read_csv(found[0]).iloc[0]
                best[mode] = {"tokens_per_s_per_gpu": float(row["tokens/s/gpu"]), "config": _describe(mode, row),
                              "version": str(row.get("version", row.get("(d)version")))}
    if not best:
        raise RuntimeError(f"AIConfigurator found no configuration for {case.name}")
    mode = max(best, key=lambda m: best[m]["tokens_per_s_per_gpu"])
    return {"best_mode": mode, **best[mode], "by_mode": best}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="benchmark CSV to write")
    ap.add_argument("--accelerators", nargs="*", default=list(SYSTEMS))
    ap.add_argument("--engines", nargs="*", default=list(ENGINES))
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--dtypes", nargs="*", default=list(DTYPES))
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    from optimizer.scenario.calibration.tables import write_table

    table = export_rows(args.accelerators, args.engines, args.models, args.dtypes)
    write_table(table, Path(args.out))
    print(f"{len(table)} rows → {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
