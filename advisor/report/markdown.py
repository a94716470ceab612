"""Markdown that reads well as plain text and renders safely on a code-hosting site.

- Text from traces and rules is made inert (:func:`md_text`): no emphasis,
  links, HTML tags or entities can come out of a kernel name or a path.
- Names sit in code spans (:func:`md_code`), with a fence longer than any
  backtick run inside them.
- Prose is wrapped at :data:`WIDTH` characters (:func:`wrap`).
- Tables (:func:`md_table`) are padded into a grid and kept within
  :data:`WIDTH` characters per row, by shortening the widest text columns.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from advisor.units import fmt_bytes, fmt_ms, fmt_num, fmt_pct

__all__ = ["WIDTH", "fact_value", "md_cell", "md_code", "md_table", "md_text", "shorten", "wrap"]

WIDTH = 100
MIN_COLUMN = 10
_ENTITY = re.compile(r"&(?=#?\w+;)")
_EMPHASIS = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_text(value: Any) -> str:
    """Plain text made inert in Markdown: no emphasis, links, code, HTML tags or entities."""
    text = "" if value is None else str(value)
    text = re.sub(r"([\\`*\[\]<>|])", r"\\\1", text)
    text = _EMPHASIS.sub(r"\\_", text)
    return _ENTITY.sub(r"\\&", text)


def md_cell(value: Any) -> str:
    """Inert text on one line, for a table cell."""
    return md_text(" ".join(("" if value is None else str(value)).split()))


def md_code(value: Any) -> str:
    """A name (kernel, op, path) as an inline code span; pipes escaped for tables."""
    text = " ".join(("" if value is None else str(value)).split()).replace("|", "\\|")
    if not text:
        return ""
    # most names hold no backtick: a table's fitting renders its cells again and again, so skip the search then
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1) if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def shorten(value: Any, width: int = 60) -> str:
    text = " ".join(("" if value is None else str(value)).split())
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def wrap(text: Any, width: int = WIDTH, indent: str = "", first: str = "") -> str:
    """Prose wrapped at ``width``; ``first`` starts the first line, ``indent`` the others."""
    return textwrap.fill(str(text or ""), width=width, initial_indent=first, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def fact_value(value: Any, unit: str = "") -> str:
    """A fact value for people, in its unit: ms as durations, fractions as percentages."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        formatter = {"ms": fmt_ms, "fraction": fmt_pct, "bytes": fmt_bytes, "count": fmt_num}.get(unit)
        if formatter:
            return formatter(float(value))
        if unit == "us":
            return fmt_ms(float(value) / 1000)
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
        return f"{value:,}"
    return "" if value is None else str(value)


#: evidence columns a ``site`` column already says
_REDUNDANT = ("file", "line", "function", "exact")
_FIRST = ("name", "site", "phase", "ms", "self_ms", "share", "calls_per_step", "ops_per_step")


def evidence_kind(column: str) -> str:
    """How to show an evidence column, from its name: ``*_ms`` as durations, shares as percentages."""
    if column == "ms" or column.endswith("_ms"):
        return "ms"
    if column == "share" or column.endswith(("_share", "_fraction")):
        return "pct"
    if column.endswith(("_per_step", "count", "calls")):
        return "num"
    if column in ("name", "site", "module", "op", "top_op", "file", "kernel"):
        return "code"
    return "value"


def evidence_columns(keys: Sequence[Any]) -> list[tuple[str, Any, str]]:
    """Table columns for evidence rows: the telling ones first, those a ``site`` column repeats left out."""
    names = [str(k) for k in keys]
    if "site" in names:
        names = [n for n in names if n not in _REDUNDANT]
    names.sort(key=lambda n: _FIRST.index(n) if n in _FIRST else len(_FIRST))
    return [(n, n, evidence_kind(n)) for n in names]


