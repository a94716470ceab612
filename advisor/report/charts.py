"""Charts for the reports, drawn with matplotlib as SVG text.

Each chart is a pure function of the findings (facts by name) that returns a
:class:`Chart`: the SVG when its data exists, else the reason it could not be
drawn. Figures are made with :class:`matplotlib.figure.Figure` directly, not
pyplot, so no GUI backend is chosen and nothing needs a display. Text is
drawn as paths (``svg.fonttype: path``), so a kernel name from a trace ends
up as glyph outlines, never as markup, and the picture looks the same in
every browser. ``text.parse_math`` is off, so a ``$`` in a name is just a
character.

Charts read these facts, and are skipped with the reason when they are absent:

- ``phases``: ``steps.table`` (``step``, ``<phase>_ms`` columns), else ``phases.table``.
- ``gpu``: per-step busy/idle (``gpu.steps`` or ``steps.table`` rows with
  ``gpu_busy_ms``/``busy_ms`` and ``gpu_idle_ms``/``idle_ms``), else busy intervals
  (``gpu.timeline`` rows with ``start_ms`` and ``end_ms`` or ``dur_ms``, optional
  ``stream`` and ``state``), else ``gpu.busy_fraction`` with ``steps.time_ms``.
- ``kernels``: ``kernels.top`` (``name``, ``ms``); ``operators``: ``ops.top`` (``name``, ``self_ms``).
- ``ranks``: ``ranks.step_ms`` rows with ``rank`` and one of ``ms``/``step_ms``/``time_ms``/``mean_ms``
  (several rows per rank are averaged; ``min_ms``/``max_ms`` give the range), and
  ``ranks.straggler`` (a rank number) to highlight.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from advisor.units import fmt_ms

__all__ = ["PHASE_COLORS", "Chart", "compare_chart", "draw", "label", "report_charts"]

PHASE_COLORS = {
    "dataloader": "#e8871e", "forward": "#4c78a8", "backward": "#8e6bbf", "optimizer": "#54a24b",
    "communication": "#d6616b", "other": "#b0b0b0",
}
_EXTRA_COLORS = ["#72b7b2", "#f2cf5b", "#9d755d", "#ff9da6", "#79706e"]
BUSY, IDLE, BAR, HIGHLIGHT = "#4c78a8", "#f4a582", "#4c78a8", "#d6616b"
WIDTH_IN = 8.0
_RC = {
    "svg.fonttype": "path", "svg.hashsalt": "advisor", "text.parse_math": False, "font.size": 9,
    "axes.spines.top": False, "axes.spines.right": False, "axes.titlesize": 10, "axes.titleweight": "bold",
}


@dataclass
class Chart:
    """One chart: its SVG text, or why it could not be drawn."""

    id: str
    title: str
    caption: str
    svg: str | None = None
    missing: str = ""


def label(text: Any, width: int = 48) -> str:
    """A name shortened for an axis: 'void ' dropped, cut to ``width`` characters with an ellipsis."""
    name = " ".join(str(text or "?").split())
    if name.startswith("void "):
        name = name[5:]
    return name if len(name) <= width else name[: width - 1] + "…"


def draw(paint: Callable[[Figure], None], height_in: float, width_in: float = WIDTH_IN) -> str:
    """Run ``paint`` on a fresh figure and return the SVG text (deterministic, no date)."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width_in, max(height_in, 1.6)), layout="constrained")
        paint(fig)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _phase_color(name: str, index: int) -> str:
    return PHASE_COLORS.get(name, _EXTRA_COLORS[index % len(_EXTRA_COLORS)])


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


def _first(row: Mapping[str, Any], names: Sequence[str]) -> float | None:
    for name in names:
        value = _num(row.get(name))
        if value is not None:
            return value
    return None


# step time per phase ---------------------------------------------------------------------

def _phase_rows(facts: Mapping[str, Any]) -> tuple[list[str], list[str], list[list[float]]]:
    """(bar labels, phase names, ms per bar per phase): the mean first, then each analysed step."""
    table = _rows(facts.get("phases.table"))
    phases = [str(r.get("phase")) for r in table] or ["dataloader", "forward", "backward", "optimizer", "other"]
    labels, values = [], []
    if table:
        labels.append("mean")
        values.append([_num(r.get("ms")) or 0.0 for r in table])
    for row in _rows(facts.get("steps.table")):
        if any(f"{p}_ms" in row for p in phases):
            labels.append(f"step {row.get('step', len(labels))}")
            values.append([_num(row.get(f"{p}_ms")) or 0.0 for p in phases])
    return labels, phases, values


def phase_chart(facts: Mapping[str, Any]) -> Chart:
    chart = Chart("phases", "Step time per phase",
                  "Horizontal stacked bars: the mean step and each analysed step, split into phases, in ms.")
    labels, phases, values = _phase_rows(facts)
    if not values:
        chart.missing = "no step-time split in the findings (phases.table)"
        return chart

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot()
        ys = list(range(len(labels)))[::-1]
        left = [0.0] * len(labels)
        for i, phase in enumerate(phases):
            widths = [row[i] for row in values]
            ax.barh(ys, widths, left=left, color=_phase_color(phase, i), label=phase, height=0.6)
            left = [a + b for a, b in zip(left, widths)]
        for y, total in zip(ys, left):
            ax.text(total, y, " " + fmt_ms(total), va="center", fontsize=8)
        ax.set_yticks(ys, labels)
        ax.set_xlabel("ms per step")
        ax.set_xlim(0, max(left) * 1.15 or 1)
        ax.legend(ncols=min(len(phases), 6), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)

    chart.svg = draw(paint, 0.9 + 0.3 * len(labels))
    return chart


