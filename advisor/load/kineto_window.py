"""Traces over the memory budget: analyse a window of their steps, and say so.

An analysis takes about :data:`MEMORY_PER_JSON` times the trace's JSON size
in memory, plus :data:`FIXED_MB` for the libraries (measured on the synthetic
traces of bench/scale.py: 1.57 at 2 GB, 1.60 at 500 MB). A trace that would not
fit the memory budget (``$ADVISOR_MEMORY_MB``, default :data:`DEFAULT_MEMORY_MB`)
that way is not loaded whole. Instead:

1. :func:`plan_window` reads the file once, cheaply: each piece of the
   ``traceEvents`` array is decoded into the few fields that place an event in
   time (no ``args``), keeping every event's start, the ProfilerStep ranges of
   the training thread and, per piece, the time span its events cover.
2. It picks the longest run of consecutive steps whose events fit the budget
   (at the trace's own bytes per event), the run closest to the middle of the
   trace (steady state, away from the first steps' warm-up). Without
   ProfilerStep ranges, the same for a span of time.
3. :func:`~advisor.load.kineto.load_kineto` then reads the file again and keeps
   only the events that overlap the window; pieces whose events all lie outside
   it (known from the first pass, and recognised by their length and checksum)
   are not decoded at all.

The window is recorded in the trace's ``meta`` under :data:`META_KEY`; the
``trace_info`` analyzer turns it into facts (``trace.partial``,
``trace.analysed_steps``) and the report says which steps were analysed and why.
Both passes stream the file, so time grows linearly with its size and memory with
the window's.
"""

from __future__ import annotations

import gc
import math
import os
import zlib
from collections import Counter
from collections.abc import Callable
from operator import attrgetter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from advisor.errors import TraceError
from advisor.load.json_stream import MalformedPiece, error_position, read_array

__all__ = ["DEFAULT_MEMORY_MB", "FIXED_MB", "MEMORY_ENV", "MEMORY_PER_JSON", "META_KEY", "Window", "budget_bytes",
           "json_size", "memory_budget_mb", "piece_key", "plan_window"]

MEMORY_ENV = "ADVISOR_MEMORY_MB"
#: the memory an analysis may take, in MB
DEFAULT_MEMORY_MB = 3072
#: peak memory per byte of JSON analysed (bench/scale.py, December 2026: 1.60 at 500 MB and 1.57 at 2 GB, where
#: 1.29 was measured at 2 GB before the loader decoded pieces on helper processes and kept more ``args``
#: columns; the rest is margin for traces with more GPU ops)
MEMORY_PER_JSON = 1.65
#: memory that does not grow with the trace: interpreter and libraries (85 MB), and slack
FIXED_MB = 128
META_KEY = "advisor_window"
STEP_PREFIX = "ProfilerStep#"
STEP_BYTES = STEP_PREFIX.encode()
#: a gzip file holds JSON at least this many times its size (Kineto traces: 8-15x); see :func:`json_size`
_MIN_GZIP_RATIO = 4

#: the first pass decodes only what places an event in time, and names (for the steps); no args
_ScanEvent = msgspec.defstruct("ScanEvent", [
    ("ph", str, ""), ("name", str, ""), ("tid", int | str, -1), ("ts", float, math.nan), ("dur", float, 0.0),
], gc=False)
_DECODER = msgspec.json.Decoder(list[_ScanEvent])


