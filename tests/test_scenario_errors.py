"""Bad inputs: every error names the file, the row (or line) and the field, and says what
was expected."""

from __future__ import annotations

import pytest
from small import SMALL

from optimizer.base.errors import ScenarioError
from optimizer.scenario import load_raw, load_scenario


def error_of(path, overrides=None) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides)
    return info.value


def patched_chat(write_scenario, **fields):
    return write_scenario({**SMALL, "workloads": {"ids": ["chat"], "patch": {"chat": fields}}})


def line_of(path, text: str) -> int:
    """1-based line of the first line of ``path`` containing ``text``. (A mapping's origin is
    the line of its first key: for a one-field patch or section, the line of the field.)"""
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")


def assert_names(err: ScenarioError, file, line: int | None, field: str | None):
    msg = str(err)
    assert str(file) in msg, msg
    if line is not None:
        assert f"line {line}" in msg, msg
        assert err.origin.line == line
    if field is not None:
        assert f"field '{field}'" in msg, msg


# ----------------------------------------------------------------------------- references


def test_unknown_accelerator_lists_known_ids_and_a_near_match(write_scenario):
    path = write_scenario({**SMALL, "accelerators": ["h100", "h200-sxm"]})
    err = error_of(path)
    msg = str(err)
    assert_names(err, path, line_of(path, "- h100"), None)
    assert "field 'accelerators" in msg
    assert "unknown accelerator 'h100'" in msg
    assert "did you mean h100-sxm" in msg
    # the known ids are listed, so the planner can pick one
    for known in ("a100-80gb-sxm", "b200", "h100-sxm", "h200-sxm", "l40s", "mi300x", "mi325x"):
        assert known in msg.split("Known:")[1]


def test_unknown_model_in_a_workload_patch(write_scenario):
    path = patched_chat(write_scenario, model="llama-70b")
    err = error_of(path)
    assert_names(err, path, line_of(path, "model: llama-70b"), "model")
    msg = str(err)
    assert "workloads 'chat'" in msg
    assert "unknown model 'llama-70b'" in msg and "llama-3.1-70b" in msg.split("did you mean")[1].split("?")[0]
    assert "qwen3-32b" in msg.split("Known:")[1]


# ----------------------------------------------------------------------------- values


def test_negative_demand_in_a_workload(write_scenario):
    path = patched_chat(write_scenario, peak_requests_per_s_per_million_people=-1)
    err = error_of(path)
    assert_names(err, path, line_of(path, "peak_requests"), "peak_requests_per_s_per_million_people")
    assert "expected 0 to 1,000,000 requests/s per million people" in str(err) and "got -1" in str(err)


def test_ttft_of_zero(write_scenario):
    path = patched_chat(write_scenario, ttft_p99_ms=0)
    err = error_of(path)
    assert_names(err, path, line_of(path, "ttft_p99_ms:"), "ttft_p99_ms")
    assert "expected 5 to 86,400,000 ms" in str(err)


def test_ttft_that_looks_like_seconds(write_scenario):
    path = patched_chat(write_scenario, ttft_p99_ms=0.3)
    err = error_of(path)
    assert_names(err, path, line_of(path, "ttft_p99_ms:"), "ttft_p99_ms")
    msg = str(err)
    assert "looks like seconds" in msg and "write 300" in msg


def test_fraction_that_looks_like_a_percentage(write_scenario):
    path = patched_chat(write_scenario, prompt_cache_hit_rate=95)
    err = error_of(path)
    assert_names(err, path, line_of(path, "prompt_cache_hit_rate:"), "prompt_cache_hit_rate")
    msg = str(err)
    assert "looks like a percentage" in msg and "write 0.95" in msg


def test_attainment_and_serving_fractions_that_look_like_percentages(write_scenario):
    err = error_of(patched_chat(write_scenario, slo_attainment=99))
    assert "field 'slo_attainment'" in str(err) and "write 0.99" in str(err)
    path = write_scenario({**SMALL, "serving": {"decode_mbu": 75}})
    err = error_of(path)
    assert_names(err, path, line_of(path, "decode_mbu:"), "decode_mbu")
    assert "section 'serving'" in str(err) and "write 0.75" in str(err)


def test_site_with_no_power(write_scenario):
    path = write_scenario({**SMALL, "sites": {"ids": ["chicago", "ashburn"], "patch": {"chicago": {"power_mw": 0}}}})
    err = error_of(path)
    assert_names(err, path, line_of(path, "power_mw:"), "power_mw")
    assert "sites 'chicago'" in str(err) and "expected 0.01 to 10,000 MW" in str(err)


def test_site_with_no_power_in_a_csv_names_the_row(write_scenario):
    sites = (
        "id,name,metro,lat,lon,region,power_mw,pue,energy_usd_per_mwh,colo_usd_per_kw_month\n"
        "chicago,Chicago,chicago,41.8373,-87.6862,us-central,40,1.22,89.5,120\n"
        "ashburn,Ashburn,washington,39.0424,-77.4872,us-east,0,1.25,81.5,184\n"
    )
    path = write_scenario({**SMALL, "sites": "sites.csv"}, {"sites.csv": sites})
    err = error_of(path)
    assert_names(err, path.parent / "sites.csv", 3, "power_mw")
    assert "sites 'ashburn'" in str(err) and "expected 0.01 to 10,000 MW" in str(err)


