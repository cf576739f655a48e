"""Shared fixtures: the reference scenario, and small scenarios written to temporary files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from optimizer.scenario import load_scenario


@pytest.fixture(scope="session")
def reference():
    scenario, raw = load_scenario()
    return scenario, raw


@pytest.fixture
def write_scenario(tmp_path):
    """Write a scenario mapping (and optional CSV files) into a temp folder; return its path."""

    def write(doc: dict, files: dict[str, str] | None = None, name: str = "scenario.yaml") -> Path:
        for fname, text in (files or {}).items():
            (tmp_path / fname).write_text(text)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    return write
