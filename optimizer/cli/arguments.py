"""Command-line values, checked like the scenario fields they stand for.

A flag that overrides a scenario field (``--time-limit`` → ``policy.time_limit_s``) is
validated by that field's own rules, so a value the YAML would refuse is refused on the
command line with the same words; the other numeric flags carry their accepted range here.
Each check is an argparse ``type``: a bad value ends the command with one line naming the
flag, the range and the value given (exit 2).
"""

from __future__ import annotations

import argparse
import math
import re

from pydantic import BaseModel, ValidationError

from optimizer.base.errors import shorten
from optimizer.base.precision import KV_FORMATS, WEIGHT_FORMATS
from optimizer.scenario import Churn, Policy
from optimizer.scenario.spot import Spot


def _explain_first(exc: ValidationError, model: type[BaseModel]) -> str:
    from optimizer.scenario import explain  # the scenario's wording for the same rules

    return explain(exc.errors()[0], model)


def field_value(model: type[BaseModel], name: str):
    """An argparse type that accepts what ``model.name`` accepts in a scenario: the section is
    validated with only this field given, so its own validators (a percentage written for a
    fraction, seconds written for milliseconds) speak as they would for the YAML."""
    def check(text: str):
        try:
            value = getattr(model.model_validate({name: _number_or_text(text)}), name)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(f"{_explain_first(exc, model)} (the rule of scenario field "
                                              f"{model.__name__.lower()}.{name})") from None
        if value is None:
            raise argparse.ArgumentTypeError(f"expected a value, got {shorten(text)!r}")
        return value

    check.__name__ = name
    return check


def _number_or_text(text: str):
    try:
        return float(text) if any(c in text for c in ".eEnN") else int(text)
    except ValueError:
        return text


def number(low: float, high: float, *, integer: bool = False, low_open: bool = False, what: str = "a number"):
    """An argparse type for a finite number in [low, high] (``low_open``: (low, high])."""
    def check(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {shorten(text)!r}") from None
        inside = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
        if not inside:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"expected {what} in {bracket}{low:g}, {high:g}], got {shorten(text)!r}")
        return value

    check.__name__ = what
    return check


def factor(text: str) -> float:
    """A multiplier written ×F, xF, *F or F: finite and > 0 (at most 1,000)."""
    body = text.strip().lstrip("×xX*")
    try:
        value = float(body)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor like ×1.3, got {shorten(text)!r}") from None
    if not (math.isfinite(value) and 0 < value <= 1000):
        raise argparse.ArgumentTypeError(f"expected a factor in (0, 1000], like ×1.3, got {shorten(text)!r}")
    return value


SEED = number(0, 2**32 - 1, integer=True, what="a whole-number seed")
TOKENS = number(0, 1e7, low_open=True, what="a number of tokens")
MILLISECONDS = number(0, 8.64e7, low_open=True, what="milliseconds")
PRICE = number(0, 1e4, low_open=True, what="US$ per GPU-hour")
WORKERS = number(1, 256, integer=True, what="a number of worker processes")
REQUESTS = number(1, 10_000_000, integer=True, what="a number of requests")
BATCH_TOKENS = number(0, 1_000_000, integer=True, what="a number of tokens (0: off)")
NOISE_SIGMA = number(0, 2, what="a log-normal σ")
JITTER_GAPS = number(0, 1e6, what="a number of mean gaps")
HOLDOUT = number(0, 0.95, what="a share of the points")
COUNT = number(1, 10_000_000, integer=True, what="a whole number")
REUSE_WINDOW = number(0, 8.64e5, low_open=True, what="seconds (at most ten days)")


def scheduler(text: str) -> str:
    """A Dask scheduler's address: [PROTOCOL://]HOST:PORT."""
    if not re.fullmatch(r"([a-z]+://)?[^\s:/]+:\d{1,5}", text.strip()):
        raise argparse.ArgumentTypeError(f"expected a Dask scheduler address such as tcp://10.0.0.5:8786, "
                                         f"got {shorten(text)!r}")
    return text.strip()


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (no usage block): 'fleetplan: argument --x: …'."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


