"""Which parameters a group of measured rows can identify — a fit moves those only, and says
why it kept each of the others at its starting value.

A parameter is identified when, checked in the order of `PRIORITY`:

1. the rows are of a kind that informs it (`informed`: prefill rows for the prefill
   efficiency, rows with tp > 1 for the collectives, an MoE model for expert imbalance …);
2. moving it by a tenth of its range changes some predicted latency by at least
   `EFFECT_MIN` (decode rows at small batches never exercise the compute efficiency);
3. and changes it by at least `EFFECT_MIN` in a way no combination of the parameters
   already chosen can: a point measured twice cannot tell the prefill efficiency from the
   per-pass overhead, one model cannot tell a cost per layer from a cost per pass;
4. and fewer parameters than rows are chosen so far: n points identify at most n.

The effects are taken at the starting values (the shipped fit for the accelerator): a local
test, which is what a bounded least-squares fit started there relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from optimizer.commands.calibrate.model import Catalogue
from optimizer.scenario.calibration.params import PARAMETERS

EFFECT_MIN = 0.01  # 1 % on some predicted latency, over a tenth of the parameter's range
# the order parameters are chosen in when points are scarce: the efficiencies that set most of
# every latency first, then fixed costs, then what shapes the curves at their ends
PRIORITY = ("prefill_mfu", "decode_mbu", "decode_mfu", "step_overhead_ms", "prefill_half_tokens", "layer_overhead_us",
            "collective_latency_us", "link_efficiency", "attention_factor", "roofline_sharpness", "moe_load_factor",
            "bulk_extra_latency_us", "small_link_share")


@dataclass
class Identified:
    """The parameters to fit, and why each other one keeps its starting value."""

    fitted: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    short: list[str] = field(default_factory=list)  # kept although rows of these kinds inform them: too few, too alike


def informed(rows: pd.DataFrame, catalogue: Catalogue) -> dict[str, str | None]:
    """Per continuous parameter: None when ``rows`` are of a kind that informs it, else what
    they lack."""
    kinds = set(rows["kind"])
    context = rows["context_tokens"].fillna(0).to_numpy(float) + rows["prompt_tokens"].fillna(0).to_numpy(float)
    lacks = {
        "prefill": None if "prefill" in kinds else "no prefill rows",
        "decode": None if kinds & {"decode", "e2e"} else "no decode or end-to-end rows",
        "tp": None if (rows["tp"] > 1).any() else "no rows with tensor parallelism (tp > 1)",
        "context": None if (context >= 2048).any() else "no rows with 2,048 tokens of context or more",
        "moe": None if any(catalogue.models[m].experts for m in set(rows["model"])) else "no mixture-of-experts model",
    }
    needs = {"prefill_mfu": "prefill", "prefill_half_tokens": "prefill", "decode_mbu": "decode",
             "decode_mfu": "decode", "roofline_sharpness": "decode", "collective_latency_us": "tp",
             "link_efficiency": "tp", "bulk_extra_latency_us": "tp", "small_link_share": "tp",
             "attention_factor": "context", "moe_load_factor": "moe"}
    return {name: lacks[needs[name]] if name in needs else None for name in PRIORITY}


def effects(residuals: Callable[[dict], np.ndarray], start: dict, names: list[str]) -> dict[str, np.ndarray]:
    """Change of every row's ln(predicted latency) when each parameter moves by a tenth of its
    range (towards the inside of its bounds)."""
    base = residuals(start)
    out = {}
    for name in names:
        low, high, _ = PARAMETERS[name]
        step = (high - low) / 10
        moved = start[name] + step if start[name] + step <= high else start[name] - step
        out[name] = residuals({**start, name: moved}) - base
    return out


def identify(rows: pd.DataFrame, start: dict, residuals: Callable[[dict], np.ndarray],
             catalogue: Catalogue) -> Identified:
    """The parameters ``rows`` identify (module docstring), at the starting values ``start``;
    ``residuals(parameters)`` gives each row's ln(predicted / measured)."""
    out = Identified()
    lacking = informed(rows, catalogue)
    out.kept.update({name: why for name, why in lacking.items() if why})
    candidates = [name for name, why in lacking.items() if why is None]
    moves = effects(residuals, start, candidates)
    chosen: list[np.ndarray] = []
    for name in candidates:
        effect = np.nan_to_num(moves[name])
        if np.max(np.abs(effect), initial=0.0) < EFFECT_MIN:
            out.kept[name] = f"moves no prediction by {EFFECT_MIN:.0%} over a tenth of its range on these rows"
            continue
        if len(out.fitted) >= len(rows):
            out.kept[name] = f"{len(rows)} point{'s' * (len(rows) != 1)} identif{'y' if len(rows) != 1 else 'ies'} at " \
                             f"most {len(rows)} parameter{'s' * (len(rows) != 1)}"
            out.short.append(name)
            continue
        if chosen:  # the part of its effect no combination of the chosen parameters' effects makes
            basis = np.column_stack(chosen)
            outside = effect - basis @ np.linalg.lstsq(basis, effect, rcond=None)[0]
            if np.max(np.abs(outside)) < EFFECT_MIN:
                out.kept[name] = f"not separable on these rows from {', '.join(out.fitted)}"
                out.short.append(name)
                continue
        chosen.append(effect)
        out.fitted.append(name)
    return out
