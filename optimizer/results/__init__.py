"""A plan as results: the solver's answer as tidy tables (`tables`) and a summary of headline
figures (`summary`), with the predicted latencies behind `slo.csv` (`latency`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Plan:
    summary: dict
    tables: dict[str, pd.DataFrame]
    scenario_data: dict = field(default_factory=dict)
    inputs: list[Path] = field(default_factory=list)  # files the plan was made from (never overwritten by it)
