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

for each (accelerator, engine, weight dtype, model, parallel layout) it covers, skips the
points whose weights and KV do not fit, and writes the rows in the benchmark CSV format of
`optimizer.scenario.calibration.tables` so that neither the tests nor the shipped defaults need
the optional package. Each row keeps the engine and the engine version of the database it
came from (the newest the package ships for that system and engine). The grid is the one the
shipped defaults were fitted on.

Layouts: dense models at tensor-parallel degree tp (``--layout tp``, the default). MoE models
(``--layout moe``, written beside the dense table, see `MOE_TABLE`) also at tp with the
experts split tensor-parallel, and expert-parallel with attention data-parallel (AIConfigurator's
``tp1 dpN moe_ep N``), written as ``tp`` 1, ``ep`` N. Its batch is per attention rank, so an
expert-parallel row's ``batch`` is N × that (the replica's sequences, as the planner counts them).

Precisions: each fleetplan weight format maps to AIConfigurator's (GEMM, MoE, KV cache,
attention) quantisation modes, tried in the order of `QUANT` until the database has the kernels
(e.g. fp8 GEMMs per tensor, else in 128-blocks as DeepSeek's checkpoints; NVFP4 with FP8
attention, else bf16 attention); the mode used is named in the row's ``source``.

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
           "l40s": "l40s", "b300": "b300_sxm", "gb200-nvl72": "gb200", "gb300-nvl72": "gb300"}
DENSE = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B",
}
MOE = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
}
MODELS = {**DENSE, **MOE}
ENGINES = ("trtllm", "vllm", "sglang")
DTYPES = ("bf16", "fp8", "nvfp4", "mxfp4")
# fleetplan weight format → AIConfigurator (GEMM, MoE, KV cache, attention) modes, in the order tried
QUANT = {
    "bf16": [("bfloat16", "bfloat16", "bfloat16", "bfloat16")],
    "fp8": [("fp8", "fp8", "fp8", "fp8"), ("fp8_block", "fp8_block", "fp8", "bfloat16")],
    "nvfp4": [("nvfp4", "nvfp4", "fp8", "fp8"), ("nvfp4", "nvfp4", "fp8", "bfloat16")],
    "mxfp4": [("bfloat16", "w4a8_mxfp4_mxfp8", "fp8", "bfloat16"), ("bfloat16", "w4a16_mxfp4", "fp8", "bfloat16")],
}
KV_NAMES = {"bfloat16": "bf16", "fp8": "fp8"}  # AIConfigurator KV-cache mode → fleetplan KV format
TP_DEGREES = (1, 2, 4, 8)
MOE_TP_DEGREES = (4, 8)
EP_DEGREES = (8, 16, 32)  # attention data-parallel × expert-parallel GPUs
MOE_TABLE = "aiconfigurator_moe.csv"
PREFILL_PROMPTS = (512, 1024, 2048, 4096, 8192)
PREFILL_BATCHES = (1, 4)
DECODE_BATCHES = (1, 4, 16, 64, 256)
DECODE_CONTEXTS = (1024, 4096)


def layouts(model: str, kind: str) -> list[tuple[int, int]]:
    """(tp, ep) layouts to export: tensor-parallel for dense models (``kind`` "tp"); for MoE
    models (``kind`` "moe") tensor-parallel and expert-parallel with attention data-parallel."""
    if kind == "tp":
        return [(tp, 1) for tp in TP_DEGREES] if model in DENSE else []
    if model not in MOE:
        return []
    return [(tp, 1) for tp in MOE_TP_DEGREES] + [(1, ep) for ep in EP_DEGREES]


