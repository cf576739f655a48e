"""Validation: every row and section of a raw scenario checked by its model, then the
references between tables; errors name the file, the row and the field and say what was
expected."""

from __future__ import annotations

import math
import re
from typing import get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from optimizer.base.errors import (
    RANGE_ERRORS,
    Origin,
    ScenarioError,
    shorten,
    unknown_id_message,
    yaml_bool_hint,
)
from optimizer.scenario.calibration.params import Calibration
from optimizer.scenario.catalogue import Supply
from optimizer.scenario.fields import accepted
from optimizer.scenario.fleet import FleetRow
from optimizer.scenario.kvcache import resolved_reuse, resolved_tiers
from optimizer.scenario.model import Scenario
from optimizer.scenario.overrides import is_number
from optimizer.scenario.racks import hostable_supply
from optimizer.scenario.raw import RawScenario
from optimizer.scenario.sections import DemandRow, MixRow
from optimizer.scenario.spot import with_spot
from optimizer.scenario.tables import SECTIONS, TABLES


def _mentions(msg: str, value) -> bool:
    """Whether a validator's message already says what it got."""
    texts = {str(value)}
    try:
        texts.add(str(float(value)))
    except (OverflowError, TypeError, ValueError):
        pass
    return any(f"got {text}" in msg for text in texts)


def _model_in(annotation) -> type[BaseModel] | None:
    """The model a field holds: itself, or inside a list, a mapping or an optional."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := _model_in(arg)) is not None), None)


def field_info(model: type[BaseModel] | None, loc) -> FieldInfo | None:
    """The field an error location points at, through nested models, lists and mappings of
    models (whose keys are names, not fields)."""
    info, keyed = None, False
    for part in loc:
        if isinstance(part, int) or keyed:
            keyed = False
            continue
        if model is None:  # an item of a list or mapping of numbers: the field's own
            return info
        if str(part) not in model.model_fields:
            return None
        info = model.model_fields[str(part)]
        model = _model_in(info.annotation)
        keyed = model is not None and get_origin(info.annotation) is dict
    return info


def explain(err: dict, model: type[BaseModel] | None = None) -> str:
    """A pydantic error in a planner's words; with the ``model`` validated, a value outside a
    field's physical range is answered with that range (`fields.bounded`)."""
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif msg.startswith("Input should be"):
        msg = "expected " + msg[len("Input should be "):]
    elif msg == "Field required":
        msg = "missing (this field is required)"
    elif msg.startswith("Extra inputs are not permitted"):
        msg = "not a known field"
    info = field_info(model, err["loc"])
    limits = accepted(info) if info is not None else None
    if limits and limits not in msg:
        msg = f"expected {limits}" if err.get("type") in RANGE_ERRORS else f"{msg} (accepted: {limits})"
    if "input" in err and not isinstance(err["input"], (dict, list)) and msg != "missing (this field is required)" \
            and not _mentions(msg, err["input"]):
        got = repr(err["input"])
        got = got if len(got) <= 80 else got[:77] + "…"
        msg += "; got nothing (an empty cell or null)" if err["input"] is None else f"; got {got}"
        if isinstance(err["input"], bool) and err.get("type") == "string_type":
            msg += yaml_bool_hint(err["input"])
        if isinstance(err["input"], str) and re.fullmatch(r"\s*-?\d+,\d+\s*", err["input"]):
            msg += " — a decimal comma? fleetplan reads '.' as the decimal point"
    return msg


def _field_of(err: dict, model: type[BaseModel]) -> str | None:
    """The field an error is about: its location, or — for a check across fields (a model
    validator, whose location is empty) — the first field its message names."""
    loc = ".".join(str(p) for p in err["loc"])
    if loc:
        return loc
    for word in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", err["msg"]):
        if word in model.model_fields:
            return word
    return None


def validate_row(model: type[BaseModel], values: dict, origin: Origin):
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = _field_of(err, model)
        if err["msg"].startswith("Extra inputs"):
            msg = unknown_id_message("field", err["loc"][-1], model.model_fields)
            raise ScenarioError(msg, origin, field=loc) from None
        raise ScenarioError(explain(err, model), origin, field=loc) from None


def validate(raw: RawScenario) -> Scenario:
    """Validate every row and section, then the references between tables; an error about a
    value an override set names the override (`RawScenario.overridden`)."""
    try:
        return _validate(raw)
    except ScenarioError as exc:
        raise raw.overridden(exc) from None


