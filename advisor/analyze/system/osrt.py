"""What the CPU threads wait on: OS runtime calls (``--trace=osrt``) by thread, call and phase.

Nsight Systems records the C library calls that can block (``read``,
``poll``, ``pthread_cond_wait``, ``sem_timedwait``, ``nanosleep``, ...) with
their duration. Summed per thread, per call and per phase of the training
loop, they say *why* a thread does not work: the main thread blocked in
``read`` during ``dataloader`` is reading samples itself; blocked in
``poll``/``futex`` it waits for DataLoader workers; the workers blocked in
``read`` are I/O bound.

Only top-level calls count (``nesting == 0``): ``fread`` calling ``read``
is one wait, not two.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.system.view import SystemView

TOP = 12
#: threads of the profiler itself, not of the program
TOOL_THREADS = re.compile(r"^(\[NSys|CUPTI worker thread|cuda-EvtHandlr)")

#: call -> category, by regular expression on the name without a "64" suffix; first match wins
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sleep", re.compile(r"^((clock_)?nanosleep|u?sleep|sched_yield)$")),
    ("file I/O", re.compile(r"^(p?read|p?write|readv|writev|p(read|write)v2?|f(read|write|open|close|gets|puts|flush|"
                            r"seek|stat)|open(at)?|creat|close|[lf]?stat|lseek|fsync|fdatasync|getdents|sendfile|"
                            r"posix_fadvise|statx)$")),
    ("poll/select", re.compile(r"^(poll|ppoll|select|pselect\d*|epoll_wait|epoll_pwait\d?)$")),
    ("lock/condition", re.compile(r"^(pthread_(mutex|rwlock|spin)_\w*lock|pthread_cond_(timed)?wait|sem_(timed)?wait|"
                                  r"futex|pthread_barrier_wait)$")),
    ("process/thread", re.compile(r"^(waitpid|wait\d?|waitid|pthread_join|fork|vfork|posix_spawnp?|system)$")),
    ("socket/pipe", re.compile(r"^(recv\w*|send\w*|accept\d?|connect|pipe\d?|socket\w*)$")),
    ("memory map", re.compile(r"^(mmap|munmap|mprotect|mremap|madvise|shm_open|shm_unlink)$")),
    ("ioctl", re.compile(r"^ioctl$")),
)

PROVIDES = (
    FactSpec("system.osrt.main_wait_ms_per_step", "ms", "time per step the main thread spends blocked in OS calls"),
    FactSpec("system.osrt.main_wait_share", "fraction", "share of the step the main thread is blocked in OS calls"),
    FactSpec("system.osrt.main_top_call", "text", "the OS call the main thread waits in the longest"),
    FactSpec("system.osrt.main_top_category", "text", "its kind: sleep, file I/O, poll/select, lock/condition, ..."),
    FactSpec("system.osrt.main_top_phase", "text", "the phase in which the main thread waits the longest"),
    FactSpec("system.osrt.main_top_phase_wait_ms", "ms", "time per step the main thread waits in that phase"),
    FactSpec("system.osrt.main_top_phase_wait_share", "fraction",
             "share of that phase's time the main thread is blocked in OS calls"),
    FactSpec("system.osrt.dataloader_wait_share", "fraction",
             "share of the data-loading phase the main thread is blocked in OS calls"),
    FactSpec("system.osrt.worker_processes", "count", "other processes of the program that made OS calls (workers)"),
    FactSpec("system.osrt.waits", "table", "OS calls by thread, call and phase, by time per step", columns={
        "thread": "text: thread (main is the training loop)", "call": "text: OS call",
        "category": "text: sleep, file I/O, poll/select, lock/condition, ...", "phase": "text: main-thread phase",
        "calls_per_step": "ratio: calls per step", "ms_per_step": "ms: time per step",
        "share": "fraction: of step time", "avg_us": "us: mean duration",
    }),
    FactSpec("system.osrt.threads", "table", "OS wait time per thread", columns={
        "thread": "text: thread", "process": "count: process id", "wait_ms_per_step": "ms: per step",
        "share": "fraction: of step time", "top_call": "text: the call it waits in the longest",
    }),
)


def category_of(call: str) -> str:
    """``pread64`` -> ``file I/O``; ``other`` for calls in no category."""
    base = call[:-2] if call.endswith("64") else call
    for name, pattern in CATEGORIES:
        if pattern.match(base):
            return name
    return "other"


@analyzer("system_osrt", needs=("osrt",), provides=PROVIDES, stage="system")
def system_osrt(view: SystemView) -> dict[str, Any]:
    """OS waits of the main thread and the workers, by call and phase."""
    calls = view.in_window(view.table("osrt"))
    calls = calls[(calls["nesting"] == 0) & (calls["tid"] > 0) & (calls["dur"] > 0)].copy()
    if len(calls) == 0:  # (an empty column of names would be float, and .str would fail on it)
        return {}
    calls["thread"] = [view.thread_name(p, t) for p, t in zip(calls["pid"], calls["tid"])]
    calls = calls[~calls["thread"].str.match(TOOL_THREADS)]
    if len(calls) == 0:
        return {}
    pid, tid = view.main
    main = (calls["pid"] == pid) & (calls["tid"] == tid)
    calls["category"] = calls["name"].map(category_of)
    calls["phase"] = view.phase_at(calls["start"].to_numpy())
    calls.loc[~main, "phase"] = "(other thread)"
    step_ms = view.step_ms()
    out: dict[str, Any] = {"system.osrt.waits": _waits(view, calls, step_ms),
                           "system.osrt.threads": _threads(view, calls, step_ms)}
    out["system.osrt.worker_processes"] = int(calls.loc[calls["pid"] != pid, "pid"].nunique()) if pid >= 0 else 0
    mine = calls[main]
    if len(mine) == 0:
        return out
    wait_ms = view.per_step_ms(mine["dur"].sum())
    by_call = mine.groupby("name")["dur"].sum()
    by_phase = mine.groupby("phase")["dur"].sum()
    phase_wall = {row["phase"]: row["ns"] for row in _phase_wall(view)}
    top_phase = str(by_phase.idxmax())
    out.update({
        "system.osrt.main_wait_ms_per_step": wait_ms,
        "system.osrt.main_wait_share": wait_ms / step_ms if step_ms else 0.0,
        "system.osrt.main_top_call": str(by_call.idxmax()),
        "system.osrt.main_top_category": category_of(str(by_call.idxmax())),
        "system.osrt.main_top_phase": top_phase,
        "system.osrt.main_top_phase_wait_ms": view.per_step_ms(by_phase.max()),
        "system.osrt.main_top_phase_wait_share": _ratio(by_phase.max(), phase_wall.get(top_phase)),
    })
    if "dataloader" in phase_wall:
        out["system.osrt.dataloader_wait_share"] = _ratio(by_phase.get("dataloader", 0), phase_wall["dataloader"])
    return out


def _ratio(part: float, whole: float | None) -> float | None:
    return min(float(part) / float(whole), 1.0) if whole else None


def _phase_wall(view: SystemView) -> list[dict[str, Any]]:
    seg = view.phase_segments
    rows = [{"phase": str(p), "ns": int((g["end"] - g["start"]).sum())} for p, g in seg.groupby("phase")]
    rows.append({"phase": "other", "ns": max(view.window_ns - sum(r["ns"] for r in rows), 0)})
    return rows


def _waits(view: SystemView, calls: pd.DataFrame, step_ms: float) -> list[dict[str, Any]]:
    grouped = calls.groupby(["thread", "name", "category", "phase"], sort=False).agg(
        count=("dur", "size"), ns=("dur", "sum"))
    grouped = grouped.sort_values("ns", ascending=False).head(TOP)
    return records({"thread": th, "call": call, "category": cat, "phase": ph,
                    "calls_per_step": float(r["count"]) / view.step_count, "ms_per_step": view.per_step_ms(r["ns"]),
                    "share": view.per_step_ms(r["ns"]) / step_ms if step_ms else 0.0,
                    "avg_us": float(r["ns"]) / float(r["count"]) / 1e3}
                   for (th, call, cat, ph), r in grouped.iterrows())


def _threads(view: SystemView, calls: pd.DataFrame, step_ms: float) -> list[dict[str, Any]]:
    rows = []
    for (thread, pid), group in calls.groupby(["thread", "pid"], sort=False):
        by_call = group.groupby("name")["dur"].sum()
        ms = view.per_step_ms(group["dur"].sum())
        rows.append({"thread": thread, "process": int(pid), "wait_ms_per_step": ms,
                     "share": ms / step_ms if step_ms else 0.0, "top_call": str(by_call.idxmax())})
    rows.sort(key=lambda r: -r["wait_ms_per_step"])
    return records(rows[:TOP])