# GPU busy and idle ------------------------------------------------------------------------

def _gpu_steps(facts: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    for name in ("gpu.steps", "steps.table"):
        out = []
        for i, row in enumerate(_rows(facts.get(name))):
            busy, idle = _first(row, ("gpu_busy_ms", "busy_ms")), _first(row, ("gpu_idle_ms", "idle_ms"))
            if busy is not None and idle is not None:
                out.append((f"step {row.get('step', i)}", busy, idle))
        if out:
            return out
    return []


def _gpu_intervals(facts: Mapping[str, Any]) -> dict[str, list[tuple[float, float, bool]]]:
    """Stream -> [(start_ms, duration_ms, busy)] from ``gpu.timeline``."""
    lanes: dict[str, list[tuple[float, float, bool]]] = {}
    for row in _rows(facts.get("gpu.timeline")):
        start = _num(row.get("start_ms"))
        end, dur = _num(row.get("end_ms")), _first(row, ("dur_ms", "ms"))
        if start is None or (end is None and dur is None):
            continue
        width = dur if dur is not None else end - start  # type: ignore[operator]
        state = str(row.get("state", row.get("kind", "busy"))).lower()
        lane = f"stream {row['stream']}" if row.get("stream") is not None else "GPU"
        lanes.setdefault(lane, []).append((start, max(width, 0.0), state != "idle"))
    return lanes


def gpu_chart(facts: Mapping[str, Any]) -> Chart:
    chart = Chart("gpu", "GPU busy and idle over the analysed steps",
                  "When the GPU was running kernels or copies (busy) and when it waited (idle).")
    if facts.get("trace.has_gpu") is False:
        chart.missing = "the trace has no GPU activity: a CPU-only run"
        return chart
    steps, lanes = _gpu_steps(facts), _gpu_intervals(facts)
    busy_share, step_ms = _num(facts.get("gpu.busy_fraction")), _num(facts.get("steps.time_ms"))
    if not steps and not lanes and busy_share is not None and step_ms:
        steps = [("mean step", busy_share * step_ms, (1 - busy_share) * step_ms)]
    if lanes:
        chart.svg = draw(lambda fig: _paint_lanes(fig, lanes), 0.9 + 0.35 * len(lanes))
    elif steps:
        chart.svg = draw(lambda fig: _paint_busy_idle(fig, steps), 0.9 + 0.3 * len(steps))
    else:
        chart.missing = "the findings have no GPU busy/idle facts: gpu.busy_fraction, gpu.timeline"
    return chart


def _paint_busy_idle(fig: Figure, steps: list[tuple[str, float, float]]) -> None:
    ax = fig.add_subplot()
    ys = list(range(len(steps)))[::-1]
    busy, idle = [s[1] for s in steps], [s[2] for s in steps]
    ax.barh(ys, busy, color=BUSY, label="busy", height=0.6)
    ax.barh(ys, idle, left=busy, color=IDLE, label="idle", height=0.6)
    for y, b, i in zip(ys, busy, idle):
        share = i / (b + i) if b + i else 0.0
        ax.text(b + i, y, f" {share:.0%} idle", va="center", fontsize=8)
    ax.set_yticks(ys, [s[0] for s in steps])
    ax.set_xlabel("ms per step")
    ax.set_xlim(0, max(b + i for b, i in zip(busy, idle)) * 1.18 or 1)
    ax.legend(ncols=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)


def _paint_lanes(fig: Figure, lanes: dict[str, list[tuple[float, float, bool]]]) -> None:
    ax = fig.add_subplot()
    names = sorted(lanes)
    for y, name in enumerate(reversed(names)):
        spans = lanes[name]
        ax.broken_barh([(s, w) for s, w, b in spans if b], (y - 0.3, 0.6), color=BUSY)
        ax.broken_barh([(s, w) for s, w, b in spans if not b], (y - 0.3, 0.6), color=IDLE)
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_xlabel("ms from the start of the first analysed step (blue: busy, orange or blank: idle)")


# top kernels and operators ----------------------------------------------------------------

def _bars(rows: list[tuple[str, float]], xlabel: str, highlight: str | None = None) -> Callable[[Figure], None]:
    def paint(fig: Figure) -> None:
        ax = fig.add_subplot()
        ys = list(range(len(rows)))[::-1]
        colors = [HIGHLIGHT if highlight is not None and name == highlight else BAR for name, _ in rows]
        ax.barh(ys, [v for _, v in rows], color=colors, height=0.6)
        for y, (_, v) in zip(ys, rows):
            ax.text(v, y, " " + fmt_ms(v), va="center", fontsize=8)
        ax.set_yticks(ys, [name for name, _ in rows])
        ax.set_xlabel(xlabel)
        ax.set_xlim(0, max(v for _, v in rows) * 1.2 or 1)

    return paint


def top_chart(facts: Mapping[str, Any], fact: str, value_col: str, chart_id: str, title: str,
              limit: int = 10) -> Chart:
    chart = Chart(chart_id, title, f"Horizontal bars: the {limit} largest by time per step, in ms.")
    rows = [(label(r.get("name")), _num(r.get(value_col))) for r in _rows(facts.get(fact))[:limit]]
    rows = [(n, v) for n, v in rows if v is not None]
    if not rows:
        chart.missing = f"the findings have no {fact} table"
        return chart
    chart.svg = draw(_bars(rows, "ms per step"), 0.7 + 0.28 * len(rows))  # type: ignore[arg-type]
    return chart


# per-rank step time -----------------------------------------------------------------------

def rank_times(facts: Mapping[str, Any]) -> list[tuple[int, float, float, float]]:
    """[(rank, mean ms, min ms, max ms)] from ``ranks.step_ms``, by rank."""
    by_rank: dict[int, list[float]] = {}
    ranges: dict[int, tuple[float, float]] = {}
    for row in _rows(facts.get("ranks.step_ms")):
        rank, value = _num(row.get("rank")), _first(row, ("ms", "step_ms", "time_ms", "mean_ms"))
        if rank is None or value is None:
            continue
        by_rank.setdefault(int(rank), []).append(value)
        lo, hi = _num(row.get("min_ms")), _num(row.get("max_ms"))
        if lo is not None and hi is not None:
            ranges[int(rank)] = (lo, hi)
    out = []
    for rank, values in sorted(by_rank.items()):
        lo, hi = ranges.get(rank, (min(values), max(values)))
        out.append((rank, sum(values) / len(values), lo, hi))
    return out


def straggler(facts: Mapping[str, Any]) -> int | None:
    value = facts.get("ranks.straggler.rank", facts.get("ranks.straggler"))
    if isinstance(value, Mapping):
        value = value.get("rank")
    number = _num(value)
    return int(number) if number is not None else None


def rank_chart(facts: Mapping[str, Any]) -> Chart:
    chart = Chart("ranks", "Step time per rank", "Bars: the mean step time of each rank, with its min-max range.")
    ranks = rank_times(facts)
    if len(ranks) < 2:
        chart.missing = "a single rank was analysed" if ranks or facts.get("ranks.count") == 1 else \
            "the findings have no per-rank step times: ranks.step_ms"
        return chart
    slow = straggler(facts)

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot()
        xs = [r[0] for r in ranks]
        means = [r[1] for r in ranks]
        err = [[m - r[2] for m, r in zip(means, ranks)], [r[3] - m for m, r in zip(means, ranks)]]
        colors = [HIGHLIGHT if x == slow else BAR for x in xs]
        ax.bar([str(x) for x in xs], means, color=colors, yerr=err, capsize=3, ecolor="#555555")
        ax.set_xlabel("rank" + (f" (red: the straggler, rank {slow})" if slow is not None else ""))
        ax.set_ylabel("ms per step")

    chart.svg = draw(paint, 2.8)
    return chart


def compare_chart(phases: Sequence[Mapping[str, Any]], names: tuple[str, str] = ("before", "after")) -> Chart:
    """Per phase, run A's time per step next to run B's."""
    chart = Chart("compare_phases", "Step time per phase, before and after",
                  f"Pairs of bars per phase: {names[0]} (grey) and {names[1]} (blue), in ms per step.")
    rows = [(str(p.get("phase")), _num(p.get("a")) or 0.0, _num(p.get("b")) or 0.0) for p in phases]
    if not rows:
        chart.missing = "neither run has a step-time split"
        return chart

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot()
        ys = list(range(len(rows)))[::-1]
        ax.barh([y + 0.2 for y in ys], [r[1] for r in rows], height=0.4, color="#b0b0b0", label=names[0])
        ax.barh([y - 0.2 for y in ys], [r[2] for r in rows], height=0.4, color=BAR, label=names[1])
        for y, (_, a, b) in zip(ys, rows):
            ax.text(a, y + 0.2, " " + fmt_ms(a), va="center", fontsize=7)
            ax.text(b, y - 0.2, " " + fmt_ms(b), va="center", fontsize=7)
        ax.set_yticks(ys, [r[0] for r in rows])
        ax.set_xlabel("ms per step")
        ax.set_xlim(0, max(max(r[1], r[2]) for r in rows) * 1.2 or 1)
        ax.legend(ncols=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)

    chart.svg = draw(paint, 0.9 + 0.45 * len(rows))
    return chart


def report_charts(facts: Mapping[str, Any]) -> list[Chart]:
    """The charts of a run report, in the order they appear."""
    return [
        phase_chart(facts),
        gpu_chart(facts),
        top_chart(facts, "kernels.top", "ms", "kernels", "Top GPU kernels"),
        top_chart(facts, "ops.top", "self_ms", "operators", "Top operators by self time"),
        rank_chart(facts),
    ]
