"""How much of a Kineto trace can be used as recorded: events that lack a field or carry impossible values.

The loader never drops or bends an event without counting it here. Counts are
per event *kind* (the normalised category; ProfilerStep ranges on their own,
since every per-step figure hangs on them), over the columns the load has
already built: a few vectorised passes over arrays, no second pass over the
JSON. What is counted, and what the tables hold for it:

=====================  ===========================================  ==========================
field / problem        which events                                 in the tables
=====================  ===========================================  ==========================
``ts`` missing         every complete (``ph: X``) event             left out: no place in time
``ts`` not a number    every complete event                         at the trace's start
``dur`` missing        every complete event                         0 long
``dur`` negative       every complete event (ends before it starts) 0 long
outside the span       starts before, or ends after, the profiled   left out: they cannot be
                       span by more than the span's length          placed (and would overflow)
``device``/``stream``  GPU ops: kernel, gpu_memcpy, gpu_memset      -1
``correlation``        GPU ops and cuda_runtime calls, when the     -1
                       trace has runtime calls to join them to
duplicate              the same event twice (kind, name, process,   both kept
                       thread, start, duration, ids), or two
                       runtime calls sharing one correlation id
=====================  ===========================================  ==========================

The span is the profiler's own range (the ``Trace`` event, "PyTorch Profiler
(0)", when it has a duration and holds most events), else the 1st to 99th
percentile of the starts; real traces have events a little past the
profiler's range (a sync that ends after it), never by more than the span
itself.

:class:`DataQuality` holds the counts; :meth:`DataQuality.note` is the
sentence for the report when such events are a material share
(:data:`NOTE_SHARE`) of the trace, or touch a ProfilerStep. What the verdict
makes of it is the report's business (:mod:`advisor.report.verdict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
import math
from typing import Any

import numpy as np

__all__ = ["DataQuality", "MAX_TS_US", "NOTE_SHARE", "Problem", "STEP_KIND", "STEP_PREFIX", "check_events", "check_meta",
           "check_span"]

#: a time (µs) beyond this cannot be held in int64 ns from 1970 (the year 2096): outside any span
MAX_TS_US = 4e15
#: bad events above this share of the trace's events get a note in the report
NOTE_SHARE = 0.01
#: the kind under which ProfilerStep ranges are counted, and the prefix of their names
STEP_KIND = "ProfilerStep"
STEP_PREFIX = "ProfilerStep#"
_GPU_OPS = ("kernel", "gpu_memcpy", "gpu_memset")
_RUNTIME = "cuda_runtime"
#: what the tables hold for each problem, as the note says it
_TREATMENT = {"left out": "left out", "zero": "counted as 0 long", "start": "placed at the trace's start",
              "kept": "kept as they are"}


@dataclass(frozen=True)
class Problem:
    """``count`` events of ``kind`` (of ``total``) whose ``field`` is ``problem``."""

    kind: str
    field: str
    problem: str
    count: int
    total: int
    treatment: str  # a key of _TREATMENT

    def phrase(self) -> str:
        return f"{self.count:,} of {self.total:,} {self.kind}"


@dataclass
class DataQuality:
    """The events of one trace that cannot be used as recorded."""

    #: complete events read (including those left out)
    events: int = 0
    #: distinct events with at least one problem
    bad: int = 0
    #: ProfilerStep ranges among them
    bad_steps: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: the trace's top-level keys that were unusable and left out (see :func:`check_meta`)
    meta_notes: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.bad / self.events if self.events else 0.0

    @property
    def material(self) -> bool:
        """Worth a note: more than :data:`NOTE_SHARE` of the events, or any step range."""
        return self.bad_steps > 0 or self.share > NOTE_SHARE or bool(self.meta_notes)

    def note(self) -> str:
        """``data quality: 22,710 of 45,420 events (50%) ...: `dur` missing ... on 11,955 of 23,910 cpu_op, ...``."""
        steps = f", {self.bad_steps} of them ProfilerStep ranges" if self.bad_steps else ""
        parts = [f"{self.bad:,} of {self.events:,} events ({self.share:.0%}{steps}) cannot be used as recorded: "
                 f"{self.details()}"] if self.bad else []
        return "data quality: " + "; ".join(parts + self.meta_notes)

    def details(self) -> str:
        """Each problem with the kinds and counts it touches, and what the tables hold for it."""
        groups: dict[tuple[str, str, str], list[Problem]] = {}
        for p in self.problems:
            groups.setdefault((p.field, p.problem, p.treatment), []).append(p)
        parts = []
        for (name, problem, treatment), items in groups.items():
            items.sort(key=lambda p: (p.kind != STEP_KIND, -p.count))  # the steps first: every figure needs them
            kinds = ", ".join(p.phrase() for p in items[:4]) + (", ..." if len(items) > 4 else "")
            subject = f"`{name}` {problem}" if name else problem
            parts.append(f"{subject} on {kinds} ({_TREATMENT[treatment]})")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "bad": self.bad, "bad_steps": self.bad_steps,
                "problems": [asdict(p) for p in self.problems], "meta_notes": list(self.meta_notes)}


def check_span(ts_us: np.ndarray, dur_us: np.ndarray, profiler_range: np.ndarray) -> np.ndarray:
    """Which events lie within the profiled span (see the module docstring); a bool mask.

    ``profiler_range``: a mask of the profiler's own ``Trace`` events.
    """
    finite = np.isfinite(ts_us)
    end = ts_us + np.where(np.isfinite(dur_us), np.maximum(dur_us, 0), 0)
    held = (np.abs(ts_us) < MAX_TS_US) & (np.abs(end) < MAX_TS_US) | ~finite
    finite &= held
    if finite.sum() < 2:
        return held
    ranged = profiler_range & finite & np.isfinite(dur_us) & (dur_us > 0)
    if ranged.any():
        inside = _within(ts_us, end, float(ts_us[ranged].min()), float(end[ranged].max()))
        if inside[finite & ~profiler_range].mean() > 0.5:  # else the range itself is what is broken
            return held & (inside | ~np.isfinite(ts_us))
    lo, hi = (float(v) for v in np.percentile(ts_us[finite], [1, 99]))
    # a ts that is not a number is counted apart, not as outside
    return held & (_within(ts_us, end, lo, hi) | ~np.isfinite(ts_us))


def _within(ts_us: np.ndarray, end: np.ndarray, lo: float, hi: float) -> np.ndarray:
    # Far outside: ten times the span, and at least a second. A step may hold time with no event in it (a
    # sleep, a wait the profiler does not record), so a single step can end well after its last event.
    width = max(10.0 * (hi - lo), 1e6)
    return (ts_us >= lo - width) & (end <= hi + width)


class _Counter:
    """Problem masks over the rows of one table, summed per kind."""

    def __init__(self, kinds: np.ndarray, labels: Sequence[str], totals: Mapping[str, int]) -> None:
        self.kinds = kinds
        self.labels = labels
        self.totals = totals
        self.problems: list[Problem] = []
        self.bad = np.zeros(len(kinds), dtype=bool)

    def add(self, mask: np.ndarray, name: str, problem: str, treatment: str) -> None:
        if not mask.any():
            return
        self.count(np.bincount(self.kinds[mask], minlength=len(self.labels)), name, problem, treatment)
        self.bad |= mask

    def count(self, per_code: np.ndarray, name: str, problem: str, treatment: str) -> None:
        for code in np.flatnonzero(per_code):
            kind = self.labels[code]
            self.problems.append(Problem(kind, name, problem, int(per_code[code]), self.totals[kind], treatment))


def check_events(table: Mapping[str, np.ndarray], *, kinds: np.ndarray, labels: Sequence[str],
                 raw: Mapping[str, np.ndarray], outside: np.ndarray, missing_ts: Mapping[str, int]) -> DataQuality:
    """Count the problems of a built events table.

    ``table``: its final columns as arrays (sorted, left-out events removed): ts, dur, pid, tid, name (codes),
    cat (codes), device, stream, correlation. ``kinds``: per row, a code into ``labels`` (the categories, and
    :data:`STEP_KIND`). ``raw``: per row, ``ts`` and ``dur`` as read (µs floats, NaN where absent).
    ``outside``: the kind codes of the events left out for lying outside the span. ``missing_ts``: kind ->
    events left out while decoding for having no ``ts``.
    """
    # one code per kind: a category can appear twice among the labels (old and new names, the collector's own)
    unique = list(dict.fromkeys(labels))
    remap = np.array([unique.index(label) for label in labels], dtype="int64")
    labels, kinds, outside = unique, remap[kinds], remap[outside]
    per_kind = np.bincount(kinds, minlength=len(labels)) + np.bincount(outside, minlength=len(labels))
    totals = {label: int(n) for label, n in zip(labels, per_kind)}
    for kind, n in missing_ts.items():
        totals[kind] = totals.get(kind, 0) + n
    counter = _Counter(kinds, labels, totals)
    for kind, n in missing_ts.items():
        counter.problems.append(Problem(kind, "ts", "missing", n, totals[kind], "left out"))
    counter.count(np.bincount(outside, minlength=len(labels)), "", "outside the profiled span", "left out")
    _check_values(counter, raw)
    _check_ids(counter, table, labels)
    _check_duplicates(counter, table, labels)
    step = labels.index(STEP_KIND) if STEP_KIND in labels else -1
    left_out = len(outside) + sum(missing_ts.values())
    return DataQuality(
        events=int(len(kinds)) + left_out, bad=int(counter.bad.sum()) + left_out,
        bad_steps=int((counter.bad & (kinds == step)).sum() + (outside == step).sum() + missing_ts.get(STEP_KIND, 0)),
        problems=counter.problems,
    )


def _check_values(counter: _Counter, raw: Mapping[str, np.ndarray]) -> None:
    ts, dur = raw["ts"], raw["dur"]
    counter.add(~np.isfinite(ts), "ts", "not a number", "start")
    counter.add(np.isnan(dur), "dur", "missing or not a number", "zero")
    counter.add(dur < 0, "dur", "negative (the event ends before it starts)", "zero")


def _of(labels: Sequence[str], codes: np.ndarray, *cats: str) -> np.ndarray:
    """Rows whose category is one of ``cats``."""
    wanted = np.array([label in cats for label in labels], dtype=bool)
    return wanted[codes] if len(codes) else np.zeros(0, dtype=bool)


def _check_ids(counter: _Counter, table: Mapping[str, np.ndarray], labels: Sequence[str]) -> None:
    gpu = _of(labels, counter.kinds, *_GPU_OPS)
    if not gpu.any():
        return
    for column in ("device", "stream"):
        if column in table:
            counter.add(gpu & (table[column] < 0), column, "missing", "kept")
    runtime = _of(labels, counter.kinds, _RUNTIME)
    if runtime.any() and "correlation" in table:
        counter.add((gpu | runtime) & (table["correlation"] < 0), "correlation", "missing", "kept")


def _check_duplicates(counter: _Counter, table: Mapping[str, np.ndarray], labels: Sequence[str]) -> None:
    """The same event twice (next to each other in the sorted table); runtime calls sharing a correlation id."""
    if len(counter.kinds) < 2:
        return
    same = (table["ts"][1:] == table["ts"][:-1]) & (table["dur"][1:] == table["dur"][:-1])
    if same.any():
        # with the ids: nested calls of one op often share start and duration at µs resolution
        for column in ("name", "cat", "tid", "pid", "external_id", "correlation"):
            if column in table:
                same &= table[column][1:] == table[column][:-1]
    repeated = np.concatenate([[False], same])
    if "correlation" in table:
        corr = table["correlation"]
        rows = np.flatnonzero(_of(labels, counter.kinds, _RUNTIME) & (corr >= 0))
        if len(rows) > 1:
            order = rows[np.argsort(corr[rows], kind="stable")]
            repeated[order[1:][corr[order][1:] == corr[order][:-1]]] = True
    counter.add(repeated, "", "duplicated", "kept")


def _count(value: Any) -> bool:
    """A whole number that can count ranks or name one."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and abs(value) < 1 << 62


