"""Larger scenarios for the scale ladder, grown from the shipped catalogues.

The catalogue holds 72 metros and 24 sites. Larger cases add synthetic *satellite* metros
(a share of a real metro's population, 40–250 km away, same time zone) and synthetic
second sites in real data-centre markets (20–60 km from the first, same region and prices).
Everything synthetic is named with a ``~`` suffix so no figure can be mistaken for a
catalogue row; the rows carry source "synthetic (benchmark only)".
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from optimizer.scenario import DATA_DIR

REFERENCE_SITES = ["ashburn", "chicago", "dallas", "phoenix", "oregon", "montreal", "london", "frankfurt",
                   "amsterdam", "stockholm"]


def _offset(lat: float, lon: float, km: float, bearing: float) -> tuple[float, float]:
    dlat = km / 111.0 * math.cos(bearing)
    dlon = km / (111.0 * max(math.cos(math.radians(lat)), 0.2)) * math.sin(bearing)
    return round(lat + dlat, 4), round(((lon + dlon + 180) % 360) - 180, 4)


def grow_metros(n: int, rng: np.random.Generator, continents: set[str] | None = None) -> pd.DataFrame:
    base = pd.read_csv(DATA_DIR / "metros.csv")
    if continents:
        base = base[base["continent"].isin(continents)]
    rows = base.to_dict("records")
    k = 0
    while len(rows) < n:
        parent = base.iloc[k % len(base)].to_dict()
        lat, lon = _offset(parent["lat"], parent["lon"], rng.uniform(40, 250), rng.uniform(0, 2 * math.pi))
        share = rng.uniform(0.05, 0.3)
        rows.append({**parent, "id": f"{parent['id']}~{k // len(base) + 1}", "name": f"{parent['name']} satellite",
                     "lat": lat, "lon": lon, "population": int(parent["population"] * share),
                     "source": "synthetic (benchmark only)", "assumed_fields": "lat;lon;population"})
        k += 1
    return pd.DataFrame(rows[:n])


def grow_sites(n: int, rng: np.random.Generator, metros: pd.DataFrame, allowed: list[str] | None = None):
    sites = pd.read_csv(DATA_DIR / "sites.csv")
    supply = pd.read_csv(DATA_DIR / "supply.csv")
    if allowed:
        sites = sites[sites["id"].isin(allowed)]
    sites = sites[sites["metro"].isin(set(metros["id"]))]
    rows, supply_rows = sites.to_dict("records"), supply[supply["site"].isin(set(sites["id"]))].to_dict("records")
    k = 0
    while len(rows) < n:
        parent = sites.iloc[k % len(sites)].to_dict()
        lat, lon = _offset(parent["lat"], parent["lon"], rng.uniform(20, 60), rng.uniform(0, 2 * math.pi))
        new_id = f"{parent['id']}~{k // len(sites) + 1}"
        rows.append({**parent, "id": new_id, "lat": lat, "lon": lon, "source": "synthetic (benchmark only)",
                     "assumed_fields": "lat;lon"})
        supply_rows += [{**r, "site": new_id, "source": "synthetic (benchmark only)"}
                        for r in supply[supply["site"] == parent["id"]].to_dict("records")]
        k += 1
    return pd.DataFrame(rows[:n]), pd.DataFrame(supply_rows)


def write_case(folder: Path, metros: int, sites: int, seed: int = 7, hours: list[int] | None = None,
               continents: set[str] | None = None, site_ids: list[str] | None = None) -> Path:
    """Write a scenario with ``metros`` metros and ``sites`` sites (catalogue first, then
    synthetic), the reference workloads and accelerators; return the YAML path."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    m = grow_metros(metros, rng, continents)
    s, sup = grow_sites(sites, rng, m, site_ids)
    s = s[s["id"].isin(set(s["id"]))]
    sup = sup[sup["site"].isin(set(s["id"]))]
    m.to_csv(folder / "metros.csv", index=False)
    s.to_csv(folder / "sites.csv", index=False)
    sup.to_csv(folder / "supply.csv", index=False)
    reference = yaml.safe_load((DATA_DIR / "scenarios" / "reference.yaml").read_text())
    doc = {
        "name": f"ladder-{metros}x{sites}",
        "horizon": reference["horizon"] | ({"hours": hours} if hours else {}),
        "accelerators": reference["accelerators"],
        "prices": reference["prices"],
        "metros": "metros.csv",
        "sites": "sites.csv",
        "supply": "supply.csv",
        "workloads": reference["workloads"],
        "demand": reference["demand"],
        "network": reference["network"],
        "policy": reference.get("policy", {}),
    }
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