def test_accelerator_offered_without_a_price(write_scenario):
    prices = "provider,gpu,ondemand_usd_per_gpu_hour\nreference,h100-sxm,2.5\n"
    path = write_scenario({**SMALL, "prices": {"provider": "reference", "csv": "prices.csv"}},
                          {"prices.csv": prices})
    err = error_of(path)
    msg = str(err)
    assert "field 'prices'" in msg
    assert "accelerators 'h200-sxm'" in msg and "accelerators.csv" in msg and "line " in msg
    assert "no price for offered accelerator 'h200-sxm'" in msg and "add a prices row" in msg


def test_unknown_price_provider(write_scenario):
    path = write_scenario({**SMALL, "prices": {"provider": "awz"}})
    err = error_of(path)
    assert_names(err, path, None, "prices.provider")
    assert "unknown price provider 'awz'" in str(err) and "did you mean aws" in str(err)


# ----------------------------------------------------------------------------- horizon


def test_periods_must_add_up_to_a_year(write_scenario):
    path = write_scenario({**SMALL, "horizon": {"periods": [{"id": "H1", "days": 180}, {"id": "H2", "days": 180}]}})
    err = error_of(path)
    assert_names(err, path, line_of(path, "periods:"), "periods")
    msg = str(err)
    assert "360 days" in msg and "365 days" in msg and "8,760 h" in msg


def test_day_type_shares_must_add_up_to_one(write_scenario):
    path = write_scenario({**SMALL, "horizon": {"day_types": [{"id": "weekday", "share": 0.7},
                                                              {"id": "weekend", "share": 0.2}]}})
    err = error_of(path)
    assert_names(err, path, line_of(path, "day_types:"), "day_types")
    assert "add up to 0.9" in str(err) and "must add up to 1" in str(err)


def test_hours_must_be_distinct_utc_hours(write_scenario):
    err = error_of(write_scenario({**SMALL, "horizon": {"hours": [0, 6, 6]}}))
    assert "field 'hours'" in str(err) and "distinct UTC hours 0–23" in str(err)
    err = error_of(write_scenario({**SMALL, "horizon": {"hours": [0, 6, 24]}}))
    assert "field 'hours'" in str(err) and "expected each 0 to 23" in str(err)


# ----------------------------------------------------------------------------- files


def test_csv_with_a_missing_required_column(write_scenario):
    text = "id,name,lat,lon,population\nchicago,Chicago,41.8373,-87.6862,8604203\n"
    path = write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text})
    err = error_of(path)
    csv_path = path.parent / "metros.csv"
    assert_names(err, csv_path, 1, None)
    assert "missing required column(s) utc_offset_hours" in str(err)
    assert "the header has id, name, lat, lon, population" in str(err)


def test_yaml_syntax_error_names_the_line(write_scenario, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\naccelerators: [h100-sxm\nsites: [chicago]\n")
    err = error_of(path)
    msg = str(err)
    assert str(path) in msg and "YAML syntax error" in msg
    # the list opened on line 2 is found unclosed at 'sites:' on line 3, column 6
    assert err.origin.line == 3 and "line 3" in msg and "column 6" in msg
    assert "expected ',' or ']'" in msg


def test_yaml_key_twice(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("name: x\nnetwork:\n  route_factor: 1.4\n  route_factor: 1.5\n")
    err = error_of(path)
    assert str(path) in str(err) and "line 4" in str(err) and "'route_factor' appears twice" in str(err)


def test_unknown_top_level_section(write_scenario):
    path = write_scenario({**SMALL, "netwrok": {"route_factor": 1.4}})
    err = error_of(path)
    assert str(path) in str(err) and "unknown scenario section 'netwrok'" in str(err)
    assert "did you mean network" in str(err)


def test_unknown_field_in_a_section(write_scenario):
    path = write_scenario({**SMALL, "network": {"route_factr": 1.4}})
    err = error_of(path)
    assert_names(err, path, line_of(path, "route_factr:"), "route_factr")
    assert "did you mean route_factor" in str(err)


def test_duplicate_id_in_a_csv(write_scenario):
    text = (
        "id,name,lat,lon,utc_offset_hours,population\n"
        "chicago,Chicago,41.8373,-87.6862,-6,8604203\n"
        "washington,Washington,38.9047,-77.0163,-5,5379184\n"
        "chicago,Chicago again,41.8,-87.7,-6,1\n"
    )
    path = write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text})
    err = error_of(path)
    csv_path = path.parent / "metros.csv"
    assert_names(err, csv_path, 4, "id")
    assert "duplicate id chicago" in str(err) and "first at" in str(err) and "line 2" in str(err)


def test_csv_row_with_the_wrong_number_of_cells(write_scenario):
    text = "id,name,lat,lon,utc_offset_hours,population\nchicago,Chicago,41.8373,-87.6862,-6\n"
    path = write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text})
    err = error_of(path)
    assert_names(err, path.parent / "metros.csv", 2, None)
    assert "expected 6 cells" in str(err)