def _check_shape(raw: RawScenario) -> None:
    """The resolved data's layout (a plan folder's scenario.json can be edited by hand)."""
    d = raw.data
    if not isinstance(d, dict):
        raise ScenarioError("expected a mapping of scenario sections", Origin(str(raw.path)))
    for key in ("name", "price_provider"):
        if not isinstance(d.get(key), str):
            raise ScenarioError(f"expected text, got {shorten(repr(d.get(key)))}", Origin(str(raw.path)), field=key)
    for name in (*TABLES, "diurnal", *SECTIONS):
        value = d.get(name)
        depth = 2 if name == "supply" else 1
        ok = isinstance(value, dict) or (name in SECTIONS and value is None)
        if ok and name in TABLES:
            rows = list(value.values())
            if depth == 2:
                ok = all(isinstance(r, dict) for r in rows)
                rows = [row for per in rows if isinstance(per, dict) for row in per.values()]
            ok = ok and all(isinstance(r, dict) for r in rows)
        if ok and name == "diurnal":
            ok = all(isinstance(v, list) for v in value.values())
        if not ok:
            expected = {"diurnal": "a mapping profile → 24 multipliers"}.get(
                name, "a mapping of fields" if name in SECTIONS else "a mapping of rows (id → {field: value})")
            raise ScenarioError(f"expected {expected}, got {shorten(repr(value), 60)}", raw.origin(name), field=name)


def _validate(raw: RawScenario) -> Scenario:
    if isinstance(raw.data, dict):
        raw.data.setdefault("grid_carbon", {})  # a scenario.json from before grid carbon has none
    _check_shape(raw)
    d = raw.data
    tables = {}
    for name, spec in TABLES.items():
        if name == "supply":
            tables[name] = {
                s: {g: validate_row(Supply, row, raw.origin("supply", s, g)) for g, row in per.items()}
                for s, per in d["supply"].items()
            }
        else:
            tables[name] = {k: validate_row(spec.model, row, raw.origin(name, k)) for k, row in d[name].items()}
    tables["supply"] = hostable_supply(tables["supply"], tables["sites"], tables["accelerators"], raw)
    for name, spec in TABLES.items():  # a row's key fields are its place in the table (--set can break that)
        rows = [((s, g), r) for s, per in tables[name].items() for g, r in per.items()] if name == "supply" else \
            [((k,), r) for k, r in tables[name].items()]
        for key, row in rows:
            fields = spec.key[-len(key):]
            wrong = [f for f, k in zip(fields, key) if str(getattr(row, f)) != k]
            if wrong:
                raise ScenarioError(
                    f"this row is {name} '{'/'.join(key)}' but its {'/'.join(fields)} says "
                    f"'{'/'.join(str(getattr(row, f)) for f in fields)}'; expected them to agree (rename a row in "
                    "the file, not with --set)", raw.origin(name, *key), field=wrong[0])
    sections = {}
    for name, model in SECTIONS.items():
        values = d.get(name) or {}
        if name == "demand" and isinstance(values, dict):
            for part, row_model in (("table", DemandRow), ("mix", MixRow)):
                if isinstance(values.get(part), list):  # else the section's validation says what is wrong
                    for i, row in enumerate(values[part]):
                        validate_row(row_model, row, raw.origin("demand", part, i))
        if name == "fleet" and isinstance(values, dict) and isinstance(values.get("contracts"), list):
            for i, row in enumerate(values["contracts"]):  # a row's error names its own line (or CSV line)
                validate_row(FleetRow, row, raw.origin("fleet", "contracts", i))
        try:
            sections[name] = validate_row(model, values, raw.origin(name))
        except ScenarioError as exc:  # at the line of the field itself
            key = (exc.field or "").split(".")[0]
            raise ScenarioError(exc.message, raw.origin(name, key), field=exc.field) from None
    if "calibration" in (d.get("serving") or {}):
        raise ScenarioError("write the calibration file at the top level (calibration: FILE), not in serving",
                            raw.origin("serving"), field="serving.calibration")
    if d.get("calibration"):  # recorded content; a scenario.json from before calibrations has none
        sections["serving"] = sections["serving"].model_copy(update={"calibration": _calibration(d["calibration"], raw)})
    diurnal = _validate_diurnal(d["diurnal"], raw)
    try:
        scenario = Scenario(
            name=str(d["name"]),
            description=str(d.get("description") or ""),
            price_provider=d["price_provider"],
            diurnal=diurnal,
            **tables,
            **sections,
        )
    except ValidationError as exc:  # the top-level values an override can reach (price_provider, …)
        err = exc.errors()[0]
        raise ScenarioError(explain(err, Scenario), Origin(str(raw.path)), field=_field_of(err, Scenario)) from None
    _cross_check(scenario, raw)
    try:  # the kv_cache section's names resolve now, so that a bad one is refused before planning
        resolved_tiers(scenario.kv_cache), resolved_reuse(scenario.kv_cache, scenario.workloads)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, raw.origin("kv_cache"), field=exc.field) from None
    try:
        return with_spot(scenario)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, raw.origin("spot"), field=exc.field) from None