@dataclass
class Window:
    """The part of a trace that is analysed: events overlapping [lo_us, hi_us) on the trace's µs clock."""

    lo_us: float
    hi_us: float
    json_mb: float
    #: the memory budget (MB), and the JSON it allows to be analysed (MB)
    memory_mb: float
    budget_mb: float
    #: ProfilerStep numbers analysed, and how many steps the trace has (0: it has none)
    steps: list[int] = field(default_factory=list)
    total_steps: int = 0
    events: int = 0
    total_events: int = 0
    #: piece index -> (length, checksum) of the pieces with no event in the window, which need no decoding
    skip: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)

    def note(self) -> str:
        """One sentence for the report: what was analysed, and why."""
        why = (f"the trace holds {self.json_mb:,.0f} MB of JSON, and analysed whole it would take about "
               f"{FIXED_MB + self.json_mb * MEMORY_PER_JSON:,.0f} MB of memory, more than the budget of "
               f"{self.memory_mb:,.0f} MB (set ${MEMORY_ENV} to analyse more)")
        if self.steps:
            first, last = self.steps[0], self.steps[-1]
            which = (f"{f'step #{first}' if len(self.steps) == 1 else f'steps #{first} to #{last}'} "
                     f"({len(self.steps)} of {self.total_steps} ProfilerSteps, the middle of the trace)")
        else:
            span = (self.hi_us - self.lo_us) / 1e6
            which = f"a {span:.3g} s span from the middle of the trace (it has no ProfilerStep ranges)"
        return f"only {which} were analysed: {why}; {self.events:,} of {self.total_events:,} events"

    def to_meta(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("skip")
        out["note"] = self.note()
        return out


def memory_budget_mb() -> float:
    """The memory an analysis may take, from ``$ADVISOR_MEMORY_MB`` or the default."""
    text = os.environ.get(MEMORY_ENV, "").strip()
    if not text:
        return float(DEFAULT_MEMORY_MB)
    try:
        mb = float(text)
    except ValueError:
        raise TraceError(Path(f"${MEMORY_ENV}"), f"is {text!r}, not a number of megabytes") from None
    if not mb > FIXED_MB:
        raise TraceError(Path(f"${MEMORY_ENV}"), f"is {text!r}; give more than {FIXED_MB} megabytes")
    return mb


def budget_bytes(memory_mb: float | None = None) -> int:
    """The JSON size that can be analysed whole within the memory budget."""
    memory_mb = memory_budget_mb() if memory_mb is None else memory_mb
    return int((memory_mb - FIXED_MB) / MEMORY_PER_JSON * (1 << 20))


def json_size(path: Path) -> int:
    """The size of the JSON text in ``path`` (plain or gzip), without decompressing it.

    For gzip, the size the trailer records (modulo 4 GiB) is raised by multiples
    of 4 GiB until the file holds at least :data:`_MIN_GZIP_RATIO` times its
    compressed size; a file of several gzip members is judged by its last one.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b" or size < 18:
                return size
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return 0  # the loader says what is wrong with the file
    wraps = max(0, math.ceil((size * _MIN_GZIP_RATIO - isize) / (1 << 32)))
    return isize + wraps * (1 << 32)


def piece_key(piece: bytes) -> tuple[int, int]:
    """How a piece is recognised in the second pass: its length and a checksum of both ends."""
    return len(piece), zlib.crc32(piece[:256] + piece[-256:])


class _Scan:
    """The first pass: every complete event's start, the steps, and each piece's time span."""

    def __init__(self) -> None:
        self.starts: list[np.ndarray] = []
        self.pieces: list[tuple[tuple[int, int], float, float]] = []
        self.steps: list[tuple[int, float, float, Any]] = []
        self.json_bytes = 0

    def add_piece(self, piece: bytes) -> int:
        try:
            events = _DECODER.decode(piece)
            n = len(events)
            ts = np.fromiter(map(attrgetter("ts"), events), "float64", n)
            dur = np.fromiter(map(attrgetter("dur"), events), "float64", n)
            complete = np.fromiter((e.ph == "X" for e in events), bool, n)
            steps = [(e.name, e.tid, e.ts, e.dur) for e in events if e.ph == "X" and e.name.startswith(STEP_PREFIX)] \
                if STEP_BYTES in piece else []
        except msgspec.ValidationError:  # odd values: read them one by one
            rows = [_loose_row(e) for e in orjson.loads(piece)]
            n = len(rows)
            complete = np.array([r[0] == "X" for r in rows], dtype=bool)
            ts, dur = np.array([r[4] for r in rows], dtype="float64"), np.array([r[5] for r in rows], dtype="float64")
            steps = [(r[2], r[3], r[4], r[5]) for r in rows if r[0] == "X" and r[2].startswith(STEP_PREFIX)]
        except msgspec.DecodeError as exc:
            raise MalformedPiece(str(exc), error_position(str(exc))) from None
        self.json_bytes += len(piece)
        timed = ~np.isnan(ts)
        self.starts.append(ts[timed & complete])
        ends = ts[timed] + dur[timed]
        self.pieces.append((piece_key(piece), float(ts[timed].min()) if timed.any() else math.inf,
                            float(ends.max()) if timed.any() else -math.inf))
        for name, tid, start, length in steps:
            if not math.isnan(start):
                number = name[len(STEP_PREFIX):]
                self.steps.append((int(number) if number.isdigit() else -1, start, start + length, tid))
        return n


def _loose_row(event: Any) -> tuple[str, str, str, Any, float, float]:
    if not isinstance(event, dict):
        return "", "", "", -1, math.nan, 0.0
    ts, dur = event.get("ts"), event.get("dur", 0)
    num = isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts)
    dur_ok = isinstance(dur, (int, float)) and not isinstance(dur, bool) and math.isfinite(dur)
    return (str(event.get("ph", "")), str(event.get("cat", "")), str(event.get("name", "")), event.get("tid", -1),
            float(ts) if num else math.nan, float(dur) if dur_ok else 0.0)


def plan_window(path: Path, budget: int | None = None,
                on_progress: Callable[[int, int], None] | None = None) -> Window | None:
    """The window to analyse when ``path``'s JSON is larger than ``budget`` bytes (default: what the memory
    budget allows, :func:`budget_bytes`); None to load it whole."""
    memory_mb = memory_budget_mb() if budget is None else FIXED_MB + budget / (1 << 20) * MEMORY_PER_JSON
    budget = budget_bytes(memory_mb) if budget is None else budget
    if json_size(path) <= budget:
        return None
    scan = _Scan()
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of short-lived objects and no cycles, as in the loader
    try:
        _, pieces, _ = read_array(path, "traceEvents", scan.add_piece, on_progress=on_progress)
        if pieces is None:
            return None  # not a streamable trace: the loader reads it whole and says what is wrong
        for _ in pieces:
            pass
    finally:
        if gc_was_on:
            gc.enable()
    if scan.json_bytes <= budget:
        return None
    starts = np.sort(np.concatenate(scan.starts)) if scan.starts else np.empty(0)
    if len(starts) == 0:
        return None
    max_events = max(int(len(starts) * budget / scan.json_bytes), 1)
    window = _by_steps(scan, starts, max_events) or _by_time(starts, max_events)
    lo, hi, steps = window
    kept = int(np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo, side="left"))
    skip = {i: key for i, (key, first, last) in enumerate(scan.pieces) if last <= lo or first >= hi}
    return Window(lo_us=lo, hi_us=hi, json_mb=scan.json_bytes / (1 << 20), memory_mb=memory_mb,
                  budget_mb=budget / (1 << 20),
                  steps=[s[0] for s in steps], total_steps=_main_thread_steps(scan.steps)[1], events=kept,
                  total_events=len(starts), skip=skip)


def _main_thread_steps(steps: list[tuple[int, float, float, Any]]) -> tuple[list[tuple[int, float, float, Any]], int]:
    """The ProfilerSteps of the thread with the most of them, by start; and how many."""
    if not steps:
        return [], 0
    counts = Counter(s[3] for s in steps)
    # the most steps; on a tie the lowest thread id, as the analysis picks its main thread
    main = min(counts, key=lambda t: (-counts[t], isinstance(t, str), t if not isinstance(t, str) else 0, str(t)))
    ours = sorted((s for s in steps if s[3] == main), key=lambda s: s[1])
    return ours, len(ours)


def _by_steps(scan: _Scan, starts: np.ndarray, max_events: int
              ) -> tuple[float, float, list[tuple[int, float, float, Any]]] | None:
    """The longest run of consecutive steps whose events fit, nearest the middle of the trace."""
    steps, n = _main_thread_steps(scan.steps)
    if n == 0:
        return None
    begin = np.array([s[1] for s in steps])
    # a step's events: those that start from its start to the next step's start (or its own end, for the last)
    bounds = np.append(begin, steps[-1][2])
    counts = np.diff(np.searchsorted(starts, bounds, side="left"))
    cum = np.concatenate([[0], np.cumsum(counts)])
    best: tuple[int, int] | None = None
    j = 0
    for i in range(n):  # two pointers: the longest [i, j) that fits
        j = max(j, i)
        while j < n and cum[j + 1] - cum[i] <= max_events:
            j += 1
        if j > i and (best is None or j - i > best[1] - best[0]):
            best = (i, j)
    if best is None:  # not even one step fits: analyse the middle one anyway
        best = (n // 2, n // 2 + 1)
    k = best[1] - best[0]
    fitting = [i for i in range(n - k + 1) if cum[i + k] - cum[i] <= max_events] or [best[0]]
    middle = (n - k) / 2
    i = min(fitting, key=lambda s: (abs(s - middle), s))
    chosen = steps[i:i + k]
    return float(chosen[0][1]), float(chosen[-1][2]), chosen


def _by_time(starts: np.ndarray, max_events: int) -> tuple[float, float, list[Any]]:
    """Without steps: the middle ``max_events`` events' span."""
    first = max((len(starts) - max_events) // 2, 0)
    last = min(first + max_events, len(starts)) - 1
    return float(starts[first]), float(np.nextafter(starts[last], math.inf)), []
