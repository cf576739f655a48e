"""Pre-flight checks: inputs that are valid one field at a time but that no plan can use.

`optimizer.scenario.validate` checks every field and the references between tables; it knows
nothing of the curves. `preflight` runs after it, before any plan is built, and asks of each
workload the questions that need the serving configs (`optimizer.serving.configs`):

* does the model fit any replica the offered accelerators allow (weights + workspace within
  p·H·u)? — if not, say how much memory it needs and how much the largest replica has;
* does one request (prompt + output) fit the KV memory left beside the weights?
* can any config meet the ITL objective? — if not, say the physical floor in ms (the fastest
  p99 inter-token gap, at batch 1, of the modes the scenario allows);
* is the TTFT objective longer than the fixed overheads and the shortest possible round trip,
  and does the tightest latency tier leave any of it?

and of the scenario: is there any demand, and is it within what any fleet could serve (a
unit slip otherwise)? It also reads the latency graph file, if one is given, so that
`fleetplan validate` finds a disconnected graph too. Each failure is a `ScenarioError` naming
the row (the workloads row, the serving or demand section, the demand table row) and field.
"Offered" accelerators are those some candidate site can supply. Cost: `workload_configs` for
every (workload, accelerator) and the demand table, ~0.2 s on the reference scenario.
"""

from __future__ import annotations

import math

import numpy as np

from optimizer.base.errors import ScenarioError
from optimizer.base.units import MS_PER_S, SECONDS_PER_HOUR, Role
from optimizer.curves.lengths import prompt_lengths
from optimizer.curves.memory import kv_budget_bytes, kv_replication
from optimizer.curves.roofline import decode_step_time_s, mixed_step_time_s
from optimizer.instance.prompt_split import MIN_PROMPT_PART_SHARE, candidates, part_ids, with_split
from optimizer.scenario import RawScenario, Scenario
from optimizer.serving.billing import token_prices
from optimizer.serving.configs import (
    make_replica,
    parallel_degrees,
    workload_configs,
)

GB = 1e9


def offered_accelerators(s: Scenario) -> list[str]:
    """Accelerators some candidate site can supply (sorted)."""
    return sorted({g for per in s.supply.values() for g in per if g in s.accelerators})


def preflight(s: Scenario, raw: RawScenario) -> None:
    """Raise `ScenarioError` for the first input no plan could use (see the module docstring)."""
    gpus = offered_accelerators(s)
    for wid in sorted(s.workloads):
        _check_workload(s, raw, wid, gpus)
        _check_prompt_split(s, raw, wid)
    _check_demand(s, raw)
    _check_grid_carbon(s, raw)
    token_prices(s.policy.token_price_provider, raw.origin("policy"))
    if s.network.graph:
        from optimizer.geography.network import build_graph

        build_graph(s, raw.path.parent)


def _check_prompt_split(s: Scenario, raw: RawScenario, wid: str) -> None:
    """Each candidate threshold leaves both parts enough requests for pools of their own and
    sits inside the model's context."""
    w = s.workloads[wid]
    if not w.prompt_split_candidates_tokens:
        return
    context = s.models[w.model].max_context
    lengths = prompt_lengths(w, context)
    for t in w.prompt_split_candidates_tokens:
        short = lengths.cdf(t)
        if t >= context or min(short, 1.0 - short) < MIN_PROMPT_PART_SHARE:
            raise ScenarioError(
                f"a split at {t:,.0f} prompt tokens leaves {100 * short:.2f} % of {wid}'s requests below it and "
                f"{100 * (1 - short):.2f} % at or above; expected at least {100 * MIN_PROMPT_PART_SHARE:g} % on each "
                f"side (its median prompt is {lengths.quantile(0.5):,.0f} tokens, its p99 {w.isl_p99_tokens:,.0f})",
                raw.origin("workloads", wid), field="prompt_split_candidates_tokens")


