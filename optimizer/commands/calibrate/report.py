"""`fleetplan calibrate`: tables in → fit → calibration file, residual table and plot out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.outputs import atomic_files, save_png
from optimizer.commands.calibrate.fit import CalibrationResult, calibrate, residual_table
from optimizer.commands.calibrate.model import check_ids, shipped_catalogue
from optimizer.scenario.calibration.files import write_calibration
from optimizer.scenario.calibration.params import CalibrationPoint
from optimizer.scenario.calibration.tables import read_tables, table_digest


def _stats(scored: pd.DataFrame, by: list[str]) -> list[dict]:
    table = residual_table(scored, by)
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in table.to_dict("records")]


def per_kind(result: CalibrationResult, split: str) -> dict:
    """{kind: {points, median_abs_error, p90_abs_error}} over every group of a split."""
    return {row["kind"]: {k: row[k] for k in ("points", "median_abs_error", "p90_abs_error")}
            for row in _stats(result.rows(split), ["kind"])}


def run(paths: list[str], out: Path, holdout: float = 0.2, seed: int = 0, context: dict | None = None,
        plot: Path | None = None) -> dict:
    """Read, fit, write the calibration file (and plot) — both at once, or neither
    (`optimizer.base.outputs.atomic_files`); return what `--json` prints. ``out`` and ``plot``
    are targets already checked (`optimizer.base.outputs.file_target`)."""
    table = read_tables(paths, context)
    check_ids(table, shipped_catalogue())
    table["table"] = [Path(f).name for f in table["file"]]
    result = calibrate(table, holdout=holdout, seed=seed)
    entries = [g.entry(source="fleetplan calibrate: " + ", ".join(sorted(set(g.train["table"])))) for g in result.groups]
    residuals = {split: _stats(result.rows(split), ["table", "kind"]) for split in ("train", "holdout")}
    with atomic_files([out, plot]) as (calibration_tmp, plot_tmp):
        write_calibration(calibration_tmp, entries, table_digest(paths),
                          {"fit": residuals["train"], "holdout": residuals["holdout"]}, points(result))
        if plot_tmp is not None:
            write_plot(result, plot_tmp)
    return {
        "calibration_file": str(out),
        "parameters": [{"accelerator": e.accelerator, "engine": e.engine, "dtype": e.dtype, **e.values(),
                        "fitted": e.fitted, "kept": e.kept, "provenance": e.provenance}
                       for e in entries],
        "warnings": [w for g in result.groups for w in g.warnings],
        "fit": per_kind(result, "train"),
        "holdout": per_kind(result, "holdout"),
        "residuals": residuals,
    }


def points(result: CalibrationResult) -> list[CalibrationPoint]:
    """Every scored point, fitted and held out, as the calibration file records it."""
    out = []
    for split, label in (("train", "fit"), ("holdout", "held-out")):
        rows = result.rows(split)
        for r in rows.to_dict("records") if len(rows) else []:
            out.append(CalibrationPoint(table=r["table"], kind=r["kind"], split=label, accelerator=r["accelerator"],
                                        engine=str(r["engine"]), dtype=str(r["weight_dtype"]), model=str(r["model"]),
                                        tp=int(r["tp"]), measured_ms=float(r["measured_ms"]),
                                        predicted_ms=float(r["predicted_ms"])))
    return out


def text(summary: dict) -> str:
    """The parameters and the residual table, for a terminal."""
    lines = [f"calibration written to {summary['calibration_file']}", "", "fitted parameters:"]
    for p in summary["parameters"]:
        values = ", ".join(f"{name} {p[name] if abs(p[name]) >= 1e-6 else 0:.4g}" for name in p["fitted"])
        lines.append(f"  {p['accelerator']}/{p['engine']}/{p['dtype']}: {values or 'none'}")
        for name, why in p["kept"].items():
            lines.append(f"    kept {name} {p[name] if abs(p[name]) >= 1e-6 else 0:.4g}: {why}")
        lines += [f"    {name} from {where}" for name, where in p["provenance"].items()]
    lines += ["", "residuals |predicted / measured − 1| per table and kind:",
              f"  {'split':8s} {'table':32s} {'kind':8s} {'points':>6s} {'median':>7s} {'p90':>7s} {'median pred/meas':>17s}"]
    for split, label in (("train", "fit"), ("holdout", "held-out")):
        for row in summary["residuals"][split]:
            lines.append(f"  {label:8s} {row['table'][:32]:32s} {row['kind']:8s} {row['points']:6d} "
                         f"{100 * row['median_abs_error']:6.1f}% {100 * row['p90_abs_error']:6.1f}% "
                         f"{row['median_ratio']:17.3f}")
    for split, label in (("fit", "fit"), ("holdout", "held-out")):
        for kind, s in summary[split].items():
            lines.append(f"  all {label} {kind}: median {100 * s['median_abs_error']:.1f} %, p90 "
                         f"{100 * s['p90_abs_error']:.1f} % over {s['points']} points")
    return "\n".join(lines)


def write_plot(result: CalibrationResult, path: Path) -> None:
    """Predicted vs measured latency, log–log, one marker per kind, fit and held-out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    markers = {"prefill": "o", "decode": "s", "e2e": "^"}
    for split, face in (("train", None), ("holdout", "none")):
        rows = result.rows(split)
        for kind, part in (rows.groupby("kind") if len(rows) else []):
            ax.scatter(part["measured_ms"], part["predicted_ms"], s=14, marker=markers.get(kind, "o"),
                       facecolors=face, label=f"{kind} ({'fit' if split == 'train' else 'held out'})", alpha=0.7)
    every = result.rows("train")
    lo, hi = np.nanmin(every["measured_ms"]) / 1.5, np.nanmax(every["measured_ms"]) * 1.5
    line = np.array([lo, hi])
    ax.plot(line, line, "k-", lw=0.8)
    ax.plot(line, line * 1.1, "k:", lw=0.6)
    ax.plot(line, line / 1.1, "k:", lw=0.6, label="±10 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured latency (ms)")
    ax.set_ylabel("predicted latency (ms)")
    ax.set_title("fleetplan calibration: predicted vs measured")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