def _validate_diurnal(profiles: dict, raw: RawScenario) -> dict[str, list[float]]:
    out = {}
    for name, values in profiles.items():
        origin = raw.origin("diurnal", name)
        if len(values) != 24 or any(v is None for v in values):
            missing = [h for h, v in enumerate(values) if v is None] if len(values) == 24 else None
            detail = f"hours {missing} are missing" if missing else f"found {len(values)} values"
            raise ScenarioError(f"a diurnal profile needs one multiplier per hour 0–23; {detail}", origin)
        try:
            values = [float(v) for v in values]
        except (TypeError, ValueError):
            bad = next(h for h, v in enumerate(values) if not is_number(str(v)) or isinstance(v, (list, dict)))
            raise ScenarioError(f"expected a number for hour {bad}, got {values[bad]!r}", origin) from None
        if any(not math.isfinite(v) or v < 0 for v in values) or max(values) <= 0:
            raise ScenarioError("diurnal multipliers must be finite, ≥ 0 and not all zero", origin)
        top = max(values)
        out[name] = [v / top for v in values]
    return out


def _check_ref(kind: str, value: str, known, origin: Origin, field: str) -> None:
    if value not in known:
        raise ScenarioError(unknown_id_message(kind, value, known), origin, field=field)


def _cross_check(s: Scenario, raw: RawScenario) -> None:
    """References between tables, and inputs no plan could use."""
    if not s.metros:
        raise ScenarioError("the scenario has no metros (demand origins)", raw.origin("metros"))
    if not s.sites:
        raise ScenarioError("the scenario has no candidate sites", raw.origin("sites"))
    if not s.workloads:
        raise ScenarioError("the scenario has no workloads", raw.origin("workloads"))
    for sid, site in s.sites.items():
        _check_ref("metro", site.metro, s.metros, raw.origin("sites", sid), "metro")
    for sid, per in s.supply.items():
        _check_ref("site", sid, s.sites, raw.origin("supply", sid), "site")
        for gid in per:
            _check_ref("accelerator", gid, s.accelerators, raw.origin("supply", sid, gid), "gpu")
    for sid in s.sites:
        if not s.supply.get(sid):
            raise ScenarioError(
                f"site '{sid}' can supply none of the offered accelerators ({', '.join(sorted(s.accelerators))}); "
                "add supply rows for it or drop the site",
                raw.origin("sites", sid),
            )
    for gid in s.accelerators:
        if gid not in s.prices:
            raise ScenarioError(
                f"no price for offered accelerator '{gid}' from provider '{s.price_provider}'; add a prices row "
                f"(provider {s.price_provider}, gpu {gid}) or drop the accelerator",
                raw.origin("accelerators", gid),
                field="prices",
            )
    for wid, w in s.workloads.items():
        origin = raw.origin("workloads", wid)
        _check_ref("model", w.model, s.models, origin, "model")
        _check_ref("diurnal profile", w.diurnal_profile, s.diurnal, origin, "diurnal_profile")
        model = s.models[w.model]
        if w.isl_p99_tokens + w.osl_p99_tokens > model.max_context:
            raise ScenarioError(
                f"p99 prompt + output ({w.isl_p99_tokens + w.osl_p99_tokens:g} tokens) exceeds the context of "
                f"{w.model} ({model.max_context} tokens)", origin, field="isl_p99_tokens")
        if w.shared_prefix_tokens > w.isl_mean_tokens * 50:
            raise ScenarioError("shared_prefix_tokens is far longer than the prompts", origin, field="shared_prefix_tokens")
        if w.weight_dtype == "fp8" and not any(a.fp8_dense_tflops for a in s.accelerators.values()):
            raise ScenarioError("fp8 weights need an accelerator with FP8 support", origin, field="weight_dtype")
        _check_prompt_split(s, w, origin)
    _check_fleet(s, raw)
    periods = {p.id for p in s.horizon.periods}
    day_types = {d.id for d in s.horizon.day_types}
    seen: dict[tuple, int] = {}
    for i, mix in enumerate(s.demand.mix):
        origin = raw.origin("demand", "mix", i)
        _check_ref("metro", mix.metro, s.metros, origin, "metro")
        _check_ref("workload", mix.workload, s.workloads, origin, "workload")
        _check_unique(seen, ("mix", mix.metro, mix.workload), i, raw, "demand.mix", "metro/workload")
    for i, row in enumerate(s.demand.table or []):
        origin = raw.origin("demand", "table", i)
        _check_ref("metro", row.metro, s.metros, origin, "metro")
        _check_ref("workload", row.workload, s.workloads, origin, "workload")
        _check_ref("period", row.period, periods, origin, "period")
        if row.day_type is not None:
            _check_ref("day type", row.day_type, day_types, origin, "day_type")
        _check_unique(seen, ("table", row.metro, row.workload, row.period, row.hour, row.day_type), i, raw,
                      "demand.table", "metro/workload/period/hour/day_type")


