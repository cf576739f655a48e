"""The lines `fleetplan export` and `fleetplan import-deployment` print: what was written
where, and how an imported fleet differs from its plan."""

from __future__ import annotations


def export_text(to: str, ctx, out, from_plan) -> str:
    """Manifests of ``to`` for the fleet of ``ctx``, written to ``out`` (with a rollout from ``from_plan``)."""
    sites = sorted({p.site for p in ctx.fleet.pools})
    return (f"{to} manifests of {len(ctx.fleet.deployments())} deployments at {len(sites)} sites "
            f"(replicas of slice {ctx.slice_text()}; bounds of every hour in each site's bounds.csv) written to {out}"
            + ("; rollout.csv and steps/ hold the rollout" if from_plan else ""))


def import_text(tables: dict, meta: dict, out, against) -> str:
    """The imported pools written to ``out``, and their difference from the plan ``against``."""
    pools = tables["pools"]
    lines = [f"{len(pools)} pools, {int((pools['replicas'] * pools['gpus_per_replica']).sum()):,} GPUs at "
             f"{pools['site'].nunique()} sites written to {out}"]
    if against:
        diff = tables["against"]
        lines.append(f"against {against} at {meta['slice']}: {int((diff['difference'] != 0).sum())} pools differ "
                     f"({int(diff['difference'].clip(lower=0).sum())} replicas more, "
                     f"{int((-diff['difference']).clip(lower=0).sum())} fewer than planned) — against.csv")
    return "\n".join(lines)
