"""Fit the physical parameters to measured points: robust least squares per
(accelerator, engine, weight dtype), a held-out split, residual statistics.

For one group of rows i with measured latency y_i and predicted f_i(θ) (`model.predict_ms`)
the fit minimises Σ ρ(ln f_i(θ) − ln y_i) with ρ scipy's ``soft_l1`` loss at a scale of 5 %
(quadratic below, linear above: a few bad rows cannot drag the rest), θ within the bounds of
`params.PARAMETERS`. Relative (log) residuals weigh a 3 ms step and a 3 s prefill alike.

Only parameters the rows can inform move; the others keep their starting value (the shipped
default for that accelerator, else the neutral value):
tensor-parallel ones need rows with tp > 1, ``moe_load_factor`` MoE rows, ``decode_mfu``
decode rows, ``prefill_*`` prefill rows, ``attention_factor`` rows with context.
``pcie_p2p_gpus`` (a whole number) is chosen by trying each tensor-parallel degree of the
rows in turn, for parts without a scale-up fabric only, keeping the lowest cost.

Held-out split: a seeded random ``holdout`` share of each group's rows per kind is left out
of the fit and scored with the fitted parameters. Error of a point: |f/y − 1|.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from optimizer.calibration.model import Catalogue, measured_ms, predict_ms, serving_with, shipped_catalogue
from optimizer.calibration.params import KINDS, PARAMETERS, ParameterSet, Spread, shipped_calibration

LOSS_SCALE = 0.05
FIT_KEY = ["accelerator", "engine", "weight_dtype"]


@dataclass
class GroupFit:
    """The fit of one (accelerator, engine, dtype)."""

    accelerator: str
    engine: str
    dtype: str
    parameters: dict[str, float]
    fitted: list[str]
    train: pd.DataFrame  # rows with 'predicted_ms', 'measured_ms', 'error'
    holdout: pd.DataFrame
    cost: float = 0.0

    def entry(self, source: str | None = None, as_of: str | None = None) -> ParameterSet:
        return ParameterSet(accelerator=self.accelerator, engine=self.engine, dtype=self.dtype,
                            **{k: float(v) for k, v in self.parameters.items()},
                            spread=spread_by_kind(self.train), source=source, as_of=as_of)


@dataclass
class CalibrationResult:
    groups: list[GroupFit] = field(default_factory=list)

    def rows(self, split: str) -> pd.DataFrame:
        frames = [getattr(g, split) for g in self.groups if len(getattr(g, split))]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def informed(rows: pd.DataFrame, catalogue: Catalogue) -> list[str]:
    """The parameters ``rows`` can inform (see the module docstring)."""
    kinds = set(rows["kind"])
    names = []
    if "prefill" in kinds:
        names += ["prefill_mfu", "prefill_half_tokens"]
    if kinds & {"decode", "e2e"}:
        names += ["decode_mbu", "decode_mfu", "roofline_sharpness"]
    names += ["step_overhead_ms", "layer_overhead_us"]
    if (rows["tp"] > 1).any():
        names += ["collective_latency_us", "link_efficiency", "bulk_extra_latency_us", "small_link_share"]
    context = rows["context_tokens"].fillna(0).to_numpy(float) + rows["prompt_tokens"].fillna(0).to_numpy(float)
    if (context >= 2048).any():
        names.append("attention_factor")
    if any(catalogue.models[m].experts for m in set(rows["model"])):
        names.append("moe_load_factor")
    return [n for n in PARAMETERS if n in names]


def _residuals(values: np.ndarray, names: list[str], fixed: dict, rows: pd.DataFrame, measured: np.ndarray,
               catalogue: Catalogue) -> np.ndarray:
    params = {**fixed, **dict(zip(names, values))}
    predicted = predict_ms(rows, serving_with(params), catalogue)
    return np.log(predicted / measured)


def split_holdout(rows: pd.DataFrame, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of held-out rows: ``fraction`` of each kind, at least one row left in the fit."""
    mask = np.zeros(len(rows), dtype=bool)
    if fraction <= 0:
        return mask
    rng = np.random.default_rng(seed)
    for kind in KINDS:
        where = np.flatnonzero(rows["kind"].to_numpy() == kind)
        n = min(int(round(fraction * len(where))), max(len(where) - 1, 0))
        if n:
            mask[rng.choice(where, size=n, replace=False)] = True
    return mask