# ----------------------------------------------------------------------------- --set


def test_unknown_set_path(write_scenario):
    path = write_scenario(SMALL)
    err = error_of(path, ["workloads.chat.ttft_p99_msec=500"])
    msg = str(err)
    assert msg.startswith("--set workloads.chat.ttft_p99_msec=500: ")  # the flag and the value given
    assert "unknown field 'ttft_p99_msec'" in msg and "did you mean ttft_p99_ms" in msg
    err = error_of(path, ["workload.chat.ttft_p99_ms=500"])
    assert "unknown key 'workload'" in str(err) and "did you mean workloads" in str(err)
    err = error_of(path, ["workloads.chatt.ttft_p99_ms=500"])
    assert "unknown key 'chatt'" in str(err) and "did you mean chat" in str(err)


def test_set_without_equals_sign(write_scenario):
    err = error_of(write_scenario(SMALL), ["workloads.chat.ttft_p99_ms"])
    assert "--set" in str(err) and "KEY=VALUE" in str(err)


def test_set_value_is_validated_like_the_file(write_scenario):
    """The rule is the file's; the error names --set and the value, not the catalogue row."""
    err = error_of(write_scenario(SMALL), ["workloads.chat.ttft_p99_ms=0.25"])
    assert str(err).startswith("--set workloads.chat.ttft_p99_ms=0.25: ") and "looks like seconds" in str(err)
    assert "workloads.csv" not in str(err)


def test_slo_hours_met_is_a_share_below_one(write_scenario):
    for bad in ("1", "0.3", "nan"):
        err = error_of(write_scenario(SMALL), [f"serving.slo_hours_met={bad}"])
        assert str(err).startswith(f"--set serving.slo_hours_met={bad}: ") and "slo_hours_met" in str(err)
    s, _ = load_scenario(write_scenario(SMALL), ["serving.slo_hours_met=0.9"])
    assert s.serving.slo_hours_met == 0.9
    assert load_scenario(write_scenario(SMALL))[0].serving.slo_hours_met is None  # the long run by default


# ----------------------------------------------------------------------------- demand table


DEMAND_HEADER = "metro,workload,period,hour,requests_per_s\n"


def test_negative_requests_in_a_demand_table_csv(write_scenario):
    text = DEMAND_HEADER + "chicago,chat,Q1,0,10\nchicago,chat,Q1,1,-3\n"
    path = write_scenario({**SMALL, "demand": {"table": "demand.csv"}}, {"demand.csv": text})
    err = error_of(path)
    assert_names(err, path.parent / "demand.csv", 3, "requests_per_s")
    assert "expected 0 to 1,000,000,000 requests/s" in str(err) and "-3" in str(err)


def test_demand_table_with_an_unknown_metro(write_scenario):
    text = DEMAND_HEADER + "chicago,chat,Q1,0,10\nchicgo,chat,Q1,1,10\n"
    path = write_scenario({**SMALL, "demand": {"table": "demand.csv"}}, {"demand.csv": text})
    err = error_of(path)
    assert_names(err, path.parent / "demand.csv", 3, "metro")
    assert "unknown metro 'chicgo'" in str(err) and "did you mean chicago" in str(err)


def test_demand_table_with_an_unknown_period(write_scenario):
    text = DEMAND_HEADER + "chicago,chat,Q5,0,10\n"
    path = write_scenario({**SMALL, "demand": {"table": "demand.csv"}}, {"demand.csv": text})
    err = error_of(path)
    assert_names(err, path.parent / "demand.csv", 2, "period")
    assert "unknown period 'Q5'" in str(err) and "Known: Q1, Q2, Q3, Q4" in str(err)


def test_inline_demand_table_with_an_unknown_day_type(write_scenario):
    doc = {**SMALL, "demand": {"table": [
        {"metro": "chicago", "workload": "chat", "period": "Q1", "hour": 0, "requests_per_s": 1.0,
         "day_type": "holiday"}]}}
    path = write_scenario(doc)
    err = error_of(path)
    assert_names(err, path, line_of(path, "- metro: chicago"), "day_type")
    assert "demand.table row 1" in str(err) and "unknown day type 'holiday'" in str(err)


def test_demand_table_missing_a_column(write_scenario):
    text = "metro,workload,period,requests_per_s\nchicago,chat,Q1,10\n"
    path = write_scenario({**SMALL, "demand": {"table": "demand.csv"}}, {"demand.csv": text})
    err = error_of(path)
    assert_names(err, path.parent / "demand.csv", 1, None)
    assert "missing required column(s) hour" in str(err)


def test_errors_come_from_load_raw_before_validation(write_scenario):
    """A file error is raised while reading, before any override or validation."""
    text = "id,name,lat,lon,population\n"
    path = write_scenario({**SMALL, "metros": "metros.csv"}, {"metros.csv": text})
    with pytest.raises(ScenarioError, match="missing required column"):
        load_raw(path)
