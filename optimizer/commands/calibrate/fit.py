"""Fit the physical parameters to measured points: robust least squares per
(accelerator, engine, weight dtype), a held-out split, residual statistics.

For one group of rows i with measured latency y_i and predicted f_i(θ) (`model.predict_ms`)
the fit minimises Σ ρ(ln f_i(θ) − ln y_i) with ρ scipy's ``soft_l1`` loss at a scale of 5 %
(quadratic below, linear above: a few bad rows cannot drag the rest), θ within the bounds of
`params.PARAMETERS`. Relative (log) residuals weigh a 3 ms step and a 3 s prefill alike.

Only parameters the rows identify move (`optimizer.commands.calibrate.identify`: rows of the kind
that informs them, an effect on some prediction, an effect the others do not already make,
and never more parameters than rows); the others keep their starting value (the shipped
default for that accelerator, else the neutral value), each with the reason. ``pcie_p2p_gpus``
(a whole number) is chosen by trying each tensor-parallel degree of the rows in turn, for
parts without a scale-up fabric with rows at two degrees or more, keeping the lowest cost.
A fitted parameter that ends at a bound of its range, and a group with no more rows than
fitted parameters (whose residuals say nothing of the error), are reported as warnings.

Held-out split: a seeded random ``holdout`` share of each group's rows per kind is left out
of the fit and scored with the fitted parameters. Error of a point: |f/y − 1|.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from optimizer.base.errors import Origin, ScenarioError
from optimizer.commands.calibrate.identify import identify
from optimizer.commands.calibrate.model import Catalogue, measured_ms, predict_ms, serving_with, shipped_catalogue
from optimizer.scenario.calibration.params import (
    KINDS,
    PARAMETERS,
    VERSION_PATTERN,
    ParameterSet,
    Spread,
    shipped_calibration,
)
from optimizer.scenario.calibration.tables import STATED

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
    kept: dict[str, str] = field(default_factory=dict)  # parameter → why it keeps its starting value
    short: list[str] = field(default_factory=list)  # kept for want of rows, though the rows' kinds inform them
    warnings: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.accelerator}/{self.engine}/{self.dtype}"

    def entry(self, source: str | None = None, as_of: str | None = None) -> ParameterSet:
        # residuals of no more rows than fitted parameters are zero by construction: no spread
        spread = spread_by_kind(self.train) if len(self.train) > len(self.fitted) else {}
        return ParameterSet(accelerator=self.accelerator, engine=self.engine, dtype=self.dtype,
                            engine_version=engine_version(self.train, self.engine),
                            **{k: float(v) for k, v in self.parameters.items()}, spread=spread, source=source,
                            as_of=as_of, fitted=self.fitted, kept=self.kept, provenance=provenance(self.train))


@dataclass
class CalibrationResult:
    groups: list[GroupFit] = field(default_factory=list)

    def rows(self, split: str) -> pd.DataFrame:
        frames = [getattr(g, split) for g in self.groups if len(getattr(g, split))]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def engine_version(rows: pd.DataFrame, engine: str) -> str | None:
    """The one engine release a group's rows state (a leading "v" dropped), else None: rows of
    no named engine, of several releases, or a version no release pattern reads."""
    found = {str(v).strip().removeprefix("v") for v in rows.get("version", pd.Series(dtype=str)).dropna()}
    if engine in ("any", "*") or len(found) != 1:
        return None
    version = found.pop()
    return version if re.fullmatch(VERSION_PATTERN, version) else None


def provenance(rows: pd.DataFrame) -> dict[str, str]:
    """Where the group's precision, KV precision, engine and version came from
    (`tables.STATED`), each distinct source once."""
    return {name: "; ".join(dict.fromkeys(str(v) for v in rows[f"{name}_from"].dropna()))
            for name in STATED if f"{name}_from" in rows}


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
    if not names:
        return dict(fixed), float(0.5 * np.sum(_residuals(np.array([]), [], fixed, rows, measured, catalogue) ** 2))
    x0 = np.array([fixed[n] for n in names])
    lower = np.array([PARAMETERS[n][0] for n in names])
    upper = np.array([PARAMETERS[n][1] for n in names])
    x0 = np.clip(x0, lower + 1e-9 * (upper - lower), upper - 1e-9 * (upper - lower))
    scale = np.maximum(np.abs(x0), 0.1 * (upper - lower) / 10)
    sol = least_squares(_residuals, x0, bounds=(lower, upper), loss="soft_l1", f_scale=LOSS_SCALE, x_scale=scale,
                        args=(names, fixed, rows, measured, catalogue), max_nfev=400)
    return {**fixed, **dict(zip(names, sol.x))}, float(sol.cost)


def p2p_candidates(rows: pd.DataFrame, catalogue: Catalogue) -> list[int]:
    """Values of ``pcie_p2p_gpus`` to try: the rows' tensor-parallel degrees, on a part
    without a scale-up fabric (where it changes the prediction) with rows at two degrees or
    more (one degree cannot tell them apart); else none."""
    accelerator = catalogue.accelerators[rows["accelerator"].iloc[0]]
    degrees = sorted({int(tp) for tp in rows["tp"]})
    return degrees if accelerator.scaleup_domain_gpus == 1 and len(degrees) > 1 else []


def fit_group(rows: pd.DataFrame, start: ParameterSet, holdout: float = 0.2, seed: int = 0,
              catalogue: Catalogue | None = None) -> GroupFit:
    """Fit one (accelerator, engine, dtype) group of rows."""
    catalogue = catalogue or shipped_catalogue()
    rows = rows.reset_index(drop=True)
    measured = measured_ms(rows)
    usable = np.isfinite(predict_ms(rows, serving_with(start.values()), catalogue))
    if not usable.any():
        first = rows.iloc[0]
        raise ScenarioError(f"no row of {first['accelerator']}/{first['engine']}/{first['weight_dtype']} can be "
                            f"predicted: {first['model']}'s weights do not fit its replicas as the planner sizes them",
                            Origin(first["file"], first["row"]), field="model")
    rows, measured = rows[usable].reset_index(drop=True), measured[usable]
    test = split_holdout(rows, holdout, seed)
    train_rows, train_y = rows[~test].reset_index(drop=True), measured[~test]
    fixed = start.values()
    found = identify(train_rows, fixed, lambda p: np.log(predict_ms(train_rows, serving_with(p), catalogue) / train_y),
                     catalogue)
    if not found.fitted:
        raise ScenarioError(f"cannot fit {start.key}: its {len(train_rows)} point(s) identify no parameter ("
                            + "; ".join(f"{n}: {why}" for n, why in list(found.kept.items())[:3]) + ")",
                            Origin(train_rows["file"].iloc[0]))
    degrees = p2p_candidates(train_rows, catalogue)
    if not degrees:
        found.kept["pcie_p2p_gpus"] = "a part with a scale-up fabric, or rows at one tensor-parallel degree"
    fits = [_least_squares(found.fitted, {**fixed, "pcie_p2p_gpus": p2p}, train_rows, train_y, catalogue)
            for p2p in degrees or [fixed["pcie_p2p_gpus"]]]
    params, cost = min(fits, key=lambda fit: fit[1])
    serving = serving_with(params)
    key = rows.iloc[0]
    kept = {name: f"{why}; kept at {start.key} ({start.origin})" for name, why in found.kept.items()}
    group = GroupFit(key["accelerator"], key["engine"], key["weight_dtype"], params,
                     found.fitted + (["pcie_p2p_gpus"] if degrees else []),
                     _scored(train_rows, train_y, serving, catalogue),
                     _scored(rows[test].reset_index(drop=True), measured[test], serving, catalogue), cost, kept,
                     found.short)
    group.warnings = _warnings(group)
    return group


def _warnings(group: GroupFit) -> list[str]:
    """What the fit could not do, with the counts: parameters its rows do not identify, no
    residual left to measure its error by, a parameter pressed against its bound."""
    out = []
    points, fitted, short = len(group.train), len(group.fitted), len(group.short)
    rows = f"{points} point{'s' * (points != 1)} (" + ", ".join(
        f"{n} {kind}" for kind, n in group.train["kind"].value_counts().sort_index().items()) + ")"
    one = points == 1
    if short:
        out.append(f"{group.key}: {rows} identif{'ies' if one else 'y'} {fitted} of the {fitted + short} parameters "
                   f"rows of these kinds inform; kept at their starting values: {', '.join(group.short)}")
    if points <= fitted:
        out.append(f"{group.key}: {rows} for {fitted} fitted parameter{'s' * (fitted != 1)} leave{'s' * one} no "
                   "residual: no error band is recorded")
    for name in group.fitted:  # (a cost fitted to 0 is a cost the rows do not show, not a limit reached)
        low, high, _ = PARAMETERS[name]
        value = group.parameters[name]
        bound = next((b for b in (low, high) if abs(value - b) <= 1e-6 * (high - low) and b != 0), None)
        if bound is not None:
            out.append(f"{group.key}: {name} ended at the {'upper' if bound == high else 'lower'} end of its physical "
                       f"range ({bound:g}): the rows ask for more — check the accelerator, the precision and the "
                       "latency's unit")
    return out


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
