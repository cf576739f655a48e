"""One test per formulation module, on a tiny hand-made `Instance` (`instances.hand_made`: no
YAML, no network): the blocks each module adds, their coefficients and right-hand sides,
computed by hand here. A register test fails when a module in `formulations.MODULES` has no
test of its own; a refresh test builds instance A, refreshes it to B and compares with a
fresh build of B."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from instances import DAYS, HOURS, TABLE
from instances import hand_made as tiny

import formulations
from formulations import MODULES, Mode, build_program, read_solution, refresh, structure, write_solution
from optimizer.base.units import HOURS_PER_YEAR, SECONDS_PER_HOUR
from optimizer.instance.build import Arc, CommittedPrice, Contract, Instance
from optimizer.instance.churn import ChurnLimits


def program(inst: Instance, exact: bool = False, **fixed):
    """plan-master (plan-exact where ``exact``; operate-fixed with the ``fixed`` arguments)."""
    keys = [(p.id, st.id) for st in inst.states for p in inst.pools_in(st)]
    prices = {key: 0.5 + key[0] for key in keys}  # GPUs per request/s, distinct per pool
    largest = {key: len(TABLE) for key in keys}
    if fixed:
        mode = Mode.operate_fixed(gpus_per_rps=prices, **fixed)
    elif exact:
        mode = Mode.plan_exact(max_replicas=largest)
    else:
        mode = Mode.plan_master(gpus_per_rps=prices)
    return build_program(inst, mode=mode)


def row(lp, block: str, key) -> tuple[dict, float, float]:
    """{column: coefficient} of one row, with its lower and upper bounds."""
    r = lp.rows[block][key]
    coefs = {c: v for rr, c, v in zip(lp.entries_row, lp.entries_col, lp.entries_val) if rr == r}
    return coefs, lp.row_lower[r], lp.row_upper[r]


def cost(lp, col: int) -> float:
    return lp.cost.get(col, 0.0)


# ---------------------------------------------------------------------------- one test per module


def test_routing_balances_demand_and_prices_egress_and_unserved():
    lp, _ = program(tiny())
    route, unserved = lp.cols["route"], lp.cols["unserved"]
    m1 = ("m1",)  # a demand group of one metro
    assert set(route) == {(m1, s, k, t, st) for s, k, t in [("s1", "k", 0), ("s2", "k", 0)] for st in (0, 1)}
    coefs, lo, hi = row(lp, "demand_balance", (m1, "k", 1))
    assert lo == hi == 20.0
    assert coefs == {route[(m1, "s1", "k", 0, 1)]: 1.0, route[(m1, "s2", "k", 0, 1)]: 1.0,
                     unserved[(m1, "k", 1)]: 1.0}
    assert cost(lp, route[(m1, "s1", "k", 0, 0)]) == pytest.approx(SECONDS_PER_HOUR * HOURS * 2e-6)
    assert cost(lp, unserved[(m1, "k", 0)]) == pytest.approx(SECONDS_PER_HOUR * HOURS * 1e-3)


def test_routing_makes_one_demand_of_metros_with_the_same_arcs_and_splits_it_back():
    """m2 reaches exactly m1's (site, tier) pairs: one demand group, whose routed requests read
    back per metro in proportion to their demand (and follow new demand after a refresh)."""
    inst = tiny()
    arcs = {"nominal": inst.arcs["nominal"] + [Arc("m2", a.site, a.workload, a.tier, a.rtt_ms + 3.0)
                                               for a in inst.arcs["nominal"]]}
    demand = {**inst.demand, **{("m2", k, t): 3 * lam for (_, k, t), lam in inst.demand.items()}}
    both = replace(inst, metros=["m1", "m2"], arcs=arcs, demand=demand)
    lp, _ = program(both)
    group = ("m1", "m2")
    assert {key[0] for key in lp.cols["route"]} == {group}
    coefs, lo, hi = row(lp, "demand_balance", (group, "k", 1))
    assert lo == hi == 80.0  # 20 + 60 requests/s
    x = np.zeros(lp.n_cols)
    x[lp.cols["route"][(group, "s2", "k", 0, 1)]] = 40.0
    x[lp.cols["unserved"][(group, "k", 1)]] = 4.0
    got = read_solution(lp, x)
    assert got.routes == pytest.approx({("m1", "s2", "k", 0, 1): 10.0, ("m2", "s2", "k", 0, 1): 30.0})
    assert got.unserved == pytest.approx({("m1", "k", 1): 1.0, ("m2", "k", 1): 3.0})
    cols, values = write_solution(lp, got)
    start = dict(zip(cols.tolist(), values.tolist()))
    assert start[lp.cols["route"][(group, "s2", "k", 0, 1)]] == pytest.approx(40.0)
    moved = replace(both, demand={**both.demand, ("m2", "k", 1): 20.0})
    refresh(lp, moved)  # the program's parameters take the new demand
    assert lp.params["demand_rps"][(group, "k", 1)] == pytest.approx(40.0)
    got = read_solution(lp, x)
    assert got.routes[("m2", "s2", "k", 0, 1)] == pytest.approx(20.0)


def test_latency_tiers_balance_routed_against_pool_flows():
    lp, _ = program(tiny())
    coefs, lo, hi = row(lp, "tier_balance", ("nominal", "s2", "k", 0, 1))
    assert lo == hi == 0.0
    assert coefs == {lp.cols["route"][(("m1",), "s2", "k", 0, 1)]: 1.0, lp.cols["prefill_flow"][(3, 1)]: -1.0,
                     lp.cols["colocated_flow"][(4, 1)]: -1.0}


def test_prefill_flows_carry_their_gpus_and_feed_decode():
    lp, terms = program(tiny())
    col = lp.cols["prefill_flow"][(0, 0)]
    assert (col, 1.0) in terms.decode_inflow[("s1", "k", 0, 0)]
    load = dict(terms.gpu_load[("s1", "g", 0)])
    assert lp.value(load[col]) == pytest.approx(0.5)  # the gpus_per_rps price of pool 0


def test_decode_balances_prefill_against_decode():
    lp, _ = program(tiny())
    coefs, lo, hi = row(lp, "decode_balance", ("s1", "k", 0, 1))
    assert lo == hi == 0.0
    assert coefs == {lp.cols["prefill_flow"][(0, 1)]: 1.0, lp.cols["decode_flow"][(2, 1)]: -1.0}


def test_colocated_flows_enter_their_tier_only():
    lp, terms = program(tiny())
    col = lp.cols["colocated_flow"][(1, 0)]
    assert (col, 1.0) in terms.tier_outflow[("nominal", "s1", "k", 0, 0)]
    assert all(col not in dict(v) for v in terms.decode_inflow.values())


def test_kvcache_holds_each_candidate_for_its_busiest_state_and_prices_it_for_the_year():
    """s1's prefill pool (0) serves with candidate 0, its colocated pool (1) with candidate 1
    at $2e-3 an hour per request/s; candidate 0 is free (no column)."""
    inst = tiny()
    pools = [replace(p, cache_option=0 if p.id == 0 else 1 if p.id == 1 else -1) for p in inst.pools]
    inst = replace(inst, pools=pools, kv_usd_per_rps_hour={("k", 0): 0.0, ("k", 1): 2e-3})
    lp, _ = program(inst)
    peak = lp.cols["kv_cache_peak"]
    assert set(peak) == {("s1", "k", 1)}
    assert cost(lp, peak[("s1", "k", 1)]) == pytest.approx(HOURS_PER_YEAR * 2e-3)
    for st in (0, 1):
        coefs, lo, hi = row(lp, "kv_cache_peak", ("s1", "k", 1, st))
        assert coefs == {lp.cols["colocated_flow"][(1, st)]: 1.0, peak[("s1", "k", 1)]: -1.0} and hi == 0.0
    assert "kv_cache_peak" not in program(tiny())[0].cols  # no tiers, no block


def test_pools_exact_mode_chooses_one_size_with_f_exact():
    lp, _ = program(tiny(), exact=True)
    n, y = lp.cols["prefill_replicas"][(0, 1)], lp.cols["prefill_flow"][(0, 1)]
    size = {j: lp.cols["prefill_size"][(0, 1, j)] for j in (1, 2, 3)}
    coefs, lo, hi = row(lp, "prefill_slo", (0, 1))
    assert hi == 0.0 and coefs == {y: 1.2, size[1]: -5.0, size[2]: -12.0, size[3]: -20.0}
    coefs, lo, hi = row(lp, "prefill_size_sum", (0, 1))
    assert lo == hi == 0.0 and coefs == {n: 1.0, size[1]: -1.0, size[2]: -2.0, size[3]: -3.0}
    assert row(lp, "prefill_size_one", (0, 1))[2] == 1.0
    coefs, _, hi = row(lp, "decode_decode_slots", (2, 1))  # decode: 1.2 · y ≤ 3 · n
    assert hi == 0.0 and coefs == {lp.cols["decode_flow"][(2, 1)]: 1.2, lp.cols["decode_replicas"][(2, 1)]: -3.0}


def test_procurement_caps_and_prices_nodes():
    lp, terms = program(tiny())
    c = lp.cols["committed"][("s1", "g", "reserved-1y")]
    assert cost(lp, c) == pytest.approx(20.0 * HOURS_PER_YEAR)
    coefs, _, hi = row(lp, "committed_cap", ("s1", "g"))
    assert coefs == {c: 1.0} and hi == 40
    o = lp.cols["ondemand"][("s1", "g", 0)]
    assert lp.col_upper[o] == 10 and cost(lp, o) == pytest.approx(30.0 * HOURS)
    assert ("s2", "g", 0) not in lp.cols["ondemand"]  # no on-demand supply there
    assert dict(terms.nodes_usable[("s1", "g", 0)]) == {c: 1.0, o: pytest.approx(0.9)}  # the warm pool idles


def test_procurement_operating_fixes_the_commitment_at_no_cost():
    lp, _ = program(tiny(), committed={("s1", "g"): 7}, open_pools=frozenset({0, 1, 2}), tie_break_usd_per_gpu_hour=1e-4)
    c = lp.cols["committed"][("s1", "g", "reserved-1y")]
    assert lp.col_lower[c] == lp.col_upper[c] == 7 and cost(lp, c) == 0.0
    assert set(lp.cols["prefill_flow"]) == {(0, 0), (0, 1)}  # only the open pools
    tie = cost(lp, lp.cols["prefill_flow"][(0, 0)])
    assert tie == pytest.approx(1e-4 * 0.5)


def test_scaling_prices_ramps_within_a_day():
    lp, _ = program(tiny())
    v = lp.cols["ramp"][("s1", "g", 1)]
    coefs, lo, _ = row(lp, "ramp_up", ("s1", "g", 1))
    o = lp.cols["ondemand"]
    assert lo == 0.0 and coefs == {v: 1.0, o[("s1", "g", 1)]: -1.0, o[("s1", "g", 0)]: 1.0}
    # paid once on each day the hour recurs (365), not for every hour the slice stands for (12 a
    # day here): a rise into 12:00 happens once a day
    assert cost(lp, v) == pytest.approx(30.0 * DAYS / 6)
    assert "ramp" not in program(tiny(cold_start_hours=0.0))[0].cols


def test_resilience_holds_the_peak_on_demand_nodes_in_a_site_loss():
    lp, _ = program(tiny(n_minus_1=True))
    o = lp.cols["ondemand"]
    assert ("s1", "g", 2) not in o  # the lost site rents nothing
    assert "contingency_nodes" not in lp.rows or all(key[0] != "s1" for key in lp.rows["contingency_nodes"])
    unserved = lp.cols["unserved"][(("m1",), "k", 2)]
    assert cost(lp, unserved) == pytest.approx(SECONDS_PER_HOUR * 1000.0 * 1e-3)  # notional 1,000 hours
    inst = tiny(n_minus_1=True, ondemand_max={("s1", "g"): 0, ("s2", "g"): 5})
    lp, _ = program(inst)
    coefs, lo, hi = row(lp, "contingency_nodes", ("s2", "g", 2))
    o = lp.cols["ondemand"]
    assert lo == hi == 0.0 and coefs == {o[("s2", "g", 2)]: 1.0, o[("s2", "g", 1)]: -1.0}


def test_capacity_fits_replica_gpus_into_usable_nodes():
    lp, _ = program(tiny())
    coefs, _, hi = row(lp, "gpu_capacity", ("s1", "g", 1))
    cols = lp.cols
    assert hi == 0.0
    assert coefs[cols["prefill_flow"][(0, 1)]] == pytest.approx(0.5)
    assert coefs[cols["colocated_flow"][(1, 1)]] == pytest.approx(1.5)
    assert coefs[cols["decode_flow"][(2, 1)]] == pytest.approx(2.5)
    assert coefs[cols["committed"][("s1", "g", "reserved-1y")]] == -8.0
    assert coefs[cols["ondemand"][("s1", "g", 1)]] == pytest.approx(-8.0 * 0.9)


def test_power_caps_powered_nodes_by_site():
    lp, _ = program(tiny())
    coefs, _, hi = row(lp, "power", ("s1", 0))
    assert hi == 500.0
    assert coefs == {lp.cols["committed"][("s1", "g", "reserved-1y")]: pytest.approx(12.0),
                     lp.cols["ondemand"][("s1", "g", 0)]: pytest.approx(12.0)}  # node kW × PUE


def test_carbon_prices_and_caps_the_tonnes_of_powered_nodes():
    """A committed node is powered in both slices (HOURS each), an on-demand node in its own:
    tonnes = HOURS · kg per node-hour / 1000; the cost is the price times that, and the cap row
    holds the same tonnes. Neither exists where carbon is neither priced nor capped."""
    kg = {("s1", "g", 0): 5.0, ("s1", "g", 1): 3.0, ("s2", "g", 0): 1.0, ("s2", "g", 1): 2.0}
    lp, _ = program(tiny(carbon_kg_per_node_hour=kg, carbon_usd_per_t=100.0, carbon_cap_t=900.0))
    coefs, _, hi = row(lp, "carbon_cap", ())
    committed = lp.cols["committed"][("s1", "g", "reserved-1y")]
    ondemand = lp.cols["ondemand"][("s1", "g", 1)]
    assert hi == 900.0
    assert coefs[committed] == pytest.approx(HOURS * (5.0 + 3.0) / 1000)
    assert coefs[ondemand] == pytest.approx(HOURS * 3.0 / 1000)
    assert coefs[lp.cols["committed"][("s2", "g", "reserved-1y")]] == pytest.approx(HOURS * (1.0 + 2.0) / 1000)
    plain, _ = program(tiny(carbon_kg_per_node_hour=kg))
    extra = lp.cost_vector() - plain.cost_vector()[:lp.n_cols]
    assert extra[committed] == pytest.approx(100.0 * HOURS * 8.0 / 1000)
    assert extra[ondemand] == pytest.approx(100.0 * HOURS * 3.0 / 1000)
    assert "carbon_cap" not in plain.rows and np.array_equal(plain.cost_vector(), program(tiny())[0].cost_vector())
    fixed, _ = program(tiny(carbon_kg_per_node_hour=kg, carbon_cap_t=900.0), committed={("s1", "g"): 2})
    assert "carbon_cap" not in fixed.rows  # a year's cap does not split into one-state programs


def test_churn_limits_growth_removal_and_the_budget_against_the_previous_fleet():
    """Previous fleet: s1 3 committed + 2 on-demand peak, s2 1 committed. Growth γ = 0.5, Γ = 2:
    c + o_t ≤ 1.5 · 5 + 2 = 9.5 at s1 (every state), c ≤ 1.5 · 1 + 2 = 3.5 at s2 (no on-demand
    supply there); removals R = 2: c ≥ 3 − 2 = 1 at s1 (none at s2, whose floor is 0); budget
    B = 4: c − a + r = c⁰, o_t − q ≤ P⁰, Σ a + r + q ≤ 4. No rows without a previous fleet or
    in a mode that operates a fixed commitment."""
    limits = ChurnLimits({("s1", "g"): 3, ("s2", "g"): 1}, {("s1", "g"): 2}, growth_factor=0.5, growth_nodes=2,
                         max_removed_nodes=2, max_changes=4)
    lp, _ = program(tiny(churn=limits))
    c1, c2 = lp.cols["committed"][("s1", "g", "reserved-1y")], lp.cols["committed"][("s2", "g", "reserved-1y")]
    for st in (0, 1):
        coefs, _, hi = row(lp, "churn_growth", ("s1", "g", st))
        assert coefs == {c1: 1.0, lp.cols["ondemand"][("s1", "g", st)]: 1.0} and hi == 9.5
    assert row(lp, "churn_growth", ("s2", "g", None)) == ({c2: 1.0}, -math.inf, 3.5)
    assert row(lp, "churn_removal", ("s1", "g")) == ({c1: 1.0}, 1.0, math.inf)
    assert ("s2", "g") not in lp.rows["churn_removal"]
    added, removed, od = (lp.cols[b][("s1", "g")] for b in ("churn_added", "churn_removed", "churn_ondemand_added"))
    assert row(lp, "churn_committed", ("s1", "g")) == ({c1: 1.0, added: -1.0, removed: 1.0}, 3.0, 3.0)
    assert row(lp, "churn_ondemand", ("s1", "g", 1)) == ({lp.cols["ondemand"][("s1", "g", 1)]: 1.0, od: -1.0},
                                                         -math.inf, 2.0)
    coefs, _, hi = row(lp, "churn_budget", ())
    assert hi == 4.0 and len(coefs) == 6 and set(coefs.values()) == {1.0}
    assert not any(b.startswith("churn") for b in program(tiny())[0].rows)
    fixed, _ = program(tiny(churn=limits), committed={("s1", "g"): 2})
    assert not any(b.startswith("churn") for b in fixed.rows)


def test_every_module_has_its_test():
    names = [n for n in globals() if n.startswith("test_")]
    for module in MODULES:
        short = module.__name__.rsplit(".", 1)[1]
        assert any(n.startswith(f"test_{short}_") for n in names), f"formulations.{short} has no test here"


# ---------------------------------------------------------------------------- reading and refreshing


def test_read_solution_returns_every_block_by_key():
    lp, _ = program(tiny())
    x = np.zeros(lp.n_cols)
    x[lp.cols["route"][(("m1",), "s1", "k", 0, 1)]] = 7.5
    x[lp.cols["unserved"][(("m1",), "k", 0)]] = 1e-12  # below the reading's floor
    x[lp.cols["committed"][("s2", "g", "reserved-1y")]] = 3.0
    got = read_solution(lp, x)
    assert got.routes == {("m1", "s1", "k", 0, 1): 7.5} and got.unserved == {}
    assert got.committed == {("s2", "g", "reserved-1y"): 3.0} and got.replicas == {}


def _arrays(lp) -> tuple:
    start, index, value = lp.csc()
    return (lp.cost_vector(), np.array(lp.col_lower), np.array(lp.col_upper), np.array(lp.row_lower),
            np.array(lp.row_upper), start, index, value)


def test_refresh_to_a_new_instance_equals_a_fresh_build():
    """Every field that may change without a rebuild is refreshed: prices, demand, caps,
    megawatts, egress and penalty. A field neither in `structure` nor refreshed makes the
    arrays differ, and this test fails."""
    a = tiny()
    price = Contract(41.0, {"reserved-1y": CommittedPrice(27.0, 0.0, "reserved")})
    b = tiny(demand={("m1", "k", 0): 13.0, ("m1", "k", 1): 31.0}, power_kw={"s1": 444.0, "s2": 900.0},
             contracts={("s1", "g"): price, ("s2", "g"): price}, committed_max={("s1", "g"): 33, ("s2", "g"): 7},
             ondemand_max={("s1", "g"): 4, ("s2", "g"): 0}, penalty_usd_per_request={"k": 3e-3},
             egress_usd_per_request={"k": 5e-6})
    assert structure(a) == structure(b)
    lp, _ = program(a)
    refresh(lp, b)
    fresh, _ = program(b)
    for mine, theirs in zip(_arrays(lp), _arrays(fresh)):
        np.testing.assert_allclose(mine, theirs)


def test_structure_tells_instances_that_need_a_rebuild_apart():
    assert structure(tiny()) != structure(tiny(cold_start_hours=0.0))
    assert structure(tiny()) != structure(tiny(peak_to_mean={"k": 1.5}))
    assert structure(tiny()) != structure(tiny(n_minus_1=True))


# ---------------------------------------------------------------------------- one formulation, three uses


class _NoOndemandAt:
    """A constraint family added to the formulation for this test only: no on-demand nodes
    at one site, in every state."""

    def __init__(self, site: str):
        self.site = site
        self.__name__ = "formulations.no_ondemand"

    def add_to(self, build) -> None:
        for key, col in build.lp.cols.get("ondemand", {}).items():
            if key[0] == self.site:
                build.lp.add_row("no_ondemand", key, [(col, 1.0)], upper=0.0)


def test_a_constraint_added_to_the_formulation_reaches_plan_reoperation_and_year(monkeypatch):
    """One change in `formulations` holds in all three uses without further edits: the plan
    (exact), the re-operation of its slices and the operated year rent no on-demand node at
    the site it forbids."""
    from optimizer.commands.operate import OperatedCommitment, operate_year
    from optimizer.geography.network import build_graph, rtt_matrix
    from optimizer.instance.build import build_instance
    from optimizer.scenario import load_scenario
    from optimizer.solve import SolverSettings, solve
    from optimizer.solve.fixed_commitment import FixedCommitmentProgram, largest_sizes
    from optimizer.solve.fleet import committed_nodes

    # at three times the hour's mean the afternoon peak rents a node on demand beside the reserved one
    s, raw = load_scenario(Path(__file__).parent / "data" / "tiny.yaml", ["demand.peak_to_mean_intra_hour=3.0"])
    inst = build_instance(s, rtt_matrix(build_graph(s, raw.path.parent), s))
    before = solve(inst, SolverSettings(exact=True, time_limit_s=60))
    site = max({key[0] for key in before.solution.ondemand}, default=None)
    assert site is not None, "the tiny plan rents on demand somewhere (the premise of this test)"
    monkeypatch.setattr(formulations, "MODULES", (*formulations.MODULES, _NoOndemandAt(site)))
    after = solve(inst, SolverSettings(exact=True, time_limit_s=60))
    assert all(key[0] != site for key in after.solution.ondemand)  # the plan
    program = FixedCommitmentProgram(inst, committed_nodes(after.solution), largest_sizes(after.solution))
    x, optimal = program.solve(np.array([inst.demand.get((m, k, inst.peak_slice), 0.0) for m, k in program.keys]))
    assert optimal and all(key[0] != site for key in program.read(x).ondemand)  # the re-operation's program
    assert "no_ondemand" in program.lp.rows
    year_without = operate_year(s, inst, OperatedCommitment.of_solution(inst, before.solution)).sites
    year_with = operate_year(s, inst, OperatedCommitment.of_solution(inst, after.solution)).sites
    at = lambda sites: float(sites.loc[sites["site"] == site, "ondemand_node_hours"].sum())  # noqa: E731
    assert at(year_with) < at(year_without)  # the operated year
    assert math.isfinite(at(year_with))


def test_a_pool_whose_planned_size_carries_nothing_is_not_operated_on(tiny):
    """A pool whose f(n) is 0 at its planned size (one hour's p99 out of reach at so few
    replicas: found on deepseek-moe at slo_hours_met 0.95) is no capacity to re-operate on:
    the program leaves it closed instead of dividing by its zero capacity, and the others
    still serve the hour."""
    from dataclasses import replace

    import numpy as np

    from optimizer.solve import SolverSettings, solve
    from optimizer.solve.fixed_commitment import FixedCommitmentProgram, largest_sizes
    from optimizer.solve.fleet import committed_nodes

    plan = solve(tiny, SolverSettings(exact=True, time_limit_s=60)).solution
    sizes = largest_sizes(plan)
    used = next(pid for pid, n in sizes.items() if n > 0)
    idle = next(pid for pid, p in enumerate(tiny.pools) if pid not in sizes and p.table is not None)
    pools = list(tiny.pools)
    pools[idle] = replace(pools[idle], table=np.zeros_like(pools[idle].table))
    inst = replace(tiny, pools=pools)
    program = FixedCommitmentProgram(inst, committed_nodes(plan), {**sizes, idle: 1})
    assert idle not in program.pools and used in program.pools
    demand = np.array([inst.demand.get((m, k, inst.peak_slice), 0.0) for m, k in program.keys])
    x, optimal = program.solve(demand)
    assert optimal and sum(program.read(x).unserved.values()) < 1e-9
