"""Reading a plan folder as an input: a person may have edited, truncated or half-copied it.

Every file is checked before any command uses it, and the first problem is a
`ScenarioError` naming the file, the row (its line in the file) and the column:

1. the files are there, regular, within the size limit, UTF-8 and not empty;
2. summary.json and scenario.json are JSON objects; the summary's headline fields have their
   types; scenario.json validates as a scenario (`optimizer.scenario.validate`);
3. each table has its columns, and each cell its type and range (`schema.TABLE_COLUMNS`);
4. the tables agree with the scenario and with each other: sites, accelerators, workloads,
   metros and slices exist; every pool's config is in curves.csv with its GPUs; the replicas
   of each (site, accelerator, slice) fit the nodes procurement.csv buys there; a pool with
   load has replicas; the requests routed into each (site, workload, tier, slice) are the
   requests its prefill and colocated pools take, and each prefill class hands its requests
   to decode pools of that class.

So an inconsistent folder never reaches a simulation that would report "all objectives met".
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.outputs import unescape_text
from optimizer.base.sources import read_text
from optimizer.base.spot import spot_loss
from optimizer.base.units import Role
from optimizer.folder.schema import OPTIONAL_TABLES, TABLE_COLUMNS, Column
from optimizer.instance.prompt_split import candidates, with_split
from optimizer.results import Plan
from optimizer.scenario import RawScenario, Scenario, validate

REQUIRED = ("summary.json", "scenario.json") + tuple(f"{name}.csv" for name in TABLE_COLUMNS if name not in OPTIONAL_TABLES)
BALANCE_TOLERANCE = 1e-6  # relative, on requests/s (tables carry 12 significant digits)

# the summary's fields that other commands read, with their JSON types
SUMMARY_FIELDS = {
    "scenario": (str,), "status": (str,), "total_cost_usd": (int, float), "settings": (dict,),
    "overrides": (list,), "gpus_by_type_peak": (dict,), "cost_usd_by_workload": (dict,),
    "cost_per_million_tokens_usd_by_workload": (dict,), "reserved_share_of_gpu_hours": (int, float),
    "average_utilization": (int, float), "unserved_fraction": (int, float), "mip_gap": (int, float),
}

# fields read where present (reports, comparisons): their JSON types, null allowed
SUMMARY_OPTIONAL = {
    "scenario_sha256": (str,), "versions": (dict,), "best_bound_usd": (int, float), "mip_gap_target": (int, float),
    "cost_per_million_tokens_usd": (int, float), "goodput_tokens_per_s_avg": (int, float),
    "goodput_tokens_per_s_peak": (int, float), "tokens_per_s_per_mw": (int, float), "baseline_cost_usd": (int, float),
    "quality": (str,), "bounds": (list,), "gap_split": (dict,), "gap_history": (list,),
    "baseline_cannot_serve": (dict,), "baseline_comparison": (dict,), "token_billing": (dict,), "kv_cache": (dict,),
    "carbon": (dict,), "fleet": (dict,), "spot": (dict,), "churn": (dict,), "robust": (dict,),
    "baseline_cost_usd_by_workload": (dict,), "verification": (dict,),
}

NOISE_RPS = 1e-6  # requests/s


def json_object(path: Path, what: str) -> dict:
    """A JSON object fleetplan wrote, or an error naming the file (empty, truncated, edited)."""
    text = read_text(path, what)
    if not text.strip():
        raise ScenarioError(f"the file is empty (expected {what} written by fleetplan plan)", Origin(str(path)))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"not valid JSON ({exc.msg} at column {exc.colno}); the file may be truncated or edited",
                            Origin(str(path), exc.lineno)) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"expected a JSON object ({what}), got {type(data).__name__}", Origin(str(path), 1))
    return data


def _check_summary(summary: dict, path: Path) -> None:
    for key, kinds in SUMMARY_FIELDS.items():
        if key not in summary:
            raise ScenarioError("missing (a plan's summary always has it)", Origin(str(path)), field=key)
    for key, kinds in {**SUMMARY_FIELDS, **SUMMARY_OPTIONAL}.items():
        value = summary.get(key)
        if key in SUMMARY_OPTIONAL and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, kinds) or \
                (isinstance(value, float) and not math.isfinite(value)):
            expected = " or ".join("a number" if k in (int, float) else {str: "text", dict: "an object",
                                                                          list: "a list"}[k] for k in kinds)
            raise ScenarioError(f"expected {expected}, got {json.dumps(value)[:60]}", Origin(str(path)), field=key)


def _cell_problem(col: Column, raw: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(parsed values, mask of bad cells) for one column read as text."""
    text = raw.map(unescape_text) if col.kind == "text" else raw
    empty = text.isna() | (text.astype(str).str.strip() == "")
    if col.kind == "text":
        bad = empty & (not col.empty)
        if col.choices:
            bad |= ~empty & ~text.isin(col.choices)
        return text.where(~empty, None), bad
    if col.kind == "bool":
        low = text.astype(str).str.strip().str.lower()
        bad = ~low.isin(("true", "false", "1", "0", "1.0", "0.0"))
        return low.isin(("true", "1", "1.0")), bad
    values = pd.to_numeric(text, errors="coerce")
    bad = values.isna() & ~(empty & col.empty)
    finite = values.notna()
    bad |= finite & ~np.isfinite(values.where(finite, 0.0))
    if col.low is not None:
        bad |= finite & (values < col.low)
    if col.high is not None:
        bad |= finite & (values > col.high)
    if col.kind == "int":
        bad |= finite & (values != values.round())
    return values, bad


