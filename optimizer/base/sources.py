"""Reading scenario files: YAML that remembers line numbers, CSV tables that remember rows.

Every row that leaves this module carries an `Origin` (file, line, label) so a validation
error later can name exactly where the bad value was written.

Limits, so that a mistaken path or a hostile file ends quickly with a clear error rather than
exhausting the machine (each names itself and the environment variable that raises it):
  FLEETPLAN_MAX_INPUT_MB     size of one input file (default 256 MB)
  FLEETPLAN_MAX_ROWS         rows of one table (default 2,000,000)
  FLEETPLAN_MAX_YAML_VALUES  values a YAML file holds once its aliases are expanded
                             (default 1,000,000; a few lines of nested aliases can mean billions)
  FLEETPLAN_MAX_SWEEP_RUNS   runs of one sweep (default 20,000)
Only regular files are read: a device, a pipe or a folder is refused before reading.
"""

from __future__ import annotations

import csv
import io
import os
import site
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from optimizer.base.errors import Origin, ScenarioError


def shipped_data_dir() -> Path:
    """The shipped catalogues and scenarios: ``data/`` of a checkout (an editable install
    reads it in place), else where a wheel puts its data files, ``<prefix>/share/fleetplan/data``
    (pyproject.toml's data-files), for the environment's prefix or the user's."""
    checkout = Path(__file__).resolve().parents[2] / "data"
    for folder in (checkout, *(Path(p) / "share" / "fleetplan" / "data" for p in (sys.prefix, site.getuserbase()))):
        if (folder / "accelerators.csv").is_file():
            return folder
    return checkout


class LineDict(dict):
    """A YAML mapping that knows the line it started on (1-based) and the line of each key."""

    line: int | None = None
    key_lines: dict = {}


class LineList(list):
    """A YAML sequence that knows the line it started on and the line of each item."""

    line: int | None = None
    lines: list[int] = []


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader, node):
    loader.flatten_mapping(node)
    out = LineDict()
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise ScenarioError(
                f"a mapping key must be a plain name, not a {type(key).__name__.removeprefix('Line').lower()}",
                Origin(loader.name, key_node.start_mark.line + 1),
            ) from None
        if key in out:
            raise ScenarioError(
                f"key '{key}' appears twice in one mapping (line {key_node.start_mark.line + 1})",
                Origin(loader.name, key_node.start_mark.line + 1),
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    out.line = node.start_mark.line + 1
    return out


def _construct_sequence(loader, node):
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
# dates stay text (ISO 8601, checked by the field that reads them): a scenario is recorded as JSON
_LineLoader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))


LIMITS = {
    "FLEETPLAN_MAX_INPUT_MB": (256, "MB in one input file"),
    "FLEETPLAN_MAX_ROWS": (2_000_000, "rows in one table"),
    "FLEETPLAN_MAX_YAML_VALUES": (1_000_000, "values in a YAML file once its aliases are expanded"),
    "FLEETPLAN_MAX_SWEEP_RUNS": (20_000, "runs in one sweep"),
}


def limit(name: str) -> int:
    """The current value of a limit (its environment variable, else the default)."""
    default, what = LIMITS[name]
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ScenarioError(f"expected a whole number of {what}, got {text!r}", Origin("environment"), field=name) from None
    if value <= 0:
        raise ScenarioError(f"expected a positive number of {what}, got {value}", Origin("environment"), field=name)
    return value


def over_limit(name: str, found: str) -> str:
    """The message for an input beyond a limit: which limit, and how to raise it."""
    default, what = LIMITS[name]
    return f"{found}: more than the limit of {limit(name):,} {what}; to allow more, set the environment variable {name}"


def read_bytes(path: Path, what: str = "file") -> bytes:
    """The bytes of a regular input file within the size limit; anything else is a clear error."""
    origin = Origin(str(path))
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ScenarioError(f"cannot read the {what}: {exc.strerror}", origin) from None
    if stat.S_ISDIR(info.st_mode):
        raise ScenarioError(f"this is a folder; expected a {what}", origin)
    if not stat.S_ISREG(info.st_mode):
        raise ScenarioError(f"this is not a regular file (a device or a pipe?); expected a {what}", origin)
    if info.st_size > limit("FLEETPLAN_MAX_INPUT_MB") * 1024 * 1024:
        raise ScenarioError(over_limit("FLEETPLAN_MAX_INPUT_MB", f"the {what} is {info.st_size / 2**20:,.0f} MB"), origin)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"cannot read the {what}: {exc.strerror}", origin) from None


def read_text(path: Path, what: str = "file", encoding: str = "utf-8-sig") -> str:
    """A regular input file as UTF-8 text; a file in another encoding is a clear error."""
    data = read_bytes(path, what)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ScenarioError(_not_utf8(exc, data), Origin(str(path), _line_at(data, exc.start))) from None


