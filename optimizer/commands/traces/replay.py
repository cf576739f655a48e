"""A request log as `verify`'s arrival source, and the Poisson and trace runs side by side.

`trace_arrivals` reads logs whole (memory: 40 bytes a request) into one `Stream` per
(metro, workload) in arrival order, plus one per workload pooling its metros, which routes
from metros the log does not name replay. `read_lengths` reads a demand folder's
lengths.csv for Poisson runs with the log's lengths. `side_by_side` puts a Poisson run and a
trace run of the same plan together per workload.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.errors import Origin, ScenarioError, unknown_id_message
from optimizer.commands.traces.read import ReadState, file_kind, iter_chunks
from optimizer.commands.verify.arrivals import Stream, Trace
from optimizer.curves.lengths import EmpiricalLengths
from optimizer.scenario.trace_spec import TraceSpec

LENGTH_COLUMNS = ("workload", "quantity", "tokens", "requests")


def _streams(specs: list[TraceSpec], workloads) -> dict:
    parts: dict = {}
    for spec in specs:
        state = ReadState(spec, file_kind(spec.path))
        for chunk in iter_chunks(spec, state):
            has_cached = chunk.cached is not None
            cached = chunk.cached if has_cached else np.full(len(chunk.t_ns), -1, np.int64)
            for m in np.unique(chunk.metro):
                for k in np.unique(chunk.workload):
                    sel = (chunk.metro == m) & (chunk.workload == k)
                    if sel.any():
                        key = (state.metros[m], state.workloads[k])
                        parts.setdefault(key, []).append((chunk.t_ns[sel], chunk.prompt[sel], chunk.output[sel],
                                                          cached[sel]))
        for (kind, name), row in state.first_rows.items():
            if kind == "workload" and name is None:
                raise ScenarioError("the log has no workload column; name its workload: --trace WORKLOAD=FILE",
                                    state.origin(row), field="workload")
            if kind == "workload" and name not in workloads:
                raise ScenarioError(unknown_id_message("workload", name, workloads) + " (the plan's)",
                                    state.origin(row), field="workload")
    return parts


def _stream(parts: list) -> Stream:
    t, isl, osl, cached = (np.concatenate([p[i] for p in parts]) for i in range(4))
    order = np.argsort(t, kind="stable")
    cached = cached[order]
    return Stream(t[order], isl[order], osl[order], None if (cached < 0).any() else cached)


def trace_arrivals(specs: list[TraceSpec], workloads, scale: str = "planned", **options) -> Trace:
    """Logs → a `Trace` source (`optimizer.commands.verify.arrivals`) for the plan's ``workloads``;
    ``options`` go to `Trace` (``jitter_gaps``)."""
    split = {k: w.prompt_part for k, w in workloads.items() if w.prompt_part is not None}
    parts = _streams(specs, {**workloads, **{p.parent: None for p in split.values()}})
    streams = {key: _stream(p) for key, p in parts.items()}
    for k in {k for _, k in parts}:
        if (None, k) not in streams:
            streams[(None, k)] = _stream([x for (m, kk), p in parts.items() if kk == k for x in p])
    for k, part in split.items():  # a part of a workload split by prompt length replays its prompts' range
        for (m, parent), stream in list(streams.items()):
            if parent != part.parent:
                continue
            sub = _part_of(stream, part.from_tokens, part.below_tokens)
            if len(sub.t_ns):
                streams[(m, k)] = sub
    return Trace(streams, scale, **options)


def _part_of(stream: Stream, from_tokens: float, below_tokens: float | None) -> Stream:
    """The requests of ``stream`` whose prompts are from_tokens ≤ prompt < below_tokens."""
    keep = (stream.isl >= from_tokens) & (stream.isl < (np.inf if below_tokens is None else below_tokens))
    return Stream(stream.t_ns[keep], stream.isl[keep], stream.osl[keep],
                  None if stream.cached is None else stream.cached[keep])


def read_lengths(path, scenario) -> dict:
    """A demand folder's lengths.csv → workload → (prompt, output) `EmpiricalLengths`, pooled
    over metros, for the plan's workloads it names."""
    path = Path(path)
    try:
        t = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"cannot read the lengths file: {exc}", Origin(str(path))) from None
    missing = [c for c in LENGTH_COLUMNS if c not in t]
    if missing:
        raise ScenarioError(f"missing column(s) {', '.join(missing)}; expected the lengths.csv `fleetplan demand` "
                            "writes", Origin(str(path), 1))
    out = {}
    for k, rows in t.groupby("workload"):
        if k not in scenario.workloads:
            line = int(rows.index[0]) + 2
            raise ScenarioError(unknown_id_message("workload", k, scenario.workloads) + " (the plan's)",
                                Origin(str(path), line), field="workload")
        top = scenario.models[scenario.workloads[k].model].max_context
        pair = []
        for quantity in ("prompt", "output"):
            counts = rows[rows["quantity"] == quantity].groupby("tokens")["requests"].sum()
            if counts.empty or (counts < 0).any() or (counts.index < 0).any():
                raise ScenarioError(f"workload {k}: expected {quantity} lengths with non-negative tokens and "
                                    "requests", Origin(str(path)), field="quantity")
            pair.append(EmpiricalLengths(counts.index.to_numpy(), counts.to_numpy(), top))
        out[k] = tuple(pair)
    return out


