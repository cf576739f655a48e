"""The 2026 shapes of the calibration: the AIConfigurator exporter's names for the new parts,
models and precisions (without the optional package: a fake session), benchmark rows at
4-bit precisions and with expert parallelism, the engine release a calibration row carries,
and the planner finding the rows fitted at a 4-bit precision."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest

from optimizer.base.errors import ScenarioError
from optimizer.base.precision import KV_FORMATS, WEIGHT_FORMATS
from optimizer.commands.calibrate import aiconfigurator as aic
from optimizer.commands.calibrate.fit import engine_version
from optimizer.commands.calibrate.model import predict_ms, shipped_catalogue
from optimizer.curves.roofline import decode_step_time_s
from optimizer.scenario import Serving
from optimizer.scenario.calibration.files import read_calibration
from optimizer.scenario.calibration.params import SHIPPED_FILE, ParameterSet, entry_from_row, shipped_calibration
from optimizer.scenario.calibration.tables import read_benchmark_csv
from optimizer.serving.configs import calibration_dtype, make_replica

ROW = "kind,model,accelerator,tp,ep,batch,engine,version,weight_dtype,kv_dtype,prompt_tokens,context_tokens,latency_ms\n"


# ------------------------------------------------------------------------- exporter names


def test_every_exported_name_is_a_catalogue_id():
    cat = shipped_catalogue()
    assert set(aic.SYSTEMS) <= set(cat.accelerators) and set(aic.MODELS) <= set(cat.models)
    assert {"b300", "gb200-nvl72", "gb300-nvl72"} <= set(aic.SYSTEMS)
    assert {"deepseek-v3", "deepseek-r1", "qwen3-235b-a22b", "gpt-oss-120b", "kimi-k2"} <= set(aic.MOE)
    assert all(cat.models[m].experts for m in aic.MOE) and not any(cat.models[m].experts for m in aic.DENSE)
    assert set(aic.DTYPES) <= set(WEIGHT_FORMATS) and set(aic.KV_NAMES.values()) <= set(KV_FORMATS)
    assert set(aic.QUANT) == set(aic.DTYPES) and all(q[2] in aic.KV_NAMES for qs in aic.QUANT.values() for q in qs)


def test_layouts_dense_tensor_parallel_and_moe_expert_parallel():
    assert aic.layouts("llama-3.1-70b", "tp") == [(1, 1), (2, 1), (4, 1), (8, 1)]
    assert aic.layouts("llama-3.1-70b", "moe") == [] and aic.layouts("deepseek-v3", "tp") == []
    assert aic.layouts("deepseek-v3", "moe") == [(4, 1), (8, 1), (1, 8), (1, 16), (1, 32)]


def test_an_expert_parallel_session_writes_the_replicas_batch(monkeypatch):
    # AIConfigurator's batch is per attention rank: the row's is ep times that
    asked = []

    def fake_latency(session, batch, isl, phase):
        asked.append((phase, batch, isl))
        return None if batch >= 64 and phase == "decode" else 10.0 + batch

    monkeypatch.setattr(aic, "_latency_ms", fake_latency)
    base = {"model": "deepseek-v3", "accelerator": "gb200-nvl72", "ep": 8}
    rows = aic.session_rows(object(), base, 8, log=None)
    decode = [r for r in rows if r["kind"] == "decode"]
    assert {b for phase, b, _ in asked if phase == "decode"} == {1, 4, 16, 64}  # decode batches ≤ 64 per rank
    assert sorted({r["batch"] for r in decode}) == [8, 32, 128]  # 64 per rank: out of memory, no row
    assert all(r["latency_ms"] == 10.0 + r["batch"] / 8 for r in rows)
    assert all(r["ep"] == 8 and r["accelerator"] == "gb200-nvl72" for r in rows)


def test_the_source_names_a_quantisation_other_than_the_plain_one():
    plain = aic.source_text("0.12.0", "b200_sxm", "trtllm", "1.3.0rc23", "fp8", aic.QUANT["fp8"][0])
    assert plain == "AIConfigurator 0.12.0 performance database (b200_sxm/trtllm 1.3.0rc23)"
    block = aic.source_text("0.12.0", "b200_sxm", "vllm", "0.27.0", "fp8", aic.QUANT["fp8"][1])
    assert block.endswith("0.27.0; gemm/moe/kv/fmha fp8_block/fp8_block/fp8/bfloat16)")
    assert "nvfp4/nvfp4/fp8/fp8" in aic.source_text("0.12.0", "gb200", "trtllm", "1.3.0rc23", "nvfp4",
                                                    aic.QUANT["nvfp4"][0])


# ------------------------------------------------------------------------- benchmark rows


def test_a_four_bit_expert_parallel_row_is_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(ROW + "decode,deepseek-v3,gb200-nvl72,1,16,256,trtllm,1.3.0rc23,nvfp4,fp8,,4096,31.5\n")
    row = read_benchmark_csv(path).iloc[0]
    assert (row["weight_dtype"], row["kv_dtype"], row["ep"], row["tp"]) == ("nvfp4", "fp8", 16, 1)


@pytest.mark.parametrize("column, value", [("weight_dtype", "fp6"), ("kv_dtype", "mxfp4")])
def test_an_unknown_precision_is_refused(tmp_path, column, value):
    path = tmp_path / "t.csv"
    cells = {"weight_dtype": "nvfp4", "kv_dtype": "fp8", column: value}
    path.write_text(ROW + f"decode,llama-3.1-8b,b200,1,1,8,trtllm,1.3.0rc23,{cells['weight_dtype']},"
                          f"{cells['kv_dtype']},,1024,5\n")
    with pytest.raises(ScenarioError) as exc:
        read_benchmark_csv(path)
    assert exc.value.field == column and f"got {value!r}" in str(exc.value) and "\n" not in str(exc.value)


def test_an_expert_parallel_row_predicts_the_attention_data_parallel_replica():
    cat = shipped_catalogue()
    row = {"kind": "decode", "model": "deepseek-v3", "accelerator": "b200", "tp": 1.0, "ep": 8.0, "batch": 128.0,
           "weight_dtype": "fp8", "kv_dtype": "fp8", "context_tokens": 4096.0, "prompt_tokens": 0.0}
    table = pd.DataFrame([row, {**row, "tp": 8.0, "ep": 1.0}])
    serving = Serving(engine="trtllm")
    got = predict_ms(table, serving, cat)
    m, a = cat.models["deepseek-v3"], cat.accelerators["b200"]
    ep = make_replica(m, a, serving, 8, "fp8", "fp8", expert_parallel=True)
    tp = make_replica(m, a, serving, 8, "fp8", "fp8")
    assert ep.attention_dp and not tp.attention_dp
    assert got[0] == pytest.approx(1000 * float(decode_step_time_s(ep, 128.0, 4096.0)), rel=1e-12)
    assert got[1] == pytest.approx(1000 * float(decode_step_time_s(tp, 128.0, 4096.0)), rel=1e-12)
    assert got[0] != pytest.approx(got[1], rel=1e-3)


# ------------------------------------------------------------------------- engine versions


def shipped_csv_rows() -> list[dict]:
    with SHIPPED_FILE.open(newline="") as f:
        return list(csv.DictReader(f))


def test_every_fitted_row_names_its_engine_release_and_the_loader_reads_it():
    rows = shipped_csv_rows()
    entries = {e.key: e for e in shipped_calibration().entries}
    fitted = [r for r in rows if r["source"].startswith("fit to data/calibration/aiconfigurator.csv")]
    assert len(fitted) >= 40
    for r in fitted:  # the release the source names is the column's, and the loader keeps it
        assert r["engine_version"] and f"{r['engine']} {r['engine_version']};" in r["source"], r
        assert entries[f"{r['accelerator']}/{r['engine']}/{r['dtype']}"].engine_version == r["engine_version"]
    for r in rows:
        if r["engine"] == "*":
            assert r["engine_version"] == ""
    assert entries["b200/trtllm/nvfp4"].engine_version == "1.3.0rc23"
    assert entries["a100-80gb-sxm/vllm/bf16"].engine_version == "0.14.0"


@pytest.mark.parametrize("version", ["latest", "1.3 rc", "v1.3.0", "1", "1.3.0-", "1.3;0"])
def test_a_malformed_engine_version_is_refused(tmp_path, version):
    path = tmp_path / "cal.yaml"
    path.write_text("fleetplan_calibration: 1\nentries:\n"
                    f"  - {{accelerator: h100-sxm, engine: vllm, engine_version: {version!r}, dtype: fp8}}\n")
    with pytest.raises(ScenarioError) as exc:
        read_calibration(path)
    assert exc.value.field == "engine_version" and "\n" not in str(exc.value)
    with pytest.raises(ValueError):
        entry_from_row({"accelerator": "b200", "engine": "trtllm", "engine_version": version})


@pytest.mark.parametrize("versions, engine, expected", [
    (["1.3.0rc23"] * 3, "trtllm", "1.3.0rc23"), (["v0.6.3"], "vllm", "0.6.3"), (["0.5.14", "0.5.16"], "sglang", None),
    (["0.27.0"], "any", None), ([None], "vllm", None), (["nightly"], "vllm", None)])
def test_a_fit_records_the_one_release_of_its_rows(versions, engine, expected):
    assert engine_version(pd.DataFrame({"version": versions}), engine) == expected


# ------------------------------------------------------------------------- the planner's lookup


def test_a_four_bit_replica_runs_with_the_rows_fitted_at_its_precision():
    cat = shipped_catalogue()
    serving = Serving(engine="trtllm")
    b200, h100 = cat.accelerators["b200"], cat.accelerators["h100-sxm"]
    assert calibration_dtype(b200, "nvfp4", serving) == "nvfp4"
    assert calibration_dtype(b200, "mxfp4", serving) == "fp8"  # no mxfp4 row: the fp8 ones
    assert calibration_dtype(b200, "nvfp4") == "fp8"  # (no calibration given)
    assert calibration_dtype(h100, "nvfp4", serving) == "bf16"  # weight-only on Hopper
    fitted = shipped_calibration().lookup("b200", "nvfp4", "trtllm")
    r = make_replica(cat.models["llama-3.1-70b"], b200, serving, 4, "nvfp4", "fp8")
    assert r.eff.prefill_mfu == pytest.approx(fitted.prefill_mfu)
    assert r.eff.decode_mbu == pytest.approx(fitted.decode_mbu)
    assert fitted.prefill_mfu != shipped_calibration().lookup("b200", "fp8", "trtllm").prefill_mfu


def test_the_new_rows_are_physical():
    # fractions of a peak stay fractions, and a 4-bit part's fitted prefill reaches no more
    # tokens/s than its FP4 peak allows: efficiency × peak ≤ peak (checked as ≤ 1)
    entries = [e for e in shipped_calibration().entries if e.accelerator in ("b300", "gb200-nvl72", "gb300-nvl72")
               or e.dtype == "nvfp4"]
    assert len(entries) >= 30
    for e in entries:
        assert isinstance(e, ParameterSet)
        for name in ("prefill_mfu", "decode_mbu", "decode_mfu", "link_efficiency", "small_link_share"):
            assert 0.05 <= getattr(e, name) <= 1.0, (e.key, name)
        if e.source.startswith("not fitted"):  # a screened group (defaults.screened_groups): no spread of its own
            assert e.spread == {}, e.key
            continue
        assert e.spread["prefill"].points > 0 and e.spread["decode"].points > 0, e.key
        assert np.isfinite(e.spread["decode"].median_log_ratio)
