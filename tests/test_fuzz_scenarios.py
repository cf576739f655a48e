"""Property-based fuzzing of scenario files: whatever a planner writes, `fleetplan validate` and
`fleetplan plan` end with a documented exit code and a message — never a traceback.

Three starting points, each small enough to plan in a fraction of a second:
* ``tests/data/tiny.yaml`` (catalogue rows, a patch, an inline demand table);
* INLINE, a scenario that writes every table inline (so every catalogue field can be hit);
* INLINE with its metros, sites, supply and demand tables in CSV files (cells, columns and
  rows of a CSV mutated; a file of bytes that are not UTF-8).

A mutation is 1–3 random edits: a number made negative, zero, NaN, ±inf, huge or a string; an
id made unknown; a key dropped; a row duplicated; a table shuffled; a table deleted; a value
replaced by a list or a mapping. Properties:
* `validate` exits 0 or 2; `plan` exits 0, 2, 3, 4 or 5 (never 1 = internal error);
* exit 2, 3 and 5 print a message on stderr starting ``fleetplan:``; exit 2's is one line
  and is the same for `validate` and `plan`; a traceback never reaches stderr;
* what `validate` accepts, `plan` does not reject as bad input (validate finds every input
  error plan would find);
* the same for ``plan tiny.yaml --set KEY=VALUE`` with any dotted key of the resolved
  scenario and a bad value.

``FLEETPLAN_FUZZ_EXAMPLES=500 pytest tests/test_fuzz_scenarios.py`` runs a longer random search;
by default the examples are derandomised (the same 40 per base on every run) so that CI is
deterministic.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import io
import math
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from optimizer.cli.main import main

TINY = Path(__file__).parent / "data" / "tiny.yaml"
# report.html is left out (its plots take ~1 s a plan; the unmutated bases write it), and a
# mutation that grows the model (96 slices, the whole metro catalogue) is cut off by the limit
PLAN_FLAGS = ["--quiet", "--no-report", "--time-limit", "20"]
FILES = "__files__"  # pseudo-key: CSV files written beside the YAML, as lists of rows

CONSUMER = [0.45, 0.33, 0.25, 0.2, 0.2, 0.25, 0.35, 0.5, 0.6, 0.65, 0.7, 0.72,
            0.75, 0.75, 0.75, 0.78, 0.8, 0.85, 0.9, 0.95, 1.0, 1.0, 0.85, 0.6]

INLINE = {
    "name": "inline",
    "horizon": {"periods": [{"id": "H1", "days": 182}, {"id": "H2", "days": 183}],
                "day_types": [{"id": "weekday", "share": 0.7}, {"id": "weekend", "share": 0.3, "demand_multiplier": 0.6}],
                "hours": [4, 16]},
    "accelerators": [{"id": "h100-sxm", "name": "H100 SXM", "vendor": "nvidia", "bf16_dense_tflops": 989.4,
                      "fp8_dense_tflops": 1978.9, "hbm_gb": 80, "hbm_tb_s": 3.35, "tdp_w": 700, "gpus_per_node": 8,
                      "node_kw": 10.2, "scaleup_domain_gpus": 8, "scaleup_gb_s": 900, "nic_gbps_per_gpu": 400}],
    "models": [{"id": "llama-3.1-8b", "name": "Llama 3.1 8B", "total_params_b": 8.03, "active_params_b": 8.03,
                "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "max_context": 131072}],
    "prices": [{"provider": "reference", "gpu": "h100-sxm", "ondemand_usd_per_gpu_hour": 3.99,
                "reserved_1y_usd_per_gpu_hour": 2.793, "reserved_3y_usd_per_gpu_hour": 2.195}],
    "owned": [{"gpu": "h100-sxm", "capex_usd_per_node": 310000, "life_years": 5}],
    "metros": [{"id": "chicago", "name": "Chicago", "lat": 41.8373, "lon": -87.6862, "utc_offset_hours": -6,
                "population": 8604203},
               {"id": "dallas", "name": "Dallas", "lat": 32.7936, "lon": -96.7662, "utc_offset_hours": -6,
                "population": 5743938, "demand_weight": 4.0}],
    "sites": [{"id": "chicago", "name": "Chicago", "metro": "chicago", "lat": 41.8373, "lon": -87.6862,
               "region": "us-central", "power_mw": 40, "pue": 1.22, "energy_usd_per_mwh": 89.5,
               "colo_usd_per_kw_month": 120},
              {"id": "dallas", "name": "Dallas", "metro": "dallas", "lat": 32.7936, "lon": -96.7662,
               "region": "us-south", "power_mw": 50, "pue": 1.3, "energy_usd_per_mwh": 81.5,
               "colo_usd_per_kw_month": 184, "price_multiplier": 1.05}],
    "supply": [{"site": "chicago", "gpu": "h100-sxm", "reserved_nodes_max": 250, "ondemand_nodes_max": 60},
               {"site": "dallas", "gpu": "h100-sxm", "reserved_nodes_max": 400, "ondemand_nodes_max": 100}],
    "workloads": [{"id": "assist", "model": "llama-3.1-8b", "isl_mean_tokens": 800, "isl_p99_tokens": 3000,
                   "osl_mean_tokens": 60, "osl_p99_tokens": 300, "prompt_cache_hit_rate": 0.5,
                   "shared_prefix_tokens": 400, "ttft_p99_ms": 400, "itl_p99_ms": 60, "slo_attainment": 0.99,
                   "diurnal_profile": "consumer", "peak_requests_per_s_per_million_people": 2}],
    "diurnal": {"consumer": CONSUMER},
    "demand": {"growth_per_period": 0.05, "peak_to_mean_intra_hour": 1.1, "scale": 1.0,
               "mix": [{"metro": "dallas", "workload": "assist", "multiplier": 0.5}]},
    "network": {"route_factor": 1.45, "access_rtt_ms": 5},
    "serving": {"modes": ["colocated"], "tier_rtt_ms": [60], "speculative": {"enabled": False},
                "tp_degrees": [1, 2]},
    "policy": {"cold_start_minutes": 0, "warm_pool_fraction": 0},
}


def _inline_with_csv_files() -> dict:
    """INLINE with four tables moved to CSV files (cells, columns, rows fuzzed as such)."""
    doc = copy.deepcopy(INLINE)
    files = {}
    for name in ("metros", "sites", "supply"):
        files[f"{name}.csv"] = doc.pop(name)
        doc[name] = f"{name}.csv"
    files["demand.csv"] = [
        {"metro": m, "workload": "assist", "period": p, "hour": h, "requests_per_s": rps}
        for m, rps in (("chicago", 12.0), ("dallas", 6.0)) for p in ("H1", "H2") for h in (4, 16)
    ]
    doc["demand"] = {"table": "demand.csv", "peak_to_mean_intra_hour": 1.1}
    doc[FILES] = files
    return doc


BASES = {
    "tiny": lambda: yaml.safe_load(TINY.read_text()),
    "inline": lambda: copy.deepcopy(INLINE),
    "csv": _inline_with_csv_files,
}

# ----------------------------------------------------------------------------- mutations

NAN = float("nan")
BAD_VALUES = [-1, 0, -0.5, NAN, math.inf, -math.inf, 1e300, 10**30, 95, 0.001, 1e-9, "abc", "", "1e9",
              None, True, [], {}, [1, 2], {"x": 1}]


def _paths(node, prefix=()):
    """Every path (tuple of keys/indices) below ``node``."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out.extend(_paths(v, prefix + (k,)))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _set(doc, path, value):
    _get(doc, path[:-1])[path[-1]] = value


