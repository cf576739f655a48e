"""Writing an export folder: every manifest rendered and validated first, then the folder
written under a temporary name and renamed (`optimizer.base.outputs`), so a refused pool or an
interrupt leaves nothing half-written.

Layout: ``export.json`` (what was exported: plan, format, slice, files, warnings), and per
site a folder with one manifest per deployment (SkyServe: per pool) and ``bounds.csv``: every
pool's replicas, floor and ceiling in every slice of the horizon (`bounds`).

--out follows fleetplan's rules: an absent path, an empty folder, or a previous export
folder holding only what its export.json lists.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from optimizer.base.outputs import FolderKind, atomic_folder, folder_target, spreadsheet_safe
from optimizer.commands.export import dynamo, llmd, skyserve, vllm_stack
from optimizer.commands.export.common import BOUNDS_FILE, ExportJob
from optimizer.commands.export.validate import check

FORMATS = {"dynamo": dynamo, "llm-d": llmd, "vllm-stack": vllm_stack, "skyserve": skyserve}
MARKER = "export.json"


def export_kind(text) -> FolderKind:
    """The export folder kind, owning what a previous export's marker lists."""
    listed: set[str] = {MARKER, "rollout.csv"}
    marker = Path(str(text)).expanduser() / MARKER
    if marker.is_file():
        try:
            listed |= set(json.loads(marker.read_text(encoding="utf-8")).get("entries", []))
        except (ValueError, AttributeError, OSError):
            pass  # not ours after all: folder_target refuses its other files
    return FolderKind("export folder", MARKER, frozenset(listed))


def target(text, inputs) -> Path:
    return folder_target(text, export_kind(text), inputs=inputs)


def _dump(docs: list[dict]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)


def render(ctx: ExportJob, fmt: str) -> dict[str, str]:
    """Relative path → text of every manifest, each validated against its schema."""
    module = FORMATS[fmt]
    out: dict[str, str] = {}
    for dep in ctx.fleet.deployments():
        docs = module.render(dep, ctx)
        names = [dep.name] if fmt != "skyserve" else [d["name"] for _, d in docs]
        groups = [docs] if fmt != "skyserve" else [[d] for d in docs]
        for name, group in zip(names, groups):
            path = f"{dep.site}/{name}.yaml"
            for kind, doc in group:
                check(kind, doc, path)
            out[path] = _dump([doc for _, doc in group])
    return out


def site_bounds(ctx: ExportJob) -> dict[str, str]:
    """Relative path → bounds.csv text of each site."""
    names = {p.key: p.name for p in ctx.fleet.pools}
    table = ctx.bounds.copy()
    table.insert(7, "service", [names[tuple(r)] for r in table[list(table.columns[:7])].itertuples(index=False)])
    return {f"{site}/{BOUNDS_FILE}": spreadsheet_safe(rows).to_csv(index=False)
            for site, rows in table.groupby("site", sort=True)}


def write_export(files: dict[str, str], meta: dict, out) -> Path:
    """Write ``files`` (relative path → text) and export.json into the folder ``out``."""
    out = Path(out).expanduser().resolve()
    with atomic_folder(out) as tmp:
        for rel, text in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        entries = sorted({rel.split("/")[0] for rel in files} | {MARKER})  # top-level names this export owns
        (tmp / MARKER).write_text(json.dumps({**meta, "entries": entries, "files": sorted(files)}, indent=2),
                                  encoding="utf-8")
    return out
