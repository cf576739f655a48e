"""Every flag is validated like a scenario field (issue class 4): one line naming the flag, the
accepted range and the value given, exit 2, before any work. A hypothesis fuzz then throws
arbitrary text at every value-taking flag of every command."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tree import changes, snapshot

from optimizer.cli.main import build_parser, main

TINY = Path(__file__).parent / "data" / "tiny.yaml"


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("flags") / "plan"
    assert main(["plan", str(TINY), "--out", str(out), "--quiet", "--no-report"]) == 0
    return out


def check(argv, capsys, flag: str, *fragments) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert flag in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


PLAN = ["plan", str(TINY), "--quiet"]
CASES = [
    (PLAN + ["--time-limit", "0"], "--time-limit", "expected 0.1 to 10,000,000 s"),
    (PLAN + ["--time-limit", "-5"], "--time-limit", "expected 0.1 to 10,000,000 s"),
    (PLAN + ["--time-limit", "nan"], "--time-limit", "expected 0.1 to 10,000,000 s; got nan"),
    (PLAN + ["--time-limit", "inf"], "--time-limit", "expected 0.1 to 10,000,000 s; got inf"),
    (PLAN + ["--time-limit", "1e12"], "--time-limit", "expected 0.1 to 10,000,000 s"),
    (PLAN + ["--time-limit", "soon"], "--time-limit", "'soon'"),
    (PLAN + ["--mip-gap", "0"], "--mip-gap", "expected 1e-09 or more, below 1"),
    (PLAN + ["--mip-gap", "1"], "--mip-gap", "expected 1e-09 or more, below 1"),
    (PLAN + ["--mip-gap", "5"], "--mip-gap", "percentage"),
    (PLAN + ["--mip-gap", "nan"], "--mip-gap", "fraction between 0 and 1"),
    (PLAN + ["--threads", "0"], "--threads", "expected 1 to 1,024"),
    (PLAN + ["--threads", "2.5"], "--threads", "2.5"),
    (PLAN + ["--threads", "99999"], "--threads", "1 to 1,024"),
    (PLAN + ["--set", "demand.scale=-1"], "--set demand.scale=-1", "expected 1e-06 to 1,000,000"),
    (PLAN + ["--set", "serving.decode_mbu=nan"], "--set serving.decode_mbu=nan", "expected 0.05 to 1"),
    (PLAN + ["--set", "serving.decode_mbu=×0"], "--set serving.decode_mbu=×0", "greater than 0"),
    (PLAN + ["--set", "workloads.code-completion.ttft_p99_ms=" + "9" * 400], "--set workloads.code-completion",
     "…"),
    (["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "0"], "--isl", "(0, 1e+07]"),
    (["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--osl", "-5"], "--osl", "tokens"),
    (["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--itl-ms", "nan"], "--itl-ms", "milliseconds"),
    (["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--ttft-ms", "inf"], "--ttft-ms", "milliseconds"),
    (["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--price-usd-per-gpu-hour", "0"],
     "--price-usd-per-gpu-hour", "US$"),
    (["sweep", str(TINY), "--vary", "demand.scale=1,inf", "--quiet"], "--vary", "finite"),
    (["sweep", str(TINY), "--vary", "demand.scale=nan", "--quiet"], "--vary", "finite"),
    (["sweep", str(TINY), "--vary", "demand.scale=×nan", "--quiet"], "--vary", "multiplier"),
    (["sweep", str(TINY), "--vary", "demand.scale=1:inf:1", "--quiet"], "--vary", "finite"),
    (["sweep", str(TINY), "--vary", "demand.scale=1,2", "--workers", "0", "--quiet"], "--workers", "[1, 256]"),
    (["sweep", str(TINY), "--vary", "demand.scale=1,2", "--time-limit", "-1", "--quiet"], "--time-limit", "expected 0.1 to"),
    (PLAN + ["--workers", "0"], "--workers", "[1, 256]"),
    (PLAN + ["--workers", "nan"], "--workers", "'nan'"),
    (PLAN + ["--effort", ""], "--effort", "first"),
    (PLAN + ["--scheduler", ""], "--scheduler", "tcp://"),
    (PLAN + ["--scheduler", "my laptop"], "--scheduler", "'my laptop'"),
    (["sweep", str(TINY), "--vary", "demand.scale=1,2", "--scheduler", "8786", "--quiet"], "--scheduler", "tcp://"),
    # well formed, but nobody answers: refused before the solve, not 30 s into refining
    (PLAN + ["--scheduler", "tcp://127.0.0.1:1"], "--scheduler", "no Dask scheduler answers"),
    # a calibration path names the flag it came by, and what it found there
    (PLAN + ["--calibration", "."], "fleetplan: --calibration .: ", "is a folder; expected a calibration file in it"),
    (PLAN + ["--calibration", "nothere.yaml"], "fleetplan: --calibration nothere.yaml: ", "no calibration file at"),
    (PLAN + ["--calibration", ""], "fleetplan: --calibration : ", "expected the path of a calibration file"),
    (PLAN + ["--set", "calibration=."], "fleetplan: --set calibration=.: ", "is a folder"),
    (["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--calibration", "."], "fleetplan: --calibration .: ",
     "is a folder"),
    # a catalogue row patched by --set: the error names the flag and the patched row, not the shipped CSV's line
    (PLAN + ["--set", "accelerators={ids: [h100-sxm, l40s], patch: {l40s: {hbm_gb: 1e308}}}"],
     "fleetplan: --set accelerators=", "accelerators 'l40s' (patched), field 'hbm_gb': expected 1 to 10,000 GB"),
    (PLAN + ["--set", "models={patch: {llama-3.1-8b: {layers: 0}}}"],
     "fleetplan: --set models=", "models 'llama-3.1-8b' (patched), field 'layers'"),
    (PLAN + ["--set", "prices={patch: {l40s: {ondemand_usd_per_gpu_hour: -1}}}"],
     "fleetplan: --set prices=", "(patched), field 'ondemand_usd_per_gpu_hour'"),
]


@pytest.mark.parametrize("argv,flag,says", CASES, ids=[" ".join(c[0][2:] if c[0][0] == "plan" else c[0][:1] + c[0][-2:])
                                                      for c in CASES])
def test_bad_flag_values_are_refused_with_the_rule(tmp_path, capsys, monkeypatch, argv, flag, says):
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    check(argv, capsys, flag, says)
    assert changes(before, snapshot(tmp_path)) == []


PLAN_DIR_CASES = [
    (["verify", "--requests", "0"], "--requests", "[1, 1e+07]"),
    (["verify", "--requests", "many"], "--requests", "'many'"),
    (["verify", "--seed", "-1"], "--seed", "seed"),
    (["verify", "--seed", "1.5"], "--seed", "seed"),
    (["verify", "--prefill-batch-tokens", "-1"], "--prefill-batch-tokens", "tokens"),
    (["verify", "--slices", "Q9/all/3"], "--slices", "Q9/all/3"),
    (["verify", "--slices", "nonsense"], "--slices", "PERIOD/DAYTYPE/HOUR"),
    (["stress", "--demand", "×0"], "--demand", "(0, 1000]"),
    (["stress", "--demand", "-1"], "--demand", "factor"),
    (["stress", "--demand", "nan"], "--demand", "factor"),
    (["stress", "--rtt", "x0"], "--rtt", "factor"),
    (["stress", "--requests", "-3"], "--requests", "requests"),
    (["stress", "--perturb", "serving.decode_mbu=×0"], "--perturb serving.decode_mbu=×0", "greater than 0"),
    (["stress", "--perturb", "serving.decode_mbu=nan"], "--perturb serving.decode_mbu=nan", "expected 0.05 to 1"),
    (["stress", "--perturb", "serving.decode_mbu=-1"], "--perturb serving.decode_mbu=-1", "fraction between 0 and 1"),
    (["stress", "--perturb", "workloads.*.isl_mean_tokens=×0"], "--perturb workloads.", "expected 1 to 10,000,000 tokens"),
    (["stress", "--perturb", "serving.decode_mbuu=0.5"], "--perturb serving.decode_mbuu=0.5", "did you mean"),
    (["stress", "--lose-site", "atlantis"], "--lose-site", "atlantis"),
    (["operate", "--noise-sigma", "3"], "--noise-sigma", "[0, 2]"),
    (["operate", "--noise-sigma", "nan"], "--noise-sigma", "σ"),
    (["operate", "--seed", "x"], "--seed", "'x'"),
]


@pytest.mark.parametrize("argv,flag,says", PLAN_DIR_CASES, ids=[" ".join(c[0]) for c in PLAN_DIR_CASES])
def test_bad_values_for_plan_folder_commands(plan_dir, tmp_path, capsys, argv, flag, says):
    d = tmp_path / "plan"
    shutil.copytree(plan_dir, d)
    before = snapshot(tmp_path)
    check([argv[0], str(d), *argv[1:]], capsys, flag, says)
    assert changes(before, snapshot(tmp_path)) == []


def _subparser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _value_flags() -> list[tuple[str, str]]:
    """(command, flag) of every flag that takes a value."""
    out = []
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        for action in parser._actions:
            if action.option_strings and action.nargs != 0 and action.option_strings[0].startswith("--"):
                out.append((command, action.option_strings[0]))
    return out


VALUE_FLAGS = _value_flags()
TEXT = st.one_of(st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e308", "1e-320", "", " ", "×0", "x-2", "1,5",
                                  "2.5", "999999999999", "=1", "a=b", "Q1/all/99", "*", "../../etc/passwd"]),
                 st.text(max_size=12), st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=True).map(repr))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(VALUE_FLAGS), value=TEXT)
def test_fuzzed_flag_values_parse_or_refuse_in_one_line(capsys, which, value):
    """Parsing alone: a value is accepted or refused with one line naming the flag — never a
    traceback (argparse types raise nothing else)."""
    command, flag = which
    parser = _subparser(command)
    positional = [f"p{i}" for i, a in enumerate(parser._actions)
                  if not a.option_strings and a.nargs not in ("?", "*")]
    required = [x for a in parser._actions if a.required and a.option_strings and a.option_strings[0] != flag
                for x in (a.option_strings[0], "v")]
    try:
        build_parser().parse_args([command, *positional, *required, f"{flag}={value}"])
    except SystemExit as exc:
        assert exc.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and flag in err, err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(["--isl", "--osl", "--itl-ms", "--ttft-ms", "--price-usd-per-gpu-hour"]), value=TEXT)
def test_fuzzed_curve_arguments_run_or_refuse(capsys, flag, value):
    """The cheap command run to the end with arbitrary values: a table, or one line and 2."""
    code = main(["curves", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json", f"{flag}={value}"])
    err = capsys.readouterr().err.strip()
    assert code in (0, 2)
    if code == 2:
        assert len(err.splitlines()) == 1, err


def test_a_catalogue_csv_given_with_set_is_read_from_the_working_directory(tmp_path, capsys, monkeypatch):
    """`--set 'accelerators={csv: sub/acc.csv}'`: the path is relative to the working directory
    (the flag's own text, with its slash, is no folder), and a bad row names that CSV's line."""
    from optimizer.scenario import DATA_DIR

    monkeypatch.chdir(tmp_path)
    lines = (DATA_DIR / "accelerators.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [line for line in lines[1:] if line.split(",")[0] in ("h100-sxm", "l40s")]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "acc.csv").write_text("\n".join([lines[0], *rows]) + "\n")
    assert main(PLAN + ["--set", "accelerators={csv: sub/acc.csv}", "--out", "ok", "--no-report"]) == 0
    bad = [row.split(",") for row in rows]
    bad[1][header.index("hbm_gb")] = "1e308"
    (tmp_path / "sub" / "acc.csv").write_text("\n".join([lines[0], *(",".join(r) for r in bad)]) + "\n")
    capsys.readouterr()
    check(PLAN + ["--set", "accelerators={csv: sub/acc.csv}", "--out", "bad"], capsys, "sub/acc.csv, line 3",
          "field 'hbm_gb'")
