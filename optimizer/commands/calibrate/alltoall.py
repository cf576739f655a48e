"""Fit the expert-parallel all-to-all to measured decode steps — ``serving.expert_parallel``'s
hop on the scale-up fabric α_up (``scaleup_latency_us``), and across nodes its hop α_out
(``scaleout_latency_us``) and the share of the scale-out NIC it reaches, η_a2a
(``nic_efficiency``):

    python -m optimizer.commands.calibrate.alltoall

The points are the decode steps of the mixture-of-experts replicas of
``data/calibration/aiconfigurator_moe.csv`` with attention data-parallel (every engine, each
with its own shipped rows for the rest of the step). A MoE layer of such a replica costs
(`optimizer.curves.expert_parallel`), inside its scale-up group (EP 8 on an 8-GPU node, EP 8
to 32 in an NVL72 rack)

    2·α_up + v·(p − 1)/p / (B_up·η_link),

and beyond it (EP 16 and 32 over 8-GPU nodes: H100, H200, B200, B300)

    2·α_out + max(v·(p − g)/p / (B_nic·η_a2a),  v·(g − 1)/p / (B_up·η_link)),

so the hops are set by the small batches and η_a2a by the large ones; the two sets of points
are fitted apart. Each fit minimises Σ ρ(ln f_i − ln y_i) (ρ: soft-L1 at 5 %, as
`fit.fit_group`) over a seeded 80 % of its points and scores the other 20 %. Prefill is not
fitted: a plan prefills on tensor-parallel pools only (expert-parallel replicas decode), and
a prefill pass's bulk all-to-all reaches more of the NIC than decode's small messages.
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
LATENCY_US = (0.0, 2000.0)  # a hop of an all-to-all kernel: more than 2 ms is no such fabric
EFFICIENCY = (0.01, 1.0)
ASSUMED = {"scaleup_latency_us": None, "scaleout_latency_us": 10.0, "nic_efficiency": 0.7}  # before the fit
UNSET = "unset (each row's collective latency)"


@dataclass
class AlltoallFit:
    values: dict[str, float]  # expert_parallel field → fitted value
    train: pd.DataFrame  # rows with predicted_ms, measured_ms, error
    holdout: pd.DataFrame


def ep_decode(table: pd.DataFrame, catalogue: Catalogue, across_nodes: bool, kind: str = "decode") -> pd.DataFrame:
    """The ``kind`` rows of expert-parallel replicas beyond their scale-up group (the NVLink
    domain, else the node) where ``across_nodes``, else within it."""
    group = table["accelerator"].map(lambda a: max(catalogue.accelerators[a].scaleup_domain_gpus,
                                                   catalogue.accelerators[a].gpus_per_node))
    gpus = table["tp"] * table["ep"].fillna(1)
    ep = (table["kind"] == kind) & (table["ep"].fillna(1) > 1)
    return table[ep & ((gpus > group) if across_nodes else (gpus <= group))].reset_index(drop=True)


def predicted_ms(rows: pd.DataFrame, values: dict, catalogue: Catalogue | None = None) -> np.ndarray:
    """Each row's latency with ``serving.expert_parallel`` updated by ``values``, the rest of
    the step from its engine's shipped rows."""
    out = np.full(len(rows), np.nan)
    for engine, part in rows.groupby("engine", sort=True):
        base = Serving(engine=engine)
        ep = base.expert_parallel.model_copy(update=values)
        out[part.index.to_numpy()] = predict_ms(part, base.model_copy(update={"expert_parallel": ep}), catalogue)
    return out


def scored(rows: pd.DataFrame, values: dict, catalogue: Catalogue | None = None) -> pd.DataFrame:
    out = rows.reset_index(drop=True).copy()
    out["measured_ms"] = measured_ms(out)
    out["predicted_ms"] = predicted_ms(out, values, catalogue)
    out["error"] = (out["predicted_ms"] / out["measured_ms"] - 1.0).abs()
    return out


def fit_alltoall(rows: pd.DataFrame, names: tuple[str, ...], holdout: float = 0.2, seed: int = 0,
                 catalogue: Catalogue | None = None) -> AlltoallFit:
    """The ``names`` fields of ``serving.expert_parallel`` (hops in µs, the NIC share) fitted to
    ``rows`` (`ep_decode`), a seeded ``holdout`` share left out and scored."""
    catalogue = catalogue or shipped_catalogue()
    rows = rows.reset_index(drop=True)
    test = split_holdout(rows, holdout, seed)
    train = rows[~test].reset_index(drop=True)
    y = np.log(measured_ms(train))
    ranges = [EFFICIENCY if n == "nic_efficiency" else LATENCY_US for n in names]
    start = [0.5 if n == "nic_efficiency" else 50.0 for n in names]
    scale = [0.1 if n == "nic_efficiency" else 100.0 for n in names]

    def residuals(x):
        return np.log(predicted_ms(train, dict(zip(names, x)), catalogue)) - y

    low, high = zip(*ranges)
    x = least_squares(residuals, start, bounds=(low, high), loss="soft_l1", f_scale=LOSS_SCALE, x_scale=scale).x
    values = {n: float(v) for n, v in zip(names, x)}
    return AlltoallFit(values, scored(train, values, catalogue),
                       scored(rows[test].reset_index(drop=True), values, catalogue))


FITS = ((False, ("scaleup_latency_us",)), (True, ("scaleout_latency_us", "nic_efficiency")))


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
    shipped = Serving().expert_parallel
    by = ["accelerator", "ep"]
    for across, names in FITS:
        rows = ep_decode(table, catalogue, across)
        found = fit_alltoall(rows, names, catalogue=catalogue)
        where = "beyond" if across else "within"
        print(f"\n{len(rows)} decode steps of EP replicas {where} their scale-up group ({len(found.train)} fitted, "
              f"{len(found.holdout)} held out)")
        print("fitted: " + ", ".join(f"{n} {v:.4g} (shipped {getattr(shipped, n)})" for n, v in found.values.items()))
        before = {n: ASSUMED[n] for n in names}
        print("\nbefore the fit (" + ", ".join(f"{n} {UNSET if v is None else v}" for n, v in before.items()) + "):")
        print(summary(scored(rows, before, catalogue), by).round(3).to_string(index=False))
        print("\nfitted, then held out:")
        print(summary(found.train, by).round(3).to_string(index=False))
        print(summary(found.holdout, by).round(3).to_string(index=False))
    prefill = ep_decode(table, catalogue, True, "prefill")
    print("\nprefill beyond the scale-up group (not fitted), shipped defaults:")
    print(summary(scored(prefill, {}, catalogue), by).round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
