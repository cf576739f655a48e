"""Command-line values, checked like the scenario fields they stand for.

A flag that overrides a scenario field (``--time-limit`` → ``policy.time_limit_s``) is
validated by that field's own rules, so a value the YAML would refuse is refused on the
command line with the same words; the other numeric flags carry their accepted range here.
Each check is an argparse ``type``: a bad value ends the command with one line naming the
flag, the range and the value given (exit 2).
"""

from __future__ import annotations

import argparse
import math

from pydantic import BaseModel, ValidationError

from optimizer.errors import shorten


def _explain_first(exc: ValidationError) -> str:
    from optimizer.scenario import explain  # the scenario's wording for the same rules

    return explain(exc.errors()[0])


def field_value(model: type[BaseModel], name: str):
    """An argparse type that accepts what ``model.name`` accepts in a scenario: the section is
    validated with only this field given, so its own validators (a percentage written for a
    fraction, seconds written for milliseconds) speak as they would for the YAML."""
    def check(text: str):
        try:
            value = getattr(model.model_validate({name: _number_or_text(text)}), name)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(f"{_explain_first(exc)} (the rule of scenario field "
                                              f"{model.__name__.lower()}.{name})") from None
        if value is None:
            raise argparse.ArgumentTypeError(f"expected a value, got {shorten(text)!r}")
        return value

    check.__name__ = name
    return check


def _number_or_text(text: str):
    try:
        return float(text) if any(c in text for c in ".eEnN") else int(text)
    except ValueError:
        return text


def number(low: float, high: float, *, integer: bool = False, low_open: bool = False, what: str = "a number"):
    """An argparse type for a finite number in [low, high] (``low_open``: (low, high])."""
    def check(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {shorten(text)!r}") from None
        inside = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
        if not inside:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"expected {what} in {bracket}{low:g}, {high:g}], got {shorten(text)!r}")
        return value

    check.__name__ = what
    return check


def factor(text: str) -> float:
    """A multiplier written ×F, xF, *F or F: finite and > 0 (at most 1,000)."""
    body = text.strip().lstrip("×xX*")
    try:
        value = float(body)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor like ×1.3, got {shorten(text)!r}") from None
    if not (math.isfinite(value) and 0 < value <= 1000):
        raise argparse.ArgumentTypeError(f"expected a factor in (0, 1000], like ×1.3, got {shorten(text)!r}")
    return value


SEED = number(0, 2**32 - 1, integer=True, what="a whole-number seed")
TOKENS = number(0, 1e7, low_open=True, what="a number of tokens")
MILLISECONDS = number(0, 8.64e7, low_open=True, what="milliseconds")
PRICE = number(0, 1e4, low_open=True, what="US$ per GPU-hour")
WORKERS = number(1, 256, integer=True, what="a number of worker processes")
REQUESTS = number(1, 10_000_000, integer=True, what="a number of requests")
BATCH_TOKENS = number(0, 1_000_000, integer=True, what="a number of tokens (0: off)")
NOISE_SIGMA = number(0, 2, what="a log-normal σ")
JITTER_GAPS = number(0, 1e6, what="a number of mean gaps")


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (no usage block): 'fleetplan: argument --x: …'."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")
