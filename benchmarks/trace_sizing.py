"""How Poisson-based sizing misjudges real traffic: the azure-trace scenario planned at a
ladder of intra-hour peak factors, each plan verified with Poisson arrivals and with the
request logs replayed (`fleetplan verify --trace`).

    python benchmarks/trace_sizing.py [--scales 1,20] [--chat 1.2,1.573,2,2.5]
                                      [--code 1.2,4.689,8,12,16] [--jitter-gaps 10]

``demand.scale`` multiplies the logs' traffic (scale 1: the logs as recorded, a fleet of a
few nodes whose whole replicas leave slack; 20: pools of several replicas). The k-th chat
factor and the k-th code factor are planned together (their pools are separate). Prints one
Markdown table: scale, factors, the plan's cost and GPUs, and per workload the TTFT
attainment (over all counted requests of the peak slice) with Poisson arrivals and with the
replayed log — the required attainment is 0.99.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from itertools import zip_longest
from pathlib import Path

from optimizer.plan import make_plan, read_plan, scenario_of, write_plan
from optimizer.scenario import DATA_DIR
from optimizer.traces.replay import side_by_side, trace_arrivals
from optimizer.traces.spec import TraceSpec
from optimizer.verify import verify_plan

SCENARIO = DATA_DIR / "scenarios" / "azure-trace.yaml"
LOGS = {"chat": DATA_DIR / "traces" / "AzureLLMInferenceTrace_conv.csv.gz",
        "code-completion": DATA_DIR / "traces" / "AzureLLMInferenceTrace_code.csv.gz"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="1,20")
    ap.add_argument("--chat", default="1.2,1.573,2,2.5")
    ap.add_argument("--code", default="1.2,4.689,8,12,16")
    ap.add_argument("--jitter-gaps", type=float, default=10.0)
    ap.add_argument("--requests", type=int, default=20000, help="Poisson requests per group")
    args = ap.parse_args(argv)
    specs = [TraceSpec(path, workload=k) for k, path in LOGS.items()]
    ladder = list(zip_longest(args.chat.split(","), args.code.split(",")))
    lines = ["| scale | chat factor | code factor | cost $/year | GPUs | chat TTFT attainment Poisson / trace | "
             "code TTFT attainment Poisson / trace |", "|---:|---:|---:|---:|---:|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for scale in args.scales.split(","):
            last = {}
            for chat, code in ladder:
                last["chat"], last["code"] = chat or last["chat"], code or last["code"]
                sets = [f"demand.scale={scale}", f"workloads.chat.peak_to_mean_intra_hour={last['chat']}",
                        f"workloads.code-completion.peak_to_mean_intra_hour={last['code']}"]
                plan = make_plan(SCENARIO, sets)
                folder = write_plan(plan, Path(tmp) / "plan", report=False)
                s = scenario_of(read_plan(folder), folder)
                source = trace_arrivals(specs, s.workloads, jitter_gaps=args.jitter_gaps)
                runs = [verify_plan(folder, requests=args.requests),
                        verify_plan(folder, requests=args.requests, arrivals=source)]
                table = side_by_side(*runs).set_index("workload")
                cells = [f"{table.loc[k, 'ttft_attainment_poisson']:.4f} / {table.loc[k, 'ttft_attainment_trace']:.4f}"
                         for k in ("chat", "code-completion")]
                gpus = sum(plan.summary["gpus_by_type_peak"].values())
                lines.append(f"| {scale} | {last['chat']} | {last['code']} | {plan.summary['total_cost_usd']:,.0f} | "
                             f"{gpus} | {cells[0]} | {cells[1]} |")
                print(lines[-1], file=sys.stderr)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
