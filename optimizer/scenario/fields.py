"""Field rules shared by the scenario's models: the base models (strict: unknown fields,
NaN and infinity refused; catalogue rows carry their source), and checks that turn common
slips — a percentage for a fraction, seconds for milliseconds — into messages that say so."""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel, ConfigDict, Field


def fraction_check(value: float, name: str) -> float:
    if 1.0 < value <= 100.0:
        raise ValueError(f"expected a fraction between 0 and 1; {value} looks like a percentage — write {value / 100:g}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a fraction between 0 and 1, got {value}")
    return value


def fraction_before(value):
    """A 'before' validator: the percentage hint of `fraction_check` ahead of the range check."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fraction_check(float(value), "")
    return value


def latency_ms_check(value: float) -> float:
    if 0 < value < 5:
        raise ValueError(
            f"expected milliseconds; {value} looks like seconds — write {value * 1000:g} for {value} s"
        )
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class Catalogued(Strict):
    """Provenance every shipped row carries: where the figures come from, and when."""

    source: str | None = Field(None, description="citation for the figures of this row")
    as_of: date | None = Field(None, description="date the source states for its figures")
    assumed_fields: str | None = Field(None, description="semicolon-separated fields whose values are assumptions")
