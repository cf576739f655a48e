"""A calibration's residual spread as an error band on the serving efficiencies: what
`fleetplan plan --robust` plans with and `fleetplan stress --within-band` perturbs.

Each parameter set of a calibration records, per kind of point, the p90 of
|predicted / measured − 1| over the points it was fitted to (`params.Spread`). The band of
an accelerator is that of the parameter set its replicas use (`Calibration.lookup`: the
calibration file's, else the shipped one's).

The rule (``p90``): prefill_mfu × (1 − e_prefill); decode_mbu and decode_mfu × (1 − e_decode);
a set fitted to end-to-end runs only uses e_e2e for all three. Why: e = p90 of
|predicted / measured − 1| says nine measured points in ten took at most 1/(1 − e) of the
predicted time; scaling the efficiencies by 1 − e stretches every pass's compute and memory
time by that factor (not its fixed overheads, which the fit measured separately). So the
plan is sized for the slow edge of what the calibration saw, accelerator by accelerator —
where one fixed derate treats an accelerator fitted within 3 % and one fitted within 12 %
alike. A kind without a spread (an uncalibrated accelerator) keeps ``fallback``.

Draws (``draw``, seeded): per parameter set and kind, ln(predicted / measured) ~
N(μ, σ²) with μ the set's median log ratio (its bias) and σ = ln(1 + e) / 1.645 (so that
|ln ratio| stays within ln(1 + e) nine times in ten, the p90); the efficiencies × exp(draw)
(a prediction r× too fast means the hardware delivers r× the efficiency), fractions
capped at 1.
"""

from __future__ import annotations

import copy

import numpy as np

from optimizer.scenario.calibration.params import Calibration, ParameterSet

KIND_OF = {"prefill_mfu": "prefill", "decode_mbu": "decode", "decode_mfu": "decode"}
FRACTIONS = tuple(KIND_OF)
Z90 = 1.6449  # Φ⁻¹(0.95): a centred normal stays within ±1.645 σ nine times in ten


def _p90(entry: ParameterSet, kind: str) -> float | None:
    spread = entry.spread.get(kind) or entry.spread.get("e2e")
    return None if spread is None or spread.points == 0 else float(spread.p90_abs_error)


def _used_sets(s) -> list[tuple[str, str, int]]:
    """(accelerator, weight dtype, index of its parameter set) for every accelerator and
    weight dtype the scenario's workloads run at."""
    cal: Calibration = s.serving.calibration
    dtypes = sorted({w.weight_dtype for w in s.workloads.values()})
    out = []
    for acc in s.accelerators:
        for dtype in dtypes:
            entry = cal.lookup(acc, dtype, s.serving.engine)
            index = next((i for i, e in enumerate(cal.entries) if e is entry), None)
            if index is not None:
                out.append((acc, dtype, index))
    return out


def band(s, fallback: float | None = None) -> list[dict]:
    """Per (accelerator, weight dtype) of the scenario ``s``: its parameter set, the p90 of
    each kind and the factor on each efficiency under the ``p90`` rule (``fallback`` where
    the set has no spread for a kind, None then if ``fallback`` is None). Efficiencies the
    scenario's ``serving`` section sets for every accelerator are not the calibration's and
    are left out."""
    cal: Calibration = s.serving.calibration
    rows = []
    for acc, dtype, index in _used_sets(s):
        entry = cal.entries[index]
        p90 = {kind: _p90(entry, kind) for kind in ("prefill", "decode")}
        factors = {name: (1.0 - p90[kind] if p90[kind] is not None else fallback) for name, kind in KIND_OF.items()
                   if getattr(s.serving, name) is None}
        rows.append({"accelerator": acc, "dtype": dtype, "parameter_set": entry.key, "origin": entry.origin,
                     "p90_prefill": p90["prefill"], "p90_decode": p90["decode"], "factors": factors, "entry": index})
    return rows


def drawn(s, seed: int) -> list[dict]:
    """`band` rows whose factors are drawn from each set's band (module docstring), one draw
    per parameter set and kind, seeded."""
    cal: Calibration = s.serving.calibration
    rng = np.random.default_rng(seed)
    rows = band(s, fallback=1.0)
    draws: dict[tuple[int, str], float] = {}
    for row in rows:
        entry = cal.entries[row["entry"]]
        for name in row["factors"]:
            kind = KIND_OF[name]
            key = (row["entry"], kind)
            if key not in draws:
                spread = entry.spread.get(kind) or entry.spread.get("e2e")
                draws[key] = 1.0 if spread is None or spread.points == 0 else float(np.exp(
                    rng.normal(spread.median_log_ratio, np.log1p(spread.p90_abs_error) / Z90)))
            row["factors"][name] = draws[key]
    return rows


def has_band(s) -> bool:
    """True when some accelerator of ``s`` runs on a parameter set with a residual spread."""
    return any(f is not None for row in band(s) for f in row["factors"].values())


def derated(calibration_data: dict, rows: list[dict]) -> dict:
    """The resolved scenario's ``calibration`` with each used parameter set's efficiencies ×
    its row's factors (fractions capped at 1); a set used by several accelerators is
    scaled once."""
    out = copy.deepcopy(calibration_data)
    done = set()
    for row in rows:
        if row["entry"] in done:
            continue
        done.add(row["entry"])
        entry = out["entries"][row["entry"]]
        for name, factor in row["factors"].items():
            if factor is not None:
                entry[name] = min(float(entry[name]) * factor, 1.0)
    return out


def summary_rows(rows: list[dict]) -> list[dict]:
    """The band as recorded in summary.json: no internal indices."""
    return [{k: v for k, v in row.items() if k != "entry"} for row in rows]
