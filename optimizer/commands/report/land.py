"""Land and country borders for maps, offline.

The shapes are Natural Earth's 1:110m admin-0 countries (public domain), as packaged in
TopoJSON by world-atlas 2.0.2 (`countries-110m.json`, shipped unchanged beside this module;
licence and source in data/SOURCES.md).

TopoJSON stores every boundary once, as an *arc*: a polyline of integer grid steps, each
point the previous one plus a delta, on a grid mapped to degrees by

    lon = x · scale_x + translate_x,   lat = y · scale_y + translate_y.

A polygon ring is a list of arc indices; index ~i (that is −i − 1) is arc i walked
backwards, and consecutive arcs share their joining point. An arc on the rings of two
countries is a land border; an arc on one country's rings only is coast.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LAND_FILE = Path(__file__).with_name("countries-110m.json")


@dataclass(frozen=True)
class Land:
    """Shapes as (n, 2) arrays of (lon, lat) degrees."""

    areas: list[np.ndarray]  # outer rings of every country's polygons (filled as land)
    coast: list[np.ndarray]
    borders: list[np.ndarray]

    def within(self, lon_range: tuple[float, float], lat_range: tuple[float, float]) -> Land:
        """Only the shapes whose bounding box meets the given window (fewer points to draw)."""

        def meets(line: np.ndarray) -> bool:
            lo, hi = line.min(axis=0), line.max(axis=0)
            return hi[0] >= lon_range[0] and lo[0] <= lon_range[1] and hi[1] >= lat_range[0] and lo[1] <= lat_range[1]

        return Land(*([x for x in group if meets(x)] for group in (self.areas, self.coast, self.borders)))


def decode_arcs(topology: dict) -> list[np.ndarray]:
    """Every arc of a quantized topology in degrees (cumulative deltas, then the transform)."""
    scale = np.asarray(topology["transform"]["scale"], dtype=float)
    translate = np.asarray(topology["transform"]["translate"], dtype=float)
    return [np.cumsum(np.asarray(arc, dtype=float), axis=0) * scale + translate for arc in topology["arcs"]]


def ring(arcs: list[np.ndarray], indices: list[int]) -> np.ndarray:
    """The closed ring walked through ``indices`` (~i: arc i backwards), joints not repeated."""
    parts = [arcs[i] if i >= 0 else arcs[~i][::-1] for i in indices]
    return np.concatenate([parts[0]] + [p[1:] for p in parts[1:]])


def _polygons(geometry: dict) -> list[list[list[int]]]:
    if geometry["type"] == "Polygon":
        return [geometry["arcs"]]
    if geometry["type"] == "MultiPolygon":
        return geometry["arcs"]
    return []


def load_land(path: Path = LAND_FILE) -> Land:
    topology = json.loads(path.read_text(encoding="utf-8"))
    arcs = decode_arcs(topology)
    polygons = [p for g in topology["objects"]["countries"]["geometries"] for p in _polygons(g)]
    uses = Counter((i if i >= 0 else ~i) for polygon in polygons for r in polygon for i in r)
    areas = [ring(arcs, polygon[0]) for polygon in polygons]
    coast = [arcs[i] for i, n in sorted(uses.items()) if n == 1]
    borders = [arcs[i] for i, n in sorted(uses.items()) if n > 1]
    return Land(areas, coast, borders)
