"""Demand, routing and unserved demand.

Sets      A_t    arcs (metro m, site s, workload k, tier τ) usable in state t: only arcs
                 whose RTT puts the metro in a tier where the site has a pool, at most the
                 K nearest such sites per (m, k) (instance)
          G_t    demand groups: the metros of a workload whose arcs in state t reach the same
                 (site, tier) pairs. Routes cost the same from every metro (egress per request
                 of the workload), so a group's metros are one demand in the program — an
                 exact aggregation (fewer columns: 1,252 arcs → 731 on the reference) — and
                 each route's requests are split back to them by their demand. Operating a
                 plan with a tie-break per ms of round trip, every metro is its own group.
Columns   x[g,s,k,τ,t] ≥ 0   requests/s routed from group g along its arcs into (s, k, τ);
          u[g,k,t] ≥ 0        unserved requests/s
Balance   Σ_{(s,τ)} x[g,s,k,τ,t] + u[g,k,t] = Σ_{m ∈ g} λ[m,k,t]      (parameter demand_rps)
Cost      unserved: 3600 · h_t · π_k · u   (π_k = penalty $/M tokens × mean output tokens / 1e6;
                 h_t the slice's hours, or a large notional weight in a site-loss state)
          egress:   3600 · h_t · e_k · x   (e_k = $/GB × bytes per output token × output tokens)
Registers tier_inflow[(regime, s, k, τ, t)] += x.

Prompt-length options (inst.prompt_options, only when the plan chooses a split): a parent
workload p is served whole or split at one of its thresholds; option o's workloads carry
demand as if o took all of p's, and the option's weight z[p,o] ∈ [0, 1] scales it:
          Σ x[g,s,k,τ,t] + u[g,k,t] = z[p,o] · Σ_{m ∈ g} λ[m,k,t]   for k of option o,
          Σ_o z[p,o] = 1.
"""

from __future__ import annotations

from formulations.linear import Param


def demand_groups(inst, state, each_metro: bool = False) -> dict[tuple[str, str], tuple]:
    """(metro, workload) with demand in ``state`` → its group: the sorted metros of the workload
    whose arcs reach the same (site, tier) pairs (each metro alone with ``each_metro``)."""
    reach: dict = {}
    for a in inst.arcs_in(state):
        if (a.metro, a.workload, state.slice) in inst.demand:
            reach.setdefault((a.metro, a.workload), set()).add((a.site, a.tier))
    members: dict = {}
    for (m, k), pairs in sorted(reach.items()):
        members.setdefault((k, frozenset(pairs)) if not each_metro else (k, m), []).append(m)
    out = {(m, k): (m,) for m, k, t in inst.demand if t == state.slice}  # demand with no arc: alone
    for (k, _), metros in members.items():
        for m in metros:
            out[(m, k)] = tuple(metros)
    return out


def add_to(build) -> None:
    build.terms.writes("tier_inflow")
    lp, inst, terms = build.lp, build.inst, build.terms
    tie_break = build.mode.tie_breaks
    arc_index, demand_index, split = [], set(), {}
    rtt = {}
    for st in inst.states:
        group = demand_groups(inst, st, each_metro=tie_break)
        for (m, k), who in group.items():
            demand_index.add((who, k, st.id))
            split[(who, m, k, st.id)] = inst.demand[(m, k, st.slice)]
        seen = set()
        for a in inst.arcs_in(st):
            who = group.get((a.metro, a.workload))
            if who is not None and (who, a.site, a.workload, a.tier) not in seen:
                seen.add((who, a.site, a.workload, a.tier))
                arc_index.append((who, a.site, a.workload, a.tier, st.id))
                rtt[(who, a.site)] = a.rtt_ms
    total: dict = {}
    for (who, _, k, sid), v in split.items():
        total[(who, k, sid)] = total.get((who, k, sid), 0.0) + v
    lp.param("metro_demand_rps", split)
    lp.param("demand_rps", {key: total[key] for key in sorted(demand_index)})
    lp.param("penalty_usd_per_request", {(k,): v for k, v in inst.penalty_usd_per_request.items()})
    lp.param("egress_usd_per_request", {(k,): v for k, v in inst.egress_usd_per_request.items()})
    route = lp.add_cols("route", arc_index)
    unserved = lp.add_cols("unserved", sorted(demand_index))
    arcs_of: dict = {}
    for key, col in route.items():
        who, site, k, tier, sid = key
        arcs_of.setdefault((who, k, sid), []).append((col, 1.0))
        terms.tier_inflow[(inst.states[sid].regime, site, k, tier, sid)].append((col, 1.0))
        hours = inst.states[sid].weight_hours
        if hours > 0:
            terms.add_cost("egress", col, Param("egress_usd_per_request", (k,), inst.seconds_per_hour * hours))
        if tie_break:
            terms.add_cost("tie_break", col, build.mode.tie_break_usd_per_gpu_hour * rtt[(who, site)] / inst.ms_per_s)
    weight_of = _option_weights(lp, inst)
    for key, col in unserved.items():
        who, k, sid = key
        demand = Param("demand_rps", key)
        if k in weight_of:
            weighted = [(col, 1.0), (weight_of[k], demand * -1.0)]
            lp.add_row("demand_balance", key, arcs_of.get((who, k, sid), []) + weighted, 0.0, 0.0)
        else:
            lp.add_row("demand_balance", key, arcs_of.get((who, k, sid), []) + [(col, 1.0)], demand, demand)
        terms.add_cost("unserved", col, Param("penalty_usd_per_request", (k,),
                                              inst.seconds_per_hour * inst.states[sid].penalty_hours))


