"""The formulation's block names are spelled only inside `formulations/`: the rest of the
planner reaches a program's columns and rows through its accessors (`formulations.flow_columns`,
`demand_rows`, `capacity_rows`, `read_solution`, …), so renaming a block touches one package."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from instances import TABLE
from instances import hand_made as tiny

from formulations import Mode, Reading, build_program
from formulations.pools import ROLES

ROOT = Path(__file__).resolve().parent.parent
# block names that are also the planner's own words, spelled on purpose outside the program:
# llm-d's router spec has a "route" key (`optimizer.commands.export.llmd`)
SHARED_ELSEWHERE = {"route"}


def _block_names() -> tuple[set[str], set]:
    """(every column and row block of a small instance's programs in each mode, the words a
    block name shares with the instance and the plan: cost categories, `Reading`'s fields)."""
    inst = tiny(n_minus_1=True)
    keys = [(p.id, st.id) for st in inst.states for p in inst.pools_in(st)]
    largest = {key: len(TABLE) + 2 for key in keys}  # past the table: the size-extra blocks too
    modes = [Mode.plan_master(gpus_per_rps={key: 1.0 for key in keys}), Mode.plan_exact(max_replicas=largest),
             Mode.plan_chord(max_replicas=largest),
             Mode.price_state(committed_usd={}, max_replicas=largest, ondemand_extra_usd={}),
             Mode.operate_fixed(committed={}, gpus_per_rps={key: 1.0 for key in keys}, tie_break_usd_per_gpu_hour=1.0)]
    names: set[str] = set()
    for mode in modes:
        lp, _ = build_program(inst, mode=mode)
        names |= set(lp.cols) | set(lp.rows)
    words = set(inst.cost_categories) | {f.name for f in dataclasses.fields(Reading)} | SHARED_ELSEWHERE
    return names, words


def _program_indexing(node: ast.AST) -> bool:
    """``lp.cols[…]``, ``self.lp.rows.get(…)`` and the like: a program's blocks looked up."""
    def blocks(n):
        return (isinstance(n, ast.Attribute) and n.attr in ("cols", "rows")
                and (isinstance(n.value, ast.Name) and n.value.id == "lp"
                     or isinstance(n.value, ast.Attribute) and n.value.attr == "lp"))
    if isinstance(node, ast.Subscript):
        return blocks(node.value)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and blocks(node.func.value))


def _spelled(tree: ast.AST, names: set[str], words: set[str]) -> list[tuple[int, str]]:
    suffixes = {name[len(role):] for name in names for role in ROLES if name.startswith(role + "_")}
    found = []
    for node in ast.walk(tree):
        if _program_indexing(node):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names - words:
            found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.JoinedStr):  # f"{role}_flow"
            for part in node.values:
                if isinstance(part, ast.Constant) and part.value in suffixes:
                    found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_probe_sees_the_ways_a_block_is_spelled():
    names, words = _block_names()
    assert {"demand_balance", "gpu_capacity", "prefill_flow", "prefill_size_extra", "ramp_up", "committed"} <= names
    code = ('a = lp.cols["route"][key]\nb = self.lp.rows.get("power", {})\nc = "gpu_capacity"\n'
            'd = {f"{role}_flow" for role in roles}\ne = {"ondemand": 1.0}\n')
    assert sorted({line for line, _ in _spelled(ast.parse(code), names, words)}) == [1, 2, 3, 4]


def test_no_block_name_is_spelled_outside_formulations():
    names, words = _block_names()
    found = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in sorted((ROOT / "optimizer").rglob("*.py"))
             for line, what in _spelled(ast.parse(path.read_text()), names, words)]
    assert found == [], "block names spelled outside formulations/ (add an accessor there):\n" + "\n".join(found)
