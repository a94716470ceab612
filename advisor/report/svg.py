"""Charts as SVG text, drawn directly: horizontal bars on a value axis, and boxes joined by arrows.

The reports' charts are a few bars and boxes, and matplotlib cost them more than
everything else a report does: 0.7 s to import and about 0.2 s per chart (its
text laid out as glyph paths), on a run whose analysis takes 0.6 s. Drawn here
they take milliseconds. Every string from a trace goes through :func:`esc`
(XML escaping), so a kernel name can only ever be the text of a ``<text>``
element, never markup; there are no scripts, links or foreign objects. Text
width is estimated (:data:`CHAR_W` per character), so labels are cut to a
known number of characters before they are placed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Bar", "Point", "Row", "bar_chart", "esc", "log_scatter", "nice_ticks"]

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
#: estimated width of one character at the 11 px font, and of a label column's characters
CHAR_W = 6.4
WIDTH = 760
AXIS = "#555555"
GRID = "#e6e6e6"
_XML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})


def esc(text: object) -> str:
    """Text for an SVG element or attribute: XML-escaped, quotes included.

    ``str.translate`` rather than ``xml.sax.saxutils.escape``: that module pulls in urllib.request and
    http.client (about 15 ms of imports) for one replacement table.
    """
    return str(text).translate(_XML_ESCAPES)


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def text(x: float, y: float, value: object, size: int = 11, anchor: str = "start", fill: str = "#222222",
         weight: str = "normal", baseline: str = "central") -> str:
    return (f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}" dominant-baseline="{baseline}">{esc(value)}</text>')


def rect(x: float, y: float, w: float, h: float, fill: str, title: str = "", extra: str = "") -> str:
    tip = f"<title>{esc(title)}</title>" if title else ""
    body = f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0.0))}" height="{_num(h)}" fill="{fill}"{extra}'
    return f"{body}>{tip}</rect>" if tip else f"{body}/>"


def line(x0: float, y0: float, x1: float, y1: float, stroke: str = AXIS, width: float = 1.0, extra: str = "") -> str:
    return (f'<line x1="{_num(x0)}" y1="{_num(y0)}" x2="{_num(x1)}" y2="{_num(y1)}" stroke="{stroke}" '
            f'stroke-width="{_num(width)}"{extra}/>')


def document(width: float, height: float, body: Sequence[str], title: str = "", defs: str = "") -> str:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(width)}" height="{_num(height)}" '
            f'viewBox="0 0 {_num(width)} {_num(height)}" font-family="{FONT}" role="img">')
    parts = ['<?xml version="1.0" encoding="utf-8" standalone="no"?>', head]
    if title:
        parts.append(f"<title>{esc(title)}</title>")
    if defs:
        parts.append(f"<defs>{defs}</defs>")
    parts.append(rect(0, 0, width, height, "#ffffff"))
    parts.extend(body)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _legend(entries: Sequence[tuple[str, str]], left: float) -> list[str]:
    """A row of colored squares with their names, above the plot."""
    out, x = [], left
    for name, color in entries:
        out += [rect(x, 9, 12, 12, color), text(x + 16, 15, name, size=11)]
        x += 28 + len(name) * CHAR_W
    return out


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top``: steps of 1, 2 or 5 times a power of ten."""
    if not top > 0 or math.isinf(top):
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _tick_text(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == 0 else f"{value:g}"


@dataclass
class Bar:
    """One bar: spans ``(start, width, color, tooltip)`` on the value axis, a note after its end, and
    optionally a whisker ``(low, high)``."""

    spans: list[tuple[float, float, str, str]]
    note: str = ""
    whisker: tuple[float, float] | None = None

    @property
    def end(self) -> float:
        ends = [s + w for s, w, _, _ in self.spans] + ([self.whisker[1]] if self.whisker else [])
        return max(ends, default=0.0)


@dataclass
class Row:
    """A labelled row of one or more bars (two for a before/after pair)."""

    label: str
    bars: list[Bar] = field(default_factory=list)


def stacked(values: Sequence[float], colors: Sequence[str], names: Sequence[str], note: str = "") -> Bar:
    """A bar of segments laid end to end."""
    spans, left = [], 0.0
    for value, color, name in zip(values, colors, names):
        spans.append((left, value, color, name))
        left += value
    return Bar(spans, note)


def bar_chart(rows: Sequence[Row], xlabel: str, legend: Sequence[tuple[str, str]] = (), title: str = "",
              row_height: float | None = None, headroom: float = 1.15) -> str:
    """Horizontal bars: one row per label, top to bottom, on a shared value axis from 0."""
    label_chars = max([len(r.label) for r in rows] + [4])
    left = min(14 + label_chars * CHAR_W, WIDTH * 0.45)
    right = 16
    note_room = 7 * max([len(b.note) for r in rows for b in r.bars] + [0])
    plot_w = max(WIDTH - left - right - note_room, 120)
    row_h = row_height or (24.0 if len(rows) <= 24 else max(8.0, 600 / len(rows)))
    top = 30.0 if legend else 12.0
    height = top + row_h * len(rows) + 44
    peak = max([b.end for r in rows for b in r.bars] + [0.0])
    ticks = nice_ticks(peak * headroom if peak > 0 else 1.0)
    scale = plot_w / ticks[-1]
    body: list[str] = []
    bottom = top + row_h * len(rows)
    for tick in ticks:
        x = left + tick * scale
        body.append(line(x, top, x, bottom, GRID))
        body.append(text(x, bottom + 12, _tick_text(tick), size=10, anchor="middle", fill=AXIS))
    body.append(line(left, bottom, left + plot_w, bottom))
    body.append(line(left, top, left, bottom))
    body.append(text(left + plot_w / 2, bottom + 32, xlabel, size=11, anchor="middle"))
    for i, row in enumerate(rows):
        y0 = top + i * row_h
        body.append(text(left - 6, y0 + row_h / 2, row.label, size=10 if row_h < 16 else 11, anchor="end"))
        thick = row_h * 0.7 / max(len(row.bars), 1)
        for j, bar in enumerate(row.bars):
            yb = y0 + row_h * 0.15 + j * thick
            body.extend(rect(left + s * scale, yb, w * scale, thick, color, tip) for s, w, color, tip in bar.spans)
            if bar.whisker:
                lo, hi = bar.whisker
                mid = yb + thick / 2
                body.append(line(left + lo * scale, mid, left + hi * scale, mid, "#333333"))
                for end in (lo, hi):
                    body.append(line(left + end * scale, mid - thick / 3, left + end * scale, mid + thick / 3, "#333333"))
            if bar.note:
                body.append(text(left + bar.end * scale + 4, yb + thick / 2, bar.note, size=10))
    body.extend(_legend(legend, left))
    return document(WIDTH, height, body, title)


@dataclass
class Point:
    """A point of a scatter: where, its area in proportion to ``weight``, its color and tooltip."""

    x: float
    y: float
    weight: float
    color: str
    tip: str


def _decades(values: Sequence[float]) -> tuple[int, int]:
    lo, hi = min(values), max(values)
    return math.floor(math.log10(lo)), max(math.ceil(math.log10(hi)), math.floor(math.log10(lo)) + 1)


def log_scatter(points: Sequence[Point], xlabel: str, ylabel: str, title: str = "",
                roofs: Sequence[tuple[str, float, float]] = (), legend: Sequence[tuple[str, str]] = ()) -> str:
    """Points on log-log axes, with roofline ceilings: ``roofs`` are ``(name, TB/s, TFLOP/s peak)``, drawn
    as the memory slope ``y = TB/s * x`` up to the flat compute peak."""
    xs = [p.x for p in points if p.x > 0]
    ys = [p.y for p in points if p.y > 0] + [peak for _, _, peak in roofs]
    x0, x1 = _decades(xs)
    y0, y1 = _decades(ys)
    left, right, top, bottom = 64.0, 20.0, 30.0 if legend else 14.0, 46.0
    plot_w, plot_h = WIDTH - left - right, 300.0
    height = top + plot_h + bottom

    def px(x: float) -> float:
        return left + (math.log10(x) - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (math.log10(y) - y0) / (y1 - y0) * plot_h

    body: list[str] = []
    for d in range(x0, x1 + 1):
        body.append(line(px(10.0 ** d), top, px(10.0 ** d), top + plot_h, GRID))
        body.append(text(px(10.0 ** d), top + plot_h + 12, f"{10.0 ** d:g}", size=10, anchor="middle", fill=AXIS))
    for d in range(y0, y1 + 1):
        body.append(line(left, py(10.0 ** d), left + plot_w, py(10.0 ** d), GRID))
        body.append(text(left - 6, py(10.0 ** d), f"{10.0 ** d:g}", size=10, anchor="end", fill=AXIS))
    body.append(line(left, top + plot_h, left + plot_w, top + plot_h))
    body.append(line(left, top, left, top + plot_h))
    body.append(text(left + plot_w / 2, top + plot_h + 32, xlabel, size=11, anchor="middle"))
    body.append(f'<g transform="translate(14 {_num(top + plot_h / 2)}) rotate(-90)">'
                + text(0, 0, ylabel, size=11, anchor="middle") + "</g>")
    for name, tb_s, peak in roofs:
        knee = peak / tb_s  # FLOP per byte where the memory slope meets the compute peak
        start = max(10.0 ** x0, 10.0 ** y0 / tb_s)
        path = (f'<path d="M {_num(px(start))} {_num(py(tb_s * start))} L {_num(px(min(knee, 10.0 ** x1)))} '
                f'{_num(py(tb_s * min(knee, 10.0 ** x1)))}' + (f' L {_num(px(10.0 ** x1))} {_num(py(peak))}'
                                                               if knee < 10.0 ** x1 else "")
                + f'" stroke="#333333" stroke-width="1.5" fill="none"><title>{esc(name)}</title></path>')
        body.append(path)
        body.append(text(left + plot_w - 4, py(peak) - 8, name, size=10, anchor="end", fill="#333333"))
    heaviest = max([p.weight for p in points] + [1e-12])
    for p in sorted(points, key=lambda q: -q.weight):  # the small ones on top
        if p.x <= 0 or p.y <= 0:
            continue
        radius = 3 + 13 * math.sqrt(p.weight / heaviest)
        body.append(f'<circle cx="{_num(px(p.x))}" cy="{_num(py(p.y))}" r="{_num(radius)}" fill="{p.color}" '
                    f'fill-opacity="0.65" stroke="#333333" stroke-width="0.5"><title>{esc(p.tip)}</title></circle>')
    body.extend(_legend(legend, left))
    return document(WIDTH, height, body, title)
