"""The calibration file: fitted parameters per (accelerator, engine, dtype), their residual
spread per kind of point, and the hashes and dates of the tables they were fitted to.

YAML (``.yaml``/``.yml``) or JSON (any other name), written atomically by
`fleetplan calibrate`::

    fleetplan_calibration: 1
    created: 2026-12-03
    inputs: [{file: example_h100.csv, sha256: …, modified: 2026-12-03}]
    entries:
      - accelerator: h100-sxm
        engine: trtllm
        dtype: bf16
        prefill_mfu: 0.62
        …                      # every parameter of `params.ParameterSet`
        spread: {prefill: {points: 40, median_abs_error: 0.03, p90_abs_error: 0.07, median_log_ratio: 0.0}}
    residuals: {fit: [...], holdout: [...]}   # per kind and per table, for the record
    points:                    # every measured point with its prediction (`params.CalibrationPoint`)
      - {table: example_h100.csv, kind: prefill, split: fit, accelerator: h100-sxm, …, measured_ms: 41.2, predicted_ms: 40.7}

A scenario names one with a top-level ``calibration: FILE`` (relative to the scenario); its
content, not its path, is what the resolved scenario records (`calibration_data`: the
parameter sets, the points and the residual table), so a plan folder's scenario.json is
self-contained and its report can draw the calibration.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import date
from pathlib import Path

import yaml
from pydantic import ValidationError

from optimizer.base.errors import RANGE_ERRORS, Origin, ScenarioError
from optimizer.base.sources import read_yaml
from optimizer.scenario.calibration.params import (
    PARAMETERS,
    CalibrationPoint,
    ParameterSet,
    entry_from_row,
    shipped_rows,
)

FORMAT_VERSION = 1


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def read_calibration(path: str | Path) -> tuple[list[ParameterSet], str]:
    """A calibration file → its parameter sets (origin = the file) and the sha256 of its bytes."""
    entries, sha, _ = read_calibration_record(path)
    return entries, sha


def read_calibration_record(path: str | Path) -> tuple[list[ParameterSet], str, dict]:
    """`read_calibration`, and the file's measured points (checked) and residual table:
    {"points": [...], "residuals": {...}}."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"cannot read the calibration file ({exc.strerror})", Origin(str(path))) from None
    try:
        doc = yaml.safe_load(data) if _is_yaml(path) else json.loads(data)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"not a readable {'YAML' if _is_yaml(path) else 'JSON'} file ({exc})",
                            Origin(str(path))) from None
    if not isinstance(doc, dict) or doc.get("fleetplan_calibration") != FORMAT_VERSION:
        raise ScenarioError(f"not a fleetplan calibration file: expected 'fleetplan_calibration: {FORMAT_VERSION}' "
                            "at the top (written by fleetplan calibrate)", Origin(str(path)),
                            field="fleetplan_calibration")
    entries = doc.get("entries")
    if not isinstance(entries, list) or not entries:
        raise ScenarioError("expected a non-empty list of parameter sets", Origin(str(path)), field="entries")
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(_parameter_set(path, entry, i))
        except ScenarioError as exc:
            raise _placed(exc, path, "entries", i) from None
    points = doc.get("points") or []
    if not isinstance(points, list):
        raise ScenarioError("expected a list of measured points", Origin(str(path)), field="points")
    checked = []
    for i, point in enumerate(points):
        try:
            checked.append(_checked(CalibrationPoint, point, Origin(str(path), None, f"points[{i}]")).model_dump())
        except ScenarioError as exc:
            raise _placed(exc, path, "points", i) from None
    residuals = doc.get("residuals") if isinstance(doc.get("residuals"), dict) else {}
    return out, hashlib.sha256(data).hexdigest(), {"points": checked, "residuals": residuals}


