"""What the collector records of the host allocator: whether freed memory stays in the process (OPT002 on a CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from advisor.collect.environment import allocator_settings

GLIBC_MAPS = """\
7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
7f0000004000-7f0000005000 rw-p 00000000 00:00 0
"""


def test_glibc_with_its_dynamic_thresholds_gives_freed_memory_back() -> None:
    found = allocator_settings(GLIBC_MAPS, {})
    assert found["name"] == "glibc" and found["keeps_freed_memory"] is False


def test_glibc_keeps_freed_memory_only_with_both_thresholds_fixed() -> None:
    both = {"MALLOC_TRIM_THRESHOLD_": "1000000000", "MALLOC_MMAP_THRESHOLD_": "100000000"}
    assert allocator_settings(GLIBC_MAPS, both)["keeps_freed_memory"] is True
    assert "MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_" in allocator_settings(GLIBC_MAPS, both)["how"]
    # the mmap threshold alone still trims the heap above the (now fixed) trim threshold's default
    assert allocator_settings(GLIBC_MAPS, {"MALLOC_MMAP_THRESHOLD_": "100000000"})["keeps_freed_memory"] is False
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000000000:glibc.malloc.mmap_threshold=100000000"}
    assert allocator_settings(GLIBC_MAPS, tunables)["keeps_freed_memory"] is True


def test_a_caching_allocator_that_is_loaded_keeps_freed_memory() -> None:
    for lib in ("libjemalloc.so.2", "libtcmalloc_minimal.so.4", "libmimalloc.so.2"):
        maps = GLIBC_MAPS + f"7f0000006000-7f0000007000 r-xp 00000000 08:01 3 /usr/lib/{lib}\n"
        found = allocator_settings(maps, {})
        assert found["keeps_freed_memory"] is True and lib.startswith(f"lib{found['name']}"), found


def test_the_running_process_is_read_from_its_own_maps_and_environment() -> None:
    # A real process: this machine's Python runs on glibc's malloc, and the variables reach the reading.
    code = "import json; from advisor.collect.environment import allocator_settings as a; print(json.dumps(a()))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    plain = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True).stdout)
    kept = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                     env={**env, "MALLOC_TRIM_THRESHOLD_": "1000000000",
                                          "MALLOC_MMAP_THRESHOLD_": "100000000"}).stdout)
    assert plain == {**plain, "name": "glibc", "keeps_freed_memory": False}
    assert kept["name"] == "glibc" and kept["keeps_freed_memory"] is True
