"""Stress a plan: how the fixed plan fares when the estimates behind it are wrong.

Nothing is re-optimised. The plan's pools (configs, replicas per slice) and routing shares
stay as planned; what changes is the world they meet:
  * perturbed estimates — any scenario path, as in `--set` (``serving.decode_mbu=×0.8``,
    ``workloads.*.isl_mean_tokens=×1.3`` — ``*`` stands for every row of a table,
    ``workloads.chat.prompt_cache_hit_rate=0.2``);
  * demand × F (every routed flow scaled, same shares);
  * RTTs × F;
  * the loss of a site: its traffic goes, metro by metro, to the nearest other site with a
    pool of that workload in a tier the metro can use (existing replicas only); what finds
    no such pool is unserved;
  * the calibration's error band (``within_band``): each accelerator's efficiencies at the
    slow edge of its parameter set's residual spread (``p90``), or drawn from it (``draw``,
    seeded) — `optimizer.commands.calibrate.band`.

Analytic evaluation, per nominal slice: each routed arc's p99 TTFT and ITL by the
prediction behind slo.csv (`optimizer.results.latency`: the tail of wait + stages, the
batch each pool settles at) under the perturbed curves, and the share of its requests its
pools can serve at all (an overloaded prefill pool serves only n / S̄ requests/s — n·k_B/S_B
batched — a decode pool its slots at the operating batch, KV permitting). An arc meets its
objectives when all its requests are served and its TTFT and ITL at the workload's required
attainment are within them; a workload's attainment is the share of its demand
(request-hours) on arcs that meet both. With ``verify``, the perturbed plan folder is also
simulated request by request.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.errors import ScenarioError, unknown_id_message
from optimizer.base.outputs import write_csv, write_text_atomic
from optimizer.base.units import Role
from optimizer.commands.calibrate import band
from optimizer.commands.spot_stress import spot_stress, spot_stress_lines
from optimizer.folder.read import planned_scenario, read_plan, scenario_of
from optimizer.folder.schema import OPTIONAL_TABLES, TABLES
from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.results.latency import route_predictions
from optimizer.scenario import RawScenario, Scenario, apply_overrides, validate
from optimizer.serving.configs import config_at

SLICE = ["period", "day_type", "hour"]


@dataclass
class StressResult:
    table: pd.DataFrame  # one row per workload
    summary: dict
    folder: Path  # the perturbed plan folder (kept only when asked for)
    arcs: pd.DataFrame = field(default_factory=pd.DataFrame)


def expand(data: dict, perturb: list[str]) -> list[str]:
    """``workloads.*.field=v`` → one override per workload (likewise for any table)."""
    out = []
    for item in perturb:
        key, sep, value = item.partition("=")
        parts = key.split(".")
        if "*" not in parts:
            out.append(item)
            continue
        i = parts.index("*")
        node = data
        for p in parts[:i]:
            if not isinstance(node, dict) or p not in node:
                raise ScenarioError(unknown_id_message("key", p, node if isinstance(node, dict) else {}),
                                    field=f"--perturb {key}")
            node = node[p]
        out += [".".join(parts[:i] + [k] + parts[i + 1:]) + sep + value for k in sorted(node)]
    return out


def perturbed_folder(plan_dir, out_dir, perturb=(), demand_factor=1.0, rtt_factor=1.0, lose_site=None,
                     within_band=None, seed=0) -> Path:
    """A copy of the plan folder in a perturbed world: scenario.json with the perturbed
    estimates (and efficiencies within the calibration band), routing and pools with the
    scaled (and, for a lost site, re-routed) flows."""
    src = Path(plan_dir)
    plan = read_plan(src)
    raw = RawScenario(plan.scenario_data, {}, src / "scenario.json")
    raw = apply_overrides(raw, expand(raw.data, list(perturb)), flag="--perturb")
    s = planned_scenario(validate(raw), plan.summary, src)
    rows = []
    if within_band:
        rows, s = _within_band(raw, s, within_band, seed)
        s = planned_scenario(s, plan.summary, src)
    routing = plan.tables["routing"].copy()
    pools = plan.tables["pools"]
    pools = pools[pools["lost_site"].isna()].copy()
    routing["requests_per_s"] *= demand_factor
    pools["requests_per_s"] *= demand_factor
    routing["rtt_ms"] *= rtt_factor
    unserved = pd.DataFrame(columns=["workload", *SLICE, "requests_per_s"])
    if lose_site:
        if lose_site not in s.sites:
            raise ScenarioError(unknown_id_message("site", lose_site, s.sites), field="--lose-site")
        routing, pools, unserved = _lose(s, raw, routing, pools, lose_site, rtt_factor)
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "scenario.json").write_text(json.dumps(raw.data, indent=1, sort_keys=True, default=str))
    summary = dict(plan.summary, stress={"perturb": list(perturb), "demand_factor": demand_factor,
                                         "rtt_factor": rtt_factor, "lose_site": lose_site, "within_band": within_band,
                                         "band": band.summary_rows(rows)})
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    tables = dict(plan.tables, routing=routing, pools=pools)
    for name in TABLES:
        if name not in OPTIONAL_TABLES:  # the plan's nodes per slice do not hold in a perturbed world
            tables[name].to_csv(out / f"{name}.csv", index=False, float_format="%.12g")
    unserved.to_csv(out / "unserved.csv", index=False)
    return out


def _within_band(raw: RawScenario, s: Scenario, mode: str, seed: int) -> tuple[list[dict], Scenario]:
    """Put each used parameter set's efficiencies at its band (``p90``) or a draw from it
    (``draw``) into ``raw``; (the band rows, the scenario revalidated)."""
    rows = band.band(s) if mode == "p90" else band.drawn(s, seed)
    if not any(f is not None for row in rows for f in row["factors"].values()):
        raise ScenarioError("the plan's calibration records no residual spread for its accelerators (write one with "
                            "fleetplan calibrate, and plan with it)", field="--within-band")
    raw.data["calibration"] = band.derated(raw.data.get("calibration") or s.serving.calibration.model_dump(), rows)
    return rows, validate(raw)


def _tier_of(rtt_ms: float, bands: list[float]) -> int | None:
    return next((t for t, b in enumerate(bands) if rtt_ms <= b), None)


def _lose(s: Scenario, raw: RawScenario, routing, pools, lost: str, rtt_factor: float):
    """Move the lost site's routed flow to the nearest other site with a tier pool that can
    take the metro; scale that tier's pools and (disaggregated) the site's decode pools."""
    rtt = rtt_matrix(build_graph(s, raw.path.parent), s) * rtt_factor
    bands = s.serving.tier_rtt_ms
    moved = routing[routing["site"] == lost]
    routing = routing[routing["site"] != lost].copy()
    pools = pools[pools["site"] != lost].copy()
    tiers = pools[pools["role"] != Role.DECODE].groupby(["site", "workload", *SLICE])["tier"].apply(set)
    extra_rows, unserved = [], []
    for row in moved.itertuples(index=False):
        key = (row.period, row.day_type, row.hour)
        order = rtt.loc[row.metro].drop(lost).sort_values(kind="stable")
        target = None
        for site, ms in order.items():
            own = _tier_of(float(ms), bands)
            have = tiers.get((site, row.workload, *key), set())
            usable = sorted(t for t in have if own is not None and t >= own)
            if usable:
                target = (site, usable[0], float(ms))
                break
        if target is None:
            unserved.append({"workload": row.workload, "period": key[0], "day_type": key[1], "hour": key[2],
                             "requests_per_s": row.requests_per_s})
            continue
        site, tier, ms = target
        extra_rows.append({"metro": row.metro, "site": site, "workload": row.workload, "tier": tier,
                           "period": key[0], "day_type": key[1], "hour": key[2],
                           "requests_per_s": row.requests_per_s, "rtt_ms": ms})
        _add_load(pools, site, row.workload, tier, key, row.requests_per_s)
    if extra_rows:
        routing = pd.concat([routing, pd.DataFrame(extra_rows)], ignore_index=True)
    return routing, pools, pd.DataFrame(unserved, columns=["workload", *SLICE, "requests_per_s"])


def _share(frame: pd.DataFrame) -> pd.Series:
    weights = frame["requests_per_s"] if frame["requests_per_s"].sum() > 0 else frame["replicas"].astype(float)
    return weights / weights.sum()


def _add_load(pools: pd.DataFrame, site, workload, tier, key, rps: float) -> None:
    at = (pools["site"] == site) & (pools["workload"] == workload) & (pools["period"] == key[0]) \
        & (pools["day_type"] == key[1]) & (pools["hour"] == key[2])
    tier_pools = at & (pools["tier"] == tier) & (pools["role"] != Role.DECODE)
    split = _share(pools[tier_pools])
    pools.loc[tier_pools, "requests_per_s"] += rps * split
    to_decode = rps * float(split[pools.loc[tier_pools, "role"] == Role.PREFILL].sum())
    decode = at & (pools["role"] == Role.DECODE)
    if to_decode > 0 and decode.any():
        pools.loc[decode, "requests_per_s"] += to_decode * _share(pools[decode])


# ------------------------------------------------------------------------ analytic


def analyze(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per workload, per arc-slice) analytic attainment of a (perturbed) plan folder: each
    routed arc's p99 TTFT and ITL at each slice by the prediction behind slo.csv
    (`optimizer.results.latency.route_predictions`; unperturbed, an arc's worst slice is its
    slo.csv row), the share of its requests the pools can serve at all, and whether it meets
    both objectives in the workload's required share of requests."""
    plan = read_plan(folder)
    s = scenario_of(plan, folder)
    curves = plan.tables["curves"].set_index("id", drop=False)
    pools = plan.tables["pools"]
    pools = pools[pools["lost_site"].isna()] if "lost_site" in pools else pools
    configs = {cid: config_at(curves.loc[cid], s) for cid in pools["config"].unique()}
    routing = plan.tables["routing"]
    served = _served_shares(s, configs, pools)
    rows, prediction = route_predictions(s, configs, pools, routing)
    quantiles = {k: w.slo_attainment for k, w in s.workloads.items()}
    at_q = _at_attainment(prediction, rows, quantiles)
    weight = _slice_hours(s)
    arcs = []
    for r, (ttft_q, itl_q) in zip(rows.itertuples(index=False), at_q):
        w = s.workloads[r.workload]
        share = served.get((r.site, r.workload, r.period, r.day_type, int(r.hour), int(r.tier)), 0.0)
        meets = share >= 1.0 - 1e-9 and ttft_q <= w.ttft_p99_ms + 1e-6 and itl_q <= w.itl_p99_ms + 1e-6
        arcs.append({"metro": r.metro, "site": r.site, "workload": r.workload, "tier": r.tier,
                     "period": r.period, "day_type": r.day_type, "hour": r.hour,
                     "request_hours": r.requests_per_s * weight[(r.period, r.day_type, r.hour)],
                     "ttft_p99_ms": r.ttft_p99_ms, "itl_p99_ms": r.itl_p99_ms, "served_share": share, "meets": meets})
    arcs = pd.DataFrame(arcs, columns=["metro", "site", "workload", "tier", *SLICE, "request_hours", "ttft_p99_ms",
                                       "itl_p99_ms", "served_share", "meets"])
    unserved = pd.read_csv(folder / "unserved.csv") if (folder / "unserved.csv").exists() else pd.DataFrame()
    return _by_workload(s, arcs, unserved, weight), arcs


