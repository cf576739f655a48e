"""The latency graph: metros and sites joined by edges of one-way latency (ms), and the
round-trip time from every metro to every site.

Default graph: every pair of nodes is joined by an edge of
    one_way_ms = great_circle_km · route_factor / fiber_km_per_ms + site_rtt_ms / 2
(fibre rarely runs straight: route_factor is the path inflation; site_rtt_ms is switching and
routing at the two ends). A user in metro m reaching site s sees
    RTT(m, s) = 2 · shortest_path_ms(m, s) + access_rtt_ms   (last mile, user's end).
A GraphML file or an edge CSV (from, to, one_way_ms) can replace the default graph; both are
exported by `write_graphml` / `write_edge_csv`. Node names are ``metro:ID`` and ``site:ID``
(a site may share its metro's id); any other node is a backbone hub and, in GraphML, must
carry the attribute kind="hub".
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from optimizer.base.errors import Origin, ScenarioError, unknown_id_message
from optimizer.base.outputs import atomic_file, unescape_text, write_csv
from optimizer.base.sources import read_text
from optimizer.scenario import Scenario

EARTH_RADIUS_KM = 6371.0088


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance on a sphere of the mean Earth radius:
    d = 2R·asin(√(sin²(Δφ/2) + cos φ₁ cos φ₂ sin²(Δλ/2)))."""
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp = p2 - p1
    dl = np.radians(np.asarray(lon2) - np.asarray(lon1))
    h = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


def model_rtt_ms(distance_km, route_factor: float, fiber_km_per_ms: float, site_rtt_ms: float):
    """Round trip between two data centres under the default model (no access latency)."""
    return 2.0 * np.asarray(distance_km) * route_factor / fiber_km_per_ms + site_rtt_ms


def metro_node(metro_id: str) -> str:
    return f"metro:{metro_id}"


def site_node(site_id: str) -> str:
    return f"site:{site_id}"


def _nodes(s: Scenario) -> dict[str, dict]:
    nodes = {metro_node(m.id): {"kind": "metro", "lat": m.lat, "lon": m.lon} for m in s.metros.values()}
    nodes.update({site_node(x.id): {"kind": "site", "lat": x.lat, "lon": x.lon} for x in s.sites.values()})
    return nodes


def default_graph(s: Scenario) -> nx.Graph:
    """Every metro and site joined to every other by the great-circle edge."""
    spec = s.network
    nodes = _nodes(s)
    ids = list(nodes)
    lat = np.array([nodes[i]["lat"] for i in ids])
    lon = np.array([nodes[i]["lon"] for i in ids])
    dist = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    one_way = dist * spec.route_factor / spec.fiber_km_per_ms + spec.site_rtt_ms / 2.0
    g = nx.Graph()
    g.add_nodes_from((i, nodes[i]) for i in ids)
    rows, cols = np.triu_indices(len(ids), k=1)
    g.add_edges_from(
        (ids[a], ids[b], {"one_way_ms": float(one_way[a, b]), "km": float(dist[a, b])}) for a, b in zip(rows, cols)
    )
    return g


def _check_graph(g: nx.Graph, s: Scenario, origin: Origin) -> nx.Graph:
    known = _nodes(s)
    for node, attrs in g.nodes(data=True):
        if node not in known and attrs.get("kind") != "hub":
            # an edge CSV records the line of each edge: name the first row that uses the node
            lines = sorted(a["line"] for _, _, a in g.edges(node, data=True) if "line" in a)
            where = Origin(origin.file, lines[0], f"edge row naming node '{node}'") if lines else origin
            raise ScenarioError(
                unknown_id_message("node (not metro:ID, site:ID or a node with kind=hub)", node, known), where,
                field="from/to" if lines else None,
            )
    for _, _, attrs in g.edges(data=True):
        attrs.pop("line", None)
    for u, v, attrs in g.edges(data=True):
        ms = attrs.get("one_way_ms")
        if not _plausible_one_way(ms):
            raise ScenarioError(
                f"edge {u}–{v}: expected a one-way latency of {ONE_WAY_RANGE}, got {ms!r}", origin, field="one_way_ms"
            )
    missing = [n for n in known if n not in g]
    if missing:
        raise ScenarioError(f"the graph lacks node(s) {', '.join(missing[:10])}: every metro and site needs a node", origin)
    for node, attrs in known.items():
        g.nodes[node].update(attrs)
    sites = [n for n, a in known.items() if a["kind"] == "site"]
    component = nx.node_connected_component(g, sites[0]) if sites else set()
    cut_off = [n for n in known if n not in component]
    if cut_off:
        raise ScenarioError(
            f"the latency graph is disconnected: {', '.join(sorted(cut_off)[:10])} cannot reach site '{sites[0]}'",
            origin,
        )
    return g


