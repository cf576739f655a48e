"""KV-cache tiers (`optimizer.curves.kvtiers`, `optimizer.scenario.kvcache`,
`optimizer.instance.kvcache`, `optimizer.results.kvcache`): hit rates from a reuse-distance
distribution against hand-computed values, monotone in capacity; the prefill a hit saves and
the read it adds; the sizing's choices and the candidate caches against brute force; the
plan's choice among the candidates (never worse than the best of them alone, none when the
tiers are dear, one when free), its cache $ by hand, its report; verify's pools each hitting
at their candidate's rate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from instances import TINY

from optimizer.base.errors import ScenarioError
from optimizer.base.units import HOURS_PER_YEAR
from optimizer.commands.pipeline import make_plan
from optimizer.curves.cache import mean_prefill_tokens
from optimizer.curves.kvtiers import cached_tokens, hit_rate, read_time_ms, tier_hit_shares
from optimizer.instance.kvcache import cache_options, with_kv_cache, workload_options
from optimizer.scenario import load_scenario
from optimizer.scenario.kvcache import HOURS_PER_MONTH, Reuse, Tier

PHI_1 = 0.8413447460685429  # Φ(1)
REUSE = Reuse(reuse_probability=0.6, reusable_prefix_share=0.5, median_reuse_s=100.0, reuse_sigma=1.0)


def test_hit_rate_by_hand():
    # s̄ = 1,000 tokens, κ = 1,000 B/token: one request/s fills 1e6 B/s; T₅₀ = 100 s, so the
    # median reuse distance per request/s is 1e8 B. hit(1e8) = 0.6 · Φ(0) = 0.3;
    # hit(1e8 · e) = 0.6 · Φ(1) = 0.50481; hit(1e8 / e) = 0.6 · Φ(−1) = 0.09519; hit(0) = 0.
    args = (0.6, 100.0, 1.0, 1000.0, 1000.0)
    assert hit_rate(1e8, *args) == pytest.approx(0.3)
    assert hit_rate(1e8 * math.e, *args) == pytest.approx(0.6 * PHI_1)
    assert hit_rate(1e8 / math.e, *args) == pytest.approx(0.6 * (1 - PHI_1))
    assert hit_rate(0.0, *args) == 0.0
    # twice the traffic at a site: the same bytes per request/s give the same hit rate
    assert hit_rate(2e8 / 2, *args) == hit_rate(1e8, *args)


def test_more_capacity_never_lowers_the_hit_rate():
    rng = np.random.default_rng(7)
    for _ in range(50):
        p, t50, sigma, s, kv = rng.uniform(0, 1), rng.uniform(0.1, 1e4), rng.uniform(0.1, 4), rng.uniform(1, 1e5), \
            rng.uniform(1e3, 1e6)
        c = np.sort(np.concatenate(([0.0], 10 ** rng.uniform(0, 16, 200))))
        h = hit_rate(c, p, t50, sigma, s, kv)
        assert np.all(np.diff(h) >= 0) and h[0] == 0 and h[-1] <= p + 1e-12


def test_tier_shares_add_up_to_the_hit_rate_of_the_whole_capacity():
    # exclusive hierarchy: cumulative capacities 1e8, 1e8 + 0, 1e8 + 1.718e8 = e·1e8
    caps = np.cumsum([1e8, 0.0, (math.e - 1) * 1e8])
    shares = tier_hit_shares(hit_rate(caps, 0.6, 100.0, 1.0, 1000.0, 1000.0))
    assert shares == pytest.approx([0.3, 0.0, 0.6 * PHI_1 - 0.3])
    assert shares.sum() == pytest.approx(0.6 * PHI_1)


def test_read_time_and_cached_tokens_by_hand():
    # 1,000 cached tokens of 163,840 B (Llama-3.1-70B in fp8: 80 layers · 8 KV heads · 128 · 2 · 1 B)
    # from a 40 GB/s store after 1 ms: 1 + 1.6384e8 / 4e10 s = 1 + 4.096 = 5.096 ms
    assert read_time_ms(1000, 163_840, 40, 1.0) == pytest.approx(5.096)
    assert cached_tokens(2000, 0.5) == 1000
    assert cached_tokens(800, 1.0) == 799  # a hit leaves one token to prefill


def _tier(tid, usd_per_gb_month, bandwidth=40.0, latency=1.0):
    return Tier(tid, 1e6, bandwidth, latency, usd_per_gb_month / HOURS_PER_MONTH)


def _size(tiers, reuse=REUSE, usd_per_hit=1e-4, ttft_ms=1000.0, ratio=0.6):
    return workload_options("w", tiers, reuse, 1000.0, 1000.0, ttft_ms, 0.1, usd_per_hit, ratio)[1]  # the optimum


def test_the_candidates_are_the_frontier_around_the_pre_solve_optimum():
    """Brute force over the grid: no combination is cheaper and hits more than a candidate;
    the first is no cache, the pre-solve optimum is one, its neighbours are the nearest
    frontier points at least MIN_HIT_STEP of hit rate away."""
    from optimizer.instance.kvcache import MIN_HIT_STEP, workload_options

    tiers = [_tier("a", 3.0, 64), _tier("b", 0.2, 14)]
    options, best = workload_options("w", tiers, REUSE, 1000.0, 1000.0, 1000.0, 0.1, 1e-4, 0.6)
    assert best == _size(tiers) and best in options and len(options) <= 4
    assert options[0].hit_rate == 0.0 and options[0].usd_per_rps_hour == 0.0
    d50 = 100.0 * 1000.0 * 1000.0
    grid = [0.0] + [d50 * 2.0 ** j for j in range(-6, 7)]
    price = np.array([3.0, 0.2]) / HOURS_PER_MONTH / 1e9
    points = [(float(np.dot(price, c)), float(hit_rate(sum(c), 0.6, 100.0, 1.0, 1000.0, 1000.0)))
              for c in itertools.product(grid, grid)]
    for o in options:
        assert not any(usd < o.usd_per_rps_hour - 1e-15 and h > o.hit_rate + 1e-12 for usd, h in points)
    others = [o for o in options[1:] if o is not best]
    assert others and all(abs(o.hit_rate - best.hit_rate) >= MIN_HIT_STEP - 1e-12 for o in others)
    assert [o.usd_per_rps_hour for o in options] == sorted(o.usd_per_rps_hour for o in options)


def test_the_sizing_is_the_brute_force_optimum():
    tiers = [_tier("a", 3.0, 64), _tier("b", 0.2, 14)]
    got = _size(tiers)
    d50 = 100.0 * 1000.0 * 1000.0
    grid = [0.0] + [d50 * 2.0 ** j for j in range(-6, 7)]
    best = None
    for combo in itertools.product(grid, grid):
        cost = sum(c * t.usd_per_gb_hour / 1e9 for c, t in zip(combo, tiers))
        net = cost - float(hit_rate(sum(combo), 0.6, 100.0, 1.0, 1000.0, 1000.0)) * 3600 * 0.6 * 1e-4
        if best is None or net < best[0] - 1e-15:
            best = (net, combo)
    assert got.capacity_bytes_per_rps == pytest.approx(best[1])
    assert got.hit_rate > 0


def test_a_dearer_tier_of_the_same_speed_is_never_sized_larger():
    for cheap, dear in [(0.1, 0.2), (0.5, 3.0), (1.0, 1.01)]:
        for order in ([_tier("cheap", cheap), _tier("dear", dear)], [_tier("dear", dear), _tier("cheap", cheap)]):
            got = _size(order)
            size = dict(zip(got.tiers, got.capacity_bytes_per_rps))
            assert size["dear"] <= size["cheap"]


def test_a_dearer_tier_or_cheaper_prefill_never_buys_more_hits():
    hits = [_size([_tier("t", price)]).hit_rate for price in (0.01, 1.0, 100.0, 1000.0, 10000.0)]
    assert all(a >= b for a, b in zip(hits, hits[1:])) and hits[0] > hits[-1] == 0.0
    hits = [_size([_tier("t", 1.0)], usd_per_hit=v).hit_rate for v in (1e-3, 1e-4, 1e-5, 1e-7)]
    assert all(a >= b for a, b in zip(hits, hits[1:])) and hits[-1] == 0.0


def test_a_fixed_tier_size_is_kept():
    tier = Tier("t", 1e6, 40.0, 1.0, 1.0 / HOURS_PER_MONTH, fixed_gb_per_rps=0.25)
    got = _size([tier])
    assert got.capacity_bytes_per_rps == (0.25e9,)
    assert got.hit_rate == pytest.approx(hit_rate(0.25e9, 0.6, 100.0, 1.0, 1000.0, 1000.0))


def test_a_tier_too_slow_for_the_objective_is_not_offered():
    # a read of 500 tokens · 1,000 B at 0.001 GB/s takes 500 ms > 10 % of a 1,000 ms TTFT
    got = _size([_tier("slow", 0.001, bandwidth=0.001)])
    assert got.capacity_bytes_per_rps == (0.0,) and got.hit_rate == 0.0 and got.ttft_added_ms == 0.0


def test_the_plan_runs_with_the_tiers_hit_rate_prefix_and_ttft():
    s, _ = load_scenario(TINY, ["kv_cache.tiers=[dram, nvme]"])
    sized = cache_options(s)[1]
    eff = with_kv_cache(s, sized)
    for k, w in s.workloads.items():
        z = sized[k]
        e = eff.workloads[k]
        assert e.prompt_cache_hit_rate == pytest.approx(sum(z.hit_share))
        assert e.ttft_p99_ms == pytest.approx(w.ttft_p99_ms - z.ttft_added_ms)
        # prefill saved: s̄ − h · s_p tokens left per request
        assert mean_prefill_tokens(e.isl_mean_tokens, e.prompt_cache_hit_rate, e.shared_prefix_tokens) == \
            pytest.approx(w.isl_mean_tokens - z.hit_rate * z.cached_tokens)
    assert cache_options(load_scenario(TINY)[0]) is None and with_kv_cache(s, None) is s  # no section, no change


def test_bad_kv_cache_sections_are_refused_in_one_line():
    with pytest.raises(ScenarioError, match="kv_cache.tiers names 'ssd'"):
        load_scenario(TINY, ["kv_cache.tiers=[ssd]"])
    with pytest.raises(ScenarioError, match="kv_cache.workloads names 'nobody'"):
        load_scenario(TINY, ["kv_cache={tiers: [dram], workloads: {nobody: {median_reuse_s: 3}}}"])
    with pytest.raises(ScenarioError, match="reuse_sigma"):
        load_scenario(TINY, ["kv_cache={tiers: [dram], workloads: {chat: {reuse_sigma: 0}}}"])


# three times the tiny demand: at one Chicago node a cache does not save one, at two it does;
# pools sized for nine hours in ten within the objective, as verify simulates one hour
TIERS = ["kv_cache.tiers=[dram, nvme]", "demand.scale=3", "serving.slo_hours_met=0.9"]
STATE = ["period", "day_type", "hour"]


def test_the_plan_reports_cache_and_prefill_dollars_per_tier():
    """The cache $ is Σ_site Σ_candidates hours · Σ_tiers p_t · c_{o,t} · (the busiest slice's
    requests/s into the site's pools of that candidate), from pools.csv by hand."""
    s = load_scenario(TINY, TIERS)[0]
    options, _ = cache_options(s)
    plan = make_plan(TINY, TIERS, exact=True, time_limit_s=60)
    kv = plan.summary["kv_cache"]
    pools = plan.tables["pools"]
    pools = pools[(pools["cache_option"] >= 0) & pools["lost_site"].isna()]  # the year's slices
    peaks = pools.groupby(["site", "workload", "cache_option", *STATE])["requests_per_s"].sum().groupby(
        ["site", "workload", "cache_option"]).max()
    by_hand = 0.0
    for (site, k, o), rps in peaks.items():
        c = options[k][o]
        by_hand += HOURS_PER_YEAR * sum(p * b for p, b in zip(c.usd_per_byte_hour, c.capacity_bytes_per_rps)) * rps
        assert pools.loc[pools["cache_option"] == o, "cache_hit_rate"].tolist() == \
            pytest.approx([c.hit_rate] * int((pools["cache_option"] == o).sum()))
    assert by_hand > 0 and kv["cache_usd"] == pytest.approx(by_hand, rel=1e-6)
    for k, w in kv["workloads"].items():
        assert w["cache_usd"] == pytest.approx(sum(b["cache_usd"] for b in w["tiers"].values()))
        assert w["hit_rate"] == pytest.approx(sum(b["hit_rate"] for b in w["tiers"].values()))
        assert sum(o["request_share"] for o in w["options"]) == pytest.approx(1.0)
    assert kv["total_cost_with_cache_usd"] == pytest.approx(plan.summary["total_cost_usd"] + kv["cache_usd"])
    plain = make_plan(TINY, exact=True, time_limit_s=60)
    assert "kv_cache" not in plain.summary and "cache_option" not in plain.tables["pools"]
    from optimizer.commands.report.plan_page import key_figures
    figures = dict(key_figures(plan.summary).itertuples(index=False))
    assert f"{100 * kv['workloads']['code-completion']['hit_rate']:.1f}" in figures["KV-cache hit rate of code-completion"]
    assert not any(name.startswith("KV-cache") for name in key_figures(plain.summary)["figure"])


def _with_cost(plan) -> float:
    return plan.summary["kv_cache"]["total_cost_with_cache_usd"]


def test_the_plan_is_never_worse_than_the_best_single_candidate(monkeypatch):
    """Brute force: each candidate cache alone, planned exactly; the plan choosing among
    them costs no more than the best of them (within the solver's gap)."""
    from optimizer.commands import pipeline

    chosen = make_plan(TINY, TIERS, exact=True, time_limit_s=60)
    real = pipeline.cache_options
    n = len(real(load_scenario(TINY, TIERS)[0])[0]["code-completion"])
    assert n >= 2
    alone = []
    for i in range(n):
        def only(s, i=i):
            options, best = real(s)
            return {k: (o[min(i, len(o) - 1)],) for k, o in options.items()}, best
        monkeypatch.setattr(pipeline, "cache_options", only)
        alone.append(_with_cost(make_plan(TINY, TIERS, exact=True, time_limit_s=60)))
    gap = chosen.summary["mip_gap"] + 1e-4
    assert _with_cost(chosen) <= min(alone) * (1 + gap)
    assert max(alone) > min(alone)  # the candidates differ: the choice matters


def test_the_plan_takes_no_cache_when_the_tiers_cost_too_much_and_a_cache_when_free():
    dear = make_plan(TINY, ["kv_cache.tiers=[{id: dram, usd_per_gb_month: 10000}]"], exact=True, time_limit_s=60)
    free = make_plan(TINY, ["kv_cache.tiers=[{id: dram, usd_per_gb_month: 0}]"], exact=True, time_limit_s=60)
    assert dear.summary["kv_cache"]["workloads"]["code-completion"]["hit_rate"] == 0.0
    assert dear.summary["kv_cache"]["cache_usd"] == 0.0
    assert free.summary["kv_cache"]["workloads"]["code-completion"]["hit_rate"] > 0.3


def test_a_hit_reads_from_a_tier_drawn_by_its_share_of_the_hits():
    from optimizer.commands.verify.group import tier_reads_ms

    hit = np.arange(200_000) % 2 == 0
    reads = tier_reads_ms((np.array([0.25, 0.75]), np.array([2.0, 10.0])), hit, np.random.default_rng(3))
    assert (reads[~hit] == 0).all()
    assert np.mean(reads[hit] == 2.0) == pytest.approx(0.25, abs=0.005)
    assert set(np.unique(reads[hit])) == {2.0, 10.0}


def test_verify_serves_the_tiers_as_planned(tmp_path):
    """The simulation runs each workload with its own objective and the prefix its
    candidates cache, adds the read of the tier a hit comes from (by the candidate's law);
    the prediction beside it adds the slowest read of the candidates served, as the plan
    budgeted."""
    from optimizer.commands.verify import load_model, read_ms_added, served_scenario, verify_plan
    from optimizer.folder.read import read_plan
    from optimizer.folder.write import write_plan

    folder = write_plan(make_plan(TINY, TIERS, exact=True, time_limit_s=60), tmp_path / "p")
    plan = read_plan(folder)
    kv = plan.summary["kv_cache"]["workloads"]
    s, reads = served_scenario(plan, folder)
    own = load_scenario(TINY)[0]
    added = read_ms_added(plan, reads)
    for k, w in kv.items():
        main = max(w["options"], key=lambda o: o["request_share"])
        assert s.workloads[k].prompt_cache_hit_rate == pytest.approx(main["hit_rate"])
        assert s.workloads[k].shared_prefix_tokens == pytest.approx(w["cached_tokens"])
        assert s.workloads[k].ttft_p99_ms == own.workloads[k].ttft_p99_ms
        for o in w["options"]:
            if o["hit_rate"] > 0:
                shares, read_ms = reads[(k, o["option"])]
                assert shares.sum() == pytest.approx(1.0) and read_ms.max() == pytest.approx(o["ttft_added_ms"])
        assert added[k] == pytest.approx(w["ttft_added_ms"])
    pools = plan.tables["pools"]
    entry = pools[pools["role"] != "decode"]
    assert (entry["cache_option"] >= 0).all() and (entry["cache_hit_rate"] > 0).any()
    assert set(load_model(folder).reads) == set(reads)  # what each worker process simulates
    result = verify_plan(folder, requests=4000, seed=0)
    rows = result.tables["by_pool"]
    assert (rows["ttft_p99_ms_objective"] == [own.workloads[k].ttft_p99_ms for k in rows["workload"]]).all()
    assert result.summary["all_objectives_met"]


def test_each_entry_pool_hits_at_its_own_candidates_rate():
    """Two pools of one tier serving candidates with hit rates 0 and 0.8: the requests each
    takes hit at its rate, and a hit caches the prefix (at most the prompt less a token)."""
    from optimizer.commands.verify.group import GroupPool, pool_cached

    entry = [GroupPool("prefill", 0, "a", 1, 1.0, 0, cache_option=0, cache_hit_rate=0.0),
             GroupPool("prefill", 0, "b", 1, 1.0, 0, cache_option=2, cache_hit_rate=0.8)]
    pool_of = np.arange(100_000) % 2
    isl = np.where(np.arange(100_000) % 4 < 2, 1000, 300)
    cached = pool_cached(entry, pool_of, isl, 500.0, np.random.default_rng(1))
    assert (cached[pool_of == 0] == 0).all()
    assert np.mean(cached[pool_of == 1] > 0) == pytest.approx(0.8, abs=0.01)
    assert set(np.unique(cached[cached > 0])) == {500, 299}


def test_verify_serves_each_pool_its_own_candidate(tmp_path, monkeypatch):
    """A plan whose pools serve different candidates (the 03:00 slice's moved to no cache in
    pools.csv): verify draws every pool's hits at its own candidate's rate."""
    import pandas as pd

    from optimizer.commands.verify import group, verify_plan
    from optimizer.folder.write import write_plan

    folder = write_plan(make_plan(TINY, TIERS, exact=True, time_limit_s=60), tmp_path / "p")
    pools = pd.read_csv(folder / "pools.csv")
    night = (pools["hour"] == 3) & (pools["role"] != "decode")
    assert night.any() and (pools.loc[~night & (pools["role"] != "decode"), "cache_hit_rate"] > 0.3).any()
    pools.loc[night, ["cache_option", "cache_hit_rate"]] = [0, 0.0]
    pools.to_csv(folder / "pools.csv", index=False)
    seen = []
    real = group.pool_cached

    def recorded(entry, pool_of, isl, prefix_tokens, rng):
        cached = real(entry, pool_of, isl, prefix_tokens, rng)
        seen.extend((p.cache_hit_rate, float(np.mean(cached[pool_of == j] > 0)))
                    for j, p in enumerate(entry) if (pool_of == j).sum() > 1000)
        return cached

    monkeypatch.setattr(group, "pool_cached", recorded)
    verify_plan(folder, slices="all", requests=4000, seed=0, workers=1)
    assert {rate for rate, _ in seen} >= {0.0} and any(rate > 0.3 for rate, _ in seen)
    for rate, measured in seen:
        assert measured == pytest.approx(rate, abs=0.03)


def test_verify_serves_a_folder_written_before_candidates_at_its_presolve_optimum(tmp_path):
    """A tiered plan folder without candidate columns (no ``cache_option`` in pools.csv, no
    ``options`` in the kv_cache block, as written before the plan chose among candidates): every
    pool of a workload hits at its pre-solve optimum's rate and reads by that optimum's tiers,
    not at no cache."""
    import json

    import pandas as pd

    from optimizer.commands.verify import read_ms_added, served_scenario, verify_plan
    from optimizer.folder.read import read_plan
    from optimizer.folder.write import write_plan

    folder = write_plan(make_plan(TINY, TIERS, exact=True, time_limit_s=60), tmp_path / "p")
    pools = pd.read_csv(folder / "pools.csv").drop(columns=["cache_option", "cache_hit_rate"])
    pools.to_csv(folder / "pools.csv", index=False)
    summary = json.loads((folder / "summary.json").read_text())
    for w in summary["kv_cache"]["workloads"].values():
        w.pop("options")
    (folder / "summary.json").write_text(json.dumps(summary))
    plan = read_plan(folder)
    s, reads = served_scenario(plan, folder)
    optimum = cache_options(load_scenario(TINY, TIERS)[0])[1]
    cached = [k for k, c in optimum.items() if c.hit_rate > 0]
    assert cached
    for k in cached:
        assert s.workloads[k].prompt_cache_hit_rate == pytest.approx(optimum[k].hit_rate)
        assert read_ms_added(plan, reads)[k] == pytest.approx(optimum[k].ttft_added_ms)
    assert set(reads) == set(cached)  # keyed by workload, as the folder was planned
    assert verify_plan(folder, requests=4000, seed=0).summary["all_objectives_met"]


@pytest.mark.parametrize("column,value,field", [("cache_hit_rate", 0.99, "cache_hit_rate"),
                                                ("cache_option", 9, "cache_option")])
def test_a_hand_edited_pool_cache_is_refused_by_verify(tmp_path, capsys, column, value, field):
    """A pool's candidate cache or its hit rate edited in pools.csv would simulate a cache the
    plan never priced: verify refuses it in one line naming the file, line and field, and
    writes nothing."""
    import pandas as pd

    from optimizer.cli.main import main
    from optimizer.folder.write import write_plan

    folder = write_plan(make_plan(TINY, TIERS, exact=True, time_limit_s=60), tmp_path / "p")
    pools = pd.read_csv(folder / "pools.csv", dtype={"cache_hit_rate": float})
    row = int(pools.index[pools["cache_option"] >= 0][0])
    pools.loc[row, column] = value
    pools.to_csv(folder / "pools.csv", index=False)
    assert main(["verify", str(folder), "--requests", "2000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"pools.csv, line {row + 2}, field '{field}'" in err, err
    assert not (folder / "verify.csv").exists()
