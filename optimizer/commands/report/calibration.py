"""The report's calibration section, for a plan whose scenario names a calibration file
(`fleetplan calibrate`): the file's measured points against what its parameters predict,
the residual table per split, table and kind, and the error band each parameter set
carries (what `plan --robust` and `stress --within-band` use).

Everything comes from the calibration the plan folder's scenario.json records (its points,
its parameter sets' spreads), so the section needs no file beyond the folder. Error of a
point: |predicted / measured − 1|, as `fleetplan calibrate` prints it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.commands.report import formatting as f
from optimizer.commands.report.drawing import Axes, Chart, scatter
from optimizer.commands.report.folder import MissingInput, PlanFolder
from optimizer.commands.report.formatting import TableColumn, esc
from optimizer.commands.report.html import chart_html

TEN_PERCENT = (1.0, 1.1, 1 / 1.1)


def has_calibration(folder: PlanFolder) -> bool:
    """True when the plan's scenario names a calibration file."""
    return folder.scenario.serving.calibration.file is not None


def points_data(folder: PlanFolder) -> pd.DataFrame:
    """One row per measured point of the calibration file: table, kind, split (fit or
    held-out), accelerator, engine, dtype, model, TP, measured and predicted ms, error."""
    cal = folder.scenario.serving.calibration
    if cal.file is None:
        raise MissingInput("the plan uses the shipped defaults, not a calibration file")
    if not cal.points:
        raise MissingInput("the calibration file records no measured points (written before fleetplan calibrate "
                           "recorded them; calibrate again)")
    out = pd.DataFrame([p.model_dump() for p in cal.points])
    out["error"] = (out["predicted_ms"] / out["measured_ms"] - 1.0).abs()
    return out


def residual_data(folder: PlanFolder) -> pd.DataFrame:
    """Per (split, table, kind): points, median and p90 error, median predicted / measured."""
    pts = points_data(folder).assign(ratio=lambda d: d["predicted_ms"] / d["measured_ms"])
    g = pts.groupby(["split", "table", "kind"], sort=False)
    return pd.DataFrame({"points": g.size(), "median_abs_error": g["error"].median(),
                         "p90_abs_error": g["error"].quantile(0.9), "median_ratio": g["ratio"].median()}).reset_index()


def band_data(folder: PlanFolder) -> pd.DataFrame:
    """Per parameter set of the file and kind: its residual spread (the band)."""
    cal = folder.scenario.serving.calibration
    origin = Path(cal.file).name if cal.file else None
    rows = [{"parameter_set": e.key, "kind": kind, "points": sp.points, "median_abs_error": sp.median_abs_error,
             "p90_abs_error": sp.p90_abs_error}
            for e in cal.entries if e.origin == origin for kind, sp in e.spread.items()]
    return pd.DataFrame(rows, columns=["parameter_set", "kind", "points", "median_abs_error", "p90_abs_error"])


def plot(folder: PlanFolder) -> Chart:
    data = points_data(folder)
    data = data.assign(series=data["accelerator"] + " · " + data["kind"], held_out=data["split"] == "held-out",
                       hover=[f"{a} {k}, {m} TP {t} ({s}): measured {f.ms(x)}, predicted {f.ms(y)} ({f.pct(y / x - 1, 1, True)})"
                              for a, k, m, t, s, x, y in zip(data["accelerator"], data["kind"], data["model"], data["tp"],
                                                             data["split"], data["measured_ms"], data["predicted_ms"])])
    static, fig = scatter(data, "measured_ms", "predicted_ms", "series",
                          Axes("Predicted against measured latency (log–log; the lines are equality and ±10 %)",
                               xlabel="measured (ms)", ylabel="predicted (ms)", height_in=5.0),
                          hover="hover", hollow="held_out", ratios=TEN_PERCENT)
    return Chart(data.drop(columns=["series", "held_out", "hover"]), static, fig)


RESIDUAL_COLUMNS = [TableColumn("split", "split"), TableColumn("table", "table"), TableColumn("kind", "kind"),
                    TableColumn("points", "points", f.count, True),
                    TableColumn("median_abs_error", "median error", f.pct, True),
                    TableColumn("p90_abs_error", "p90 error", f.pct, True),
                    TableColumn("median_ratio", "median predicted / measured", lambda x: f"{x:.3f}", True)]
BAND_COLUMNS = [TableColumn("parameter_set", "parameter set"), TableColumn("kind", "kind"),
                TableColumn("points", "points fitted", f.count, True),
                TableColumn("median_abs_error", "median error", f.pct, True),
                TableColumn("p90_abs_error", "p90 error (the band)", f.pct, True)]


def words(folder: PlanFolder) -> str:
    cal = folder.scenario.serving.calibration
    pts = points_data(folder)
    fit, held = pts[pts["split"] == "fit"], pts[pts["split"] == "held-out"]
    text = (f"The plan's serving curves use the calibration file {Path(cal.file).name} (sha256 "
            f"{(cal.sha256 or '')[:12]}…), fitted to {', '.join(dict.fromkeys(pts['table']))}: "
            f"{f.count(len(fit))} points fitted, median error {f.pct(fit['error'].median())}, p90 "
            f"{f.pct(np.quantile(fit['error'], 0.9))}")
    if len(held):
        text += (f"; {f.count(len(held))} held out, median {f.pct(held['error'].median())}, p90 "
                 f"{f.pct(np.quantile(held['error'], 0.9))}")
    return text + (". Accelerators the file does not cover keep the shipped defaults. The p90 error of each parameter "
                   "set is the band a robust plan derates by and a stress test perturbs within.")


def calibration_html(folder: PlanFolder) -> str:
    chart = plot(folder)
    return (f"<p>{esc(words(folder))}</p>" + chart_html(chart, "Predicted against measured latency")
            + "<h3>Residuals</h3>" + f.table(residual_data(folder), RESIDUAL_COLUMNS, table_id="calibration-residuals")
            + "<h3>Error band per parameter set</h3>" + f.table(band_data(folder), BAND_COLUMNS, table_id="calibration-band"))