def servable_splits(s: Scenario, raw: RawScenario) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Per workload with candidate thresholds, those whose two parts each have a complete
    serving config (`_check_workload`: a long part's p99 prompt is longer than its parent's,
    and may miss the TTFT objective the parent meets); and per refused "workload at T tokens"
    why."""
    gpus = offered_accelerators(s)
    kept, refused = {}, {}
    for k, thresholds in candidates(s).items():
        kept[k] = []
        for t in thresholds:
            split = with_split(s, {k: t})
            try:
                for wid in part_ids(k, t):
                    _check_workload(split, raw, wid, gpus)
            except ScenarioError as exc:
                refused[f"{k} at {t:g} tokens"] = exc.message
            else:
                kept[k].append(t)
    return kept, refused


def _domain(s: Scenario, g: str) -> int:
    a = s.accelerators[g]
    return a.scaleup_domain_gpus if a.scaleup_domain_gpus > 1 else a.gpus_per_node


def _servable(configs) -> bool:
    roles = {c.role for c in configs}
    return Role.COLOCATED in roles or {Role.PREFILL, Role.DECODE} <= roles


def _check_workload(s: Scenario, raw: RawScenario, wid: str, gpus: list[str]) -> None:
    """Raise `ScenarioError` if no serving config of the workload is complete, saying why: in
    the order a planner would fix it, the degrees, precision, memory, context, ITL, prefill."""
    w = s.workloads[wid]
    _check_ttft(s, raw, wid)
    _check_tiers(s, raw, wid)
    configs = [c for g in gpus for c in workload_configs(w, s.models[w.model], s.accelerators[g], s.serving)]
    if _servable(configs):
        return
    replicas = _check_replicas(s, raw, wid, gpus)
    fitting = _check_weights_fit(s, raw, wid, replicas)
    _check_itl_floor(s, raw, wid, fitting)
    _check_prefill_fits(s, raw, wid, configs)
    roles = ", ".join(sorted({c.role for c in configs})) or "none"
    raise ScenarioError(
        f"{w.model} has no complete serving config on the offered accelerators ({', '.join(gpus)}) in the allowed "
        f"modes ({', '.join(s.serving.modes)}); roles found: {roles}",
        raw.origin("workloads", wid), field="model")


def _check_replicas(s: Scenario, raw: RawScenario, wid: str, gpus: list[str]) -> list[tuple]:
    """The workload's replicas (accelerator, degree, replica) on the offered accelerators; an
    error if no allowed degree fits a scale-up domain or no accelerator has the weights' precision."""
    w = s.workloads[wid]
    m = s.models[w.model]
    sv = s.serving
    replicas = [(g, p, make_replica(m, s.accelerators[g], sv, p, weight, kv))
                for weight, kv in w.precisions for g in gpus for p in parallel_degrees(m, s.accelerators[g], sv)]
    if not replicas:
        domains = ", ".join(f"{g}: {_domain(s, g)} GPUs" for g in gpus)
        raise ScenarioError(
            f"no allowed tensor-parallel degree {sorted(sv.tp_degrees)} fits inside the scale-up domain of any "
            f"offered accelerator ({domains}), so {w.model} (workload '{wid}') has no replica; expected degrees "
            "no larger than the domain, e.g. [1, 2, 4, 8]",
            raw.origin("serving"), field="tp_degrees")
    if all(r is None for _, _, r in replicas) and len(w.precisions) > 1:
        raise ScenarioError(
            f"none of the offered accelerators ({', '.join(gpus)}) serves any precision workload '{wid}' accepts "
            f"({', '.join(f'{a}/{b}' for a, b in w.precisions)}); expected a pair such as bf16/bf16 or an accelerator "
            "whose weight_precisions list the formats", raw.origin("workloads", wid), field="accepted_precisions")
    if all(r is None for _, _, r in replicas):
        raise ScenarioError(
            f"{w.weight_dtype} weights need {w.weight_dtype.upper()} support, which none of the offered accelerators "
            f"({', '.join(gpus)}) has; expected weight_dtype bf16 or an accelerator with FP8",
            raw.origin("workloads", wid), field="weight_dtype")
    return [(g, p, r) for g, p, r in replicas if r is not None]


