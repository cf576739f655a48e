"""Predicted latency of measured points, given physical parameters — through the planner's
own curves (`optimizer.serving.configs.make_replica` with the parameters as serving overrides, then
`optimizer.curves.roofline`), never a copy of them.

What each kind of point predicts (tables: `optimizer.scenario.calibration.tables`):

* prefill: `prefill_time_s` of one pass over ``batch`` prompts of ``prompt_tokens`` new
  tokens after ``context_tokens`` cached ones;
* decode: `decode_step_time_s` at ``batch`` sequences of mean context ``context_tokens``;
* a prefill or decode row with ``ep`` > 1: the same on an expert-parallel replica of
  tp × ep GPUs with attention data-parallel (``expert_parallel`` of `make_replica`), its
  ``batch`` the replica's;
* e2e: the median inter-token latency, as `decode_step_time_s` at a replica's mean running
  batch b̄ = output tokens/s ÷ replicas × ITL p50 (Little's law, at least 1; replicas =
  gpus / (tp × pp)) and context prompt + output / 2.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.base.errors import Origin, ScenarioError, unknown_id_message
from optimizer.base.units import MS_PER_S
from optimizer.curves.memory import kv_budget_bytes
from optimizer.curves.roofline import decode_step_time_s, prefill_time_s
from optimizer.scenario import Serving, load_scenario
from optimizer.serving.configs import make_replica

GROUP = ["model", "accelerator", "tp", "ep", "weight_dtype", "kv_dtype", "kind"]


@dataclass(frozen=True)
class Catalogue:
    models: dict
    accelerators: dict


@lru_cache(maxsize=1)
def shipped_catalogue() -> Catalogue:
    """Every model and accelerator row of ``data/``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "all.yaml"
        path.write_text("name: all\n")
        scenario, _ = load_scenario(path)
    return Catalogue(scenario.models, scenario.accelerators)


def check_ids(table: pd.DataFrame, catalogue: Catalogue) -> None:
    """Every row's model and accelerator exist, and its weights fit its GPUs."""
    for row in table.itertuples():
        for field, known in (("model", catalogue.models), ("accelerator", catalogue.accelerators)):
            value = getattr(row, field)
            if value not in known:
                raise ScenarioError(unknown_id_message(field, value, known), Origin(row.file, row.row), field=field)


def mean_running_batch(table: pd.DataFrame) -> np.ndarray:
    """e2e rows: b̄ = output tokens/s ÷ replicas × ITL p50 (s), at least 1."""
    replicas = table["gpus"].to_numpy(float) / (table["tp"].to_numpy(float) * table["pp"].to_numpy(float))
    per_replica = table["throughput_tokens_per_s"].to_numpy(float) / replicas
    return np.maximum(per_replica * table["itl_p50_ms"].to_numpy(float) / MS_PER_S, 1.0)


def measured_ms(table: pd.DataFrame) -> np.ndarray:
    """The measured latency each row is fitted to (e2e: ITL p50)."""
    return np.where(table["kind"] == "e2e", table["itl_p50_ms"], table["latency_ms"]).astype(float)


def _predict_group(rows: pd.DataFrame, key: tuple, serving: Serving, catalogue: Catalogue) -> np.ndarray:
    model, accelerator, tp, ep, weight_dtype, kv_dtype, kind = key
    wide = kind != "e2e" and ep > 1  # (an e2e row's replica stays tp × pp GPUs, as its gpus column counts them)
    r = make_replica(catalogue.models[model], catalogue.accelerators[accelerator], serving, int(tp * ep if wide else tp),
                     weight_dtype, kv_dtype, expert_parallel=wide)
    if r is None or kv_budget_bytes(r) <= 0:
        return np.full(len(rows), np.nan)
    if kind == "prefill":
        context = rows["context_tokens"].to_numpy(float)
        seconds = prefill_time_s(r, rows["prompt_tokens"].to_numpy(float) + context, context,
                                 prompts=rows["batch"].to_numpy(float))
    elif kind == "decode":
        seconds = decode_step_time_s(r, rows["batch"].to_numpy(float), rows["context_tokens"].to_numpy(float))
    else:
        context = rows["prompt_tokens"].to_numpy(float) + rows["output_tokens"].to_numpy(float) / 2.0
        seconds = decode_step_time_s(r, mean_running_batch(rows), context)
    return np.asarray(seconds, dtype=float) * MS_PER_S


def predict_ms(table: pd.DataFrame, serving: Serving, catalogue: Catalogue | None = None) -> np.ndarray:
    """Predicted latency (ms) of every row under ``serving`` (NaN where the model's weights
    do not fit the replica as the planner sizes it)."""
    catalogue = catalogue or shipped_catalogue()
    table = table.assign(ep=table["ep"].fillna(1.0) if "ep" in table else 1.0)  # (a table not read by read_table)
    out = np.full(len(table), np.nan)
    positions = np.arange(len(table))
    for key, rows in table.groupby(GROUP, sort=False):
        out[positions[table.index.get_indexer(rows.index)]] = _predict_group(rows, key, serving, catalogue)
    return out


def serving_with(parameters: dict, base: Serving | None = None) -> Serving:
    """A `Serving` whose physical parameters are exactly ``parameters`` (as overrides)."""
    base = base or Serving()
    return base.model_copy(update={k: float(v) for k, v in parameters.items()})
