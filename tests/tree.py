"""What a command may touch: snapshots of a folder tree, compared before and after."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def snapshot(root: Path) -> dict[str, str]:
    """Relative path → content hash (files) or "dir" (folders), symlinks not followed."""
    out = {}
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        out[rel] = "dir"
        for name in files:
            path = Path(folder) / name
            out[os.path.join(rel, name)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "other"
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Paths added, removed or changed."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