def _session(system: str, engine: str, version: str, model_path: str, tp: int, ep: int, quant: tuple):
    """A session of ``tp`` × ``ep`` GPUs: ep > 1 is attention data-parallel over ep ranks with
    the experts split ep ways (AIConfigurator tp1 dp=ep moe_tp1 moe_ep=ep)."""
    from aiconfigurator.sdk import common, config
    from aiconfigurator.sdk.backends.factory import get_backend
    from aiconfigurator.sdk.inference_session import InferenceSession
    from aiconfigurator.sdk.models import get_model
    from aiconfigurator.sdk.perf_database import get_database_view

    gemm, moe, kv, fmha = quant
    mc = config.ModelConfig(
        tp_size=tp, moe_tp_size=tp if ep == 1 else 1, moe_ep_size=ep, attention_dp_size=ep,
        gemm_quant_mode=common.GEMMQuantMode[gemm], moe_quant_mode=common.MoEQuantMode[moe],
        kvcache_quant_mode=common.KVCacheQuantMode[kv], fmha_quant_mode=common.FMHAQuantMode[fmha],
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


def first_session(system: str, engine: str, version: str, model: str, tp: int, ep: int, dtype: str, log):
    """The session of the first quantisation of `QUANT` whose kernels the database has (one
    prefill and one decode point answer), and that quantisation; (None, None) if none."""
    for quant in QUANT[dtype]:
        try:
            session = _session(system, engine, version, MODELS[model], tp, ep, quant)
            _latency_ms(session, 1, 1024, "prefill")
            _latency_ms(session, 1, 1024, "decode")
            return session, quant
        except Exception as exc:  # the database lacks this combination
            print(f"skip {system} {engine} {model} {'/'.join(quant)} tp{tp} ep{ep}: {str(exc)[:160]}", file=log)
    return None, None


def grid(ep: int) -> list[tuple[str, int, int, int]]:
    """(kind, batch per attention rank, prompt tokens, context tokens) of one session."""
    points = [("prefill", b, s, 0) for s in PREFILL_PROMPTS for b in PREFILL_BATCHES if b == 1 or s <= 2048]
    batches = DECODE_BATCHES if ep == 1 else tuple(b for b in DECODE_BATCHES if b <= 64)
    return points + [("decode", b, 0, c) for c in DECODE_CONTEXTS for b in batches]


def session_rows(session, base: dict, ep: int, log) -> list[dict]:
    """The grid points of one session the database answers, as rows (batch × ep: the replica's)."""
    rows = []
    for kind, batch, prompt, context in grid(ep):
        try:
            ms = _latency_ms(session, batch, prompt or context, kind)
        except Exception as exc:
            print(f"skip {base['accelerator']} {base['engine']} {base['model']} {kind} b{batch}: {exc}", file=log)
            continue
        if ms is not None:
            rows.append(dict(base, kind=kind, batch=batch * ep, prompt_tokens=prompt, context_tokens=context,
                             latency_ms=round(ms, 4)))
    return rows


def export_rows(accelerators=tuple(SYSTEMS), engines=ENGINES, models=tuple(DENSE), dtypes=DTYPES,
                layout: str = "tp", log=sys.stderr) -> pd.DataFrame:
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
                    for tp, ep in layouts(model, layout):
                        session, quant = first_session(SYSTEMS[acc], engine, version, model, tp, ep, dtype, log)
                        if session is None:
                            continue
                        base = dict(model=model, accelerator=acc, engine=engine, version=version, weight_dtype=dtype,
                                    kv_dtype=KV_NAMES[quant[2]], tp=tp, as_of=today,
                                    source=source_text(aiconfigurator.__version__, SYSTEMS[acc], engine, version,
                                                       dtype, quant))
                        if ep > 1:
                            base["ep"] = ep
                        rows += session_rows(session, base, ep, log)
                        print(f"{acc} {engine} {model} {dtype} tp{tp} ep{ep}: {len(rows)} rows so far", file=log)
    return pd.DataFrame(rows)


def source_text(package: str, system: str, engine: str, version: str, dtype: str, quant: tuple) -> str:
    """A row's source: the package, database and (where not the plain one) the quantisation."""
    text = f"AIConfigurator {package} performance database ({system}/{engine} {version})"
    return text if quant == QUANT[dtype][0] and dtype in ("bf16", "fp8") else \
        text[:-1] + f"; gemm/moe/kv/fmha {'/'.join(quant)})"


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
    ap.add_argument("--models", nargs="*", default=None, help="default: the dense models (--layout tp) or the "
                    "MoE models (--layout moe)")
    ap.add_argument("--dtypes", nargs="*", default=list(DTYPES))
    ap.add_argument("--layout", choices=("tp", "moe"), default="tp",
                    help="tp: tensor-parallel dense models; moe: MoE models, tensor- and expert-parallel")
    ap.add_argument("--append", action="store_true", help="add the rows to --out instead of replacing it")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    from optimizer.scenario.calibration.tables import read_table, write_table

    models = args.models or list(DENSE if args.layout == "tp" else MOE)
    table = export_rows(args.accelerators, args.engines, models, args.dtypes, args.layout)
    out = Path(args.out)
    if args.append and out.is_file():
        read_table(out)  # refuses a file that is no benchmark table before it is extended
        table = pd.concat([pd.read_csv(out), table], ignore_index=True)
    write_table(table, out)
    print(f"{len(table)} rows → {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
