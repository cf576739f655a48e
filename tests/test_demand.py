"""Demand over the planning year: slices and their weights, the diurnal profile at local time,
growth, the demand table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from optimizer.geography.demand import annual_requests, build_demand, build_slices, profile_at
from optimizer.scenario import load_scenario

# Washington (UTC−5) and London (UTC+0) from the catalogue; Chicago (UTC−6) because the
# Chicago site belongs to it.
BASE = {
    "name": "demand",
    "accelerators": ["h100-sxm"],
    "metros": ["chicago", "washington", "london"],
    "sites": ["chicago", "ashburn"],
    "workloads": ["chat"],
}

# A profile with one clear peak at 20:00 local: 0.1 everywhere, 0.5 at 19 and 21, 1 at 20.
SPIKE = [0.1] * 24
SPIKE[19] = SPIKE[21] = 0.5
SPIKE[20] = 1.0


def spike_scenario(write_scenario, **demand):
    doc = {
        **BASE,
        "diurnal": {"spike": SPIKE},
        "workloads": {"ids": ["chat"], "patch": {"chat": {"diurnal_profile": "spike",
                                                          "peak_requests_per_s_per_million_people": 2.0}}},
        "demand": demand,
    }
    return load_scenario(write_scenario(doc))[0]


# ----------------------------------------------------------------------------- slices


def test_default_year_is_96_slices_of_8760_hours(reference):
    s, _ = reference
    slices = build_slices(s)
    assert len(slices) == 4 * 24
    assert slices["weight_hours"].sum() == pytest.approx(8760.0)
    # a Q1 slice stands for its hour on each of the 90 days of the quarter
    assert slices.loc[(slices["period"] == "Q1") & (slices["hour"] == 0), "weight_hours"].item() == 90.0
    assert slices.groupby("period")["weight_hours"].sum().to_dict() == {
        "Q1": 90 * 24, "Q2": 91 * 24, "Q3": 92 * 24, "Q4": 92 * 24}


def test_day_types_and_fewer_hours_still_add_up_to_8760(write_scenario):
    horizon = {
        "day_types": [{"id": "weekday", "share": 5 / 7}, {"id": "weekend", "share": 2 / 7, "demand_multiplier": 0.6}],
        "hours": [0, 6, 12, 18],
    }
    s, _ = load_scenario(write_scenario({**BASE, "horizon": horizon}))
    slices = build_slices(s)
    assert len(slices) == 4 * 2 * 4
    assert slices["weight_hours"].sum() == pytest.approx(8760.0)
    # each of the 4 hours stands for 6 hours of the day: Q1 weekend 90 · 2/7 · 6 h
    q1_weekend = slices[(slices["period"] == "Q1") & (slices["day_type"] == "weekend")]
    assert q1_weekend["weight_hours"].tolist() == pytest.approx([90 * 2 / 7 * 6] * 4)
    assert sorted(slices["hour"].unique()) == [0, 6, 12, 18]


def test_months_add_up_to_8760(write_scenario):
    days = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    horizon = {"periods": [{"id": f"M{i + 1:02d}", "days": d} for i, d in enumerate(days)], "hours": [3, 15]}
    s, _ = load_scenario(write_scenario({**BASE, "horizon": horizon}))
    slices = build_slices(s)
    assert len(slices) == 12 * 2
    assert slices["weight_hours"].sum() == pytest.approx(8760.0)
    assert slices["period_index"].max() == 11


# ----------------------------------------------------------------------------- the model


def test_modelled_demand_by_hand(write_scenario):
    s = spike_scenario(write_scenario, growth_per_period=0.1, scale=3.0,
                       mix=[{"metro": "london", "workload": "chat", "multiplier": 0.5}])
    slices = build_slices(s)
    d = build_demand(s, slices).merge(slices.reset_index(), on="slice")
    # London (UTC+0) at 20:00 UTC in Q3 (period index 2): its local peak
    row = d[(d["metro"] == "london") & (d["period"] == "Q3") & (d["hour"] == 20)]
    population_m = s.metros["london"].population / 1e6
    expected = 2.0 * population_m * 0.5 * 3.0 * 1.0 * 1.0 * 1.1 ** 2
    assert row["requests_per_s"].item() == pytest.approx(expected)
    # Washington (UTC−5) at 20:00 UTC is 15:00 local: the profile's floor of 0.1, no mix
    row = d[(d["metro"] == "washington") & (d["period"] == "Q1") & (d["hour"] == 20)]
    assert row["requests_per_s"].item() == pytest.approx(2.0 * s.metros["washington"].population / 1e6 * 3.0 * 0.1)


def test_metro_at_utc_minus_5_peaks_5_hours_after_utc_0(write_scenario):
    s = spike_scenario(write_scenario)
    slices = build_slices(s)
    d = build_demand(s, slices).merge(slices.reset_index(), on="slice")
    q1 = d[d["period"] == "Q1"]
    peak = {m: int(q1[q1["metro"] == m].set_index("hour")["requests_per_s"].idxmax()) for m in ("london", "washington")}
    assert s.metros["london"].utc_offset_hours == 0 and s.metros["washington"].utc_offset_hours == -5
    assert peak["london"] == 20  # 20:00 local = 20:00 UTC
    assert peak["washington"] == 1  # 20:00 local = 01:00 UTC the next day
    assert (peak["washington"] - peak["london"]) % 24 == 5


def test_half_hour_offsets_interpolate():
    profile = list(range(24))
    assert profile_at(profile, 5.5) == pytest.approx(5.5)
    assert profile_at(profile, 23.5) == pytest.approx(23 * 0.5 + 0 * 0.5)  # wraps around midnight
    assert profile_at(profile, -1) == pytest.approx(23)
    assert profile_at(profile, np.array([24.0, 30.0])).tolist() == pytest.approx([0.0, 6.0])


def test_global_peak_is_flatter_than_any_metros(reference):
    s, _ = reference
    slices = build_slices(s)
    d = build_demand(s, slices).merge(slices.reset_index(), on="slice")
    chat = d[(d["workload"] == "chat") & (d["period"] == "Q1")]
    by_metro = chat.pivot_table(index="hour", columns="metro", values="requests_per_s")
    assert by_metro.shape == (24, len(s.metros))
    metro_ratio = by_metro.max() / by_metro.mean()
    total = by_metro.sum(axis=1)
    global_ratio = total.max() / total.mean()
    assert global_ratio < metro_ratio.min()
    # North America and Europe are 5–9 hours apart: the fleet-wide peak is clearly flatter
    assert global_ratio < metro_ratio.min() - 0.1


def test_growth_compounds_per_period(write_scenario):
    s = spike_scenario(write_scenario, growth_per_period=0.08)
    slices = build_slices(s)
    d = build_demand(s, slices).merge(slices.reset_index(), on="slice")
    at = d.set_index(["metro", "period", "hour"])["requests_per_s"]
    for i, period in enumerate(["Q1", "Q2", "Q3", "Q4"]):
        assert at["london", period, 20] / at["london", "Q1", 20] == pytest.approx(1.08 ** i)
    assert at["chicago", "Q4", 7] / at["chicago", "Q1", 7] == pytest.approx(1.259712)  # 1.08³


def test_day_type_multiplier(write_scenario):
    doc = {
        **BASE,
        "horizon": {"day_types": [{"id": "weekday", "share": 5 / 7},
                                  {"id": "weekend", "share": 2 / 7, "demand_multiplier": 0.6}]},
    }
    s, _ = load_scenario(write_scenario(doc))
    slices = build_slices(s)
    d = build_demand(s, slices).merge(slices.reset_index(), on="slice")
    at = d.set_index(["metro", "period", "day_type", "hour"])["requests_per_s"]
    assert at["london", "Q2", "weekend", 12] / at["london", "Q2", "weekday", 12] == pytest.approx(0.6)


def test_annual_requests(write_scenario):
    s = spike_scenario(write_scenario)
    slices = build_slices(s)
    d = build_demand(s, slices)
    # by hand: a metro's daily requests are rate · Σ profile (h) · 3600 s, times 365 days
    per_hour = sum(SPIKE)
    people = sum(m.population for m in s.metros.values()) / 1e6
    expected = 2.0 * people * per_hour * 3600 * 365
    assert annual_requests(d, slices) == pytest.approx(expected, rel=1e-9)


# ----------------------------------------------------------------------------- the table


def test_demand_table_replaces_the_model(write_scenario):
    doc = {
        **BASE,
        "horizon": {"day_types": [{"id": "weekday", "share": 5 / 7}, {"id": "weekend", "share": 2 / 7}]},
        "demand": {"growth_per_period": 0.5, "table": "demand.csv"},
    }
    table = (
        "metro,workload,period,hour,requests_per_s,day_type\n"
        "chicago,chat,Q1,0,10,\n"          # no day type: every day type
        "london,chat,Q2,3,4,weekend\n"     # weekends only
        "london,chat,Q3,5,0,\n"            # zero rows are dropped
    )
    s, _ = load_scenario(write_scenario(doc, {"demand.csv": table}))
    slices = build_slices(s)
    d = build_demand(s, slices).merge(slices.reset_index(), on="slice")
    got = sorted(zip(d["metro"], d["period"], d["day_type"], d["hour"], d["requests_per_s"]))
    # the rows exactly, no modelled demand, no growth or day multiplier applied to them
    assert got == [
        ("chicago", "Q1", "weekday", 0, 10.0),
        ("chicago", "Q1", "weekend", 0, 10.0),
        ("london", "Q2", "weekend", 3, 4.0),
    ]
    # requests in the year: 10/s for the 90 Q1 days at 00:00 UTC, 4/s on Q2's weekend days at 03:00
    assert annual_requests(build_demand(s, slices), slices) == pytest.approx((10 * 90 + 4 * 91 * 2 / 7) * 3600)


def test_inline_demand_table(write_scenario):
    rows = [{"metro": "washington", "workload": "chat", "period": "Q4", "hour": h, "requests_per_s": 1.5}
            for h in range(24)]
    s, _ = load_scenario(write_scenario({**BASE, "demand": {"table": rows}}))
    slices = build_slices(s)
    d = build_demand(s, slices)
    assert len(d) == 24 and set(d["metro"]) == {"washington"}
    assert annual_requests(d, slices) == pytest.approx(1.5 * 92 * 24 * 3600)


def test_empty_demand_table_means_no_demand(write_scenario):
    s, _ = load_scenario(write_scenario({**BASE, "demand": {"table": []}}))
    d = build_demand(s)
    assert d.empty and list(d.columns) == ["metro", "workload", "slice", "requests_per_s"]


def test_metro_with_zero_weight_has_no_rows(write_scenario):
    doc = {**BASE, "metros": {"ids": ["chicago", "washington", "london"], "patch": {"london": {"demand_weight": 0}}}}
    s, _ = load_scenario(write_scenario(doc))
    d = build_demand(s)
    assert set(d["metro"]) == {"chicago", "washington"}
    assert isinstance(d, pd.DataFrame) and (d["requests_per_s"] > 0).all()
