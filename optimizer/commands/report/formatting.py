"""Numbers for people, and HTML tables that fit the page.

Money reads $11.0 M, $457 k, $9,812 or $0.598 (three significant digits above $10,000 and
below $10, whole dollars between); counts carry thousands separators (1,464); shares are
percentages (81.0 %); no figure is ever printed in scientific notation. Every text that
reaches the page passes through `html.escape`, so a scenario's names stay text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

MISSING = "–"


def _absent(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA


def _no_amount(x) -> bool:
    """Nothing a number formatter can show: absent, or — in a plan folder a person edited —
    text, a truth value or an infinite number. The report shows it as missing."""
    if _absent(x) or isinstance(x, bool):
        return True
    try:
        return not math.isfinite(float(x))
    except (TypeError, ValueError):
        return True


def significant(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits in positional notation: 11.04 → '11.0',
    0.5979 → '0.598', 1234.5 → '1,235' (never fewer than the integer digits)."""
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    rounded = round(x, decimals)
    if rounded != 0:  # 9.996 rounds to 10.0: one decimal fewer keeps three digits
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


def usd(x) -> str:
    """$11.0 M, $1.23 B, $457 k, $9,812, $35.20, $3.50, $0.598; negative amounts with a minus sign."""
    if _no_amount(x):
        return MISSING
    sign, a = ("−" if float(x) < 0 else ""), abs(float(x))
    if a >= 1e9:
        return f"{sign}${significant(a / 1e9)} B"
    if a >= 1e6:
        return f"{sign}${significant(a / 1e6)} M"
    if a >= 1e4:
        return f"{sign}${significant(a / 1e3)} k"
    if a >= 100:  # whole dollars: within half a percent
        return f"{sign}${a:,.0f}"
    return f"{sign}${a:.2f}" if a >= 1 else f"{sign}${significant(a)}"


def count(x) -> str:
    """A whole number with thousands separators: 1,464."""
    return MISSING if _no_amount(x) else f"{round(float(x)):,}"


def pct(x, digits: int = 1, signed: bool = False) -> str:
    """A fraction as a percentage: 0.8105 → '81.0 %' (signed: '+81.0 %')."""
    if _no_amount(x):
        return MISSING
    return f"{100 * float(x):{'+' if signed else ''},.{digits}f} %".replace("-", "−")


def ms(x) -> str:
    """A duration in milliseconds: '288 ms', '2,316 ms', '9.5 ms'."""
    if _no_amount(x):
        return MISSING
    return f"{float(x):,.0f} ms" if abs(float(x)) >= 100 else f"{float(x):.1f} ms"


def number(x) -> str:
    """Any other figure: whole numbers with separators, the rest to three significant digits."""
    if _absent(x):
        return MISSING
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if float(x).is_integer() or abs(x) >= 1000:
        return count(x)
    return significant(float(x))


def unless_zero(fmt: Callable) -> Callable:
    """``fmt``, with '–' for 0 (a figure that does not apply, such as a prefill pool's batch)."""
    return lambda x: MISSING if not _absent(x) and x == 0 else fmt(x)


def text(x) -> str:
    return MISSING if _absent(x) else str(x)


def esc(x) -> str:
    return html.escape(str(x), quote=True)


@dataclass(frozen=True)
class TableColumn:
    """One column of a table: the frame's column, its heading and how its cells read."""

    key: str
    label: str
    fmt: Callable = text
    numeric: bool = False


def table(frame: pd.DataFrame, columns: Sequence[TableColumn], *, table_id: str | None = None,
          total: dict | None = None) -> str:
    """An HTML table of ``frame``'s ``columns``; numbers right-aligned and never wrapped,
    headings wrapped so the table fits the page; ``total`` adds a last row (key → cell)."""
    head = "".join(f'<th class="{"num" if c.numeric else ""}">{esc(c.label)}</th>' for c in columns)
    rows = []
    for record in frame.to_dict("records"):
        rows.append("".join(_cell(c, c.fmt(record.get(c.key))) for c in columns))
    if total:
        rows.append("".join(_cell(c, total.get(c.key, ""), "total") for c in columns))
    body = "".join(f"<tr>{r}</tr>" for r in rows)
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f'<div class="table-wrap"><table class="t"{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _cell(column: TableColumn, value: str, extra: str = "") -> str:
    classes = " ".join(x for x in ("num" if column.numeric else "", extra) if x)
    return f'<td class="{classes}">{esc(value)}</td>' if classes else f"<td>{esc(value)}</td>"


def ranges(values: Sequence[int], wrap: int | None = None) -> list[tuple[int, int]]:
    """Consecutive runs of sorted integers as (first, last) pairs; with ``wrap`` (24 for hours
    of the day) a run through the end joins one through the start: 22, 23, 0, 1 → (22, 1)."""
    out: list[list[int]] = []
    for v in sorted(set(values)):
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    if wrap and len(out) > 1 and out[0][0] == 0 and out[-1][1] == wrap - 1:
        out[0][0] = out.pop()[0]
    return [tuple(r) for r in out]
