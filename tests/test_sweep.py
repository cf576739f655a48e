"""Sweeps: rows equal the individual plans they stand for, Dask and the local pool agree,
an interrupted sweep resumes without redoing finished runs, failures are rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from optimizer.commands import sweep as sweep_module
from optimizer.commands.pipeline import make_plan
from optimizer.commands.sweep import parse_values, runs_of, sweep

TINY = Path(__file__).parent / "data" / "tiny.yaml"
VARY = {"prices.l40s.ondemand_usd_per_gpu_hour": [1.0, 1.6], "demand.scale": [1, 1.5]}


def test_values_lists_ranges_and_multipliers():
    assert parse_values("1,2.5,fp8") == [1, 2.5, "fp8"]
    assert parse_values("0.1:0.3:0.1") == [0.1, 0.2, 0.3]
    assert parse_values("×0.5,x1,*1.5") == ["×0.5", "×1", "×1.5"]
    assert len(runs_of({"a": [1, 2], "b": [3, 4, 5]}, "grid")) == 6
    assert runs_of({"a": [1, 2], "b": ["×1", "×2"]}, "one-at-a-time") == [{}, {"a": 1}, {"a": 2}, {"b": "×2"}]


@pytest.fixture(scope="module")
def local_table(tmp_path_factory):
    return sweep(TINY, VARY, "grid", workers=2, out=tmp_path_factory.mktemp("sweep"), progress=False)


def test_rows_equal_the_individual_plans(local_table):
    assert len(local_table) == 4
    for row in local_table.to_dict("records"):
        overrides = [f"{k}={row[k]}" for k in VARY]
        alone = make_plan(TINY, overrides).summary
        assert row["status"] == alone["status"]
        assert row["total_cost_usd"] == pytest.approx(alone["total_cost_usd"], rel=1e-12)
        assert row["cost_per_million_tokens_usd"] == pytest.approx(alone["cost_per_million_tokens_usd"], rel=1e-12)


def test_dask_gives_the_same_table(local_table, tmp_path):
    dask_table = sweep(TINY, VARY, "grid", executor="dask", workers=2, out=tmp_path, progress=False)
    keys = ["run_id", *VARY, "status", "total_cost_usd", "cost_per_million_tokens_usd", "mip_gap"]
    pd.testing.assert_frame_equal(local_table[keys], dask_table[keys])


def test_interrupted_sweep_resumes_without_redoing_runs(tmp_path, monkeypatch):
    real = sweep_module.run_batch
    calls = []

    def flaky(batch):
        calls.append(batch[0].overrides)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(batch)

    monkeypatch.setattr(sweep_module, "run_batch", flaky)
    with pytest.raises(KeyboardInterrupt):
        sweep(TINY, VARY, "grid", workers=1, out=tmp_path, progress=False)
    first = pd.read_csv(tmp_path / "sweep.csv")
    assert len(first) == 3  # the base run (planned first: its basis starts every other run) and two more
    calls.clear()
    monkeypatch.setattr(sweep_module, "run_batch", real)
    seen = []
    monkeypatch.setattr(sweep_module, "run_batch", lambda batch: seen.append(batch[0].overrides) or real(batch))
    table = sweep(TINY, VARY, "grid", workers=1, out=tmp_path, progress=False)
    assert len(table) == 4 and len(seen) == 1
    again = table.set_index("run_id").loc[first["run_id"], "wall_seconds"].to_numpy()
    assert again == pytest.approx(first["wall_seconds"].to_numpy())  # finished rows kept as they were
    assert (tmp_path / "sweep.parquet").exists()


def test_a_failing_run_is_a_row_not_a_crash(tmp_path):
    table = sweep(TINY, {"workloads.code-completion.ttft_p99_ms": [400, 85]}, "one-at-a-time", workers=1,
                  out=tmp_path, progress=False)
    by_value = table.set_index("workloads.code-completion.ttft_p99_ms")
    assert by_value.loc[85, "status"] == "infeasible"
    assert "cannot meet its 85 ms p99 TTFT" in by_value.loc[85, "diagnosis"]
    assert by_value.loc[400, "status"] == "optimal"
    assert (tmp_path / "tornado.png").exists()


def test_runs_start_from_the_base_runs_basis_and_keep_its_bound():
    """Every run's master starts from the base run's final basis (the same start for all, so a
    row does not depend on the runs before it): the master's optimum — the bound — is the one a
    cold start finds. Where the master has several optimal vertices the start may pick another
    one, whose whole plan then costs a little more or less (us-east: within 0.3 %)."""
    from optimizer.scenario import DATA_DIR
    from optimizer.solve import ModelCache

    us_east = str(DATA_DIR / "scenarios" / "us-east.yaml")
    cache = ModelCache()
    sweep_module.run_one(sweep_module.RunSpec(us_east, {}, None, None, False), cache)
    assert cache.last_basis is not None
    for scale in (1.1,):
        spec = sweep_module.RunSpec(us_east, {"demand.scale": scale}, None, None, False)
        cold = sweep_module.run_one(spec)
        warm = sweep_module.run_one(sweep_module.replace(spec, basis=cache.last_basis))
        assert warm["best_bound_usd"] == pytest.approx(cold["best_bound_usd"], rel=1e-9)
        assert warm["total_cost_usd"] == pytest.approx(cold["total_cost_usd"], rel=0.01)


def test_reuse_refreshes_one_model_and_equals_the_individual_runs_within_the_gap(monkeypatch):
    """`--reuse`: a worker keeps its model between runs of the same structure and refreshes
    the coefficients (prices, demand); each row still equals its run planned alone, within
    the gaps both report."""
    import optimizer.solve as solve_module
    from optimizer.scenario import DATA_DIR

    caches = []

    class Counting(solve_module.ModelCache):
        def __init__(self):
            super().__init__()
            caches.append(self)

    monkeypatch.setattr(solve_module, "ModelCache", Counting)
    us_east = str(DATA_DIR / "scenarios" / "us-east.yaml")
    specs = [sweep_module.RunSpec(us_east, {"prices.mi300x.reserved_3y_usd_per_gpu_hour": v}, None, None, True)
             for v in (0.7, 0.9)]
    rows = sweep_module.run_batch(specs)
    assert len(caches) == 1 and caches[0].reuses == 1  # built once, refreshed once
    for spec, row in zip(specs, rows):
        alone = make_plan(us_east, [f"{k}={v}" for k, v in spec.overrides.items()]).summary
        gap = max(row["mip_gap"], alone["mip_gap"])
        assert row["total_cost_usd"] == pytest.approx(alone["total_cost_usd"], rel=gap)
    # the refreshed price reached the model: the master LP's optimum (the bound) rises with it
    # (the heuristic plans need not: each is within its own gap)
    assert rows[0]["best_bound_usd"] < rows[1]["best_bound_usd"]


def test_a_run_skips_only_the_predictions():
    """A sweep's row reports no predicted p99s, so its runs leave out slo.csv: every other
    table and the cost are those of the full plan, and the summary says the attainment was
    not predicted (None) rather than claiming one."""
    from optimizer.commands.pipeline import plan_scenario, settings_from
    from optimizer.scenario import load_scenario

    s, raw = load_scenario(TINY, [])
    full = plan_scenario(s, raw, settings_from(s, None, None, workers=1))
    light = plan_scenario(s, raw, settings_from(s, None, None, workers=1), predictions=False)
    assert "slo" in full.tables and "slo" not in light.tables
    for name, table in full.tables.items():
        if name != "slo":
            pd.testing.assert_frame_equal(table, light.tables[name])
    assert light.summary["total_cost_usd"] == full.summary["total_cost_usd"]
    assert full.summary["predicted_ttft_attainment"] is not None
    assert light.summary["predicted_ttft_attainment"] is None and light.summary["predicted_itl_attainment"] is None


def test_reuse_gives_each_worker_few_batches(tmp_path, monkeypatch):
    """With reuse each worker plans its share in BATCHES_PER_WORKER batches (one model built
    per batch), every run in exactly one batch."""
    seen = []
    monkeypatch.setattr(sweep_module, "_base_run", lambda specs, finished: (None, None, None))
    monkeypatch.setattr(sweep_module, "_execute", lambda batches, *a: seen.extend(batches) or iter(()))
    sweep(TINY, {"demand.scale": [round(0.5 + 0.01 * i, 2) for i in range(21)]}, "grid", workers=2, out=tmp_path,
          reuse=True, progress=False)
    assert [len(b) for b in seen] == [6, 6, 6, 3]
    assert sorted(spec.overrides["demand.scale"] for b in seen for spec in b) == \
        [round(0.5 + 0.01 * i, 2) for i in range(21)]
