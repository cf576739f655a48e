"""Monotonicity of the optimum (property tests, exact mode on the tiny instance, where the
optimum is proven): more demand never costs less; a looser TTFT objective never costs more;
a cheaper accelerator never costs more; an extra candidate site never costs more."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from instances import TINY

from optimizer.geography.network import build_graph, rtt_matrix
from optimizer.instance.build import build_instance
from optimizer.scenario import apply_overrides, load_raw, validate
from optimizer.solve import SolverSettings, solve

EXACT = SolverSettings(exact=True, mip_gap=1e-9, time_limit_s=60)
TOL = 1e-6


def optimum(overrides=(), edit=None) -> float:
    raw = apply_overrides(load_raw(TINY), list(overrides))
    if edit:
        edit(raw.data)
    s = validate(raw)
    result = solve(build_instance(s, rtt_matrix(build_graph(s), s)), EXACT)
    assert result.status == "optimal"
    return result.objective_usd


@settings(max_examples=6, deadline=None)
@given(st.floats(1.0, 3.0), st.floats(1.0, 1.6))
def test_more_demand_never_costs_less(scale, more):
    low = optimum([f"demand.scale={scale}"])
    high = optimum([f"demand.scale={scale * more}"])
    assert high >= low * (1 - TOL)


@settings(max_examples=6, deadline=None)
@given(st.floats(250.0, 600.0), st.floats(1.0, 1.5))
def test_looser_ttft_never_costs_more(ttft, looser):
    tight = optimum([f"workloads.code-completion.ttft_p99_ms={ttft}"])
    loose = optimum([f"workloads.code-completion.ttft_p99_ms={ttft * looser}"])
    assert loose <= tight * (1 + TOL)


@settings(max_examples=6, deadline=None)
@given(st.sampled_from(["h100-sxm", "l40s"]), st.floats(0.3, 1.0))
def test_cheaper_accelerator_never_costs_more(gpu, factor):
    base = optimum()
    cheaper = optimum([f"prices.{gpu}.{field}=x{factor}" for field in
                       ("ondemand_usd_per_gpu_hour", "reserved_1y_usd_per_gpu_hour", "reserved_3y_usd_per_gpu_hour")])
    assert cheaper <= base * (1 + TOL)


def test_an_extra_site_never_costs_more():
    def drop_dallas(data):
        data["sites"].pop("dallas")
        data["supply"].pop("dallas")

    assert optimum() <= optimum(edit=drop_dallas) * (1 + TOL)
