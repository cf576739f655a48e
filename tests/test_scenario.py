"""Loading scenarios: table forms, overrides, the reference scenario, `fleetplan validate`."""

from __future__ import annotations

import pytest
from small import SMALL

from optimizer.base.errors import ScenarioError
from optimizer.cli.main import main
from optimizer.scenario import apply_overrides, load_raw, load_scenario, validate

METROS_CSV = (
    "id,name,lat,lon,utc_offset_hours,population\n"
    "chicago,Chicago,41.8373,-87.6862,-6,8604203\n"
    "washington,Washington,38.9047,-77.0163,-5,5379184\n"
)


def test_small_scenario_on_the_catalogue(write_scenario):
    s, raw = load_scenario(write_scenario(SMALL))
    assert s.name == "small"
    assert set(s.accelerators) == {"h100-sxm", "h200-sxm"}
    assert set(s.metros) == {"chicago", "new-york", "washington"}
    assert set(s.sites) == {"chicago", "ashburn"}
    # dependent tables keep only the chosen sites and accelerators
    assert set(s.supply) == {"chicago", "ashburn"}
    assert all(set(per) <= {"h100-sxm", "h200-sxm"} for per in s.supply.values())
    assert set(s.prices) == {"h100-sxm", "h200-sxm"}
    assert s.price_provider == "reference"
    # sections left out take their defaults: four quarters of 365 days, 24 hours
    assert [p.days for p in s.horizon.periods] == [90, 91, 92, 92]
    assert s.horizon.hours == list(range(24))
    assert raw.warnings == []


def test_table_from_csv_path(write_scenario):
    path = write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": METROS_CSV})
    s, raw = load_scenario(path)
    assert set(s.metros) == {"chicago", "washington"}
    assert s.metros["chicago"].utc_offset_hours == -6
    assert s.metros["chicago"].weight == pytest.approx(8.604203)  # population in millions
    # every row remembers its file and line
    origin = raw.origin("metros", "washington")
    assert origin.file.endswith("metros.csv") and origin.line == 3


def test_inline_rows_replace_the_catalogue(write_scenario):
    rows = [
        {"id": "chicago", "name": "Chicago", "lat": 41.8373, "lon": -87.6862, "utc_offset_hours": -6,
         "population": 1_000_000, "demand_weight": 3.0},
        {"id": "washington", "name": "Washington", "lat": 38.9047, "lon": -77.0163, "utc_offset_hours": -5,
         "population": 2_000_000},
    ]
    s, _ = load_scenario(write_scenario({**SMALL, "metros": rows}))
    assert set(s.metros) == {"chicago", "washington"}
    assert s.metros["chicago"].weight == 3.0  # an explicit demand weight wins over population
    assert s.metros["washington"].weight == 2.0


def test_mapping_form_ids_rows_and_patch(write_scenario):
    doc = {
        **SMALL,
        "metros": {
            "ids": ["chicago", "washington"],
            "rows": [{"id": "denver-test", "name": "Denver", "lat": 39.76, "lon": -104.88,
                      "utc_offset_hours": -7, "population": 2_876_625}],
            "patch": {"chicago": {"population": 9_000_000}},
        },
        "workloads": {"ids": ["chat"], "patch": {"chat": {"ttft_p99_ms": 400, "itl_p99_ms": 60}}},
    }
    s, raw = load_scenario(write_scenario(doc))
    assert set(s.metros) == {"chicago", "washington", "denver-test"}
    assert s.metros["chicago"].population == 9_000_000
    assert s.metros["chicago"].lat == 41.8373  # fields not patched come from the catalogue
    assert s.workloads["chat"].ttft_p99_ms == 400 and s.workloads["chat"].itl_p99_ms == 60
    assert s.workloads["chat"].model == "llama-3.1-70b"
    assert "patched" in raw.origin("workloads", "chat").label


def test_mapping_form_csv_base_with_rows_replacing_a_row(write_scenario):
    doc = {**SMALL, "metros": {"csv": "metros.csv", "rows": [
        {"id": "chicago", "name": "Chicago (replaced)", "lat": 41.0, "lon": -87.0, "utc_offset_hours": -6,
         "population": 1_000}]}}
    s, _ = load_scenario(write_scenario(doc, {"metros.csv": METROS_CSV}))
    assert set(s.metros) == {"chicago", "washington"}
    assert s.metros["chicago"].name == "Chicago (replaced)" and s.metros["chicago"].population == 1_000


def test_extra_csv_column_is_a_warning_not_an_error(write_scenario):
    text = METROS_CSV.replace("population\n", "population,colour\n").replace("8604203\n", "8604203,red\n")
    text = text.replace("5379184\n", "5379184,blue\n")
    s, raw = load_scenario(write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text}))
    assert set(s.metros) == {"chicago", "washington"}
    assert len(raw.warnings) == 1
    assert "metros.csv" in raw.warnings[0] and "'colour'" in raw.warnings[0] and "ignored" in raw.warnings[0]


# ----------------------------------------------------------------------------- overrides


def test_set_replaces_a_value(write_scenario):
    s, raw = load_scenario(write_scenario(SMALL), ["workloads.chat.ttft_p99_ms=500"])
    assert s.workloads["chat"].ttft_p99_ms == 500
    assert raw.overrides == ["workloads.chat.ttft_p99_ms=500"]


