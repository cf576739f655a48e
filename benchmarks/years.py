"""Plans over several years: the 3-year reference at each effort, and the error of planning a
year at fewer representative hours.

    python benchmarks/years.py [--efforts first,quick] [--hours-check]

Per effort, ``fleetplan plan data/scenarios/reference-3y.yaml --effort E`` as a new process:
wall seconds to the first year's first whole plan (its first "bound solve:" line, after the
years' linear programs) and to the end, the present cost, the best bound and the gap, the
years together against year by year, and whether two runs wrote the same tables. With
``--hours-check``: the one-year reference planned at 8 of the 24 hours (every third, as each
year of reference-3y is) against all 24 — and the 8-hour plan's commitment judged on all 24
hours (planned again with it as the fleet, nothing new signed, on-demand on top): what planning
at fewer slices costs a year in truth.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCENARIO = Path(__file__).resolve().parent.parent / "data" / "scenarios" / "reference-3y.yaml"
EIGHT_HOURS = "horizon.hours=[0,3,6,9,12,15,18,21]"


def _fleetplan(*args: str) -> tuple[float, float | None, str]:
    """Run one command; (wall s, s to the first whole plan, stderr)."""
    start = time.perf_counter()
    first = None
    lines = []
    with subprocess.Popen([sys.executable, "-m", "optimizer.cli", *args], stderr=subprocess.PIPE,
                          stdout=subprocess.DEVNULL, text=True) as proc:
        for line in proc.stderr:
            lines.append(line)
            if first is None and line.startswith("bound solve:"):
                first = time.perf_counter() - start
    if proc.returncode not in (0, 4, 7):
        raise SystemExit(f"fleetplan {' '.join(args)} exited {proc.returncode}:\n{''.join(lines[-5:])}")
    return time.perf_counter() - start, first, "".join(lines)


def _digest(out: Path) -> str:
    files = sorted(p for p in out.rglob("*.csv") if p.name in ("procurement.csv", "pools.csv", "routing.csv",
                                                                 "schedule.csv", "years.csv"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def years_rows(efforts: list[str], tmp: Path) -> None:
    print("| effort | first whole plan s | command s | present cost | best bound | gap | years together vs year by "
          "year | same tables twice |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for effort in efforts:
        runs = []
        for i in range(2):
            out = tmp / f"y-{effort}-{i}"
            wall, first, _ = _fleetplan("plan", str(SCENARIO), "--effort", effort, "--out", str(out), "--no-report")
            runs.append((wall, first, json.loads((out / "horizon.json").read_text()), _digest(out)))
        wall, first, sm, _ = runs[0]
        print(f"| {effort} | {first or float('nan'):.1f} | {wall:.0f} | ${sm['present_cost_usd']:,.0f} | "
              f"${sm['bound_present_cost_usd']:,.0f} | {100 * sm['gap']:.2f} % | ${sm['together_present_cost_usd']:,.0f} "
              f"vs ${sm['myopic_present_cost_usd']:,.0f} ({100 * sm['together_saves_fraction']:.1f} % saved) | "
              f"{'yes' if runs[0][3] == runs[1][3] else 'NO'} |")


def _as_fleet(out: Path) -> tuple[list[dict], float]:
    """A plan folder's commitment as fleet rows covering 2027 (reserved, rent sunk), and what
    the plan pays for it a year."""
    import pandas as pd  # noqa: PLC0415 — only this check reads tables

    proc = pd.read_csv(out / "procurement.csv")
    proc = proc[proc["site"] != "*"]
    rows = [{"site": r.site, "gpu": r.gpu, "nodes": int(r.reserved_nodes), "contract": "reserved",
             "start": "2027-01-01", "end": "2027-12-31"} for r in proc.itertuples() if r.reserved_nodes]
    paid = float((proc["cost_reserved_usd"] + proc["cost_owned_usd"] + proc["cost_energy_usd"]).sum())
    return rows, paid


def hours_rows(tmp: Path) -> None:
    """The 8-hour plan's commitment judged on all 24 hours: the 24-hour reference planned with
    that commitment as its fleet and nothing new signed (on-demand on top), plus its rent."""
    print("\n| reference, one year | plan $/year | its commitment on 24 hours $/year | against the 24-hour plan |")
    print("|---|---:|---:|---:|")
    full = tmp / "h-24"
    _fleetplan("plan", "--out", str(full), "--no-report", "--quiet")
    base = json.loads((full / "summary.json").read_text())["total_cost_usd"]
    print(f"| 24 hours a day | ${base:,.0f} | ${base:,.0f} | – |")
    eight = tmp / "h-8"
    _fleetplan("plan", "--set", EIGHT_HOURS, "--out", str(eight), "--no-report", "--quiet")
    cost = json.loads((eight / "summary.json").read_text())["total_cost_usd"]
    rows, paid = _as_fleet(eight)
    judged = tmp / "h-8-on-24"
    _fleetplan("plan", "--set", "horizon.start=2027-01-01", "--set", f"fleet.contracts={json.dumps(rows)}",
               "--set", "policy.reserved_terms=[]", "--set", "policy.allow_owned=false", "--out", str(judged),
               "--no-report", "--quiet")
    true = paid + json.loads((judged / "summary.json").read_text())["total_cost_usd"]
    print(f"| 8 hours a day (every third) | ${cost:,.0f} | ${true:,.0f} | {100 * (true / base - 1):+.2f} % |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--efforts", default="first,quick")
    ap.add_argument("--hours-check", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        years_rows(args.efforts.split(","), Path(tmp))
        if args.hours_check:
            hours_rows(Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
