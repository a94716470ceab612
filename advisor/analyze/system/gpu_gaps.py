"""GPU gaps and low-utilisation windows, attributed to the phases of the training loop.

The GPU is *busy* while any kernel, copy or memset runs on any of its streams
(merged). Inside the analysed window everything else is *idle*. Each idle
stretch is attributed to the main thread's phase (``advisor::<phase>`` NVTX
ranges) and, where the user has NVTX ranges, to the innermost one: so a gap
reads "GPU idle 40 ms per step during dataloader", not "gap at 1.234 s".

A *low-utilisation window* is one occurrence of a phase (one forward, one
data fetch) during which the GPU was busy less than half the time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.system.timeline import PHASES
from advisor.analyze.system.view import OTHER, SystemView

TOP_GAPS = 10
LOW_UTILISATION = 0.5
MIN_WINDOW_NS = 100_000  # phase occurrences shorter than 0.1 ms say nothing about utilisation

PROVIDES = (
    FactSpec("system.gpu.busy_fraction", "fraction", "share of the analysed window the GPU runs anything"),
    FactSpec("system.gpu.idle_fraction", "fraction", "share of the analysed window the GPU runs nothing"),
    FactSpec("system.gpu.idle_ms_per_step", "ms", "GPU idle time per step"),
    FactSpec("system.gpu.gap_count_per_step", "ratio", "idle gaps of 10 us or more per step"),
    FactSpec("system.gpu.top_idle_phase", "text", "the phase with the most GPU idle time"),
    FactSpec("system.gpu.top_idle_phase_ms", "ms", "GPU idle time per step in that phase"),
    FactSpec("system.gpu.top_idle_phase_share", "fraction", "that phase's share of all GPU idle time"),
    FactSpec("system.gpu.by_phase", "table", "GPU busy and idle time in each phase", columns={
        "phase": "text: phase", "ms_per_step": "ms: wall time of the phase per step",
        "busy_ms_per_step": "ms: GPU busy time in the phase", "idle_ms_per_step": "ms: GPU idle time in the phase",
        "utilisation": "fraction: busy / wall in the phase", "idle_share": "fraction: of all GPU idle time",
    }),
    FactSpec("system.gpu.gaps", "table", "the longest GPU idle gaps and what the main thread did meanwhile", columns={
        "start_ms": "ms: from the start of the window", "ms": "ms: length", "phase": "text: main-thread phase",
        "range": "text: innermost user NVTX range on the main thread, if any",
        "cpu": "text: the longest OS call or CUDA API call of the main thread in the gap",
    }),
    FactSpec("system.gpu.low_util_windows", "table", "phase occurrences with the GPU busy under half the time",
             columns={"phase": "text: phase", "step": "count: step", "start_ms": "ms: from the start of the window",
                      "ms": "ms: length", "utilisation": "fraction: GPU busy share"}),
)


@analyzer("system_gpu", needs=("gpu",), provides=PROVIDES, stage="system")
def system_gpu(view: SystemView) -> dict[str, Any]:
    """GPU busy and idle time, by phase, and the longest gaps."""
    lo, hi = view.window
    window = view.window_ns
    if window <= 0:
        return {}
    busy_s, busy_e = view.gpu_busy
    busy = int((busy_e - busy_s).sum())
    idle_s, idle_e = _complement(busy_s, busy_e, lo, hi)
    idle_by_phase = view.phase_time(idle_s, idle_e)
    busy_by_phase = view.phase_time(busy_s, busy_e)
    total_idle = max(window - busy, 0)
    table = _by_phase(view, busy_by_phase, idle_by_phase, total_idle)
    top = max(table, key=lambda r: r["idle_ms_per_step"]) if table else None
    gaps = (idle_e - idle_s) >= 10_000
    return {
        "system.gpu.busy_fraction": busy / window,
        "system.gpu.idle_fraction": total_idle / window,
        "system.gpu.idle_ms_per_step": view.per_step_ms(total_idle),
        "system.gpu.gap_count_per_step": float(gaps.sum()) / view.step_count,
        "system.gpu.top_idle_phase": top["phase"] if top else None,
        "system.gpu.top_idle_phase_ms": top["idle_ms_per_step"] if top else None,
        "system.gpu.top_idle_phase_share": top["idle_share"] if top else None,
        "system.gpu.by_phase": records(table),
        "system.gpu.gaps": _longest_gaps(view, idle_s, idle_e),
        "system.gpu.low_util_windows": _low_util(view, busy_s, busy_e),
    }


def _complement(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of [lo, hi) not covered by the disjoint sorted intervals (s, e)."""
    s, e = intervals.clip(s, e, lo, hi)
    starts = np.concatenate([[lo], e]).astype("int64")
    ends = np.concatenate([s, [hi]]).astype("int64")
    keep = ends > starts
    return starts[keep], ends[keep]


