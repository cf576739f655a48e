"""What the flags name, read: the scenario with the catalogue rows the flags ask for
(`with_catalogue_rows`), ``--calibration`` as an override, ``--from-trace``/``--trace`` files
as `TraceSpec`s, and verify's Poisson arrivals with ``--lengths``."""

from __future__ import annotations

from pathlib import Path

from optimizer.base.errors import Origin, ScenarioError, shorten

CURVE_FLAGS = {"isl_mean_tokens": "--isl", "isl_p99_tokens": "--isl", "osl_mean_tokens": "--osl",
               "osl_p99_tokens": "--osl", "itl_p99_ms": "--itl-ms", "ttft_p99_ms": "--ttft-ms"}


def with_catalogue_rows(args, **wanted):
    """The scenario of --scenario (default: the reference), with the catalogue's rows of any
    accelerator or model the flags name that it does not select (the catalogue has them)."""
    from optimizer.scenario import load_raw, load_scenario

    raw = load_raw(args.scenario)
    overrides = []
    for table, ids in wanted.items():
        missing = [i for i in ids if i and i not in raw.data[table]]
        if missing and all(i in catalogue_ids(table) for i in missing):
            overrides.append(f"{table}=[{', '.join([*raw.data[table], *missing])}]")
    return load_scenario(args.scenario, overrides + calibration_override(args))


def served_precision(gpu, weight: str, kv: str) -> None:
    """A `ScenarioError` naming the flag if ``gpu`` serves ``weight`` weights or ``kv`` KV not."""
    if weight not in gpu.precisions or (weight == "fp8" and gpu.fp8_dense_tflops is None):
        raise ScenarioError(f"{gpu.id} does not serve {weight} weights; expected --dtype "
                            f"{' or '.join(p for p in gpu.precisions if p != 'fp8' or gpu.fp8_dense_tflops)}",
                            field="--dtype")
    if kv not in gpu.kv_precisions():
        raise ScenarioError(f"{gpu.id} does not serve a {kv} KV cache; expected --kv-dtype "
                            f"{' or '.join(gpu.kv_precisions())}", field="--kv-dtype")


def at_precision(s, workload: str, gpus: list[str], dtype: str | None, kv_dtype: str | None):
    """The scenario with ``workload`` served at --dtype/--kv-dtype only (unchanged without
    them); an error naming the flag where none of ``gpus`` serves them (the others simply
    offer no config at that precision)."""
    if not (dtype or kv_dtype):
        return s
    from optimizer.base.precision import default_kv

    w = s.workloads[workload]
    weight = dtype or w.weight_dtype
    kv = kv_dtype or (default_kv(weight) if dtype else w.kv_dtype)
    refusals = []
    for g in gpus:
        try:
            served_precision(s.accelerators[g], weight, kv)
        except ScenarioError as exc:
            refusals.append(exc)
    if refusals and len(refusals) == len(gpus):
        raise refusals[0]
    w = w.model_copy(update={"weight_dtype": weight, "kv_dtype": kv, "accepted_precisions": None})
    return s.model_copy(update={"workloads": {**s.workloads, w.id: w}})


def catalogue_ids(table: str) -> set[str]:
    """The ids of a shipped catalogue table (accelerators, models)."""
    from optimizer.scenario import REFERENCE_SCENARIO
    from optimizer.scenario.raw import table_rows

    return set(table_rows(table, None, REFERENCE_SCENARIO))


def calibration_override(args) -> list[str]:
    """``--calibration FILE`` is the override ``calibration=FILE`` (the file's content replaces
    the one the scenario names), the path checked first so that an error names the flag."""
    from optimizer.scenario.calibration.files import calibration_path

    if getattr(args, "calibration", None) is None:
        return []
    calibration_path(args.calibration, Path.cwd(), Origin(f"--calibration {shorten(args.calibration)}"))
    return [f"calibration={args.calibration}"]


def trace_specs(files: list[str], columns: str | None, tz: str | None, metro: str | None, workload: str | None):
    """``[WORKLOAD=]FILE`` arguments and the reading flags → `TraceSpec`s."""
    from optimizer.scenario.trace_spec import TraceSpec, parse_columns

    mapping, fmt = parse_columns(columns)
    specs = []
    for item in files:
        label, sep, path = item.partition("=")
        if not sep or Path(item).exists():
            label, path = workload, item
        specs.append(TraceSpec(Path(path), mapping, fmt, tz or "UTC", metro, label or workload))
    return specs


def poisson_source(args, scenario=None):
    """verify's Poisson arrivals, with the lengths of ``--lengths FILE`` when given."""
    from optimizer.commands.verify.arrivals import POISSON, Poisson

    if not args.lengths:
        return POISSON
    from optimizer.commands.traces.replay import read_lengths
    from optimizer.folder.read import read_plan, scenario_of

    scenario = scenario or scenario_of(read_plan(args.plan_dir), args.plan_dir)
    return Poisson(read_lengths(args.lengths, scenario))


def slice_list(text: str):
    """``--slices``: "peak", "all" or a comma-separated list of slices."""
    return text if text in ("peak", "all") else [x.strip() for x in text.split(",") if x.strip()]