def read_plan_table(path: Path, columns: tuple[Column, ...]) -> pd.DataFrame:
    """One table: every column present, every cell of its type and range."""
    text = read_text(path, "plan table (CSV)")
    if not text.strip():
        raise ScenarioError("the file is empty (expected a header row and the plan's rows)", Origin(str(path), 1))
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, ValueError) as exc:
        line = None
        detail = str(exc).splitlines()[0]
        if "line" in detail:
            digits = [int(w) for w in detail.replace(",", " ").split() if w.isdigit()]
            line = digits[-2] if len(digits) >= 2 else None
        raise ScenarioError(f"not a readable CSV table ({detail[:120]})", Origin(str(path), line)) from None
    for col in columns:
        if col.default is not None and col.name not in frame.columns:
            frame[col.name] = str(col.default)
    missing = [c.name for c in columns if c.name not in frame.columns]
    if missing:
        raise ScenarioError(f"missing column(s) {', '.join(missing)}; the file may be truncated or from another "
                            "version", Origin(str(path), 1), field=missing[0])
    out = {}
    for col in columns:
        values, bad = _cell_problem(col, frame[col.name])
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            got = frame[col.name].iloc[row]
            shown = "nothing (an empty cell)" if got is None or (isinstance(got, float) and math.isnan(got)) \
                else repr(str(got)[:40])
            raise ScenarioError(f"expected {col.expected()}, got {shown}", Origin(str(path), row + 2),
                                field=col.name)
        out[col.name] = values.astype("int64") if col.kind == "int" and not col.empty else values
    return pd.DataFrame(out, index=frame.index)


def read_folder(plan_dir) -> tuple[dict, dict, dict[str, pd.DataFrame]]:
    """(summary, scenario data, tables) of a plan folder, each file checked (steps 1–3)."""
    d = Path(plan_dir)
    if not d.is_dir():
        raise ScenarioError("not a folder; expected a plan folder written by fleetplan plan", Origin(str(d)))
    missing = [name for name in REQUIRED if not (d / name).exists()]
    if missing:
        raise ScenarioError(f"{', '.join(missing)} missing; a plan folder holds {', '.join(REQUIRED)} "
                            "(half-copied?)", Origin(str(d)))
    summary = json_object(d / "summary.json", "the plan's summary")
    _check_summary(summary, d / "summary.json")
    data = json_object(d / "scenario.json", "the plan's resolved scenario")
    tables = {name: read_plan_table(d / f"{name}.csv", cols) for name, cols in TABLE_COLUMNS.items()
              if name not in OPTIONAL_TABLES or (d / f"{name}.csv").exists()}
    return summary, data, tables


