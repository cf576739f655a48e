"""Pre-flight checks: inputs that are valid one field at a time but that no plan can use.

`optimizer.scenario.validate` checks every field and the references between tables; it knows
nothing of the curves. `preflight` runs after it, before any plan is built, and asks of each
workload the questions that need the serving configs (`optimizer.configs`):

* does the model fit any replica the offered accelerators allow (weights + workspace within
  p·H·u)? — if not, say how much memory it needs and how much the largest replica has;
* does one request (prompt + output) fit the KV memory left beside the weights?
* can any config meet the ITL objective? — if not, say the physical floor in ms (the fastest
  p99 inter-token gap, at batch 1, of the modes the scenario allows);
* is the TTFT objective longer than the fixed overheads and the shortest possible round trip?

and checks the latency graph file, if one is given (so that `fleetplan validate` finds a
disconnected graph too). Each failure is a `ScenarioError` naming the workloads row and field.
"Offered" accelerators are those some candidate site can supply. Cost: `workload_configs`
for every (workload, accelerator), tens of milliseconds on the reference scenario.
"""

from __future__ import annotations

import math

from optimizer.configs import (
    BYTES_PER_VALUE,
    kv_bytes_per_token,
    make_replica,
    parallel_degrees,
    workload_configs,
)
from optimizer.curves.memory import kv_budget_bytes, kv_replication
from optimizer.curves.roofline import decode_step_time_s, mixed_step_time_s
from optimizer.errors import ScenarioError
from optimizer.scenario import RawScenario, Scenario

GB = 1e9


def offered_accelerators(s: Scenario) -> list[str]:
    """Accelerators some candidate site can supply (sorted)."""
    return sorted({g for per in s.supply.values() for g in per if g in s.accelerators})


def preflight(s: Scenario, raw: RawScenario) -> None:
    """Raise `ScenarioError` for the first input no plan could use (see the module docstring)."""
    gpus = offered_accelerators(s)
    for wid in sorted(s.workloads):
        _check_workload(s, raw, wid, gpus)
    if s.network.graph:
        from optimizer.network import build_graph

        build_graph(s, raw.path.parent)


def _domain(s: Scenario, g: str) -> int:
    a = s.accelerators[g]
    return a.scaleup_domain_gpus if a.scaleup_domain_gpus > 1 else a.gpus_per_node


def _servable(configs) -> bool:
    roles = {c.role for c in configs}
    return "colocated" in roles or {"prefill", "decode"} <= roles


