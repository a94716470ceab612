"""Why a GPU sat idle: every gap in its work, split by cause.

A device is *busy* while any of its kernels, copies or memsets runs, on any
stream, and *idle* otherwise; busy + idle is the analysed window exactly.
Each idle gap ends when the next GPU op starts (or at the window's end), and
its time is split by what held that op back:

``kernel_gap``
    The next op was already launched when the gap began: the GPU had the work
    queued, and the gap (at most :data:`KERNEL_GAP_NS`) is the device's own
    latency between back-to-back ops.
``other``
    The next op was queued but started more than :data:`KERNEL_GAP_NS` later
    (waiting on another stream, an event or a collective), or the trace does
    not say when it was launched.
``launch``
    The time from the start of the launch call to the op's start (the launch
    path itself; a launch call that is slow on its own, such as the lazy
    loading of a kernel module on first use, counts here too), and whole host
    waits no longer than :data:`LAUNCH_GAP_NS`: the host issues ops one after
    another and the GPU finishes each before the next arrives (launch-bound).
    An op that starts more than :data:`LAUNCH_GAP_NS` after its launch call
    *returned* waited for something else (a stream waiting on an event,
    another device): that part is ``other``.
``sync``
    The host could not launch because it was inside a synchronising call
    (``cudaDeviceSynchronize``, ``.item()``, a blocking copy, ``cudaFree``),
    or had just come out of one (within :data:`SYNC_SLACK_NS`): while the host
    waited for the GPU to finish it could not queue the next work, so up to
    the time it spent waiting is charged here.
``dataloader``
    The host was in the training loop's data-loading phase.
``cpu``
    The host was busy with other work for longer than :data:`LAUNCH_GAP_NS`
    before it launched the next op (Python, CPU operators, allocation):
    CPU-bound.

The host-side part of a gap is split in that order of priority (sync, then
data loading, then launch or cpu), so the parts of every gap add up to it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.analyze import intervals

__all__ = ["CAUSES", "KERNEL_GAP_NS", "LAUNCH_GAP_NS", "idle_gaps"]

CAUSES = ("sync", "dataloader", "launch", "cpu", "kernel_gap", "other")
#: a queued op that starts within this of the previous one ended waited only for the device
KERNEL_GAP_NS = 100_000
#: a host wait this short is the host's launch rhythm, not other CPU work
LAUNCH_GAP_NS = 50_000
#: a sync that returned this soon before the GPU went idle still waited for it
SYNC_SLACK_NS = 10_000

_EMPTY = (np.empty(0, "int64"), np.empty(0, "int64"))


def idle_gaps(ops: pd.DataFrame, lo: int, hi: int, syncs: tuple[np.ndarray, np.ndarray] = _EMPTY,
              dataloader: tuple[np.ndarray, np.ndarray] = _EMPTY) -> pd.DataFrame:
    """The idle gaps of one device's ops (``ts``, ``end``, ``launch_ts``) inside [lo, hi), with causes.

    ``syncs`` and ``dataloader`` are sorted, disjoint host intervals: time the
    host spent in synchronising calls, and in the data-loading phase. Returns
    one row per gap: ``start``, ``end``, ``dur``, ``next`` (row of ``ops``
    that ends the gap, -1 at the window's end) and one ns column per cause.
    """
    ts, end = ops["ts"].to_numpy("int64"), ops["end"].to_numpy("int64")
    busy_s, busy_e = intervals.union(*intervals.clip(ts, end, lo, hi))
    gap_s, gap_e = intervals.complement(busy_s, busy_e, lo, hi)
    n = len(gap_s)
    out = pd.DataFrame({"start": gap_s, "end": gap_e, "dur": gap_e - gap_s})
    # The op that ends each gap starts exactly at the gap's end (ops are sorted by start).
    order = np.argsort(ts, kind="stable")
    k = np.searchsorted(ts[order], gap_e, side="left")
    has_next = (k < len(ts)) & (gap_e < hi)
    nxt = np.where(has_next, order[np.minimum(k, max(len(ts) - 1, 0))], -1)
    out["next"] = nxt
    launch = np.where(nxt >= 0, ops["launch_ts"].to_numpy("int64")[np.maximum(nxt, 0)], -1) if len(ts) else np.full(n, -1)
    known = launch >= 0
    queued = has_next & known & (launch <= gap_s)
    unknown = has_next & ~known
    parts = {c: np.zeros(n, "int64") for c in CAUSES}
    length = out["dur"].to_numpy()
    parts["kernel_gap"] = np.where(queued & (length <= KERNEL_GAP_NS), length, 0)
    parts["other"] = np.where((queued & (length > KERNEL_GAP_NS)) | unknown, length, 0)
    # Host waits: [gap start, launch start) is the host's, [launch start, gap end) the launch path's.
    host_wait = ~queued & ~unknown
    host_end = np.where(has_next & known, np.clip(launch, gap_s, gap_e), gap_e)
    parts["launch"] = np.where(host_wait, gap_e - host_end, 0)
    if "launch_end" in ops and len(ts):
        # Launched, but held back long after the call returned: not the launch path.
        returned = ops["launch_end"].to_numpy("int64")[np.maximum(nxt, 0)]
        held_from = np.clip(returned + LAUNCH_GAP_NS, host_end, gap_e)
        held = np.where(host_wait & has_next & (returned >= 0), gap_e - held_from, 0)
        parts["launch"] = parts["launch"] - held
        parts["other"] = parts["other"] + held
    _split_host_wait(parts, gap_s, host_end, host_wait, syncs, dataloader)
    for cause in CAUSES:
        out[cause] = parts[cause]
    return out


def _split_host_wait(parts: dict[str, np.ndarray], lo: np.ndarray, hi: np.ndarray, mask: np.ndarray,
                     syncs: tuple[np.ndarray, np.ndarray], dataloader: tuple[np.ndarray, np.ndarray]) -> None:
    """Split each host wait [lo, hi) into sync, dataloader, and launch or cpu, in that priority."""
    wait = np.where(mask, hi - lo, 0)
    in_sync = intervals.covered_between(*syncs, lo, hi)
    # A sync call running when the GPU went idle (or returning just then: host and GPU clocks
    # differ by microseconds) kept the host from queuing work while it waited.
    s, e = syncs
    j = np.searchsorted(s, lo, side="right") - 1
    if len(s):
        k = np.maximum(j, 0)
        running = (j >= 0) & (lo <= e[k] + SYNC_SLACK_NS)
        blocked_before = np.where(running, np.minimum(lo, e[k]) - s[k], 0)
    else:
        blocked_before = np.zeros(len(lo), "int64")
    sync = np.minimum(in_sync + blocked_before, wait)
    both = intervals.intersect(*syncs, *dataloader)
    loading = intervals.covered_between(*dataloader, lo, hi) - intervals.covered_between(*both, lo, hi)
    loading = np.minimum(loading, wait - sync)
    rest = wait - sync - loading
    short = wait <= LAUNCH_GAP_NS
    parts["sync"] = np.where(mask, sync, 0)
    parts["dataloader"] = np.where(mask, loading, 0)
    parts["launch"] = parts["launch"] + np.where(mask & short, rest, 0)
    parts["cpu"] = np.where(mask & ~short, rest, 0)
