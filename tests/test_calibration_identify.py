"""A calibration fits only what its data identify: tables of 1, 2 and 5 points fit at most as
many parameters as they have points, say which they fitted and which they kept (and why),
warn with the counts, record no error band where no residual is left, and keep every
parameter inside its physical range."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optimizer.cli.main import main
from optimizer.commands.calibrate.fit import fit_group
from optimizer.scenario.calibration.files import read_calibration
from optimizer.scenario.calibration.params import PARAMETERS, shipped_calibration
from optimizer.scenario.calibration.tables import read_table

EXAMPLE = Path(__file__).resolve().parent.parent / "data" / "calibration" / "example_h100.csv"


@pytest.fixture(scope="module")
def example() -> pd.DataFrame:
    return read_table(EXAMPLE)


def _pick(example: pd.DataFrame, kind: str, n: int, **equal) -> pd.DataFrame:
    rows = example[example["kind"] == kind]
    for column, value in equal.items():
        rows = rows[rows[column] == value]
    return rows.head(n)


def _write(tmp_path: Path, rows: pd.DataFrame) -> Path:
    path = tmp_path / f"table-{len(rows)}.csv"
    EXAMPLE_HEADER = EXAMPLE.read_text().splitlines()[0]
    lines = EXAMPLE.read_text().splitlines()
    path.write_text("\n".join([EXAMPLE_HEADER, *(lines[int(r) - 1] for r in rows["row"])]) + "\n")
    return path


def test_one_prefill_point_fits_the_prefill_efficiency_only(tmp_path, example, capsys):
    path = _write(tmp_path, _pick(example, "prefill", 1))
    out = tmp_path / "one.yaml"
    assert main(["calibrate", str(path), "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    [p] = json.loads(captured.out)["parameters"]
    assert p["fitted"] == ["prefill_mfu"]
    start = shipped_calibration().lookup("h100-sxm", "bf16", "trtllm")
    for name in PARAMETERS:  # everything else is exactly where it started, with the reason
        if name != "prefill_mfu":
            assert p[name] == pytest.approx(getattr(start, name)), name
            assert "kept at h100-sxm/trtllm/bf16 (shipped)" in p["kept"][name]
    assert p["kept"]["step_overhead_ms"].startswith("1 point identifies at most 1 parameter")
    assert p["kept"]["decode_mbu"].startswith("no decode or end-to-end rows")
    assert PARAMETERS["prefill_mfu"][0] <= p["prefill_mfu"] <= 0.8  # no more than the table's own fit (0.75)
    assert "1 point (1 prefill) identifies 1 of the 4 parameters rows of these kinds inform" in captured.err
    assert "leaves no residual: no error band is recorded" in captured.err
    [entry], _ = read_calibration(out)
    assert entry.fitted == ["prefill_mfu"] and entry.spread == {} and set(entry.kept) == set(PARAMETERS) - {"prefill_mfu"}


@pytest.mark.parametrize("n, kinds", [(1, {"prefill": 1}), (2, {"prefill": 2}), (5, {"prefill": 3, "decode": 2})])
def test_never_more_parameters_than_points(example, n, kinds):
    rows = pd.concat([_pick(example, kind, k, model="llama-3.1-70b", tp=4) for kind, k in kinds.items()])
    assert len(rows) == n
    fit = fit_group(rows, shipped_calibration().lookup("h100-sxm", "bf16", "trtllm"), holdout=0.0)
    assert 1 <= len(fit.fitted) <= n
    assert set(fit.fitted).isdisjoint(fit.kept) and set(fit.fitted) | set(fit.kept) == set(PARAMETERS)
    for name, value in fit.parameters.items():
        low, high, _ = PARAMETERS[name]
        assert low <= value <= high, name
    entry = fit.entry()
    assert (entry.spread == {}) == (n <= len(fit.fitted))  # a band only where residuals are left
    assert fit.short, "these tables are too small for what their kinds of rows inform"
    assert fit.warnings[0].startswith(f"h100-sxm/trtllm/bf16: {n} point{'s' * (n > 1)} (")
    assert f"identif{'ies' if n == 1 else 'y'} {len(fit.fitted)} of the {len(fit.fitted) + len(fit.short)} " \
           "parameters" in fit.warnings[0]
    assert not any("ended at" in w for w in fit.warnings)


def test_a_point_measured_twice_identifies_one_parameter(example):
    # the same pass twice: whatever a second parameter does to one, it does to the other
    twice = pd.concat([_pick(example, "prefill", 1)] * 2, ignore_index=True)
    fit = fit_group(twice, shipped_calibration().lookup("h100-sxm", "bf16", "trtllm"), holdout=0.0)
    assert fit.fitted == ["prefill_mfu"]
    assert fit.kept["step_overhead_ms"].startswith("not separable on these rows from prefill_mfu")
    assert fit.short == ["step_overhead_ms", "prefill_half_tokens", "layer_overhead_us"]
    assert fit.warnings[0] == ("h100-sxm/trtllm/bf16: 2 points (2 prefill) identify 1 of the 4 parameters rows of "
                               "these kinds inform; kept at their starting values: step_overhead_ms, "
                               "prefill_half_tokens, layer_overhead_us")


def test_a_point_faster_than_physics_pins_the_efficiency_at_its_bound_and_says_so(tmp_path, capsys):
    path = tmp_path / "fast.csv"
    # 8B, 8,192 tokens on one H100 in 10 ms would need > 100 % of its bf16 FLOPs
    path.write_text("kind,model,accelerator,tp,batch,prompt_tokens,context_tokens,latency_ms,weight_dtype\n"
                    "prefill,llama-3.1-8b,h100-sxm,1,1,8192,0,10,bf16\n")
    assert main(["calibrate", str(path), "--out", str(tmp_path / "fast.yaml")]) == 0
    err = capsys.readouterr().err
    assert "prefill_mfu ended at the upper end of its physical range (1)" in err
    [entry], _ = read_calibration(tmp_path / "fast.yaml")
    assert entry.prefill_mfu == pytest.approx(1.0)


def test_the_whole_example_table_still_fits_what_it_informs(example):
    fit = fit_group(example, shipped_calibration().lookup("h100-sxm", "bf16", "trtllm"), holdout=0.2)
    assert {"prefill_mfu", "decode_mbu", "step_overhead_ms", "collective_latency_us"} <= set(fit.fitted)
    assert fit.kept["moe_load_factor"].startswith("no mixture-of-experts model")
    # 68 points are enough in number: what they leave is what two models cannot tell apart
    assert all(fit.kept[name].startswith("not separable on these rows") for name in fit.short)
    assert np.median(fit.train["error"]) < 0.05