def read_plan(plan_dir: str | Path) -> Plan:
    """A plan folder as an input: every file checked, the tables against the scenario and
    each other (steps 1–4 of the module docstring); the first problem is an error naming
    file, row and column."""
    d = Path(plan_dir)
    summary, data, tables = read_folder(d)
    check_consistency(d, planned_scenario(validate(RawScenario(data, {}, d / "scenario.json")), summary, d), tables)
    return Plan(summary, tables, data)


def scenario_of(plan: Plan, plan_dir: str | Path) -> Scenario:
    """The validated scenario a plan folder records (its scenario.json), as the plan serves it:
    each workload split at the prompt length the plan kept (`optimizer.instance.prompt_split`)."""
    s = validate(RawScenario(plan.scenario_data, {}, Path(plan_dir) / "scenario.json"))
    return planned_scenario(s, plan.summary, plan_dir)


def planned_scenario(s: Scenario, summary: dict, plan_dir: str | Path = ".") -> Scenario:
    """``s`` with the prompt-length splits ``summary`` (the folder's summary.json) records in
    ``prompt_split.workloads.<id>.threshold_tokens``, each none or one of the workload's
    candidates (every workload with candidates kept whole where the summary has no block)."""
    where = Origin(str(Path(plan_dir) / "summary.json"))
    block = summary.get("prompt_split")
    recorded = block.get("workloads") if isinstance(block, dict) else None
    if block is not None and not isinstance(recorded, dict):
        raise ScenarioError("expected the prompt-length splits as a mapping of workloads (plan again)", where,
                            field="prompt_split.workloads")
    chosen = {}
    for k, thresholds in candidates(s).items():
        entry = (recorded or {}).get(k, {"threshold_tokens": None})
        t = entry.get("threshold_tokens", ...) if isinstance(entry, dict) else entry
        if t is not None and t not in thresholds:
            said = "no threshold" if t is ... else f"a split at {t!r} prompt tokens"
            raise ScenarioError(f"the plan records {said} for {k}; expected none (whole) or one of its candidates "
                                f"{', '.join(f'{x:g}' for x in thresholds)} (plan again)", where,
                                field=f"prompt_split.workloads.{k}.threshold_tokens")
        chosen[k] = None if t is None else float(t)
    return with_split(s, chosen)


# ---------------------------------------------------------------------------- consistency


def _first(frame: pd.DataFrame, mask, path: Path, column: str, message: str) -> None:
    mask = np.asarray(mask, dtype=bool)
    if mask.any():
        i = int(np.flatnonzero(mask)[0])
        raise ScenarioError(message.format(**frame.iloc[i].to_dict()), Origin(str(path), int(frame.index[i]) + 2),
                            field=column)