def _at_attainment(prediction, rows: pd.DataFrame, quantiles: dict[str, float]) -> list[tuple[float, float]]:
    """Each route row's TTFT and ITL at its workload's required attainment q (the quantile
    its objective is promised at), in ms."""
    out = [(np.nan, np.nan)] * len(rows)
    for k, q in quantiles.items():
        index = np.flatnonzero((rows["workload"] == k).to_numpy())
        if not len(index):
            continue
        sub = rows.iloc[index]
        keys = [(r.site, r.workload, int(r.tier), r.period, r.day_type, int(r.hour)) for r in sub.itertuples()]
        ttft = prediction.ttft_p99_ms([[(key, 1.0, rtt)] for key, rtt in zip(keys, sub["rtt_ms"])], quantile=q)
        itl = prediction.itl_p99_ms([[(key, 1.0)] for key in keys], quantile=q)
        for i, a, b in zip(index, ttft, itl):
            out[i] = (float(a), float(b))
    return out


def _served_shares(s: Scenario, configs: dict, pools: pd.DataFrame) -> dict:
    """Per (site, workload, slice, tier): the share of its requests its pools can serve —
    an overloaded prefill pool serves n / S̄ requests/s (n·k_B/S_B batched), a decode or
    colocated pool its slots at the operating batch (KV permitting); a tier's share is its
    worst pool's, its prefill pools' decode side included."""
    out: dict = {}
    for key, rows in pools.groupby(["site", "workload", *SLICE]):
        ptm = s.peak_to_mean(key[1])
        decode: dict = {}
        for row in rows[rows["role"] == Role.DECODE].itertuples():
            c = configs.get(row.config)
            cap, load = decode.get(row.speed, (0.0, 0.0))
            slots = row.replicas * c.decode_tokens_per_s / s.workloads[row.workload].osl_mean_tokens if c else 0.0
            decode[row.speed] = (cap + slots, load + ptm * row.requests_per_s)
        for row in rows[rows["role"] != Role.DECODE].itertuples():
            c = configs.get(row.config)
            lam = ptm * row.requests_per_s
            if lam <= 0:
                continue
            share = min(1.0, row.replicas * c.lane_rps() / lam) if c and row.replicas else 0.0
            if row.role == Role.COLOCATED:
                share = min(share, row.replicas * c.decode_tokens_per_s / s.workloads[row.workload].osl_mean_tokens / lam
                            if c else 0.0)
            else:
                cap, load = decode.get(row.speed, (0.0, 1.0))
                share = min(share, cap / load if load > cap else 1.0)
            tier = (*key, int(row.tier))
            out[tier] = min(out.get(tier, 1.0), share)
    return out


