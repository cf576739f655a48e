"""Errors a planner sees, each with the exit code the CLI returns for it.

Exit codes (documented in the README):
  0  success (a plan proven within the requested gap, or a check that passed)
  1  unexpected internal error (a bug: please report it)
  2  bad input: the message names the file, the row and the field and says what was expected
  3  infeasible: no plan can meet the objectives; the message says why in planner's words
  4  time limit reached with a plan that is not proven within the requested gap (plan written)
  5  time limit reached without any plan (nothing written)
  6  numerical trouble in the solver (nothing written)
  7  verification, stress or operations check failed: an objective fell below its target, or an
     operated hour left demand unserved or needed GPUs beyond the caps
  130 interrupted (Ctrl-C); nothing half-written is left behind
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import get_close_matches


class FleetplanError(Exception):
    """Base class: a failure with a message meant for the planner."""

    exit_code = 1


@dataclass(frozen=True)
class Origin:
    """Where a value came from: a file, a line in it, and what the row is."""

    file: str
    line: int | None = None
    label: str | None = None

    def describe(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.label:
            parts.append(self.label)
        return ", ".join(parts)


class ScenarioError(FleetplanError):
    """Bad input. ``origin`` names the file and row, ``field`` the column or key."""

    exit_code = 2

    def __init__(self, message: str, origin: Origin | None = None, field: str | None = None):
        self.message = message
        self.origin = origin
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.origin.describe() if self.origin else "scenario"
        if self.field:
            where += f", field '{self.field}'"
        return f"{where}: {self.message}"


class InfeasibleError(FleetplanError):
    exit_code = 3


class TimeLimitNoPlanError(FleetplanError):
    exit_code = 5


class NumericalTroubleError(FleetplanError):
    exit_code = 6


class VerificationFailed(FleetplanError):
    exit_code = 7


# pydantic's error types for a number outside a field's range (NaN and ±inf included)
RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"})


def shorten(text, most: int = 100) -> str:
    """A value or path as shown in a message: long ones cut in the middle."""
    text = str(text)
    return text if len(text) <= most else text[: most // 2 - 1] + "…" + text[-(most // 2):]


def yaml_bool_hint(value) -> str:
    """Why a name came out as true/false: YAML 1.1 reads unquoted on/off/yes/no/y/n as booleans."""
    if isinstance(value, bool):
        return (" — YAML reads unquoted on, off, yes, no, y, n, true and false as true/false; "
                "quote the name (e.g. 'no' for Norway)")
    return ""


def unknown_id_message(kind: str, value: str, known) -> str:
    """'unknown accelerator 'h100' — did you mean h100-sxm? Known: …'."""
    if isinstance(value, bool):
        return f"unknown {kind} {value}{yaml_bool_hint(value)}"
    known = sorted({str(k) for k in known})
    near = get_close_matches(str(value), known, n=3, cutoff=0.5)
    hint = f" — did you mean {', '.join(near)}?" if near else ""
    listed = ", ".join(known) if len(known) <= 30 else ", ".join(known[:30]) + f", … ({len(known)} in all)"
    return f"unknown {kind} '{value}'{hint if hint else '.'} Known: {listed}"
