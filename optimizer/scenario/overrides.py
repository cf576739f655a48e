"""Overrides: ``KEY=VALUE`` dotted paths into a scenario (``--set``, ``--vary``,
``--perturb``, the robust margins) applied to its raw data; errors name the flag and the
value, and validation errors about an overridden value name the override."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from pydantic import BaseModel

from optimizer.base.errors import Origin, ScenarioError, shorten, unknown_id_message
from optimizer.base.sources import check_expansion, read_yaml
from optimizer.scenario.calibration.files import calibration_data
from optimizer.scenario.calibration.params import PARAMETERS
from optimizer.scenario.raw import RawScenario, select_dependent_rows, table_rows
from optimizer.scenario.sections import Serving
from optimizer.scenario.tables import DATA_DIR, SECTIONS, TABLES


def apply_overrides(raw: RawScenario, overrides: list[str], flag: str = "--set") -> RawScenario:
    """Return a copy with ``KEY=VALUE`` overrides applied. KEY is a dotted path into the
    scenario (``workloads.chat.ttft_p99_ms``, ``prices.h200-sxm.ondemand_usd_per_gpu_hour``,
    ``serving.decode_mbu``); VALUE is YAML (``500``, ``[1,2,4]``, ``true``) or a multiplier of
    the current value (``×1.5`` or ``x1.5``). ``flag`` is what errors about them name (the
    command-line flag they came from)."""
    out = RawScenario(copy.deepcopy(raw.data), dict(raw.origins), raw.path, list(raw.warnings), list(raw.overrides),
                      dict(raw.override_flags))
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError("should look like KEY=VALUE", Origin(f"{flag} {shorten(item)}"))
        item = f"{key.strip()}={text.strip()}"
        set_path(out, key.strip(), text.strip(), Origin(f"{flag} {shorten(item)}"))
        out.overrides.append(item)
        out.override_flags[item] = flag
    return out


def _submodel(model: type[BaseModel] | None, name: str) -> type[BaseModel] | None:
    if model is None or name not in model.model_fields:
        return None
    ann = model.model_fields[name].annotation
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def set_path(raw: RawScenario, key: str, text: str, origin: Origin | None = None) -> None:
    """Set one dotted path in ``raw.data`` (see `apply_overrides`); errors name ``origin``."""
    origin = origin or Origin("--set")
    parts = key.split(".")
    head = parts[0]
    if parts == ["calibration"]:  # a calibration file (relative to the working directory), read whole
        raw.data["calibration"] = calibration_data(text or None, Path.cwd(), origin)
        return
    node = raw.data
    # the model of the node the last part is set in (none at the top level: raw data's keys)
    model: type[BaseModel] | None = SECTIONS.get(head) if len(parts) > 1 else None
    table_depth = (2 if head == "supply" else 1) if head in TABLES else None
    for depth, part in enumerate(parts[:-1]):
        if depth > 0 and model is not None:
            sub = _submodel(model, part)
            if sub is not None and part not in node:
                node[part] = {}
            model = sub
        if not isinstance(node, dict) or part not in node:
            known = node.keys() if isinstance(node, dict) else ()
            raise ScenarioError(unknown_id_message("key", part, known), origin)
        node = node[part]
        if table_depth is not None and depth == table_depth:
            model = TABLES[head].model
    last = parts[-1]
    if not isinstance(node, dict):
        raise ScenarioError(f"'{'.'.join(parts[:-1])}' is a value, not a group of fields", origin)
    known_fields = set(node) | set(model.model_fields if model else ())
    if last not in known_fields:
        raise ScenarioError(unknown_id_message("field", last, known_fields), origin)
    if text[:1] in ("×", "x", "*") and is_number(text[1:]):
        current = node.get(last)
        if current is None and model is Serving and last in PARAMETERS:
            factor = float(text[1:])
            if not 0 < factor < float("inf"):
                raise ScenarioError(f"a calibrated value's multiplier must be greater than 0 and finite; got {text}",
                                    origin)
            scale = node.setdefault("calibration_scale", {})  # a calibrated value (per accelerator) is scaled
            scale[last] = float(scale.get(last, 1.0)) * factor
            return
        if current is None and model is not None:
            current = model.model_fields[last].default
        try:
            node[last] = float(current) * float(text[1:])
        except (TypeError, ValueError):
            raise ScenarioError(f"cannot multiply the non-numeric value {current!r}", origin) from None
    else:
        try:
            node[last] = _value(text) if text else None
        except yaml.YAMLError:
            node[last] = text
        check_expansion(node[last], origin)
        if len(parts) == 1 and head in TABLES and _table_form(node[last]):
            _select_table(raw, head, node[last], origin)
            return
        _check_override_shape(parts, node[last], key, origin)


TABLE_FORM_KEYS = {"csv", "ids", "rows", "patch", "provider"}


def _table_form(value) -> bool:
    """A table written as in a scenario file: a list (of ids or rows) or csv/ids/rows/patch."""
    return isinstance(value, list) or (isinstance(value, dict) and bool(value) and set(value) <= TABLE_FORM_KEYS)


def _select_table(raw: RawScenario, head: str, value, origin: Origin) -> None:
    """``--set accelerators=[h100-sxm,b200]``: the table resolved as the scenario file's own
    section would be (ids from the catalogue, rows, patches); for chosen sites or
    accelerators the catalogue's supply, owned and price rows come along, the scenario's
    own rows kept first."""
    doc = read_yaml(raw.path) if raw.path.is_file() else {}
    catalogue = raw.path.parent / str(doc["catalogue"]) if isinstance(doc.get("catalogue"), str) else DATA_DIR
    # the flag stands where a scenario file would, in the working directory: a CSV it names is
    # read from there (the flag's own text, slashes and all, is no folder)
    flag = Path.cwd() / "--set"
    rows_from: dict = {}
    try:
        raw.data[head] = table_rows(head, value, flag, catalogue, raw.warnings, rows_from)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, origin, field=head) from None
    # the table's rows now come from the flag (a patched row), a CSV or the catalogue: an error
    # in one names that place, not the row the scenario had before
    for path in [path for path in raw.origins if path[0] == head]:
        del raw.origins[path]
    raw.origins.update({path: Origin(origin.file, o.line, o.label) if o.file == str(flag) else o
                        for path, o in rows_from.items()})
    if head in ("sites", "accelerators"):
        provider = raw.data.get("price_provider", "reference")
        for dep in ("supply", "owned", "prices", "grid_carbon"):
            value = {"provider": provider} if dep == "prices" else None
            _merge_missing(raw.data[dep], table_rows(dep, value, raw.path, catalogue, raw.warnings))
        select_dependent_rows(raw.data, raw.origins, catalogue)


def _merge_missing(mine: dict, catalogue: dict) -> None:
    for key, value in catalogue.items():
        if key not in mine:
            mine[key] = value
        elif isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            _merge_missing(mine[key], value)


def _check_override_shape(parts: list[str], value, key: str, origin: Origin) -> None:
    """A table, a table row or a diurnal profile replaced whole must keep its shape."""
    head = parts[0]
    if head in TABLES:
        row_len = 3 if head == "supply" else 2
        if len(parts) < row_len:
            ok = isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())
            expected = "a mapping of rows (id → {field: value})"
        elif len(parts) == row_len:
            ok, expected = isinstance(value, dict), "a row, a mapping of fields"
        else:
            return
    elif head == "diurnal":
        if len(parts) == 1:
            ok = isinstance(value, dict) and all(isinstance(v, list) for v in value.values())
            expected = "a mapping profile → 24 multipliers"
        else:
            ok, expected = isinstance(value, list), "a list of 24 hourly multipliers"
    else:
        return
    if not ok:
        raise ScenarioError(f"expected {expected}, got {value!r}; to change one value, name it, e.g. "
                            "workloads.chat.ttft_p99_ms=500", origin)


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _DatesAsText(yaml.SafeLoader):
    """YAML's safe reading with dates kept as text (a scenario is recorded as JSON; the field
    that reads a date checks it)."""


_DatesAsText.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))


def _value(text: str):
    """A --set value as YAML reads it."""
    return yaml.load(text, Loader=_DatesAsText)  # noqa: S506 — a SafeLoader
