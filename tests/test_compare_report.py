"""Scenario comparison: the tables, compare.png and compare.html."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from optimizer.cli.main import main
from optimizer.commands.compare import compare
from optimizer.commands.report.compare_page import SECTIONS, gpus_data, money_data

TINY = Path(__file__).parent / "data" / "tiny.yaml"


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("plans")
    assert main(["plan", str(TINY), "--out", str(root / "a"), "--quiet", "--no-report"]) == 0
    assert main(["plan", str(TINY), "--out", str(root / "b"), "--quiet", "--no-report",
                 "--set", "workloads.code-completion.ttft_p99_ms=300"]) == 0
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
    page = (tmp_path / "compare.html").read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in page


def test_compare_page_figures_are_the_plans_figures(plans):
    a, b = plans
    cmp = compare([a, b])
    money = money_data(cmp).groupby("plan")["usd"].sum()
    for name, folder in (("a", a), ("b", b)):
        summary = pd.read_json(folder / "summary.json", typ="series")
        assert money[name] == pytest.approx(summary["total_cost_usd"], rel=1e-12)
        pools = pd.read_csv(folder / "pools.csv")
        pools = pools[pools["lost_site"].isna()]
        peak = (pools.replicas * pools.gpus_per_replica).groupby([pools.site, pools.gpu, pools.period, pools.hour]).sum()
        gpus = gpus_data(cmp)
        for (site, gpu), value in peak.groupby(level=["site", "gpu"]).max().items():
            row = gpus[(gpus.plan == name) & (gpus.site == site) & (gpus.gpu == gpu)]
            assert row["gpus"].item() == value
    changes = gpus_data(cmp)
    first = changes[changes.plan == "a"].set_index(["site", "gpu"])["gpus"]
    for r in changes[changes.plan == "b"].itertuples():
        assert r.change == r.gpus - first.get((r.site, r.gpu), 0)


def test_a_summary_without_its_optional_figures_compares_with_a_dash(plans, tmp_path, capsys):
    """A summary.json lacking figures a plan may omit (tokens per MW, $ per million tokens; the
    fuzz found compare crashing on it): compare shows "-" for them, the other figures as read."""
    import json
    import shutil

    a, _ = plans
    bare = tmp_path / "bare"
    shutil.copytree(a, bare)
    summary = json.loads((bare / "summary.json").read_text())
    for key in ("tokens_per_s_per_mw", "cost_per_million_tokens_usd"):
        del summary[key]
    (bare / "summary.json").write_text(json.dumps(summary))
    cmp = compare([a, bare])
    assert cmp.headline["bare"].isna()[["tokens_per_s_per_mw", "cost_per_million_tokens_usd"]].all()
    assert cmp.headline.loc["total_cost_usd", "bare"] == cmp.headline.loc["total_cost_usd", "a"]
    assert main(["compare", str(a), str(bare)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("tokens_per_s_per_mw"))
    assert line.split()[-1] == "-"