# ---------------------------------------------------------------------------- each command's flags


def json_flag(p) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def plan_dir(p) -> None:
    p.add_argument("plan_dir", help="a plan folder written by fleetplan plan")


def seed_flag(p) -> None:
    p.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")


def curves(c) -> None:
    c.add_argument("--model", required=True)
    c.add_argument("--gpu", required=True)
    c.add_argument("--isl", type=TOKENS, default=2000, help="prompt tokens (default 2000)")
    c.add_argument("--osl", type=TOKENS, default=500, help="output tokens (default 500)")
    c.add_argument("--itl-ms", type=MILLISECONDS, default=50.0, help="p99 inter-token objective (default 50)")
    c.add_argument("--ttft-ms", type=MILLISECONDS, help="p99 TTFT objective, to show the headroom after prefill")
    c.add_argument("--price-usd-per-gpu-hour", type=PRICE, help="default: the scenario's on-demand price")
    precision_flags(c, default="bf16")
    c.add_argument("--scenario", help="take catalogue and serving settings from this scenario (default: reference)")
    c.add_argument("--plot", help="PNG of tokens/s and step time vs batch, knee marked")
    calibration_flag(c)
    json_flag(c)


def validate(v) -> None:
    v.add_argument("scenario")


def precision_flags(p, default: str | None) -> None:
    """--dtype and --kv-dtype: the formats of `optimizer.base.precision`."""
    shown = f"default {default}" if default else "default: the precisions the workload accepts"
    p.add_argument("--dtype", choices=WEIGHT_FORMATS, default=default,
                   help=f"weight precision ({shown}); 4-bit formats run at the FP4 rate where the part has FP4 tensor "
                        "cores, else weight-only (dequantised to bf16)")
    p.add_argument("--kv-dtype", choices=KV_FORMATS,
                   help="KV precision (default: as the weights for bf16 and fp8, fp8 for 4-bit weights)")


def budget(b) -> None:
    for name in ("metro", "site", "workload"):
        b.add_argument(f"--{name}", required=True)
    b.add_argument("--gpu", help="accelerator for prefill and decode (default: the best the site offers)")
    precision_flags(b, default=None)
    b.add_argument("--scenario")
    calibration_flag(b)
    json_flag(b)


def network(n) -> None:
    n.add_argument("scenario", nargs="?")
    n.add_argument("--rtt-csv", help="write from,to,rtt_ms for every metro and site")
    n.add_argument("--plot", help="PNG map of metros, sites and links")
    n.add_argument("--graphml", help="export the graph as GraphML")
    n.add_argument("--edges-csv", help="export the graph as from,to,one_way_ms")


def effort_flag(parser, text: str) -> None:
    parser.add_argument("--effort", choices=["first", "quick", "thorough"], help=text)


