"""Kernels per NVTX range, and how the streams overlap.

A kernel belongs to the NVTX range that was open on the CPU thread when it was
*launched* (the CUDA API call with the same correlation id), not to the range
open while it ran: that is the phase of the user's code that asked for it.
Summing kernel time per range gives the projected GPU time of each phase.

Stream concurrency: how much of the GPU's busy time has work on two or more
streams at once, and how much of the copy time overlaps kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.system.view import SystemView

TOP = 10

PROVIDES = (
    FactSpec("system.kernels.count_per_step", "ratio", "kernels per step in the Nsight Systems capture"),
    FactSpec("system.kernels.gpu_ms_per_step", "ms", "kernel time per step (summed over streams)"),
    FactSpec("system.kernels.top3_share", "fraction", "share of kernel time held by the 3 longest-running kernels"),
    FactSpec("system.kernels.top", "table", "kernels by total time", columns={
        "name": "text: kernel", "ms_per_step": "ms: time per step", "share": "fraction: of kernel time",
        "calls_per_step": "ratio: launches per step", "avg_us": "us: mean duration", "label": "text: NVTX range "
        "or phase it is launched from (the most time)",
    }),
    FactSpec("system.kernels.by_range", "table", "projected GPU time of each NVTX range or phase (by launch)",
             columns={"range": "text: innermost user NVTX range, else the phase", "kernels_per_step": "ratio: "
                      "kernels per step", "gpu_ms_per_step": "ms: kernel time per step", "share": "fraction: of "
                      "kernel time", "top_kernel": "text: the kernel with the most time in it"}),
    FactSpec("system.streams.count", "count", "streams that ran GPU work in the window"),
    FactSpec("system.streams.overlap_fraction", "fraction", "share of GPU busy time with two or more streams busy"),
    FactSpec("system.streams.copy_overlap_fraction", "fraction", "share of copy time that overlaps a kernel"),
    FactSpec("system.streams.table", "table", "GPU work per stream", columns={
        "device": "count: device", "stream": "count: stream id", "kernels_per_step": "ratio: kernels per step",
        "copies_per_step": "ratio: copies and memsets per step", "busy_ms_per_step": "ms: busy time per step",
        "share": "fraction: of GPU busy time",
    }),
)


@analyzer("system_kernels", needs=("kernels",), provides=PROVIDES, stage="system")
def system_kernels(view: SystemView) -> dict[str, Any]:
    """Kernel time by NVTX range and by kernel; stream concurrency."""
    work = view.launches
    kernels = work[work["kind"] == "kernels"].copy()
    if len(kernels) == 0:
        return {}
    names = view.in_window(view.table("kernels"))[["correlation", "pid", "name"]].drop_duplicates(["pid", "correlation"])
    kernels = kernels.merge(names, on=["pid", "correlation"], how="left")
    kernels["name"] = kernels["name"].fillna("?")
    kernels["label"] = view.label_at(kernels["pid"].to_numpy(), kernels["tid"].to_numpy(),
                                     kernels["api_start"].to_numpy())
    total = float(kernels["dur"].sum())
    out: dict[str, Any] = {
        "system.kernels.count_per_step": len(kernels) / view.step_count,
        "system.kernels.gpu_ms_per_step": view.per_step_ms(total),
    }
    top = _top(view, kernels, total)
    out["system.kernels.top"] = top
    out["system.kernels.top3_share"] = sum(r["share"] for r in top[:3])
    out["system.kernels.by_range"] = _by_range(view, kernels, total)
    out.update(_streams(view))
    return out


def _top(view: SystemView, kernels: pd.DataFrame, total: float) -> list[dict[str, Any]]:
    grouped = kernels.groupby("name", sort=False).agg(ns=("dur", "sum"), calls=("dur", "size"))
    grouped = grouped.sort_values("ns", ascending=False).head(TOP)
    labels = kernels.groupby(["name", "label"], sort=False)["dur"].sum()
    rows = []
    for name, row in grouped.iterrows():
        label = str(labels.loc[name].idxmax()) if name in labels.index.get_level_values(0) else ""
        rows.append({"name": name, "ms_per_step": view.per_step_ms(row["ns"]),
                     "share": float(row["ns"]) / total if total else 0.0,
                     "calls_per_step": float(row["calls"]) / view.step_count,
                     "avg_us": float(row["ns"]) / float(row["calls"]) / 1e3, "label": label})
    return records(rows)


def _by_range(view: SystemView, kernels: pd.DataFrame, total: float) -> list[dict[str, Any]]:
    grouped = kernels.groupby("label", sort=False).agg(ns=("dur", "sum"), calls=("dur", "size"))
    grouped = grouped.sort_values("ns", ascending=False).head(TOP)
    by_kernel = kernels.groupby(["label", "name"], sort=False)["dur"].sum()
    rows = []
    for label, row in grouped.iterrows():
        rows.append({"range": label, "kernels_per_step": float(row["calls"]) / view.step_count,
                     "gpu_ms_per_step": view.per_step_ms(row["ns"]),
                     "share": float(row["ns"]) / total if total else 0.0,
                     "top_kernel": str(by_kernel.loc[label].idxmax())})
    return records(rows)


def _streams(view: SystemView) -> dict[str, Any]:
    work = view.gpu_work
    busy_s, busy_e = view.gpu_busy
    busy = int((busy_e - busy_s).sum())
    per_stream = []
    starts, ends = [], []
    for (device, stream), group in work.groupby(["device", "stream"], sort=True):
        s, e = intervals.union(group["start"].to_numpy("int64"), group["end"].to_numpy("int64"))
        starts.append(s)
        ends.append(e)
        stream_busy = int((e - s).sum())
        per_stream.append({
            "device": int(device), "stream": int(stream),
            "kernels_per_step": float((group["kind"] == "kernels").sum()) / view.step_count,
            "copies_per_step": float((group["kind"] != "kernels").sum()) / view.step_count,
            "busy_ms_per_step": view.per_step_ms(stream_busy), "share": stream_busy / busy if busy else 0.0,
        })
    multi = _covered_by_two(starts, ends)
    kernels = work[work["kind"] == "kernels"]
    copies = work[work["kind"] != "kernels"]
    copy_overlap = None
    if len(copies):
        ks, ke = intervals.union(kernels["start"].to_numpy("int64"), kernels["end"].to_numpy("int64"))
        cs, ce = intervals.union(copies["start"].to_numpy("int64"), copies["end"].to_numpy("int64"))
        copy_total = int((ce - cs).sum())
        copy_overlap = _intersection(cs, ce, ks, ke) / copy_total if copy_total else None
    return {
        "system.streams.count": len(per_stream),
        "system.streams.overlap_fraction": multi / busy if busy else 0.0,
        "system.streams.copy_overlap_fraction": copy_overlap,
        "system.streams.table": records(sorted(per_stream, key=lambda r: -r["busy_ms_per_step"])),
    }


def _covered_by_two(starts: list[np.ndarray], ends: list[np.ndarray]) -> int:
    """Time during which at least two of the streams (each a set of disjoint intervals) are busy."""
    if len(starts) < 2:
        return 0
    s = np.concatenate(starts)
    e = np.concatenate(ends)
    points = np.concatenate([s, e])
    delta = np.concatenate([np.ones(len(s), "int64"), -np.ones(len(e), "int64")])
    order = np.lexsort((delta, points))  # ends before starts at the same instant
    points, delta = points[order], delta[order]
    level = np.cumsum(delta)
    spans = np.diff(points)
    return int(spans[level[:-1] >= 2].sum())


def _intersection(s: np.ndarray, e: np.ndarray, ks: np.ndarray, ke: np.ndarray) -> int:
    if len(s) == 0 or len(ks) == 0:
        return 0
    return _covered_by_two([s, ks], [e, ke])