def _least_squares(names: list[str], fixed: dict, rows: pd.DataFrame, measured: np.ndarray,
                   catalogue: Catalogue) -> tuple[dict, float]:
    """Robust bounded fit of ``names`` (the others at ``fixed``) → (parameters, cost)."""
    x0 = np.array([fixed[n] for n in names])
    lower = np.array([PARAMETERS[n][0] for n in names])
    upper = np.array([PARAMETERS[n][1] for n in names])
    x0 = np.clip(x0, lower + 1e-9 * (upper - lower), upper - 1e-9 * (upper - lower))
    scale = np.maximum(np.abs(x0), 0.1 * (upper - lower) / 10)
    sol = least_squares(_residuals, x0, bounds=(lower, upper), loss="soft_l1", f_scale=LOSS_SCALE, x_scale=scale,
                        args=(names, fixed, rows, measured, catalogue), max_nfev=400)
    return {**fixed, **dict(zip(names, sol.x))}, float(sol.cost)


def p2p_candidates(rows: pd.DataFrame, catalogue: Catalogue) -> list[int]:
    """Values of ``pcie_p2p_gpus`` to try: the rows' tensor-parallel degrees on a part without
    a scale-up fabric (where it changes the prediction), else none."""
    accelerator = catalogue.accelerators[rows["accelerator"].iloc[0]]
    if accelerator.scaleup_domain_gpus > 1:
        return []
    return sorted({int(tp) for tp in rows["tp"]})


def fit_group(rows: pd.DataFrame, start: ParameterSet, holdout: float = 0.2, seed: int = 0,
              catalogue: Catalogue | None = None) -> GroupFit:
    """Fit one (accelerator, engine, dtype) group of rows."""
    catalogue = catalogue or shipped_catalogue()
    rows = rows.reset_index(drop=True)
    measured = measured_ms(rows)
    usable = np.isfinite(predict_ms(rows, serving_with(start.values()), catalogue))
    rows, measured = rows[usable].reset_index(drop=True), measured[usable]
    test = split_holdout(rows, holdout, seed)
    train_rows, train_y = rows[~test].reset_index(drop=True), measured[~test]
    names = informed(train_rows, catalogue)
    fixed = start.values()
    fits = [_least_squares(names, {**fixed, "pcie_p2p_gpus": p2p}, train_rows, train_y, catalogue)
            for p2p in p2p_candidates(train_rows, catalogue) or [fixed["pcie_p2p_gpus"]]]
    params, cost = min(fits, key=lambda fit: fit[1])
    serving = serving_with(params)
    key = rows.iloc[0]
    return GroupFit(key["accelerator"], key["engine"], key["weight_dtype"], params, names,
                    _scored(train_rows, train_y, serving, catalogue),
                    _scored(rows[test].reset_index(drop=True), measured[test], serving, catalogue), cost)


def _scored(rows: pd.DataFrame, measured: np.ndarray, serving, catalogue: Catalogue) -> pd.DataFrame:
    out = rows.copy()
    out["measured_ms"] = measured
    out["predicted_ms"] = predict_ms(rows, serving, catalogue) if len(rows) else []
    out["error"] = np.abs(out["predicted_ms"] / out["measured_ms"] - 1.0)
    return out


def calibrate(table: pd.DataFrame, holdout: float = 0.2, seed: int = 0, start=None,
              catalogue: Catalogue | None = None) -> CalibrationResult:
    """Fit every (accelerator, engine, dtype) group of ``table``, each starting from the
    parameters ``start`` (a `Calibration`, default the shipped one) gives it."""
    start = start or shipped_calibration()
    result = CalibrationResult()
    for (acc, engine, dtype), rows in table.groupby(FIT_KEY, sort=True):
        first = start.lookup(acc, dtype, None if engine == "any" else engine)
        result.groups.append(fit_group(rows, first, holdout, seed, catalogue))
    return result


def spread_by_kind(scored: pd.DataFrame) -> dict[str, Spread]:
    out = {}
    for kind, rows in scored.groupby("kind"):
        ratio = np.log(rows["predicted_ms"] / rows["measured_ms"])
        out[str(kind)] = Spread(points=len(rows), median_abs_error=float(np.median(rows["error"])),
                                p90_abs_error=float(np.percentile(rows["error"], 90)),
                                median_log_ratio=float(np.median(ratio)))
    return out


def residual_table(scored: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and p90 absolute error and the median predicted/measured per ``by`` group."""
    if scored.empty:
        return pd.DataFrame(columns=[*by, "points", "median_abs_error", "p90_abs_error", "median_ratio"])
    g = scored.assign(ratio=scored["predicted_ms"] / scored["measured_ms"]).groupby(by)
    return pd.DataFrame({
        "points": g.size(),
        "median_abs_error": g["error"].median(),
        "p90_abs_error": g["error"].quantile(0.9),
        "median_ratio": g["ratio"].median(),
    }).reset_index()