def _check_prompt_split(s, w, origin) -> None:
    """``prompt_part`` is the plan's, not an input; splits are not planned with KV-cache tiers
    (the thresholds' shares: `optimizer.instance.checks`)."""
    if w.prompt_part is not None:
        raise ScenarioError("prompt_part is set by the plan when it splits a workload; expected it absent (write "
                            "prompt_split_candidates_tokens to let the plan split)", origin, field="prompt_part")
    if w.prompt_split_candidates_tokens and s.kv_cache.tiers:
        raise ScenarioError("prompt-length splits are not planned together with kv_cache tiers; expected one of "
                            "the two", origin, field="prompt_split_candidates_tokens")


def _check_fleet(s: Scenario, raw: RawScenario) -> None:
    """The fleet's rows name offered sites and accelerators, can be placed in time, and an owned
    row without its own price finds one in the owned catalogue."""
    if s.fleet.contracts and s.horizon.start is None:
        raise ScenarioError("a fleet's contracts need the plan's first day to place them in time; "
                            "set horizon.start (YYYY-MM-DD)", raw.origin("horizon"), field="horizon.start")
    if s.horizon.years > 1 and s.horizon.start is None:
        raise ScenarioError("a plan over several years places its contracts in time from its first day; set "
                            "horizon.start (YYYY-MM-DD)", raw.origin("horizon"), field="horizon.start")
    if s.years.available_from and s.horizon.start is None:
        raise ScenarioError("years.available_from places accelerators in time from the plan's first day; set "
                            "horizon.start (YYYY-MM-DD)", raw.origin("horizon"), field="horizon.start")
    for gid in s.years.available_from:
        _check_ref("accelerator", gid, s.accelerators, raw.origin("years", "available_from"), "years.available_from")
    for i, row in enumerate(s.fleet.contracts):
        origin = raw.origin("fleet", "contracts", i)
        _check_ref("site", row.site, s.sites, origin, "site")
        _check_ref("accelerator", row.gpu, s.accelerators, origin, "gpu")
        if row.gpu not in s.supply.get(row.site, {}):
            raise ScenarioError(f"{row.site} × {row.gpu} has no supply row, so the plan cannot place replicas on these "
                                "nodes; add the pair to the supply table", origin, field="gpu")
        if row.contract == "owned" and row.capex_usd_per_node is None and row.gpu not in s.owned:
            raise ScenarioError(f"no owned catalogue row for {row.gpu}: give this row its capex_usd_per_node and "
                                "life_years", origin, field="capex_usd_per_node")


def _check_unique(seen: dict, key: tuple, i: int, raw: RawScenario, where: str, fields: str) -> None:
    """Two demand rows for the same key would be added up (table) or one lost (mix): a slip."""
    part = where.split(".")[1]
    if key in seen:
        first = raw.origin("demand", part, seen[key])
        shown = "/".join("-" if k is None else str(k) for k in key[1:])
        raise ScenarioError(f"duplicate {where} row for {fields} {shown} (first at {first.describe()}); "
                            "expected one row per key", raw.origin("demand", part, i), field=fields.split("/")[0])
    seen[key] = i


def _calibration(recorded, raw) -> Calibration:
    """A calibration's recorded content (a plan folder's scenario.json), checked."""
    if not isinstance(recorded, dict):
        raise ScenarioError(f"expected a calibration's recorded content (an object), got {type(recorded).__name__}",
                            raw.origin("calibration"), field="calibration")
    try:
        return Calibration(**recorded)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"the recorded calibration cannot be read: {str(exc).splitlines()[0][:120]}",
                            raw.origin("calibration"), field="calibration") from None
