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
-20% (``bench/calibrate.py``). Elsewhere it is not done: glibc's dynamic
thresholds would trim it back at once, and jemalloc or tcmalloc keep arenas
of their own. It costs no memory the window's growth would not
take anyway, as long as it is no larger than that growth: its size is the
heap's size, capped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["reserve"]

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


def reserve(allocator: Mapping[str, Any]) -> dict[str, Any] | None:
    """Fault in heap headroom for the window and give it back to glibc; what was done, or None where it is not.

    ``allocator`` is :func:`advisor.collect.environment.allocator_settings`' answer: only glibc that keeps
    freed memory gets headroom, at most its trim threshold. The answer says how many MB, in how many ms, and whether glibc kept them
    (its heap did not shrink back).
    """
    if allocator.get("name") != "glibc" or not allocator.get("keeps_freed_memory"):
        return None
    trim = allocator.get("trim_threshold")
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
    blocks = []
    try:
        for _ in range(size // _BLOCK):
            block = libc.malloc(_BLOCK)
            if not block:
                break
            ctypes.memset(block, 0, _BLOCK)
            blocks.append(block)
    finally:
        # Newest first, so that each one joins the top of the heap as it is freed.
        for block in reversed(blocks):
            libc.free(block)
    after = mallinfo2()
    return {"mb": round(len(blocks) * _BLOCK / 2**20, 1),
            "ms": round((time.perf_counter() - started) * 1e3, 1),
            "kept": after.arena >= before.arena + len(blocks) * _BLOCK // 2,
            "heap_mb": round(after.arena / 2**20, 1)}