def check_expansion(data, origin: Origin) -> int:
    """How many values ``data`` holds once shared (aliased) parts are counted every time they
    appear — in linear time over the shared structure; stops at the limit."""
    top = limit("FLEETPLAN_MAX_YAML_VALUES")
    memo: dict[int, int] = {}

    def size(x) -> int:
        if not isinstance(x, (dict, list)):
            return 1
        key = id(x)
        if key in memo:
            if memo[key] < 0:
                raise ScenarioError("a YAML alias refers to the mapping or list it is part of (a loop); "
                                    "expected plain nested data", origin)
            return memo[key]
        memo[key] = -1
        items = list(x.items()) if isinstance(x, dict) else [(None, v) for v in x]
        total = 1
        for k, v in items:
            total += (size(k) if k is not None else 0) + size(v)
            if total > top:
                raise ScenarioError(over_limit("FLEETPLAN_MAX_YAML_VALUES", "its aliases expand too far"),
                                    origin)
        memo[key] = total
        return total

    try:
        return size(data)
    except RecursionError:
        raise ScenarioError("nested too deeply to read (expected a few levels of mappings and lists)", origin) from None


def read_yaml(path: Path) -> LineDict:
    """Load a YAML mapping; a syntax error names the file, line and column."""
    text = read_text(path, "YAML file", encoding="utf-8")
    loader = None
    try:
        loader = _LineLoader(text)  # checks that every character is printable
        loader.name = str(path)
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else None
        column = f", column {mark.column + 1}" if mark else ""
        raise ScenarioError(
            f"YAML syntax error{column}: {exc.problem or exc.context}", Origin(str(path), line)
        ) from exc
    except yaml.reader.ReaderError as exc:  # a control character: not a MarkedYAMLError
        line = text.count("\n", 0, exc.position) + 1
        raise ScenarioError(
            f"YAML syntax error: unacceptable character #x{exc.character:04x} (expected printable text)",
            Origin(str(path), line),
        ) from None
    except RecursionError:
        raise ScenarioError("YAML nested too deeply to read (expected a few levels of mappings and lists)",
                            Origin(str(path))) from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        raise ScenarioError("the file is empty (expected a YAML mapping: name, metros, sites, workloads, …)",
                            Origin(str(path)))
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping of scenario sections at the top level", Origin(str(path), 1))
    check_expansion(data, Origin(str(path)))
    return data


def _missing_columns(header: list[str], missing: list[str], known: set[str]) -> str:
    """What is wrong with a header that lacks required columns — without echoing a line that
    is not a header of this table (a wrong path can point at any file)."""
    if len(header) == 1 and ";" in header[0]:
        return ("the header is separated by ';' (a spreadsheet in a locale with decimal commas?); fleetplan reads "
                "comma-separated CSV with '.' as the decimal point — export it with ',' as the separator")
    if len(header) == 1 and "\t" in header[0]:
        return "the header is separated by tabs; fleetplan reads comma-separated CSV"
    if not any(h in known for h in header):
        return (f"this does not look like the expected table: its first line names none of its columns "
                f"(expected at least {', '.join(missing)})")
    shown = ", ".join(header) if len(", ".join(header)) <= 300 else ", ".join(header)[:297] + "…"
    return f"missing required column(s) {', '.join(missing)}; the header has {shown}"


def _line_at(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _not_utf8(exc: UnicodeDecodeError, data: bytes) -> str:
    line_start = data.rfind(b"\n", 0, exc.start) + 1
    return (f"the file is not UTF-8 text: byte 0x{data[exc.start]:02x} at column {exc.start - line_start + 1} "
            "(expected UTF-8; re-save the file as UTF-8)")


@dataclass
class Row:
    """One table row as read, before validation."""

    values: dict
    origin: Origin


@dataclass
class CsvTable:
    rows: list[Row]
    columns: list[str]
    path: Path
    warnings: list[str] = field(default_factory=list)


def read_csv(path: Path, required: list[str], optional: list[str]) -> CsvTable:
    """Read a CSV into rows of strings (empty cells become None).

    A missing required column is an error naming the file and the column; an extra unknown
    column is a warning (it is ignored).
    """
    text = read_text(path, "CSV file")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return _read_rows(reader, path, required, optional)
    except csv.Error as exc:
        raise ScenarioError(f"not a readable CSV file: {exc}", Origin(str(path), reader.line_num or None)) from None


def _read_rows(reader, path: Path, required: list[str], optional: list[str]) -> CsvTable:
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ScenarioError("the CSV file is empty (expected a header row)", Origin(str(path), 1)) from None
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:
        raise ScenarioError(f"column(s) {', '.join(twice)} appear more than once in the header; expected each once",
                            Origin(str(path), 1))
    missing = [c for c in required if c not in header]
    known = set(required) | set(optional)
    if missing:
        raise ScenarioError(_missing_columns(header, missing, known), Origin(str(path), 1))
    warnings = [
        f"{path}: column '{c}' is not a known field and is ignored" for c in header if c not in known
    ]
    rows = []
    most = limit("FLEETPLAN_MAX_ROWS")
    for line_no, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            hint = ""
            if len(cells) > len(header) and any(c.strip().isdigit() for c in cells):
                hint = " — are decimals written with a comma (1,5)? fleetplan reads '.' as the decimal point"
            raise ScenarioError(
                f"expected {len(header)} cells like the header, found {len(cells)}{hint}", Origin(str(path), line_no)
            )
        if len(rows) >= most:
            raise ScenarioError(over_limit("FLEETPLAN_MAX_ROWS", "the table has more rows"), Origin(str(path), line_no))
        values = {h: (c.strip() or None) for h, c in zip(header, cells) if h in known}
        rows.append(Row(values, Origin(str(path), line_no)))
    return CsvTable(rows, header, path, warnings)