def _per_workload(result) -> pd.DataFrame:
    """Per workload: requests, worst group's p99s and attainments, the attainment over all its
    requests (request-weighted), and whether every group passes."""
    t = result.tables["by_pool"]
    g = t.groupby("workload")
    weight = t["requests"]
    return pd.DataFrame({
        "requests": g["requests"].sum(),
        "ttft_p99_ms": g["ttft_p99_ms"].max(),
        "itl_p99_ms": g["itl_p99_ms"].max(),
        "ttft_attainment": (t["ttft_attainment"] * weight).groupby(t["workload"]).sum() / g["requests"].sum(),
        "ttft_attainment_worst_group": g["ttft_attainment"].min(),
        "itl_attainment": (t["itl_attainment"] * weight).groupby(t["workload"]).sum() / g["requests"].sum(),
        "passes": g["ttft_pass"].all() & g["itl_pass"].all(),
    })


def side_by_side(poisson, trace) -> pd.DataFrame:
    """One row per workload: the Poisson run's figures beside the trace run's, with the
    objectives."""
    p, t = _per_workload(poisson), _per_workload(trace)
    by_pool = poisson.tables["by_pool"].groupby("workload")
    objectives = pd.DataFrame({"ttft_p99_ms_objective": by_pool["ttft_p99_ms_objective"].first(),
                               "itl_p99_ms_objective": by_pool["itl_p99_ms_objective"].first(),
                               "slo_attainment": by_pool["slo_attainment"].first()})
    out = p.add_suffix("_poisson").join(t.add_suffix("_trace"), how="outer").join(objectives)
    cols = ["requests", "ttft_p99_ms", "itl_p99_ms", "ttft_attainment", "ttft_attainment_worst_group",
            "itl_attainment", "passes"]
    order = [f"{c}_{k}" for c in cols for k in ("poisson", "trace")]
    return out[order + list(objectives.columns)].reset_index()


def verify_against_trace(plan_dir, poisson, trace, **options) -> tuple[dict, pd.DataFrame]:
    """`verify --trace`: the plan in ``plan_dir`` verified under ``poisson`` arrivals and under
    the log's replay ``trace`` (`verify_plan`'s ``options``); verify.csv, verify_trace.csv and
    verify_compare.csv written, both runs recorded in summary.json. The runs and their
    side-by-side table."""
    from optimizer.base.outputs import write_csv
    from optimizer.commands.verify import record_verification, verify_plan, write_verify

    d = Path(plan_dir)
    runs = {name: verify_plan(d, arrivals=arrivals, **options) for name, arrivals in (("poisson", poisson), ("trace", trace))}
    for name, key, result in (("verify", "verification", runs["poisson"]),
                              ("verify_trace", "verification_trace", runs["trace"])):
        write_verify(result, d, name)
        record_verification(result, d, key)
    table = side_by_side(runs["poisson"], runs["trace"])
    write_csv(table, d / "verify_compare.csv", float_format="%.6g")
    return runs, table
