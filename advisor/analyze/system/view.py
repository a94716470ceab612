"""A view of one Nsight Systems export for the system-stage analyzers.

It answers the questions every system analyzer asks, once:

- which thread is the training loop (``main``): the thread with the
  ``ProfilerStep#N`` NVTX ranges the collector writes, else the one with the
  most NVTX ranges, else the most CUDA API calls, else the most OS calls;
- which time to analyse (``window``) and how many steps it holds: the
  ``ProfilerStep#N`` ranges of the main thread, else the collector's
  ``advisor::capture`` range, else the whole export as one window;
- which phase the main thread was in at any instant (``phase_at``), from the
  collector's ``advisor::<phase>`` NVTX ranges, split by the same priority as
  the framework stage (dataloader > optimizer > backward > forward), and
  ``other`` outside them;
- which NVTX range of a thread was innermost at an instant (``range_at``),
  for the user's own ranges;
- the GPU's busy time (kernels, copies, memsets merged over all streams).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.evaluation_steps import EvaluationSteps, find_evaluation_steps
from advisor.load.nsys_sqlite import NsysTrace
from advisor.naming import CAPTURE_RANGE, LABEL_PREFIX, OTHER_PHASE, PHASE_NAMES, PHASE_ORDER, STEP_PREFIX

__all__ = ["OTHER", "SystemView"]

OTHER = OTHER_PHASE
_EMPTY = (np.empty(0, "int64"), np.empty(0, "int64"))


class SystemView:
    """Tables of one export plus the main thread, the steps and the phases."""

    def __init__(self, trace: NsysTrace, run_meta: dict[str, Any] | None = None) -> None:
        self.trace = trace
        self.run_meta = run_meta or {}

    # tables ------------------------------------------------------------------------
    def has(self, table: str) -> bool:
        """A table with rows; ``gpu`` means kernels, copies or memsets; ``steps`` means ProfilerStep ranges."""
        if table == "gpu":
            return any(self.trace.has(t) for t in ("kernels", "memcpy", "memset"))
        if table == "steps":
            return self.profiler_steps_present
        return self.trace.has(table)

    def table(self, name: str) -> pd.DataFrame:
        return self.trace.tables[name]

    # the main thread -------------------------------------------------------------
    @cached_property
    def main(self) -> tuple[int, int]:
        """(pid, tid) of the training loop's thread; (-1, -1) when nothing says."""
        nvtx = self.table("nvtx")
        ranges = nvtx[nvtx["kind"] == "range"]
        steps = ranges[ranges["name"].str.startswith(STEP_PREFIX)]
        for frame in (steps, ranges, self.table("runtime"), self.table("osrt")[lambda f: f["tid"] > 0]):
            if len(frame):
                pid, tid = frame.groupby(["pid", "tid"]).size().idxmax()
                return int(pid), int(tid)
        return -1, -1

    def on_main(self, frame: pd.DataFrame) -> pd.DataFrame:
        pid, tid = self.main
        return frame[(frame["pid"] == pid) & (frame["tid"] == tid)]

    def main_ranges(self) -> pd.DataFrame:
        nvtx = self.table("nvtx")
        return self.on_main(nvtx[nvtx["kind"] == "range"])

    @cached_property
    def thread_names(self) -> dict[tuple[int, int], str]:
        """(pid, tid) -> a readable name; the training loop's thread is ``main``."""
        threads = self.table("threads")
        out = {(int(p), int(t)): (str(n) or f"tid {t}")
               for p, t, n in zip(threads["pid"], threads["tid"], threads["name"])}
        if self.main != (-1, -1):
            out[self.main] = "main"
        return out

    def thread_name(self, pid: int, tid: int) -> str:
        return self.thread_names.get((int(pid), int(tid)), f"pid {pid} tid {tid}")

    # steps and the window ---------------------------------------------------------
    @cached_property
    def evaluation_steps(self) -> tuple[pd.DataFrame, EvaluationSteps]:
        """Every ProfilerStep range on the main thread (``step, start, end, dur``), and which of them also ran
        an evaluation pass (:mod:`advisor.analyze.evaluation_steps`)."""
        ranges = self.main_ranges()
        steps = ranges[ranges["name"].str.match(rf"^{STEP_PREFIX}\d+$")]
        out = pd.DataFrame({
            "step": steps["name"].str.slice(len(STEP_PREFIX)).astype("int64"),
            "start": steps["start"], "end": steps["end"], "dur": steps["dur"],
        })
        out = out[out["dur"] > 0].sort_values("start").reset_index(drop=True)

        def spans(phase: str) -> tuple[np.ndarray, np.ndarray]:
            rows = ranges[ranges["name"] == PHASE_NAMES[phase]]
            return rows["start"].to_numpy("int64"), rows["end"].to_numpy("int64")

        # one unbroken run of steps: the GPU figures here are taken over the window's span
        found = find_evaluation_steps(out["start"].to_numpy("int64"), out["end"].to_numpy("int64"),
                                      spans("forward"), spans("backward"), spans("dataloader")[0])
        return out, found

    @cached_property
    def steps(self) -> pd.DataFrame:
        """``step, start, end, dur`` of each analysed ProfilerStep range on the main thread: all of them, less
        those left out for an evaluation pass run inside them."""
        out, found = self.evaluation_steps
        return out[found.kept].reset_index(drop=True)

    @property
    def profiler_steps_present(self) -> bool:
        return len(self.steps) > 0

    @cached_property
    def window(self) -> tuple[int, int]:
        """[lo, hi) in ns: the steps, else the capture range, else everything in the export."""
        if self.profiler_steps_present:
            return int(self.steps["start"].min()), int(self.steps["end"].max())
        ranges = self.main_ranges()
        capture = ranges[ranges["name"] == CAPTURE_RANGE]
        if len(capture):
            return int(capture["start"].min()), int(capture["end"].max())
        lo, hi = None, None
        for name in ("kernels", "memcpy", "memset", "runtime", "nvtx", "osrt"):
            frame = self.table(name)
            if len(frame):
                lo = int(frame["start"].min()) if lo is None else min(lo, int(frame["start"].min()))
                hi = int(frame["end"].max()) if hi is None else max(hi, int(frame["end"].max()))
        return (lo or 0, hi or 0)

    @property
    def window_source(self) -> str:
        if self.profiler_steps_present:
            complete, found = self.evaluation_steps
            if not found.found:
                return "ProfilerStep NVTX ranges"
            numbers = complete["step"].to_numpy()[found.evaluation]
            which = ("steps " if len(numbers) > 1 else "step ") + ", ".join(str(n) for n in numbers)
            if not found.left_out:
                return f"ProfilerStep NVTX ranges ({which} also ran an evaluation pass, counted in)"
            kept = self.steps["step"]
            return (f"ProfilerStep NVTX ranges #{kept.iloc[0]} to #{kept.iloc[-1]} ({found.left_out} left out: "
                    f"{which} also ran an evaluation pass)")
        ranges = self.main_ranges()
        if (ranges["name"] == CAPTURE_RANGE).any():
            return f"the {CAPTURE_RANGE} NVTX range"
        return "the whole export (no ProfilerStep NVTX ranges)"

    @property
    def window_ns(self) -> int:
        lo, hi = self.window
        return max(hi - lo, 0)

    @property
    def step_count(self) -> int:
        """Steps in the window; a window without steps counts as one."""
        return max(len(self.steps), 1)

    def per_step_ms(self, total_ns: float) -> float:
        return float(total_ns) / self.step_count / 1e6

    def step_ms(self) -> float:
        return self.window_ns / self.step_count / 1e6

    def in_window(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Rows that overlap the window, clipped to it (``start``/``end``/``dur`` adjusted)."""
        lo, hi = self.window
        inside = frame[(frame["end"] > lo) & (frame["start"] < hi)]
        if len(inside) == 0:
            return inside
        inside = inside.copy()
        inside["start"] = inside["start"].clip(lower=lo)
        inside["end"] = inside["end"].clip(upper=hi)
        inside["dur"] = inside["end"] - inside["start"]
        return inside

    # phases ----------------------------------------------------------------------
    @cached_property
    def phase_segments(self) -> pd.DataFrame:
        """Disjoint ``start, end, phase`` segments of the main thread inside the window, by priority."""
        ranges = self.main_ranges()
        lo, hi = self.window
        taken_s: list[np.ndarray] = []
        taken_e: list[np.ndarray] = []
        rows = []
        for phase in PHASE_ORDER:
            marked = ranges[ranges["name"] == PHASE_NAMES[phase]]
            s, e = intervals.union(marked["start"].to_numpy(), marked["end"].to_numpy())
            s, e = intervals.clip(s, e, lo, hi)
            for seg_s, seg_e in _subtract(s, e, *intervals.union(
                    np.concatenate(taken_s or [_EMPTY[0]]), np.concatenate(taken_e or [_EMPTY[1]]))):
                rows.append((seg_s, seg_e, phase))
            taken_s.append(s)
            taken_e.append(e)
        frame = pd.DataFrame(rows, columns=["start", "end", "phase"])
        return frame.sort_values("start").reset_index(drop=True)

    @property
    def phases_seen(self) -> list[str]:
        return [p for p in PHASE_ORDER if (self.phase_segments["phase"] == p).any()]

    def phase_at(self, ts: np.ndarray) -> np.ndarray:
        """The main thread's phase at each instant, ``other`` outside the phases."""
        seg = self.phase_segments
        ts = np.asarray(ts, "int64")
        out = np.full(len(ts), OTHER, dtype=object)
        if len(seg) == 0 or len(ts) == 0:
            return out
        starts, ends = seg["start"].to_numpy(), seg["end"].to_numpy()
        k = np.searchsorted(starts, ts, side="right") - 1
        ok = (k >= 0) & (ts < ends[np.maximum(k, 0)])
        out[ok] = seg["phase"].to_numpy()[k[ok]]
        return out

    def phase_time(self, starts: np.ndarray, ends: np.ndarray) -> dict[str, int]:
        """Nanoseconds of the (merged) intervals spent in each phase of the main thread, plus ``other``."""
        s, e = intervals.union(np.asarray(starts, "int64"), np.asarray(ends, "int64"))
        total = int((e - s).sum())
        out: dict[str, int] = {}
        for phase, group in self.phase_segments.groupby("phase", sort=False):
            ps, pe = group["start"].to_numpy(), group["end"].to_numpy()
            out[str(phase)] = _overlap(s, e, ps, pe)
        out[OTHER] = max(total - sum(out.values()), 0)
        return out

    # NVTX ranges ------------------------------------------------------------------
    @cached_property
    def _user_ranges(self) -> dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        """Per thread, the user's NVTX ranges (not the collector's), by nesting depth, deepest first."""
        nvtx = self.table("nvtx")
        mine = nvtx["name"].str.startswith((LABEL_PREFIX, STEP_PREFIX))
        ranges = nvtx[(nvtx["kind"] == "range") & ~mine & (nvtx["dur"] > 0)]
        out: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        for (pid, tid), group in ranges.groupby(["pid", "tid"]):
            starts, ends = group["start"].to_numpy(), group["end"].to_numpy()
            _, depth = intervals.nest(starts, ends)
            levels = []
            for level in sorted(set(depth.tolist()), reverse=True):
                sel = depth == level
                order = np.argsort(starts[sel], kind="stable")
                levels.append((starts[sel][order], ends[sel][order], group["name"].to_numpy()[sel][order]))
            out[(int(pid), int(tid))] = levels
        return out

    def range_at(self, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The innermost user NVTX range of each (pid, tid) at ``ts``; "" when none."""
        ts = np.asarray(ts, "int64")
        out = np.full(len(ts), "", dtype=object)
        keys = pd.Series(list(zip(np.asarray(pid).tolist(), np.asarray(tid).tolist())))
        for key, levels in self._user_ranges.items():
            rows = np.flatnonzero((keys == key).to_numpy())
            if len(rows) == 0:
                continue
            todo = rows
            for starts, ends, names in levels:
                k = np.searchsorted(starts, ts[todo], side="right") - 1
                hit = (k >= 0) & (ts[todo] < ends[np.maximum(k, 0)])
                out[todo[hit]] = names[k[hit]]
                todo = todo[~hit]
                if len(todo) == 0:
                    break
        return out

    def label_at(self, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The user's innermost NVTX range, else the main thread's phase."""
        ranges = self.range_at(pid, tid, ts)
        phases = self.phase_at(ts)
        return np.where(ranges != "", ranges, phases)

    # the GPU -------------------------------------------------------------------------
    @cached_property
    def gpu_work(self) -> pd.DataFrame:
        """Kernels, copies and memsets in the window: ``start, end, dur, device, stream, kind, correlation, pid``."""
        parts = []
        for kind in ("kernels", "memcpy", "memset"):
            frame = self.in_window(self.table(kind))
            if len(frame):
                parts.append(frame[["start", "end", "dur", "device", "stream", "correlation", "pid"]].assign(kind=kind))
        if not parts:
            return pd.DataFrame(columns=["start", "end", "dur", "device", "stream", "correlation", "pid", "kind"])
        return pd.concat(parts, ignore_index=True).sort_values("start", kind="stable").reset_index(drop=True)

    @cached_property
    def gpu_busy(self) -> tuple[np.ndarray, np.ndarray]:
        work = self.gpu_work
        return intervals.union(work["start"].to_numpy("int64"), work["end"].to_numpy("int64"))

    @cached_property
    def launches(self) -> pd.DataFrame:
        """GPU work joined with the API call that issued it: adds ``api``, ``api_start``, ``api_dur``, ``tid``."""
        return self.with_api(self.gpu_work)

    def with_api(self, work: pd.DataFrame, unknown: str = "") -> pd.DataFrame:
        """``work`` (rows with ``pid``, ``correlation``, ``start``) joined with the runtime call that issued each row.

        Adds ``api`` (``unknown`` where no call matches), ``api_start``, ``api_dur`` and ``tid``.
        """
        runtime = self.table("runtime")
        if len(work) == 0 or len(runtime) == 0:
            return work.assign(api=unknown, api_start=work["start"], api_dur=0, tid=-1)
        calls = runtime.drop_duplicates(["pid", "correlation"])[["pid", "correlation", "api", "start", "dur", "tid"]]
        calls = calls.rename(columns={"start": "api_start", "dur": "api_dur"})
        merged = work.merge(calls, on=["pid", "correlation"], how="left")
        merged["api"] = merged["api"].fillna(unknown)
        merged["api_start"] = merged["api_start"].fillna(merged["start"]).astype("int64")
        merged["api_dur"] = merged["api_dur"].fillna(0).astype("int64")
        merged["tid"] = merged["tid"].fillna(-1).astype("int64")
        return merged


def _overlap(s: np.ndarray, e: np.ndarray, ps: np.ndarray, pe: np.ndarray) -> int:
    """Length of the intersection of two sets of disjoint sorted intervals."""
    if len(s) == 0 or len(ps) == 0:
        return 0
    total = 0
    for lo, hi in zip(ps.tolist(), pe.tolist()):
        cs, ce = intervals.clip(s, e, lo, hi)
        total += int((ce - cs).sum())
    return total


def _subtract(s: np.ndarray, e: np.ndarray, ts: np.ndarray, te: np.ndarray) -> list[tuple[int, int]]:
    """The parts of disjoint intervals (s, e) not covered by the disjoint intervals (ts, te)."""
    out = []
    for lo, hi in zip(s.tolist(), e.tolist()):
        cur = lo
        k = int(np.searchsorted(te, lo, side="right"))
        while k < len(ts) and ts[k] < hi:
            if ts[k] > cur:
                out.append((cur, int(ts[k])))
            cur = max(cur, int(te[k]))
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return out

