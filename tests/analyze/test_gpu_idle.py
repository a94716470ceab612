"""The idle-cause split on small tables, one cause at a time, with values either side of each threshold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from advisor.analyze.framework.gpu_idle import CAUSES, KERNEL_GAP_NS, LAUNCH_GAP_NS, idle_gaps

US = 1000


def ops(*rows: tuple[int, int, int]) -> pd.DataFrame:
    """(start, end, launch start) in us."""
    return pd.DataFrame([(s * US, e * US, (l * US if l >= 0 else -1)) for s, e, l in rows],
                        columns=["ts", "end", "launch_ts"])


def causes(frame: pd.DataFrame, lo: int, hi: int, **kw) -> dict[str, int]:
    gaps = idle_gaps(frame, lo * US, hi * US, **kw)
    out = {c: int(gaps[c].sum()) // US for c in CAUSES}
    assert sum(out.values()) == int(gaps["dur"].sum()) // US  # the parts add up to the gaps
    return out


def intervals(*pairs: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([a * US for a, _ in pairs], "int64"), np.array([b * US for _, b in pairs], "int64")


def test_queued_ops_short_gap_is_kernel_gap() -> None:
    gap = KERNEL_GAP_NS // US
    c = causes(ops((0, 10, 0), (10 + gap, 200, 5)), 0, 200)
    assert c["kernel_gap"] == gap and c["other"] == 0


def test_queued_ops_long_gap_is_other() -> None:
    gap = KERNEL_GAP_NS // US + 1
    c = causes(ops((0, 10, 0), (10 + gap, 300, 5)), 0, 300)
    assert c["other"] == gap and c["kernel_gap"] == 0


def test_short_host_wait_is_launch_bound() -> None:
    wait = LAUNCH_GAP_NS // US
    # the next launch call starts when the GPU goes idle and lasts 5 us
    c = causes(ops((0, 10, 0), (10 + wait + 5, 200, 10 + wait)), 0, 200)
    assert c["launch"] == wait + 5 and c["cpu"] == 0


def test_long_host_wait_is_cpu_bound() -> None:
    wait = LAUNCH_GAP_NS // US + 1
    c = causes(ops((0, 10, 0), (10 + wait + 5, 300, 10 + wait)), 0, 300)
    assert c["cpu"] == wait and c["launch"] == 5


def test_host_in_a_sync_call_and_the_drain_after_it() -> None:
    # The host waits in a sync from 2 to 10 us (8 us while the GPU still works), returns at 10,
    # then does 200 us of CPU work before the next launch: 8 us of that is charged to the sync.
    c = causes(ops((0, 10, 0), (210, 400, 210)), 0, 400, syncs=intervals((2, 10)))
    assert c["sync"] == 8 and c["cpu"] == 192


def test_sync_running_during_the_gap() -> None:
    c = causes(ops((0, 10, 0), (1010, 2000, 1010)), 0, 2000, syncs=intervals((100, 700)))
    assert c["sync"] == 600 and c["cpu"] == 400


def test_dataloader_phase_in_the_gap() -> None:
    c = causes(ops((0, 10, 0), (1010, 2000, 1010)), 0, 2000, dataloader=intervals((10, 810)))
    assert c["dataloader"] == 800 and c["cpu"] == 200


def test_unknown_launch_is_other_and_edges_count() -> None:
    # idle before the first op (launched late) and after the last one (nothing follows)
    c = causes(ops((100, 200, -1)), 0, 500)
    assert c["other"] == 100 and c["cpu"] == 300


@pytest.mark.parametrize("lo,hi", [(0, 1000), (50, 150)])
def test_busy_plus_gaps_is_the_window(lo: int, hi: int) -> None:
    frame = ops((0, 100, 0), (50, 120, 10), (400, 600, 380))
    gaps = idle_gaps(frame, lo * US, hi * US)
    busy = {(0, 1000): 320, (50, 150): 70}[(lo, hi)]
    assert int(gaps["dur"].sum()) // US == (hi - lo) - busy