def check_consistency(d: Path, s, tables: dict[str, pd.DataFrame]) -> None:
    """Step 4 of the module docstring, against the validated scenario ``s``."""
    proc, pools, routing, slo, curves = (tables[n] for n in ("procurement", "pools", "routing", "slo", "curves"))
    path = {n: d / f"{n}.csv" for n in tables}
    slices = {(p.id, t.id, h) for p in s.horizon.periods for t in s.horizon.day_types for h in s.horizon.hours}
    nodes = proc[proc["gpu"] != "egress"]
    for name, frame, cols in (("procurement", nodes, ("site", "gpu")), ("pools", pools, ("site", "workload", "gpu")),
                              ("routing", routing, ("metro", "site", "workload")), ("slo", slo, ("metro", "workload", "site")),
                              ("curves", curves, ("workload", "gpu"))):
        known = {"site": s.sites, "gpu": s.accelerators, "workload": s.workloads, "metro": s.metros}
        for col in cols:
            _first(frame, ~frame[col].isin(list(known[col])), path[name], col,
                   f"'{{{col}}}' is not a {col} of the plan's scenario (scenario.json)")
        if name in ("pools", "routing"):
            key = list(zip(frame["period"], frame["day_type"], frame["hour"]))
            _first(frame, [k not in slices for k in key], path[name], "period",
                   "slice {period}/{day_type}/{hour} is not in the plan's horizon (scenario.json)")
    _first(proc, proc.duplicated(["site", "gpu"]), path["procurement"], "site",
           "{site}/{gpu} appears twice (one row per site and accelerator, and one for egress)")
    lost = pools["lost_site"].notna()
    losses = list(s.sites) + [spot_loss(x) for x in s.sites]
    _first(pools, lost & ~pools["lost_site"].isin(losses), path["pools"], "lost_site",
           "'{lost_site}' is not a site of the plan's scenario (nor spot@ one)")
    config = curves.set_index("id")
    _first(curves, curves["id"].duplicated(), path["curves"], "id", "config '{id}' appears twice")
    _first(pools, ~pools["config"].isin(config.index), path["pools"], "config",
           "config '{config}' is not in curves.csv (the folder mixes files of different plans?)")
    gpus = pools["config"].map(config["gpus"])
    _first(pools, gpus != pools["gpus_per_replica"], path["pools"], "gpus_per_replica",
           "{gpus_per_replica} GPUs per replica, but curves.csv gives config '{config}' another number")
    _first(pools, pools["config"].map(config["gpu"]) != pools["gpu"], path["pools"], "gpu",
           "accelerator '{gpu}' differs from config '{config}' in curves.csv")
    # a load below NOISE_RPS is the LP's rounding residue, which whole replicas treat as none
    _first(pools, (pools["requests_per_s"] > NOISE_RPS) & (pools["replicas"] == 0), path["pools"], "replicas",
           "a pool taking {requests_per_s} requests/s has no replicas")
    _check_fit(pools[~lost], nodes, s, path)
    _check_balance(pools[~lost], routing, path)
    if "nodes" in tables:
        _check_nodes(tables["nodes"], pools[~lost], nodes, s, path)


def _check_fit(pools: pd.DataFrame, nodes: pd.DataFrame, s, path: dict) -> None:
    """Replica GPUs of each (site, accelerator, slice) ≤ GPUs of the nodes bought there."""
    used = (pools["replicas"] * pools["gpus_per_replica"]).groupby(
        [pools["site"], pools["gpu"], pools["period"], pools["day_type"], pools["hour"]]).sum()
    bought = (nodes.set_index(["site", "gpu"])[["reserved_nodes", "ondemand_nodes_peak"]].sum(axis=1)
              .groupby(level=[0, 1]).sum())
    for (site, gpu, period, day_type, hour), n in used.items():
        have = int(bought.get((site, gpu), 0)) * s.accelerators[gpu].gpus_per_node
        if n > have:
            rows = pools[(pools["site"] == site) & (pools["gpu"] == gpu) & (pools["period"] == period)
                         & (pools["day_type"] == day_type) & (pools["hour"] == hour)]
            raise ScenarioError(f"the pools of {site}/{gpu} at {period}/{day_type}/{hour} need {n:,} GPUs, but "
                                f"procurement.csv buys at most {have:,} there; the folder's files do not agree",
                                Origin(str(path["pools"]), int(rows.index[0]) + 2), field="replicas")


