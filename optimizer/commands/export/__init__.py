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

from optimizer.commands.export.bounds import bounds_table
from optimizer.commands.export.common import ExportJob
from optimizer.commands.export.fleet import read_fleet
from optimizer.commands.export.write import FORMATS, render, site_bounds, write_export


def export_plan(plan_dir, fmt: str, out, *, slice_text: str | None = None, model_repos=None, infra=None,
                strict: bool = False, from_plan=None) -> tuple:
    """Export a plan folder (with ``from_plan``, also the rollout from that older plan);
    returns (output folder, context with its warnings)."""
    from optimizer.base.errors import Origin, ScenarioError
    from optimizer.commands.export.fleet import parse_slice

    fleet = read_fleet(plan_dir)
    t = parse_slice(slice_text, fleet) if slice_text else fleet.busiest_slice()
    ctx = ExportJob(fleet, t, bounds_table(fleet), dict(model_repos or {}), dict(infra or {}), strict)
    try:
        files = {**render(ctx, fmt), **site_bounds(ctx)}
        if from_plan is not None:
            files.update(_rollout_files(read_fleet(from_plan), ctx, fmt))
    except ScenarioError as exc:
        if exc.origin is None:  # a pool the format cannot express: name the plan's table
            exc.origin = Origin(str(fleet.plan_dir / "pools.csv"))
        raise
    routing = prompt_routing(fleet.scenario)
    for parent in sorted({r["workload"] for r in routing}):
        ctx.warnings.append(f"{parent} is split by prompt length: the gateway must send each request to the "
                            "deployments of the part its prompt falls in (" + "; ".join(
                                f"{r['deployments_of']}: {r['prompt_tokens_from']:,.0f} ≤ prompt tokens"
                                + (f" < {r['prompt_tokens_below']:,.0f}" if r["prompt_tokens_below"] else "")
                                for r in routing if r["workload"] == parent) + "; export.json prompt_routing)")
    meta = {"plan": str(fleet.plan_dir), "format": fmt, "slice": ctx.slice_text(), "warnings": ctx.warnings,
            "from_plan": str(from_plan) if from_plan is not None else None, "prompt_routing": routing}
    return write_export(files, meta, out), ctx


def prompt_routing(s) -> list[dict]:
    """The gateway's rules for workloads the plan split by prompt length: per part, the parent
    its requests arrive as and the prompt lengths it takes (below: None, no upper end)."""
    return [{"workload": w.prompt_part.parent, "deployments_of": k, "prompt_tokens_from": w.prompt_part.from_tokens,
             "prompt_tokens_below": w.prompt_part.below_tokens}
            for k, w in sorted(s.workloads.items()) if w.prompt_part is not None]


def _rollout_files(old, ctx: ExportJob, fmt: str) -> dict[str, str]:
    """rollout.csv and, per step that changes pools, the manifests of the fleet after it and
    their bounds.csv, each pool pinned to its step's replicas (floor = ceiling) while the
    rollout runs."""
    from dataclasses import replace

    from optimizer.base.errors import ScenarioError
    from optimizer.base.outputs import spreadsheet_safe
    from optimizer.commands.export import rollout

    new, t = ctx.fleet, ctx.slice
    s = new.scenario
    for p in old.pools:
        if p.workload not in s.workloads or p.gpu not in s.accelerators:
            raise ScenarioError(f"the old plan's pool {p.config} at {p.site} has a workload or accelerator the new "
                                "plan's scenario lacks; a rollout needs both plans to share them", field="workload")
    plan = rollout.steps(old, new, t)
    files = {"rollout.csv": spreadsheet_safe(rollout.table(old, new, t, plan)).to_csv(index=False)}
    both = [*new.pools, *old.pools]
    for i, step in enumerate(plan, 1):
        if step.name == "switch-routing":
            continue
        pools = rollout.fleet_at(both, step.replicas, t)
        pinned = bounds_table(replace(new, pools=pools, slices=[t]))
        pinned["floor"] = pinned["ceiling"] = pinned["replicas"]
        step_ctx = ExportJob(replace(new, pools=pools, slices=[t]), t, pinned, ctx.model_repos, ctx.infra, ctx.strict)
        step_files = {**render(step_ctx, fmt), **site_bounds(step_ctx)}
        files.update({f"steps/{i}-{step.name}/{rel}": text for rel, text in step_files.items()})
    return files


__all__ = ["FORMATS", "export_plan"]
