"""The import layers of the code base, pinned by folder: each module may import only from its
own layer or the ones below it, no import circles (lazy imports inside functions included), and
no module imports another's `_private` names.

    base → scenario → curves → serving → geography → instance → formulations → solve → results
         → folder → commands → cli

(the order of ../shared/DESIGN.md's layout: the curves may read the scenario's types, the
scenario never the curves).

A layer is a folder: `optimizer/<layer>/` (the package `optimizer` itself is the base), and
`formulations/` — the MIP, which imports nothing of `optimizer`: it knows only the `Instance`
contract. `fleetplan/` is the notebook facade over the commands, at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["base", "scenario", "curves", "serving", "geography", "instance", "formulations", "solve", "results",
          "folder", "commands", "cli"]
LOOSE = {"optimizer": "base", "fleetplan": "cli"}  # the two packages that are not a layer's folder


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
    """The layer of a module, from its folder: ``optimizer.<layer>…``, ``formulations…``."""
    parts = name.split(".")
    if name in LOOSE:
        folder = LOOSE[name]
    elif parts[0] == "formulations":
        folder = "formulations"
    elif parts[0] == "fleetplan":
        folder = LOOSE["fleetplan"]
    else:
        folder = parts[1] if len(parts) > 1 else None
    assert folder in LAYERS, (f"module {name} is in no layer's folder: put it in one of optimizer/"
                              f"{{{', '.join(f for f in LAYERS if f != 'formulations')}}}/")
    return LAYERS.index(folder)


def _violations(name: str, deps: set[str]) -> list[str]:
    """What is wrong with module ``name`` importing ``deps``: an import of a higher layer, or
    formulations importing anything of optimizer."""
    mine, out = _layer(name), []
    for dep in sorted(deps):
        if name.startswith("formulations") and dep.split(".")[0] == "optimizer":
            out.append(f"{name} imports {dep}: formulations know only the Instance contract")
        elif _layer(dep) > mine:
            out.append(f"{name} ({LAYERS[mine]}) imports {dep} ({LAYERS[_layer(dep)]}), a higher layer")
    return out


def test_every_module_has_a_layer():
    for name in MODULES:
        _layer(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name):
    assert _violations(name, _imports(name, MODULES[name])) == []


def test_no_loose_modules_beyond_a_handful():
    """`ls optimizer/` shows the layers: every module of optimizer sits in a layer's folder."""
    loose = sorted(p.name for p in (ROOT / "optimizer").glob("*.py") if p.name != "__init__.py")
    assert loose == []
    folders = sorted(p.name for p in (ROOT / "optimizer").iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(f for f in LAYERS if f != "formulations")


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


def test_the_layers_catch_a_violation(tmp_path):
    """The check itself fails: a synthetic curve module importing the solve, and a
    formulation importing the units, are refused through the same parsing and check as the
    real modules; an import downwards passes."""
    upward = tmp_path / "roofline_upward.py"
    upward.write_text("from optimizer.instance.build import Instance\n\ndef f():\n    import optimizer.solve.fleet\n")
    deps = {d for d in _imports("optimizer.curves.roofline", upward)}
    assert deps >= {"optimizer.instance.build", "optimizer.solve.fleet"}
    found = _violations("optimizer.curves.roofline", deps)
    assert len(found) == 2 and all("a higher layer" in v for v in found)
    reaching = tmp_path / "pools_reaching.py"
    reaching.write_text("from optimizer.base.units import Role\n")
    assert _violations("formulations.pools", _imports("formulations.pools", reaching)) == [
        "formulations.pools imports optimizer.base.units: formulations know only the Instance contract"]
    downward = tmp_path / "steps_downward.py"
    downward.write_text("from formulations import build_program\nfrom optimizer.instance.build import Instance\n")
    deps = _imports("optimizer.solve.steps", downward)
    assert deps == {"formulations", "optimizer.instance.build"} and _violations("optimizer.solve.steps", deps) == []
