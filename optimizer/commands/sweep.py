"""Sensitivity sweeps: the same scenario planned over ranges of its inputs.

A sweep varies dotted scenario paths — the same paths as `fleetplan plan --set`
(`prices.h200-sxm.ondemand_usd_per_gpu_hour`, `workloads.chat.ttft_p99_ms`,
`demand.growth_per_period`, `serving.decode_mbu`) — over values given as a list
(`1,2,3`), a range (`start:stop:step`, stop included) or multipliers of the scenario's
value (`×0.5,×1,×1.5`). Runs are the grid of all combinations or one key at a time around
the scenario as written (for tornado charts).

Each run is one plan; its row holds the varied values (one column per key, named by its
path) and the run's summary figures. A run that fails — infeasible, bad value, time limit —
is a row with its status and diagnosis, never the end of the sweep. The table is rewritten
after every run, so an interrupted sweep re-run skips what is done (runs are keyed by their
overrides). Runs go to a local process pool or, unchanged, to a Dask cluster.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.errors import FleetplanError, Origin, ScenarioError, shorten
from optimizer.base.outputs import (
    SWEEP,
    atomic_file,
    folder_target,
    unescape_text,
    write_csv,
)
from optimizer.base.sources import limit, over_limit, read_text

# with reuse, each worker plans its runs in this many batches, a batch in a row sharing one
# model: few builds, and no worker left alone with a long tail while the others idle
BATCHES_PER_WORKER = 2
SUMMARY_FIELDS = ("status", "mip_gap", "total_cost_usd", "objective_usd", "best_bound_usd", "cost_per_million_tokens_usd",
                  "reserved_share_of_gpu_hours", "tokens_per_s_per_mw", "unserved_fraction", "average_utilization",
                  "goodput_tokens_per_s_avg", "solve_seconds")


def _site_shares(routing) -> dict[str, float]:
    """Each site's share of the requests/s the plan routes, summed over its planned slices."""
    if routing.empty:
        return {}
    by_site = routing.groupby("site")["requests_per_s"].sum()
    return (by_site / by_site.sum()).round(4).to_dict()


def parse_values(text: str) -> list:
    """'1,2,3' | 'start:stop:step' (stop included) | '×0.5,×1' (or 'x0.5') → list of values
    (numbers where they parse; multipliers kept as '×F' strings for `--set`)."""
    text = text.strip()
    if not text:
        raise ScenarioError("empty list of values", field="--vary")
    if ":" in text and "," not in text:
        try:
            start, stop, step = (float(x) for x in text.split(":"))
        except ValueError:
            raise ScenarioError(f"'{shorten(text)}' should be start:stop:step", field="--vary") from None
        if not all(math.isfinite(v) for v in (start, stop, step)) or step <= 0 or stop < start:
            raise ScenarioError(f"'{shorten(text)}': expected finite numbers, step > 0 and stop ≥ start", field="--vary")
        count = int(np.floor((stop - start) / step + 1e-9)) + 1
        if count > limit("FLEETPLAN_MAX_SWEEP_RUNS"):
            raise ScenarioError(over_limit("FLEETPLAN_MAX_SWEEP_RUNS", f"'{shorten(text)}' makes {count:,} values"),
                                field="--vary")
        return [_number(start + i * step) for i in range(count)]
    out = []
    for token in text.split(","):
        token = token.strip()
        if token[:1] in ("×", "x", "*") and isinstance(_number_or_text(token[1:]), (int, float)):
            value = _number_or_text(token[1:])
            if not (math.isfinite(value) and value >= 0):
                raise ScenarioError(f"'{shorten(token)}': a multiplier must be a finite number ≥ 0", field="--vary")
            out.append("×" + token[1:])
        else:
            value = _number_or_text(token)
            if isinstance(value, float) and not math.isfinite(value):
                raise ScenarioError(f"'{shorten(token)}': expected a finite number", field="--vary")
            out.append(value)
    return out


def _number(x: float):
    r = round(x, 10)
    return int(r) if float(r).is_integer() else r


def _number_or_text(token: str):
    try:
        return _number(float(token))
    except ValueError:
        return token


def parse_vary(items: list[str]) -> dict[str, list]:
    out = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"--vary '{item}' should look like KEY=V1,V2,…", field="--vary")
        out[key.strip()] = parse_values(values)
    return out


def runs_of(vary: dict[str, list], mode: str) -> list[dict]:
    """The overrides of every run: the grid, or one key at a time (plus the scenario as written)."""
    keys = list(vary)
    count = math.prod(len(v) for v in vary.values()) if mode == "grid" else 1 + sum(len(v) for v in vary.values())
    if count > limit("FLEETPLAN_MAX_SWEEP_RUNS"):
        raise ScenarioError(over_limit("FLEETPLAN_MAX_SWEEP_RUNS", f"the sweep has {count:,} runs"), field="--vary")
    if mode == "grid":
        return [dict(zip(keys, combo)) for combo in itertools.product(*(vary[k] for k in keys))]
    if mode != "one-at-a-time":
        raise ScenarioError(f"unknown sweep mode '{mode}' (expected grid or one-at-a-time)", field="--mode")
    runs = [{}]
    for k in keys:
        runs += [{k: v} for v in vary[k] if v not in ("×1", "×1.0")]
    return runs