def _option_weights(lp, inst) -> dict:
    """Workload → the column of its prompt-length option's weight, the weights of each parent
    summing to one (module docstring); empty without options."""
    weight_of = {}
    for parent, options in sorted(inst.prompt_options.items()):
        keys = [(parent, i) for i in range(len(options))]
        cols = lp.add_cols("prompt_option", keys, upper=1.0)  # the block's columns so far, every parent's
        lp.add_row("prompt_option_choice", (parent,), [(cols[key], 1.0) for key in keys], 1.0, 1.0)
        for i, workloads in enumerate(options):
            for k in workloads:
                weight_of[k] = cols[(parent, i)]
    return weight_of


def refresh(lp, inst) -> list:
    """New demand and per-request prices for a program of the same structure."""
    split = {key: inst.demand[(key[1], key[2], inst.states[key[3]].slice)] for key in lp.params["metro_demand_rps"]}
    total = dict.fromkeys(lp.params["demand_rps"], 0.0)
    for (who, _, k, sid), v in split.items():
        total[(who, k, sid)] += v
    return [
        lp.set_params("metro_demand_rps", split),
        lp.set_params("demand_rps", total),
        lp.set_params("penalty_usd_per_request", {(k,): v for k, v in inst.penalty_usd_per_request.items()}),
        lp.set_params("egress_usd_per_request", {(k,): v for k, v in inst.egress_usd_per_request.items()}),
    ]


def by_metro(lp, routes: dict, unserved: dict) -> tuple[dict, dict]:
    """A solution's routes and unserved demand per group split back to the group's metros in
    proportion to their demand: (metro, site, workload, tier, state) and (metro, workload, state)."""
    demand = lp.params["metro_demand_rps"]
    total = lp.params["demand_rps"]
    members: dict = {}
    for (who, m, k, sid), v in demand.items():
        members.setdefault((who, k, sid), []).append((m, v))

    def shares(who, k, sid):
        whole = total[(who, k, sid)]
        return [(m, v / whole if whole > 0 else 1.0 / len(who)) for m, v in members[(who, k, sid)]]

    out_routes, out_unserved = {}, {}
    for (who, site, k, tier, sid), x in routes.items():
        for m, share in shares(who, k, sid):
            if x * share > 0:
                out_routes[(m, site, k, tier, sid)] = x * share
    for (who, k, sid), u in unserved.items():
        for m, share in shares(who, k, sid):
            if u * share > 0:
                out_unserved[(m, k, sid)] = u * share
    return out_routes, out_unserved


def by_group(lp, routes: dict, unserved: dict) -> tuple[dict, dict]:
    """Routes and unserved demand per metro summed into the program's groups."""
    group = {(m, k, sid): who for (who, m, k, sid) in lp.params["metro_demand_rps"]}
    out_routes, out_unserved = {}, {}
    for (m, site, k, tier, sid), x in routes.items():
        who = group.get((m, k, sid))
        if who is not None:
            out_routes[(who, site, k, tier, sid)] = out_routes.get((who, site, k, tier, sid), 0.0) + x
    for (m, k, sid), u in unserved.items():
        who = group.get((m, k, sid))
        if who is not None:
            out_unserved[(who, k, sid)] = out_unserved.get((who, k, sid), 0.0) + u
    return out_routes, out_unserved