def plan(pl) -> None:
    pl.add_argument("scenario", nargs="?")
    pl.add_argument("--out", default="plan", help="plan folder to write (default ./plan)")
    pl.add_argument("--time-limit", type=field_value(Policy, "time_limit_s"),
                    help="wall-clock safety cap on the whole solve, in seconds (default: the effort's); a plan it stops "
                         "says so, as it may differ on another machine")
    pl.add_argument("--mip-gap", type=field_value(Policy, "mip_gap"), help="target relative gap (default: the scenario's policy)")
    effort_flag(pl, "the solve's work, counted so that the plan is the same on any machine: first: the first whole "
                    "plan, improved by moves; quick (default): more moves and, where it fits, the exact model; "
                    "thorough: more of both and slice programs")
    pl.add_argument("--workers", type=WORKERS, help="local processes for the slice programs (default: the cores, at most 8)")
    pl.add_argument("--scheduler", type=scheduler, help="address of a running Dask scheduler: slice programs run there")
    pl.add_argument("--threads", type=field_value(Policy, "threads"))
    pl.add_argument("--backend", choices=["highs", "pyomo"], default="highs",
                    help="hand the program to HiGHS directly (default) or through Pyomo's persistent interface")
    pl.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario field by dotted path")
    mode = pl.add_mutually_exclusive_group()
    mode.add_argument("--exact", dest="exact", action="store_const", const=True,
                      help="integer replicas throughout (small cases and checks; default for small scenarios)")
    mode.add_argument("--master", dest="exact", action="store_const", const=False,
                      help="continuous master + whole-plan repair (default for large scenarios)")
    pl.add_argument("--allow-unserved", action="store_true", help="write the plan even if some demand is unserved")
    pl.add_argument("--fleet-from-plan", metavar="DIR",
                    help="start from the fleet a plan folder signed (its contracts from its first day, or a year before "
                         "this scenario's horizon.start) and the fleet it started from; or from a fleet folder of "
                         "import-deployment: its GPUs as nodes reserved for the plan's first year (assumed: "
                         "manifests do not say the contract)")
    pl.add_argument("--from-plan", metavar="DIR",
                    help="alone: plan again exactly what a plan folder records; with --max-changes, SCENARIO or --set: "
                         "re-plan (that scenario, else the folder's own with the --set changes) starting from the "
                         "folder's fleet, keeping the scenario's churn limits and reporting the node changes")
    pl.add_argument("--max-changes", metavar="N", type=field_value(Churn, "max_changes"),
                    help="with --from-plan: change the fleet by at most N nodes — Σ over (site, accelerator) of "
                         "|committed nodes − the old plan's| + on-demand peak nodes beyond the old plan's "
                         "(same as --set churn.max_changes=N); 0 keeps the old plan's nodes")
    pl.add_argument("--no-report", action="store_true", help="do not write report.html")
    pl.add_argument("--robust", action="store_true", help="plan with the scenario's robust margins; report the price of robustness")
    calibration_flag(pl)
    json_flag(pl)
    pl.add_argument("--quiet", action="store_true", help="no progress lines")


def sweep(sw) -> None:
    sw.add_argument("scenario", nargs="?")
    sw.add_argument("--vary", action="append", metavar="KEY=V1,V2,…",
                    help="dotted scenario path and values: a list, start:stop:step, or multipliers ×0.5,×1,×1.5")
    how = sw.add_mutually_exclusive_group()
    how.add_argument("--grid", action="store_true", help="every combination (default)")
    how.add_argument("--one-at-a-time", action="store_true", help="one key at a time, with a tornado chart")
    sw.add_argument("--executor", choices=["local", "dask"], default="local")
    sw.add_argument("--workers", type=WORKERS, default=2)
    sw.add_argument("--scheduler", type=scheduler, help="address of a running Dask scheduler (default: a local cluster)")
    sw.add_argument("--out", default="sweep", help="output folder (default ./sweep); re-running skips finished runs")
    sw.add_argument("--reuse", action="store_true",
                    help="refresh a built model between runs of the same structure (faster; equal within the gap)")
    sw.add_argument("--time-limit", type=field_value(Policy, "time_limit_s"))
    sw.add_argument("--mip-gap", type=field_value(Policy, "mip_gap"))
    effort_flag(sw, "first: each run's first whole plan, improved by moves (default for sweeps); quick or thorough: "
                    "each run refines it further (see fleetplan plan --help)")
    sw.add_argument("--quiet", action="store_true")


def compare(cp) -> None:
    cp.add_argument("plans", nargs="+", help="plan folders; or plan folders and fleet folders of import-deployment "
                                             "(then GPUs by site and accelerator and replicas by pool)")
    cp.add_argument("--out", help="folder for compare.csv, routing_changes.csv, compare.png and compare.html")