def _check_weights_fit(s: Scenario, raw: RawScenario, wid: str, replicas: list[tuple]) -> list[tuple]:
    """The replicas with KV memory left beside the weights and workspace; an error if none has."""
    w = s.workloads[wid]
    m = s.models[w.model]
    sv = s.serving
    fitting = [(g, p, r) for g, p, r in replicas if kv_budget_bytes(r) > 0]
    if not fitting:
        g, p, r = max(replicas, key=lambda x: (x[1] * x[2].hw.hbm_bytes, x[0]))
        a = s.accelerators[g]
        usable = p * r.hw.hbm_bytes * sv.usable_hbm_fraction
        need = r.weight_bytes + p * sv.workspace_gb_per_gpu * GB
        raise ScenarioError(
            f"{w.model} fits no offered accelerator: its {r.precision[0]} weights need {r.weight_bytes / GB:,.1f} GB "
            f"({m.total_params_b:g} B parameters × {r.weight_bytes_per_param:g} bytes) + "
            f"{p * sv.workspace_gb_per_gpu:g} GB workspace = {need / GB:,.1f} GB of HBM, but the largest replica the "
            f"offered accelerators allow, {g} × {p} GPUs, has {usable / GB:,.1f} GB usable "
            f"({p} GPUs × {r.hw.hbm_bytes / GB:,.1f} GB [{a.hbm_gb:g} GiB] × {sv.usable_hbm_fraction:g}); "
            "expected an accelerator with more memory, larger tp_degrees, or fp8 weights",
            raw.origin("workloads", wid), field="model")
    return fitting


def _check_itl_floor(s: Scenario, raw: RawScenario, wid: str, fitting: list[tuple]) -> None:
    """An error if one request's KV fits no replica, or if the ITL objective is below the
    fastest p99 inter-token gap (batch 1) of the allowed modes."""
    w = s.workloads[wid]
    sv = s.serving
    origin = raw.origin("workloads", wid)
    context = w.isl_mean_tokens + w.osl_mean_tokens / 2.0
    full = w.isl_mean_tokens + w.osl_mean_tokens
    floors: list[tuple[float, str]] = []
    best_budget = max(fitting, key=lambda x: kv_budget_bytes(x[2]) / kv_replication(x[2].model, x[1]))
    for g, p, r in fitting:
        per_request = r.kv_bytes_per_token * kv_replication(r.model, p) * full
        if kv_budget_bytes(r) < per_request:
            continue
        if "disaggregated" in sv.modes:
            step = float(decode_step_time_s(r, 1.0, context))
            floors.append((sv.itl_tail_factor * step * MS_PER_S, f"{g} × {p} GPUs, decode at batch 1"))
        if "colocated" in sv.modes:
            step = min(float(mixed_step_time_s(r, 1.0, context, c, w.isl_mean_tokens / 2.0))
                       for c in sv.colocated_chunk_tokens)
            floors.append((sv.itl_tail_factor * step * MS_PER_S,
                           f"{g} × {p} GPUs, colocated at batch 1 with a {min(sv.colocated_chunk_tokens)}-token chunk"))
    if not floors:
        g, p, r = best_budget
        per_request = r.kv_bytes_per_token * kv_replication(r.model, p) * full
        raise ScenarioError(
            f"one request of {full:g} tokens (isl_mean_tokens + osl_mean_tokens) needs {per_request / GB:,.2f} GB of KV "
            f"cache, more than the {kv_budget_bytes(r) / GB:,.2f} GB any offered replica has left beside the weights "
            f"of {w.model} (best: {g} × {p} GPUs); expected shorter requests or an accelerator with more memory",
            origin, field="isl_mean_tokens")
    floor, where = min(floors)
    if w.itl_p99_ms < floor:
        raise ScenarioError(
            f"the {w.itl_p99_ms:g} ms p99 ITL objective is below the physical floor of every serving config: the "
            f"fastest p99 inter-token gap of {w.model} on the offered accelerators is {floor:.2f} ms ({where}, × "
            f"{sv.itl_tail_factor:g} tail factor); expected itl_p99_ms ≥ {math.ceil(floor * 10) / 10:.1f}",
            origin, field="itl_p99_ms")


