"""The plan and the bound over the solve's seconds, one panel per step of the ladder.

    python benchmarks/plan_scale.py --steps reference,100x30 --history hist/
    python benchmarks/gap_over_time.py hist/ --out benchmarks/gap_over_time.png

Reads the ``STEP.csv`` files `plan_scale.py --history` writes (seconds, plan_usd, bound_usd,
event) and draws the best whole plan and the best bound as steps over time, with the gap
(plan − bound) / plan printed at the end of each panel.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("history", type=Path)
    p.add_argument("--out", type=Path, default=Path("gap_over_time.png"))
    args = p.parse_args()
    files = sorted(args.history.glob("*.csv")) if args.history.is_dir() else []
    histories = {f.stem: pd.read_csv(f) for f in files}
    histories = {k: h for k, h in histories.items() if {"seconds", "plan_usd", "bound_usd"} <= set(h.columns)}
    if not histories:
        p.error(f"{args.history}: expected a folder of STEP.csv files written by plan_scale.py --history")
    if args.out.is_dir() or args.out.suffix.lower() != ".png":
        p.error(f"--out {args.out}: expected a .png file to write")
    fig, axes = plt.subplots(1, len(histories), figsize=(5 * len(histories), 3.6), squeeze=False)
    for ax, (step, h) in zip(axes[0], histories.items()):
        ax.step(h["seconds"], h["plan_usd"] / 1e6, where="post", label="best whole plan")
        ax.step(h["seconds"], h["bound_usd"] / 1e6, where="post", label="best bound")
        last = h.dropna(subset=["plan_usd", "bound_usd"]).iloc[-1]
        gap = max(0.0, (last["plan_usd"] - last["bound_usd"]) / last["plan_usd"])
        ax.set_title(f"{step}: gap {gap:.1%} at {last['seconds']:.0f} s")
        ax.set_xlabel("seconds into the solve")
        ax.set_ylabel("US$ million per year")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
