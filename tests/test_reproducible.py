"""The same input gives the same plan folder, byte for byte apart from timing fields — run
twice, and with tables written in another row order; --from-plan replans what a folder records."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from optimizer.cli import main
from optimizer.folder.write import TIMING_FIELDS

DATA = Path(__file__).parent / "data"


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        if path.name == "summary.json":
            summary = json.loads(data)
            for key in TIMING_FIELDS:
                summary.pop(key, None)
            data = json.dumps(summary, sort_keys=True).encode()
        out[path.name] = data
    return out


def _plan(scenario: Path, out: Path, *extra) -> dict[str, bytes]:
    assert main(["plan", str(scenario), "--out", str(out), "--quiet", *extra]) == 0
    return _folder_bytes(out)


def test_same_input_same_bytes(tmp_path):
    first = _plan(DATA / "hetero.yaml", tmp_path / "a")
    second = _plan(DATA / "hetero.yaml", tmp_path / "b")
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], name


def test_row_order_does_not_change_the_plan(tmp_path):
    doc = yaml.safe_load((DATA / "tiny.yaml").read_text())
    reordered = dict(doc)
    reordered["metros"] = list(reversed(doc["metros"]))
    reordered["sites"] = list(reversed(doc["sites"]))
    reordered["accelerators"] = list(reversed(doc["accelerators"]))
    reordered["demand"] = dict(doc["demand"], table=list(reversed(doc["demand"]["table"])))
    path = tmp_path / "reordered.yaml"
    path.write_text(yaml.safe_dump(reordered))
    a = _plan(DATA / "tiny.yaml", tmp_path / "a", "--exact")
    b = _plan(path, tmp_path / "b", "--exact")
    for name in ("procurement.csv", "pools.csv", "routing.csv", "slo.csv", "curves.csv", "plan.xlsx"):
        assert a[name] == b[name], name


def test_from_plan_replans_exactly(tmp_path):
    first = _plan(DATA / "tiny.yaml", tmp_path / "a", "--set", "workloads.code-completion.ttft_p99_ms=350")
    assert main(["plan", "--from-plan", str(tmp_path / "a"), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    again = _folder_bytes(tmp_path / "b")
    for name in first:
        assert first[name] == again[name], name
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["overrides"] == ["workloads.code-completion.ttft_p99_ms=350"]
    assert set(summary["versions"]) == {"fleetplan", "pyomo", "highspy"}
    assert len(summary["scenario_sha256"]) == 64
