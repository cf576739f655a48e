"""Spot capacity: the `spot:` section and the accelerators it adds.

Opt-in: with ``spot: {enabled: true}`` every selected accelerator that has a row in the
catalogue's ``spot.csv`` (for ``spot.provider``, default ``reference``) is offered a second
time as ``<gpu>-spot`` (`optimizer.base.spot`): the same hardware, no committed terms, rented
per hour at the expected price of a planned spot node-hour

    p_spot,eff = a · (1 − d) · p_od + (1 − a) · p_od = p_od · (1 − a · d)

where d is the discount below on-demand and a the share of hours a zone has spot capacity
(× ``availability_factor``): while it has, the node costs the spot price; while it has not,
the plan rents the same node on demand (the fallback). A site offers at most
``nodes_share_of_ondemand`` × its on-demand cap of spot nodes. Workloads with
``spot_allowed: false`` get no pools on spot accelerators (`optimizer.instance.pools`); the
states that lose a site's spot zone are added by the instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd
from pydantic import field_validator

from optimizer.base.errors import ScenarioError
from optimizer.base.sources import shipped_data_dir
from optimizer.base.spot import spot_id
from optimizer.scenario.catalogue import Supply
from optimizer.scenario.fields import Strict, bounded, fraction_before

SPOT_FILE = "spot.csv"


class Spot(Strict):
    """Spot (preemptible) capacity the plan may rent, and how often it goes."""

    enabled: bool = False
    provider: str = "reference"
    discount_vs_ondemand: float | None = bounded(
        None, ge=0, lt=1, description="spot price below on-demand, as a fraction; empty: spot.csv's per accelerator")
    availability: float | None = bounded(
        None, gt=0, le=1, description="share of hours a zone has spot capacity; empty: spot.csv's per accelerator")
    availability_factor: float = bounded(
        1.0, gt=0, le=1, description="every availability × this (`stress --perturb spot.availability_factor=×0.5`)")
    notice_s: float | None = bounded(
        None, ge=0, le=3600, unit="s", description="warning before a spot node is taken; empty: spot.csv's",
        why="AWS gives 120 s, Azure and GCP 30 s, some clouds none")
    nodes_share_of_ondemand: float = bounded(
        1.0, ge=0, le=10, description="spot nodes a site offers at most, × its on-demand cap (assumed)")
    sites: list[str] | None = None  # the sites whose spot is offered (empty: all)

    _fractions = field_validator("discount_vs_ondemand", "availability", "availability_factor",
                                 mode="before")(fraction_before)


@dataclass(frozen=True)
class SpotTerm:
    """One accelerator's spot contract, resolved."""

    gpu: str  # the hardware
    discount_vs_ondemand: float
    availability: float  # share of hours a zone has capacity, after the factor
    notice_s: float


@cache
def _catalogue(path: Path) -> pd.DataFrame:
    return pd.read_csv(path)


def spot_terms(s) -> dict[str, SpotTerm]:
    """gpu → its spot term (the scenario's selected accelerators that spot.csv prices for the
    section's provider); empty where spot is off."""
    spot = s.spot
    if not spot.enabled:
        return {}
    path = shipped_data_dir() / SPOT_FILE
    rows = _catalogue(path)
    rows = rows[rows["provider"] == spot.provider]
    if rows.empty:
        known = sorted(set(_catalogue(path)["provider"]))
        raise ScenarioError(f"spot.provider '{spot.provider}' has no rows in {SPOT_FILE}; expected one of {known}",
                            field="spot.provider")
    out = {}
    for r in rows.itertuples():
        if r.gpu not in s.accelerators:
            continue
        a = spot.availability if spot.availability is not None else float(r.availability)
        out[r.gpu] = SpotTerm(
            r.gpu,
            spot.discount_vs_ondemand if spot.discount_vs_ondemand is not None else float(r.discount_vs_ondemand),
            a * spot.availability_factor,
            spot.notice_s if spot.notice_s is not None else float(r.notice_s))
    return out


def effective_usd_per_gpu_hour(ondemand: float, term: SpotTerm) -> float:
    """p_od · (1 − a · d): spot while the zone has it, on-demand fallback while not."""
    return ondemand * (1.0 - term.availability * term.discount_vs_ondemand)


def with_spot(s):
    """The scenario with ``<gpu>-spot`` accelerators, prices and supply added (itself where
    spot is off)."""
    terms = spot_terms(s)
    if not terms:
        return s
    unknown = [x for x in s.spot.sites or [] if x not in s.sites]
    if unknown:
        raise ScenarioError(f"spot.sites names '{unknown[0]}', not a site of the scenario; expected one of "
                            f"{sorted(s.sites)}", field="spot.sites")
    sites = set(s.spot.sites or s.sites)
    accelerators, prices, supply = dict(s.accelerators), dict(s.prices), {k: dict(v) for k, v in s.supply.items()}
    for g, term in sorted(terms.items()):
        clone = spot_id(g)
        a, price = s.accelerators[g], s.prices[g]
        accelerators[clone] = a.model_copy(update={"id": clone, "name": f"{a.name} (spot)"})
        reserved = {f: None for f in type(price).model_fields if f.startswith("reserved_")}
        prices[clone] = price.model_copy(update={
            "gpu": clone, "ondemand_usd_per_gpu_hour": effective_usd_per_gpu_hour(price.ondemand_usd_per_gpu_hour, term),
            **reserved})
        for site in sorted(sites):
            row = s.supply.get(site, {}).get(g)
            if row is not None:
                nodes = math.floor(row.ondemand_nodes_max * s.spot.nodes_share_of_ondemand + 1e-9)
                supply[site][clone] = Supply(site=site, gpu=clone, reserved_nodes_max=0,
                                                ondemand_nodes_max=nodes)
    return s.model_copy(update={"accelerators": accelerators, "prices": prices, "supply": supply})
