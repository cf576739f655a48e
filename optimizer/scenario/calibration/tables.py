"""Measured serving points in: one reader per format, one tidy table out.

Every reader returns a `pandas.DataFrame` with the columns of `COLUMNS` (unknowns empty) and
two more, ``file`` and ``row``, so that a bad value found later can still be named.

The benchmark table (CSV, the format this project ships and exports to)
-----------------------------------------------------------------------
One row per measurement; ids as in ``data/`` (``models.csv``, ``accelerators.csv``).

=================  ========  ==============================================================
column             required  meaning
=================  ========  ==============================================================
kind               yes       ``prefill`` | ``decode`` | ``e2e``
model              yes       model id, e.g. ``llama-3.1-70b``
accelerator        yes       accelerator id, e.g. ``h100-sxm``
tp                 yes       tensor-parallel degree (GPUs per replica with ``ep``/``pp`` 1)
batch              yes       prefill: prompts in the forward pass; decode: sequences in the
                             step; e2e: the client's maximum concurrency (empty: unbounded)
prompt_tokens      prefill   new tokens per prompt (e2e: mean input tokens per request)
context_tokens     decode    decode: mean context per sequence; prefill: tokens already
                             cached before the prompt (default 0)
latency_ms         pf/dec    prefill: the forward pass; decode: one step
output_tokens      e2e       mean output tokens per request
engine, version    no        serving engine (``trtllm``, ``vllm``, ``sglang``…) and version;
                             empty engine reads as ``any`` (the fit applies to every engine)
weight_dtype       yes       ``bf16`` | ``fp8`` | ``nvfp4`` | ``mxfp4`` | ``int4``
                             (`optimizer.base.precision`): never assumed (2× in the fitted
                             efficiencies)
kv_dtype           no        ``bf16`` | ``fp8`` | ``nvfp4``; default: the weight dtype
ep, pp             no        expert / pipeline parallel degree (default 1); prefill and decode
                             rows with ep > 1: an expert-parallel replica of tp × ep GPUs
                             with attention data-parallel, ``batch`` the replica's sequences
gpus               no        e2e: GPUs the throughput was measured on, a whole number of
                             replicas of tp × pp GPUs (default: one replica)
request_rate       no        e2e: offered requests/s (``inf`` for a closed loop)
ttft_p50_ms, ttft_p99_ms, itl_p50_ms, itl_p99_ms          e2e latencies
throughput_tokens_per_s  e2e output tokens/s of the run
source, as_of      no        where the row comes from and its date
=================  ========  ==============================================================

An e2e row is fitted through its median inter-token latency: the decode step at the run's
mean running batch, which Little's law gives as output tokens/s × ITL p50
(`optimizer.commands.calibrate.model`).

Serving-benchmark JSON
----------------------
vLLM's ``benchmark_serving.py`` / ``vllm bench serve --save-result`` and SGLang's
``python -m sglang.bench_serving --output-file`` (one JSON object, or JSON lines, one per
run) give request counts, token totals, request rate, throughput and TTFT/ITL statistics but
not the model id, accelerator or parallel degree: those come from ``context`` (command-line
flags or a sidecar ``FILE.json.yaml``/``meta.yaml`` with ``model``, ``accelerator``, ``tp``
and optionally ``engine``, ``version``, ``weight_dtype``). The engine is read from the run's
``backend`` where it names one (``openai`` is a protocol, not an engine), the weights'
precision from its ``model_id`` where it names one (``…-FP8``); else it must be given.

MLPerf Inference
----------------
``mlperf_log_summary.txt`` of a Server or Offline run (tokens/s and, for Server, TTFT/TPOT
percentiles), as an e2e row with the context given as for the JSON files; the workload's
mean prompt and output lengths (OpenOrca for Llama-2-70B: 294 / 286) come from the context.
Inside a submission tree, the weights' precision comes from the measurements file the
submission checker requires (``weight_data_types``), the engine and version from the system
description's ``framework`` (`optimizer.scenario.calibration.stated`).

Every row records where its precision, KV precision, engine and version came from
(``weight_dtype_from`` …), and the calibration file keeps it per parameter set.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.precision import KV_FORMATS, WEIGHT_FORMATS
from optimizer.scenario.calibration.stated import PrecisionError, Stated, engine_of, mlperf_statements, one_precision
from optimizer.scenario.fields import range_text

KINDS = ("prefill", "decode", "e2e")
DTYPES = WEIGHT_FORMATS  # the weights' precisions a row may state; its KV cache's: KV_FORMATS
REQUIRED = ("kind", "model", "accelerator", "tp", "batch")
TEXT = ("kind", "model", "accelerator", "engine", "version", "weight_dtype", "kv_dtype", "source", "as_of")
NUMBERS = ("tp", "ep", "pp", "gpus", "batch", "prompt_tokens", "context_tokens", "output_tokens", "latency_ms",
           "request_rate", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "throughput_tokens_per_s")
COLUMNS = REQUIRED + tuple(c for c in TEXT + NUMBERS if c not in REQUIRED)
STATED = ("weight_dtype", "kv_dtype", "engine", "version")  # each row records where it found these: <name>_from
CONTEXT_KEYS = ("model", "accelerator", "tp", "engine", "version", "weight_dtype", "kv_dtype", "ep", "pp", "gpus",
                "prompt_tokens", "output_tokens", "source", "as_of")
TOKENS_MAX = 10_000_000  # the longest context windows
# The physical range of each numeric column, (lowest, highest, unit): a value outside it is a
# unit slip or a corrupt row, not a measurement
LIMITS = {
    "tp": (1, 1024, "GPUs"), "ep": (1, 1024, "GPUs"), "pp": (1, 1024, "GPUs"), "gpus": (1, 100_000, "GPUs"),
    "batch": (1, 1_000_000, "prompts or sequences"),
    "prompt_tokens": (0, TOKENS_MAX, "tokens"), "context_tokens": (0, TOKENS_MAX, "tokens"),
    "output_tokens": (0, TOKENS_MAX, "tokens"),
    "latency_ms": (0.001, 3_600_000, "ms"),  # a microsecond kernel to an hour-long pass
    "request_rate": (0.0001, 10_000_000, "requests/s (or inf for a closed loop)"),
    "ttft_p50_ms": (0.001, 86_400_000, "ms"), "ttft_p99_ms": (0.001, 86_400_000, "ms"),
    "itl_p50_ms": (0.001, 60_000, "ms"), "itl_p99_ms": (0.001, 60_000, "ms"),
    "throughput_tokens_per_s": (0.001, 1e9, "tokens/s"),
}


def _error(message: str, file: str, row: int | None, field: str | None) -> ScenarioError:
    return ScenarioError(message, Origin(file, row), field=field)


def _number(value, file: str, row: int, field: str) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        return math.nan
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _error(f"expected a number, got {value!r}", file, row, field) from None
    low, high, unit = LIMITS[field]
    if not (low <= x <= high or (x == math.inf and field == "request_rate")):
        raise _error(f"expected {range_text(ge=low, le=high, unit=unit)}; got {value!r}", file, row, field)
    return x


def _positive(x: float, file: str, row: int, field: str, what: str) -> None:
    if not (x > 0):
        raise _error(f"expected {what} > 0, got {x:g}" if not math.isnan(x) else f"missing: {what} is required "
                     "for this kind of row", file, row, field)


def check_row(values: dict, file: str, row: int, sources: dict[str, str] | None = None) -> dict:
    """One raw row (strings or numbers) → typed values; a `ScenarioError` naming file, row and
    field for anything missing, unknown or inconsistent. ``sources``: where the reader found
    each of `STATED` (recorded as ``<column>_from``); the weights' precision is required, never
    assumed."""
    out = {c: None for c in COLUMNS}
    for name in TEXT:
        v = values.get(name)
        out[name] = None if v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == "" \
            else str(v).strip()
    for name in NUMBERS:
        out[name] = _number(values.get(name), file, row, name)
    for name in REQUIRED:
        if out[name] is None or (name in NUMBERS and math.isnan(out[name]) and not (name == "batch" and out["kind"] == "e2e")):
            raise _error("missing (this column is required)", file, row, name)
    if out["kind"] not in KINDS:
        raise _error(f"expected one of {', '.join(KINDS)}, got {out['kind']!r}", file, row, "kind")
    if out["weight_dtype"] is None:
        raise _error(f"missing: the row does not state the weights' precision, and fleetplan assumes none; expected "
                     f"{' or '.join(DTYPES)}", file, row, "weight_dtype")
    out.update(_provenance(out, sources or {}))
    for name, known in (("weight_dtype", DTYPES), ("kv_dtype", KV_FORMATS)):
        if out[name] not in known:
            raise _error(f"expected one of {', '.join(known)}, got {out[name]!r}", file, row, name)
    for name in ("tp", "ep", "pp"):
        if name != "tp" and math.isnan(out[name]):
            out[name] = 1.0
        if out[name] < 1 or out[name] != int(out[name]):
            raise _error(f"expected a whole number of GPUs ≥ 1, got {out[name]:g}", file, row, name)
    replica = out["tp"] * out["pp"]
    if math.isnan(out["gpus"]):
        out["gpus"] = replica
    if out["gpus"] < replica or out["gpus"] % replica:
        raise _error(f"expected a whole number of replicas of tp × pp = {replica:g} GPUs, got {out['gpus']:g}", file,
                     row, "gpus")
    kind = out["kind"]
    if kind != "e2e":
        _positive(out["batch"], file, row, "batch", "the batch")
        _positive(out["latency_ms"], file, row, "latency_ms", "the latency")
    if kind == "prefill":
        _positive(out["prompt_tokens"], file, row, "prompt_tokens", "prompt tokens")
        out["context_tokens"] = 0.0 if math.isnan(out["context_tokens"]) else out["context_tokens"]
    elif kind == "decode":
        _positive(out["context_tokens"], file, row, "context_tokens", "the context")
    else:
        _positive(out["prompt_tokens"], file, row, "prompt_tokens", "mean prompt tokens")
        _positive(out["output_tokens"], file, row, "output_tokens", "mean output tokens")
        _positive(out["itl_p50_ms"], file, row, "itl_p50_ms", "the median inter-token latency")
        _positive(out["throughput_tokens_per_s"], file, row, "throughput_tokens_per_s", "output tokens/s")
    return out


NOT_STATED = {"weight_dtype": "not stated", "kv_dtype": "not stated: taken as the weights' precision",
              "engine": "not stated: the fit applies to any engine", "version": "not stated"}


def _provenance(out: dict, sources: dict[str, str]) -> dict:
    """The KV precision and engine a row leaves empty, and where each of `STATED` came from."""
    return {"kv_dtype": out["kv_dtype"] or out["weight_dtype"], "engine": out["engine"] or "any",
            **{f"{k}_from": sources.get(k) or NOT_STATED[k] for k in STATED}}


def _frame(rows: list[dict], files: list[str], lines: list[int]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=[*COLUMNS, *(f"{k}_from" for k in STATED)])
    table["file"] = files
    table["row"] = lines
    return table


def read_benchmark_csv(path: str | Path) -> pd.DataFrame:
    """The documented benchmark CSV (see the module docstring)."""
    path = Path(path)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, comment=None)
    except FileNotFoundError:
        raise _error("no such file", str(path), None, None) from None
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise _error(f"not a readable CSV table ({exc})", str(path), None, None) from None
    unknown = [c for c in raw.columns if c not in COLUMNS]
    if unknown:
        raise _error(f"unknown column {unknown[0]!r}; expected columns among {', '.join(COLUMNS)}", str(path), 1,
                     unknown[0])
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise _error("missing column (required)", str(path), 1, missing[0])
    rows, lines = [], []
    for i, values in enumerate(raw.to_dict("records")):
        line = i + 2  # header is line 1
        given = {k: f"{path.name}, column {k}" for k in STATED if str(values.get(k) or "").strip()}
        rows.append(check_row(values, str(path), line, given))
        lines.append(line)
    if not rows:
        raise _error("the table has no rows", str(path), None, None)
    return _frame(rows, [str(path)] * len(rows), lines)


def _sidecar(path: Path) -> tuple[dict, str | None]:
    for candidate in (path.with_name(path.name + ".yaml"), path.with_name("meta.yaml")):
        if candidate.is_file():
            doc = yaml.safe_load(candidate.read_text()) or {}
            if not isinstance(doc, dict):
                raise _error("expected a mapping of model, accelerator, tp, …", str(candidate), 1, None)
            return doc, candidate.name
    return {}, None


def _context(path: Path, context: dict | None, needed=("model", "accelerator", "tp")) -> tuple[dict, dict[str, str]]:
    """The context of a result file (flags over its sidecar), and where each value came from."""
    sidecar, name = _sidecar(path)
    flags = {k: v for k, v in (context or {}).items() if v is not None}
    merged = {**sidecar, **flags}
    sources = {k: (f"--{k.replace('_', '-')}" if k in flags else f"{name}: {k}") for k in merged}
    unknown = [k for k in merged if k not in CONTEXT_KEYS]
    if unknown:
        raise _error(f"unknown context key {unknown[0]!r}; expected some of {', '.join(CONTEXT_KEYS)}", str(path),
                     None, unknown[0])
    for key in needed:
        if merged.get(key) in (None, ""):
            raise _error(f"the file does not say the {key}; give it with --{key.replace('_', '-')} or in a sidecar "
                         f"{path.name}.yaml", str(path), None, key)
    return merged, sources


def _stated(key: str, ctx: dict, given: dict, found: dict[str, Stated], path: Path, line) -> tuple:
    """(value, source) of one of `STATED`: the context's, else what the file states; a
    context that contradicts the file is refused."""
    stated = found.get(key)
    if ctx.get(key) not in (None, ""):
        if key == "weight_dtype" and stated is not None and stated.value != ctx[key]:
            raise _error(f"{given[key]} says {ctx[key]}, but {stated.source} says {stated.value}", str(path), line, key)
        return ctx[key], given[key]
    return (stated.value, stated.source) if stated else (None, None)


def _precision(text, where: str, path: Path, line) -> dict[str, Stated]:
    """{"weight_dtype": …} where ``text`` names one precision; a `ScenarioError` for one
    fleetplan does not model."""
    try:
        stated = one_precision(text, where) if text else None
    except PrecisionError as exc:
        raise _error(str(exc), str(path), line, "weight_dtype") from None
    return {"weight_dtype": stated} if stated else {}


def _require_precision(value, path: Path, line, looked: str) -> None:
    if value in (None, ""):
        raise _error(f"the run does not state the weights' precision ({looked}), and fleetplan assumes none; give "
                     f"--weight-dtype {'|'.join(DTYPES)} or weight_dtype in {path.name}.yaml", str(path), line,
                     "weight_dtype")


def _json_records(path: Path) -> list[tuple[int, dict]]:
    text = path.read_text()
    try:
        doc = json.loads(text)
        return [(1, doc)] if isinstance(doc, dict) else [(i + 1, d) for i, d in enumerate(doc)]
    except json.JSONDecodeError:
        pass
    out = []
    for i, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                out.append((i + 1, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise _error(f"not JSON or JSON lines ({exc.msg})", str(path), i + 1, None) from None
    return out


def _get(record: dict, *names):
    for n in names:
        if record.get(n) is not None:
            return record[n]
    return None


def read_serving_json(path: str | Path, context: dict | None = None) -> pd.DataFrame:
    """vLLM ``benchmark_serving``/``vllm bench serve`` or SGLang ``bench_serving`` results."""
    path = Path(path)
    if not path.is_file():
        raise _error("no such file", str(path), None, None)
    ctx, given = _context(path, context)
    rows, lines = [], []
    for line, rec in _json_records(path):
        if not isinstance(rec, dict):
            raise _error("expected a JSON object per run", str(path), line, None)
        completed = _get(rec, "completed")
        if not completed:
            raise _error("missing or zero 'completed' (requests finished in the run)", str(path), line, "completed")
        for key in ("total_input_tokens", "total_output_tokens", "output_throughput", "median_itl_ms"):
            if rec.get(key) is None:
                raise _error(f"missing '{key}'; is this a serving-benchmark result?", str(path), line, key)
        name = _get(rec, "model_id", "model")
        found = _precision(name, "model_id", path, line)
        if _get(rec, "backend") and (engine := engine_of(rec["backend"], "backend")):
            found["engine"] = engine
        stated = {k: _stated(k, ctx, given, found, path, line) for k in STATED}
        _require_precision(stated["weight_dtype"][0], path, line, f"model_id {name!r} names none")
        values = {
            **{k: ctx.get(k) for k in ("model", "accelerator", "tp", "ep", "pp", "gpus")},
            **{k: value for k, (value, _) in stated.items()},
            "kind": "e2e",
            "batch": _get(rec, "max_concurrency"),
            "prompt_tokens": rec["total_input_tokens"] / completed,
            "output_tokens": rec["total_output_tokens"] / completed,
            "request_rate": _get(rec, "request_rate"),
            "ttft_p50_ms": _get(rec, "median_ttft_ms"), "ttft_p99_ms": _get(rec, "p99_ttft_ms"),
            "itl_p50_ms": rec["median_itl_ms"], "itl_p99_ms": _get(rec, "p99_itl_ms"),
            "throughput_tokens_per_s": rec["output_throughput"],
            "source": ctx.get("source") or f"{path.name}", "as_of": ctx.get("as_of") or _get(rec, "date"),
        }
        if isinstance(values["request_rate"], str):
            values["request_rate"] = math.inf if values["request_rate"] == "inf" else values["request_rate"]
        rows.append(check_row(values, str(path), line, {k: where for k, (_, where) in stated.items() if where}))
        lines.append(line)
    if not rows:
        raise _error("no benchmark runs in the file", str(path), None, None)
    return _frame(rows, [str(path)] * len(rows), lines)


_MLPERF = {
    "scenario": re.compile(r"^Scenario\s*:\s*(\w+)", re.M),
    "tokens_per_s": re.compile(r"^(?:Tokens per second|Completed tokens per second)\s*(?:\(inferred\))?\s*:\s*([\d.]+)", re.M),
    "samples_per_s": re.compile(r"^(?:Samples per second|Completed samples per second)\s*:\s*([\d.]+)", re.M),
    "ttft_p50": re.compile(r"^50.00 percentile first token latency \(ns\)\s*:\s*(\d+)", re.M),
    "ttft_p99": re.compile(r"^99.00 percentile first token latency \(ns\)\s*:\s*(\d+)", re.M),
    "tpot_p50": re.compile(r"^50.00 percentile time to output token \(ns\)\s*:\s*(\d+)", re.M),
    "tpot_p99": re.compile(r"^99.00 percentile time to output token \(ns\)\s*:\s*(\d+)", re.M),
    "valid": re.compile(r"^Result is\s*:\s*(\w+)", re.M),
}


def read_mlperf_summary(path: str | Path, context: dict | None = None) -> pd.DataFrame:
    """One ``mlperf_log_summary.txt`` (an LLM Server run, which reports TTFT and TPOT
    percentiles) → one e2e row. Offline runs report no latency and are refused."""
    path = Path(path)
    if not path.is_file():
        raise _error("no such file", str(path), None, None)
    ctx, given = _context(path, context, ("model", "accelerator", "tp", "prompt_tokens", "output_tokens"))
    text = path.read_text(errors="replace")
    found = {k: (m.group(1) if (m := rx.search(text)) else None) for k, rx in _MLPERF.items()}
    if found["valid"] != "VALID":
        raise _error(f"the run is not VALID (Result is: {found['valid']})", str(path), None, "Result is")
    if found["tpot_p50"] is None or found["tokens_per_s"] is None:
        raise _error("no 'time to output token' percentiles or tokens/s: only LLM Server runs carry the latencies "
                     "a fit needs", str(path), None, "time to output token")
    try:
        submission = mlperf_statements(path)
    except PrecisionError as exc:
        raise _error(str(exc), str(path), None, "weight_dtype") from None
    stated = {k: _stated(k, ctx, given, submission, path, None) for k in STATED}
    _require_precision(stated["weight_dtype"][0], path, None, "no measurements file with weight_data_types, and no "
                       "precision in the system description")
    ns = 1e-6
    values = {
        **{k: ctx.get(k) for k in ("model", "accelerator", "tp", "ep", "pp", "gpus", "prompt_tokens", "output_tokens")},
        **{k: value for k, (value, _) in stated.items()},
        "kind": "e2e", "batch": None, "request_rate": None,
        "ttft_p50_ms": float(found["ttft_p50"]) * ns if found["ttft_p50"] else None,
        "ttft_p99_ms": float(found["ttft_p99"]) * ns if found["ttft_p99"] else None,
        "itl_p50_ms": float(found["tpot_p50"]) * ns,
        "itl_p99_ms": float(found["tpot_p99"]) * ns if found["tpot_p99"] else None,
        "throughput_tokens_per_s": float(found["tokens_per_s"]),
        "source": ctx.get("source") or f"MLPerf {path}", "as_of": ctx.get("as_of"),
    }
    sources = {k: where for k, (_, where) in stated.items() if where}
    return _frame([check_row(values, str(path), None, sources)], [str(path)], [None])


def read_table(path: str | Path, context: dict | None = None) -> pd.DataFrame:
    """Any supported file, by its name: ``.csv`` benchmark table, ``.json``/``.jsonl``
    serving-benchmark results, ``mlperf_log_summary.txt``."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".csv"):
        return read_benchmark_csv(path)
    if name.endswith((".json", ".jsonl")):
        return read_serving_json(path, context)
    if name.endswith(".txt") and "mlperf" in name:
        return read_mlperf_summary(path, context)
    raise _error("unknown format: expected a benchmark .csv, a serving-benchmark .json/.jsonl or an "
                 "mlperf_log_summary.txt", str(path), None, None)


def read_tables(paths, context: dict | None = None) -> pd.DataFrame:
    return pd.concat([read_table(p, context) for p in paths], ignore_index=True)


def write_table(table: pd.DataFrame, path: Path) -> None:
    """A benchmark CSV with the documented columns (empty ones dropped), written atomically."""
    keep = [c for c in COLUMNS if c in table.columns and table[c].notna().any()]
    out = table[keep].copy()
    for c in ("tp", "ep", "pp", "batch"):
        if c in out:
            out[c] = out[c].astype("Int64")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", newline="") as f:
        out.to_csv(f, index=False)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def table_digest(paths) -> list[dict]:
    """sha256 and modification date of each input file (recorded in a calibration file)."""
    import hashlib
    from datetime import datetime, timezone

    out = []
    for p in paths:
        p = Path(p)
        out.append({"file": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                    "modified": datetime.fromtimestamp(p.stat().st_mtime, timezone.utc).date().isoformat()})
    return out


def finite(x) -> bool:
    return x is not None and bool(np.isfinite(x))
