"""A reader never assumes a precision: the benchmark table, vLLM/SGLang results and MLPerf
submissions take the weights' precision and the engine from what the source states (a
column, a flag, a sidecar, a quantised model's name, a backend, an MLPerf measurements file
and system description), refuse what they cannot know, and record where each value came
from — in the table's rows and in the calibration file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from optimizer.base.errors import ScenarioError
from optimizer.cli.main import main
from optimizer.scenario.calibration.files import read_calibration
from optimizer.scenario.calibration.tables import read_benchmark_csv, read_table

MLPERF_LOG = Path(__file__).resolve().parent / "data" / "mlperf" / "mlperf_log_summary.txt"
RUN = {"date": "20261201-101010", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
       "request_rate": "inf", "max_concurrency": 32, "completed": 100, "total_input_tokens": 102400,
       "total_output_tokens": 25600, "output_throughput": 2500.0, "median_ttft_ms": 80.0, "p99_ttft_ms": 240.0,
       "median_itl_ms": 12.0, "p99_itl_ms": 30.0}
WHERE = {"model": "llama-3.1-8b", "accelerator": "h100-sxm", "tp": 1}
SERVER = {"model": "llama-3.1-70b", "accelerator": "h100-sxm", "tp": 2, "gpus": 8, "prompt_tokens": 294,
          "output_tokens": 286}


def test_a_table_without_the_weights_precision_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("kind,model,accelerator,tp,batch,prompt_tokens,context_tokens,latency_ms\n"
                    "prefill,llama-3.1-8b,h100-sxm,1,1,512,0,12.7\n")
    with pytest.raises(ScenarioError) as exc:
        read_benchmark_csv(path)
    assert (exc.value.origin.file, exc.value.origin.line, exc.value.field) == (str(path), 2, "weight_dtype")
    assert "fleetplan assumes none" in str(exc.value)


def test_a_table_records_where_each_value_came_from(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("kind,model,accelerator,tp,batch,prompt_tokens,context_tokens,latency_ms,weight_dtype\n"
                    "prefill,llama-3.1-8b,h100-sxm,1,1,512,0,12.7,fp8\n")
    row = read_benchmark_csv(path).iloc[0]
    assert (row["weight_dtype"], row["kv_dtype"], row["engine"]) == ("fp8", "fp8", "any")
    assert row["weight_dtype_from"] == "t.csv, column weight_dtype"
    assert row["kv_dtype_from"] == "not stated: taken as the weights' precision"
    assert row["engine_from"] == "not stated: the fit applies to any engine"
    assert row["version_from"] == "not stated"


def _run(tmp_path: Path, name: str = "run.json", **fields) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({**RUN, **fields}))
    return path


def test_serving_results_take_precision_from_a_quantised_model_and_engine_from_the_backend(tmp_path):
    row = read_table(_run(tmp_path, model_id="neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"), WHERE).iloc[0]
    assert (row["weight_dtype"], row["engine"]) == ("fp8", "vllm")
    assert row["weight_dtype_from"] == "model_id: 'neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8'"
    assert row["engine_from"] == "backend: 'vllm'"
    sglang = read_table(_run(tmp_path, "sglang.json", backend="sglang", model_id="Qwen/Qwen3-32B-FP8"), WHERE).iloc[0]
    assert (sglang["engine"], sglang["weight_dtype"], sglang["engine_from"]) == ("sglang", "fp8", "backend: 'sglang'")
    trt = read_table(_run(tmp_path, "trt.json", backend="tensorrt-llm"), {**WHERE, "weight_dtype": "bf16"}).iloc[0]
    assert (trt["engine"], trt["weight_dtype_from"]) == ("trtllm", "--weight-dtype")


def test_serving_results_that_state_no_precision_are_refused_until_told(tmp_path):
    path = _run(tmp_path)  # an unquantised checkpoint's name: the engine may still quantise it
    with pytest.raises(ScenarioError) as exc:
        read_table(path, WHERE)
    assert exc.value.field == "weight_dtype" and "--weight-dtype" in str(exc.value) and "names none" in str(exc.value)
    (tmp_path / "run.json.yaml").write_text("weight_dtype: bf16\n")
    row = read_table(path, WHERE).iloc[0]
    assert (row["weight_dtype"], row["weight_dtype_from"]) == ("bf16", "run.json.yaml: weight_dtype")
    openai = read_table(_run(tmp_path, "o.json", backend="openai-chat"), {**WHERE, "weight_dtype": "bf16"}).iloc[0]
    assert (openai["engine"], openai["engine_from"]) == ("any", "not stated: the fit applies to any engine")


def test_precisions_fleetplan_does_not_model_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="states int4 weights; fleetplan models bf16 and fp8 only"):
        read_table(_run(tmp_path, model_id="TheBloke/Llama-2-70B-AWQ"), WHERE)


def _submission(tmp_path: Path, weight_data_types: str | None = "fp8") -> Path:
    """An MLPerf submission tree holding the Server log, its measurements file and its system
    description (the layout the submission checker reads)."""
    root = tmp_path / "closed" / "NVIDIA"
    system = "DGX-H100_H100-SXM-80GBx8_TRT"
    run = root / "results" / system / "llama2-70b-99" / "Server" / "performance" / "run_1"
    run.mkdir(parents=True)
    shutil.copy(MLPERF_LOG, run / "mlperf_log_summary.txt")
    if weight_data_types is not None:
        measured = root / "measurements" / system / "llama2-70b-99" / "Server"
        measured.mkdir(parents=True)
        (measured / f"{system}.json").write_text(json.dumps({
            "input_data_types": "int32", "retraining": "No", "starting_weights_filename": "llama2-70b",
            "weight_data_types": weight_data_types, "weight_transformations": "quantization"}))
    (root / "systems").mkdir(parents=True)
    (root / "systems" / f"{system}.json").write_text(json.dumps({
        "framework": "TensorRT 10.2.0, CUDA 12.4", "system_name": "NVIDIA DGX H100 (8x H100-SXM-80GB, TensorRT)"}))
    return run / "mlperf_log_summary.txt"


def test_an_mlperf_submission_states_its_precision_engine_and_version(tmp_path):
    row = read_table(_submission(tmp_path), SERVER).iloc[0]
    assert (row["weight_dtype"], row["engine"], row["version"]) == ("fp8", "trtllm", "TensorRT 10.2.0, CUDA 12.4")
    assert row["weight_dtype_from"] == "DGX-H100_H100-SXM-80GBx8_TRT.json weight_data_types: 'fp8'"
    assert row["engine_from"] == "DGX-H100_H100-SXM-80GBx8_TRT.json framework: 'TensorRT 10.2.0, CUDA 12.4'"
    assert row["version_from"] == "DGX-H100_H100-SXM-80GBx8_TRT.json framework"


@pytest.mark.parametrize("stated, given, says", [
    ("fp4", None, "states fp4 weights; fleetplan models bf16 and fp8 only"),
    (None, None, "does not state the weights' precision"),
    ("fp8", "bf16", "--weight-dtype says bf16, but DGX-H100_H100-SXM-80GBx8_TRT.json weight_data_types"),
])
def test_an_mlperf_run_of_unknown_or_unmodelled_precision_is_refused(tmp_path, stated, given, says):
    context = {**SERVER, "weight_dtype": given} if given else SERVER
    with pytest.raises(ScenarioError) as exc:
        read_table(_submission(tmp_path, stated), context)
    assert exc.value.field == "weight_dtype" and says in str(exc.value)


def test_the_calibration_file_records_where_each_value_came_from(tmp_path):
    log = _submission(tmp_path)
    out = tmp_path / "cal.yaml"
    flags = ["--model", "llama-3.1-70b", "--accelerator", "h100-sxm", "--tp", "2", "--gpus", "8",
             "--prompt-tokens", "294", "--output-tokens", "286"]
    assert main(["calibrate", str(log), "--out", str(out), "--holdout", "0", *flags]) == 0
    [entry], _ = read_calibration(out)
    assert (entry.engine, entry.dtype) == ("trtllm", "fp8")
    assert entry.provenance["weight_dtype"] == "DGX-H100_H100-SXM-80GBx8_TRT.json weight_data_types: 'fp8'"
    assert entry.provenance["engine"].startswith("DGX-H100_H100-SXM-80GBx8_TRT.json framework")
    assert entry.provenance["kv_dtype"] == "not stated: taken as the weights' precision"
    assert len(entry.fitted) == 1 and entry.spread == {}  # one end-to-end point: one parameter, no band