def check_meta(meta: dict[str, Any]) -> list[str]:
    """Leave out the top-level values that cannot be what they claim; say which, for the note.

    ``deviceProperties`` must be a list of objects whose ``name`` is text and other fields numbers;
    ``distributedInfo`` an object whose ``rank`` and ``world_size`` are counts (rank below world size)
    and ``backend`` text. The same holds for ``rank``, ``world_size`` and ``backend`` at the top level.
    """
    notes = []
    devices = meta.get("deviceProperties")
    if devices is not None:
        if not isinstance(devices, list):
            notes.append("`deviceProperties` is not a list (left out)")
            del meta["deviceProperties"]
        else:
            kept, dropped = [], 0
            for device in devices:
                if not isinstance(device, dict):
                    dropped += 1
                    continue
                clean = {k: v for k, v in device.items() if (isinstance(v, str) if k == "name" else _number(v))}
                dropped += len(clean) < len(device)
                kept.append(clean)
            meta["deviceProperties"] = kept
            if dropped:
                notes.append(f"`deviceProperties`: {dropped} device(s) with fields of the wrong type (left out)")
    info = meta.get("distributedInfo")
    if info is not None and not isinstance(info, dict):
        notes.append("`distributedInfo` is not an object (left out)")
        del meta["distributedInfo"]
    for where in (meta, meta.get("distributedInfo") or {}):
        bad = [k for k in ("rank", "world_size") if k in where and not _count(where[k])]
        if "backend" in where and not isinstance(where["backend"], str):
            bad.append("backend")
        if _count(where.get("rank")) and _count(where.get("world_size")) and where["rank"] >= where["world_size"]:
            bad.append("rank")
        for key in dict.fromkeys(bad):
            del where[key]
        if bad:
            name = "" if where is meta else "distributedInfo."
            notes.append(", ".join(f"`{name}{k}`" for k in dict.fromkeys(bad)) + " not a valid value (left out)")
    return notes
