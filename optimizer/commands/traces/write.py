"""The demand folder `fleetplan demand --out DIR` writes, all at once (a temporary sibling
folder renamed into place, so an interrupted run leaves nothing half-written):

  demand.csv      the scenario's ``demand.table`` rows (metro, workload, period, hour, requests_per_s)
  workloads.csv   per workload, the fields derived from the log (a patch of its scenario row)
  hours.csv       per (metro, workload, UTC hour): the local hour, requests, seconds, measured
                  rate, the rate the table uses and where it comes from (the log or a profile fill)
  lengths.csv     the empirical length distributions (metro, workload, quantity, tokens, requests)
  scenario.yaml   a scenario snippet: metros, workload patches, the demand table, the logs
  derived.json    everything above per (metro, workload), with notes and warnings
  kv_reuse.csv    per workload, its prefix reuse (data/kv_reuse.csv's columns), only where the
                  logs carry prefix or session ids; scenario.yaml then reads it (kv_cache.reuse)
  report.html     the day's rates, the log's minutes and the length histograms (also as PNGs)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import yaml

from optimizer.base.outputs import DEMAND, atomic_folder, folder_target
from optimizer.base.units import HOURS_PER_DAY
from optimizer.commands.traces import report
from optimizer.commands.traces.derive import Derived
from optimizer.commands.traces.reuse import kv_reuse_table
from optimizer.commands.traces.table import demand_rows, fill_note, hourly_rates, workload_rows
from optimizer.scenario import Scenario
from optimizer.scenario.trace_spec import TraceSpec

DERIVED_FIELDS = ("isl_mean_tokens", "isl_p99_tokens", "osl_mean_tokens", "osl_p99_tokens", "peak_to_mean_intra_hour",
                  "prompt_cache_hit_rate", "shared_prefix_tokens")


def lengths_table(d: Derived) -> pd.DataFrame:
    frames = []
    for p in d.pairs:
        for quantity, lengths in (("prompt", p.isl), ("output", p.osl)):
            frames.append(pd.DataFrame({"metro": p.metro, "workload": p.workload, "quantity": quantity,
                                        "tokens": lengths.tokens, "requests": lengths.requests}))
    return pd.concat(frames, ignore_index=True)


def hours_table(d: Derived, hourly: dict, s: Scenario) -> pd.DataFrame:
    """Per (metro, workload, UTC hour): the metro's local hour, what the log measured, the rate
    the table uses and where it comes from — the day's profile in local time."""
    frames = []
    for p in d.pairs:
        h = hourly[(p.metro, p.workload)].rename(columns={"requests_per_s": "requests_per_s_used"})
        measured = p.hours.rename(columns={"utc_hour": "hour", "requests_per_s": "requests_per_s_measured"})
        local = (h["hour"] + s.metros[p.metro].utc_offset_hours) % HOURS_PER_DAY
        frames.append(h.merge(measured, on="hour", how="left").assign(metro=p.metro, workload=p.workload,
                                                                      local_hour=local))
    cols = ["metro", "workload", "hour", "local_hour", "requests", "seconds", "requests_per_s_measured",
            "requests_per_s_used", "source"]
    return pd.concat(frames, ignore_index=True)[cols]


def snippet(d: Derived, workloads: pd.DataFrame, specs: list[TraceSpec], out: Path) -> str:
    """A scenario snippet using the folder's files (paths relative to the folder)."""
    patch = {r["id"]: {k: _plain(r[k]) for k in DERIVED_FIELDS if k in r and pd.notna(r[k])}
             for r in workloads.to_dict("records")}
    files = []
    for spec in specs:
        entry = {"path": os.path.relpath(Path(spec.path).resolve(), out)}
        entry.update({k: v for k, v in (("metro", spec.metro), ("workload", spec.workload), ("tz", spec.tz),
                                        ("timestamp_format", spec.timestamp_format)) if v and v != "UTC"})
        if spec.columns:
            entry["columns"] = dict(spec.columns)
        files.append(entry)
    doc = {"metros": {"ids": sorted({p.metro for p in d.pairs})},
           "workloads": {"ids": sorted(patch), "patch": patch},
           "demand": {"table": "demand.csv"},
           "traces": {"files": files}}
    if d.reuse:
        doc["kv_cache"] = {"reuse": "kv_reuse.csv"}
    head = (f"# Derived by `fleetplan demand` from {sum(f['rows'] for f in d.files):,} requests "
            f"({', '.join(Path(f['path']).name for f in d.files)}).\n"
            "# Merge into a scenario next to this folder's demand.csv: the workload fields patch the catalogue\n"
            "# rows, the demand table replaces the modelled demand, traces records where it came from.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=110)


def _plain(x):
    return x.item() if hasattr(x, "item") else x


def write_demand(d: Derived, s: Scenario, specs: list[TraceSpec], out_dir, fill: str = "profile") -> Path:
    inputs = [spec.path for spec in specs]
    out = folder_target(out_dir, DEMAND, inputs=inputs)
    hourly = {(p.metro, p.workload): hourly_rates(p, s, fill) for p in d.pairs}
    for p in d.pairs:
        p.notes.append(fill_note(hourly[(p.metro, p.workload)]))
    workloads = workload_rows(d)
    with atomic_folder(out, DEMAND, inputs) as tmp:
        demand_rows(d, s, fill).to_csv(tmp / "demand.csv", index=False, float_format="%.6g")
        workloads.to_csv(tmp / "workloads.csv", index=False)
        hours_table(d, hourly, s).to_csv(tmp / "hours.csv", index=False, float_format="%.6g")
        lengths_table(d).to_csv(tmp / "lengths.csv", index=False)
        (tmp / "scenario.yaml").write_text(snippet(d, workloads, specs, out))
        (tmp / "derived.json").write_text(json.dumps({**d.as_dict(), "workloads": workloads.to_dict("records")},
                                                     indent=2, default=_plain) + "\n")
        figures = {"the day": report.day_figure(d, hourly), "the log's minutes": report.minutes_figure(d),
                   "lengths": report.lengths_figure(d)}
        for name, data in zip(("day.png", "minutes.png", "lengths.png"), figures.values()):
            (tmp / name).write_bytes(data)
        (tmp / "report.html").write_text(report.render(d, figures, workloads))
        if d.reuse:
            kv_reuse_table(d.reuse).to_csv(tmp / "kv_reuse.csv", index=False, float_format="%.6g")
    return out
