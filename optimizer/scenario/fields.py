"""Field rules shared by the scenario's models: the base models (strict: unknown fields,
NaN and infinity refused; catalogue rows carry their source), the physical range of every
numeric field (`bounded`), and checks that turn common slips — a percentage for a fraction,
seconds for milliseconds — into messages that say so."""

from __future__ import annotations

from datetime import date

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from scipy.special import ndtri  # the standard normal quantile (scipy.stats.norm.ppf)

from optimizer.base.units import MS_PER_S

# Lengths are lognormal (`optimizer.curves.lengths`): with z the standard normal's 99th
# percentile, p99/mean = exp(z·σ − σ²/2) is at most exp(z²/2) ≈ 14.97 (at σ = z), so a stated
# p99 above that multiple of the mean is refused at validation.
Z99 = float(ndtri(0.99))
MAX_P99_OVER_MEAN = float(np.exp(Z99 * Z99 / 2.0))


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


def latency_ms_check(value):
    """A 'before' validator: a latency under 5 written in a milliseconds field is seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 5:
        raise ValueError(
            f"expected milliseconds; {value} looks like seconds — write {value * MS_PER_S:g} for {value} s"
        )
    return value


def _figure(x: float) -> str:
    """A bound as people write it: 1,000,000 rather than 1e+06; 299.792458; 1e-09."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e13 else f"{x:.10g}"


def range_text(ge=None, gt=None, le=None, lt=None, unit: str = "") -> str:
    """'0 to 20 ms', 'more than 0, at most 1', '0 or more, below 1'."""
    unit = f" {unit}" if unit else ""
    if ge is not None and le is not None:
        return f"{_figure(ge)} to {_figure(le)}{unit}"
    low = f"{_figure(ge)} or more" if ge is not None else f"more than {_figure(gt)}"
    high = f"at most {_figure(le)}" if le is not None else f"below {_figure(lt)}"
    return f"{low}, {high}{unit}"


def bounded(default=..., *, ge=None, gt=None, le=None, lt=None, unit: str = "", why: str = "",
            description: str = "", each: bool = False, **options):
    """A numeric field with the range a physicist would accept: both ends are required (a
    value of 1e308 or 1e-300 must fail here, not as an overflow three modules later), and the
    range, with the reason for it, ends the field's description and every error about it.
    ``each``: the field is a list (or a mapping) of numbers, each within the range (checked
    by `Strict`)."""
    if (ge is None) == (gt is None) or (le is None) == (lt is None):
        raise TypeError("a bounded field needs one lower (ge or gt) and one upper (le or lt) bound")
    accepted = ("each " if each else "") + range_text(ge, gt, le, lt, unit)
    text = f"{description}; " if description else ""
    text += f"accepted: {accepted}" + (f" ({why})" if why else "")
    limits = {} if each else {"ge": ge, "gt": gt, "le": le, "lt": lt}
    if "default_factory" not in options:
        options["default"] = default
    return Field(description=text, json_schema_extra={"accepted": accepted, "bounds": [ge, gt, le, lt]},
                 **{k: v for k, v in limits.items() if v is not None}, **options)


def accepted(field) -> str | None:
    """The accepted range of a `bounded` field (a `FieldInfo`), None for others."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return extra.get("accepted")


def _inside(x, ge, gt, le, lt) -> bool:
    return (ge is None or x >= ge) and (gt is None or x > gt) and (le is None or x <= le) and (lt is None or x < lt)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    @field_validator("*")
    @classmethod
    def _each_in_range(cls, value, info: ValidationInfo):
        """The items of a `bounded(each=True)` list or mapping, each within its range."""
        if not isinstance(value, (list, dict)):
            return value
        field = cls.model_fields[info.field_name]
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if "bounds" in extra:
            for item in value.values() if isinstance(value, dict) else value:
                if not _inside(item, *extra["bounds"]):
                    raise ValueError(f"expected {extra['accepted']}; got {value!r}")
        return value


class Catalogued(Strict):
    """Provenance every shipped row carries: where the figures come from, and when."""

    source: str | None = Field(None, description="citation for the figures of this row")
    as_of: date | None = Field(None, description="date the source states for its figures")
    assumed_fields: str | None = Field(None, description="semicolon-separated fields whose values are assumptions")