def _check_workload(s: Scenario, raw: RawScenario, wid: str, gpus: list[str]) -> None:
    w = s.workloads[wid]
    m = s.models[w.model]
    sv = s.serving
    origin = raw.origin("workloads", wid)
    configs = [c for g in gpus for c in workload_configs(w, m, s.accelerators[g], sv)]
    _check_ttft(s, raw, wid)
    if _servable(configs):
        return

    # Why not? In the order a planner would fix it: precision, memory, context, ITL.
    replicas = [(g, p, make_replica(m, s.accelerators[g], sv, p, w.weight_dtype, w.kv_dtype))
                for g in gpus for p in parallel_degrees(m, s.accelerators[g], sv)]
    if not replicas:
        domains = ", ".join(f"{g}: {_domain(s, g)} GPUs" for g in gpus)
        raise ScenarioError(
            f"no allowed tensor-parallel degree {sorted(sv.tp_degrees)} fits inside the scale-up domain of any "
            f"offered accelerator ({domains}), so {w.model} (workload '{wid}') has no replica; expected degrees "
            "no larger than the domain, e.g. [1, 2, 4, 8]",
            raw.origin("serving"), field="tp_degrees")
    if all(r is None for _, _, r in replicas):
        raise ScenarioError(
            f"{w.weight_dtype} weights need {w.weight_dtype.upper()} support, which none of the offered accelerators "
            f"({', '.join(gpus)}) has; expected weight_dtype bf16 or an accelerator with FP8",
            origin, field="weight_dtype")
    replicas = [(g, p, r) for g, p, r in replicas if r is not None]
    fitting = [(g, p, r) for g, p, r in replicas if kv_budget_bytes(r) > 0]
    if not fitting:
        g, p, r = max(replicas, key=lambda x: (x[1] * x[2].hw.hbm_bytes, x[0]))
        a = s.accelerators[g]
        usable = p * r.hw.hbm_bytes * sv.usable_hbm_fraction
        need = r.weight_bytes + p * sv.workspace_gb_per_gpu * GB
        raise ScenarioError(
            f"{w.model} fits no offered accelerator: its {w.weight_dtype} weights need {r.weight_bytes / GB:,.1f} GB "
            f"({m.total_params_b:g} B parameters × {BYTES_PER_VALUE[w.weight_dtype]:g} B) + "
            f"{p * sv.workspace_gb_per_gpu:g} GB workspace = {need / GB:,.1f} GB of HBM, but the largest replica the "
            f"offered accelerators allow, {g} × {p} GPUs, has {usable / GB:,.1f} GB usable "
            f"({p} GPUs × {r.hw.hbm_bytes / GB:,.1f} GB [{a.hbm_gb:g} GiB] × {sv.usable_hbm_fraction:g}); expected an accelerator with more memory, "
            "larger tp_degrees, or fp8 weights",
            origin, field="model")

    kv = kv_bytes_per_token(w, m)
    context = w.isl_mean_tokens + w.osl_mean_tokens / 2.0
    full = w.isl_mean_tokens + w.osl_mean_tokens
    floors: list[tuple[float, str]] = []
    best_budget = max(fitting, key=lambda x: kv_budget_bytes(x[2]) / kv_replication(x[2].model, x[1]))
    for g, p, r in fitting:
        per_request = kv * kv_replication(r.model, p) * full
        if kv_budget_bytes(r) < per_request:
            continue
        if "disaggregated" in sv.modes:
            step = float(decode_step_time_s(r, 1.0, context))
            floors.append((sv.itl_tail_factor * step * 1e3, f"{g} × {p} GPUs, decode at batch 1"))
        if "colocated" in sv.modes:
            step = min(float(mixed_step_time_s(r, 1.0, context, c, w.isl_mean_tokens / 2.0)) for c in sv.colocated_chunk_tokens)
            floors.append((sv.itl_tail_factor * step * 1e3,
                           f"{g} × {p} GPUs, colocated at batch 1 with a {min(sv.colocated_chunk_tokens)}-token chunk"))
    if not floors:
        g, p, r = best_budget
        per_request = kv * kv_replication(r.model, p) * full
        raise ScenarioError(
            f"one request of {full:g} tokens (isl_mean_tokens + osl_mean_tokens) needs {per_request / GB:,.2f} GB of KV "
            f"cache, more than the {kv_budget_bytes(r) / GB:,.2f} GB any offered replica has left beside the weights "
            f"of {w.model} (best: {g} × {p} GPUs); expected shorter requests or an accelerator with more memory",
            origin, field="isl_mean_tokens")
    floor, where = min(floors)
    if w.itl_p99_ms < floor:
        raise ScenarioError(
            f"the {w.itl_p99_ms:g} ms p99 ITL objective is below the physical floor of every serving config: the "
            f"fastest p99 inter-token gap of {w.model} on the offered accelerators is {floor:.1f} ms ({where}, × "
            f"{sv.itl_tail_factor:g} tail factor); expected itl_p99_ms ≥ {math.ceil(floor * 10) / 10:.1f}",
            origin, field="itl_p99_ms")
    if "disaggregated" in sv.modes and "colocated" not in sv.modes and not any(c.role == "prefill" for c in configs):
        raise ScenarioError(
            f"no prefill replica of {w.model} on the offered accelerators holds the KV of the p99 prompt "
            f"({w.isl_p99_tokens:g} tokens) and {sv.resident_prefixes:g} resident shared prefixes of "
            f"{w.shared_prefix_tokens:g} tokens; expected shorter prompts or prefixes, or the colocated mode",
            origin, field="isl_p99_tokens")
    roles = ", ".join(sorted({c.role for c in configs})) or "none"
    raise ScenarioError(
        f"{w.model} has no complete serving config on the offered accelerators ({', '.join(gpus)}) in the allowed "
        f"modes ({', '.join(sv.modes)}); roles found: {roles}",
        origin, field="model")


def _check_ttft(s: Scenario, raw: RawScenario, wid: str) -> None:
    """TTFT objective no longer than what every request spends before any compute starts."""
    w = s.workloads[wid]
    sv, net = s.serving, s.network
    rtt = net.access_rtt_ms + (0.0 if net.graph else net.site_rtt_ms)
    spent = sv.fixed_overhead_ms + rtt
    if w.ttft_p99_ms <= spent:
        where = "last-mile" if net.graph else "same-metro round trip"
        raise ScenarioError(
            f"the {w.ttft_p99_ms:g} ms p99 TTFT objective is spent before any compute starts: tokenisation "
            f"{sv.tokenization_ms:g} + safety {sv.safety_ms:g} + admission {sv.admission_ms:g} ms and the shortest "
            f"{where} {rtt:g} ms add up to {spent:g} ms; expected ttft_p99_ms well above {spent:g}",
            raw.origin("workloads", wid), field="ttft_p99_ms")
