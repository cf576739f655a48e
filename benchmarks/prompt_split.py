"""Pools by prompt length: what each candidate threshold costs and what the plan keeps.

Per scenario (with candidate thresholds given by --set where the shipped file has none):
the master LP with each option alone (the parent whole, or split at one threshold), the
program's weights over all options at once, the whole plans made without a split and with
the program's choice (the cheaper is kept), and verify's attainment over both parts of the
kept plan. Prints one table; run from the repository root:

    python benchmarks/prompt_split.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from optimizer.commands.pipeline import make_plan
from optimizer.commands.verify import verify_plan
from optimizer.folder.write import write_plan
from optimizer.instance.prompt_split import with_split
from optimizer.scenario import load_scenario
from optimizer.solve.prompt_split import weigh_options

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "long-prompts": (ROOT / "data/scenarios/long-prompts.yaml", []),
    "azure-trace": (ROOT / "data/scenarios/azure-trace.yaml",
                    ["workloads.chat.prompt_split_candidates_tokens=[1024,2048]",
                     "workloads.code-completion.prompt_split_candidates_tokens=[2048,4096]"]),
    "azure-trace ×10": (ROOT / "data/scenarios/azure-trace.yaml",
                        ["workloads.chat.prompt_split_candidates_tokens=[1024,2048]",
                         "workloads.code-completion.prompt_split_candidates_tokens=[2048,4096]", "demand.scale=10"]),
    "one-site-70b": (ROOT / "data/scenarios/one-site-70b.yaml",
                     ["workloads.chat.prompt_split_candidates_tokens=[1024,4096]"]),
}


def case(name: str, path: Path, sets: list[str]) -> list[str]:
    s, raw = load_scenario(path, sets)
    program, offered = weigh_options(s, raw.path.parent, 600.0, 1)
    lines = []
    for parent, options in offered.items():
        for o, z in zip(options, program.weights[parent]):
            alone = weigh_options(with_split(s, {parent: o.threshold_tokens}), raw.path.parent, 600.0, 1)[0]
            alone = alone.objective_usd
            label = "whole" if o.threshold_tokens is None else f"split at {o.threshold_tokens:,.0f}"
            lines.append(f"| {name} | {parent} | {label} | ${alone:,.0f} | {max(z, 0.0) + 0.0:.2f} |")
    t = time.perf_counter()
    plan = make_plan(path, sets)
    seconds = time.perf_counter() - t
    block = plan.summary["prompt_split"]
    with tempfile.TemporaryDirectory() as d:
        folder = write_plan(plan, Path(d) / "plan")
        verified = verify_plan(folder, requests=20_000, seed=0)
    kept = "; ".join(f"{k} " + ("whole" if b["threshold_tokens"] is None else f"at {b['threshold_tokens']:,.0f}")
                     for k, b in block["workloads"].items())
    rollup = verified.summary.get("prompt_split") or {}
    attained = "; ".join(f"{k} {b['ttft_attainment']:.4f} (≥ {b['required']:.2f})" for k, b in rollup.items()) or "—"
    split = "—" if block["split_plan_usd"] is None else f"${block['split_plan_usd']:,.0f}"
    met = "met" if verified.summary["all_objectives_met"] else "MISSED"
    lines.append(f"| {name} | plans | whole ${block['whole_plan_usd']:,.0f}, with the program's choice {split}; "
                 f"kept: {kept} | {seconds:.0f} s | verify: {met}, TTFT over both parts {attained} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated names among " + ", ".join(CASES))
    args = ap.parse_args()
    unknown = [n for n in args.cases.split(",") if n not in CASES]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r}; expected names among {', '.join(CASES)}")
    print("| scenario | workload | option | master LP, the scenario with this option alone, $/year "
          "| program's weight |")
    print("|---|---|---|---|---|")
    for name in args.cases.split(","):
        for line in case(name, *CASES[name]):
            print(line, flush=True)


if __name__ == "__main__":
    main()
