"""Outputs never destroy anything fleetplan did not write (issue class 1).

Every refusal is checked for its exit code (2), for a message that names the flag and the
path, for the solve never starting, and for the folder tree being exactly as it was."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from tree import changes, snapshot

import optimizer.commands.pipeline as pipeline_module
import optimizer.folder.write as write_module
from optimizer.base.outputs import Terminated, terminate_as_interrupt
from optimizer.cli.main import main

TINY = Path(__file__).parent / "data" / "tiny.yaml"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A user's working folder holding a scenario and notes, as the current directory."""
    root = tmp_path / "work"
    root.mkdir()
    shutil.copy(TINY, root / "tiny.yaml")
    (root / "notes.md").write_text("my notes\n")
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def no_solve(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the solve started although the output target is refused")

    monkeypatch.setattr(pipeline_module, "solve", refuse)


@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "p"
    assert main(["plan", str(TINY), "--out", str(out), "--quiet", "--no-report"]) == 0
    return out


@contextmanager
def read_only(path: Path):
    """``path`` unwritable — for root too (an immutable attribute), else by permissions."""
    if os.geteuid() == 0:
        done = shutil.which("chattr") and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
        undo = ["chattr", "-i", str(path)]
    else:
        os.chmod(path, 0o555)
        done, undo = True, None
    try:
        probe = path / ".probe"
        try:
            probe.write_text("x")
            probe.unlink()
            pytest.skip("cannot make a folder read-only here")
        except OSError:
            pass
        if not done:
            pytest.skip("cannot make a folder read-only here")
        yield path
    finally:
        if undo:
            subprocess.run(undo, check=False)
        else:
            os.chmod(path, 0o755)


def refused(argv, root: Path, capsys, *fragments) -> str:
    before = snapshot(root)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err
    assert changes(before, snapshot(root)) == []
    return err


@pytest.mark.parametrize("target,says", [
    (".", "current folder"),
    ("", "empty"),
    ("notes.md", "existing file"),
    ("..", "current folder"),
    ("/", "root"),
])
def test_plan_refuses_targets_it_must_not_replace(work, no_solve, capsys, target, says):
    refused(["plan", "tiny.yaml", "--out", target, "--quiet"], work.parent, capsys, "--out", says)


def test_plan_refuses_the_folder_holding_its_scenario(work, no_solve, capsys):
    err = refused(["plan", str(work / "tiny.yaml"), "--out", str(work), "--quiet"], work.parent, capsys, "--out")
    assert "input of the run" in err or "current folder" in err
    sub = work / "scenarios"
    sub.mkdir()
    shutil.copy(TINY, sub / "s.yaml")
    err = refused(["plan", str(sub / "s.yaml"), "--out", str(sub), "--quiet"], work.parent, capsys, "--out")
    assert "input of the run" in err and "s.yaml" in err


def test_plan_refuses_the_home_folder(work, no_solve, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(work / "home"))
    (work / "home").mkdir()
    (work / "home" / ".bashrc").write_text("# mine\n")
    refused(["plan", "tiny.yaml", "--out", str(work / "home"), "--quiet"], work.parent, capsys, "home folder")


def test_plan_refuses_a_folder_that_is_not_a_plan(work, no_solve, capsys):
    (work / "data").mkdir()
    (work / "data" / "prices.csv").write_text("a,b\n1,2\n")
    refused(["plan", "tiny.yaml", "--out", "data", "--quiet"], work.parent, capsys, "--out data", "not a plan folder")


def test_plan_refuses_a_plan_folder_with_files_of_the_users(work, tiny_plan, no_solve, capsys):
    shutil.copytree(tiny_plan, work / "p")
    (work / "p" / "my-analysis.ipynb").write_text("{}")
    refused(["plan", "tiny.yaml", "--out", "p", "--quiet"], work.parent, capsys, "did not write", "my-analysis.ipynb")


def test_plan_refuses_a_path_below_a_file(work, no_solve, capsys):
    refused(["plan", "tiny.yaml", "--out", "notes.md/plan", "--quiet"], work.parent, capsys, "is a file")


def test_plan_checks_write_permission_before_the_solve(work, no_solve, capsys):
    locked = work / "locked"
    locked.mkdir()
    with read_only(locked):
        refused(["plan", "tiny.yaml", "--out", str(locked / "p"), "--quiet"], work.parent, capsys, "cannot write")


def test_plan_replaces_its_own_previous_plan_and_nothing_else(work, capsys):
    assert main(["plan", "tiny.yaml", "--out", "p", "--quiet", "--no-report"]) == 0
    first = (work / "p" / "summary.json").read_text()
    before = snapshot(work)
    assert main(["plan", "tiny.yaml", "--out", "p", "--quiet", "--no-report", "--set", "demand.scale=2"]) == 0
    assert (work / "p" / "summary.json").read_text() != first
    assert all(path.startswith("p") for path in changes(before, snapshot(work)))
    assert not [e for e in os.listdir(work) if e.startswith(".")]


def test_leftovers_of_a_killed_write_are_swept(work):
    dead = work / f".p.tmp-{2**22 + 12345}-abc"  # a pid no process has
    dead.mkdir()
    (dead / "summary.json").write_text("{}")
    assert main(["plan", "tiny.yaml", "--out", "p", "--quiet", "--no-report"]) == 0
    assert not dead.exists()


@pytest.mark.parametrize("flag,name,content,says", [
    ("--rtt-csv", "rtt.csv", "id,name\nx,y\n", "not a CSV with the header 'from,to,rtt_ms'"),
    ("--edges-csv", "edges.csv", "my,own,table\n", "header 'from,to,one_way_ms'"),
    ("--plot", "map.png", "not a picture", "not a PNG"),
    ("--graphml", "graph.graphml", "<xml/>", "not a GRAPHML"),
])
def test_network_exports_replace_only_their_own_kind(work, capsys, flag, name, content, says):
    (work / name).write_text(content)
    refused(["network", "tiny.yaml", flag, name], work.parent, capsys, flag, says)


def test_network_exports_refuse_folders_and_inputs(work, capsys):
    (work / "out").mkdir()
    refused(["network", "tiny.yaml", "--rtt-csv", "out"], work.parent, capsys, "--rtt-csv", "folder")
    refused(["network", "tiny.yaml", "--plot", "tiny.yaml"], work.parent, capsys, "--plot", "input of the run")
    refused(["network", "tiny.yaml", "--rtt-csv", "a.csv", "--edges-csv", "a.csv"], work.parent, capsys, "same file")


def test_network_exports_replace_their_previous_output(work, capsys):
    argv = ["network", "tiny.yaml", "--rtt-csv", "rtt.csv", "--edges-csv", "e.csv", "--plot", "m.png",
            "--graphml", "g.graphml"]
    assert main(argv) == 0
    assert main(argv) == 0
    assert (work / "rtt.csv").read_text().startswith("from,to,rtt_ms")


def test_curves_plot_refuses_a_file_that_is_not_a_png(work, capsys):
    refused(["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--plot", "notes.md"], work.parent, capsys,
            "--plot notes.md", "not a PNG")


def test_sweep_refuses_a_foreign_folder_before_any_run(work, capsys, monkeypatch):
    import optimizer.commands.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "_execute", lambda *a, **k: pytest.fail("a run started"))
    refused(["sweep", "tiny.yaml", "--vary", "demand.scale=1,2", "--out", ".", "--quiet"], work.parent, capsys,
            "--out")
    (work / "results").mkdir()
    (work / "results" / "keep.txt").write_text("x")
    refused(["sweep", "tiny.yaml", "--vary", "demand.scale=1,2", "--out", "results", "--quiet"], work.parent, capsys,
            "not a sweep folder")


