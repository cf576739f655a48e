"""A calibration's residual spread as an error band: the robust plan derates by it, stress
perturbs within it, the report says what it costs — and the calibration's points and
residuals drawn in the report."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from optimizer.base.errors import ScenarioError
from optimizer.cli.main import main
from optimizer.commands.calibrate import band
from optimizer.commands.pipeline import make_plan
from optimizer.commands.report import calibration as section
from optimizer.commands.report.folder import read_plan_folder
from optimizer.commands.report.opening import margin_words
from optimizer.commands.report.plan_page import render
from optimizer.folder.write import write_plan
from optimizer.scenario import load_scenario
from optimizer.scenario.calibration.files import read_calibration_record, write_calibration
from optimizer.scenario.calibration.params import CalibrationPoint, Spread, shipped_calibration
from optimizer.serving.configs import efficiency

BATCHING = Path(__file__).parent / "data" / "batching.yaml"
TINY = Path(__file__).parent / "data" / "tiny.yaml"


def banded_file(path: Path, p90_prefill: float, p90_decode: float) -> Path:
    """A calibration file with the shipped H100 bf16 parameters, a known band, and four
    measured points (hand-made: errors +5 %, −10 %, +2 %, −20 %)."""
    h100 = shipped_calibration().lookup("h100-sxm", "bf16")
    entry = h100.model_copy(update={"engine": "*", "spread": {
        "prefill": Spread(points=30, median_abs_error=p90_prefill / 2, p90_abs_error=p90_prefill),
        "decode": Spread(points=40, median_abs_error=p90_decode / 2, p90_abs_error=p90_decode)}})
    points = [CalibrationPoint(table="t.csv", kind=k, split=s, accelerator="h100-sxm", model="llama-3.1-8b",
                               measured_ms=m, predicted_ms=p)
              for k, s, m, p in (("prefill", "fit", 100.0, 105.0), ("prefill", "held-out", 50.0, 45.0),
                                 ("decode", "fit", 10.0, 10.2), ("decode", "fit", 20.0, 16.0))]
    write_calibration(path, [entry], [], {"fit": [], "holdout": []}, points)
    return path


# ---------------------------------------------------------------------------- the band


def test_the_band_derates_each_efficiency_by_its_kinds_p90(tmp_path):
    cal = banded_file(tmp_path / "band.yaml", 0.10, 0.04)
    s, raw = load_scenario(TINY, [f"calibration={cal}"])
    rows = {r["accelerator"]: r for r in band.band(s, fallback=0.85)}
    assert rows["h100-sxm"]["factors"] == pytest.approx({"prefill_mfu": 0.90, "decode_mbu": 0.96, "decode_mfu": 0.96})
    assert rows["h100-sxm"]["origin"] == "band.yaml"
    # L40S is not in the file: its shipped parameter set carries its own band
    l40s = shipped_calibration().lookup("l40s", "bf16")
    assert rows["l40s"]["factors"]["prefill_mfu"] == pytest.approx(1 - l40s.spread["prefill"].p90_abs_error)
    derated = band.derated(raw.data["calibration"], list(rows.values()))
    nominal = efficiency(s.serving, "h100-sxm", "bf16")
    from optimizer.scenario import validate

    raw.data["calibration"] = derated
    slow = efficiency(validate(raw).serving, "h100-sxm", "bf16")
    assert slow.prefill_mfu == pytest.approx(0.90 * nominal.prefill_mfu)
    assert slow.decode_mbu == pytest.approx(0.96 * nominal.decode_mbu)
    assert slow.step_overhead_s == nominal.step_overhead_s  # overheads are not efficiencies


def test_a_scenario_that_sets_an_efficiency_itself_keeps_it_out_of_the_band(tmp_path):
    cal = banded_file(tmp_path / "band.yaml", 0.10, 0.04)
    s, _ = load_scenario(TINY, [f"calibration={cal}", "serving.prefill_mfu=0.5"])
    assert all("prefill_mfu" not in r["factors"] for r in band.band(s))
    assert s.robust.overrides(s, banded=True)[1] == "serving.prefill_mfu=×0.85"


def test_draws_are_seeded_and_stay_within_the_band_nine_times_in_ten(tmp_path):
    cal = banded_file(tmp_path / "band.yaml", 0.10, 0.04)
    s, _ = load_scenario(BATCHING, [f"calibration={cal}"])
    assert band.drawn(s, 7) == band.drawn(s, 7)
    prefill = np.array([band.drawn(s, seed)[0]["factors"]["prefill_mfu"] for seed in range(2000)])
    inside = np.mean(np.abs(np.log(prefill)) <= math.log(1.10))
    assert inside == pytest.approx(0.90, abs=0.02)
    decode = [band.drawn(s, seed)[0]["factors"] for seed in range(5)]
    assert all(d["decode_mbu"] == d["decode_mfu"] for d in decode)  # one draw per set and kind


# ---------------------------------------------------------------------------- robust plans


@pytest.fixture(scope="module")
def robust_plans(tmp_path_factory):
    out = tmp_path_factory.mktemp("robust")
    narrow, wide = banded_file(out / "narrow.yaml", 0.05, 0.02), banded_file(out / "wide.yaml", 0.30, 0.20)
    plans = {name: make_plan(BATCHING, overrides, exact=True, robust=robust) for name, overrides, robust in (
        ("nominal", [f"calibration={narrow}"], False),
        ("narrow", [f"calibration={narrow}"], True),
        ("wide", [f"calibration={wide}"], True),
        ("fixed", [f"calibration={narrow}", "robust.use_calibration_band=false"], True),
        ("no file", [], True))}
    return plans, out


def test_a_robust_plan_with_a_calibration_file_derates_by_its_band(robust_plans):
    plans, _ = robust_plans
    r = plans["narrow"].summary["robust"]
    assert r["band_source"].endswith("narrow.yaml")
    assert r["band"][0]["factors"] == pytest.approx({"prefill_mfu": 0.95, "decode_mbu": 0.98, "decode_mfu": 0.98})
    assert not any(m.startswith("serving.prefill_mfu") or m.startswith("serving.decode_") for m in r["margins"])
    assert r["nominal_cost_usd"] == pytest.approx(plans["nominal"].summary["total_cost_usd"])
    assert r["price_of_robustness"] == pytest.approx(plans["narrow"].summary["total_cost_usd"] / r["nominal_cost_usd"] - 1)
    gpus = sum(plans["narrow"].summary["gpus_by_type_peak"].values())
    assert r["extra_gpus_peak"] == gpus - sum(plans["nominal"].summary["gpus_by_type_peak"].values())
    # the robust plan's curves were computed with the derated prefill: the same config is slower
    nominal_curves = plans["nominal"].tables["curves"].set_index("id")
    robust_curves = plans["narrow"].tables["curves"].set_index("id")
    shared = nominal_curves.index.intersection(robust_curves.index)
    prefill = [c for c in shared if nominal_curves.loc[c, "role"] == "prefill"]
    assert prefill
    for c in prefill:
        ratio = robust_curves.loc[c, "service_mean_ms"] / nominal_curves.loc[c, "service_mean_ms"]
        assert 1.0 < ratio <= 1 / 0.95 + 1e-9


def test_a_wider_band_costs_more_and_the_fixed_derate_is_still_there(robust_plans):
    plans, _ = robust_plans
    cost = {k: p.summary["total_cost_usd"] for k, p in plans.items()}
    assert cost["nominal"] < cost["narrow"] <= cost["wide"]
    fixed = plans["fixed"].summary["robust"]
    assert fixed["band"] is None and "serving.prefill_mfu=×0.85" in fixed["margins"]
    assert cost["narrow"] <= cost["fixed"]  # a 5 %/2 % band is milder than a 15 % derate
    assert plans["no file"].summary["robust"]["band"] is None  # the shipped defaults keep the fixed derate


def test_the_report_says_what_the_margins_cost(robust_plans):
    plans, out = robust_plans
    s = plans["narrow"].summary
    words = margin_words(s)
    r = s["robust"]
    assert "prefill −5.0 %, decode −2.0 %" in words and "narrow.yaml" in words
    assert f"{100 * r['price_of_robustness']:.1f} %" in words
    assert f"{r['extra_gpus_peak']:,} more GPUs at the peak hour" in words
    assert "×0.85 (a fixed derate)" in margin_words(plans["fixed"].summary)
    assert margin_words(plans["nominal"].summary) is None
    d = write_plan(plans["narrow"], out / "narrow-plan")
    html = render(d)
    assert 'id="margins"' in html and "The margins cost" in html


# ---------------------------------------------------------------------------- stress


def test_stress_within_the_band(tmp_path, capsys):
    cal = banded_file(tmp_path / "band.yaml", 0.10, 0.04)
    d = write_plan(make_plan(BATCHING, [f"calibration={cal}"], exact=True), tmp_path / "plan")
    results = {}
    for flags in ([], ["--within-band"], ["--within-band", "draw", "--seed", "3"], ["--within-band", "draw",
                                                                                     "--seed", "3"]):
        main(["stress", str(d), "--json", *flags])
        results[len(results)] = json.loads(capsys.readouterr().out)
    nominal, p90, draw, again = results.values()
    assert p90["within_band"] == "p90" and p90["band"][0]["factors"]["prefill_mfu"] == pytest.approx(0.90)
    assert p90["by_workload"][0]["ttft_p99_ms_worst"] > nominal["by_workload"][0]["ttft_p99_ms_worst"]
    assert draw["band"] == again["band"] and draw["by_workload"] == again["by_workload"]  # seeded
    stressed = json.loads((d / "stress.json").read_text())
    assert stressed["within_band"] == "draw"
    assert "efficiencies drawn from the calibration" in render(d)


def test_stress_within_a_band_that_is_not_there_is_a_clear_error(tmp_path, capsys):
    h100 = shipped_calibration().lookup("h100-sxm", "bf16").model_copy(update={"engine": "*", "spread": {}})
    write_calibration(tmp_path / "bare.yaml", [h100], [], {})
    d = write_plan(make_plan(BATCHING, [f"calibration={tmp_path / 'bare.yaml'}"], exact=True), tmp_path / "plan")
    assert main(["stress", str(d), "--within-band"]) == 2
    assert "records no residual spread" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the report


def test_calibration_file_records_its_points_and_refuses_bad_ones(tmp_path):
    path = banded_file(tmp_path / "band.yaml", 0.10, 0.04)
    _, _, record = read_calibration_record(path)
    assert [p["measured_ms"] for p in record["points"]] == [100.0, 50.0, 10.0, 20.0]
    text = path.read_text().replace("measured_ms: 20.0", "measured_ms: -20.0")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ScenarioError) as exc:
        read_calibration_record(tmp_path / "bad.yaml")
    assert exc.value.field == "measured_ms" and "points[3]" in exc.value.origin.describe()


def test_the_calibration_section_recomputes_the_files_residuals(tmp_path):
    cal = banded_file(tmp_path / "band.yaml", 0.10, 0.04)
    d = write_plan(make_plan(BATCHING, [f"calibration={cal}"], exact=True), tmp_path / "plan")
    folder = read_plan_folder(d)
    table = section.residual_data(folder).set_index(["split", "kind"])
    # by hand: fit prefill |105/100 − 1| = 5 %; held-out prefill 10 %; fit decode 2 % and 20 %
    assert table.loc[("fit", "prefill"), "median_abs_error"] == pytest.approx(0.05)
    assert table.loc[("held-out", "prefill"), "p90_abs_error"] == pytest.approx(0.10)
    assert table.loc[("fit", "decode"), "median_abs_error"] == pytest.approx(0.11)
    assert table.loc[("fit", "decode"), "p90_abs_error"] == pytest.approx(0.02 + 0.9 * 0.18)
    assert table.loc[("fit", "decode"), "median_ratio"] == pytest.approx((1.02 + 0.8) / 2)
    band_table = section.band_data(folder).set_index("kind")
    assert band_table.loc["prefill", "p90_abs_error"] == pytest.approx(0.10)
    chart = section.plot(folder)
    assert len(chart.data) == 4 and chart.png.startswith(b"\x89PNG")
    html = render(d)
    assert 'id="calibration"' in html and "band.yaml" in html


def test_a_plan_on_the_shipped_defaults_has_no_calibration_section(tmp_path):
    d = write_plan(make_plan(BATCHING, exact=True), tmp_path / "plan")
    assert not re.search(r'<section id="calibration"', render(d))
