"""Reading request logs (CSV, Parquet, JSON lines) in chunks, checked row by row.

`iter_chunks` streams a log with pyarrow (CSV and JSON lines by blocks, Parquet by record
batches), so memory stays bounded whatever the log's length; every chunk comes back as
numpy arrays: arrival time (int64 ns, UTC), prompt, output and cached tokens, and the metro
and workload labels as codes into a list of names.

Bad rows stop the read with an error naming the file, the line (or Parquet row) and the
column: an unparseable or implausible timestamp (before 1990 or after 2100: usually epoch
milliseconds read as seconds), a missing, fractional, negative or absurd token count (a
prompt needs at least one token; more than `MAX_TOKENS` is no request), cached tokens
outside [0, prompt], an empty label, and a row that repeats the one before it exactly.
A prefix or session id (`TraceSpec`) comes back as a 64-bit hash of its text
(`pandas.util.hash_array`: two distinct ids of ten million collide with probability
about n²/2⁶⁵ ≈ 3·10⁻⁶); an empty id and prefix tokens outside [0, prompt] are refused.

Two decisions:
* Rows out of time order are accepted, with a warning giving how many and the largest step
  back: logs written at completion time or merged from several servers are rarely in exact
  arrival order, nothing derived depends on the order, and the replay sorts. Refusing would
  make a planner sort a large file for nothing.
* A row identical to the one before it (timestamp, tokens, labels and prefix id) is refused when the
  log's timestamps carry digits below the millisecond: two requests cannot arrive in the
  same 100 ns with the same lengths by chance, so it is a request logged twice, which would
  count its moment double. At coarser resolution two such rows can be distinct requests, so
  they are not checked (the derived summary says so).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from optimizer.base.errors import Origin, ScenarioError
from optimizer.scenario.trace_spec import TraceSpec

MAX_TOKENS = 10_000_000
NS = 1_000_000_000
EARLIEST_NS = pd.Timestamp("1990-01-01").value
LATEST_NS = pd.Timestamp("2100-01-01").value
CSV_BLOCK_BYTES = 1 << 22
PARQUET_BATCH_ROWS = 1 << 17
EPOCH_UNITS = ((1e11, NS, "seconds"), (1e14, 1_000_000, "milliseconds"), (1e17, 1_000, "microseconds"),
               (float("inf"), 1, "nanoseconds"))


@dataclass
class Chunk:
    """Consecutive rows of one log: row ``first_row`` (1-based) onwards."""

    first_row: int
    t_ns: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    cached: np.ndarray | None
    metro: np.ndarray  # codes into ReadState.metros
    workload: np.ndarray  # codes into ReadState.workloads
    prefix_key: np.ndarray | None = None  # hash of the prefix id (or, without one, the session id)
    prefix_tokens: np.ndarray | None = None


@dataclass
class ReadState:
    """What one pass over a log learns beyond its chunks: label names, order, resolution."""

    spec: TraceSpec
    kind: str
    columns: dict = field(default_factory=dict)
    metros: list = field(default_factory=list)
    workloads: list = field(default_factory=list)
    rows: int = 0
    out_of_order: int = 0
    first_out_of_order: int | None = None
    largest_step_back_s: float = 0.0
    epoch_unit: tuple | None = None
    string_route: object = None  # how this file's timestamp strings are read (`_typed_strings`)
    sub_ms: bool | None = None  # timestamps carry digits below the millisecond (None: not yet known)
    first_rows: dict = field(default_factory=dict)  # (kind, name) → first row with that label
    _last: tuple | None = None
    _codes: dict = field(default_factory=lambda: {"metro": {}, "workload": {}})

    def origin(self, row: int) -> Origin:
        """Where data row ``row`` (1-based) is: a line of a CSV (after the header) or JSON-lines
        file, a row of a Parquet file."""
        line = {"csv": row + 1, "jsonl": row}.get(self.kind)
        return Origin(str(self.spec.path), line, f"request row {row}")

    def warnings(self) -> list[str]:
        if not self.out_of_order:
            return []
        return [f"{self.spec.path}: {self.out_of_order:,} rows are earlier than the row before them (first at "
                f"{self.origin(self.first_out_of_order).describe()}, largest step back "
                f"{self.largest_step_back_s:.3f} s); read in arrival order"]

    def code(self, kind: str, names: list, rows: list[int]) -> np.ndarray:
        """Codes of label ``names`` (first seen at ``rows``), new names appended."""
        table, known = self._codes[kind], self.metros if kind == "metro" else self.workloads
        for name, row in zip(names, rows):
            if name not in table:
                table[name] = len(known)
                known.append(name)
                self.first_rows[(kind, name)] = row
        return np.array([table[n] for n in names], dtype=np.int32)


def file_kind(path: Path) -> str:
    name = path.name.lower()
    for suffix in (".gz", ".bz2", ".zst", ".lz4"):
        name = name.removesuffix(suffix)
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    raise ScenarioError("unknown log format: expected .csv, .parquet or .jsonl (optionally compressed, e.g. .csv.gz)",
                        Origin(str(path)))


def iter_chunks(spec: TraceSpec, state: ReadState | None = None):
    """Yield the checked `Chunk`s of one log; ``state`` (created if None) collects label names,
    order and resolution as the pass goes."""
    path = Path(spec.path)
    if not path.is_file():
        raise ScenarioError("no such log file", Origin(str(path)))
    state = state or ReadState(spec, file_kind(path))
    try:
        for batch in _batches(spec, state):
            if batch.num_rows:
                yield _convert(batch, state)
                state.rows += batch.num_rows
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise ScenarioError(f"cannot read the log after row {state.rows:,}: {str(exc).splitlines()[0]}",
                            Origin(str(path))) from None


def _batches(spec: TraceSpec, state: ReadState):
    path = str(spec.path)
    if state.kind == "parquet":
        f = pq.ParquetFile(path)
        state.columns = spec.resolve(f.schema_arrow.names)
        yield from f.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(dict.fromkeys(state.columns.values())))
    elif state.kind == "jsonl":
        reader = pjson.open_json(path, read_options=pjson.ReadOptions(block_size=CSV_BLOCK_BYTES))
        state.columns = spec.resolve(reader.schema.names)
        yield from reader
    else:
        parse = pcsv.ParseOptions(delimiter="\t" if ".tsv" in path.lower() else ",")
        header = pcsv.open_csv(path, parse_options=parse).schema.names
        state.columns = spec.resolve(header)
        wanted = list(dict.fromkeys(state.columns.values()))
        convert = pcsv.ConvertOptions(include_columns=wanted, column_types={c: pa.string() for c in wanted})
        yield from pcsv.open_csv(path, read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                                 parse_options=parse, convert_options=convert)


# ---------------------------------------------------------------------------- one chunk


def _convert(batch: pa.RecordBatch, state: ReadState) -> Chunk:
    cols = state.columns
    first = state.rows + 1

    def column(name):
        return batch.column(batch.schema.get_field_index(cols[name]))

    t = _timestamps(column("timestamp"), state, first)
    prompt = _tokens(column("prompt"), "prompt", state, first, minimum=1)
    output = _tokens(column("output"), "output", state, first, minimum=0)
    cached = None
    if "cached" in cols:
        cached = _tokens(column("cached"), "cached", state, first, minimum=0)
        _within_prompt(cached, prompt, "cached", state, first)
    n = len(t)
    metro = _labels(column("metro"), "metro", state, first) if "metro" in cols else np.zeros(n, np.int32)
    workload = _labels(column("workload"), "workload", state, first) if "workload" in cols else np.zeros(n, np.int32)
    if "metro" not in cols:
        state.code("metro", [state.spec.metro], [first])
    if "workload" not in cols:
        state.code("workload", [state.spec.workload], [first])
    chunk = Chunk(first, t, prompt, output, cached, metro, workload)
    key = next((k for k in ("prefix_id", "session_id") if k in cols), None)
    if key:
        chunk.prefix_key = _ids(column(key), key, state, first)
    if "prefix_tokens" in cols:
        chunk.prefix_tokens = _tokens(column("prefix_tokens"), "prefix_tokens", state, first, minimum=0)
        _within_prompt(chunk.prefix_tokens, prompt, "prefix_tokens", state, first)
    _check_order(chunk, state)
    return chunk


def _within_prompt(tokens: np.ndarray, prompt: np.ndarray, what: str, state: ReadState, first: int) -> None:
    over = np.flatnonzero(tokens > prompt)
    if len(over):
        i = int(over[0])
        raise ScenarioError(f"{tokens[i]:,} {what.removesuffix('_tokens')} tokens exceed the prompt's {prompt[i]:,} "
                            "(expected 0 to the prompt's length)", state.origin(first + i), field=state.columns[what])


def _timestamps(a, state: ReadState, first: int) -> np.ndarray:
    name = state.columns["timestamp"]
    _no_nulls(a, "timestamp", name, state, first)
    if pa.types.is_string(a.type) or pa.types.is_large_string(a.type):
        a = _typed_strings(a, state, first)
    if pa.types.is_integer(a.type) or pa.types.is_floating(a.type):
        ns = _epoch_ns(a.to_numpy(zero_copy_only=False), state)
    elif pa.types.is_timestamp(a.type):
        ns = _to_utc_ns(a, state)
    else:
        ns = _to_utc_ns(_parse_strings(a, state, first), state)
    bad = np.flatnonzero((ns < EARLIEST_NS) | (ns > LATEST_NS))
    if len(bad):
        i = int(bad[0])
        raise ScenarioError(
            f"timestamp {a[i].as_py()!r} reads as {pd.Timestamp(int(ns[i]))} UTC, outside 1990–2100 (epoch "
            "milliseconds read as seconds, or the wrong column?)", state.origin(first + i), field=name)
    if state.sub_ms is None:
        state.sub_ms = bool((ns % 1_000_000 != 0).any())
    return ns


STRING_ROUTES = (pa.int64(), pa.float64(), pa.timestamp("ns"), pa.timestamp("ns", tz="UTC"))
PROBE_ROWS = 1000


def _typed_strings(a, state: ReadState, first: int):
    """Timestamp strings → epoch numbers or arrow timestamps. The first of `STRING_ROUTES`
    (epoch integers, epoch decimals, naive ISO 8601, ISO 8601 with a zone) that reads the first
    rows is kept for the file — a failing arrow cast costs as much as a whole parse; strings
    none of them reads go to `_parse_strings`."""
    if state.spec.timestamp_format:
        return _parse_strings(a, state, first)
    if state.string_route is None:
        state.string_route = next((r for r in STRING_ROUTES if _casts(a.slice(0, PROBE_ROWS), r)), False)
    if state.string_route is False:
        return _parse_strings(a, state, first)
    try:
        return pc.cast(a, state.string_route)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a row unlike the first ones: find and name it
        if pa.types.is_timestamp(state.string_route):
            return _parse_strings(a, state, first)
        numbers = pd.to_numeric(pd.Series(a.to_numpy(zero_copy_only=False)), errors="coerce")
        _first_unparsed(a, numbers.isna().to_numpy(), state, first, "epoch numbers, as in the first rows")
        raise


def _casts(a, target) -> bool:
    try:
        pc.cast(a, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def _epoch_ns(values: np.ndarray, state: ReadState) -> np.ndarray:
    """Epoch numbers → ns; the unit (s, ms, µs, ns) from the magnitude of the first chunk."""
    if state.epoch_unit is None:
        typical = float(np.median(np.abs(values)))
        state.epoch_unit = next(u for u in EPOCH_UNITS if typical < u[0])
    scale = state.epoch_unit[1]
    if values.dtype.kind == "f":  # whole and fractional parts apart: 1.7e9 s × 1e9 is beyond float precision
        whole = np.floor(values)
        return whole.astype(np.int64) * scale + np.rint((values - whole) * scale).astype(np.int64)
    return values.astype(np.int64) * scale


def _parse_strings(a, state: ReadState, first: int):
    """Strings → an arrow timestamp array by pandas: the given strftime format, else the
    format pandas guesses from the first value (month first where day and month are
    ambiguous: give the format to read day first), else ISO 8601 in any of its forms."""
    spec = state.spec
    values = a.to_numpy(zero_copy_only=False)
    with warnings.catch_warnings():  # a guessed day-first format is used as guessed; the error says which
        warnings.simplefilter("ignore", UserWarning)
        guessed = spec.timestamp_format or pd.tseries.api.guess_datetime_format(str(values[0]))
    try:
        parsed = pd.to_datetime(pd.Series(values), format=guessed or "ISO8601", errors="coerce")
    except (ValueError, TypeError) as exc:  # zones mixed with naive times, or several zones
        raise ScenarioError(f"timestamps could not be read together: {exc} (expected one format, all with a "
                            "zone or all without)", Origin(str(spec.path)), field=state.columns["timestamp"]) from None
    tried = (f"the format {guessed!r}" + ("" if spec.timestamp_format else " guessed from the first row")) if guessed \
        else "ISO 8601"
    _first_unparsed(a, parsed.isna().to_numpy(), state, first, tried)
    return pa.array(parsed)


def _first_unparsed(a, failed, state: ReadState, first: int, tried: str) -> None:
    failed = np.asarray(failed)
    if failed.any():
        i = int(np.flatnonzero(failed)[0])
        raise ScenarioError(
            f"unparseable timestamp {a[i].as_py()!r} (tried {tried}; expected ISO 8601 such as 2023-11-16 "
            "18:17:03.97, epoch seconds or milliseconds, or a format given as --columns timestamp=COLUMN:FORMAT)",
            state.origin(first + i), field=state.columns["timestamp"])


def _to_utc_ns(a, state: ReadState) -> np.ndarray:
    """An arrow timestamp array → int64 ns UTC; naive times are read in the spec's zone."""
    if a.type.tz is not None:
        return pc.cast(a, pa.timestamp("ns", tz="UTC")).to_numpy(zero_copy_only=False).view(np.int64)
    ns = pc.cast(a, pa.timestamp("ns")).to_numpy(zero_copy_only=False).view(np.int64)
    tz = state.spec.tz
    if tz.upper() in ("UTC", "Z", "GMT"):
        return ns
    try:
        # a naive time in the repeated hour of a DST change is read as standard time
        local = pd.DatetimeIndex(ns.view("datetime64[ns]")).tz_localize(tz, ambiguous=np.zeros(len(ns), bool),
                                                                      nonexistent="shift_forward")
    except (ValueError, KeyError) as exc:
        raise ScenarioError(f"unknown time zone {tz!r} ({exc}); expected an IANA name such as Europe/Paris or UTC",
                            Origin("--tz"), field="tz") from None
    return local.tz_convert("UTC").asi8


