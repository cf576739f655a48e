"""The plan's predicted p99s against the simulation that judges them: a decode pool's
inter-token gaps at the batch it settles at, and every workload of the us-east plan — each
(site, workload, slice) group's predicted p99 TTFT and ITL beside its simulated ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from optimizer.commands.pipeline import make_plan
from optimizer.commands.verify import simulate_pool, verify_plan
from optimizer.commands.verify.group import PlanModel, initial_sequences, steady_state
from optimizer.curves.lengths import LengthDistribution
from optimizer.curves.tail import gap_quantile_s
from optimizer.folder.read import read_plan, scenario_of
from optimizer.folder.write import write_plan
from optimizer.results.latency import Predictor
from optimizer.scenario import DATA_DIR
from optimizer.serving.configs import config_at

US_EAST = DATA_DIR / "scenarios" / "us-east.yaml"


@pytest.fixture(scope="module")
def us_east(tmp_path_factory):
    return write_plan(make_plan(US_EAST), tmp_path_factory.mktemp("prediction") / "us-east")


def simulated_gap_p99_ms(model: PlanModel, cid: str, replicas: int, rate_per_s: float, requests: int = 12_000) -> float:
    """The p99 gap of a plain decode pool simulated on its own (arrivals straight into decode,
    a warm start at its steady batch, the first 20 % of requests not counted): each step
    carries a gap for every counted sequence past its first token, as `verify` counts them."""
    s = model.s
    c = model.curves[cid]
    w = s.workloads[c["workload"]]
    m = s.models[w.model]
    spec = model.pool_spec(cid, replicas)
    rng = np.random.default_rng(4)
    isl = LengthDistribution(w.isl_mean_tokens, w.isl_p99_tokens, m.max_context)
    osl = LengthDistribution(w.osl_mean_tokens, w.osl_p99_tokens, m.max_context)
    tokens = float(c["tokens_per_step"])
    per_replica, _ = steady_state(spec, rate_per_s / replicas, w, tokens)
    arrivals = np.cumsum(rng.exponential(1 / rate_per_s, requests))
    out = simulate_pool(spec, arrivals, isl.sample(rng, requests), osl.sample(rng, requests), rng=rng,
                        initial=initial_sequences(rng, replicas, per_replica, isl, osl))
    d, _, offset = out.concatenated()
    counted = np.zeros(requests, bool)
    counted[requests // 5:] = True
    served = (out.replica >= 0) & counted
    first = offset[out.replica[served]] + out.first_step[served]
    last = offset[out.replica[served]] + out.last_step[served]
    weight = np.cumsum(np.bincount(np.concatenate((first + 1, last + 1)), np.concatenate(
        (np.ones(len(first)), -np.ones(len(first)))), minlength=len(d) + 2))[:len(d)]
    order = np.argsort(d)
    cum = np.cumsum(weight[order]) / weight.sum()
    return 1e3 * float(d[order][np.searchsorted(cum, 0.99)])


@pytest.mark.parametrize("replicas,share", [(1, 0.5), (1, 0.85), (6, 0.85)])
def test_decode_gaps_at_the_settled_batch_against_the_simulation(us_east, replicas, share):
    """A plain decode pool at half and 85 % of its planned capacity: the predicted p99 gap
    (the batch around b* of Little's law, its mean context around a sequence in flight's)
    within 6 % of the simulated one (measured: within 1 %); the config's ITL — the tail factor
    1.15 × the step at the operating batch — runs 20–60 % above it."""
    plan = read_plan(us_east)
    s = scenario_of(plan, us_east)
    model = PlanModel(s, plan.tables["curves"])
    row = plan.tables["curves"].query("role == 'decode' and not speculative").iloc[0]
    c = config_at(row, s)
    rate = share * replicas * c.decode_rps / s.serving.decode_max_utilization
    predicted = Predictor(s, {c.id: c}).decode_steps(c, rate, replicas)
    p99 = 1e3 * gap_quantile_s([(1.0, predicted.gaps)])
    simulated = simulated_gap_p99_ms(model, c.id, replicas, rate)
    assert p99 == pytest.approx(simulated, rel=0.06)
    assert c.itl_p99_ms > 1.05 * simulated


def test_every_workload_is_predicted_within_ten_percent_on_us_east(us_east):
    """The deliverable on a shipped scenario: per workload, the median over its (site,
    workload, slice) groups of predicted / simulated p99 TTFT and ITL within ±10 %, and no
    group off by more than 25 % — at 10,000 simulated requests a group."""
    result = verify_plan(us_east, requests=10_000, seed=0)
    table = result.tables["by_pool"]
    assert result.summary["all_objectives_met"]
    for what in ("ttft", "itl"):
        ratio = table[f"{what}_p99_ms_predicted"] / table[f"{what}_p99_ms"]
        median = ratio.groupby(table["workload"]).median()
        assert set(median.index) == {"chat", "code-completion"}
        assert ((median - 1).abs() <= 0.10).all(), (what, median.to_dict())
        assert ((ratio - 1).abs() <= 0.25).all(), (what, pd.concat([table[["site", "workload", "period"]], ratio], axis=1))
