"""The phase timeline of the system stage: steps and phases from the NVTX ranges.

The collector marks each step (``ProfilerStep#N``) and each phase
(``advisor::dataloader``, ``advisor::forward``, ...) as NVTX ranges, so the
Nsight Systems view speaks in the user's phases. User NVTX ranges are listed
too, with the GPU time of the kernels launched inside them.
"""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.system.view import OTHER, SystemView
from advisor.naming import PHASE_ORDER, STEP_PARTS as PHASES, STEP_PREFIX

TOP_RANGES = 15

PROVIDES = (
    FactSpec("system.tool", "text", "the Nsight Systems version and export schema the system stage read"),
    FactSpec("system.steps.count", "count", "steps in the Nsight Systems capture (ProfilerStep NVTX ranges)"),
    FactSpec("system.steps.source", "text", "what the system stage analysed: the steps, the capture range, or all"),
    FactSpec("system.steps.time_ms", "ms", "mean wall time of a step under Nsight Systems"),
    FactSpec("system.phases.seen", "bool", "the capture has the collector's phase ranges (advisor::<phase>)"),
    FactSpec("system.phases.table", "table", "the phase split under Nsight Systems, from the NVTX ranges", columns={
        "phase": "text: phase", "ms": "ms: mean time per step", "share": "fraction: of step time",
    }),
    FactSpec("system.phases.timeline", "table", "every captured step and its phases, in order", columns={
        "step": "count: step number", "start_ms": "ms: start, from the first captured step",
        "time_ms": "ms: wall time", **{f"{p}_ms": f"ms: time in {p}" for p in PHASES},
    }),
    FactSpec("system.nvtx.ranges", "table", "NVTX ranges of the capture, by time per step", columns={
        "name": "text: range name", "thread": "text: thread", "calls_per_step": "ratio: ranges per step",
        "ms_per_step": "ms: time per step", "share": "fraction: of step time",
    }),
)


@analyzer("system_timeline", needs=("nvtx",), provides=PROVIDES, stage="system")
def system_timeline(view: SystemView) -> dict[str, Any]:
    """Steps, the phase split and the NVTX ranges of the capture."""
    step_ms = view.step_ms()
    out: dict[str, Any] = {
        "system.steps.count": len(view.steps),
        "system.steps.source": view.window_source,
        "system.steps.time_ms": step_ms,
        "system.phases.seen": bool(view.phases_seen),
        "system.nvtx.ranges": _ranges(view, step_ms),
    }
    if view.phases_seen:
        out["system.phases.timeline"] = _timeline(view)
        out["system.phases.table"] = _phase_table(view, step_ms)
    return out


@analyzer("system_info", provides=(PROVIDES[0],), stage="system")
def system_info(view: SystemView) -> dict[str, Any]:
    """Which Nsight Systems version wrote the export."""
    meta = view.trace.meta
    return {"system.tool": f"Nsight Systems {meta.get('product_version') or '?'} "
                           f"(export schema {meta.get('schema_version') or '?'})"}


def _segments_in(view: SystemView, lo: int, hi: int) -> dict[str, float]:
    seg = view.phase_segments
    inside = seg[(seg["end"] > lo) & (seg["start"] < hi)]
    out = {p: 0.0 for p in PHASES}
    for row in inside.itertuples(index=False):
        out[row.phase] += (min(row.end, hi) - max(row.start, lo)) / 1e6
    out[OTHER] = max((hi - lo) / 1e6 - sum(out[p] for p in PHASE_ORDER), 0.0)
    return out


def _timeline(view: SystemView) -> list[dict[str, Any]]:
    lo = view.window[0]
    steps = view.steps if view.profiler_steps_present else None
    spans = ([(int(r.step), int(r.start), int(r.end)) for r in steps.itertuples(index=False)]
             if steps is not None else [(0, *view.window)])
    rows = []
    for step, start, end in spans:
        parts = _segments_in(view, start, end)
        rows.append({"step": step, "start_ms": (start - lo) / 1e6, "time_ms": (end - start) / 1e6,
                     **{f"{p}_ms": parts[p] for p in PHASES}})
    return records(rows)


def _phase_table(view: SystemView, step_ms: float) -> list[dict[str, Any]]:
    parts = _segments_in(view, *view.window)
    n = view.step_count
    return records({"phase": p, "ms": parts[p] / n, "share": (parts[p] / n) / step_ms if step_ms else 0.0}
                   for p in PHASES)


def _ranges(view: SystemView, step_ms: float) -> list[dict[str, Any]]:
    nvtx = view.in_window(view.table("nvtx"))
    ranges = nvtx[(nvtx["kind"] == "range") & ~nvtx["name"].str.startswith(STEP_PREFIX)]
    if len(ranges) == 0:
        return []
    grouped = ranges.groupby(["name", "pid", "tid"], sort=False).agg(calls=("dur", "size"), ns=("dur", "sum"))
    grouped = grouped.sort_values("ns", ascending=False).head(TOP_RANGES)
    n = view.step_count
    rows = []
    for (name, pid, tid), row in grouped.iterrows():
        ms = float(row["ns"]) / n / 1e6
        rows.append({"name": name, "thread": view.thread_name(pid, tid),
                     "calls_per_step": float(row["calls"]) / n, "ms_per_step": ms,
                     "share": ms / step_ms if step_ms else 0.0})
    return records(rows)


__all__ = ["PHASES", "system_info", "system_timeline"]
