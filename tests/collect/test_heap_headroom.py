"""The heap headroom the collector gives the window under glibc (advisor.collect.heap_headroom).

The real allocator of a real process: a child Python faults in the headroom, then grows its heap as the
profiler's records make a script's heap grow (blocks from the heap, written once), counts its page faults,
releases the headroom and reads glibc's heap size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from advisor.collect.environment import allocator_settings
from advisor.collect.heap_headroom import reserve

GLIBC_MAPS = "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
JEMALLOC_MAPS = GLIBC_MAPS + "7f0000006000-7f0000007000 r-xp 00000000 08:01 3 /usr/lib/libjemalloc.so.2\n"
KEEP = {"MALLOC_TRIM_THRESHOLD_": "1000000000", "MALLOC_MMAP_THRESHOLD_": "100000000"}

# Grows the heap by 32 MB in 64 KB blocks, written once: the pages a fragmented heap takes on in a recorded step.
CHILD = """
import ctypes, json, resource, sys
from advisor.collect.environment import allocator_settings
from advisor.collect.heap_headroom import reserve
from advisor.collect.heap_headroom import _Mallinfo2
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = _Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
heap_before = libc.mallinfo2().arena
given = reserve(allocator_settings()) if sys.argv[1] == "headroom" else None
if sys.argv[1] == "forced":  # headroom freed whole, as where glibc keeps freed memory
    given = reserve({"name": "glibc", "keeps_freed_memory": True, "trim_threshold": 1000000000})
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
grown = [libc.malloc(65536) for _ in range(512)]
for block in grown:
    ctypes.memset(block, 1, 65536)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
for block in reversed(grown):
    libc.free(block)
if given is not None:
    given.release()
print(json.dumps({"given": given and given.summary, "faults": faults,
                  "heap_before_mb": heap_before / 2**20, "heap_after_mb": libc.mallinfo2().arena / 2**20}))
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator, on Linux")


def _child(mode: str, env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-c", CHILD, mode], env={**clean, **env}, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


PAGES = 32 * 2**20 // os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("env", [KEEP, {}], ids=["thresholds-fixed", "dynamic-thresholds"])
def test_growth_after_the_headroom_lands_on_resident_pages(env: dict[str, str]) -> None:
    without = _child("none", env)
    assert without["faults"] >= 0.9 * PAGES, without  # a growing heap faults every new page in
    given = _child("headroom", env)
    assert given["given"]["kept"] is True and given["given"]["mb"] >= 64, given
    assert given["given"]["pinned"] is (env == {}), given  # pinned only where glibc would trim it
    assert given["faults"] < 0.1 * PAGES, given


def test_under_dynamic_thresholds_the_pin_keeps_it_and_its_release_gives_it_back() -> None:
    # Freed whole, glibc's own trim threshold hands the headroom back to the system at once, and the growth
    # faults again: that is why the highest block stays allocated through the window.
    forced = _child("forced", {})
    assert forced["given"]["kept"] is False and forced["given"]["pinned"] is False, forced
    assert forced["faults"] >= 0.9 * PAGES, forced
    # Released after the window, the heap shrinks back to about what it was: the script keeps no extra memory.
    pinned = _child("headroom", {})
    assert pinned["given"]["heap_mb"] >= pinned["heap_before_mb"] + 64, pinned
    assert pinned["heap_after_mb"] < pinned["heap_before_mb"] + 8, pinned


@pytest.mark.parametrize("maps, env", [
    (JEMALLOC_MAPS, KEEP),
    (GLIBC_MAPS, {"MALLOC_TRIM_THRESHOLD_": "1048576", "MALLOC_MMAP_THRESHOLD_": "100000000"}),
    (GLIBC_MAPS, {"MALLOC_TRIM_THRESHOLD_": "lots", "MALLOC_MMAP_THRESHOLD_": "100000000"}),
])
def test_no_headroom_where_it_would_not_stay(maps: str, env: dict) -> None:
    # an allocator of its own, a trim threshold below the smallest headroom, one glibc cannot read
    assert reserve(allocator_settings(maps, env)) is None


def test_the_tunable_form_of_the_trim_threshold_is_read() -> None:
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576:glibc.malloc.mmap_threshold=100000000"}
    assert allocator_settings(GLIBC_MAPS, tunables)["trim_threshold"] == 1048576
    assert reserve(allocator_settings(GLIBC_MAPS, tunables)) is None  # below the smallest headroom
    assert allocator_settings(GLIBC_MAPS, KEEP)["trim_threshold"] == 1000000000