def verify(vf) -> None:
    plan_dir(vf)
    vf.add_argument("--slices", default="peak",
                    help="peak (the busiest hour of each period), all, or PERIOD/DAYTYPE/HOUR,… (default peak)")
    vf.add_argument("--requests", type=REQUESTS, default=20000, help="simulated requests per (site, workload, slice)")
    vf.add_argument("--spot-loss", metavar="SITE",
                    help="replay a preemption: the site's spot nodes taken at the peak (after their notice, before "
                         "replacements finish their cold start), the spare replicas the plan holds carrying their "
                         "traffic; writes verify_spot_loss.csv")
    seed_flag(vf)
    vf.add_argument("--prefill-batch-tokens", type=BATCH_TOKENS, default=None, metavar="N",
                    help="what-if: every prefill server batches waiting prompts up to N new tokens, 0 one prompt "
                         "at a time (default: each pool as the plan sized it)")
    json_flag(vf)
    vf.add_argument("--trace", nargs="+", metavar="[WORKLOAD=]FILE",
                    help="also replay request logs (CSV, Parquet, JSON lines) instead of Poisson arrivals and "
                         "lognormal lengths, and put both runs side by side; WORKLOAD= names a log's workload when it "
                         "has no workload column")
    vf.add_argument("--trace-scale", choices=["planned", "recorded"], default="planned",
                    help="replay each log resampled to the planned rates (default) or at its recorded rate")
    vf.add_argument("--trace-jitter", type=JITTER_GAPS, default=10.0, metavar="GAPS",
                    help="a log request replayed as several spreads its copies over GAPS mean gaps of the log "
                         "(default 10); larger values smooth bursts shorter than that instead of scaling them")
    log_format(vf)
    vf.add_argument("--lengths", metavar="FILE",
                    help="draw the Poisson run's prompt and output lengths from a log's empirical distributions (the "
                         "lengths.csv of `fleetplan demand`) instead of lognormals")


def stress(st) -> None:
    plan_dir(st)
    st.add_argument("--perturb", action="append", metavar="KEY=VALUE",
                    help="scenario path and value or ×factor; * stands for every row (workloads.*.isl_mean_tokens=×1.3)")
    st.add_argument("--demand", type=factor, default=1.0, metavar="×F", help="scale every routed flow")
    st.add_argument("--rtt", type=factor, default=1.0, metavar="×F", help="scale every round trip")
    st.add_argument("--lose-site", metavar="ID", help="the site goes dark; its traffic moves to the nearest pools that can take it")
    st.add_argument("--within-band", nargs="?", const="p90", choices=["p90", "draw"], metavar="p90|draw",
                    help="efficiencies within the calibration's residual band: at each accelerator's p90 (default), "
                         "or drawn from it with --seed")
    st.add_argument("--spot-availability", type=field_value(Spot, "availability_factor"), metavar="F",
                    help="spot zones have capacity F × as often (0.5: half): the plan's spot node-hours rented on demand "
                         "the rest, zones out together, on-demand room for the fallback")
    st.add_argument("--verify", action="store_true", help="also simulate the perturbed plan")
    st.add_argument("--requests", type=REQUESTS, default=2000, help="simulated requests per group with --verify")
    seed_flag(st)
    json_flag(st)


def operate(op) -> None:
    plan_dir(op)
    op.add_argument("--noise-sigma", type=NOISE_SIGMA, default=0.0, metavar="σ",
                    help="day-to-day demand variation per workload, log-normal σ (0: none)")
    seed_flag(op)
    json_flag(op)



def log_format(p) -> None:
    p.add_argument("--columns", metavar="FIELD=COLUMN,…",
                   help="the logs' columns, e.g. prompt=ContextTokens,output=GeneratedTokens,timestamp=TIME:%%d/%%m/%%Y "
                        "%%H:%%M; fields: timestamp, prompt, output, metro, workload, cached, prefix_id, session_id, "
                        "prefix_tokens (default: usual names)")
    p.add_argument("--tz", help="time zone of naive timestamps in the logs, e.g. Europe/Paris (default UTC)")


