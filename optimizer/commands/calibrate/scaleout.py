"""Fit the expert-parallel all-to-all across nodes to measured decode steps: the hop latency
α_out (``serving.expert_parallel.scaleout_latency_us``) and the share of the scale-out NIC the
all-to-all reaches, η_a2a (``serving.expert_parallel.nic_efficiency``):

    python -m optimizer.commands.calibrate.scaleout

The points are the decode steps of mixture-of-experts replicas wider than their scale-up group
in ``data/calibration/aiconfigurator_moe.csv`` (EP 16 and 32 over 8-GPU nodes: H100, H200,
B200, B300; every engine, each with its own shipped rows for the rest of the step). Such a
layer costs (`optimizer.curves.expert_parallel`)

    2·α_out + max(v·(p − g)/p / (B_nic·η_a2a),  v·(g − 1)/p / (B_up·η_link)),

so α_out is set by the small batches and η_a2a by the large ones. The fit minimises
Σ ρ(ln f_i − ln y_i) (ρ: soft-L1 at 5 %, as `fit.fit_group`) over a seeded 80 % of the points
and scores the other 20 %; prefill is not fitted (expert-parallel prefill is as far off inside
an NVL72 rack, where no NIC is crossed: another mechanism) and is reported as it falls.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from optimizer.commands.calibrate.fit import LOSS_SCALE, split_holdout
from optimizer.commands.calibrate.model import Catalogue, measured_ms, predict_ms, shipped_catalogue
from optimizer.scenario import Serving
from optimizer.scenario.calibration.params import SHIPPED_FILE
from optimizer.scenario.calibration.tables import read_table

MOE_POINTS = SHIPPED_FILE.parent / "calibration" / "aiconfigurator_moe.csv"
LATENCY_US = (0.0, 2000.0)  # a hop over an RDMA fabric: more than 2 ms is no such fabric
EFFICIENCY = (0.01, 1.0)


@dataclass
class ScaleoutFit:
    latency_us: float
    nic_efficiency: float
    train: pd.DataFrame  # rows with predicted_ms, measured_ms, error
    holdout: pd.DataFrame


def wider_than_scaleup(table: pd.DataFrame, catalogue: Catalogue, kind: str = "decode") -> pd.DataFrame:
    """The ``kind`` rows of expert-parallel replicas whose GPUs outnumber their scale-up group
    (the NVLink domain, else the node)."""
    group = table["accelerator"].map(lambda a: max(catalogue.accelerators[a].scaleup_domain_gpus,
                                                   catalogue.accelerators[a].gpus_per_node))
    wide = (table["kind"] == kind) & (table["ep"].fillna(1) > 1) & (table["tp"] * table["ep"].fillna(1) > group)
    return table[wide].reset_index(drop=True)


def predicted_ms(rows: pd.DataFrame, latency_us: float, nic_efficiency: float,
                 catalogue: Catalogue | None = None) -> np.ndarray:
    """Each row's latency with the all-to-all at (α_out, η_a2a), the rest of the step from its
    engine's shipped rows."""
    out = np.full(len(rows), np.nan)
    for engine, part in rows.groupby("engine", sort=True):
        base = Serving(engine=engine)
        ep = base.expert_parallel.model_copy(update={"scaleout_latency_us": latency_us,
                                                     "nic_efficiency": nic_efficiency})
        out[part.index.to_numpy()] = predict_ms(part, base.model_copy(update={"expert_parallel": ep}), catalogue)
    return out


def scored(rows: pd.DataFrame, latency_us: float, nic_efficiency: float, catalogue=None) -> pd.DataFrame:
    out = rows.copy()
    out["measured_ms"] = measured_ms(rows)
    out["predicted_ms"] = predicted_ms(rows.reset_index(drop=True), latency_us, nic_efficiency, catalogue)
    out["error"] = (out["predicted_ms"] / out["measured_ms"] - 1.0).abs()
    return out


def fit_scaleout(rows: pd.DataFrame, holdout: float = 0.2, seed: int = 0, start=(10.0, 0.7),
                 catalogue: Catalogue | None = None) -> ScaleoutFit:
    """(α_out µs, η_a2a) fitted to ``rows`` (`wider_than_scaleup`), a seeded ``holdout`` share
    left out and scored."""
    catalogue = catalogue or shipped_catalogue()
    rows = rows.reset_index(drop=True)
    test = split_holdout(rows, holdout, seed)
    train = rows[~test].reset_index(drop=True)
    y = np.log(measured_ms(train))

    def residuals(x):
        return np.log(predicted_ms(train, x[0], x[1], catalogue)) - y

    low, high = zip(LATENCY_US, EFFICIENCY)
    x = least_squares(residuals, np.clip(start, low, high), bounds=(low, high), loss="soft_l1",
                      f_scale=LOSS_SCALE, x_scale=(100.0, 0.1)).x
    latency_us, efficiency = float(x[0]), float(x[1])
    return ScaleoutFit(latency_us, efficiency, scored(train, latency_us, efficiency, catalogue),
                       scored(rows[test].reset_index(drop=True), latency_us, efficiency, catalogue))


def summary(scored_rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Points, median and p90 |predicted / measured − 1| and median ln(predicted / measured) per ``by``."""
    g = scored_rows.assign(log_ratio=np.log(scored_rows["predicted_ms"] / scored_rows["measured_ms"])).groupby(by)
    return pd.DataFrame({"points": g.size(), "median_abs_error": g["error"].median(),
                         "p90_abs_error": g["error"].quantile(0.9),
                         "median_log_ratio": g["log_ratio"].median()}).reset_index()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    catalogue = shipped_catalogue()
    table = read_table(MOE_POINTS)
    rows = wider_than_scaleup(table, catalogue)
    shipped = Serving().expert_parallel
    found = fit_scaleout(rows, catalogue=catalogue)
    print(f"{len(rows)} decode steps of EP replicas wider than their scale-up group ({len(found.train)} fitted, "
          f"{len(found.holdout)} held out)")
    print(f"fitted: scaleout_latency_us {found.latency_us:.1f}, nic_efficiency {found.nic_efficiency:.4f}; shipped "
          f"defaults {shipped.scaleout_latency_us:g}, {shipped.nic_efficiency:g}")
    by = ["accelerator", "ep"]
    for name, (a, e) in (("shipped defaults", (shipped.scaleout_latency_us, shipped.nic_efficiency)),
                         ("assumed before the fit (10 µs, 0.7)", (10.0, 0.7))):
        print(f"\ndecode, {name}:")
        print(summary(scored(rows, a, e, catalogue), by).round(3).to_string(index=False))
    print("\ndecode, fitted / held out:")
    print(summary(found.train, by).round(3).to_string(index=False))
    print(summary(found.holdout, by).round(3).to_string(index=False))
    prefill = wider_than_scaleup(table, catalogue, "prefill")
    print("\nprefill (not fitted), shipped defaults:")
    print(summary(scored(prefill, shipped.scaleout_latency_us, shipped.nic_efficiency, catalogue), by)
          .round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
