"""The fleet a company already has (`fleet:`) and the years a plan looks ahead (`years:`).

A fleet row is nodes of one accelerator at one site on one contract:

    reserved        signed until ``end`` (from ``start``); its rent is sunk until then
    owned           bought on ``purchased``; its capital is sunk, keeping it pays colocation
                    and energy; retiring it returns its book value (straight line over its life)
                    unless ``residual_usd_per_node`` says otherwise
    ondemand-quota  on-demand nodes the provider has granted: the site's on-demand cap is at least this

A plan year counts a reserved row only if the contract covers the whole year; one that ends
during a year is up for renewal at that year's start (a conservative rule: the plan never
counts on a node for months it does not have it).
"""

from __future__ import annotations

import datetime
from typing import Literal

from pydantic import Field, field_validator, model_validator

from optimizer.scenario.fields import Strict, bounded

CONTRACTS = ("reserved", "owned", "ondemand-quota")
PRICE_SCENARIOS_FILE = "price_scenarios.csv"


def iso_date(value) -> str | None:
    """An ISO 8601 calendar date as text (YYYY-MM-DD), checked."""
    if value is None:
        return None
    text = value.isoformat() if isinstance(value, datetime.date) else str(value)
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"expected a date YYYY-MM-DD, got {text!r}") from None
    return text


def day(text: str) -> datetime.date:
    return datetime.date.fromisoformat(text)


def years_later(d: datetime.date, years: int) -> datetime.date:
    """The same calendar day ``years`` later (29 February: 1 March)."""
    try:
        return d.replace(year=d.year + years)
    except ValueError:
        return datetime.date(d.year + years, 3, 1)


def term_end(first: datetime.date, years: int) -> datetime.date:
    """The last day of a term of ``years`` from ``first``."""
    return years_later(first, years) - datetime.timedelta(days=1)


class FleetRow(Strict):
    """Nodes the company has at one site, on one contract."""

    site: str
    gpu: str
    nodes: int = bounded(ge=1, le=100_000, unit="nodes", why="100,000 nodes is ~10 GW of accelerators")
    contract: Literal[CONTRACTS]
    start: str | None = Field(None, description="reserved: the contract's first day (YYYY-MM-DD)")
    end: str | None = Field(None, description="reserved: the contract's last day (YYYY-MM-DD)")
    usd_per_gpu_hour: float | None = bounded(
        None, ge=0.001, le=10_000, unit="US$/GPU-hour",
        description="reserved: the rent signed (sunk, reported; default the catalogue's price of the nearest term)")
    purchased: str | None = Field(None, description="owned: the purchase date (YYYY-MM-DD)")
    capex_usd_per_node: float | None = bounded(
        None, ge=1_000, le=1e8, unit="US$/node", description="owned: what a node cost (default the owned catalogue)",
        why="a rack-scale system lists at a few million dollars")
    life_years: float | None = bounded(None, ge=1, le=15, unit="years",
                                       description="owned: depreciation life (default the owned catalogue)")
    residual_usd_per_node: float | None = bounded(
        None, ge=0, le=1e8, unit="US$/node", description="owned: what retiring a node returns (default its book value)")

    _dates = field_validator("start", "end", "purchased", mode="before")(lambda v: iso_date(v))

    @model_validator(mode="after")
    def _terms(self):
        if self.contract == "reserved":
            if self.end is None:
                raise ValueError("a reserved row needs its end date (end: YYYY-MM-DD)")
            if self.start is not None and day(self.start) > day(self.end):
                raise ValueError(f"the contract ends ({self.end}) before it starts ({self.start})")
        if self.contract == "owned" and self.purchased is None:
            raise ValueError("an owned row needs its purchase date (purchased: YYYY-MM-DD)")
        return self


class Fleet(Strict):
    """What exists when the plan starts (`FleetRow`); empty: the plan starts from nothing."""

    contracts: list[FleetRow] = Field(default_factory=list)


class PricePath(Strict):
    """A named path of prices: each plan year's factor on the catalogue prices of one
    accelerator, or of every one ('*'); its last factor holds beyond its end."""

    name: str
    gpu: str = "*"
    factors: list[float] = bounded(ge=0.01, le=100, each=True, description="year 1, 2, … price over the catalogue's",
                                   why="a hundredfold move in a year is beyond any market seen")

    @field_validator("factors")
    @classmethod
    def _some(cls, factors):
        if not factors:
            raise ValueError("a price path needs at least one year's factor")
        return factors


class Years(Strict):
    """A plan over several years (``horizon.years`` > 1): each year planned on the scenario's
    slices with its demand, prices, availability and caps; contracts signed in any year run
    their term across the years; the net present cost discounts year k (from 0) by (1 + r)^k."""

    discount_rate: float = bounded(0.08, ge=0, le=0.5, description="a year's discount rate for the net present cost",
                                   why="50 % a year is beyond any cost of capital a planner uses")
    demand_growth_per_year: float | None = bounded(
        None, gt=-1, le=10, description="demand of year k+1 over year k, minus 1 (default: what "
        "demand.growth_per_period compounds to over the year's periods)", why="above −1: demand cannot vanish")
    price_scenario: str = Field("flat", description="the named price path the plan is made under "
                                "(data/price_scenarios.csv, or price_paths); the schedule is costed under every one")
    price_paths: list[PricePath] = Field(default_factory=list, description="more named price paths")
    available_from: dict[str, str] = Field(
        default_factory=dict, description="accelerator → the date it can first be had; offered from the first plan "
        "year that starts on or after it")
    supply_growth_per_year: float = bounded(0.0, ge=-1, le=10, description="supply caps of year k+1 over year k, minus 1")
    power_growth_per_year: float = bounded(0.0, ge=-1, le=10, description="sites' power of year k+1 over year k, minus 1")
    end_value: Literal["full", "prorated"] = Field(
        "full", description="full: a contract signed near the end costs its whole term (what is still committed is "
        "counted in full); prorated: only the years inside the horizon (the rest assumed worth what it costs)")
    hours: list[int] | None = bounded(None, ge=0, le=23, each=True, description="UTC hours each year plans (default "
                                      "horizon.hours); fewer keep a long horizon tractable")

    @field_validator("available_from", mode="before")
    @classmethod
    def _available(cls, value):
        if isinstance(value, dict):
            return {k: iso_date(v) for k, v in value.items()}
        return value
