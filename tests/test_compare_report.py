"""Scenario comparison and the HTML report (rendered in headless Chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from optimizer.cli import main
from optimizer.compare import compare
from optimizer.report import SECTIONS

TINY = Path(__file__).parent / "data" / "tiny.yaml"


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("plans")
    assert main(["plan", str(TINY), "--out", str(root / "a"), "--quiet"]) == 0
    assert main(["plan", str(TINY), "--out", str(root / "b"), "--quiet",
                 "--set", "workloads.code-completion.ttft_p99_ms=600"]) == 0
    return root / "a", root / "b"


def test_compare_a_plan_with_itself_shows_no_differences(plans, capsys):
    a, _ = plans
    cmp = compare([a, a])
    assert cmp.identical
    assert cmp.routing_changes.empty
    assert main(["compare", str(a), str(a)]) == 0
    assert "no differences" in capsys.readouterr().out


def test_compare_two_plans_lists_what_changed(plans, tmp_path, capsys):
    a, b = plans
    cmp = compare([a, b])
    assert not cmp.identical
    assert cmp.headline.loc["total_cost_usd", "a"] != cmp.headline.loc["total_cost_usd", "b"]
    assert cmp.money.sum().round(6).to_dict() == pytest.approx(cmp.headline.loc["total_cost_usd"].to_dict())
    assert main(["compare", str(a), str(b), "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "compare.csv")
    assert set(table["plan"]) == {"a", "b"}
    assert (tmp_path / "compare.png").stat().st_size > 0
    assert "total_cost_usd" in capsys.readouterr().out


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_renders_in_headless_chromium(plans):
    browser = _chromium()
    if browser is None:
        if os.environ.get("FLEETPLAN_REQUIRE_BROWSER"):
            pytest.fail("headless Chromium is required here but not installed (apt-get install chromium)")
        pytest.skip("headless Chromium is not installed (.ci/run installs it)")
    a, _ = plans
    report = a / "report.html"
    assert report.exists()
    html = report.read_text()
    assert "http://" not in html and "https://" not in html  # opens offline: nothing to fetch
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", report.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
    assert 'data-rendered="ok"' in dom  # every embedded figure decoded
    for section in SECTIONS:
        assert f'<section id="{section}"' in dom, section
