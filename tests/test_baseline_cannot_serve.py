"""A baseline that cannot serve is not a baseline: on SMALL (3 metros, 2 sites, H100 and H200,
chat only) the hand-made plan cannot meet chat's objectives — no colocated H100 replica meets
them, and colocated H200 replicas meeting them carry so little that Ashburn would need ~3,000
nodes, six times what it can supply. The summary and the report say so, in those words, and
print no saving; where the baseline serves some workloads, the saving is over those only."""

from __future__ import annotations

import html
import json

import pytest
import yaml
from small import SMALL

from optimizer.cli.main import main
from optimizer.commands.report import charts
from optimizer.commands.report.folder import read_plan_folder
from optimizer.commands.report.opening import opening_html
from optimizer.results.summary import against_baseline


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    (root / "small.yaml").write_text(yaml.safe_dump(SMALL))
    return root


def test_the_small_scenario_says_the_baseline_cannot_serve_it(small_plan, capsys):
    out = small_plan / "plan"
    assert main(["plan", str(small_plan / "small.yaml"), "--out", str(out), "--effort", "first", "--no-report"]) == 0
    printed = capsys.readouterr().out
    said = [line.strip() for line in printed.splitlines() if "baseline" in line]
    assert len(said) == 1 and said[0].startswith("the hand-made baseline cannot serve chat: ")
    for words in ("on h100-sxm, no colocated replica on it meets chat's latency objectives",
                  "on h200-sxm, it needs", "nodes at ashburn at the peak hour (for new-york, washington",
                  "beyond the 500 the site can supply"):
        assert words in said[0], said[0]
    assert "saves" not in printed and "%/year" not in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["savings_vs_baseline"] is None and summary["baseline_cost_usd"] is None
    assert summary["baseline_comparison"] is None and summary["baseline_cost_usd_by_workload"] == {}
    assert summary["baseline_cannot_serve"]["chat"] in said[0]
    assert summary["unserved_fraction"] == 0  # the plan itself serves everything

    folder = read_plan_folder(out)
    opening = html.unescape(opening_html(folder))
    assert "The hand-made baseline cannot serve chat: on h100-sxm" in opening
    assert "less than the hand-made baseline" not in opening
    assert "saved: the hand-made baseline cannot serve it" in opening
    chart = charts.cost_per_token(folder)
    assert "hand-made baseline" not in set(chart.data["measure"])
    assert chart.note == "The hand-made baseline cannot serve chat: it has no cost to compare there."


def test_a_saving_is_over_the_workloads_both_serve_in_full():
    plan = {"chat": 60.0, "code": 30.0, "rag": 10.0}
    base = {"chat": 100.0, "rag": 40.0}  # code: the baseline cannot serve it
    assert against_baseline(plan, base, unserved=set()) == {
        "savings_vs_baseline": pytest.approx(1 - 70 / 140),
        "baseline_comparison": {"workloads": ["chat", "rag"], "baseline_cost_usd": 140.0, "plan_cost_usd": 70.0}}
    # a workload the plan leaves partly unserved is not compared either
    assert against_baseline(plan, base, unserved={"rag"})["baseline_comparison"]["workloads"] == ["chat"]
    assert against_baseline(plan, {}, unserved=set()) == {"savings_vs_baseline": None, "baseline_comparison": None}