def _slice_hours(s: Scenario) -> dict:
    from optimizer.geography.demand import build_slices

    slices = build_slices(s)
    return {(r.period, r.day_type, int(r.hour)): r.weight_hours for r in slices.itertuples()}


def _by_workload(s: Scenario, arcs: pd.DataFrame, unserved: pd.DataFrame, weight: dict) -> pd.DataFrame:
    rows = []
    for k, w in s.workloads.items():
        a = arcs[arcs["workload"] == k] if len(arcs) else arcs
        lost = 0.0
        if len(unserved):
            u = unserved[unserved["workload"] == k]
            lost = float(sum(r.requests_per_s * weight[(r.period, r.day_type, int(r.hour))] for r in u.itertuples()))
        routed = float(a["request_hours"].sum()) if len(a) else 0.0
        demand = routed + lost
        if demand <= 0:
            continue
        met = float((a["request_hours"] * a["meets"]).sum())
        not_served = float((a["request_hours"] * (1 - a["served_share"].clip(0, 1))).sum()) + lost
        finite = a[np.isfinite(a["ttft_p99_ms"].astype(float))]
        rows.append({
            "workload": k, "attainment": met / demand, "required": w.slo_attainment,
            "passes": met / demand >= w.slo_attainment,
            "ttft_p99_ms_worst": float(finite["ttft_p99_ms"].max()) if len(finite) else math.inf,
            "ttft_p99_ms_objective": w.ttft_p99_ms,
            "itl_p99_ms_worst": float(finite["itl_p99_ms"].max()) if len(finite) else math.inf,
            "itl_p99_ms_objective": w.itl_p99_ms,
            "unserved_fraction": not_served / demand,
        })
    return pd.DataFrame(rows)


