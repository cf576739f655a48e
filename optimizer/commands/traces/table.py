"""A log's statistics in the forms a scenario reads: ``demand.table`` rows and workload rows.

Demand rows (metro, workload, period, UTC hour, requests/s):
* an hour of the day the log covers gets its measured rate;
* an hour it does not cover is filled from the workload's diurnal profile D read at the
  metro's local time, anchored to the covered hours by least squares weighted by their
  seconds:  A = Σ s_h·r_h·D_h / Σ s_h·D_h²,  rate = A · D(local hour)  — or left out (zero
  demand) with ``fill="none"``;
* every period of the horizon gets the rows, × (1 + g)^(period − the log's period) where
  the log was long enough to measure a growth g per period, else unchanged.

Workload rows: prompt and output mean and p99 (a p99 above 14.9× the mean, which no
lognormal can have, is capped there; the empirical distribution keeps the tail), the
intra-hour peak factor = peak_to_mean_per_minute averaged over the workload's metros
weighted by their requests, and the cache hit rate and prefix where the log has a cached
column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from optimizer.base.errors import ScenarioError, unknown_id_message
from optimizer.base.units import HOURS_PER_DAY
from optimizer.commands.traces.derive import Derived, Lengths, PairStats, hour_ranges
from optimizer.curves.lengths import MAX_P99_OVER_MEAN
from optimizer.geography.demand import profile_at
from optimizer.scenario import Scenario

PEAK_FACTOR_MAX = 20.0  # the workload field's upper bound


def check_labels(d: Derived, s: Scenario) -> None:
    """Every metro and workload the log names must be the scenario's; the error names the
    first row that carries an unknown one."""
    for kind, known, flag in (("metro", s.metros, "--metro"), ("workload", s.workloads, "--workload")):
        for pair in d.pairs:
            label = getattr(pair, kind)
            if label is None:
                raise ScenarioError(f"the log has no {kind} column and none was given; name it with {flag} ID "
                                    f"(one of scenario '{s.name}')", d.label_rows.get((kind, None)), field=kind)
            if label not in known:
                raise ScenarioError(unknown_id_message(kind, label, known) + f" (scenario '{s.name}')",
                                    d.label_rows.get((kind, label)), field=kind)


def log_period(pair: PairStats, s: Scenario) -> int:
    """Index of the horizon period holding the middle of the log (periods run from 1 January)."""
    middle = pd.Timestamp((pair.first_ns + pair.last_ns) // 2)
    day = middle.day_of_year - 1
    ends = np.cumsum([p.days for p in s.horizon.periods])
    return int(min(np.searchsorted(ends, day, side="right"), len(ends) - 1))


def hourly_rates(pair: PairStats, s: Scenario, fill: str = "profile") -> pd.DataFrame:
    """requests/s per UTC hour 0–23 (NaN where neither the log nor a fill gives one), with the
    source of each: "log" or "profile <name>"."""
    rate = np.full(HOURS_PER_DAY, np.nan)
    source = np.array([""] * HOURS_PER_DAY, dtype=object)
    h = pair.hours["utc_hour"].to_numpy()
    rate[h] = pair.hours["requests_per_s"].to_numpy()
    source[h] = "log"
    workload = s.workloads.get(pair.workload)
    if fill == "profile" and workload is not None and len(h) < HOURS_PER_DAY:
        name = workload.diurnal_profile
        local = np.arange(HOURS_PER_DAY) + s.metros[pair.metro].utc_offset_hours
        shape = profile_at(s.diurnal[name], local)
        seconds = pair.hours["seconds"].to_numpy()
        denominator = float((seconds * shape[h] ** 2).sum())
        if denominator > 0:
            anchor = float((seconds * pair.hours["requests_per_s"].to_numpy() * shape[h]).sum()) / denominator
            missing = np.setdiff1d(np.arange(HOURS_PER_DAY), h)
            rate[missing] = anchor * shape[missing]
            source[missing] = f"profile {name}"
    return pd.DataFrame({"hour": np.arange(HOURS_PER_DAY), "requests_per_s": rate, "source": source})


def fill_note(hourly: pd.DataFrame) -> str:
    """What a `hourly_rates` frame took from where, in words."""
    measured = hourly.loc[hourly["source"] == "log", "hour"].tolist()
    filled = hourly[(hourly["source"] != "log") & hourly["requests_per_s"].notna()]
    if filled.empty:
        left = HOURS_PER_DAY - len(measured)
        return "every UTC hour from the log" if not left else f"{left} UTC hours the log does not cover have no demand"
    return (f"UTC hours {hour_ranges(filled['hour'])} filled from {filled['source'].iloc[0]}, anchored to the "
            f"log's hours {hour_ranges(measured)}")


def demand_rows(d: Derived, s: Scenario, fill: str = "profile") -> pd.DataFrame:
    """The ``demand.table`` rows (metro, workload, period, hour, requests_per_s)."""
    frames = []
    for pair in d.pairs:
        hourly = hourly_rates(pair, s, fill).dropna(subset=["requests_per_s"])
        here = log_period(pair, s)
        g = pair.growth["per_period"] if pair.growth else 0.0
        for i, period in enumerate(s.horizon.periods):
            frames.append(pd.DataFrame({"metro": pair.metro, "workload": pair.workload, "period": period.id,
                                        "hour": hourly["hour"].to_numpy(),
                                        "requests_per_s": hourly["requests_per_s"].to_numpy() * (1 + g) ** (i - here)}))
    return pd.concat(frames, ignore_index=True)


def workload_rows(d: Derived) -> pd.DataFrame:
    """Per workload: the derived fields of its scenario row (pooled over its metros)."""
    rows = []
    for k in sorted({p.workload for p in d.pairs}):
        pairs = [p for p in d.pairs if p.workload == k]
        requests = np.array([p.requests for p in pairs], dtype=float)
        row = {"id": k}
        for name, parts in (("isl", [p.isl for p in pairs]), ("osl", [p.osl for p in pairs])):
            lengths = Lengths.merge(parts)
            mean = lengths.mean
            row[f"{name}_mean_tokens"] = round(mean, 1)
            row[f"{name}_p99_tokens"] = float(min(lengths.quantile(0.99), np.floor(MAX_P99_OVER_MEAN * mean)))
        factor = float((requests * [p.burstiness("peak_to_mean_per_minute") for p in pairs]).sum() / requests.sum())
        row["peak_to_mean_intra_hour"] = round(min(max(factor, 1.0), PEAK_FACTOR_MAX), 3)
        hits = [p for p in pairs if p.cache_hit_rate is not None]
        if len(hits) == len(pairs):
            hit_requests = np.array([p.cache_hit_rate * p.requests for p in hits])
            row["prompt_cache_hit_rate"] = round(float(hit_requests.sum() / requests.sum()), 4)
            row["shared_prefix_tokens"] = round(float((hit_requests * [p.cached_tokens_on_hit for p in hits]).sum()
                                                      / max(hit_requests.sum(), 1.0)), 1)
        row["requests"] = int(requests.sum())
        rows.append(row)
    return pd.DataFrame(rows)
