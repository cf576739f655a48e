"""Why a plan cannot serve all demand — said in a planner's words, not a solver's."""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from optimizer.base.units import KW_PER_MW, Role
from optimizer.instance.build import Instance
from optimizer.scenario import Scenario
from optimizer.serving.budget import Stages, best_waterfall
from optimizer.serving.configs import decode_floor_ms, workload_configs
from optimizer.solve.fleet import Solution, carbon_tonnes, committed_nodes, plan_hours, plan_tonnes, site_kw


def unreachable_reasons(s: Scenario, inst: Instance, rtt: pd.DataFrame) -> list[str]:
    """One line per (metro, workload) no site can serve within its objectives."""
    lines = []
    configs_at: dict = {}
    stages = Stages(s)
    for item in inst.unreachable:
        m, k = item["metro"], item["workload"]
        w = s.workloads[k]
        model = s.models[w.model]
        decodable = any(c.role in (Role.DECODE, Role.COLOCATED)
                        for g in s.accelerators for c in workload_configs(w, model, s.accelerators[g], s.serving))
        if not decodable:
            floor = min(decode_floor_ms(w, model, s.accelerators[g], s.serving) for g in s.accelerators)
            lines.append(f"{k}: its {w.itl_p99_ms:g} ms p99 ITL objective is below the physical floor of every "
                         f"offered accelerator — the fastest decode step of {w.model} is {floor:.1f} ms (p99)")
            continue
        best = None
        for site in s.sites:
            if (site, k) not in configs_at:
                configs_at[(site, k)] = [c for g in s.supply.get(site, {}) for c in workload_configs(w, model, s.accelerators[g], s.serving)]
            wf = best_waterfall(w, s, float(rtt.loc[m, site]), configs_at[(site, k)], stages)
            if wf is not None and (best is None or wf.queue_budget_ms > best[1].queue_budget_ms):
                best = (site, wf)
        if best is None:
            lines.append(f"{k} from {m}: no candidate site offers an accelerator that can serve {w.model}")
            continue
        site, wf = best
        need = w.ttft_p99_ms - wf.queue_budget_ms
        band = max(s.serving.tier_rtt_ms)
        if wf.rtt_ms > band:
            lines.append(f"{k} from {m}: every site is farther than the loosest latency tier ({band:g} ms RTT); "
                         f"the nearest, {site}, is {wf.rtt_ms:.0f} ms away")
        elif need < w.ttft_p99_ms:
            lines.append(_tier_reason(s, k, m, site, wf, need))
        else:
            lines.append(
                f"{k} from {m} cannot meet its {w.ttft_p99_ms:g} ms p99 TTFT from any site: the best, {site}, needs "
                f"{need:.0f} ms before any queueing (RTT {wf.rtt_ms:.0f} + overheads {wf.overhead_ms:.0f} + prefill "
                f"{wf.prefill_ms:.0f} + KV transfer {wf.kv_transfer_ms:.0f} + first token {wf.first_token_ms:.0f}) — "
                f"{need - w.ttft_p99_ms:.0f} ms over")
    return lines


def _tier_reason(s: Scenario, k: str, m: str, site: str, wf, need_ms: float) -> str:
    """The round trip fits the objective, but the latency tier it falls in does not: a pool is
    sized for its tier's RTT bound, and that bound leaves no time for queueing."""
    w = s.workloads[k]
    tiers = sorted(s.serving.tier_rtt_ms)
    tier = next(b for b in tiers if b >= wf.rtt_ms)
    below = [b for b in tiers if b < wf.rtt_ms]
    rest = need_ms - wf.rtt_ms  # everything but the network
    room = w.ttft_p99_ms - rest  # the largest tier bound that would leave any queueing time
    suggestion = sorted(set(tiers) | {float(round((wf.rtt_ms + room) / 2))})
    return (f"{k} from {m}: the round trip to the best site, {site}, is {wf.rtt_ms:.1f} ms"
            + (f", just over the {below[-1]:g} ms latency tier" if below else "")
            + f", so its pools are sized for the {tier:g} ms tier, whose bound leaves no time for queueing "
            f"({tier:g} + overheads {wf.overhead_ms:.0f} + prefill {wf.prefill_ms:.0f} + KV transfer "
            f"{wf.kv_transfer_ms:.0f} + first token {wf.first_token_ms:.0f} ≥ the {w.ttft_p99_ms:g} ms p99 TTFT); "
            f"expected a tier bound between {wf.rtt_ms:.0f} and {room:.0f} ms in serving.tier_rtt_ms, e.g. "
            f"{[float(b) if b % 1 else int(b) for b in suggestion]}")