def _by_phase(view: SystemView, busy: dict[str, int], idle: dict[str, int], total_idle: int) -> list[dict[str, Any]]:
    rows = []
    for phase in PHASES:
        if phase != OTHER and phase not in view.phases_seen:
            continue
        b, i = busy.get(phase, 0), idle.get(phase, 0)
        wall = b + i
        rows.append({
            "phase": phase, "ms_per_step": view.per_step_ms(wall), "busy_ms_per_step": view.per_step_ms(b),
            "idle_ms_per_step": view.per_step_ms(i), "utilisation": b / wall if wall else 0.0,
            "idle_share": i / total_idle if total_idle else 0.0,
        })
    return rows


def _longest_gaps(view: SystemView, s: np.ndarray, e: np.ndarray) -> list[dict[str, Any]]:
    if len(s) == 0:
        return []
    order = np.argsort(-(e - s), kind="stable")[:TOP_GAPS]
    gs, ge = s[order], e[order]
    mid = (gs + ge) // 2
    pid, tid = view.main
    ranges = view.range_at(np.full(len(mid), pid), np.full(len(mid), tid), mid)
    phases = view.phase_at(mid)
    lo = view.window[0]
    rows = []
    for i in range(len(gs)):
        rows.append({"start_ms": (int(gs[i]) - lo) / 1e6, "ms": (int(ge[i]) - int(gs[i])) / 1e6,
                     "phase": phases[i], "range": ranges[i], "cpu": _cpu_in(view, int(gs[i]), int(ge[i]))})
    return records(rows)


def _cpu_in(view: SystemView, lo: int, hi: int) -> str:
    """The longest OS or CUDA API call of the main thread overlapping [lo, hi), with its share of the gap."""
    best, best_ns = "", 0
    for table in ("osrt", "runtime"):
        frame = view.on_main(view.table(table))
        if len(frame) == 0:
            continue
        if table == "osrt":
            frame = frame[frame["nesting"] == 0]
        inside = frame[(frame["end"] > lo) & (frame["start"] < hi)]
        if len(inside) == 0:
            continue
        overlap = np.minimum(inside["end"], hi) - np.maximum(inside["start"], lo)
        by_name = pd.Series(overlap.to_numpy(), index=inside["name" if table == "osrt" else "api"]).groupby(level=0).sum()
        name, ns = str(by_name.idxmax()), int(by_name.max())
        if ns > best_ns:
            best, best_ns = name, ns
    if not best:
        return ""
    return f"{best} ({best_ns / max(hi - lo, 1):.0%} of the gap)"


def _low_util(view: SystemView, busy_s: np.ndarray, busy_e: np.ndarray) -> list[dict[str, Any]]:
    seg = view.phase_segments
    if len(seg) == 0:
        return []
    steps = view.steps
    lo = view.window[0]
    rows = []
    for row in seg.itertuples(index=False):
        length = int(row.end) - int(row.start)
        if length < MIN_WINDOW_NS:
            continue
        cs, ce = intervals.clip(busy_s, busy_e, int(row.start), int(row.end))
        util = float((ce - cs).sum()) / length
        if util >= LOW_UTILISATION:
            continue
        step = -1
        if len(steps):
            k = int(np.searchsorted(steps["start"].to_numpy(), int(row.start), side="right")) - 1
            step = int(steps["step"].iloc[k]) if k >= 0 else -1
        rows.append({"phase": row.phase, "step": step, "start_ms": (int(row.start) - lo) / 1e6,
                     "ms": length / 1e6, "utilisation": util})
    rows.sort(key=lambda r: -r["ms"] * (1 - r["utilisation"]))
    return records(rows[:TOP_GAPS])