def test_compare_refuses_to_write_into_a_plan_folder(work, tiny_plan, capsys):
    shutil.copytree(tiny_plan, work / "p")
    refused(["compare", "p", "p", "--out", "p"], work.parent, capsys, "--out p")


@pytest.mark.parametrize("command", [["verify", "--requests", "100"], ["operate"], ["stress", "--demand", "x1.1"],
                                     ["report"]])
def test_writes_into_a_read_only_plan_folder_are_refused_before_the_work(work, tiny_plan, capsys, monkeypatch, command):
    import optimizer.commands.operate
    import optimizer.commands.stress
    import optimizer.commands.verify

    for module, name in ((optimizer.commands.verify, "verify_plan"), (optimizer.commands.operate, "operate_plan"),
                         (optimizer.commands.stress, "stress")):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("the work started"))
    shutil.copytree(tiny_plan, work / "p")
    with read_only(work / "p"):
        refused([command[0], "p", *command[1:]], work.parent, capsys, "cannot write")


def test_interrupted_or_terminated_writes_leave_nothing(work, monkeypatch, capsys):
    for signal_like, code in ((KeyboardInterrupt, 130), (Terminated, 143)):
        def stop(*args, **kwargs):
            raise signal_like()

        monkeypatch.setattr(write_module, "_write_xlsx", stop)
        before = snapshot(work)
        assert main(["plan", "tiny.yaml", "--out", "p", "--quiet"]) == code
        assert changes(before, snapshot(work)) == []
    assert "terminated" in capsys.readouterr().err


def test_sigterm_becomes_an_interrupt_in_this_process():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler raises long before this ends
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the command's alone


def test_sigterm_during_a_solve_ends_quickly_and_leaves_nothing(tmp_path):
    """What `timeout`, CI and schedulers do: SIGTERM in the middle of the reference solve."""
    proc = subprocess.Popen([sys.executable, "-m", "optimizer.cli", "plan", "--out", str(tmp_path / "p")],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("model:"):  # built and handed to HiGHS: the solve is under way
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated" in err
    assert os.listdir(tmp_path) == []
