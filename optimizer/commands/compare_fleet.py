"""A running fleet beside plans (`fleetplan compare PLAN RUNNING`): a fleet folder of
`fleetplan import-deployment` holds no costs, routes or hours, only what runs — so the
comparison is of what both have: GPUs per (site, accelerator) and replicas per pool
(site, workload, tier, role, class, accelerator, config).

A plan's replicas vary by hour and the manifests carry one hour's: each plan is read at the
slice the imported manifests were exported at (their ``fleetplan.io/slice``, recorded in
fleet.json) where its horizon has it, else at its busiest slice (the default of
`fleetplan export`); the slice is printed and written beside the figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from optimizer.base.errors import Origin, ScenarioError
from optimizer.base.outputs import COMPARISON, folder_target, write_csv
from optimizer.commands.export.fleet import POOL_KEY, parse_slice, read_fleet
from optimizer.commands.export.importing import FLEET


def is_fleet_folder(path) -> bool:
    """A folder `import-deployment` wrote (its marker, and not a plan's summary)."""
    return (Path(path) / FLEET.marker).is_file() and not (Path(path) / "summary.json").is_file()


@dataclass
class FleetComparison:
    names: list[str]
    slices: dict[str, str]  # name → the slice a plan is read at ("running" for a fleet)
    gpus: pd.DataFrame  # (site, gpu) × name
    pools: pd.DataFrame  # pool key × name: replicas

    @property
    def identical(self) -> bool:
        return all(f.nunique(axis=1).le(1).all() for f in (self.gpus, self.pools))


def read_running(path: Path) -> tuple[pd.Series, pd.Series, str | None]:
    """(GPUs by site and accelerator, replicas by pool, the slice its manifests were of)."""
    for name in ("pools.csv", "fleet.json"):
        if not (path / name).is_file():
            raise ScenarioError(f"this fleet folder lacks {name}; import the manifests again", Origin(str(path)))
    pools = pd.read_csv(path / "pools.csv", keep_default_na=False)
    missing = [c for c in (*POOL_KEY, "replicas", "gpus_per_replica") if c not in pools.columns]
    if missing:
        raise ScenarioError(f"expected the column {missing[0]}", Origin(str(path / "pools.csv")), field=missing[0])
    used = pools.assign(gpus=pools["replicas"] * pools["gpus_per_replica"])
    gpus = used.groupby(["site", "gpu"])["gpus"].sum()
    replicas = pools.set_index(list(POOL_KEY))["replicas"]
    meta = json.loads((path / FLEET.marker).read_text(encoding="utf-8"))
    return gpus, replicas, meta.get("manifest_slice") if isinstance(meta, dict) else None


def read_planned(path: Path, slice_text: str | None) -> tuple[pd.Series, pd.Series, str]:
    """The plan's GPUs by site and accelerator and replicas by pool in one slice (module docstring)."""
    fleet = read_fleet(path)
    t = fleet.busiest_slice()
    if slice_text and slice_text in {"/".join(map(str, s)) for s in fleet.slices}:
        t = parse_slice(slice_text, fleet)
    rows = [(*p.key, p.replicas.get(t, 0), p.replicas.get(t, 0) * p.gpus) for p in fleet.pools if p.replicas.get(t)]
    frame = pd.DataFrame(rows, columns=[*POOL_KEY, "replicas", "gpus"])
    return frame.groupby(["site", "gpu"])["gpus"].sum(), frame.set_index(list(POOL_KEY))["replicas"], \
        "/".join(map(str, t))


def compare_fleet(paths: list[Path], names: list[str]) -> FleetComparison:
    fleets = [p for p in paths if is_fleet_folder(p)]
    recorded = read_running(fleets[0])[2] if fleets else None
    gpus, pools, slices = {}, {}, {}
    for path, name in zip(paths, names):
        if is_fleet_folder(path):
            gpus[name], pools[name], _ = read_running(path)
            slices[name] = "running"
        else:
            gpus[name], pools[name], slices[name] = read_planned(path, recorded)
    return FleetComparison(names, slices, pd.DataFrame(gpus).fillna(0).astype(int).sort_index(),
                           pd.DataFrame(pools).fillna(0).astype(int).sort_index())


def write_fleet_comparison(cmp: FleetComparison, out, inputs) -> Path:
    """compare.csv (section, key, plan, value): gpus by site/accelerator and replicas by pool."""
    out = folder_target(out, COMPARISON, inputs=inputs)
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"section": "slice", "key": "", "plan": n, "value": cmp.slices[n]} for n in cmp.names]
    for (site, gpu), row in cmp.gpus.iterrows():
        rows += [{"section": "gpus", "key": f"{site}/{gpu}", "plan": n, "value": row[n]} for n in cmp.names]
    for key, row in cmp.pools.iterrows():
        rows += [{"section": "replicas", "key": "|".join(map(str, key)), "plan": n, "value": row[n]} for n in cmp.names]
    write_csv(pd.DataFrame(rows), out / "compare.csv")
    return out


def fleet_comparison_text(cmp: FleetComparison) -> str:
    width = max(12, *(len(n) for n in cmp.names))
    cell = "".join
    lines = [f"{'':30s}" + cell(f"{n:>{width + 2}s}" for n in cmp.names),
             f"{'slice':30s}" + cell(f"{cmp.slices[n]:>{width + 2}s}" for n in cmp.names),
             "GPUs by site and accelerator:"]
    for (site, gpu), row in cmp.gpus.iterrows():
        lines.append(f"  {site + '/' + gpu:28s}" + cell(f"{row[n]:>{width + 2},d}" for n in cmp.names))
    differ = cmp.pools[cmp.pools.nunique(axis=1) > 1]
    lines.append(f"replicas: {len(differ)} of {len(cmp.pools)} pools differ" + (", e.g." if len(differ) else ""))
    for key, row in differ.head(8).iterrows():
        name = f"{key[0]} {key[6]} t{key[2]}"
        lines.append(f"  {name[:28]:28s}" + cell(f"{row[n]:>{width + 2},d}" for n in cmp.names))
    if cmp.identical:
        lines.append("no differences")
    return "\n".join(lines)


def compare_running(plans: list[str], out) -> str:
    """`fleetplan compare` with a fleet folder among ``plans``: checked, compared, written to
    ``out`` (if given); the text to print."""
    from optimizer.commands.compare import label

    paths = [Path(d) for d in plans]
    for d in paths:
        if not (d / "summary.json").is_file() and not (d / FLEET.marker).is_file():
            raise ScenarioError("neither a plan folder (summary.json) nor a fleet folder of fleetplan "
                                "import-deployment (fleet.json)", field=str(d))
    if out is not None:
        folder_target(out, COMPARISON, inputs=plans)
    names: list[str] = []
    for d in paths:
        names.append(label(d, names))
    cmp = compare_fleet(paths, names)
    text = fleet_comparison_text(cmp)
    if out:
        write_fleet_comparison(cmp, out, plans)
        text += f"\nwritten: {Path(out) / 'compare.csv'}"
    return text
