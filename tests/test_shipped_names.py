"""What a planner should not have to copy a YAML file for: --set with a list or a table form,
curves and budget on any catalogue accelerator, and a shipped scenario's name wherever a
scenario path goes — also where the package is installed without its checkout."""

from __future__ import annotations

import json

import pytest

from optimizer.base import sources
from optimizer.base.errors import ScenarioError
from optimizer.cli.main import main
from optimizer.scenario import DATA_DIR, load_scenario
from optimizer.scenario.tables import scenario_path

US_EAST = DATA_DIR / "scenarios" / "us-east.yaml"


def test_set_selects_catalogue_rows_by_id_like_the_yaml():
    s, raw = load_scenario(US_EAST, ["accelerators=[h100-sxm,b200]"])
    assert set(s.accelerators) == {"h100-sxm", "b200"}
    assert {g for per_site in s.supply.values() for g in per_site} <= {"h100-sxm", "b200"}
    assert set(s.prices) == {"h100-sxm", "b200"}
    assert raw.overrides == ["accelerators=[h100-sxm,b200]"]


def test_set_may_widen_a_selection_and_patch_it():
    s, _ = load_scenario(US_EAST, ["accelerators={ids: [b200, mi325x], patch: {b200: {gpus_per_node: 4}}}"])
    assert set(s.accelerators) == {"b200", "mi325x"} and s.accelerators["b200"].gpus_per_node == 4
    assert "mi325x" in s.prices and any("mi325x" in per_site for per_site in s.supply.values())
    s, _ = load_scenario(US_EAST, ["sites=[ashburn]"])
    assert set(s.sites) == {"ashburn"} and set(s.supply) == {"ashburn"}


def test_set_of_an_unknown_id_names_the_flag_and_the_table():
    with pytest.raises(ScenarioError, match=r"--set accelerators=\[h100-sxm,h1000\].*accelerators.*h1000"):
        load_scenario(US_EAST, ["accelerators=[h100-sxm,h1000]"])


@pytest.mark.parametrize("argv", [
    ["curves", "--model", "qwen3-32b", "--gpu", "mi325x", "--json"],
    ["budget", "--metro", "chicago", "--site", "chicago", "--workload", "chat", "--gpu", "mi325x", "--json"],
])
def test_curves_and_budget_take_any_catalogue_accelerator_and_model(argv, capsys):
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)


def test_an_accelerator_in_no_catalogue_is_still_refused(capsys):
    assert main(["curves", "--model", "llama-3.1-8b", "--gpu", "mi999"]) == 2
    assert "mi325x" in capsys.readouterr().err  # the known list is the catalogue's


def test_a_shipped_scenario_name_works_where_a_path_does(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert scenario_path("us-east") == US_EAST == scenario_path("us-east.yaml")
    assert main(["validate", "us-east"]) == 0
    (tmp_path / "us-east").write_text("name: mine\n")  # a file of that name is the planner's, not ours
    assert scenario_path("us-east").resolve() == tmp_path / "us-east" and scenario_path(None).name == "reference.yaml"
    assert main(["validate", "no-such-scenario"]) == 2
    assert "no-such-scenario" in capsys.readouterr().err


def test_an_installed_package_finds_its_data_under_the_prefix(tmp_path, monkeypatch):
    installed = tmp_path / "share" / "fleetplan" / "data"
    installed.mkdir(parents=True)
    (installed / "accelerators.csv").write_text("id\n")
    monkeypatch.setattr(sources, "__file__", str(tmp_path / "site-packages" / "optimizer" / "sources.py"))
    monkeypatch.setattr(sources.sys, "prefix", str(tmp_path))
    assert sources.shipped_data_dir() == installed