def capacity_reasons(s: Scenario, inst: Instance, sol: Solution) -> list[str]:
    """Unserved demand that had somewhere to go: which sites ran out of megawatts or supply."""
    unreachable = {(u["metro"], u["workload"]) for u in inst.unreachable}
    by_state = defaultdict(float)
    for (m, k, sid), u in sol.unserved.items():
        if (m, k) not in unreachable and u > 1e-6 and inst.states[sid].lost_site is None:
            by_state[sid] += u
    if not by_state:
        return []
    sid = max(by_state, key=by_state.get)
    slice_row = inst.slices.loc[inst.states[sid].slice]
    committed = committed_nodes(sol)
    drawn = site_kw(inst, sol, sid)
    full = []
    for site in inst.sites:
        kw = drawn.get(site, 0.0)
        if kw >= 0.98 * inst.power_kw[site]:
            full.append(f"{site} at {kw / KW_PER_MW:.1f} of {inst.power_kw[site] / KW_PER_MW:.1f} MW")
        for g in inst.gpus:
            if (site, g) in inst.contracts and committed.get((site, g), 0) >= inst.committed_max[(site, g)] > 0 \
                    and sol.ondemand.get((site, g, sid), 0) >= inst.ondemand_max[(site, g)]:
                full.append(f"{site} out of {g} supply ({inst.committed_max[(site, g)]} reserved + "
                            f"{inst.ondemand_max[(site, g)]} on-demand nodes)")
    if inst.carbon_cap_t is not None:
        tonnes = sum(plan_tonnes(inst, sol).values())
        if tonnes + _cleanest_node_t(inst) > inst.carbon_cap_t:  # not one more node fits under the cap
            full.append(f"the carbon cap of {inst.carbon_cap_t:,.0f} t a year is reached ({tonnes:,.0f} t): serving "
                        "the rest would emit more — expected a higher carbon.cap_t_per_year, cleaner sites or "
                        "more efficient accelerators")
    # the penalty is above any cost of serving (instance.build.serving_ceiling_usd), so with no
    # limit reached the whole plan's search, not the policy, left the demand
    where = "; ".join(full) if full else ("no site is at its power or supply limit and leaving demand costs more than "
                                          "serving it: the search for a whole plan fell short — expected a plan at "
                                          "--effort thorough to serve it")
    return [f"{by_state[sid]:.1f} req/s go unserved at the busiest such hour ({slice_row['period']} {slice_row['day_type']} "
            f"{int(slice_row['hour']):02d}:00 UTC): {where}"]


def _cleanest_node_t(inst: Instance) -> float:
    """Tonnes the cleanest node of any (site, accelerator) emits powered for the planned year."""
    ids, hours = plan_hours(inst)
    slices = [inst.states[sid].slice for sid in ids]
    return min((float(carbon_tonnes(inst, s, g, slices, hours.weight_hours, 1).sum()) for s, g in inst.site_gpus),
               default=0.0)


def diagnose(s: Scenario, inst: Instance, sol: Solution, rtt: pd.DataFrame) -> str:
    lines = unreachable_reasons(s, inst, rtt) + capacity_reasons(s, inst, sol)
    if not lines:
        lines = ["some demand is unserved but no single cause was found; rerun with --allow-unserved to inspect the plan"]
    shown = lines[:12] + ([f"… and {len(lines) - 12} more"] if len(lines) > 12 else [])
    return "the plan cannot serve all demand:\n  " + "\n  ".join(shown)