def _no_nulls(a, what: str, name: str, state: ReadState, first: int, suffix: str = " (an empty cell)") -> None:
    nulls = a.is_null()
    if pa.types.is_string(a.type) or pa.types.is_large_string(a.type):
        nulls = pc.or_(nulls, pc.equal(pc.utf8_trim_whitespace(a), ""))
    if pc.any(nulls).as_py():
        i = int(np.flatnonzero(nulls.to_numpy(zero_copy_only=False))[0])
        raise ScenarioError(f"missing {what}{suffix}", state.origin(first + i), field=name)


def _tokens(a, what: str, state: ReadState, first: int, minimum: int) -> np.ndarray:
    name = state.columns[what]
    _no_nulls(a, f"{what} tokens", name, state, first)
    try:
        x = pc.cast(a, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        x = pd.to_numeric(pd.Series(a.to_numpy(zero_copy_only=False)), errors="coerce").to_numpy(float)
    for bad, why in ((~np.isfinite(x), "is not a number"),
                     (x != np.floor(x), "is not a whole number of tokens"),
                     (x < minimum, f"is below {minimum} (expected a count of at least {minimum})"),
                     (x > MAX_TOKENS, f"is absurd (more than {MAX_TOKENS:,} tokens)")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ScenarioError(f"{what} tokens {a[i].as_py()!r} {why}", state.origin(first + i), field=name)
    return x.astype(np.int64)


def _ids(a, what: str, state: ReadState, first: int) -> np.ndarray:
    """A prefix or session id column → int64 hashes of the trimmed ids (each distinct id of
    the chunk hashed once)."""
    name = state.columns[what]
    try:
        a = pc.cast(a, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ScenarioError(f"the {what} column holds {a.type} values; expected an id (text or a whole number)",
                            state.origin(first), field=name) from None
    _no_nulls(a, f"{what} (an empty cell; expected an id: a request that shares no prefix needs an id of its own)",
              name, state, first, suffix="")
    encoded = pc.dictionary_encode(pc.utf8_trim_whitespace(a))
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    names = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
    hashes = pd.util.hash_array(names, categorize=False).view(np.int64)
    return hashes[encoded.indices.to_numpy(zero_copy_only=False)]


def _labels(a, what: str, state: ReadState, first: int) -> np.ndarray:
    name = state.columns[what]
    a = pc.cast(a, pa.string())
    _no_nulls(a, f"{what} label", name, state, first)
    encoded = pc.dictionary_encode(pc.utf8_trim_whitespace(a))
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    present, where = np.unique(indices, return_index=True)
    names = encoded.dictionary.to_pylist()
    codes = np.zeros(len(names), np.int32)
    codes[present] = state.code(what, [names[i] for i in present], [first + int(w) for w in where])
    return codes[indices]


def _check_order(c: Chunk, state: ReadState) -> None:
    """Count rows earlier than their predecessor; refuse exact repeats (module docstring)."""
    cached = c.cached if c.cached is not None else np.zeros(len(c.t_ns), np.int64)
    cols = [c.t_ns, c.prompt, c.output, cached, c.metro, c.workload]
    if c.prefix_key is not None:  # two requests with different prefixes are two requests
        cols.append(c.prefix_key)
    if state._last is not None:
        cols = [np.concatenate(([prev], x)) for prev, x in zip(state._last, cols)]
    offset = 0 if state._last is None else 1  # index of the chunk's first row in cols
    step = np.diff(cols[0])
    back = np.flatnonzero(step < 0)
    if len(back):
        if state.first_out_of_order is None:
            state.first_out_of_order = c.first_row + int(back[0]) + 1 - offset
        state.out_of_order += len(back)
        state.largest_step_back_s = max(state.largest_step_back_s, float(-step[back].min()) / NS)
    if state.sub_ms:
        same = np.ones(len(step), bool)
        for x in cols:
            same &= x[1:] == x[:-1]
        if same.any():
            i = c.first_row + int(np.flatnonzero(same)[0]) + 1 - offset
            raise ScenarioError(
                "this row repeats the one before it exactly (timestamp to its last sub-millisecond digit, tokens "
                "and labels): a request logged twice? expected one row per request", state.origin(i),
                field=state.columns["timestamp"])
    state._last = tuple(x[-1] for x in cols)