def _parameter_set(path: Path, entry, i: int) -> ParameterSet:
    """Entry ``i`` of the file, checked."""
    where = Origin(str(path), None, f"entries[{i}]")
    if not isinstance(entry, dict):
        raise ScenarioError(f"expected a mapping of parameters, got {entry!r}", where, field=f"entries[{i}]")
    unknown = [k for k in entry if k not in ParameterSet.model_fields or k == "origin"]
    if unknown:
        known = [k for k in ParameterSet.model_fields if k != "origin"]
        raise ScenarioError(f"unknown field; expected among {', '.join(known)}", where, field=unknown[0])
    return _checked(ParameterSet, dict(entry, origin=path.name), where)


def _placed(exc: ScenarioError, path: Path, section: str, i: int) -> ScenarioError:
    """``exc`` at its line: the failing field's, else item ``i``'s of ``section``. The file is
    read again for its lines (YAML, and JSON as the YAML it also is) only here, on the error
    path; where that reading fails the error keeps no line."""
    try:
        lines = read_yaml(path)
    except ScenarioError:
        lines = None
    items = lines.get(section) if isinstance(lines, dict) else None
    item = items[i] if isinstance(items, list) and i < len(items) else None
    key = (exc.field or "").split(".")[0]
    line = getattr(item, "key_lines", {}).get(key) or getattr(item, "line", None)
    if line is None:
        item_lines = getattr(items, "lines", [])
        line = item_lines[i] if i < len(item_lines) else None
    return ScenarioError(exc.message, Origin(str(path), line, f"{section}[{i}]"), exc.field)


def _checked(model, value, where: Origin):
    """``model(**value)``, or the first validation problem as a `ScenarioError` at ``where``."""
    if not isinstance(value, dict):
        raise ScenarioError(f"expected a mapping, got {value!r}", where, field=where.label)
    try:
        return model(**value)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        message = err["msg"].removeprefix("Value error, ")
        if name in PARAMETERS:
            low, high, _ = PARAMETERS[name]
            accepted = f"{low:g} to {high:g}, the range a fit keeps to"
            message = f"expected {accepted}" if err["type"] in RANGE_ERRORS else f"{message} (accepted: {accepted})"
        raise ScenarioError(f"{message}; got {err.get('input')!r}", where,
                            field=".".join(str(p) for p in err["loc"])) from None


def calibration_path(value, base: Path, where: Origin, field: str | None = None) -> Path:
    """The calibration file ``value`` names (relative to ``base``), checked: a path, to a file.
    Errors name ``where`` the name was given (a scenario's line, or a flag)."""
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"expected the path of a calibration file (fleetplan calibrate --out), got {value!r}",
                            where, field=field)
    path = (base / value).resolve()
    if path.is_dir():
        raise ScenarioError(f"{path} is a folder; expected a calibration file in it (the YAML or JSON file "
                            "fleetplan calibrate --out wrote)", where, field=field)
    if not path.is_file():
        raise ScenarioError(f"no calibration file at {path}", where, field=field)
    return path


def calibration_data(value, base: Path, where: Origin, field: str | None = None) -> dict:
    """The ``calibration`` a resolved scenario records: the file ``value`` names (relative to
    ``base``; errors name ``where`` and ``field``), if any, ahead of the shipped defaults,
    plus the file's name and sha256."""
    entries: list[dict] = []
    file = sha = None
    record: dict = {}
    if value is not None:
        path = calibration_path(value, base, where, field)
        sets, sha, record = read_calibration_record(path)
        entries = [e.model_dump() for e in sets]
        file = str(path)
    entries += [entry_from_row(row).model_dump() for row in shipped_rows()]
    return {"file": file, "sha256": sha, "entries": entries, **record}


def write_calibration(path: str | Path, entries: list[ParameterSet], inputs: list[dict], residuals: dict,
                      points: list[CalibrationPoint] = ()) -> None:
    """Write the calibration file atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    doc = {
        "fleetplan_calibration": FORMAT_VERSION,
        "created": date.today().isoformat(),
        "inputs": inputs,
        "entries": [e.model_dump(exclude={"origin"}) for e in entries],
        "residuals": residuals,
        "points": [p.model_dump() for p in points],
    }
    text = yaml.safe_dump(doc, sort_keys=False) if _is_yaml(path) else json.dumps(doc, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
