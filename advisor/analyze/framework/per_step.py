"""Small helpers shared by the analyzers: per-step scaling and site formatting."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.framework.view import TraceView
from advisor.naming import SOURCE_PREFIX, parse_source_label

__all__ = ["NS_PER_MS", "call_site_of", "call_site_of_rows", "in_steps", "median_faults", "median_step_ms",
           "per_step_ms", "profiler_stretch", "site", "step_ms", "unprofiled_step_ms"]

NS_PER_MS = 1e6


def step_ms(view: TraceView) -> float:
    """Mean wall time of an analysed step, in ms."""
    return float(view.steps["dur"].mean()) / NS_PER_MS if view.step_count else 0.0


def median_step_ms(view: TraceView) -> float:
    """Median wall time of an analysed step, in ms (what the unprofiled steps' median is set against)."""
    return float(view.steps["dur"].median()) / NS_PER_MS if view.step_count else 0.0


def unprofiled_step_ms(times: Any) -> tuple[float, int] | None:
    """The median of run.json's ``unprofiled_step_ms`` (the steps the collector timed after the window, without
    the profiler) and how many there were; None without such steps."""
    if not isinstance(times, list):
        return None
    known = [float(t) for t in times if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0]
    return (statistics.median(known), len(known)) if known else None


def median_faults(heap: Any, key: str) -> float | None:
    """The median minor page faults of run.json's ``heap[key]`` (``window_faults``: the recorded steps,
    ``unprofiled_faults``: those timed after them without the profiler); None where none were counted."""
    counts = heap.get(key) if isinstance(heap, dict) else None
    known = [c for c in counts or [] if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return float(statistics.median(known)) if known else None


def profiler_stretch(view: TraceView) -> float | None:
    """How many times longer the recorded steps took than the same steps without the profiler, its labels and
    the source marker (``steps.profiler_overhead`` + 1); None for a trace without unprofiled steps beside it.

    The median recorded step over the median unprofiled one: the mean recorded step over that median read a loop
    that evaluated on a held-out tensor every five steps (one recorded step of 23.9 ms among steps of 2.6-3.6)
    as stretched 3.4 times, where its training steps were stretched 1.3."""
    unprofiled = unprofiled_step_ms(view.run_meta.get("unprofiled_step_ms"))
    profiled = median_step_ms(view)
    return profiled / unprofiled[0] if unprofiled and profiled else None


def per_step_ms(view: TraceView, total_ns: float) -> float:
    return float(total_ns) / max(view.step_count, 1) / NS_PER_MS


def in_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of a host table that fall inside an analysed step."""
    return frame[frame["step"] >= 0]


def site(file: str, line: int, func: str = "") -> str:
    """``train.py:57 (augment)``, or "" when unknown."""
    if not file or line < 0:
        return ""
    return f"{file}:{line}" + (f" ({func})" if func and func != "<module>" else "")


def call_site_of(view: TraceView, ranges: pd.DataFrame) -> tuple[str, int, str] | None:
    """The user's line that opened the given ranges (the collector's label right around or inside them).

    A hook opens the phase range and its source label at the same instant, so
    either can come out as the parent of the other.
    """
    return call_site_of_rows(view, ranges.index.to_numpy())


def call_site_of_rows(view: TraceView, rows: np.ndarray) -> tuple[str, int, str] | None:
    """:func:`call_site_of` for the ranges at these rows of ``view.host``."""
    host = view.host
    parent = host["parent"].to_numpy()
    is_label = view.host_names(lambda n: n.startswith(SOURCE_PREFIX), bool)
    inside = np.isin(parent, rows)
    around = np.zeros(len(parent), bool)
    around[parent[rows][parent[rows] >= 0]] = True
    labels = view.host_name_texts[is_label & (inside | around)]
    if len(labels) == 0:
        return None
    unique, counts = np.unique(labels.astype(str), return_counts=True)  # the most frequent; the first name on a tie
    return parse_source_label(str(unique[np.argmax(counts)]))
