"""Sizes of the library's code: no module of optimizer/ or formulations/ over 500 lines, no
function (or method) over 80 lines, counted from its ``def`` to its last line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
FILES = sorted(p for package in ("optimizer", "formulations") for p in (ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_module_at_most_500_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines; split it by concern (at most {MAX_MODULE_LINES})"


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_functions_at_most_80_lines(path):
    long = [f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{_name(path)}: functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(long)


def test_the_sizes_see_the_library():
    assert len(FILES) > 100 and any(p.parts[-2] == "formulations" for p in FILES)
