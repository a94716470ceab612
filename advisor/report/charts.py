"""Charts for the reports, as SVG text (drawn by :mod:`advisor.report.svg`).

Each chart is a pure function of the findings (facts by name) that returns a
:class:`Chart`: the SVG when its data exists, else the reason it could not be
drawn. Every name from a trace is XML-escaped text, never markup.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.report.svg import Bar, Point, Row, bar_chart, log_scatter, stacked
from advisor.units import fmt_ms

__all__ = ["PHASE_COLORS", "Chart", "compare_chart", "label", "report_charts"]

PHASE_COLORS = {
    "dataloader": "#e8871e", "forward": "#4c78a8", "backward": "#8e6bbf", "optimizer": "#54a24b",
    "communication": "#d6616b", "other": "#b0b0b0",
}
_EXTRA_COLORS = ["#72b7b2", "#f2cf5b", "#9d755d", "#ff9da6", "#79706e"]
BUSY, IDLE, BAR, HIGHLIGHT = "#4c78a8", "#f4a582", "#4c78a8", "#d6616b"


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

    colors = [_phase_color(p, i) for i, p in enumerate(phases)]
    rows = [Row(name, [stacked(row, colors, phases, fmt_ms(sum(row)))]) for name, row in zip(labels, values)]
    chart.svg = bar_chart(rows, "ms per step", legend=list(zip(phases, colors)), title=chart.title)
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
        chart.svg = _lanes_svg(lanes, chart.title)
    elif steps:
        chart.svg = _busy_idle_svg(steps, chart.title)
    else:
        chart.missing = "the findings have no GPU busy/idle facts: gpu.busy_fraction, gpu.timeline"
    return chart


def _busy_idle_svg(steps: list[tuple[str, float, float]], title: str) -> str:
    rows = []
    for name, busy, idle in steps:
        share = idle / (busy + idle) if busy + idle else 0.0
        rows.append(Row(name, [stacked([busy, idle], [BUSY, IDLE], ["busy", "idle"], f"{share:.0%} idle")]))
    return bar_chart(rows, "ms per step", legend=[("busy", BUSY), ("idle", IDLE)], title=title, headroom=1.18)


def _lanes_svg(lanes: dict[str, list[tuple[float, float, bool]]], title: str) -> str:
    rows = [Row(name, [Bar([(s, w, BUSY if busy else IDLE, f"{fmt_ms(s)} + {fmt_ms(w)}")
                            for s, w, busy in lanes[name]])]) for name in sorted(lanes)]
    return bar_chart(rows, "ms from the start of the first analysed step (blue: busy, orange or blank: idle)",
                     title=title, headroom=1.0)


# top kernels and operators ----------------------------------------------------------------

def top_chart(facts: Mapping[str, Any], fact: str, value_col: str, chart_id: str, title: str,
              limit: int = 10) -> Chart:
    chart = Chart(chart_id, title, f"Horizontal bars: the {limit} largest by time per step, in ms.")
    rows = [(label(r.get("name")), _num(r.get(value_col))) for r in _rows(facts.get(fact))[:limit]]
    rows = [(n, v) for n, v in rows if v is not None]
    if not rows:
        chart.missing = f"the findings have no {fact} table"
        return chart
    bars = [Row(name, [Bar([(0.0, value, BAR, name)], fmt_ms(value))]) for name, value in rows]  # type: ignore[arg-type]
    chart.svg = bar_chart(bars, "ms per step", title=title, headroom=1.2)
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

    rows = [Row(f"rank {rank}", [Bar([(0.0, mean, HIGHLIGHT if rank == slow else BAR, f"rank {rank}")], fmt_ms(mean),
                                     whisker=(lo, hi))]) for rank, mean, lo, hi in ranks]
    xlabel = "ms per step, mean and min-max range" + (f" (red: the straggler, rank {slow})" if slow is not None else "")
    chart.svg = bar_chart(rows, xlabel, title=chart.title)
    return chart


def compare_chart(phases: Sequence[Mapping[str, Any]], names: tuple[str, str] = ("before", "after")) -> Chart:
    """Per phase, run A's time per step next to run B's."""
    chart = Chart("compare_phases", "Step time per phase, before and after",
                  f"Pairs of bars per phase: {names[0]} (grey) and {names[1]} (blue), in ms per step.")
    rows = [(str(p.get("phase")), _num(p.get("a")) or 0.0, _num(p.get("b")) or 0.0) for p in phases]
    if not rows:
        chart.missing = "neither run has a step-time split"
        return chart

    pairs = [Row(phase, [Bar([(0.0, a, "#b0b0b0", names[0])], fmt_ms(a)), Bar([(0.0, b, BAR, names[1])], fmt_ms(b))])
             for phase, a, b in rows]
    chart.svg = bar_chart(pairs, "ms per step", legend=[(names[0], "#b0b0b0"), (names[1], BAR)], title=chart.title,
                          row_height=36, headroom=1.2)
    return chart


#: operator categories of ops.efficiency, by color
CATEGORY_COLORS = {"GEMM": "#4c78a8", "CONV": "#72b7b2", "SDPA": "#e45756", "NORM": "#54a24b",
                   "elementwise": "#f2cf5b", "reduce": "#b279a2", "triton": "#9d755d"}


def _category_color(category: str) -> str:
    return next((c for k, c in CATEGORY_COLORS.items() if category.startswith(k)), "#b0b0b0")


def roofline_chart(facts: Mapping[str, Any]) -> Chart:
    """The modelled operators on the GPU's roofline: FLOP per byte against achieved TFLOP/s, area by time."""
    chart = Chart("roofline", "Operators against the roofline",
                  "Each operator and shape as a circle (area: its kernel time): its FLOP per byte moved against its "
                  "achieved TFLOP/s, under the GPU's memory slope and compute peak.")
    points = []
    for row in _rows(facts.get("ops.efficiency")):
        gflops, mbytes, tflops = _num(row.get("gflops")), _num(row.get("mbytes")), _num(row.get("tflops_s"))
        ms = _num(row.get("ms_per_step")) or _num(row.get("kernel_ms"))
        if not (gflops and mbytes and tflops and ms):
            continue
        category = str(row.get("category") or "")
        share = _num(row.get("roofline_share"))
        tip = (f"{row.get('op')} {row.get('shape') or ''} {row.get('dtype') or ''}: {fmt_ms(ms)} per step, "
               f"{tflops:.3g} TFLOP/s" + (f", {share:.0%} of its roofline" if share is not None else ""))
        points.append(Point(gflops * 1e9 / (mbytes * 2**20), tflops, ms, _category_color(category), tip))
    if not points:
        chart.missing = "no operator with a FLOP and byte model (ops.efficiency: a trace recorded with shapes)"
        return chart
    tb_s, peak = _num(facts.get("roofline.memory_tb_s")), _num(facts.get("roofline.peak_tflops"))
    roofs = [(f"{facts.get('roofline.gpu')} ({facts.get('roofline.peak_dtype')} peak {peak:g} TFLOP/s, "
              f"{tb_s:g} TB/s)", tb_s, peak)] if tb_s and peak else []
    seen = sorted({_category_color(str(r.get("category") or "")) for r in _rows(facts.get("ops.efficiency"))})
    legend = [(name, color) for name, color in [*CATEGORY_COLORS.items(), ("other", "#b0b0b0")] if color in seen]
    chart.svg = log_scatter(points, "FLOP per byte moved", "TFLOP/s", chart.title, roofs, legend)
    return chart


def report_charts(facts: Mapping[str, Any]) -> list[Chart]:
    """The charts of a run report, in the order they appear."""
    return [
        phase_chart(facts),
        gpu_chart(facts),
        top_chart(facts, "kernels.top", "ms", "kernels", "Top GPU kernels"),
        top_chart(facts, "ops.top", "self_ms", "operators", "Top operators by self time"),
        roofline_chart(facts),
        rank_chart(facts),
    ]
