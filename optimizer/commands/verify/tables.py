"""`verify`'s tables: per simulated group (``by_pool``) and per (metro, workload)
(``by_metro``), the measured p50/p99 TTFT and ITL beside the predicted p99s, attainments,
goodput and whether the objectives pass; the run's summary and its token-billing view."""

from __future__ import annotations

import numpy as np
import pandas as pd

from optimizer.commands.verify.engine import ENGINE
from optimizer.commands.verify.group import GroupResult, Options, hist_quantile
from optimizer.commands.verify.slices import nominal_pools
from optimizer.results.latency import predict
from optimizer.serving.configs import config_at

COLUMNS = ["requests", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p99_ms_predicted",
           "itl_p99_ms_predicted", "ttft_attainment", "itl_attainment", "goodput_fraction", "ttft_pass", "itl_pass",
           "ttft_p99_ms_objective", "itl_p99_ms_objective", "slo_attainment"]
POOL_KEYS = ["site", "workload", "period", "day_type", "hour"]
METRO_KEYS = ["metro", "workload"]


def goodput_tokens(s, results) -> tuple[dict[str, float], dict[str, float]]:
    """Per workload: simulated tokens delivered inside both objectives, and all simulated tokens,
    each group's counted requests weighted by its planned requests/s over their count — groups
    simulate about the same number of requests whatever their traffic, so unweighted a small
    group (a split's long prompts, a quiet site) would count as much as a busy one."""
    good: dict[str, float] = {}
    tokens: dict[str, float] = {}
    for r in results:
        k = r.group.workload
        weight = sum(route.requests_per_s for route in r.group.routes) / max(len(r.ttft_ms), 1)
        met = r.ttft_ms <= s.workloads[k].ttft_p99_ms
        good[k] = good.get(k, 0.0) + weight * float((met * (1 + r.ok_gaps)).sum())
        tokens[k] = tokens.get(k, 0.0) + weight * float(r.tokens.sum())
    return good, tokens


def verified_token_billing(planned: dict | None, goodput: dict[str, float]) -> dict | None:
    """The plan's token-billing view (`optimizer.serving.billing`) with the simulated goodput: only
    tokens inside the objectives have value, so the GPU cost per million goodput tokens is
    the planned cost per million output tokens ÷ the measured goodput fraction."""
    if planned is None:
        return None
    out = {}
    for k, row in planned["by_workload"].items():
        g = goodput.get(k)
        cost = row["gpu_cost_usd_per_million_output_tokens"]
        per_goodput = cost / g if cost is not None and g else None
        listed = row["list_usd_per_million_output_tokens"]
        out[k] = {"gpu_cost_usd_per_million_output_tokens": cost, "goodput_fraction_measured": g,
                  "gpu_cost_usd_per_million_goodput_tokens": per_goodput,
                  "list_usd_per_million_output_tokens": listed,
                  "goodput_cost_over_list": per_goodput / listed if per_goodput is not None and listed else None,
                  "input_share_of_gpu_hours": row["input_share_of_gpu_hours"],
                  "input_share_of_charge": row["input_share_of_charge"]}
    return {"provider": planned["provider"], "by_workload": out}


def _quantile(x: np.ndarray, q: float) -> float:
    if len(x) == 0:
        return float("nan")
    return float(np.quantile(x, q, method="inverted_cdf"))


def _row(s, workload: str, ttft, tokens, gaps, ok, hist) -> dict:
    w = s.workloads[workload]
    met = ttft <= w.ttft_p99_ms
    total_gaps = gaps.sum()
    ttft_att = float(met.mean()) if len(ttft) else float("nan")
    itl_att = float(ok.sum() / total_gaps) if total_gaps else 1.0
    good = (met * (1 + ok)).sum()
    return {
        "requests": int(len(ttft)),
        "ttft_p50_ms": _quantile(ttft, 0.5), "ttft_p99_ms": _quantile(ttft, 0.99),
        "itl_p50_ms": hist_quantile(hist, 0.5), "itl_p99_ms": hist_quantile(hist, 0.99),
        "ttft_attainment": ttft_att, "itl_attainment": itl_att,
        "goodput_fraction": float(good / tokens.sum()) if tokens.sum() else float("nan"),
        "ttft_pass": bool(ttft_att >= w.slo_attainment), "itl_pass": bool(itl_att >= w.slo_attainment),
        "ttft_p99_ms_objective": w.ttft_p99_ms, "itl_p99_ms_objective": w.itl_p99_ms,
        "slo_attainment": w.slo_attainment,
    }