def _delete(doc, path):
    parent = _get(doc, path[:-1])
    del parent[path[-1]]


def _mutate(doc: dict, data) -> list[str]:
    """Apply 1–3 random edits to ``doc`` in place; return what was done (for the report)."""
    done = []
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        paths = _paths(doc)
        if not paths:
            break
        op = data.draw(st.sampled_from(["value", "value", "value", "scale", "unknown_id", "drop", "duplicate",
                                        "shuffle", "delete_table", "drop_column", "not_utf8"]), label="op")
        if op in ("value", "scale"):
            path = data.draw(st.sampled_from(paths), label="path")
            if op == "scale":
                numbers = [p for p in paths if isinstance(_get(doc, p), (int, float)) and not isinstance(_get(doc, p), bool)]
                if not numbers:
                    continue
                path = data.draw(st.sampled_from(numbers), label="number")
                factor = data.draw(st.sampled_from([-1, 0, 1e-6, 1e6, 100, 0.01]), label="factor")
                value = _get(doc, path) * factor
            else:
                value = data.draw(st.sampled_from(BAD_VALUES), label="value")
            _set(doc, path, copy.deepcopy(value))
            done.append(f"set {path} = {value!r}")
        elif op == "unknown_id":
            strings = [p for p in paths if isinstance(_get(doc, p), str)]
            if not strings:
                continue
            path = data.draw(st.sampled_from(strings), label="string")
            value = data.draw(st.sampled_from([_get(doc, path) + "-x", "nosuch", _get(doc, path)[:-1] or "?"]),
                              label="id")
            _set(doc, path, value)
            done.append(f"set {path} = {value!r}")
        elif op == "drop":
            keys = [p for p in paths if isinstance(_get(doc, p[:-1]), dict)]
            path = data.draw(st.sampled_from(keys), label="key")
            _delete(doc, path)
            done.append(f"drop {path}")
        elif op in ("duplicate", "shuffle"):
            lists = [p for p in paths if isinstance(_get(doc, p), list) and _get(doc, p)]
            if not lists:
                continue
            path = data.draw(st.sampled_from(lists), label="list")
            items = _get(doc, path)
            if op == "duplicate":
                i = data.draw(st.integers(0, len(items) - 1), label="row")
                items.append(copy.deepcopy(items[i]))
                done.append(f"duplicate {path}[{i}]")
            else:
                order = data.draw(st.permutations(range(len(items))), label="order")
                items[:] = [items[i] for i in order]
                done.append(f"shuffle {path} → {order}")
        elif op == "delete_table":
            top = sorted(k for k in doc if k != FILES)
            if not top:
                continue
            key = data.draw(st.sampled_from(top), label="table")
            del doc[key]
            done.append(f"delete {key}")
        elif op == "drop_column":
            files = doc.get(FILES) or {}
            tables = sorted(name for name, rows in files.items() if isinstance(rows, list) and rows
                            and isinstance(rows[0], dict) and rows[0])
            if not tables:
                continue
            name = data.draw(st.sampled_from(tables), label="file")
            column = data.draw(st.sampled_from(sorted(files[name][0])), label="column")
            for row in files[name]:
                if isinstance(row, dict):
                    row.pop(column, None)
            done.append(f"drop column {column} of {name}")
        elif op == "not_utf8":
            target = data.draw(st.sampled_from(["scenario.yaml"] + sorted(doc.get(FILES) or {})), label="file")
            doc.setdefault("__bytes__", []).append(target)
            done.append(f"append bytes that are not UTF-8 to {target}")
    return done


