"""Resource bombs end quickly with a clear error (issue class 3): YAML alias expansion, tables
that point at devices, folders or huge files, too many rows, sweeps with a misspelt key or
too many runs. Each limit is named in the message with the variable that raises it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from small import SMALL
from tree import changes, snapshot

from optimizer.cli.main import main
from optimizer.geography.demand import build_demand, build_slices, total_per_slice
from optimizer.scenario import load_scenario

TINY = Path(__file__).parent / "data" / "tiny.yaml"


def one_line_error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _laughs(levels: int, width: int = 10) -> str:
    lines = ["name: laughs", 'a0: &a0 ["lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_expansion_is_capped(tmp_path, capsys):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_laughs(9))  # 10^8 values in under 1 KB
    assert bomb.stat().st_size < 1024
    err = one_line_error(["validate", str(bomb)], capsys)
    assert "bomb.yaml" in err and "FLEETPLAN_MAX_YAML_VALUES" in err and "1,000,000" in err


def test_the_alias_limit_can_be_raised(tmp_path, capsys, monkeypatch):
    doc = tmp_path / "s.yaml"
    doc.write_text(_laughs(5) + "\n" + yaml.safe_dump({"metros": ["chicago"], "sites": ["chicago"]}))
    monkeypatch.setenv("FLEETPLAN_MAX_YAML_VALUES", "100")
    assert "FLEETPLAN_MAX_YAML_VALUES" in one_line_error(["validate", str(doc)], capsys)
    monkeypatch.setenv("FLEETPLAN_MAX_YAML_VALUES", "1000000")
    err = one_line_error(["validate", str(doc)], capsys)  # read now; refused for its unknown sections instead
    assert "unknown scenario section 'a0'" in err


def test_a_looping_alias_is_refused(tmp_path, capsys):
    doc = tmp_path / "loop.yaml"
    doc.write_text("name: loop\nx: &x [1, *x]\n")
    err = one_line_error(["validate", str(doc)], capsys)
    assert "loop.yaml" in err


def test_an_alias_bomb_in_a_set_value_is_capped(capsys, tmp_path):
    bomb = "{" + _laughs(9).replace("\n", ", ").replace("name: laughs, ", "").rstrip(", ") + "}"
    err = one_line_error(["plan", str(TINY), "--set", f"serving.tier_rtt_ms={bomb}", "--out", str(tmp_path / "p")],
                         capsys)
    assert "--set serving.tier_rtt_ms=" in err and "FLEETPLAN_MAX_YAML_VALUES" in err
    assert len(err) < 400  # the value is shortened in the message


@pytest.mark.parametrize("target,says", [("/dev/zero", "not a regular file"), ("/dev/null", "not a regular file"),
                                         (".", "folder")])
def test_a_table_pointing_at_a_device_or_folder_is_refused(write_scenario, capsys, target, says):
    path = write_scenario({**SMALL, "metros": target})
    err = one_line_error(["validate", str(path)], capsys)
    assert says in err


def test_a_huge_table_file_is_refused_before_reading(write_scenario, tmp_path, capsys, monkeypatch):
    big = tmp_path / "metros.csv"
    with open(big, "wb") as f:
        f.truncate(300 * 1024 * 1024)  # sparse: 300 MB that take no disk
    path = write_scenario({**SMALL, "metros": "metros.csv"})
    err = one_line_error(["validate", str(path)], capsys)
    assert "300 MB" in err and "256" in err and "FLEETPLAN_MAX_INPUT_MB" in err
    small = tmp_path / "small.csv"
    small.write_text("id,name\n" + "x,y\n" * 400_000)
    monkeypatch.setenv("FLEETPLAN_MAX_INPUT_MB", "1")
    path = write_scenario({**SMALL, "metros": "small.csv"})
    assert "FLEETPLAN_MAX_INPUT_MB" in one_line_error(["validate", str(path)], capsys)


def test_row_limit(write_scenario, tmp_path, capsys, monkeypatch):
    rows = "\n".join(f"m{i},M{i},41.8,-87.7,-6,1000" for i in range(60))
    (tmp_path / "metros.csv").write_text("id,name,lat,lon,utc_offset_hours,population\n" + rows + "\n")
    path = write_scenario({**SMALL, "metros": "metros.csv"})
    monkeypatch.setenv("FLEETPLAN_MAX_ROWS", "50")  # the shipped tables read before metros have fewer
    err = one_line_error(["validate", str(path)], capsys)
    assert "metros.csv, line 52" in err and "FLEETPLAN_MAX_ROWS" in err and "50 rows" in err


def test_a_bad_limit_setting_is_named(write_scenario, capsys, monkeypatch):
    monkeypatch.setenv("FLEETPLAN_MAX_ROWS", "many")
    err = one_line_error(["validate", str(write_scenario(SMALL))], capsys)
    assert "FLEETPLAN_MAX_ROWS" in err and "'many'" in err


def test_a_large_sweep_with_a_misspelt_key_stops_before_any_run(tmp_path, capsys, monkeypatch):
    import optimizer.commands.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "_execute", lambda *a, **k: pytest.fail("a run started"))
    before = snapshot(tmp_path)
    err = one_line_error(["sweep", str(TINY), "--vary", "demand.scale=1:100:1", "--vary",
                          "workloads.code-completion.ttft_p99_msec=100:1000:10", "--out", str(tmp_path / "s"),
                          "--quiet"], capsys)
    assert "--vary workloads.code-completion.ttft_p99_msec=" in err and "did you mean ttft_p99_ms" in err
    assert changes(before, snapshot(tmp_path)) == []


def test_a_sweep_value_out_of_range_stops_before_any_run(tmp_path, capsys, monkeypatch):
    import optimizer.commands.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "_execute", lambda *a, **k: pytest.fail("a run started"))
    err = one_line_error(["sweep", str(TINY), "--vary", "serving.decode_mbu=0.5,0.7,1.5", "--out",
                          str(tmp_path / "s"), "--quiet"], capsys)
    assert "--vary serving.decode_mbu=1.5" in err


def test_sweep_run_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FLEETPLAN_MAX_SWEEP_RUNS", "5")
    err = one_line_error(["sweep", str(TINY), "--vary", "demand.scale=1,2,3", "--vary", "policy.mip_gap=0.01,0.02",
                          "--out", str(tmp_path / "s"), "--quiet"], capsys)
    assert "6 runs" in err and "FLEETPLAN_MAX_SWEEP_RUNS" in err
    monkeypatch.delenv("FLEETPLAN_MAX_SWEEP_RUNS")
    err = one_line_error(["sweep", str(TINY), "--vary", "demand.scale=0:1e9:1", "--out", str(tmp_path / "s"),
                          "--quiet"], capsys)
    assert "1,000,000,001 values" in err


def test_slice_totals_of_the_demand_check_match_the_long_table():
    """The pre-flight demand check sums metros of one UTC offset first (so a catalogue of any
    size costs one profile per offset); it must equal the long table it replaces."""
    for path in (None, Path(__file__).parent.parent / "data" / "scenarios" / "us-east.yaml", TINY):
        s, _ = load_scenario(path)
        slices = build_slices(s)
        long = build_demand(s, slices).groupby("slice")["requests_per_s"].sum().reindex(slices.index, fill_value=0.0)
        np.testing.assert_allclose(total_per_slice(s, slices), long.to_numpy(), rtol=1e-12)


def test_a_large_catalogue_validates(tmp_path, capsys):
    """50,000 metros (the benchmark `benchmarks/validate_large.py` times 500,000)."""
    rng = np.random.default_rng(1)
    lines = ["id,name,lat,lon,utc_offset_hours,population", "chicago,Chicago,41.8373,-87.6862,-6,8604203"]
    lines += [f"m{i},M{i},{lat:.3f},{lon:.3f},{off},{pop}" for i, (lat, lon, off, pop) in enumerate(zip(
        rng.uniform(-60, 60, 50_000), rng.uniform(-170, 170, 50_000), rng.integers(-10, 12, 50_000),
        rng.integers(1_000, 10_000_000, 50_000)))]
    (tmp_path / "metros.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "s.yaml").write_text("name: big\nmetros: metros.csv\nsites: [chicago]\nworkloads: [chat]\n")
    assert main(["validate", str(tmp_path / "s.yaml")]) == 0
    assert "50001 metros" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["metros.csv", "s.yaml"]