ONE_WAY_MS_MAX = 1000.0  # a geostationary satellite hop is ~270 ms one way; a second is no network path
ONE_WAY_RANGE = f"0 to {ONE_WAY_MS_MAX:,.0f} ms"


def _plausible_one_way(ms) -> bool:
    return isinstance(ms, (int, float)) and bool(0 <= ms <= ONE_WAY_MS_MAX)


def read_edge_csv(path: Path) -> nx.Graph:
    g = nx.Graph()
    reader = csv.DictReader(io.StringIO(read_text(path, "network graph CSV"), newline=""))
    try:
        missing = {"from", "to", "one_way_ms"} - set(reader.fieldnames or [])
        if missing:
            raise ScenarioError(f"missing column(s) {', '.join(sorted(missing))} (expected {EDGE_CSV_HEADER})",
                                Origin(str(path), 1))
        for line, row in enumerate(reader, start=2):
            try:
                ms = float(row["one_way_ms"])
            except (TypeError, ValueError):
                raise ScenarioError("expected a number of milliseconds", Origin(str(path), line), field="one_way_ms") from None
            if not _plausible_one_way(ms):
                raise ScenarioError(f"expected a one-way latency of {ONE_WAY_RANGE}, got {ms}", Origin(str(path), line),
                                    field="one_way_ms")
            ends = [unescape_text((row.get(k) or "").strip()) for k in ("from", "to")]
            if not all(ends):
                raise ScenarioError("expected two node names (metro:ID, site:ID or a hub)", Origin(str(path), line),
                                    field="from/to")
            g.add_edge(*ends, one_way_ms=ms, line=line)
    except csv.Error as exc:
        raise ScenarioError(f"not a readable CSV file: {exc}", Origin(str(path), reader.line_num or None)) from None
    return g


def read_graph(path: Path) -> nx.Graph:
    if path.suffix.lower() == ".graphml":
        text = read_text(path, "GraphML file")
        try:
            g = nx.parse_graphml(text)
        except Exception as exc:  # networkx raises several parser errors; all mean a bad file
            raise ScenarioError(f"cannot read GraphML: {exc}", Origin(str(path))) from exc
        for _, _, attrs in g.edges(data=True):
            if "one_way_ms" in attrs:
                attrs["one_way_ms"] = float(attrs["one_way_ms"])
        return nx.Graph(g)
    return read_edge_csv(path)


def build_graph(s: Scenario, base_dir: Path | None = None) -> nx.Graph:
    """The scenario's graph: loaded from ``network.graph`` if given, else the default."""
    if not s.network.graph:
        return default_graph(s)
    path = Path(s.network.graph)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.exists():
        raise ScenarioError("the network graph file does not exist", Origin(str(path)), field="network.graph")
    return _check_graph(read_graph(path), s, Origin(str(path)))


def rtt_matrix(g: nx.Graph, s: Scenario) -> pd.DataFrame:
    """RTT ms, metros × sites: 2 · shortest one-way path + access_rtt_ms."""
    metros, sites = list(s.metros), list(s.sites)
    out = np.full((len(metros), len(sites)), np.inf)
    for j, site in enumerate(sites):
        dist = nx.single_source_dijkstra_path_length(g, site_node(site), weight="one_way_ms")
        out[:, j] = [2.0 * dist.get(metro_node(m), np.inf) + s.network.access_rtt_ms for m in metros]
    unreachable = np.isinf(out).all(axis=1)
    if unreachable.any():
        lost = [m for m, bad in zip(metros, unreachable) if bad]
        raise ScenarioError(f"metro(s) {', '.join(lost[:10])} cannot reach any site in the latency graph", Origin("network"))
    return pd.DataFrame(out, index=pd.Index(metros, name="metro"), columns=pd.Index(sites, name="site"))


def rtt_long(rtt: pd.DataFrame) -> pd.DataFrame:
    """Long form (from, to, rtt_ms)."""
    out = rtt.stack().rename("rtt_ms").reset_index()
    return out.rename(columns={"metro": "from", "site": "to"})


EDGE_CSV_HEADER = "from,to,one_way_ms"
RTT_CSV_HEADER = "from,to,rtt_ms"


def write_graphml(g: nx.Graph, path: Path) -> None:
    with atomic_file(Path(path)) as tmp:
        nx.write_graphml(g, tmp)


def write_edge_csv(g: nx.Graph, path: Path) -> None:
    rows = [(u, v, f"{attrs['one_way_ms']:.6f}") for u, v, attrs in g.edges(data=True)]
    write_csv(pd.DataFrame(rows, columns=EDGE_CSV_HEADER.split(",")), Path(path))
