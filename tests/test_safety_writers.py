"""More than one writer, and writers stopped half-way: two plans written to the same folder at
once end with one whole plan folder; `demand` and `calibrate` stopped by SIGTERM — while
writing, or between the renames that put their outputs in place — leave their whole output
or none, and nothing temporary."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import threading
from pathlib import Path

import pytest
import yaml
from small import SMALL

import optimizer.commands.traces.report as demand_report
from optimizer.base.outputs import DEMAND, replace_folder
from optimizer.cli.main import main
from optimizer.commands.calibrate import report as calibration_report
from optimizer.scenario.calibration.files import read_calibration

EXAMPLE = Path(__file__).resolve().parent.parent / "data" / "calibration" / "example_h100.csv"
PLAN_FILES = {"summary.json", "scenario.json", "procurement.csv", "nodes.csv", "pools.csv", "routing.csv", "slo.csv", "curves.csv",
              "plan.xlsx"}  # a plan folder without its report


def _temporaries(folder: Path) -> list[str]:
    return [e for e in os.listdir(folder) if ".tmp-" in e]


def _terminate(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)


def _terminate_before(real, name: str):
    """``real`` (a rename), with SIGTERM sent to this process just before its first call
    that moves ``name`` (a file or folder name) away or onto."""
    sent = []

    def call(source, destination, *args, **kwargs):
        if not sent and name in (Path(source).name, Path(destination).name):
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(source, destination, *args, **kwargs)

    return call


# ---------------------------------------------------------------------------- two writers


def _plan(scenario: Path, out: Path) -> None:
    os._exit(main(["plan", str(scenario), "--out", str(out), "--effort", "first", "--no-report", "--quiet"]))


def test_two_plans_written_to_one_folder_at_once_leave_one_whole_plan(tmp_path):
    # two `fleetplan plan` processes, forked from this one (already imported: no start-up to wait for)
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    fork = multiprocessing.get_context("fork")
    runs = [fork.Process(target=_plan, args=(scenario, tmp_path / "same")) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(timeout=120)
    assert [run.exitcode for run in runs] == [0, 0]
    assert set(os.listdir(tmp_path / "same")) == PLAN_FILES
    assert json.loads((tmp_path / "same" / "summary.json").read_text())["scenario"] == "small"
    assert sorted(os.listdir(tmp_path)) == ["same", "small.yaml"]  # no temporaries left


def test_concurrent_folder_swaps_each_land_whole(tmp_path):
    target = tmp_path / "out"
    failures = []

    def writer(n: int):
        for i in range(25):
            folder = tmp_path / f".new-{n}-{i}"
            folder.mkdir()
            for name in ("a", "b", "c"):
                (folder / name).write_text(f"{n}-{i}")
            try:
                replace_folder(folder, target)
            except Exception as exc:  # noqa: BLE001 — any failure is the finding
                failures.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    contents = {(target / name).read_text() for name in ("a", "b", "c")}
    assert sorted(os.listdir(target)) == ["a", "b", "c"] and len(contents) == 1  # one writer's folder, whole
    assert os.listdir(tmp_path) == ["out"]


# ---------------------------------------------------------------------------- demand


@pytest.fixture
def log(tmp_path) -> Path:
    """12 minutes of Poisson requests at 2/s: enough for lengths and burstiness."""
    rng = random.Random(1)
    t, rows = 1714557600.0, ["timestamp,prompt_tokens,completion_tokens"]
    for _ in range(1500):
        t += rng.expovariate(2.0)
        rows.append(f"{t:.3f},{rng.randint(100, 3000)},{rng.randint(10, 500)}")
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _demand(log: Path, out: Path) -> int:
    return main(["demand", "--from-trace", str(log), "--workload", "chat", "--metro", "new-york", "--out", str(out)])


def test_demand_terminated_while_writing_leaves_nothing(tmp_path, log, monkeypatch, capsys):
    monkeypatch.setattr(demand_report, "render", _terminate)
    assert _demand(log, tmp_path / "d") == 143
    assert "terminated" in capsys.readouterr().err
    assert not (tmp_path / "d").exists() and not _temporaries(tmp_path)


def test_demand_terminated_between_its_renames_leaves_a_whole_folder(tmp_path, log, monkeypatch):
    out = tmp_path / "d"
    assert _demand(log, out) == 0
    (out / "derived.json").write_text("{}")  # marks the previous output
    monkeypatch.setattr(os, "rename", _terminate_before(os.rename, "d"))  # the old folder moving away
    assert _demand(log, out) == 143
    assert set(os.listdir(out)) == DEMAND.files
    assert json.loads((out / "derived.json").read_text()), "the new folder, whole, is in place"
    assert not _temporaries(tmp_path)


# ---------------------------------------------------------------------------- calibrate


def _calibrate(tmp_path: Path) -> int:
    table = tmp_path.parent / f"{tmp_path.name}-table.csv"  # a few rows of the example: a quick fit
    table.write_text("\n".join(EXAMPLE.read_text().splitlines()[:6]) + "\n")
    return main(["calibrate", str(table), "--out", str(tmp_path / "h100.yaml"), "--plot", str(tmp_path / "h100.png")])


def test_calibrate_terminated_while_plotting_writes_neither_file(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration_report, "save_png", _terminate)
    assert _calibrate(tmp_path) == 143
    assert sorted(os.listdir(tmp_path)) == []


def test_calibrate_terminated_between_its_renames_writes_both_files(tmp_path, monkeypatch):
    (tmp_path / "h100.png").write_bytes(b"\x89PNG\r\n\x1a\n old")  # a previous plot, to be replaced
    monkeypatch.setattr(os, "replace", _terminate_before(os.replace, "h100.yaml"))  # the first of the two
    assert _calibrate(tmp_path) == 143
    assert sorted(os.listdir(tmp_path)) == ["h100.png", "h100.yaml"]
    assert read_calibration(tmp_path / "h100.yaml")[0]
    assert (tmp_path / "h100.png").stat().st_size > 1000


def test_calibrate_replaces_only_a_calibration_file(tmp_path, capsys):
    notes = tmp_path / "notes.yaml"
    notes.write_text("my: notes\n")
    assert main(["calibrate", str(EXAMPLE), "--out", str(notes)]) == 2
    assert "an existing file that is not a calibration file" in capsys.readouterr().err
    assert notes.read_text() == "my: notes\n"
