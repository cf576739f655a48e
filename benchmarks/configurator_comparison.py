"""One-site goodput per GPU: fleetplan's plan beside NVIDIA AIConfigurator's best configuration.

    python benchmarks/configurator_comparison.py                      # recorded figures
    python benchmarks/configurator_comparison.py --run-aiconfigurator # rerun it (optional extra)

For each case of ``data/calibration/aiconfigurator_best.csv`` (Llama-3.1-70B bf16 with
TensorRT-LLM; 1,000/1,000 tokens with TTFT 300 ms and 4,000/500 with TTFT 1,000 ms, ITL
50 ms; H100 and H200) it plans one site serving one workload at a fixed request rate
(`benchmarks/configurator_goodput.py`) and prints its goodput per GPU beside the configurator's
best configuration on 64 GPUs, with the ratio. "before" plans with the pre-calibration
global parameters (a calibration file holding only the neutral catch-all row) through
today's curves; "after" with the shipped defaults. `--run-aiconfigurator` reruns the
configurator (``pip install 'fleetplan[aiconfigurator]'``, about a minute per case) and
prints its fresh figures beside the recorded ones. tests/test_configurator.py holds
fleetplan's side to ±15 % of the recorded figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from configurator_goodput import case_of, plan_goodput, recorded  # noqa: E402

from optimizer.scenario.calibration.files import write_calibration  # noqa: E402
from optimizer.scenario.calibration.params import ParameterSet  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-aiconfigurator", action="store_true", help="rerun AIConfigurator for every case")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        neutral = Path(folder) / "neutral.yaml"
        write_calibration(neutral, [ParameterSet(source="pre-calibration global values")], [], {})
        print("| case | AIConfigurator best (64 GPUs) | tok/s/GPU | fleetplan before: tok/s/GPU (ratio) "
              "| fleetplan after: pools | GPUs | tok/s/GPU | ratio |")
        print("|---|---|---:|---:|---|---:|---:|---:|")
        for row in recorded():
            case = case_of(row)
            reference = float(row["tokens_per_s_per_gpu"])
            before = plan_goodput(case, [f"calibration={neutral}"])
            after = plan_goodput(case)
            print(f"| {case.isl}/{case.osl}, TTFT {case.ttft_ms:g} ms, {case.accelerator} "
                  f"| {row['best_mode']}: {row['best_config']} | {reference:,.0f} "
                  f"| {before['tokens_per_s_per_gpu']:,.0f} ({before['tokens_per_s_per_gpu'] / reference:.2f}) "
                  f"| {after['mode']}: {after['pools']} | {after['gpus']:g} | {after['tokens_per_s_per_gpu']:,.0f} "
                  f"| {after['tokens_per_s_per_gpu'] / reference:.2f} |")
            if args.run_aiconfigurator:
                from optimizer.commands.calibrate.aiconfigurator import best_configuration

                fresh = best_configuration(case)
                print(f"|   rerun | {fresh['best_mode']}: {fresh['config']} ({fresh['version']}) "
                      f"| {fresh['tokens_per_s_per_gpu']:,.0f} | | | | | "
                      f"{after['tokens_per_s_per_gpu'] / fresh['tokens_per_s_per_gpu']:.2f} |")
    print(f"\nfleetplan: one metro and one site, no network, tokenisation, safety or admission time, fixed lengths, "
          f"requests/s as in the table; objectives read as p99s (ITL × {1.15:g} tail factor).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
