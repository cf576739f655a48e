"""Helpers for the tests that read exported manifests (test_export.py, test_plan.py)."""

from __future__ import annotations

from pathlib import Path

import yaml


def manifest_kind(doc: dict) -> str:
    """The schema a manifest validates against (`optimizer.commands.export.validate.SCHEMAS`)."""
    if "servingEngineSpec" in doc:
        return "production-stack values"
    if "service" in doc and "resources" in doc:
        return "SkyServe service"
    return doc["kind"]


def manifests_in(folder: Path):
    """(path, document) for every YAML document one level below ``folder``."""
    for path in sorted(folder.glob("*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            yield path, doc