def _num(fmt: Callable[[float], str]) -> Callable[[Any], str]:
    def render(value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "n/a" if value is None else str(value)
        return fmt(float(value))

    return render


#: kind -> (format a raw value, may be shortened, right-aligned)
_KINDS: dict[str, tuple[Callable[[Any], str], bool, bool]] = {
    "text": (lambda v: "" if v is None else " ".join(str(v).split()), True, False),
    "code": (lambda v: "" if v is None else " ".join(str(v).split()), True, False),
    "ms": (_num(fmt_ms), False, True),
    "signed_ms": (_num(lambda v: ("+" if v > 0 else "") + fmt_ms(v)), False, True),
    "pct": (_num(fmt_pct), False, True),
    "signed_pct": (_num(lambda v: ("+" if v > 0 else "") + fmt_pct(v)), False, True),
    "num": (_num(fmt_num), False, True),
    "size": (_num(fmt_bytes), False, True),
    "value": (fact_value, True, False),
}


def _cell(raw: str, kind: str, limit: int | None) -> str:
    text = shorten(raw, limit) if limit else raw
    if kind == "code":
        return md_code(text)
    return md_cell(text) if text else ""


def _row_value(row: Any, key: Any) -> Any:
    if isinstance(row, Mapping):
        return row.get(key)
    if isinstance(row, Sequence) and not isinstance(row, str) and isinstance(key, int) and key < len(row):
        return row[key]
    return None


def md_table(rows: Sequence[Any], columns: Sequence[Sequence[Any]], limit: int = 20, width: int = WIDTH,
             drop: bool = False) -> str:
    """A padded Markdown table of ``rows`` (dicts or sequences) at most ``width`` characters wide.

    ``columns`` are ``(header, key, kind)``; kind is one of text, code, ms, signed_ms, pct,
    signed_pct, num, size, or value (a fact's value; the row's ``unit`` picks the format).
    A kind ending in ``!`` is never shortened. Columns empty in every row are left out. When shortening cells is not enough and ``drop`` is set, the last columns are left out
    and named under the table.
    """
    rows = list(rows)[:limit]
    # A column with no value in any row says nothing and takes room from the others.
    columns = [c for c in columns if any(_row_value(r, c[1]) not in (None, "") for r in rows)] or list(columns)[:1]
    dropped: list[str] = []
    while True:
        table = _fit(rows, columns, limit, width)
        if not drop or len(columns) < 2 or len(table.split("\n", 1)[0]) <= width:
            break
        dropped.insert(0, str(columns.pop()[0]))
    if dropped:
        table += "\n\n" + md_text(f"Columns left out to fit the page: {', '.join(dropped)}.")
    return table


def _fit(rows: Sequence[Any], columns: Sequence[Sequence[Any]], limit: int, width: int) -> str:
    """One padded table, its text columns shortened until it fits ``width`` (or cannot shrink more)."""
    rows = list(rows)[:limit]
    # A kind ending in "!" (say "code!") is never shortened: the other columns give way.
    keep = [str(c[2]).endswith("!") for c in columns]
    columns = [(c[0], c[1], str(c[2]).rstrip("!")) for c in columns]
    kinds = [c[2] for c in columns]
    raw = [[(fact_value(_row_value(r, c[1]), _row_value(r, "unit") or "") if c[2] == "value"
             else _KINDS[c[2]][0](_row_value(r, c[1]))) for c in columns] for r in rows]
    headers = [md_cell(c[0]) for c in columns]
    limits: list[int | None] = [None] * len(columns)
    # Column by column: a round shortens one column, and only that column is rendered again.
    cols = [[_cell(line[i], kinds[i], None) for line in raw] for i in range(len(columns))]
    whole = [list(col) for col in cols]
    # a cell no longer than a column's limit renders as it does unshortened: only the longer ones are redone
    lengths = [[len(" ".join(line[i].split())) for line in raw] for i in range(len(columns))]
    while True:
        data = [max([len(c) for c in col] + [0]) for col in cols]
        widths = [max(d, len(h), 3) for d, h in zip(data, headers)]
        if sum(widths) + 3 * len(widths) + 1 <= width:
            break
        shrinkable = [i for i, k in enumerate(kinds)
                      if _KINDS[k][1] and not keep[i] and data[i] > max(MIN_COLUMN, len(headers[i]))]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: data[i])
        current = limits[widest] if limits[widest] is not None else max(len(line[widest]) for line in raw)
        # Half of what the table is over (and of the way down to the next widest column) never cuts more
        # than steps of one character would: a cut character takes at most two with its escape.
        over = sum(widths) + 3 * len(widths) + 1 - width
        level = max([data[i] for i in shrinkable if i != widest] + [MIN_COLUMN, len(headers[widest])])
        limits[widest] = max(current - max(1, min(over, data[widest] - level) // 2), 1)
        cut = limits[widest]
        cols[widest] = [whole[widest][r] if lengths[widest][r] <= cut else _cell(line[widest], kinds[widest], cut)
                        for r, line in enumerate(raw)]
    cells = [list(row) for row in zip(*cols)] if cols else [[] for _ in raw]
    right = [_KINDS[k][2] for k in kinds]

    def line(values: Sequence[str]) -> str:
        padded = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else "-" * (w + 2) for w, r in zip(widths, right)) + "|"
    return "\n".join([line(headers), rule, *(line(c) for c in cells)])
