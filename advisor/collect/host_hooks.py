"""Host-side work the profiler does not name, marked from outside the script.

- ``torch.save`` runs inside an :data:`~advisor.naming.SAVE_RANGE` range, so a
  checkpoint written inside the profiled steps shows as one event with its
  duration (the profiler sees no operator in pickling and file writes).
- A DataLoader's worker processes start inside
  :data:`~advisor.naming.WORKERS_START_RANGE`
  (``_MultiProcessingDataLoaderIter.__init__``: forking or spawning the
  workers, and sending them their first indices), so a restart at every epoch
  shows where it happens.
- The worker processes of the live DataLoader iterators are remembered, so the
  run metadata can say how many there are and how much CPU time they used
  (:func:`worker_cpu`).
- The line that last called ``torch.set_num_threads`` is remembered
  (:data:`THREADS_SET_AT`), so advice about the thread count can point at it.

Outside the profiled window each wrapper costs one check of whether the
profiler is on (about 0.1 us), once per save or per epoch: nothing per step.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import dataloader as _dl

from advisor.naming import SAVE_RANGE, WORKERS_START_RANGE

__all__ = ["THREADS_SET_AT", "install", "worker_cpu", "worker_pids"]

#: (file, line, function) of the last torch.set_num_threads call, empty before any
THREADS_SET_AT: list[tuple[str, int, str]] = []

#: the multi-process iterators alive now (an iterator's workers die with it)
_ITERATORS: weakref.WeakSet[Any] = weakref.WeakSet()
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _in_range(name: str, func: Callable[..., Any], recording: Callable[[], bool]) -> Callable[..., Any]:
    """``func`` run inside a profiler range named ``name`` while the profiler records; as is otherwise."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not recording():
            return func(*args, **kwargs)
        with torch.autograd.profiler.record_function(name):
            return func(*args, **kwargs)

    return wrapper


def install() -> Callable[[], None]:
    """Wrap ``torch.save``, ``torch.set_num_threads`` and the multi-process DataLoader iterator's
    ``__init__``; returns the undo.

    A torch without the profiler-state query gets no wrappers (nothing would be recorded).
    """
    recording = getattr(torch._C._autograd, "_profiler_enabled", None)
    if recording is None:
        return lambda: None
    original_save = torch.save
    original_init = _dl._MultiProcessingDataLoaderIter.__init__
    timed_init = _in_range(WORKERS_START_RANGE, original_init, recording)

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        timed_init(self, *args, **kwargs)
        _ITERATORS.add(self)

    original_set_threads = torch.set_num_threads

    @functools.wraps(original_set_threads)
    def set_num_threads(*args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1)
        THREADS_SET_AT[:] = [(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)]
        return original_set_threads(*args, **kwargs)

    save = _in_range(SAVE_RANGE, original_save, recording)
    # `from torch import save` in the script runs after this, so it gets the wrappers too
    torch.save = save
    torch.serialization.save = save
    torch.set_num_threads = set_num_threads
    _dl._MultiProcessingDataLoaderIter.__init__ = __init__

    def undo() -> None:
        torch.save = original_save
        torch.serialization.save = original_save
        torch.set_num_threads = original_set_threads
        _dl._MultiProcessingDataLoaderIter.__init__ = original_init

    return undo


def worker_pids() -> list[int]:
    """Process ids of the worker processes of every live multi-process DataLoader iterator."""
    pids = []
    for iterator in list(_ITERATORS):
        for process in getattr(iterator, "_workers", None) or []:
            if process.pid is not None:
                pids.append(int(process.pid))
    return pids


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far, from /proc (None where there is no /proc or no process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count fields after its closing one
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (IndexError, ValueError):
        return None


def worker_cpu(pids: list[int]) -> dict[int, float]:
    """CPU seconds used so far by each of ``pids`` that is still running."""
    out = {}
    for pid in pids:
        seconds = _cpu_seconds(pid)
        if seconds is not None:
            out[pid] = seconds
    return out
