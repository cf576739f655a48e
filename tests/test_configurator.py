"""One-site goodput per GPU against an external configurator's best configuration (issue 14):
fleetplan's plan stays within ±15 % of the figures recorded from NVIDIA AIConfigurator 0.12
(data/calibration/aiconfigurator_best.csv; the package itself is an optional extra)."""

from __future__ import annotations

from datetime import date

import pytest
from configurator_goodput import case_of, plan_goodput, recorded

ROWS = recorded()


def test_the_recorded_figures_carry_their_source_and_date():
    assert len(ROWS) == 4  # the 70B cases: two shapes × H100 and H200
    for row in ROWS:
        assert "AIConfigurator" in row["source"] and date.fromisoformat(row["as_of"]) <= date.today()
        # the best configuration is the better of the two modes it searched
        best = max(float(row["agg_tokens_per_s_per_gpu"]), float(row["disagg_tokens_per_s_per_gpu"]))
        assert float(row["tokens_per_s_per_gpu"]) == best


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['accelerator']}-{r['isl']}-{r['osl']}" for r in ROWS])
def test_one_site_goodput_per_gpu_within_15_percent_of_the_configurator(row):
    case = case_of(row)
    got = plan_goodput(case)
    # every request is served inside its objectives: goodput = requests/s × output tokens
    assert got["goodput_tokens_per_s"] == pytest.approx(case.requests_per_s * case.osl, rel=1e-6)
    assert got["tokens_per_s_per_gpu"] == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.15)
