"""What a measurement states about the conditions it was taken in — the weights' precision,
the serving engine and its version — and where it says so.

A fit is only as right as these: the same tokens/s are 2× the efficiency at bf16 that they
are at fp8, so a reader never assumes a precision. Each value is a `Stated` (the value and
the words of the source that gave it), taken in this order:

1. what the user gave (a flag, a sidecar file, a column of the table);
2. what the source itself states: an MLPerf submission's measurements file
   (``weight_data_types``, required by the submission checker) and system description
   (``framework``, ``system_name``, notes), a serving benchmark's ``backend`` and
   ``model_id`` (quantised checkpoints name their precision: ``…-FP8``);
3. for the precision, nothing: the reader asks for it. For the engine, "any" — the fit then
   applies to every engine (`params.Calibration.lookup`), which is what an unknown engine
   means; for the version, "not stated".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

MODELLED = ("bf16", "fp8")
# precision words as sources write them → fleetplan's name (fp16 has bf16's 2 bytes and tensor rate)
PRECISIONS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "bf16", "float16": "bf16",
              "fp8": "fp8", "float8": "fp8", "e4m3": "fp8",
              "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "int8": "int8", "int4": "int4", "awq": "int4",
              "gptq": "int4", "w4a16": "int4"}
# engine and backend words → the engine names of the shipped calibration
ENGINES = {"vllm": "vllm", "sglang": "sglang", "tensorrt": "trtllm", "trtllm": "trtllm", "trt": "trtllm",
           "lmdeploy": "lmdeploy", "tgi": "tgi"}


def _words(text) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", str(text).lower()) if w]


@dataclass(frozen=True)
class Stated:
    value: str | None
    source: str


class PrecisionError(ValueError):
    """The source states a precision fleetplan does not model, or several."""


def precisions_in(text) -> set[str]:
    """fleetplan's names of the precisions ``text`` mentions (FP8, bfloat16, AWQ …)."""
    return {PRECISIONS[w] for w in _words(text) if w in PRECISIONS}


def one_precision(text: str, where: str) -> Stated | None:
    """The single precision ``text`` (found at ``where``) states; None when it states none."""
    found = precisions_in(text)
    if not found:
        return None
    if len(found) > 1:
        raise PrecisionError(f"{where} states several precisions ({', '.join(sorted(found))}); say which the weights "
                             "ran at")
    value = found.pop()
    if value not in MODELLED:
        raise PrecisionError(f"{where} states {value} weights; fleetplan models {' and '.join(MODELLED)} only")
    return Stated(value, f"{where}: {shorten_quote(text)}")


def engine_of(name, where: str) -> Stated | None:
    """The engine a backend or framework name means (TensorRT → trtllm); None for an API
    protocol (``openai``) or a name it does not know."""
    engine = next((ENGINES[w] for w in _words(name) if w in ENGINES), None)
    return Stated(engine, f"{where}: {shorten_quote(name)}") if engine else None


def shorten_quote(text: str, most: int = 60) -> str:
    text = " ".join(str(text).split())
    return f"'{text}'" if len(text) <= most else f"'{text[:most - 1]}…'"


# ---------------------------------------------------------------------------- MLPerf submissions


@dataclass(frozen=True)
class Submission:
    """Where an ``mlperf_log_summary.txt`` sits in a submission tree
    (``<division>/<submitter>/results/<system>/<benchmark>/<scenario>/performance/run_1/``)."""

    root: Path
    system: str
    benchmark: str
    scenario: str

    @classmethod
    def of(cls, summary: Path) -> Submission | None:
        parts = summary.resolve().parts
        if "results" not in parts:
            return None
        i = len(parts) - 1 - parts[::-1].index("results")
        if len(parts) < i + 4:
            return None
        return cls(Path(*parts[:i]), parts[i + 1], parts[i + 2], parts[i + 3])

    def measurements(self) -> tuple[dict, Path] | None:
        """The measurements JSON the submission checker requires (``weight_data_types`` …)."""
        folder = self.root / "measurements" / self.system / self.benchmark / self.scenario
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            doc = _json(path)
            if isinstance(doc, dict) and "weight_data_types" in doc:
                return doc, path
        return None

    def system_description(self) -> tuple[dict, Path] | None:
        path = self.root / "systems" / f"{self.system}.json"
        doc = _json(path) if path.is_file() else None
        return (doc, path) if isinstance(doc, dict) else None


def _json(path: Path):
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, json.JSONDecodeError):
        return None


def mlperf_statements(summary: Path) -> dict[str, Stated]:
    """What an MLPerf submission states about the run of ``summary``: weight precision (the
    measurements file, else the system description or benchmark name), engine and version
    (the system description's framework). Keys absent where the submission says nothing."""
    sub = Submission.of(summary)
    if sub is None:
        return {}
    out: dict[str, Stated] = {}
    found = sub.measurements()
    if found:
        doc, path = found
        stated = one_precision(doc["weight_data_types"], f"{path.name} weight_data_types")
        if stated:
            out["weight_dtype"] = stated
    described = sub.system_description()
    if described:
        doc, path = described
        for key in ("framework", "other_software_stack", "system_name"):
            if "engine" not in out and doc.get(key) and (engine := engine_of(doc[key], f"{path.name} {key}")):
                out["engine"] = engine
        if doc.get("framework"):
            out["version"] = Stated(" ".join(str(doc["framework"]).split()), f"{path.name} framework")
        for key in ("system_name", "sw_notes", "hw_notes"):
            if "weight_dtype" not in out and doc.get(key):
                stated = one_precision(doc[key], f"{path.name} {key}")
                if stated:
                    out["weight_dtype"] = stated
    if "weight_dtype" not in out:
        stated = one_precision(sub.benchmark, "benchmark folder")
        if stated:
            out["weight_dtype"] = stated
    return out
