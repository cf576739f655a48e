"""README's Layout section cannot drift from the tree: the folders it lists are the folders
there are (each package of `optimizer/`, one level below `commands/` and `scenario/` too), every
module it names exists in the folder it is listed under, and every library module is named
under its folder — in `formulations/` as `name.py`, in `optimizer/`'s folders as `name.py` or
the bare name where a line lists its modules in words ("read, derive, table")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout(readme: str | None = None) -> list[tuple[str, str]]:
    """(folder path, its description) for every entry of README's Layout tree."""
    readme = readme if readme is not None else (ROOT / "README.md").read_text()
    section = readme[readme.index("## Layout"):]
    block = section[section.index("```text") + len("```text"):]
    block = block[:block.index("```")]
    entries, parents = [], {}
    for line in block.strip("\n").splitlines():
        m = re.match(r"^( *)(\S+/)(?:\s+(.*))?$", line)
        if m:
            depth = len(m.group(1)) // 2
            parents[depth] = m.group(2)
            entries.append(("".join(parents[d] for d in range(depth + 1)), m.group(3) or ""))
        elif line.strip():
            folder, text = entries[-1]
            entries[-1] = (folder, f"{text} {line.strip()}")
    return entries


def _packages(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def test_layout_lists_every_folder_and_only_those():
    listed = {folder for folder, _ in _layout()}
    for parent in ("optimizer", "optimizer/commands", "optimizer/scenario"):
        actual = {f"{parent}/{name}/" for name in _packages(ROOT / parent)}
        shown = {f for f in listed if f.startswith(parent + "/") and f.count("/") == parent.count("/") + 2}
        assert shown == actual, f"README Layout under {parent}/: missing {actual - shown}, gone {shown - actual}"
    for folder in listed:
        assert (ROOT / folder).is_dir(), f"README Layout names {folder}, which does not exist"


def _misplaced(entries: list[tuple[str, str]]) -> tuple[list[str], int]:
    """Modules named under a folder that does not hold them, and how many were named."""
    wrong, named = [], 0
    for folder, text in entries:
        for module in re.findall(r"\b(\w+\.py)\b", text):
            named += 1
            if not (ROOT / folder / module).is_file():
                wrong.append(f"{folder}{module}")
    return wrong, named


def test_every_module_named_in_the_layout_exists_where_it_is_listed():
    wrong, named = _misplaced(_layout())
    assert wrong == [] and named >= 20


def test_the_check_sees_a_stale_entry():
    """Nesting is read from indentation, so a module listed under the wrong folder is found."""
    stale = "## Layout\n```text\noptimizer/\n  solve/    fleet.py, configs.py\n    nested/  x\n```\n"
    entries = _layout(stale)
    assert [f for f, _ in entries] == ["optimizer/", "optimizer/solve/", "optimizer/solve/nested/"]
    assert _misplaced(entries) == (["optimizer/solve/configs.py"], 2)


def _unnamed(entries: list[tuple[str, str]]) -> list[str]:
    """Modules of `formulations/` and of each `optimizer/` folder the Layout lists that its entry
    (all its lines, wherever the folder appears) does not name."""
    text: dict[str, str] = {}
    for folder, words in entries:
        text[folder] = f"{text.get(folder, '')} {words}"
    missing = []
    for folder, words in sorted(text.items()):
        if not folder.startswith(("optimizer/", "formulations/")):
            continue
        bare = "" if folder.startswith("formulations/") else "?"
        for module in sorted(p.stem for p in (ROOT / folder).glob("*.py") if p.stem not in ("__init__", "__main__")):
            if not re.search(rf"\b{module}(\.py){bare}\b", words):
                missing.append(f"{folder}{module}.py")
    return missing


def test_every_library_module_is_named_under_its_folder():
    assert _unnamed(_layout()) == []


def test_the_check_sees_an_unnamed_module():
    """A formulations module named only in words, and an optimizer module not named at all, are found."""
    modules = ", ".join(p.name for p in sorted((ROOT / "formulations").glob("*.py")) if p.name != "carbon.py")
    entries = [("formulations/", f"{modules}, carbon"), ("optimizer/geography/", "network.py")]
    assert _unnamed(entries) == ["formulations/carbon.py", "optimizer/geography/demand.py"]
