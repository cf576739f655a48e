"""Every documented exit code of `fleetplan plan`, and nothing half-written on failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import optimizer.commands.pipeline as pipeline_module
import optimizer.folder.write as write_module
from optimizer.base.errors import NumericalTroubleError
from optimizer.cli.main import main
from optimizer.scenario import DATA_DIR

TINY = Path(__file__).parent / "data" / "tiny.yaml"
US_EAST = DATA_DIR / "scenarios" / "us-east.yaml"


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".")]


def test_0_optimal(tmp_path):
    assert main(["plan", str(TINY), "--out", str(tmp_path / "p"), "--quiet", "--no-report"]) == 0
    assert json.loads((tmp_path / "p" / "summary.json").read_text())["proven_within_gap"] is True


def test_2_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\naccelerators: [h100]\n")
    assert main(["plan", str(bad), "--out", str(tmp_path / "p"), "--quiet"]) == 2
    assert "unknown accelerator 'h100'" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_4_time_limit_with_a_plan_written_and_marked(tmp_path, capsys):
    out = tmp_path / "p"
    code = main(["plan", str(US_EAST), "--exact", "--time-limit", "8", "--allow-unserved", "--out", str(out), "--no-report"])
    assert code == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "time_limit" and summary["proven_within_gap"] is False
    assert summary["mip_gap"] > summary["mip_gap_target"]
    assert "stopped by the wall clock: this plan may differ on another machine" in capsys.readouterr().out


def test_5_time_limit_without_a_plan_writes_nothing(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["plan", str(US_EAST), "--exact", "--time-limit", "1", "--out", str(out), "--quiet"]) == 5
    assert not out.exists() and not _leftovers(tmp_path)
    assert "time limit" in capsys.readouterr().err


def test_6_numerical_trouble_writes_nothing(tmp_path, monkeypatch, capsys):
    def trouble(*args, **kwargs):
        raise NumericalTroubleError("HiGHS stopped with an error during the plan solve and no solution")

    monkeypatch.setattr(pipeline_module, "solve", trouble)
    out = tmp_path / "p"
    assert main(["plan", str(TINY), "--out", str(out), "--quiet"]) == 6
    assert not out.exists()
    assert "HiGHS stopped with an error" in capsys.readouterr().err


def test_130_interrupted_while_writing_leaves_nothing(tmp_path, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(write_module, "_write_xlsx", interrupt)
    out = tmp_path / "p"
    assert main(["plan", str(TINY), "--out", str(out), "--quiet"]) == 130
    assert not out.exists() and not _leftovers(tmp_path)


def test_130_interrupted_keeps_the_previous_plan(tmp_path, monkeypatch):
    out = tmp_path / "p"
    assert main(["plan", str(TINY), "--out", str(out), "--quiet", "--no-report"]) == 0
    before = (out / "summary.json").read_bytes()
    monkeypatch.setattr(write_module, "_write_xlsx", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert main(["plan", str(TINY), "--out", str(out), "--quiet", "--set", "demand.scale=2"]) == 130
    assert (out / "summary.json").read_bytes() == before
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("code,meaning", [(0, "success"), (2, "bad input"), (3, "infeasible"), (4, "time limit"),
                                         (5, "before any plan"), (6, "numerical trouble"), (7, "check failed"),
                                         (130, "interrupted"), (141, "pipe closed"), (143, "terminated")])
def test_exit_codes_are_documented(code, meaning):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith(f"| {code} |"))
    assert meaning in row.lower()
