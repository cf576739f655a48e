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


@pytest.fixture(scope="session")
def report_plan(tmp_path_factory):
    """tests/data/report.yaml planned (two sites of 4-GPU nodes, two workloads, on-demand
    nodes, a warm pool) with a calibration file fitted to the shipped example H100 table,
    then verified, stressed and operated, and its report written again with those results:
    the plan folder every report test reads."""
    from optimizer.cli import main
    from optimizer.report import write_report

    root = tmp_path_factory.mktemp("report")
    out, calibration = root / "plan", root / "h100.yaml"
    example = Path(__file__).parent.parent / "data" / "calibration" / "example_h100.csv"
    assert main(["calibrate", str(example), "--out", str(calibration)]) == 0
    assert main(["plan", str(Path(__file__).parent / "data" / "report.yaml"), "--out", str(out), "--quiet",
                 "--master", "--calibration", str(calibration)]) == 0
    assert main(["verify", str(out), "--requests", "300"]) in (0, 7)
    assert main(["stress", str(out), "--demand", "×1.2"]) in (0, 7)
    assert main(["operate", str(out)]) in (0, 7)
    write_report(out)
    return out