def demand(dm) -> None:
    dm.add_argument("scenario", nargs="?",
                    help="scenario whose metros, workloads, periods and diurnal profiles are used (default: the "
                         "reference); its traces section names the logs when --from-trace is not given")
    dm.add_argument("--from-trace", nargs="+", metavar="[WORKLOAD=]FILE",
                    help="request logs: CSV, Parquet or JSON lines, one row per request (optionally compressed)")
    dm.add_argument("--out", help="demand folder to write (demand.csv, workloads.csv, scenario.yaml, report.html, …)")
    json_flag(dm)
    dm.add_argument("--metro", help="the metro of logs without a metro column")
    dm.add_argument("--workload", help="the workload of logs without a workload column")
    log_format(dm)
    dm.add_argument("--fill", choices=["profile", "none"], default="profile",
                    help="hours of the day the log does not cover: from the workload's diurnal profile anchored to "
                         "the covered hours (default), or left at zero")
    dm.add_argument("--reuse-window", type=REUSE_WINDOW, default=3600.0, metavar="S",
                    help="logs with prefix or session ids: a prefix used again within S seconds is a reuse, and only "
                         "requests after the log's first S seconds are counted (default 3600)")


def mapping(what: str):
    """An argparse type for KEY=VALUE (``what`` names the two sides in the error)."""
    def check(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"expected {what}, got {shorten(text)!r}")
        return key.strip(), value.strip()

    check.__name__ = what
    return check


def export(ex) -> None:
    plan_dir(ex)
    ex.add_argument("--to", required=True, metavar="FORMAT",
                    help="dynamo (NVIDIA Dynamo), llm-d (KServe LLMInferenceService), vllm-stack (vLLM production-stack "
                         "Helm values) or skyserve")
    ex.add_argument("--out", required=True, help="export folder: a folder per site, a manifest per deployment")
    ex.add_argument("--slice", metavar="PERIOD/DAY_TYPE/HOUR",
                    help="the slice whose replicas the manifests carry (default: the plan's busiest)")
    ex.add_argument("--from-plan", metavar="OLD_DIR", help="also write the rollout from this older plan folder")
    ex.add_argument("--model-repo", action="append", type=mapping("MODEL=ORG/NAME"), default=[], metavar="MODEL=ORG/NAME",
                    help="the model repository of a model the shipped catalogue does not map")
    ex.add_argument("--infra", action="append", type=mapping("SITE=CLOUD/REGION"), default=[], metavar="SITE=CLOUD/REGION",
                    help="SkyServe: where a site's replicas run (resources.infra)")
    ex.add_argument("--strict", action="store_true", help="llm-d: refuse, not warn, where KV transfer needs other TPs")


def import_deployment(im) -> None:
    im.add_argument("manifests", nargs="+", metavar="MANIFEST", help="Dynamo, llm-d, production-stack or SkyServe YAML")
    im.add_argument("--out", required=True, help="fleet folder to write (pools.csv, gpus.csv, fleet.json)")
    im.add_argument("--against", metavar="PLAN_DIR", help="also write against.csv: the plan's replicas beside the running")
    im.add_argument("--slice", metavar="PERIOD/DAY_TYPE/HOUR",
                    help="the plan's slice to hold them against (default: the manifests' fleetplan.io/slice, else "
                         "the plan's busiest)")


def nothing(p) -> None:
    """A command without arguments."""


def calibration_flag(p) -> None:
    p.add_argument("--calibration", metavar="FILE", help="calibration file (fleetplan calibrate) to use")


def calibrate(ca) -> None:
    ca.add_argument("tables", nargs="+", metavar="TABLE",
                    help="benchmark CSV, vLLM/SGLang serving-benchmark JSON, or mlperf_log_summary.txt")
    ca.add_argument("--out", required=True, help="calibration file to write (.yaml/.yml: YAML, else JSON)")
    ca.add_argument("--holdout", type=HOLDOUT, default=0.2, help="share of each kind's points held out (default 0.2)")
    ca.add_argument("--seed", type=SEED, default=0, help="seed of the held-out split")
    ca.add_argument("--plot", metavar="PNG", help="predicted-vs-measured plot")
    json_flag(ca)
    for flag in ("model", "accelerator", "engine", "version", "weight-dtype"):
        ca.add_argument(f"--{flag}", help=f"{flag} of JSON/MLPerf results that do not say it")
    for flag in ("tp", "gpus", "prompt-tokens", "output-tokens"):
        ca.add_argument(f"--{flag}", type=COUNT, help=f"{flag} of JSON/MLPerf results that do not say it")
