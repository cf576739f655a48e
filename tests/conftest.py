"""Shared fixtures: the reference scenario, and small scenarios written to temporary files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from instances import brute_force, tiny_instance

from optimizer.commands import pipeline
from optimizer.scenario import load_scenario
from optimizer.solve.settings import FIRST_PLAN_STEPS, STEPS


def pytest_configure(config):
    config.addinivalue_line("markers", "default_steps: plans made through the pipeline run the default step list "
                            "(`optimizer.solve.settings.STEPS`), not the suite's first plans only")


@pytest.fixture(scope="session", autouse=True)
def first_plans_only():
    """Plans made through the pipeline in the suite stop at the first whole plan, as with
    ``--effort first``: a planner's default spends a minute refining, which would make the
    suite's hundred plans take an hour. Refining is tested on its own budgets
    (test_anytime.py, and test_mip_features.py through `solve`), and through the pipeline by
    the tests marked ``default_steps`` (`default_steps_when_marked`)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "STEPS", FIRST_PLAN_STEPS)
        yield


@pytest.fixture(autouse=True)
def default_steps_when_marked(request, first_plans_only):
    """A test marked ``@pytest.mark.default_steps`` plans with the pipeline's default steps."""
    if request.node.get_closest_marker("default_steps") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "STEPS", STEPS)
        yield


@pytest.fixture(scope="session")
def tiny():
    """tests/data/tiny.yaml as an instance: 2 metros, 2 sites, 2 accelerators, 2 slices."""
    return tiny_instance()


@pytest.fixture(scope="session")
def optimum(tiny):
    """The tiny instance's cheapest plan, by enumeration (`instances.brute_force`)."""
    return brute_force(tiny)


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
    from optimizer.cli.main import main
    from optimizer.commands.report import write_report

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
