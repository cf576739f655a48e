"""Where a request log is and how to read it.

A log has one row per request. Its columns map to nine fields:

    timestamp  arrival time (required): epoch seconds/ms/µs/ns, ISO 8601 with or without a
               zone, or any format strftime can describe (``timestamp=TIME:%d/%m/%Y %H:%M``)
    prompt     prompt tokens (required)
    output     output tokens (required)
    metro      the users' metro (optional; else the spec's metro)
    workload   the workload/service (optional; else the spec's workload)
    cached     prompt tokens served from a prefix cache (optional)
    prefix_id  an id or hash of the request's shared prefix: a system prompt, a document (optional)
    session_id a conversation: a later turn reuses the earlier turns' prompt and output (optional)
    prefix_tokens  the length of the shared prefix, tokens (optional, with a prefix or session id)

With a prefix or session id, `fleetplan demand` derives each workload's prefix reuse
(`optimizer.commands.traces.reuse`); with both, the prefix id is the one used.

A mapping comes from ``--columns prompt=ContextTokens,output=GeneratedTokens`` or a
scenario's ``traces`` section; columns it leaves out are found by their usual names
(`RECOGNISED`, case-insensitive). Naive timestamps are read in ``tz`` (default UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from optimizer.base.errors import Origin, ScenarioError, unknown_id_message

FIELDS = ("timestamp", "prompt", "output", "metro", "workload", "cached", "prefix_id", "session_id", "prefix_tokens")
REQUIRED = ("timestamp", "prompt", "output")
RECOGNISED = {
    "timestamp": ("timestamp", "time", "arrival_time"),
    "prompt": ("contexttokens", "prompt_tokens", "input_tokens"),
    "output": ("generatedtokens", "completion_tokens", "output_tokens"),
    "metro": ("metro", "region"),
    "workload": ("workload", "service"),
    "cached": ("cached_tokens", "cached_prefix_tokens"),
    "prefix_id": ("prefix_id", "prefix_hash", "system_prompt_id"),
    "session_id": ("session_id", "conversation_id"),
    "prefix_tokens": ("prefix_tokens", "shared_prefix_tokens"),
}


@dataclass(frozen=True)
class TraceSpec:
    """One log file and how to read it."""

    path: Path
    columns: dict = field(default_factory=dict)  # field → column name
    timestamp_format: str | None = None  # strftime format of the timestamp column, if not ISO/epoch
    tz: str = "UTC"  # zone of naive timestamps
    metro: str | None = None  # the log's metro when it has no metro column
    workload: str | None = None  # the log's workload when it has no workload column

    def resolve(self, header: list[str]) -> dict[str, str]:
        """field → column of this file: the mapping, else the recognised names."""
        origin = Origin(str(self.path), 1)
        out = {}
        for name, column in self.columns.items():
            if column not in header:
                raise ScenarioError(f"the column mapping names '{column}' for {name}, but the header has "
                                    f"{', '.join(header)}", origin, field=name)
            out[name] = column
        for name in FIELDS:
            if name in out:
                continue
            found = [c for c in header if c.strip().lower() in RECOGNISED[name]]
            if len(found) > 1:
                raise ScenarioError(f"columns {', '.join(found)} could each be the {name}; name one with "
                                    f"--columns {name}=COLUMN", origin, field=name)
            if found:
                out[name] = found[0]
            elif name in REQUIRED:
                raise ScenarioError(
                    f"no {name} column: the header has {', '.join(header)}; expected one of "
                    f"{', '.join(RECOGNISED[name])} or a mapping such as --columns {name}=COLUMN", origin, field=name)
        if "prefix_tokens" in out and not {"prefix_id", "session_id"} & set(out):
            raise ScenarioError(f"a prefix_tokens column ('{out['prefix_tokens']}') needs a prefix_id or session_id "
                                "column saying which requests share the prefix", origin, field=out["prefix_tokens"])
        return out


def parse_columns(text: str | None) -> tuple[dict[str, str], str | None]:
    """``--columns`` text → (field → column, timestamp format or None).

    ``timestamp=TIME:%d/%m/%Y %H:%M,prompt=In,output=Out``: a timestamp column may carry a
    strftime format after a colon.
    """
    if not text:
        return {}, None
    columns, fmt = {}, None
    for item in text.split(","):
        name, sep, column = item.partition("=")
        name, column = name.strip(), column.strip()
        if not sep or not column:
            raise ScenarioError(f"'{item}' should look like FIELD=COLUMN (fields: {', '.join(FIELDS)})",
                                Origin("--columns"), field=name or None)
        if name not in FIELDS:
            raise ScenarioError(unknown_id_message("field", name, FIELDS), Origin("--columns"), field=name)
        if name == "timestamp" and ":" in column:
            column, fmt = column.split(":", 1)
        columns[name] = column
    return columns, fmt


# ---------------------------------------------------------------------------- scenario section


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TraceFile(_Strict):
    path: str = Field(description="the log, relative to the scenario file")
    columns: dict[str, str] = Field(default_factory=dict, description="field → column, as --columns")
    timestamp_format: str | None = Field(None, description="strftime format of the timestamp column")
    tz: str | None = Field(None, description="zone of naive timestamps (default: the section's)")
    metro: str | None = None
    workload: str | None = None


class TraceSection(_Strict):
    """A scenario's ``traces`` section: the logs its demand was derived from."""

    columns: dict[str, str] = Field(default_factory=dict, description="field → column for every file")
    tz: str = Field("UTC", description="zone of naive timestamps")
    files: list[TraceFile] = Field(min_length=1)


def section_specs(section, yaml_path: Path) -> list[TraceSpec]:
    """A scenario's ``traces`` section (plain YAML data) → one `TraceSpec` per file; paths are
    relative to the scenario file. Errors name the scenario file, its line and the field."""
    origin = Origin(str(yaml_path), getattr(section, "line", None), "section 'traces'")
    try:
        parsed = TraceSection.model_validate(section)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ScenarioError(err["msg"], origin, field=f"traces.{where}" if where else "traces") from None
    specs = []
    for i, f in enumerate(parsed.files):
        columns = {**parsed.columns, **f.columns}
        for name in columns:
            if name not in FIELDS:
                raise ScenarioError(unknown_id_message("field", name, FIELDS), origin,
                                    field=f"traces.files.{i}.columns")
        path = yaml_path.parent / f.path
        if not path.is_file():
            raise ScenarioError(f"no such log file: {path}", origin, field=f"traces.files.{i}.path")
        specs.append(TraceSpec(path, columns, f.timestamp_format, f.tz or parsed.tz, f.metro, f.workload))
    return specs