def _check_prefill_fits(s: Scenario, raw: RawScenario, wid: str, configs) -> None:
    """Disaggregated only: an error if no prefill replica holds the p99 prompt's KV and the
    resident shared prefixes."""
    w = s.workloads[wid]
    sv = s.serving
    if "disaggregated" in sv.modes and "colocated" not in sv.modes and not any(c.role == Role.PREFILL for c in configs):
        raise ScenarioError(
            f"no prefill replica of {w.model} on the offered accelerators holds the KV of the p99 prompt "
            f"({w.isl_p99_tokens:g} tokens) and {sv.resident_prefixes:g} resident shared prefixes of "
            f"{w.shared_prefix_tokens:g} tokens; expected shorter prompts or prefixes, or the colocated mode",
            raw.origin("workloads", wid), field="isl_p99_tokens")


def _check_ttft(s: Scenario, raw: RawScenario, wid: str) -> None:
    """TTFT objective no longer than what every request spends before any compute starts."""
    w = s.workloads[wid]
    sv, net = s.serving, s.network
    rtt = net.access_rtt_ms + (0.0 if net.graph else net.site_rtt_ms)
    spent = sv.fixed_overhead_ms + rtt
    if w.ttft_p99_ms > spent:
        return
    where = "last-mile" if net.graph else "same-metro round trip"
    spending = (f"tokenisation {sv.tokenization_ms:g} + safety {sv.safety_ms:g} + admission {sv.admission_ms:g} ms "
                f"and the shortest {where} {rtt:g} ms add up to {spent:g} ms")
    raise ScenarioError(f"the {w.ttft_p99_ms:g} ms p99 TTFT objective is spent before any compute starts: {spending}; "
                        f"expected ttft_p99_ms well above {spent:g}", raw.origin("workloads", wid), field="ttft_p99_ms")


def _check_tiers(s: Scenario, raw: RawScenario, wid: str) -> None:
    """A metro routes to a site through a latency tier whose RTT bound is spent from the TTFT
    objective; where even the tightest tier leaves nothing, no site can serve the workload."""
    w, sv = s.workloads[wid], s.serving
    left = w.ttft_p99_ms - sv.fixed_overhead_ms
    if sv.tier_rtt_ms[0] >= left:
        raise ScenarioError(
            f"the tightest latency tier ({sv.tier_rtt_ms[0]:g} ms RTT) leaves no time for workload '{wid}': its "
            f"{w.ttft_p99_ms:g} ms p99 TTFT less {sv.fixed_overhead_ms:g} ms of fixed overheads is {left:g} ms; "
            f"expected tier bounds well below {left:g} ms, e.g. [20, 45, 90, 180]",
            raw.origin("serving"), field="tier_rtt_ms")


# Plausibility bound on the fleet's total demand in its busiest slice: ~40,000 × the reference
# scenario's peak (North America and Europe); beyond it the figures are a unit slip, not a plan.
MAX_PEAK_REQUESTS_PER_S = 1e8


def _check_demand(s: Scenario, raw: RawScenario) -> None:
    """Some demand, finite, and not beyond any fleet. The culprit is named: the demand table
    row, or the factor of the demand model furthest above its usual size."""
    from optimizer.geography.demand import build_slices, total_per_slice

    slices = build_slices(s)
    with np.errstate(over="ignore", invalid="ignore"):
        per_slice = total_per_slice(s, slices)
        total = float((per_slice * slices["weight_hours"].to_numpy()).sum() * SECONDS_PER_HOUR)
    peak = float(per_slice.max()) if len(per_slice) else 0.0
    if math.isfinite(total) and total >= 1.0 and peak <= MAX_PEAK_REQUESTS_PER_S:
        return
    if s.demand.table is not None:
        if not math.isfinite(peak) or peak > MAX_PEAK_REQUESTS_PER_S:
            i = max(range(len(s.demand.table)), key=lambda j: s.demand.table[j].requests_per_s)
            row = s.demand.table[i]
            raise ScenarioError(
                f"{_too_much(peak)}; this row asks {row.requests_per_s:g} req/s (× scale {s.demand.scale:g}); "
                f"expected requests/s of a real fleet", raw.origin("demand", "table", i), field="requests_per_s")
        hours = sorted({r.hour for r in s.demand.table})
        raise ScenarioError(
            f"the demand table adds up to {total:.3g} requests in the year: every requests_per_s is 0, or no row "
            f"matches a planned period and hour (rows give hours {hours}; horizon.hours plans {s.horizon.hours}); "
            "expected some demand to plan for", raw.origin("demand"), field="table")
    origin, field, value = _largest_factor(s, raw)
    if not math.isfinite(peak) or peak > MAX_PEAK_REQUESTS_PER_S:
        raise ScenarioError(
            f"{_too_much(peak)} (peak_requests_per_s_per_million_people × metro weight × mix × scale × day-type "
            f"multiplier × growth); the largest factor is this one, {value:g}; expected demand of a real fleet",
            origin, field=field)
    raise ScenarioError(
        f"the scenario has no demand: requests add up to {total:.3g} in the year (peak_requests_per_s_per_million_"
        "people × metro weight × mix × scale × diurnal profile at the planned hours); expected some metro and "
        "workload with demand", *_no_demand_culprit(s, raw))