def _check_nodes(table: pd.DataFrame, pools: pd.DataFrame, proc: pd.DataFrame, s, path: dict) -> None:
    """nodes.csv against the other tables: each (site, accelerator)'s committed nodes are
    procurement.csv's, its on-demand node-hours add up to procurement.csv's, and each slice's
    GPUs in replicas are pools.csv's, within the GPUs it provisions."""
    bought = proc.groupby(["site", "gpu"])[["reserved_nodes", "ondemand_node_hours"]].sum()
    key = list(zip(table["site"], table["gpu"]))
    _first(table, [k not in bought.index for k in key], path["nodes"], "site",
           "{site}/{gpu} has nodes but procurement.csv buys none there")
    _first(table, table["committed_nodes"].to_numpy() != np.array([bought.loc[k, "reserved_nodes"] for k in key]),
           path["nodes"], "committed_nodes", "{site}/{gpu} commits {committed_nodes} nodes, procurement.csv another number")
    hours = (table["ondemand_nodes"] * table["weight_hours"]).groupby([table["site"], table["gpu"]]).sum()
    for (site, gpu), v in hours.items():
        if abs(v - bought.loc[(site, gpu), "ondemand_node_hours"]) > BALANCE_TOLERANCE * max(v, 1.0):
            _first(table, (table["site"] == site) & (table["gpu"] == gpu), path["nodes"], "ondemand_nodes",
                   "{site}/{gpu}: its on-demand nodes add up to other node-hours than procurement.csv's")
    used = (pools["replicas"] * pools["gpus_per_replica"]).groupby(
        [pools["site"], pools["gpu"], pools["period"], pools["day_type"], pools["hour"]]).sum()
    got = table.set_index(["site", "gpu", "period", "day_type", "hour"])["gpus_in_replicas"]
    per_node = np.array([s.accelerators[g].gpus_per_node for g in table["gpu"]])
    provisioned = (table["committed_nodes"] + table["ondemand_nodes"]).to_numpy() * per_node
    _first(table, got.to_numpy() != used.reindex(got.index).fillna(0).to_numpy(), path["nodes"], "gpus_in_replicas",
           "{site}/{gpu} at {period}/{day_type}/{hour}: {gpus_in_replicas} GPUs in replicas, pools.csv another number")
    _first(table, table["gpus_in_replicas"].to_numpy() > provisioned, path["nodes"], "gpus_in_replicas",
           "{site}/{gpu} at {period}/{day_type}/{hour}: more GPUs in replicas than its nodes hold")


def _mismatch(a: pd.Series, b: pd.Series):
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).fillna(0.0)
    off = (both["a"] - both["b"]).abs() > BALANCE_TOLERANCE * np.maximum(both["a"].abs(), 1.0)
    return both[off]


def _check_balance(pools: pd.DataFrame, routing: pd.DataFrame, path: dict) -> None:
    key = ["site", "workload", "tier", "period", "day_type", "hour"]
    entry = pools[pools["role"] != Role.DECODE]
    bad = _mismatch(routing.groupby(key)["requests_per_s"].sum(), entry.groupby(key)["requests_per_s"].sum())
    if len(bad):
        k = dict(zip(key, bad.index[0]))
        raise ScenarioError(
            f"{bad['a'].iloc[0]:.6g} requests/s are routed to {k['site']} for {k['workload']} (tier {k['tier']}, "
            f"{k['period']}/{k['day_type']}/{k['hour']}) but its prefill and colocated pools take {bad['b'].iloc[0]:.6g}; "
            "routing.csv and pools.csv do not agree", Origin(str(path["routing"])), field="requests_per_s")
    flow = ["site", "workload", "speed", "period", "day_type", "hour"]
    bad = _mismatch(pools[pools["role"] == Role.PREFILL].groupby(flow)["requests_per_s"].sum(),
                    pools[pools["role"] == Role.DECODE].groupby(flow)["requests_per_s"].sum())
    if len(bad):
        k = dict(zip(flow, bad.index[0]))
        raise ScenarioError(f"prefill pools of {k['workload']} at {k['site']} (class {k['speed']}, {k['period']}/"
                            f"{k['day_type']}/{k['hour']}) hand on {bad['a'].iloc[0]:.6g} requests/s but its decode "
                            f"pools take {bad['b'].iloc[0]:.6g}", Origin(str(path["pools"])), field="requests_per_s")
