"""Manifests of the four formats read back into a plan-shaped fleet.

Each file is YAML (several documents allowed) and recognised by what it holds: a
DynamoGraphDeployment or LLMInferenceService by apiVersion and kind (Dynamo's adapters and
requests carry no pool and are skipped), production-stack values by servingEngineSpec, a
SkyServe service by its service section. A pool's site is its fleetplan.io/site label, else
the name of the folder the manifest sits in; its accelerator the fleetplan.io/accelerator node
label; its config, tier and class the fleetplan annotations (made from the native fields where
absent). The fleet folder holds pools.csv (one row per pool, pools.csv's key columns plus
GPUs, TP, nodes and replicas), gpus.csv (GPUs by site and accelerator) and fleet.json; with a
plan to hold it against, against.csv (planned and running replicas of every pool in the slice
the manifests were exported at, or --slice).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import yaml

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.outputs import FolderKind, atomic_folder, folder_target, spreadsheet_safe
from optimizer.base.sources import check_expansion, read_text
from optimizer.commands.export import dynamo, llmd, skyserve, vllm_stack
from optimizer.commands.export.common import Running
from optimizer.commands.export.fleet import POOL_KEY

FLEET = FolderKind("fleet folder", "fleet.json", frozenset({"fleet.json", "pools.csv", "gpus.csv", "against.csv"}))


def _reader(doc: dict):
    kind, api = doc.get("kind"), str(doc.get("apiVersion", ""))
    if api.startswith("nvidia.com/") and kind and kind.startswith("DynamoGraphDeployment"):
        return dynamo.read
    if kind == "LLMInferenceService":
        return llmd.read
    if "servingEngineSpec" in doc:
        return vllm_stack.read
    if "service" in doc and "resources" in doc:
        return skyserve.read
    return None


def read_manifests(paths) -> list[Running]:
    """Every pool the manifests run; a file of none of the four formats is an error."""
    out: list[Running] = []
    for path in map(Path, paths):
        text = read_text(path, "manifest (YAML)")
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            raise ScenarioError(f"not valid YAML ({getattr(exc, 'problem', exc)})",
                                Origin(str(path), line + 1 if line is not None else None)) from None
        for i, doc in enumerate(docs):
            reader = _reader(doc) if isinstance(doc, dict) else None
            if reader is None:
                raise ScenarioError("not a manifest of a format fleetplan reads (a DynamoGraphDeployment, an "
                                    "LLMInferenceService, production-stack Helm values or a SkyServe service)",
                                    Origin(str(path), label=f"document {i + 1}"))
            check_expansion(doc, Origin(str(path)))
            try:
                out += reader(doc, str(path), path.resolve().parent.name)
            except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                raise ScenarioError(f"a field fleetplan reads has an unexpected value ({type(exc).__name__}: "
                                    f"{str(exc)[:80]})", Origin(str(path), label=f"document {i + 1}")) from None
    if not out:
        raise ScenarioError("the manifests run no pool", Origin(", ".join(map(str, paths))[:200]))
    return out


def slices_of(paths) -> set[str]:
    """The slices (PERIOD/DAY_TYPE/HOUR) the manifests say their replicas are of."""
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("fleetplan.io/slice", "FLEETPLAN_SLICE") and isinstance(v, str):
                    found.add(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for path in map(Path, paths):
        for doc in yaml.safe_load_all(read_text(path, "manifest (YAML)")):
            walk(doc)
    return found


def fleet_meta(paths) -> tuple[dict, set[str]]:
    """fleet.json's content (the manifests, and the slice they were exported at where they
    name one) and the slices they name."""
    recorded = slices_of(paths)
    return ({"manifests": [str(m) for m in paths],
             "manifest_slice": next(iter(recorded)) if len(recorded) == 1 else None}, recorded)


def fleet_tables(pools: list[Running]) -> dict[str, pd.DataFrame]:
    frame = pd.DataFrame([asdict(p) for p in pools])
    dup = frame.duplicated(list(POOL_KEY), keep=False)
    if dup.any():
        row = frame[dup].iloc[0]
        raise ScenarioError(f"pool {row['config']} at {row['site']} (tier {row['tier']}, class {row['speed']}) appears "
                            "in more than one manifest", Origin(row["manifest"]), field="fleetplan.io/config")
    frame = frame.sort_values(list(POOL_KEY)).reset_index(drop=True)
    gpus = (frame.assign(gpus=frame["replicas"] * frame["gpus_per_replica"])
            .groupby(["site", "gpu"], as_index=False)["gpus"].sum())
    return {"pools": frame, "gpus": gpus}


def against_plan(pools: pd.DataFrame, fleet, t) -> pd.DataFrame:
    """Planned (slice ``t``) and running replicas of every pool in either."""
    planned = pd.DataFrame([(*p.key, p.replicas.get(t, 0)) for p in fleet.pools],
                           columns=[*POOL_KEY, "planned"])
    planned = planned[planned["planned"] > 0]
    running = pools[list(POOL_KEY) + ["replicas"]].rename(columns={"replicas": "running"})
    both = planned.merge(running, on=list(POOL_KEY), how="outer").fillna({"planned": 0, "running": 0})
    both[["planned", "running"]] = both[["planned", "running"]].astype(int)
    both["difference"] = both["running"] - both["planned"]
    return both.sort_values(list(POOL_KEY)).reset_index(drop=True)


def write_fleet(tables: dict[str, pd.DataFrame], meta: dict, out) -> Path:
    out = Path(out).expanduser().resolve()
    with atomic_folder(out) as tmp:
        for name, frame in tables.items():
            spreadsheet_safe(frame).to_csv(tmp / f"{name}.csv", index=False)
        (tmp / "fleet.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return out


def target(text, inputs) -> Path:
    return folder_target(text, FLEET, inputs=inputs)
