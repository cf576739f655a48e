"""A scenario file → a validated `Scenario`: the three loading steps in a row, `load_raw`
(files → raw data), `apply_overrides` (``--set``), `validate`."""

from __future__ import annotations

from pathlib import Path

from optimizer.scenario.model import Scenario
from optimizer.scenario.overrides import apply_overrides
from optimizer.scenario.raw import RawScenario, load_raw
from optimizer.scenario.validate import validate


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> tuple[Scenario, RawScenario]:
    """File → validated `Scenario`, with the resolved raw data (for hashing and recording)."""
    raw = load_raw(path)
    if overrides:
        raw = apply_overrides(raw, overrides)
    return validate(raw), raw
