"""Reading a scenario file into plain data: the YAML, its CSV tables (or the shipped
catalogue), ids and patches resolved, every row remembering its file and line — the
`RawScenario` that overrides change and `validate` checks."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from optimizer.base.errors import (
    Origin,
    ScenarioError,
    shorten,
    unknown_id_message,
    yaml_bool_hint,
)
from optimizer.base.sources import LineDict, Row, read_csv, read_yaml
from optimizer.scenario.calibration.files import calibration_data
from optimizer.scenario.fleet import FleetRow
from optimizer.scenario.kvcache import inline_reuse_file
from optimizer.scenario.sections import DemandRow, MixRow
from optimizer.scenario.tables import (
    DATA_DIR,
    DIURNAL_FILE,
    SECTIONS,
    TABLES,
    TOP_LEVEL,
    TableSpec,
    scenario_path,
)
from optimizer.scenario.trace_spec import section_specs


def _fields(model: type[BaseModel]) -> tuple[list[str], list[str]]:
    required = [n for n, f in model.model_fields.items() if f.is_required()]
    optional = [n for n in model.model_fields if n not in required]
    return required, optional


@dataclass
class RawScenario:
    """A scenario resolved to plain data (tables keyed by id) plus where each row came from."""

    data: dict
    origins: dict[tuple, Origin]
    path: Path
    warnings: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    override_flags: dict[str, str] = field(default_factory=dict)  # override → the flag it came from

    def overridden(self, error: ScenarioError) -> ScenarioError:
        """``error`` named after the override that set the value it is about, if one did: a
        value given with --set is the flag's fault, not the catalogue row's it landed in."""
        if not error.field:
            return error
        wanted = tuple(error.field.split("."))
        for item in reversed(self.overrides):
            path = tuple(item.partition("=")[0].split("."))
            above = len(path) - len(wanted)  # the error names the row (or section), or the field's own line
            if above > 0 and path[above:] == wanted and \
                    error.origin in (self.origin(*path[:above]), self.origin(*path[:above + 1])):
                flag = self.override_flags.get(item, "--set")
                return ScenarioError(error.message, Origin(f"{flag} {shorten(item)}"))
        return error

    def origin(self, *key) -> Origin:
        for n in range(len(key), 0, -1):
            if key[:n] in self.origins:
                return self.origins[key[:n]]
        return Origin(str(self.path))

    def files(self) -> list[Path]:
        """Every file this scenario was read from (the YAML, its tables, its graph)."""
        names = {str(self.path)} | {o.file for o in self.origins.values()}
        graph = (self.data.get("network") or {}).get("graph") if isinstance(self.data.get("network"), dict) else None
        if isinstance(graph, str):
            names.add(str(self.path.parent / graph))
        return sorted(Path(n) for n in names if Path(n).is_file())

    def canonical_json(self) -> str:
        return json.dumps(self.data, sort_keys=True, separators=(",", ":"), default=str)

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def _read_table_csv(spec: TableSpec, path: Path, warnings: list[str]) -> list[Row]:
    required, optional = _fields(spec.model)
    table = read_csv(path, required, optional)
    warnings.extend(table.warnings)
    defaulted = {n for n in optional if spec.model.model_fields[n].default is not None}
    for row in table.rows:
        # an empty cell of a field with a default takes the default (price_multiplier 1, …)
        row.values = {k: v for k, v in row.values.items() if v is not None or k not in defaulted}
        row.origin = Origin(row.origin.file, row.origin.line, spec.label(row.values))
    return table.rows


def _is_id(value) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _item_line(items, i: int) -> int | None:
    """Line of item ``i`` of a YAML list (else of the list)."""
    lines = getattr(items, "lines", [])
    return lines[i] if i < len(lines) else getattr(items, "line", None)


def _key_line(mapping, key) -> int | None:
    """Line of ``key`` in a YAML mapping (else of the mapping)."""
    return getattr(mapping, "key_lines", {}).get(key) or getattr(mapping, "line", None)


def _line(value, default=None):
    return getattr(value, "line", None) or default


def _inline_rows(spec: TableSpec, items, yaml_path: Path, where: str, line: int | None = None) -> list[Row]:
    if not isinstance(items, list):
        raise ScenarioError(f"{where} should be a list of rows (mappings of fields), got {items!r}",
                            Origin(str(yaml_path), _line(items, line)), field=where)
    rows = []
    for i, item in enumerate(items):
        line = getattr(item, "line", None) or _item_line(items, i)
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}: row {i + 1} should be a mapping of fields, got {item!r}",
                                Origin(str(yaml_path), line))
        rows.append(Row(dict(item), Origin(str(yaml_path), line, spec.label(item))))
    return rows


def _resolve_table(spec: TableSpec, value, yaml_path: Path, catalogue: Path, warnings: list[str],
                   line: int | None = None) -> list[Row]:
    """Apply the table forms described in the module docstring; returns rows with origins."""
    base_dir = yaml_path.parent
    catalogue_file = catalogue / spec.file
    if value is None and spec.optional and not catalogue_file.exists():
        return []  # a catalogue folder written before the table existed
    if value is None:
        return _read_table_csv(spec, catalogue_file, warnings)
    if isinstance(value, str):
        return _read_table_csv(spec, base_dir / value, warnings)
    if isinstance(value, list):
        if all(_is_id(v) for v in value):
            value = LineDict(ids=value)
            value.line = _line(value["ids"])
        elif any(_is_id(v) for v in value) or not any(isinstance(v, dict) for v in value):
            i, bad = next((i, v) for i, v in enumerate(value) if not _is_id(v))
            raise ScenarioError(
                f"'{spec.name}' should be a list of ids (names) or a list of rows (mappings of fields); "
                f"item {i + 1} is {bad!r}{yaml_bool_hint(bad)}", Origin(str(yaml_path), _item_line(value, i) or line), field=spec.name)
        else:
            return _inline_rows(spec, value, yaml_path, spec.name)
    if not isinstance(value, dict):
        raise ScenarioError(
            f"'{spec.name}' should be a CSV path, a list of ids or rows, or a mapping with csv/ids/rows/patch; "
            f"got {value!r}", Origin(str(yaml_path), _line(value, line)), field=spec.name,
        )
    allowed = {"csv", "ids", "rows", "patch", "provider"} if spec.name == "prices" else {"csv", "ids", "rows", "patch"}
    for k in value:
        if k not in allowed:
            raise ScenarioError(
                f"unknown key '{k}' in table '{spec.name}' (expected {', '.join(sorted(allowed))})",
                Origin(str(yaml_path), _key_line(value, k)), field=spec.name,
            )
    for k, kinds, expected in (("csv", str, "a CSV path"), ("ids", list, "a list of ids"),
                               ("patch", dict, "a mapping id → {field: value}"), ("provider", str, "a provider name")):
        if k in value and not isinstance(value[k], kinds):
            raise ScenarioError(f"expected {expected}, got {value[k]!r}", Origin(str(yaml_path), _key_line(value, k)),
                                field=f"{spec.name}.{k}")
    rows = _read_table_csv(spec, base_dir / value["csv"] if "csv" in value else catalogue_file, warnings)
    if "ids" in value:
        for i in value["ids"]:
            if not _is_id(i):
                raise ScenarioError(f"expected a list of ids, found {i!r}", Origin(str(yaml_path), _line(value["ids"], value.line)),
                                    field=f"{spec.name}.ids")
        wanted = [str(i) for i in value["ids"]]
        present = {r.values.get(spec.key[0]) for r in rows}
        item_lines = getattr(value["ids"], "lines", [])
        for n, i in enumerate(wanted):
            if i not in present:
                line = item_lines[n] if n < len(item_lines) else getattr(value["ids"], "line", None) or value.line
                raise ScenarioError(
                    unknown_id_message(spec.name.rstrip("s"), i, present),
                    Origin(str(yaml_path), line),
                    field=f"{spec.name}.ids",
                )
        rows = [r for r in rows if r.values.get(spec.key[0]) in set(wanted)]
    if "rows" in value:
        extra = _inline_rows(spec, value["rows"], yaml_path, f"{spec.name}.rows", _line(value))
        keys = {tuple(r.values.get(k) for k in spec.key) for r in extra}
        rows = [r for r in rows if tuple(r.values.get(k) for k in spec.key) not in keys] + extra
    if "patch" in value:
        rows = _patch_rows(spec, rows, value["patch"], yaml_path, value.get("provider", "reference"))
    return rows


def _patch_rows(spec: TableSpec, rows: list[Row], patch, yaml_path: Path, provider: str = "reference") -> list[Row]:
    if spec.name == "prices":  # keyed by gpu: patch the chosen provider's row, not another's
        by_key = {r.values.get("gpu"): r for r in rows if r.values.get("provider") == provider}
    else:
        by_key = {r.values.get(spec.key[0]): r for r in rows}
    for key, fields in patch.items():
        if not isinstance(fields, dict):
            raise ScenarioError(f"the patch of '{key}' should be a mapping of fields to new values, got {fields!r}",
                                Origin(str(yaml_path), _key_line(patch, key)), field=f"{spec.name}.patch")
        if key not in by_key:
            raise ScenarioError(
                unknown_id_message(spec.name.rstrip("s"), key, by_key),
                Origin(str(yaml_path), getattr(patch, "line", None)),
                field=f"{spec.name}.patch",
            )
        row = by_key[key]
        row.values = {**row.values, **dict(fields)}
        row.origin = Origin(str(yaml_path), getattr(fields, "line", None), spec.label(row.values) + " (patched)")
    return rows


def _key_rows(spec: TableSpec, rows: list[Row], origins: dict) -> dict:
    """Rows → nested dict keyed by the table key; a duplicate key is an error."""
    out: dict = {}
    for row in rows:
        key = tuple(row.values.get(k) for k in spec.key)
        if any(k is None or k == "" for k in key):
            raise ScenarioError(f"missing key {'/'.join(spec.key)}", row.origin, field=spec.key[0])
        key = tuple(str(k) for k in key)
        path = (spec.name, *key) if spec.name != "prices" else ("prices", key[1])
        if path in origins and origins[path] is not row.origin:
            raise ScenarioError(
                f"duplicate {'/'.join(spec.key)} {'/'.join(key)} (first at {origins[path].describe()})",
                row.origin,
                field=spec.key[0],
            )
        origins[path] = row.origin
        node = out
        for k in path[1:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = dict(row.values)
    return _sorted_by_key(out)


def _sorted_by_key(tree: dict) -> dict:
    """Tables keyed in sorted order (a row, whose values are not mappings, is left as it is),
    so that the order rows were written in never changes a plan."""
    if tree and all(isinstance(v, dict) for v in tree.values()):
        return {k: _sorted_by_key(v) for k, v in sorted(tree.items())}
    return tree


def _read_diurnal(value, yaml_path: Path, catalogue: Path, origins: dict, warnings: list[str],
                  line: int | None = None) -> dict:
    """Diurnal profiles: CSV (profile, hour, multiplier) or a mapping profile → 24 values."""
    if isinstance(value, dict):
        for name, values in value.items():
            origin = Origin(str(yaml_path), _line(values, _key_line(value, name)), f"profile '{name}'")
            if not isinstance(values, list):
                raise ScenarioError(f"expected a list of 24 hourly multipliers, got {values!r}", origin)
            origins[("diurnal", str(name))] = origin
        return {str(k): list(v) for k, v in value.items()}
    if value is not None and not isinstance(value, str):
        raise ScenarioError("'diurnal' should be a CSV path (profile, hour, multiplier) or a mapping profile → "
                            f"24 multipliers, got {value!r}", Origin(str(yaml_path), _line(value, line)), field="diurnal")
    path = catalogue / DIURNAL_FILE if value is None else yaml_path.parent / value
    table = read_csv(path, ["profile", "hour", "multiplier"], ["source", "as_of", "assumed_fields"])
    warnings.extend(table.warnings)
    profiles: dict[str, list] = {}
    for row in table.rows:
        name = row.values["profile"]
        origins.setdefault(("diurnal", name), Origin(str(path), row.origin.line, f"profile '{name}'"))
        try:
            hour = int(row.values["hour"])
            mult = float(row.values["multiplier"])
        except (TypeError, ValueError):
            raise ScenarioError("expected an integer hour 0–23 and a number multiplier", row.origin) from None
        if not 0 <= hour <= 23 or not math.isfinite(mult) or mult < 0:
            raise ScenarioError(f"expected hour 0–23 and multiplier ≥ 0, got {hour}, {mult}", row.origin)
        if profiles.get(name, [None] * 24)[hour] is not None:
            raise ScenarioError(f"profile '{name}' gives hour {hour} twice; expected one row per hour",
                                row.origin, field="hour")
        profiles.setdefault(name, [None] * 24)[hour] = mult
    return profiles


def _read_rows_section(value, yaml_path: Path, name: str, warnings: list[str], line: int | None = None,
                       section: str = "demand") -> list | None:
    """demand.table / demand.mix / fleet.contracts given as a CSV path or inline rows → list of dicts."""
    if value is None:
        return None
    if isinstance(value, str):
        model = FleetRow if section == "fleet" else DemandRow if name == "table" else MixRow
        required, optional = _fields(model)
        table = read_csv(yaml_path.parent / value, required, optional)
        warnings.extend(table.warnings)
        return [dict(r.values, _origin=r.origin) for r in table.rows]
    if isinstance(value, list):
        for i, v in enumerate(value):
            if not isinstance(v, dict):
                raise ScenarioError(f"{section}.{name}: row {i + 1} should be a mapping of fields, got {v!r}",
                                    Origin(str(yaml_path), _item_line(value, i) or line), field=f"{section}.{name}")
        return [dict(v, _origin=Origin(str(yaml_path), getattr(v, "line", None), f"{section}.{name} row {i + 1}"))
                for i, v in enumerate(value)]
    raise ScenarioError(f"{section}.{name} should be a CSV path or a list of rows, got {value!r}",
                        Origin(str(yaml_path), _line(value, line)), field=f"{section}.{name}")


def _section_files(data: dict, yaml_path: Path, origins: dict) -> None:
    """Section fields naming files relative to the scenario."""
    graph = data["network"].get("graph")
    if isinstance(graph, str) and graph:
        # recorded absolute, so that a plan folder's scenario.json replans from anywhere
        data["network"]["graph"] = str((yaml_path.parent / graph).resolve())
    if "reuse" in data["kv_cache"]:  # a kv_reuse.csv of `fleetplan demand`, recorded by its content
        data["kv_cache"] = inline_reuse_file(data["kv_cache"], yaml_path, data["workloads"],
                                             origins[("kv_cache", "reuse")])


def load_raw(path: str | Path | None = None) -> RawScenario:
    """Read a scenario file (default: the embedded reference scenario) into plain data."""
    yaml_path = scenario_path(path)
    doc = read_yaml(yaml_path)
    for key in doc:
        if key not in TOP_LEVEL:
            raise ScenarioError(
                unknown_id_message("scenario section", key, TOP_LEVEL), Origin(str(yaml_path), _key_line(doc, key))
            )
    if "traces" in doc:  # the request logs the demand was derived from (`fleetplan demand`): checked, not planned
        section_specs(doc["traces"], yaml_path)
    catalogue = DATA_DIR
    if doc.get("catalogue"):
        catalogue = yaml_path.parent / str(doc["catalogue"])
        if not isinstance(doc["catalogue"], str) or not catalogue.is_dir():
            raise ScenarioError(f"expected a folder of catalogue CSVs (accelerators.csv, …) relative to the scenario; "
                                f"{catalogue} is not one", Origin(str(yaml_path), _key_line(doc, "catalogue")),
                                field="catalogue")
    warnings: list[str] = []
    origins: dict[tuple, Origin] = {}
    for key in ("name", "description"):
        if doc.get(key) is not None and (isinstance(doc[key], (bool, dict, list))):
            raise ScenarioError(f"expected text, got {doc[key]!r}{yaml_bool_hint(doc[key])}",
                                Origin(str(yaml_path), _key_line(doc, key)), field=key)
    data: dict = {"name": str(doc.get("name") or yaml_path.stem), "description": str(doc.get("description") or "")}

    for name, spec in TABLES.items():
        rows = _resolve_table(spec, doc.get(name), yaml_path, catalogue, warnings, _key_line(doc, name))
        for row in rows:  # key fields are names: a list or a mapping there is a slip
            for k in spec.key:
                if row.values.get(k) is not None and not _is_id(row.values[k]):
                    raise ScenarioError(f"expected a name, got {row.values[k]!r}{yaml_bool_hint(row.values[k])}",
                                        row.origin, field=k)
        if name == "prices":
            provider = (doc.get("prices") or {}).get("provider", "reference") if isinstance(doc.get("prices"), dict) else "reference"
            provider = str(provider)
            providers = {r.values.get("provider") for r in rows}
            if provider not in providers:
                raise ScenarioError(unknown_id_message("price provider", provider, providers),
                                    Origin(str(yaml_path), getattr(doc.get("prices"), "line", None)), field="prices.provider")
            rows = [r for r in rows if r.values.get("provider") == provider]
            data["price_provider"] = provider
        data[name] = _key_rows(spec, rows, origins)
    data["diurnal"] = _read_diurnal(doc.get("diurnal"), yaml_path, catalogue, origins, warnings, _key_line(doc, "diurnal"))
    data["calibration"] = calibration_data(doc.get("calibration"), yaml_path.parent,
                                           Origin(str(yaml_path), _key_line(doc, "calibration")), field="calibration")

    for name in SECTIONS:
        section = doc.get(name) or LineDict()
        if not isinstance(section, dict):
            raise ScenarioError(f"section '{name}' should be a mapping of fields, got {section!r}",
                                Origin(str(yaml_path), _key_line(doc, name)), field=name)
        origins[(name,)] = Origin(str(yaml_path), getattr(section, "line", None), f"section '{name}'")
        for key in section:  # an error names the line of the field itself
            origins[(name, str(key))] = Origin(str(yaml_path), _key_line(section, key), f"section '{name}'")
        data[name] = plain(section)
    _section_files(data, yaml_path, origins)
    demand = doc.get("demand") or {}
    for part in ("table", "mix"):
        rows = _read_rows_section(demand.get(part), yaml_path, part, warnings, _key_line(demand, part))
        if rows is not None:
            # canonical order, so that the order rows were written in changes neither hash nor plan
            rows.sort(key=lambda r: json.dumps(plain({k: v for k, v in r.items() if k != "_origin"}), sort_keys=True, default=str))
            for i, row in enumerate(rows):
                origins[("demand", part, i)] = row.pop("_origin")
            data["demand"][part] = [plain(r) for r in rows]
    fleet = doc.get("fleet") or {}
    if isinstance(fleet, dict):
        rows = _read_rows_section(fleet.get("contracts"), yaml_path, "contracts", warnings,
                                  _key_line(fleet, "contracts"), section="fleet")
        for i, row in enumerate(rows or []):
            origins[("fleet", "contracts", i)] = row.pop("_origin")
        if rows is not None:
            data["fleet"]["contracts"] = [{k: v for k, v in plain(r).items() if v not in ("", None)} for r in rows]
    _select_dependent_rows(data, origins, catalogue, warnings)
    return RawScenario(data, origins, yaml_path, warnings)


def table_rows(name: str, value, yaml_path: Path, catalogue: Path = DATA_DIR, warnings: list | None = None,
               origins: dict | None = None) -> dict:
    """One table written as a scenario file's section would be (None: the whole catalogue
    table), keyed like the resolved data (`load_raw`); ``origins`` receives where each row
    came from (a patched row: the patch's place)."""
    spec = TABLES[name]
    rows = _resolve_table(spec, value, yaml_path, catalogue, warnings if warnings is not None else [])
    if name == "prices":  # one provider's prices, as load_raw keeps
        provider = str(value.get("provider", "reference")) if isinstance(value, dict) else "reference"
        rows = [r for r in rows if r.values.get("provider") == provider]
    return _key_rows(spec, rows, origins if origins is not None else {})


def select_dependent_rows(data: dict, origins: dict, catalogue: Path = DATA_DIR) -> None:
    """`_select_dependent_rows` for callers outside this module (overrides)."""
    _select_dependent_rows(data, origins, catalogue)


def _select_dependent_rows(data: dict, origins: dict, catalogue: Path = DATA_DIR, warnings: list | None = None) -> None:
    """Keep supply and owned rows for the chosen sites and accelerators only. A row the planner
    wrote (not a catalogue row) that names no chosen site or accelerator is dropped with a
    warning: it is most often a typo."""
    sites, gpus = set(data["sites"]), set(data["accelerators"])
    if warnings is not None:
        shipped = catalogue.resolve()
        folder = cache(lambda file: Path(file).parent.resolve())  # resolved once per file, not once per row
        for path, origin in sorted(origins.items(), key=lambda x: str(x[0])):
            if path[0] not in ("supply", "owned", "prices", "grid_carbon") or folder(origin.file) == shipped:
                continue
            refs = [("site", path[1], sites)] if path[0] in ("supply", "grid_carbon") else []
            if path[0] != "grid_carbon":
                refs.append(("accelerator", path[-1], gpus))
            for kind, value, known in refs:
                if value not in known:
                    warnings.append(f"{origin.describe()}: {unknown_id_message(kind, value, known)} — the row is ignored")
                    break
    data["supply"] = {
        s: {g: row for g, row in per_gpu.items() if g in gpus} for s, per_gpu in data["supply"].items() if s in sites
    }
    data["owned"] = {g: row for g, row in data["owned"].items() if g in gpus}
    data["prices"] = {g: row for g, row in data["prices"].items() if g in gpus}
    data["grid_carbon"] = {s: row for s, row in data.get("grid_carbon", {}).items() if s in sites}


def plain(value):
    """LineDict/LineList → dict/list, recursively (JSON-able data)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    return value