def predictions(s, tables: dict[str, pd.DataFrame], results: list[GroupResult], read_ms: dict | None = None) -> dict:
    """The predicted p99 TTFT and ITL of what was simulated, like with like: per group, the
    mixture of its routes (by their rates, each behind its round trip) through the pools of
    its slice (`optimizer.results.latency`); per (metro, workload), the mixture of that
    metro's routes over the groups it was simulated in; plus, for a workload served from
    KV-cache tiers, the slowest read among them (``read_ms``), as the plan budgeted it.
    {("group", key) | ("metro", metro, workload): (ttft ms, itl ms)}."""
    if not results:
        return {}
    slices = {(r.group.period, r.group.day_type, r.group.hour) for r in results}
    pools = nominal_pools(tables["pools"])
    pools = pools[[(p, d, int(h)) in slices for p, d, h in zip(pools["period"], pools["day_type"], pools["hour"])]]
    curves = tables["curves"].set_index("id", drop=False)
    configs = {cid: config_at(curves.loc[cid], s) for cid in pools["config"].unique()}
    prediction = predict(s, configs, pools)
    groups: dict = {}
    workload_of: dict = {}
    for r in results:
        g = r.group
        workload_of[("group", g.key)] = g.workload
        routes = [(x.metro, ((g.site, g.workload, x.tier, g.period, g.day_type, g.hour), x.requests_per_s, x.rtt_ms))
                  for x in g.routes if x.requests_per_s > 0]
        groups[("group", g.key)] = [route for _, route in routes]
        for metro, route in routes:
            groups.setdefault(("metro", metro, g.workload), []).append(route)
            workload_of[("metro", metro, g.workload)] = g.workload
    keys = list(groups)
    ttft = prediction.ttft_p99_ms([groups[k] for k in keys])
    itl = prediction.itl_p99_ms([[(key, w) for key, w, _ in groups[k]] for k in keys])
    reads = read_ms or {}
    return {k: (float(a) + reads.get(workload_of[k], 0.0), float(b)) for k, a, b in zip(keys, ttft, itl)}


def by_pool(s, predicted: dict, results: list[GroupResult]) -> pd.DataFrame:
    rows = []
    for r in results:
        g = r.group
        ttft_pred, itl_pred = predicted.get(("group", g.key), (float("nan"), float("nan")))
        row = {"site": g.site, "workload": g.workload, "period": g.period, "day_type": g.day_type, "hour": g.hour,
               **_row(s, g.workload, r.ttft_ms, r.tokens, r.gaps, r.ok_gaps, r.hist),
               "ttft_p99_ms_predicted": ttft_pred, "itl_p99_ms_predicted": itl_pred, "requests_simulated": r.simulated}
        rows.append(row)
    return pd.DataFrame(rows, columns=POOL_KEYS + COLUMNS + ["requests_simulated"])


def by_metro(s, predicted: dict, results: list[GroupResult]) -> pd.DataFrame:
    parts: dict = {}
    for r in results:
        g = r.group
        group_gaps = r.gaps.sum()
        for metro in np.unique(r.metro):
            mask = r.metro == metro
            p = parts.setdefault((metro, g.workload), {"ttft": [], "tokens": [], "gaps": [], "ok": [], "hist": 0.0})
            p["ttft"].append(r.ttft_ms[mask])
            p["tokens"].append(r.tokens[mask])
            p["gaps"].append(r.gaps[mask])
            p["ok"].append(r.ok_gaps[mask])
            if group_gaps:
                p["hist"] = p["hist"] + r.hist * (r.gaps[mask].sum() / group_gaps)
    rows = []
    for (metro, k), p in sorted(parts.items()):
        ttft_pred, itl_pred = predicted.get(("metro", metro, k), (float("nan"), float("nan")))
        hist = p["hist"] if isinstance(p["hist"], np.ndarray) else np.zeros(1)
        cat = {key: np.concatenate(p[key]) for key in ("ttft", "tokens", "gaps", "ok")}
        rows.append({"metro": metro, "workload": k,
                     **_row(s, k, cat["ttft"], cat["tokens"], cat["gaps"], cat["ok"], hist),
                     "ttft_p99_ms_predicted": ttft_pred, "itl_p99_ms_predicted": itl_pred})
    return pd.DataFrame(rows, columns=METRO_KEYS + COLUMNS)


def measured_summary(s, tables, results, seed, seconds, opt: Options, groups) -> dict:
    frames = [t for t in tables.values() if len(t)]
    both = pd.concat(frames) if frames else pd.DataFrame(columns=COLUMNS)
    good_by, tokens_by = goodput_tokens(s, results)
    good, tokens = sum(good_by.values()), sum(tokens_by.values())
    return {
        "requests_simulated": int(sum(r.simulated for r in results)),
        "requests_counted": int(sum(len(r.ttft_ms) for r in results)),
        "groups": len(results),
        "slices": sorted({f"{g.period}/{g.day_type}/{g.hour}" for g in groups}),
        "ttft_attainment_min": float(both["ttft_attainment"].min()) if len(both) else float("nan"),
        "itl_attainment_min": float(both["itl_attainment"].min()) if len(both) else float("nan"),
        "goodput_fraction": good / tokens if tokens else float("nan"),
        "all_objectives_met": bool(len(both) and both["ttft_pass"].all() and both["itl_pass"].all()),
        "seconds": seconds,
        "engine": ENGINE,
        "seed": int(seed),
        "prefill_batch_tokens": "as planned" if opt.prefill_batch_tokens is None else opt.prefill_batch_tokens,
        "warmup": f"first {opt.warmup_fraction:.0%} of arrivals, at least {opt.warmup_decode_durations:g} mean "
                  f"decode durations; cool-down {opt.cooldown_decode_durations:g} mean decode duration",
    }
