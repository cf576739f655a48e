"""A master solution made whole (`repair`), with the fleet's rules (`optimizer.solve.fleet`).

Inside a site (`rebalance`): when whole replicas overflow what a site can host of an
accelerator (its reserved plus on-demand supply caps), load moves between the site's
interchangeable pools — the prefill and colocated pools of one latency tier, the decode pools
of one workload and speed class — so that every accelerator type stays within its supply.
Routing is untouched, so every request keeps its latency tier and its TTFT budget."""

from __future__ import annotations

from collections import defaultdict

from optimizer.base.units import KW_PER_MW, Role
from optimizer.instance.build import Instance
from optimizer.instance.pools import Pool
from optimizer.solve.commitments import commit
from optimizer.solve.fleet import (
    Solution,
    capacity_rps,
    gpus_in_replicas,
    gpus_short,
    kw_over,
    nodes_for,
    replicas_for,
    supply_gpus,
    whole_replicas,
)


def _fill(inst: Instance, pools: list[Pool], total: float, room: dict) -> dict[int, float] | None:
    """Spread ``total`` requests/s over ``pools`` (cheapest per request first), each taking
    what whole replicas fit in its accelerator's room; None if the room is not enough."""
    def price(p: Pool) -> float:
        per_replica = capacity_rps(p, 8) / 8
        return p.gpus * inst.contracts[(p.site, p.gpu)].ondemand / inst.gpus_per_node[p.gpu] / max(per_replica, 1e-12)

    out: dict[int, float] = {}
    left = total
    for p in sorted(pools, key=price):
        if left <= 1e-12:
            break
        n_max = room[p.gpu] // p.gpus
        take = min(left, capacity_rps(p, n_max))
        if take > 1e-12:
            out[p.id] = take
            room[p.gpu] -= replicas_for(p, take) * p.gpus
            left -= take
    return out if left <= 1e-9 * max(total, 1.0) else None


def rebalance(inst: Instance, flows: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """Flows with overflowing (site, state) groups redistributed where that fits."""
    limits = {(s, g): supply_gpus(inst, s, g) for s, g in inst.site_gpus}
    by_group: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for key in flows:
        by_group[(inst.pools[key[0]].site, key[1])].append(key)
    out = dict(flows)
    for (site, sid), keys in by_group.items():
        used: dict[str, int] = defaultdict(int)
        for key in keys:
            p = inst.pools[key[0]]
            used[p.gpu] += replicas_for(p, flows[key]) * p.gpus
        if all(used[g] <= limits[(site, g)] for g in used):
            continue
        room = {g: limits[(site, g)] for s, g in inst.site_gpus if s == site}
        state_pools = [p for p in inst.pools_in(inst.states[sid]) if p.site == site]
        tiers: dict = defaultdict(float)
        for key in keys:
            p = inst.pools[key[0]]
            if p.role != Role.DECODE:
                tiers[(p.workload, p.tier)] += flows[key]
        new: dict[tuple[int, int], float] = {}
        for (k, tier), total in sorted(tiers.items()):
            group = [p for p in state_pools if p.role != Role.DECODE and p.workload == k and p.tier == tier]
            filled = _fill(inst, group, total, room)
            if filled is None:
                break
            new.update({(pid, sid): y for pid, y in filled.items()})
        else:
            decode_total: dict = defaultdict(float)
            for (pid, _), y in new.items():
                if inst.pools[pid].role == Role.PREFILL:
                    decode_total[(inst.pools[pid].workload, inst.pools[pid].speed)] += y
            for (k, speed), total in sorted(decode_total.items()):
                group = [p for p in state_pools if p.role == Role.DECODE and p.workload == k and p.speed == speed]
                filled = _fill(inst, group, total, room)
                if filled is None:
                    break
                new.update({(pid, sid): y for pid, y in filled.items()})
            else:
                for key in keys:
                    out.pop(key, None)
                out.update(new)
    return out


def repair(inst: Instance, flows: dict, routes: dict, unserved: dict) -> Solution:
    """Make a master solution whole: whole replicas per pool and state (the smallest pool
    meeting its SLO capacity at the peak-sized load), then per (site, accelerator) the
    cheapest whole commitment and on-demand nodes that host them (`commit`); where whole
    replicas overflow a site's supply, load first moves between the site's interchangeable
    pools (`rebalance`). Breaches of supply caps or power are recorded, never hidden."""
    flows = rebalance(inst, flows)
    replicas = whole_replicas(inst, flows)
    need = {key: int(nodes_for(v, inst.gpus_per_node[key[1]])) for key, v in gpus_in_replicas(inst, replicas).items()}
    committed, ondemand, violations = commit(inst, need)
    sol = Solution(committed, ondemand, dict(flows), replicas, dict(routes), dict(unserved), violations)
    sol.gpus_short = gpus_short(inst, sol)
    sol.kw_over = kw_over(inst, sol)
    sol.violations += [f"{s} state {sid}: draws {kw / KW_PER_MW:.2f} MW more than its {inst.power_kw[s] / KW_PER_MW:.2f} MW"
                       for (s, sid), kw in sorted(sol.kw_over.items())]
    return sol