def _check_grid_carbon(s: Scenario, raw: RawScenario) -> None:
    """A carbon price or cap needs every site's grid: a site without one would emit nothing."""
    if s.carbon.price_usd_per_t <= 0 and s.carbon.cap_t_per_year is None:
        return
    missing = sorted(site for site in s.sites if site not in s.grid_carbon)
    if missing:
        raise ScenarioError(
            f"carbon is priced or capped but the grid's carbon intensity of site(s) {', '.join(missing)} is not "
            "known; expected a grid_carbon row for each site (the catalogue's grid_carbon.csv lists the shipped "
            "sites), or no carbon price and cap", raw.origin("carbon"), field="carbon")


def _too_much(peak: float) -> str:
    return (f"the fleet's demand in its busiest hour is {peak:.3g} req/s, beyond any plausible fleet "
            f"(at most {MAX_PEAK_REQUESTS_PER_S:.0e} req/s)")


def _largest_factor(s: Scenario, raw: RawScenario):
    """(origin, field, value) of the demand-model factor furthest above its usual size."""
    usual = 10.0  # people in millions, requests/s per million people: tens at most
    candidates = [(w.peak_requests_per_s_per_million_people / usual, raw.origin("workloads", k),
                   "peak_requests_per_s_per_million_people", w.peak_requests_per_s_per_million_people)
                  for k, w in s.workloads.items()]
    for m, metro in s.metros.items():
        field = "demand_weight" if metro.demand_weight is not None else "population"
        candidates.append((metro.weight / usual, raw.origin("metros", m), field, getattr(metro, field)))
    for i, mix in enumerate(s.demand.mix):
        candidates.append((mix.multiplier, raw.origin("demand", "mix", i), "multiplier", mix.multiplier))
    candidates.append((s.demand.scale, raw.origin("demand"), "scale", s.demand.scale))
    growth = (1 + s.demand.growth_per_period) ** (len(s.horizon.periods) - 1)
    candidates.append((growth, raw.origin("demand"), "growth_per_period", s.demand.growth_per_period))
    for d in s.horizon.day_types:
        candidates.append((d.demand_multiplier, raw.origin("horizon"), "day_types", d.demand_multiplier))
    _, origin, field, value = max(candidates, key=lambda c: c[0])
    return origin, field, value


def _no_demand_culprit(s: Scenario, raw: RawScenario):
    if all(w.peak_requests_per_s_per_million_people == 0 for w in s.workloads.values()):
        return raw.origin("workloads", sorted(s.workloads)[0]), "peak_requests_per_s_per_million_people"
    if all(m.weight == 0 for m in s.metros.values()):
        metro = s.metros[sorted(s.metros)[0]]
        return raw.origin("metros", metro.id), "demand_weight" if metro.demand_weight is not None else "population"
    if all(d.demand_multiplier == 0 for d in s.horizon.day_types):
        return raw.origin("horizon"), "day_types"
    if s.demand.mix and all(r.multiplier == 0 for r in s.demand.mix):
        return raw.origin("demand", "mix", 0), "multiplier"
    return raw.origin("demand"), "scale"
