"""What a plan folder's tables hold: every column with its type, its range and whether it may
be empty. The writer orders its tables by these columns and the reader checks every cell
against them, so a folder a person edited, truncated or half-copied is refused with the
file, the row and the column, never half-understood."""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.base.contracts import COST_COLUMNS, TERMS
from optimizer.base.units import Role, ServingMode

ROLES = tuple(Role)
MAX_REPLICAS = 1_000_000  # more replicas than any fleet could hold: an edit gone wrong
MAX_NODES = 10_000_000
MAX_RATE = 1e9  # requests/s
MAX_USD = 1e15
MAX_MS = 1e9


@dataclass(frozen=True)
class Column:
    """kind: text | int | float | bool. ``empty``: the cell may be empty (a text column
    then reads as missing, a number column as NaN). ``default``: the value of every row
    when the column is absent (folders written before it existed)."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    empty: bool = False
    choices: tuple[str, ...] | None = None
    default: float | str | None = None
    sparse: bool = False  # written only where some row is not the default (plans without spot unchanged)

    def expected(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind == "text":
            return "a name"
        if self.kind == "bool":
            return "True or False"
        what = "a whole number" if self.kind == "int" else "a number"
        if self.low is not None and self.high is not None:
            what += f" in [{self.low:g}, {self.high:g}]"
        elif self.low is not None:
            what += f" ≥ {self.low:g}"
        return what


def _text(name, empty=False, choices=None):
    return Column(name, "text", empty=empty, choices=choices)


def _int(name, low, high, empty=False):
    return Column(name, "int", low, high, empty)


def _float(name, low=0.0, high=None, empty=False):
    return Column(name, "float", low, high, empty)


CARBON_COLUMN = COST_COLUMNS["carbon"]
SLICE = (_text("period"), _text("day_type"), _int("hour", 0, 23))

TABLE_COLUMNS: dict[str, tuple[Column, ...]] = {
    "procurement": (
        _text("site"), _text("gpu"),
        # an existing fleet's columns are absent from folders written before fleets were planned
        *(Column(t.nodes_column, "int", 0, MAX_NODES, default=0) if t.existing else _int(t.nodes_column, 0, MAX_NODES)
          for t in TERMS),
        *(_int(c, 0, MAX_NODES) for c in ("reserved_nodes", "ondemand_nodes_peak")),
        _float("ondemand_node_hours", 0, MAX_NODES * 8784), _float("ramp_node_hours", 0, MAX_NODES * 8784),
        # the carbon columns are absent from folders written before carbon was counted
        *(Column(c, "float", 0, MAX_USD, default=0.0) if c == CARBON_COLUMN else _float(c, 0, MAX_USD)
          for c in (*COST_COLUMNS.values(), "cost_usd")),
        Column("carbon_t", "float", 0, 1e12, default=0.0),
        # spot nodes (rows of a `<gpu>-spot` accelerator): absent from folders written before spot
        Column("spot_nodes_peak", "int", 0, MAX_NODES, default=0, sparse=True),
        Column("spot_node_hours", "float", 0, MAX_NODES * 8784, default=0.0, sparse=True),
    ),
    "pools": (
        _text("site"), _text("workload"), _int("tier", -1, 1000), _text("role", choices=ROLES), _int("speed", -1, 1000),
        _text("gpu"), _text("config"), _int("gpus_per_replica", 1, 100_000), *SLICE, _text("lost_site", empty=True),
        _int("replicas", 0, MAX_REPLICAS), _float("requests_per_s", 0, MAX_RATE), _float("p99_wait_ms", 0, MAX_MS),
        _float("queue_budget_ms", -MAX_MS, MAX_MS, empty=True),
        # KV-cache tiers: the candidate cache a prefill or colocated pool serves with and its hit
        # rate (`optimizer.instance.kvcache`); absent from plans without tiers
        Column("cache_option", "int", -1, 1000, default=-1, sparse=True),
        Column("cache_hit_rate", "float", 0.0, 1.0, default=0.0, sparse=True),
    ),
    "routing": (
        _text("metro"), _text("site"), _text("workload"), _int("tier", 0, 1000), *SLICE,
        _float("requests_per_s", 0, MAX_RATE), _float("rtt_ms", 0, MAX_MS),
    ),
    "slo": (
        _text("metro"), _text("workload"), _text("site"), _int("tier", 0, 1000),
        *(_float(c, 0, MAX_MS) for c in ("ttft_p99_ms_predicted", "ttft_p99_ms_objective", "itl_p99_ms_predicted",
                                         "itl_p99_ms_objective", "network_ms", "overhead_ms", "queue_ms", "prefill_ms",
                                         "transfer_ms", "first_token_ms")),
        _text("mode", choices=tuple(ServingMode)),
    ),
    "curves": (
        _text("id"), _text("workload"), _text("gpu"), _int("gpus", 1, 100_000), _text("role", choices=ROLES),
        _int("batch", 0, 1_000_000), Column("speculative", "bool"), _int("chunk_tokens", 0, 10_000_000),
        _float("prefill_p99_ms", 0, MAX_MS), _float("service_scv", 0, 1e6), _float("step_ms", 0, MAX_MS),
        _float("itl_p99_ms", 0, MAX_MS), _float("tokens_per_step", 1, 1e3), _float("decode_rps", 0, MAX_RATE),
        _float("speed", 0, 1), _float("decode_tokens_per_s", 0, 1e12), _float("kv_budget_gb", -1e6, 1e6),
        _float("weights_gb_per_gpu", 0, 1e6), _int("max_concurrency", 0, 100_000_000), _float("input_share", 0, 1),
        _float("service_mean_ms", 0, MAX_MS), _float("nic_gb_s", 0, 1e6),
        Column("prefill_batch_tokens", "int", 0, 10_000_000, default=0),
        Column("service_third_ratio", "float", 0, 1e12, default=0.0),  # 0 in folders written before it
        # empty in folders written before precisions were a choice: the workload's own
        *(Column(name, "text", empty=True, default="") for name in ("weight_dtype", "kv_dtype")),
        # expert-parallel configs only (serving.expert_parallel): plans without them keep their tables
        Column("expert_parallel", "bool", default=False, sparse=True),
        Column("fabric", "text", empty=True, default="", sparse=True),
    ),
    "nodes": (
        _text("site"), _text("gpu"), *SLICE, _float("weight_hours", 0, 8784), _int("gpus_in_replicas", 0, MAX_NODES * 72),
        _int("committed_nodes", 0, MAX_NODES), _int("ondemand_nodes", 0, MAX_NODES),
        _int("gpus_usable", 0, MAX_NODES * 72), _float("kw", 0, 1e12),
    ),
}

TABLES = tuple(TABLE_COLUMNS)
OPTIONAL_TABLES = ("nodes",)  # absent from folders written before it existed
