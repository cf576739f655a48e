"""Reading scenario files: YAML that remembers line numbers, CSV tables that remember rows.

Every row that leaves this module carries an `Origin` (file, line, label) so a validation
error later can name exactly where the bad value was written.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from optimizer.errors import Origin, ScenarioError


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


def read_yaml(path: Path) -> LineDict:
    """Load a YAML mapping; a syntax error names the file, line and column."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"cannot read the file: {exc.strerror}", Origin(str(path))) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(_not_utf8(exc, data), Origin(str(path), _line_at(data, exc.start))) from None
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
        data = LineDict()
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping of scenario sections at the top level", Origin(str(path), 1))
    return data


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
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"cannot read the CSV file: {exc.strerror}", Origin(str(path))) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScenarioError(_not_utf8(exc, data), Origin(str(path), _line_at(data, exc.start))) from None
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
    if missing:
        raise ScenarioError(
            f"missing required column(s) {', '.join(missing)}; the header has {', '.join(header)}",
            Origin(str(path), 1),
        )
    known = set(required) | set(optional)
    warnings = [
        f"{path}: column '{c}' is not a known field and is ignored" for c in header if c not in known
    ]
    rows = []
    for line_no, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            raise ScenarioError(
                f"expected {len(header)} cells like the header, found {len(cells)}", Origin(str(path), line_no)
            )
        values = {h: (c.strip() or None) for h, c in zip(header, cells) if h in known}
        rows.append(Row(values, Origin(str(path), line_no)))
    return CsvTable(rows, header, path, warnings)