def stress(plan_dir, perturb=(), *, demand_factor=1.0, rtt_factor=1.0, lose_site=None, within_band=None, verify=False,
           requests=2000, seed=0, keep=None, progress=None, spot_availability=None) -> StressResult:
    """Evaluate a plan folder under perturbed estimates (see the module docstring);
    ``within_band``: None, "p90" or "draw" (seeded by ``seed``); ``spot_availability``: spot
    zones with capacity this × as often (`optimizer.commands.spot_stress`)."""
    spot = spot_stress(plan_dir, spot_availability) if spot_availability is not None else None
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="fleetplan-stress-"))
    try:
        folder = perturbed_folder(plan_dir, work, perturb, demand_factor, rtt_factor, lose_site, within_band, seed)
        table, arcs = analyze(folder)
        recorded = json.loads((folder / "summary.json").read_text())["stress"]
        summary = {
            "perturb": list(perturb), "demand_factor": demand_factor, "rtt_factor": rtt_factor, "lose_site": lose_site,
            "within_band": within_band, "band": recorded["band"],
            "attainment_min": float(table["attainment"].min()) if len(table) else 1.0,
            "unserved_fraction_max": float(table["unserved_fraction"].max()) if len(table) else 0.0,
            "all_objectives_met": bool(table["passes"].all()) if len(table) else True,
            "by_workload": table.to_dict("records"),
            "spot": spot,
        }
        if verify:
            from optimizer.commands.verify import verify_plan

            checked = verify_plan(folder, slices="peak", requests=requests, seed=seed, progress=progress)
            sim = checked.tables["by_pool"].groupby("workload").agg(
                simulated_ttft_attainment=("ttft_attainment", "min"), simulated_itl_attainment=("itl_attainment", "min"),
                simulated_goodput_fraction=("goodput_fraction", "min")).reset_index()
            table = table.merge(sim, on="workload", how="left")
            summary["simulated"] = {k: checked.summary[k] for k in
                                    ("requests_simulated", "ttft_attainment_min", "itl_attainment_min", "goodput_fraction",
                                     "all_objectives_met")}
            summary["all_objectives_met"] = summary["all_objectives_met"] and bool(checked.summary["all_objectives_met"])
        return StressResult(table, summary, folder, arcs)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def write_stress(result: StressResult, plan_dir) -> Path:
    d = Path(plan_dir)
    write_csv(result.table, d / "stress.csv")
    write_text_atomic(d / "stress.json", json.dumps(result.summary, indent=2, default=str))
    return d / "stress.csv"


def stress_text(result, plan_dir) -> str:
    """The stressed plan's table and the file written."""
    return "\n".join([result.table.to_string(index=False, float_format=lambda x: f"{x:,.4g}"),
                      *spot_stress_lines(result.summary.get("spot")), f"written: {Path(plan_dir) / 'stress.csv'}"])