def check_values(scenario, vary: dict[str, list]) -> None:
    """Every key and value of the sweep applied alone to the scenario and validated, before
    any run: a misspelt key or a value out of range ends the sweep at once with the rule it
    breaks, instead of as many failure rows as it has runs."""
    from optimizer.scenario import apply_overrides, load_raw, validate

    raw = load_raw(scenario)
    for key, values in vary.items():
        for value in values:
            validate(apply_overrides(raw, [f"{key}={value}"], flag="--vary"))


def run_id(overrides: dict) -> str:
    return hashlib.sha256(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunSpec:
    scenario: str | None
    overrides: dict
    time_limit_s: float | None
    mip_gap: float | None
    reuse: bool
    effort: str = "first"  # a sweep run stops at its first whole plan unless asked for more
    basis: tuple | None = None  # the base run's final master basis, every run's start


def run_batch(specs: list[RunSpec]) -> list[dict]:
    """Plan a few runs in one worker, in order; with reuse they share one model cache."""
    from optimizer.solve import ModelCache

    cache = ModelCache() if any(spec.reuse for spec in specs) else None
    return [run_one(spec, cache) for spec in specs]


def run_one(spec: RunSpec, cache=None) -> dict:
    """Plan one run, its master started from ``spec.basis`` where given; never raises — a failure
    becomes a row with its status and diagnosis."""
    from optimizer.commands.pipeline import plan_scenario, settings_from
    from optimizer.scenario import load_scenario
    from optimizer.solve import ModelCache

    cache = cache or ModelCache()
    cache.start_basis = spec.basis
    start = time.perf_counter()
    row = {"run_id": run_id(spec.overrides), **spec.overrides}
    try:
        s, raw = load_scenario(spec.scenario, [f"{k}={v}" for k, v in spec.overrides.items()])
        # a row reports no predicted p99s: the runs skip them (plan_tables)
        plan = plan_scenario(s, raw, settings_from(s, spec.time_limit_s, spec.mip_gap, effort=spec.effort,
                                                              workers=1), cache=cache, predictions=False)
        sm = plan.summary
        row.update({f: sm.get(f) for f in SUMMARY_FIELDS})
        row.update({f"gpus_{g}": n for g, n in sm["gpus_by_type_peak"].items()})
        row["carbon_t_per_year"] = (sm.get("carbon") or {}).get("t_per_year")
        row.update({f"share_{site}": v for site, v in _site_shares(plan.tables["routing"]).items()})
        row["diagnosis"] = ""
    except FleetplanError as exc:
        row.update(status=_status_of(exc), diagnosis=str(exc))
    except Exception as exc:  # a bug in one run must not end the sweep; the row says what happened
        row.update(status="error", diagnosis=f"{type(exc).__name__}: {exc}")
    row["wall_seconds"] = time.perf_counter() - start
    return row


def _status_of(exc: FleetplanError) -> str:
    return {2: "bad_input", 3: "infeasible", 5: "time_limit_no_plan", 6: "numerical_trouble"}.get(exc.exit_code, "failed")


def _write(rows: list[dict], out: Path, vary: dict) -> pd.DataFrame:
    front = ["run_id", *vary]
    table = pd.DataFrame(rows)
    for key in vary:
        if key not in table:
            table[key] = None
    cols = front + [c for c in table.columns if c not in front]
    table = table[cols].sort_values("run_id", kind="stable").reset_index(drop=True)
    write_csv(table, out / "sweep.csv")
    with atomic_file(out / "sweep.parquet") as tmp:
        _parquet_ready(table).to_parquet(tmp, index=False)
    return table


def _parquet_ready(table: pd.DataFrame) -> pd.DataFrame:
    """Varied columns may mix numbers and '×F' strings; parquet wants one type per column."""
    out = table.copy()
    for c in out.columns:
        if out[c].dtype == object:
            out[c] = out[c].map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    return out


def _done(out: Path) -> list[dict]:
    path = out / "sweep.csv"
    if not path.exists():
        return []
    try:
        table = pd.read_csv(io.StringIO(read_text(path, "sweep table")), dtype={"run_id": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise ScenarioError(f"the finished runs cannot be read back ({shorten(str(exc).splitlines()[0])}); move the "
                            "file away to start the sweep afresh", Origin(str(path))) from None
    if "run_id" not in table:
        raise ScenarioError("no run_id column: not a sweep table fleetplan wrote; move the file away to start the sweep "
                            "afresh", Origin(str(path), 1))
    table = table.map(unescape_text)
    return [{k: v for k, v in row.items() if not (isinstance(v, float) and np.isnan(v))} for row in table.to_dict("records")]


class _Progress:
    def __init__(self, total: int, done: int, stream=sys.stderr):
        self.total, self.done, self.start, self.stream = total, done, time.perf_counter(), stream
        self.first = done

    def step(self, row: dict) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        rate = (self.done - self.first) / elapsed if elapsed > 0 else 0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{elapsed:5.0f} s elapsed, ~{eta:5.0f} s left  last: {row.get('status')}   ")
        self.stream.flush()
        if self.done == self.total:
            self.stream.write("\n")


def sweep(scenario=None, vary: dict[str, list] | None = None, mode: str = "grid", *, executor: str = "local",
          workers: int = 2, scheduler: str | None = None, out: str | Path | None = None, reuse: bool = False,
          time_limit_s: float | None = None, mip_gap: float | None = None, progress: bool = True,
          effort: str = "first") -> pd.DataFrame:
    """Plan every run of the sweep (skipping runs already in ``out``) and return the table.
    Each run stops at its first whole plan unless ``effort`` asks for more ("quick",
    "thorough"; its slice programs then run in the run's own process).

    executor "local": a process pool of ``workers``; "dask": a Dask cluster at ``scheduler``
    (a local `dask.distributed` cluster of ``workers`` processes when none is given).
    ``reuse``: a worker keeps its last model and refreshes coefficients when the next run has
    the same structure (faster; results equal the individual runs within the reported gap —
    without it they equal them exactly).
    """
    vary = vary or {}
    runs = runs_of(vary, mode)
    check_values(scenario, vary)
    out_dir = folder_target(out if out is not None else "sweep", SWEEP, inputs=[scenario] if scenario else [])
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = [RunSpec(str(scenario) if scenario else None, o, time_limit_s, mip_gap, reuse, effort) for o in runs]
    done = _done(out_dir)
    finished = {r["run_id"] for r in done}
    rows = [r for r in done if r["run_id"] in {run_id(spec.overrides) for spec in specs}]
    base, row, basis = _base_run(specs, finished)
    if row is not None:
        rows.append(row)
        finished.add(row["run_id"])
    todo = [replace(spec, basis=basis) for spec in specs if run_id(spec.overrides) not in finished]
    bar = _Progress(len(specs), len(rows)) if progress else None
    size = max(1, -(-len(todo) // (max(workers, 1) * BATCHES_PER_WORKER))) if reuse else 1
    batches = [todo[i:i + size] for i in range(0, len(todo), size)]
    for batch_rows in _execute(batches, executor, workers, scheduler):
        for row in batch_rows:
            rows.append(row)
            if bar:
                bar.step(row)
        _write(rows, out_dir, vary)
    table = _write(rows, out_dir, vary) if rows else pd.DataFrame()
    if len(table):
        from optimizer.commands.report.sweep_page import write_sweep_report

        write_sweep_report(table, vary, mode, out_dir)
    return table


def _base_run(specs: list[RunSpec], finished: set) -> tuple[RunSpec | None, dict | None, tuple | None]:
    """The base run (no overrides, else the first in run-id order) planned here from a cold
    start: (its spec, its row unless already finished, its master's final basis — where every
    other run's master starts, so that each run's result is the same in any order and on any
    number of workers; the base run's own plan is the one a start from that basis gives)."""
    from optimizer.solve import ModelCache

    if len(specs) < 2:
        return None, None, None
    base = min(specs, key=lambda spec: (bool(spec.overrides), run_id(spec.overrides)))
    cache = ModelCache()
    row = run_one(base, cache)
    return base, (None if run_id(base.overrides) in finished else row), cache.last_basis


def _execute(batches: list[list[RunSpec]], executor: str, workers: int, scheduler: str | None):
    if not batches:
        return
    if executor == "local":
        if workers <= 1:
            for batch in batches:
                yield run_batch(batch)
            return
        # spawned, not forked: a child forked after this process ran HiGHS inherits its thread
        # pool's locks without the threads and spins forever in its first solve
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(run_batch, batch) for batch in batches]
            for fut in as_completed(futures):
                yield fut.result()
        return
    if executor == "dask":
        yield from _dask(batches, workers, scheduler)
        return
    raise ScenarioError(f"unknown executor '{executor}' (expected local or dask)", field="--executor")


def _dask(batches: list[list[RunSpec]], workers: int, scheduler: str | None):
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError:
        raise ScenarioError("the Dask executor needs dask[distributed]: pip install -e '.[dask]'", field="--executor") from None
    cluster = None if scheduler else LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                  dashboard_address=None)
    client = Client(scheduler or cluster)
    try:
        futures = client.map(run_batch, batches, pure=False)
        for fut in dask_completed(futures):
            yield fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def sweep_text(table: pd.DataFrame, vary: dict[str, list], out) -> str:
    """The runs of a sweep in ``out`` (its inputs, status, cost, gap, time) and the files written."""
    cols = ["run_id", *vary, "status", "total_cost_usd", "cost_per_million_tokens_usd", "mip_gap", "wall_seconds"]
    shown = table[[c for c in cols if c in table]]
    return "\n".join([
        shown.to_string(index=False, float_format=lambda x: f"{x:,.4g}"),
        f"{len(table)} runs → {Path(out) / 'sweep.csv'} and sweep.parquet"
        + (f", tornado chart {Path(out) / 'tornado.png'}" if (Path(out) / "tornado.png").exists() else "")
        + f", report {Path(out) / 'sweep.html'}",
    ])
