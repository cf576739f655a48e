"""From a plan folder to the manifests of the serving stacks teams deploy with, and back.

- `export_plan`: per site, a manifest per deployment for NVIDIA Dynamo, llm-d (KServe's
  LLMInferenceService), vLLM production-stack (Helm values) or SkyServe, with the
  autoscaler bounds of every pool and hour (`bounds`), each manifest validated offline
  against its project's vendored schema (`validate`, schemas/README.md);
- `rollout`: the steps from one plan to the next in a safe order;
- `importing`: manifests of these formats read back into a plan-shaped fleet.

Self-contained: it reads plan folders through `optimizer.folder.read` only.
"""

from __future__ import annotations

from optimizer.export.bounds import bounds_table
from optimizer.export.common import Context
from optimizer.export.fleet import read_fleet
from optimizer.export.write import FORMATS, render, site_bounds, write_export


def export_plan(plan_dir, fmt: str, out, *, slice_text: str | None = None, model_repos=None, infra=None,
                strict: bool = False) -> tuple:
    """Export a plan folder; returns (output folder, context with its warnings)."""
    from optimizer.export.fleet import parse_slice

    fleet = read_fleet(plan_dir)
    t = parse_slice(slice_text, fleet) if slice_text else fleet.busiest_slice()
    ctx = Context(fleet, t, bounds_table(fleet), dict(model_repos or {}), dict(infra or {}), strict)
    files = {**render(ctx, fmt), **site_bounds(ctx, fmt)}
    meta = {"plan": str(fleet.plan_dir), "format": fmt, "slice": ctx.slice_text(), "warnings": ctx.warnings}
    return write_export(files, meta, out), ctx


__all__ = ["FORMATS", "export_plan"]
