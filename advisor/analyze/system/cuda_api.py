"""CUDA API calls that block the CPU: synchronisations, and copies and memsets that wait.

- *Synchronising calls*: ``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize`` and their driver forms. PyTorch makes them for
  ``.item()``, ``.cpu()``, ``print(tensor)``, ``torch.cuda.synchronize()``.
- *Synchronous copies and memsets*: ``cudaMemcpy`` / ``cudaMemset`` without
  ``Async``; the call returns only when the GPU has done it.
- *Pageable async copies*: ``cudaMemcpyAsync`` from or to pageable (not
  pinned) host memory is staged through a driver buffer and does not overlap
  with the CPU: asynchronous in name only.

Each call is attributed to its caller: the innermost user NVTX range of its
thread, else the main thread's phase.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.system.view import SystemView

TOP = 10
SYNC_API = re.compile(r"^cu(da)?(Device|Ctx|Stream|Event|Thread)Synchronize$")
COPY_API = re.compile(r"^cu(da)?Memcpy")
SET_API = re.compile(r"^cu(da)?Memset")

PROVIDES_SYNC = (
    FactSpec("system.sync.calls_per_step", "ratio", "synchronising CUDA calls (device/stream/event sync) per step"),
    FactSpec("system.sync.ms_per_step", "ms", "CPU time per step spent in synchronising CUDA calls"),
    FactSpec("system.sync.share", "fraction", "share of the step the CPU spends in synchronising CUDA calls"),
    FactSpec("system.sync.top_api", "text", "the synchronising call with the most time"),
    FactSpec("system.sync.top_caller", "text", "the NVTX range or phase with the most synchronising-call time"),
    FactSpec("system.sync.blocking_ms_per_step", "ms",
             "CPU time per step in every blocking CUDA call (syncs, synchronous copies and memsets)"),
    FactSpec("system.sync.blocking_share", "fraction", "share of the step in every blocking CUDA call"),
    FactSpec("system.sync.table", "table", "blocking CUDA calls by API and caller", columns={
        "api": "text: CUDA API", "kind": "text: sync, copy or memset", "caller": "text: NVTX range or phase",
        "calls_per_step": "ratio: calls per step", "ms_per_step": "ms: CPU time per step",
        "share": "fraction: of step time",
    }),
)

PROVIDES_COPY = (
    FactSpec("system.memcpy.count_per_step", "ratio", "copies per step"),
    FactSpec("system.memcpy.mb_per_step", "ratio", "megabytes copied per step"),
    FactSpec("system.memcpy.gpu_ms_per_step", "ms", "copy time on the GPU per step"),
    FactSpec("system.memcpy.pageable_async_per_step", "ratio", "cudaMemcpyAsync calls on pageable host memory per step"),
    FactSpec("system.memcpy.pageable_async_ms_per_step", "ms", "CPU time per step in those calls"),
    FactSpec("system.memcpy.sync_per_step", "ratio", "synchronous cudaMemcpy calls per step"),
    FactSpec("system.memcpy.sync_ms_per_step", "ms", "CPU time per step in synchronous cudaMemcpy calls"),
    FactSpec("system.memset.sync_per_step", "ratio", "synchronous cudaMemset calls per step"),
    FactSpec("system.memset.sync_ms_per_step", "ms", "CPU time per step in synchronous cudaMemset calls"),
    FactSpec("system.memcpy.blocking_ms_per_step", "ms", "CPU time per step in copies/memsets that block it"),
    FactSpec("system.memcpy.blocking_share", "fraction", "share of the step spent in copies/memsets that block"),
    FactSpec("system.memcpy.table", "table", "copies and memsets by direction, memory, API and caller", columns={
        "kind": "text: HtoD, DtoH, DtoD, memset ...", "memory": "text: host memory kind (Pageable, Pinned, ...)",
        "api": "text: CUDA API", "caller": "text: NVTX range or phase", "blocking": "bool: the call blocks the CPU",
        "count_per_step": "ratio: per step", "mb_per_step": "ratio: megabytes per step",
        "gpu_ms_per_step": "ms: copy time on the GPU", "api_ms_per_step": "ms: CPU time in the call",
        "gb_per_s": "GB/s: achieved bandwidth",
    }),
)


def _caller(view: SystemView, frame: pd.DataFrame, ts_col: str, tid_col: str = "tid") -> pd.Series:
    labels = view.label_at(frame["pid"].to_numpy(), frame[tid_col].to_numpy(), frame[ts_col].to_numpy())
    return pd.Series(labels, index=frame.index, dtype=object)


@analyzer("system_sync", needs=("runtime",), provides=PROVIDES_SYNC, stage="system")
def system_sync(view: SystemView) -> dict[str, Any]:
    """Blocking CUDA calls (syncs, synchronous copies and memsets) and who makes them."""
    calls = view.in_window(view.table("runtime"))
    api = calls["api"]
    is_sync = api.str.match(SYNC_API)
    is_copy = api.str.match(COPY_API) & ~api.str.contains("Async")
    is_set = api.str.match(SET_API) & ~api.str.contains("Async")
    blocking = calls[is_sync | is_copy | is_set].copy()
    step_ms = view.step_ms()
    out: dict[str, Any] = {"system.sync.calls_per_step": 0.0, "system.sync.ms_per_step": 0.0,
                           "system.sync.share": 0.0, "system.sync.blocking_ms_per_step": 0.0,
                           "system.sync.blocking_share": 0.0, "system.sync.table": []}
    if len(blocking) == 0:
        return out
    blocking["kind"] = ["sync" if s else ("copy" if c else "memset")
                        for s, c in zip(is_sync[blocking.index], is_copy[blocking.index])]
    blocking["caller"] = _caller(view, blocking, "start")
    grouped = blocking.groupby(["api", "kind", "caller"], sort=False).agg(calls=("dur", "size"), ns=("dur", "sum"))
    grouped = grouped.sort_values("ns", ascending=False)
    rows = [{"api": a, "kind": k, "caller": c, "calls_per_step": float(r["calls"]) / view.step_count,
             "ms_per_step": view.per_step_ms(r["ns"]), "share": view.per_step_ms(r["ns"]) / step_ms if step_ms else 0.0}
            for (a, k, c), r in grouped.head(TOP).iterrows()]
    total_ms = view.per_step_ms(blocking["dur"].sum())
    out.update({"system.sync.blocking_ms_per_step": total_ms,
                "system.sync.blocking_share": total_ms / step_ms if step_ms else 0.0,
                "system.sync.table": records(rows)})
    syncs = blocking[blocking["kind"] == "sync"]
    if len(syncs):
        sync_ms = view.per_step_ms(syncs["dur"].sum())
        out.update({
            "system.sync.calls_per_step": len(syncs) / view.step_count,
            "system.sync.ms_per_step": sync_ms,
            "system.sync.share": sync_ms / step_ms if step_ms else 0.0,
            "system.sync.top_api": str(syncs.groupby("api")["dur"].sum().idxmax()),
            "system.sync.top_caller": str(syncs.groupby("caller")["dur"].sum().idxmax()),
        })
    return out


def _copies(view: SystemView) -> pd.DataFrame:
    """Copies and memsets in the window with their API call: kind, memory, api, api_start, api_dur, tid."""
    parts = []
    memcpy = view.in_window(view.table("memcpy"))
    if len(memcpy):
        host = memcpy["src_memory"].where(memcpy["kind"].str.startswith("H"), memcpy["dst_memory"])
        parts.append(memcpy.assign(memory=host.where(memcpy["kind"].str.contains("H"), "Device")))
    memset = view.in_window(view.table("memset"))
    if len(memset):
        parts.append(memset.assign(kind="memset"))
    frame = pd.concat(parts, ignore_index=True)[["start", "end", "dur", "pid", "correlation", "bytes", "kind", "memory"]]
    return view.with_api(frame, unknown="?")


@analyzer("system_memcpy", needs=("gpu", "runtime"), provides=PROVIDES_COPY, stage="system")
def system_memcpy(view: SystemView) -> dict[str, Any]:
    """Copies and memsets: which block the CPU (synchronous, or async on pageable memory), and where from."""
    if not (view.has("memcpy") or view.has("memset")):
        return {}
    frame = _copies(view)
    if len(frame) == 0:
        return {}
    is_async = frame["api"].str.contains("Async")
    pageable_async = is_async & (frame["memory"] == "Pageable") & (frame["kind"] != "memset")
    sync_copy = ~is_async & (frame["kind"] != "memset") & frame["api"].str.match(COPY_API)
    sync_set = ~is_async & (frame["kind"] == "memset") & frame["api"].str.match(SET_API)
    frame["blocking"] = pageable_async | sync_copy | sync_set
    frame["caller"] = _caller(view, frame, "api_start")
    n = view.step_count
    copies = frame[frame["kind"] != "memset"]
    blocking_ms = view.per_step_ms(frame.loc[frame["blocking"], "api_dur"].sum())
    step_ms = view.step_ms()
    grouped = frame.groupby(["kind", "memory", "api", "caller", "blocking"], sort=False).agg(
        count=("dur", "size"), bytes=("bytes", "sum"), gpu=("dur", "sum"), cpu=("api_dur", "sum"))
    grouped = grouped.sort_values(["cpu", "gpu"], ascending=False).head(TOP)
    rows = [{"kind": k, "memory": m, "api": a, "caller": c, "blocking": bool(b),
             "count_per_step": float(r["count"]) / n, "mb_per_step": float(r["bytes"]) / n / 1e6,
             "gpu_ms_per_step": view.per_step_ms(r["gpu"]), "api_ms_per_step": view.per_step_ms(r["cpu"]),
             "gb_per_s": float(r["bytes"]) / float(r["gpu"]) if r["gpu"] else 0.0}
            for (k, m, a, c, b), r in grouped.iterrows()]
    return {
        "system.memcpy.count_per_step": len(copies) / n,
        "system.memcpy.mb_per_step": float(copies["bytes"].sum()) / n / 1e6,
        "system.memcpy.gpu_ms_per_step": view.per_step_ms(copies["dur"].sum()),
        "system.memcpy.pageable_async_per_step": float(pageable_async.sum()) / n,
        "system.memcpy.pageable_async_ms_per_step": view.per_step_ms(frame.loc[pageable_async, "api_dur"].sum()),
        "system.memcpy.sync_per_step": float(sync_copy.sum()) / n,
        "system.memcpy.sync_ms_per_step": view.per_step_ms(frame.loc[sync_copy, "api_dur"].sum()),
        "system.memset.sync_per_step": float(sync_set.sum()) / n,
        "system.memset.sync_ms_per_step": view.per_step_ms(frame.loc[sync_set, "api_dur"].sum()),
        "system.memcpy.blocking_ms_per_step": blocking_ms,
        "system.memcpy.blocking_share": blocking_ms / step_ms if step_ms else 0.0,
        "system.memcpy.table": records(rows),
    }
