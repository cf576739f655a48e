"""A robust plan shown in the nominal world (`optimizer.commands.pipeline.robust_plan`)."""

from __future__ import annotations

from optimizer.results import Plan


def to_nominal_world(plan: Plan, demand_factor: float, rtt_margin_ms: float) -> None:
    """A robust plan's fleet, shown serving the nominal demand over nominal round trips:
    flows ÷ the demand factor (same shares), RTTs − the margin; goodput figures follow.
    Pools keep their replicas; queue figures stay those the pools were sized for."""
    t = plan.tables
    for name in ("routing", "pools"):
        t[name]["requests_per_s"] = t[name]["requests_per_s"] / demand_factor
    t["routing"]["rtt_ms"] = t["routing"]["rtt_ms"] - rtt_margin_ms
    for col in ("network_ms", "ttft_p99_ms_predicted"):
        t["slo"][col] = t["slo"][col] - rtt_margin_ms
    sm = plan.summary
    for key in ("goodput_tokens_per_s_avg", "goodput_tokens_per_s_peak", "tokens_per_s_per_mw"):
        if sm.get(key) is not None:
            sm[key] /= demand_factor
    if sm.get("cost_per_million_tokens_usd") is not None:
        sm["cost_per_million_tokens_usd"] *= demand_factor
    sm["cost_per_million_tokens_usd_by_workload"] = {
        k: (v * demand_factor if v is not None else None) for k, v in sm["cost_per_million_tokens_usd_by_workload"].items()}
    for row in sm["token_billing"]["by_workload"].values():
        for key in ("gpu_cost_usd_per_million_output_tokens", "gpu_cost_over_list"):
            if row[key] is not None:
                row[key] *= demand_factor
