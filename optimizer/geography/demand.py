"""Demand per metro × workload × time slice for the planning year.

Slices are period × day type × UTC hour; a slice stands for that hour on every day of its
type in the period, so its weight is  days(period) · share(day type)  hours and the year's
weights add up to 365 · 24 = 8,760 h. (A horizon may plan fewer representative hours; each
then stands for 24 / n hours of the day.)

Modelled demand (mean requests/s in the slice):
    λ[m,k,t] = r_k · w_m · mix[m,k] · scale · D_k(local hour) · dt(t) · (1 + g)^period(t)
r_k requests/s per million people at the daily peak, w_m the metro's weight (population in
millions), D_k the workload's diurnal profile (peak 1) read at the metro's local time
(UTC hour + offset; half-hour offsets interpolate), dt the day type's multiplier, g the
growth per period. Because metros peak at their own local evening, the global peak is
flatter than any metro's. Pools are sized for λ × the intra-hour peak-to-mean factor.
A demand table (metro, workload, period, hour, requests_per_s) replaces the model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from optimizer.base.units import SECONDS_PER_HOUR
from optimizer.scenario import Scenario

HOURS = 24


def build_slices(s: Scenario) -> pd.DataFrame:
    """One row per slice: slice index, period, period index, day type, UTC hour, weight hours (the
    hours of the year it stands for) and days (how often its hour recurs: its day type's days)."""
    rows = []
    hours = sorted(s.horizon.hours)
    span = HOURS / len(hours)
    for pi, period in enumerate(s.horizon.periods):
        for day in s.horizon.day_types:
            for hour in hours:
                rows.append((period.id, pi, day.id, day.demand_multiplier, hour, period.days * day.share * span,
                             period.days * day.share))
    out = pd.DataFrame(rows, columns=["period", "period_index", "day_type", "day_multiplier", "hour", "weight_hours",
                                      "days"])
    out.index.name = "slice"
    return out


def profile_at(profile: list[float], local_hour) -> np.ndarray:
    """Diurnal multiplier at a (possibly fractional) local hour, wrapping around midnight."""
    h = np.mod(np.asarray(local_hour, dtype=float), HOURS)
    lo = np.floor(h).astype(int)
    frac = h - lo
    values = np.asarray(profile)
    return values[lo] * (1 - frac) + values[(lo + 1) % HOURS] * frac


def modelled_demand(s: Scenario, slices: pd.DataFrame) -> pd.DataFrame:
    """The model of the module docstring, as arrays: metros × workloads × slices at once,
    in that order (rows where a metro's base rate for a workload is zero are left out)."""
    metros, workloads = list(s.metros.values()), list(s.workloads.values())
    if not metros or not workloads:
        return _empty()
    hours = slices["hour"].to_numpy(dtype=float)
    seasonal = slices["day_multiplier"].to_numpy() * (1 + s.demand.growth_per_period) ** slices["period_index"].to_numpy()
    local = hours[None, :] + np.array([m.utc_offset_hours for m in metros])[:, None]  # metros × slices
    row, col = {m.id: i for i, m in enumerate(metros)}, {w.id: j for j, w in enumerate(workloads)}
    mix = np.ones((len(metros), len(workloads)))
    for r in s.demand.mix:
        mix[row[r.metro], col[r.workload]] = r.multiplier
    base = (np.array([m.weight for m in metros])[:, None] * mix * s.demand.scale
            * np.array([w.peak_requests_per_s_per_million_people for w in workloads])[None, :])
    profile = np.stack([profile_at(s.diurnal[w.diurnal_profile], local) for w in workloads], axis=1)
    rate = base[:, :, None] * profile * seasonal[None, None, :]  # metros × workloads × slices
    keep = base > 0
    if not keep.any():
        return _empty()
    mi, wi = np.nonzero(keep)
    n = len(slices)
    return pd.DataFrame({
        "metro": np.repeat(np.array([m.id for m in metros], dtype=object)[mi], n),
        "workload": np.repeat(np.array([w.id for w in workloads], dtype=object)[wi], n),
        "slice": np.tile(slices.index.to_numpy(), len(mi)),
        "requests_per_s": rate[mi, wi].ravel(),
    })


def tabled_demand(s: Scenario, slices: pd.DataFrame) -> pd.DataFrame:
    """Demand given as rows; a row without a day type applies to every day type."""
    key = slices.reset_index()[["slice", "period", "day_type", "hour"]]
    rows = pd.DataFrame([r.model_dump() for r in s.demand.table])
    if rows.empty:
        return _empty()
    typed = rows[rows["day_type"].notna()].merge(key, on=["period", "day_type", "hour"])
    untyped = rows[rows["day_type"].isna()].drop(columns="day_type").merge(key, on=["period", "hour"])
    out = pd.concat([typed, untyped], ignore_index=True)
    out = out.groupby(["metro", "workload", "slice"], as_index=False)["requests_per_s"].sum()
    out["requests_per_s"] *= s.demand.scale
    return out[out["requests_per_s"] > 0].reset_index(drop=True)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"metro": pd.Series(dtype=str), "workload": pd.Series(dtype=str),
                         "slice": pd.Series(dtype=int), "requests_per_s": pd.Series(dtype=float)})


def build_demand(s: Scenario, slices: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long table (metro, workload, slice, requests_per_s), mean rate in the slice's hour."""
    slices = build_slices(s) if slices is None else slices
    return tabled_demand(s, slices) if s.demand.table is not None else modelled_demand(s, slices)


def total_per_slice(s: Scenario, slices: pd.DataFrame) -> np.ndarray:
    """Requests/s of all metros and workloads in each slice, without the long table: metros
    of one UTC offset share the diurnal curve, so the model sums their weights first —
    a catalogue of any size costs one profile per (workload, offset)."""
    if s.demand.table is not None:
        long = tabled_demand(s, slices)
        return long.groupby("slice")["requests_per_s"].sum().reindex(slices.index, fill_value=0.0).to_numpy()
    hours = slices["hour"].to_numpy(dtype=float)
    seasonal = slices["day_multiplier"].to_numpy() * (1 + s.demand.growth_per_period) ** slices["period_index"].to_numpy()
    mix = {(r.metro, r.workload): r.multiplier for r in s.demand.mix}
    total = np.zeros(len(slices))
    for k, w in s.workloads.items():
        by_offset: dict[float, float] = {}
        for m in s.metros.values():
            weight = m.weight * mix.get((m.id, k), 1.0)
            by_offset[m.utc_offset_hours] = by_offset.get(m.utc_offset_hours, 0.0) + weight
        for offset, weight in by_offset.items():
            total += (w.peak_requests_per_s_per_million_people * weight * s.demand.scale
                      * profile_at(s.diurnal[w.diurnal_profile], hours + offset))
    return total * seasonal


def annual_requests(demand: pd.DataFrame, slices: pd.DataFrame) -> float:
    """Requests in the year: Σ λ · weight_hours · 3600."""
    w = slices["weight_hours"].reindex(demand["slice"]).to_numpy()
    return float((demand["requests_per_s"].to_numpy() * w).sum() * SECONDS_PER_HOUR)
