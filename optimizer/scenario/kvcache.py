"""The `kv_cache:` section: KV-cache tiers per site and each workload's prefix reuse.

Opt-in: without the section (or with ``tiers: []``) the prompt cache is each workload's
``prompt_cache_hit_rate`` and ``shared_prefix_tokens``, as before. With it, e.g.

    kv_cache:
      tiers: [hbm, dram, nvme, store]          # rows of data/kv_tiers.csv, fastest first
      # tiers: [{id: nvme, usd_per_gb_month: 0.05}]   a shipped row with fields replaced
      workloads: {chat: {median_reuse_s: 300}}  # data/kv_reuse.csv's row with fields replaced
      reuse: demand/kv_reuse.csv               # rows derived from request logs (`fleetplan demand`)

the plan chooses each workload's tier capacities among candidates generated before the solve
(`optimizer.instance.kvcache`, `formulations.kvcache`), and the hit rate they give replaces
the workload's own. A ``reuse`` file (relative to the scenario,
data/kv_reuse.csv's columns) is read when the scenario is loaded into ``workloads``
(`inline_reuse_file`): its non-empty fields replace the shipped row's, the section's own
``workloads`` fields replace the file's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd
from pydantic import Field, ValidationError, field_validator

from optimizer.base.errors import Origin, ScenarioError, unknown_id_message
from optimizer.base.sources import read_csv, shipped_data_dir
from optimizer.scenario.fields import Strict, bounded, fraction_before

TIERS_FILE = "kv_tiers.csv"
REUSE_FILE = "kv_reuse.csv"
HOURS_PER_MONTH = 730.0  # 8,760 h / 12


class TierSpec(Strict):
    """A tier: a row of kv_tiers.csv by id, any of its fields replaced."""

    id: str
    capacity_gb: float | None = bounded(None, ge=0, le=1e9, unit="GB", description="most a site gives cached prefixes",
                                        why="an exabyte is beyond any site")
    bandwidth_gb_per_s: float | None = bounded(None, gt=0, le=1e5, unit="GB/s", description="read bandwidth a hit sees",
                                               why="above HBM")
    latency_ms: float | None = bounded(None, ge=0, le=1e4, unit="ms", description="added before a read starts",
                                       why="above 10 s no objective survives")
    usd_per_gb_month: float | None = bounded(None, ge=0, le=1e4, unit="$/GB-month", description="price of a GB held",
                                             why="above HBM bought outright")
    fixed_gb_per_rps: float | None = bounded(None, ge=0, le=1e6, unit="GB per request/s",
                                             description="the tier's capacity per request/s at the peak, fixed "
                                             "for every workload it may serve (a sweep); empty: sized",
                                             why="a million GB per request/s is beyond any reuse")

    @classmethod
    def named(cls, value):
        return {"id": value} if isinstance(value, str) else value


class ReuseSpec(Strict):
    """A workload's prefix reuse: kv_reuse.csv's row, any of its fields replaced."""

    reuse_probability: float | None = bounded(None, ge=0, le=1, description="share of requests whose prefix recurs "
                                              "(an unbounded cache's hit rate)")
    reusable_prefix_share: float | None = bounded(None, ge=0, le=1, description="share of a prompt a hit skips")
    median_reuse_s: float | None = bounded(None, gt=0, le=8.64e5, unit="s", description="median time between two "
                                           "uses of a prefix", why="at most ten days")
    reuse_sigma: float | None = bounded(None, gt=0, le=5, description="log-normal sigma of the time between uses",
                                        why="5 spans eight decades")


class KvCache(Strict):
    """KV-cache tiers and prefix reuse (opt-in: no tiers, no change)."""

    tiers: list[TierSpec] = Field(default_factory=list, description="tiers by kv_tiers.csv id, fastest first")
    workloads: dict[str, ReuseSpec] = Field(default_factory=dict, description="per workload, kv_reuse.csv replaced")
    prefill_utilization: float = bounded(0.75, gt=0, le=1, description="share of a GPU-hour that does work: a "
                                         "saved GPU-second is worth 1/this of its price (assumed: the average "
                                         "utilisation of the shipped us-east plan, 74 %)")
    max_read_share_of_ttft: float = bounded(0.1, gt=0, le=1, description="a tier serves a workload only if a hit's "
                                            "read takes at most this share of its p99 TTFT")

    _tiers = field_validator("tiers", mode="before")(
        lambda v: [TierSpec.named(x) for x in v] if isinstance(v, list) else v)
    _frac = field_validator("prefill_utilization", "max_read_share_of_ttft", mode="before")(fraction_before)


@dataclass(frozen=True)
class Tier:
    id: str
    capacity_gb: float
    bandwidth_gb_per_s: float
    latency_ms: float
    usd_per_gb_hour: float
    fixed_gb_per_rps: float | None = None


@dataclass(frozen=True)
class Reuse:
    reuse_probability: float
    reusable_prefix_share: float
    median_reuse_s: float
    reuse_sigma: float


@cache
def _catalogue(path: Path) -> pd.DataFrame:
    return pd.read_csv(path)


def resolved_tiers(kv: KvCache) -> list[Tier]:
    """The section's tiers with kv_tiers.csv's values filled in, in the order given."""
    rows = _catalogue(shipped_data_dir() / TIERS_FILE).set_index("id")
    out = []
    for i, t in enumerate(kv.tiers):
        if t.id not in rows.index:
            raise ScenarioError(f"kv_cache.tiers names '{t.id}', not a row of {TIERS_FILE}; expected one of "
                                f"{sorted(rows.index)}", field=f"kv_cache.tiers[{i}].id")
        row = rows.loc[t.id]
        pick = lambda name: float(getattr(t, name) if getattr(t, name) is not None else row[name])  # noqa: E731
        out.append(Tier(t.id, pick("capacity_gb"), pick("bandwidth_gb_per_s"), pick("latency_ms"),
                        pick("usd_per_gb_month") / HOURS_PER_MONTH, t.fixed_gb_per_rps))
    if len({t.id for t in out}) != len(out):
        raise ScenarioError("kv_cache.tiers names a tier twice; expected each tier once", field="kv_cache.tiers")
    return out


def resolved_reuse(kv: KvCache, workloads) -> dict[str, Reuse]:
    """Per workload of the scenario, its reuse (kv_reuse.csv, the section's fields over it); a
    workload without a row and without all four fields reuses nothing."""
    unknown = sorted(set(kv.workloads) - set(workloads))
    if unknown:
        raise ScenarioError(f"kv_cache.workloads names '{unknown[0]}', not a workload of the scenario; expected one "
                            f"of {sorted(workloads)}", field="kv_cache.workloads")
    rows = _catalogue(shipped_data_dir() / REUSE_FILE).set_index("workload")
    out = {}
    for k in workloads:
        spec = kv.workloads.get(k, ReuseSpec())
        base = rows.loc[k].to_dict() if k in rows.index else {"reuse_probability": 0.0, "reusable_prefix_share": 0.0,
                                                                 "median_reuse_s": 1.0, "reuse_sigma": 1.0}
        out[k] = Reuse(**{f: float(getattr(spec, f) if getattr(spec, f) is not None else base[f])
                          for f in Reuse.__dataclass_fields__})
    return out


def inline_reuse_file(section: dict, yaml_path: Path, workloads, origin: Origin) -> dict:
    """The ``kv_cache`` section (plain data) with its ``reuse`` file read into ``workloads``:
    per workload row, the file's non-empty fields under the section's own. A bad file is
    refused with its file, line and field."""
    name = section.get("reuse")
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"expected the path of a kv_reuse.csv relative to the scenario, got {name!r}", origin,
                            field="kv_cache.reuse")
    path = yaml_path.parent / name
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file" if path.exists() else "no such file"
        raise ScenarioError(f"{what}: {path} (expected a kv_reuse.csv, e.g. one written by fleetplan demand)", origin,
                            field="kv_cache.reuse")
    fields = list(ReuseSpec.model_fields)
    table = read_csv(path, ["workload"], [*fields, "source", "as_of", "assumed_fields"])
    if not table.rows:
        raise ScenarioError("the file has a header and no workload rows (a truncated file?); expected one row per "
                            "workload", Origin(str(path), 2), field="workload")
    rows: dict[str, dict] = {}
    for row in table.rows:
        workload = row.values.get("workload")
        if workload not in workloads:
            raise ScenarioError(unknown_id_message("workload", workload, workloads) + " (of the scenario)", row.origin,
                                field="workload")
        if workload in rows:
            raise ScenarioError(f"workload '{workload}' has a second row; expected one row per workload", row.origin,
                                field="workload")
        try:
            spec = ReuseSpec.model_validate({k: row.values[k] for k in fields if row.values.get(k) is not None})
        except ValidationError as exc:
            err = exc.errors()[0]
            field_name = str(err["loc"][0])
            raise ScenarioError(f"{err['msg']} ({ReuseSpec.model_fields[field_name].description})", row.origin,
                                field=field_name) from None
        rows[workload] = spec.model_dump(exclude_none=True)
    inline = section.get("workloads") or {}
    if not isinstance(inline, dict):
        return section  # the section's validation names it
    merged = {k: {**rows.get(k, {}), **(inline.get(k) or {})} for k in sorted(set(rows) | set(inline))}
    return {**{k: v for k, v in section.items() if k != "reuse"}, "workloads": merged}
