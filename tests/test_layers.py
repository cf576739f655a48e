"""The import layers of the code base, pinned: each module may import only from its own layer
or the ones below it, no import circles (lazy imports inside functions included), and no
module imports another's `_private` names.

    base → curves → scenario → instance → formulations → solve → results → folder → commands → cli

`formulations` is the MIP, below the solve; besides itself it may use only the shared
vocabulary of the base layer (units, contract terms), never the rest of `optimizer`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = [
    ("base", ["optimizer", "optimizer.units", "optimizer.contracts", "optimizer.errors", "optimizer.sources",
              "optimizer.outputs"]),
    ("curves", ["optimizer.curves"]),
    ("scenario", ["optimizer.scenario", "optimizer.traces.spec", "optimizer.calibration.params",
                  "optimizer.calibration.files", "optimizer.calibration.tables", "optimizer.calibration.stated"]),
    ("instance", ["optimizer.configs", "optimizer.network", "optimizer.demand", "optimizer.budget", "optimizer.billing",
                  "optimizer.checks", "optimizer.operating", "optimizer.instance", "optimizer.calibration.model",
                  "optimizer.calibration.identify", "optimizer.calibration.fit"]),
    ("formulations", ["formulations"]),
    ("solve", ["optimizer.backends", "optimizer.repair", "optimizer.fleet", "optimizer.solve", "optimizer.baseline",
               "optimizer.diagnosis"]),
    ("results", ["optimizer.results"]),
    ("folder", ["optimizer.folder"]),
    ("commands", ["optimizer.pipeline", "optimizer.verify", "optimizer.stress", "optimizer.operate", "optimizer.compare",
                  "optimizer.sweep", "optimizer.report", "optimizer.traces", "optimizer.calibration", "optimizer.export"]),
    ("cli", ["optimizer.arguments", "optimizer.cli", "fleetplan"]),
]
FORMULATIONS_MAY_USE = {"optimizer", "optimizer.units", "optimizer.contracts"}


def _modules() -> dict[str, Path]:
    out = {}
    for package in ("optimizer", "formulations", "fleetplan"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every project module ``name`` imports, anywhere in the file; ``from pkg import sub``
    counts as importing ``pkg.sub``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


def _layer(name: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"module {name} is in no layer: add it to tests/test_layers.py LAYERS"
    return best[0]


def test_every_module_has_a_layer():
    for name in MODULES:
        _layer(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name):
    mine = _layer(name)
    for dep in _imports(name, MODULES[name]):
        if name.startswith("formulations") and not dep.startswith("formulations"):
            assert dep in FORMULATIONS_MAY_USE, f"{name} imports {dep}: formulations know only the Instance contract"
        assert _layer(dep) <= mine, (f"{name} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[_layer(dep)][0]}), "
                                     "a higher layer")


def test_no_import_circles():
    graph = nx.DiGraph()
    for name, path in MODULES.items():
        graph.add_node(name)
        graph.add_edges_from((name, dep) for dep in _imports(name, path))
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], "import circles: " + "; ".join(" → ".join(c + [c[0]]) for c in cycles[:5])


def test_no_private_names_cross_modules():
    offenders = []
    for path in [*MODULES.values(), *(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                offenders += [f"{path.relative_to(ROOT)}: {a.name} from {node.module}" for a in node.names
                              if a.name.startswith("_")]
    assert offenders == []


def test_the_layers_catch_a_violation():
    """The check itself can fail: a curve importing the scenario would be refused."""
    assert _layer("optimizer.scenario.raw") > _layer("optimizer.curves.roofline")
    assert _layer("optimizer.solve.steps") > _layer("formulations.pools") > _layer("optimizer.instance")