def _write(doc: dict, folder: Path) -> Path:
    """The YAML and its CSV files. A CSV 'row' that is not a mapping is written as one cell."""
    doc = dict(doc)
    files = doc.pop(FILES, None)
    files = files if isinstance(files, dict) else {}  # an edit that replaced them all: no CSV files
    garbage = doc.pop("__bytes__", [])
    for name, rows in files.items():
        rows = rows if isinstance(rows, list) else [rows]
        header: list[str] = []
        for row in rows:
            for k in (row if isinstance(row, dict) else {}):
                if str(k) not in header:
                    header.append(str(k))
        with (folder / name).open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for row in rows:
                if isinstance(row, dict):
                    writer.writerow(["" if row.get(h) is None else row.get(h) for h in header])
                else:
                    writer.writerow([row])
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    for name in garbage:
        with (folder / name).open("ab") as handle:
            handle.write(b"\nname\xff\xfe: caf\xe9\n")
    return path


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def _check(doc: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(doc, folder)
        note(path.read_text(errors="replace"))
        v_code, v_err = _run(["validate", str(path)])
        assert v_code in (0, 2), (v_code, v_err)
        p_code, p_err = _run(["plan", str(path), "--out", str(folder / "plan"), *PLAN_FLAGS])
        event(f"validate exit {v_code}, plan exit {p_code}")
        assert p_code in (0, 2, 3, 4, 5), (p_code, p_err)
        for code, err in ((v_code, v_err), (p_code, p_err)):
            assert "Traceback" not in err
            if code in (2, 3, 5):
                assert err.startswith("fleetplan: ") and err.strip(), err
            if code == 2:
                assert len(err.strip().splitlines()) == 1, err
        if v_code == 2:
            assert p_code == 2 and p_err == v_err, (v_err, p_err)
        else:
            assert p_code != 2, f"validate accepted what plan rejects as bad input: {p_err}"
        assert (folder / "plan").exists() == (p_code in (0, 4))


def _settings():
    n = int(os.environ.get("FLEETPLAN_FUZZ_EXAMPLES", "0"))
    return settings(max_examples=n or 40, deadline=None, derandomize=not n, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("base", sorted(BASES))
def test_unmutated_bases_plan(base):
    """The starting points are good scenarios: validate and plan both exit 0."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(BASES[base](), Path(tmp))
        assert _run(["validate", str(path)]) == (0, "")
        code, err = _run(["plan", str(path), "--out", str(Path(tmp) / "plan"), "--quiet"])
        assert code == 0, err


@pytest.mark.parametrize("base", sorted(BASES))
@given(data=st.data())
@_settings()
def test_mutated_scenarios_exit_cleanly(base, data):
    doc = BASES[base]()
    edits = _mutate(doc, data)
    note("edits: " + "; ".join(edits))
    _check(doc)


# ----------------------------------------------------------------------------- --set overrides

SET_VALUES = ["-1", "0", ".nan", ".inf", "1e300", "abc", "[]", "{}", "null", "x2", "×0", "x1e300", "[1, 2]", "true",
              "{a: 1}", ""]


def _dotted_paths(node, prefix=()) -> list[str]:
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            if "." in str(k):  # a dotted id cannot be named by a dotted path
                continue
            out.append(".".join(prefix + (str(k),)))
            out.extend(_dotted_paths(v, prefix + (str(k),)))
    return out


@functools.cache
def _tiny_paths() -> list[str]:
    from optimizer.scenario import load_raw

    return sorted(_dotted_paths(load_raw(TINY).data))


@given(data=st.data())
@_settings()
def test_set_overrides_exit_cleanly(data):
    """``fleetplan plan tiny.yaml --set KEY=VALUE`` with any key of the resolved scenario and a
    bad value: exit 0, 2, 3, 4 or 5, never a traceback."""
    overrides = []
    for _ in range(data.draw(st.integers(1, 2), label="overrides")):
        key = data.draw(st.sampled_from(_tiny_paths()), label="key")
        overrides.append(f"{key}={data.draw(st.sampled_from(SET_VALUES), label='value')}")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["plan", str(TINY), "--out", str(Path(tmp) / "plan"), *PLAN_FLAGS]
        code, err = _run(argv + [a for o in overrides for a in ("--set", o)])
    event(f"plan exit {code}")
    assert code in (0, 2, 3, 4, 5), (code, err)
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith("fleetplan: ") and len(err.strip().splitlines()) == 1, err
