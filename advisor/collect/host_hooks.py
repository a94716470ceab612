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
- After each optimizer step in the profiled window, one small operator runs
  on the intra-op pool inside :data:`~advisor.naming.POOL_PROBE_RANGE` (a fill
  of 2**16 floats, split across the threads; about 20 us): when the pool's
  threads must wait for cores, it takes a scheduler time slice instead, and
  the analysis reads that wait from the trace at every step.
- The lines that last called ``torch.set_num_threads`` and last switched
  anomaly detection on (``set_detect_anomaly(True)``, ``detect_anomaly()``)
  are remembered (:data:`CALLED_AT`), so the advice can point at them.

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

from advisor.naming import POOL_PROBE_RANGE, SAVE_RANGE, WORKERS_START_RANGE

__all__ = ["CALLED_AT", "install", "own_threads_cpu", "worker_cpu", "worker_pids"]

#: "set_num_threads" / "anomaly_on" -> (file, line, function) of the last such call outside torch
CALLED_AT: dict[str, tuple[str, int, str]] = {}
_TORCH_DIR = os.path.dirname(torch.__file__)

#: the multi-process iterators alive now (an iterator's workers die with it)
_ITERATORS: weakref.WeakSet[Any] = weakref.WeakSet()
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _in_range(name: str, func: Callable[..., Any], recording: Callable[[], bool],
              caller_label: Callable[[], str | None] | None) -> Callable[..., Any]:
    """``func`` run inside a profiler range named ``name`` while the profiler records; as is otherwise.

    Inside the range, a source label names the user's line that made the call (the torch-function
    mode that labels operators does not see plain Python functions such as ``torch.save``).
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not recording():
            return func(*args, **kwargs)
        label = caller_label() if caller_label is not None else None
        with torch.autograd.profiler.record_function(name):
            if label is None:
                return func(*args, **kwargs)
            with torch.autograd.profiler.record_function(label):
                return func(*args, **kwargs)

    return wrapper


def install(caller_label: Callable[[], str | None] | None = None) -> Callable[[], None]:
    """Wrap ``torch.save``, ``torch.set_num_threads`` and the multi-process DataLoader iterator's
    ``__init__``; returns the undo.

    ``caller_label`` (:meth:`SourceMarker.caller_label`) names the user's line inside each range.
    A torch without the profiler-state query gets no wrappers (nothing would be recorded).
    """
    recording = getattr(torch._C._autograd, "_profiler_enabled", None)
    if recording is None:
        return lambda: None
    original_save = torch.save
    original_init = _dl._MultiProcessingDataLoaderIter.__init__
    timed_init = _in_range(WORKERS_START_RANGE, original_init, recording, caller_label)

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        timed_init(self, *args, **kwargs)
        _ITERATORS.add(self)

    probe = _pool_probe(recording)
    original_set_threads = torch.set_num_threads
    original_set_anomaly = torch.set_anomaly_enabled

    @functools.wraps(original_set_threads)
    def set_num_threads(*args: Any, **kwargs: Any) -> None:
        _note_caller("set_num_threads")
        return original_set_threads(*args, **kwargs)

    @functools.wraps(original_set_anomaly)
    def set_anomaly_enabled(*args: Any, **kwargs: Any) -> None:
        if (args[0] if args else kwargs.get("enabled")):
            _note_caller("anomaly_on")
        return original_set_anomaly(*args, **kwargs)

    save = _in_range(SAVE_RANGE, original_save, recording, caller_label)
    # `from torch import save` in the script runs after this, so it gets the wrappers too
    torch.save = save
    torch.serialization.save = save
    torch.set_num_threads = set_num_threads
    torch.set_anomaly_enabled = set_anomaly_enabled
    _dl._MultiProcessingDataLoaderIter.__init__ = __init__

    def undo() -> None:
        probe.remove()
        torch.save = original_save
        torch.serialization.save = original_save
        torch.set_num_threads = original_set_threads
        torch.set_anomaly_enabled = original_set_anomaly
        _dl._MultiProcessingDataLoaderIter.__init__ = original_init

    return undo


def _pool_probe(recording: Callable[[], bool]) -> Any:
    """A global optimizer post-hook that times the intra-op pool while the profiler records."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    buffer: list[torch.Tensor] = []

    def probe(optimizer: Any, args: Any, kwargs: Any) -> None:
        if not recording() or torch.get_num_threads() < 2:
            return
        if not buffer:
            try:
                buffer.append(torch.empty(1 << 16, dtype=torch.float32, device="cpu"))
            except RuntimeError:  # a mode or guard of the script that refuses CPU tensors: no probe
                return
        with torch.autograd.profiler.record_function(POOL_PROBE_RANGE):
            buffer[0].fill_(1.0)

    return register_optimizer_step_post_hook(probe)


def _note_caller(what: str) -> None:
    """Remember the innermost frame outside torch (``set_detect_anomaly`` is torch code calling us)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
        frame = frame.f_back
    if frame is not None:
        CALLED_AT[what] = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def worker_pids() -> list[int]:
    """Process ids of the worker processes of every live multi-process DataLoader iterator."""
    pids = []
    for iterator in list(_ITERATORS):
        for process in getattr(iterator, "_workers", None) or []:
            if process.pid is not None:
                pids.append(int(process.pid))
    return pids


def _cpu_seconds(pid: int) -> tuple[float, float | None] | None:
    """CPU time of a process so far, and its time waiting for a CPU while runnable, in seconds.

    From /proc/<pid>/schedstat (nanoseconds: on CPU, waiting on a run queue); where the kernel
    has none, the CPU time from /proc/<pid>/stat and no wait. None where there is no such process.
    """
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            on_cpu, waiting = f.read().split()[:2]
        return int(on_cpu) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count fields after its closing one
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, None
    except (IndexError, ValueError):
        return None


def own_threads_cpu() -> tuple[float, float] | None:
    """CPU time and run-queue wait, in seconds, summed over every thread of this process (None without
    /proc/self/task/*/schedstat). Threads that ended since an earlier call are missing from a later one."""
    total_cpu = total_wait = 0.0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                on_cpu, waiting = f.read().split()[:2]
        except (OSError, ValueError):
            continue
        total_cpu += int(on_cpu) / 1e9
        total_wait += int(waiting) / 1e9
    return total_cpu, total_wait


def worker_cpu(pids: list[int]) -> dict[int, tuple[float, float | None]]:
    """(CPU seconds, seconds waiting for a CPU) used so far by each of ``pids`` that is still running."""
    out = {}
    for pid in pids:
        seconds = _cpu_seconds(pid)
        if seconds is not None:
            out[pid] = seconds
    return out