@pytest.mark.parametrize("sign", ["×", "x", "*"])
def test_set_multiplies_the_current_value(write_scenario, sign):
    # the catalogue's chat objective is 300 ms; ×1.5 → 450 ms
    s, _ = load_scenario(write_scenario(SMALL), [f"workloads.chat.ttft_p99_ms={sign}1.5"])
    assert s.workloads["chat"].ttft_p99_ms == pytest.approx(300 * 1.5)


def test_set_multiplies_a_section_default_not_written_in_the_file(write_scenario):
    # safety_ms defaults to 15 ms in Serving; the file has no serving section
    s, _ = load_scenario(write_scenario(SMALL), ["serving.safety_ms=x2", "horizon.hours=[0, 6, 12, 18]"])
    assert s.serving.safety_ms == pytest.approx(30.0)
    assert s.horizon.hours == [0, 6, 12, 18]


def test_overrides_do_not_touch_the_original(write_scenario):
    raw = load_raw(write_scenario(SMALL))
    changed = apply_overrides(raw, ["workloads.chat.ttft_p99_ms=×2"])
    assert validate(changed).workloads["chat"].ttft_p99_ms == 600
    assert validate(raw).workloads["chat"].ttft_p99_ms == 300
    assert raw.sha256() != changed.sha256()


# ----------------------------------------------------------------------------- reference


def test_reference_scenario_loads_and_validates(reference):
    s, raw = reference
    assert s.name == "reference"
    assert len(s.metros) == 34 and len(s.sites) == 10
    assert set(s.accelerators) == {"h100-sxm", "h200-sxm", "b200", "mi300x", "l40s"}
    assert set(s.workloads) == {"chat", "code-completion", "rag-long-context", "batch-summarize"}
    assert sum(p.days for p in s.horizon.periods) == 365
    assert s.demand.growth_per_period == 0.08
    # every site is at one of the scenario's metros and can supply something
    assert all(site.metro in s.metros for site in s.sites.values())
    assert all(s.supply[sid] for sid in s.sites)
    # the network block carries the calibrated defaults (tests/test_network.py)
    assert s.network.route_factor == 1.45 and s.network.site_rtt_ms == 8.5
    assert len(raw.sha256()) == 64


def test_validate_command_exits_0_on_the_reference(capsys):
    from optimizer.scenario import REFERENCE_SCENARIO

    assert main(["validate", str(REFERENCE_SCENARIO)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "34 metros" in out and "10 sites" in out


def test_validate_command_exits_2_on_a_bad_file(write_scenario, capsys):
    path = write_scenario({**SMALL, "accelerators": ["h100", "h200-sxm"]})
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "unknown accelerator 'h100'" in err


def test_validate_command_prints_warnings(write_scenario, capsys):
    text = METROS_CSV.replace("population\n", "population,colour\n").replace("8604203\n", "8604203,red\n")
    text = text.replace("5379184\n", "5379184,blue\n")
    path = write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text})
    assert main(["validate", str(path)]) == 0
    assert "warning:" in capsys.readouterr().err


def test_load_scenario_raises_scenario_error_not_pydantic(write_scenario):
    with pytest.raises(ScenarioError):
        load_scenario(write_scenario({**SMALL, "serving": {"decode_mbu": 75}}))


def test_price_patch_applies_to_the_chosen_provider(write_scenario):
    # data/prices.csv lists several providers per accelerator; a patch keyed by gpu must change
    # the row of the provider the scenario uses (aws here), not another provider's row
    doc = {**SMALL, "prices": {"provider": "aws", "patch": {"h100-sxm": {"ondemand_usd_per_gpu_hour": 1.23}}}}
    s, raw = load_scenario(write_scenario(doc))
    assert s.price_provider == "aws"
    assert s.prices["h100-sxm"].provider == "aws"
    assert s.prices["h100-sxm"].ondemand_usd_per_gpu_hour == 1.23
    assert s.prices["h200-sxm"].provider == "aws" and s.prices["h200-sxm"].ondemand_usd_per_gpu_hour != 1.23
    assert "patched" in raw.origin("prices", "h100-sxm").label
    # and the reference provider's price is untouched when it is the one chosen
    ref, _ = load_scenario(write_scenario({**SMALL, "prices": {"provider": "reference"}}, name="ref.yaml"))
    assert ref.prices["h100-sxm"].ondemand_usd_per_gpu_hour != 1.23


def test_set_a_price_by_accelerator(write_scenario):
    s, _ = load_scenario(write_scenario(SMALL), ["prices.h200-sxm.ondemand_usd_per_gpu_hour=x0.5"])
    base, _ = load_scenario(write_scenario(SMALL, name="base.yaml"))
    assert s.prices["h200-sxm"].ondemand_usd_per_gpu_hour == pytest.approx(
        base.prices["h200-sxm"].ondemand_usd_per_gpu_hour * 0.5)


def test_validate_command_reports_the_planned_hours(write_scenario, capsys):
    path = write_scenario({**SMALL, "horizon": {"hours": [0, 6, 12, 18]}})
    assert main(["validate", str(path)]) == 0
    assert "4 periods × 1 day type(s) × 4 h" in capsys.readouterr().out
