"""Resident heap pages for the profiled window, where glibc keeps freed memory.

While the profiler records, it keeps its records until it stops (on the
example below, 0.65 MB of heap a step, in blocks of tens of bytes to 76 KB). glibc places them in the holes
that the script's freed temporaries leave, so a temporary of the next step no
longer fits where the last one was and the heap grows onto fresh pages: on
``examples/zeroed_grads.py`` with both glibc thresholds fixed (the set-up where
freed memory stays in the process), the heap grew by its six 4 MB
weight-gradient temporaries, 24 MB of page faults, in every recorded step of
six runs of six under the collector (of one run in two or three under a bare
profiler), and the step went from 20 ms to 31-37 ms, while the script's own
steps never fault. The recorded times then describe the profiler's heap, not
the script.

The fix is to give that growth pages that are already resident: before the
window, allocate the headroom in blocks small enough to come from the heap,
write them, and free them. With the trim threshold fixed above the headroom,
glibc keeps the freed pages at the top of its heap and the window's growth
lands on them: no recorded step faulted in 17 runs of the example, the
recorded step was 24-25 ms, and OPT002's calibration row went from -61% to
-20% (``bench/calibrate.py``).

Under glibc's dynamic thresholds (its defaults) the same fragmentation happens
with a moving trim threshold, and freed headroom would be trimmed at once from
the top of the heap. There the highest block stays allocated through the
window and the rest lies free below it, where no trim reaches; the block is
freed after the steps timed without the profiler that follow the window, and
the heap shrinks back as the script lets it. On ``examples/strided_copies.py``
the slow version's recorded steps faulted in 30-51 MB each (0-12 MB
unprofiled) and took 30-40 ms against 19-24 ms unprofiled; with the pinned
headroom 12 of 15 recorded steps faulted nothing and they took 23-31 ms.
jemalloc or tcmalloc keep arenas of their own and get none. It costs no memory
the window's growth would not take anyway, as long as it is no larger than
that growth: its size is the heap's size, capped, and it is given back once
the window and its unprofiled steps are done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Headroom", "reserve"]

#: small enough to come from the heap under any fixed mmap threshold a user would set (glibc's own default is 128 KB)
_BLOCK = 64 * 1024
_MIN = 64 << 20
_MAX = 512 << 20


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class Headroom:
    """Heap headroom given to the window; :meth:`release` after it (and the unprofiled steps) gives back what it
    still holds.

    Under glibc's dynamic thresholds the freed headroom would be trimmed at once from the top of the heap, so
    the block of it that lies highest stays allocated through the window (``pinned``) and keeps the rest below
    it, out of the trim's reach; released, the heap shrinks back as the script's own allocations let it.
    """

    def __init__(self, summary: dict[str, Any], free: Callable[[int], Any], pin: int | None) -> None:
        self.summary = summary
        self._free, self._pin = free, pin

    def release(self) -> None:
        if self._pin is not None:
            self._free(self._pin)
            self._pin = None


def reserve(allocator: Mapping[str, Any]) -> Headroom | None:
    """Fault in heap headroom for the window and give it back to glibc; what was done, or None where it is not.

    ``allocator`` is :func:`advisor.collect.environment.allocator_settings`' answer: glibc that keeps freed
    memory gets headroom up to its trim threshold; glibc with its dynamic thresholds gets it pinned below its
    highest block (see :class:`Headroom`). The summary says how many MB, in how many ms, whether glibc kept
    them (its heap did not shrink back) and whether they were pinned.
    """
    if allocator.get("name") != "glibc":
        return None
    keeps = bool(allocator.get("keeps_freed_memory"))
    trim = allocator.get("trim_threshold") if keeps else _MAX
    name = ctypes.util.find_library("c")
    if trim is None or trim < _MIN or name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        mallinfo2 = libc.mallinfo2  # glibc 2.33+: mallinfo's int fields overflow past 2 GB
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _Mallinfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = mallinfo2()
    size = min(max(before.arena, _MIN), _MAX, trim)
    available = _available_bytes()
    if available is not None:
        size = min(size, available // 8)
    if size < _BLOCK:
        return None
    started = time.perf_counter()
    blocks: list[int] = []
    pin = None
    try:
        for _ in range(size // _BLOCK):
            block = libc.malloc(_BLOCK)
            if not block:
                break
            ctypes.memset(block, 0, _BLOCK)
            blocks.append(block)
        if not keeps and blocks:
            pin = max(blocks)
            blocks.remove(pin)
    finally:
        # Newest first, so that each one joins the top of the heap (or the free run below the pin) as it is freed.
        for block in reversed(blocks):
            libc.free(block)
    after = mallinfo2()
    given = len(blocks) * _BLOCK
    summary = {"mb": round(given / 2**20, 1),
               "ms": round((time.perf_counter() - started) * 1e3, 1),
               "kept": after.arena >= before.arena + given // 2,
               "heap_mb": round(after.arena / 2**20, 1),
               "pinned": pin is not None}
    return Headroom(summary, libc.free, pin)
