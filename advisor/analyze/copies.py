"""Memory copies between host and device: direction, size, bandwidth, and pageable versus pinned memory.

CUDA names each copy after its direction and the memory on both sides:
``Memcpy HtoD (Pageable -> Device)``, ``Memcpy DtoH (Device -> Pinned)``,
``Memcpy DtoD (Device -> Device)``; ROCm writes the direction in ``kind``.
A copy from or to pageable memory is staged through a driver buffer and
blocks the host; ``pin_memory=True`` and ``non_blocking=True`` avoid both.
Bandwidth is bytes over the copy's duration on the GPU.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.common import NS_PER_MS, site
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView

_NAME = re.compile(r"Memcpy (?P<dir>[HDPA]to[HDPA])(?: \((?P<src>\w+) -> (?P<dst>\w+)\))?")

PROVIDES = (
    FactSpec("copies.count_per_step", "count", "memory copies per step"),
    FactSpec("copies.ms", "ms", "time per step some copy runs on the GPU (union)"),
    FactSpec("copies.share", "fraction", "share of the GPU window with a copy running"),
    FactSpec("copies.bytes_per_step", "bytes", "bytes copied per step"),
    FactSpec("copies.h2d_gbs", "GB/s", "host-to-device bandwidth (bytes over copy time)"),
    FactSpec("copies.d2h_gbs", "GB/s", "device-to-host bandwidth (bytes over copy time)"),
    FactSpec("copies.pageable_per_step", "count", "copies per step from or to pageable host memory"),
    FactSpec("copies.pageable_bytes_per_step", "bytes", "bytes per step copied from or to pageable memory"),
    FactSpec("copies.pageable_ms", "ms", "GPU time per step of pageable copies"),
    FactSpec("copies.pageable_host_ms", "ms", "host time per step blocked in pageable copy calls"),
    FactSpec("copies.pageable_host_share", "fraction", "share of the GPU window the host is blocked in pageable copies"),
    FactSpec("copies.pageable_fraction", "fraction", "share of host<->device bytes that use pageable memory"),
    FactSpec("copies.pageable_site", "text", "the user's line (or operator) with the most pageable copy time"),
    FactSpec("copies.pageable_file", "text", "file of that line"),
    FactSpec("copies.pageable_line", "count", "number of that line"),
    FactSpec("copies.table", "table", "copies by direction and host memory", columns={
        "direction": "text: HtoD, DtoH, DtoD, ...", "memory": "text: pageable, pinned, device or unknown",
        "per_step": "count: copies per step", "bytes_per_step": "bytes: per step", "ms": "ms: GPU time per step",
        "avg_bytes": "bytes: mean size", "gbs": "GB/s: bandwidth", "op": "text: operator with most of them",
        "site": "text: the user's line with most of them", "file": "text: file", "line": "count: line",
    }),
)


def _classify(copies: pd.DataFrame) -> pd.DataFrame:
    parsed = copies["name"].str.extract(_NAME)
    direction = parsed["dir"].fillna(copies["copy_kind"].where(copies["copy_kind"] != "", "unknown"))
    sides = (parsed["src"].fillna("") + " " + parsed["dst"].fillna("")).str.lower()
    memory = np.select([sides.str.contains("pageable"), sides.str.contains("pinned"),
                        direction == "DtoD"], ["pageable", "pinned", "device"], "unknown")
    return copies.assign(direction=direction.to_numpy(), memory=memory)


def _table(copies: pd.DataFrame, steps: int) -> list[dict[str, Any]]:
    rows = []
    for (direction, memory), part in copies.groupby(["direction", "memory"], sort=False):
        nbytes = int(part["bytes"].clip(lower=0).sum())
        dur = int(part["dur"].sum())
        top = part.groupby(["op", "src_file", "src_line", "src_func"], sort=False)["dur"].sum().idxmax()
        rows.append({
            "direction": direction, "memory": memory, "per_step": len(part) / steps, "bytes_per_step": nbytes / steps,
            "ms": dur / steps / NS_PER_MS, "avg_bytes": nbytes / len(part), "gbs": nbytes / dur if dur else 0.0,
            "op": top[0], "site": site(top[1], int(top[2]), top[3]), "file": top[1], "line": int(top[2]),
        })
    return sorted(rows, key=lambda r: -r["ms"])


def _bandwidth(copies: pd.DataFrame, direction: str) -> float | None:
    part = copies[(copies["direction"] == direction) & (copies["bytes"] > 0)]
    dur = int(part["dur"].sum())
    return float(part["bytes"].sum()) / dur if dur else None  # bytes/ns == GB/s


@analyzer("copies", needs=("gpu_memcpy",), provides=PROVIDES)
def copies(view: TraceView) -> dict[str, Any]:
    """Copies per direction and host memory kind, their size, time and bandwidth."""
    links = view.gpu
    ops = links.ops
    cp = ops[(ops["kind"] == "memcpy") & (ops["ts"] >= links.lo) & (ops["ts"] < links.hi)]
    if len(cp) == 0:
        return {}
    cp = _classify(cp)
    steps = links.steps
    busy = intervals.covered(cp["ts"].to_numpy(), cp["end"].to_numpy())
    host_side = cp[cp["direction"].isin(("HtoD", "DtoH"))]
    pageable = cp[cp["memory"] == "pageable"]
    syncs = links.host_syncs
    blocked = syncs[(syncs["sync"] == "pageable_copy") & (syncs["ts"] >= links.lo) & (syncs["ts"] < links.hi)]
    out: dict[str, Any] = {
        "copies.count_per_step": len(cp) / steps, "copies.ms": busy / steps / NS_PER_MS,
        "copies.share": busy / links.window_ns if links.window_ns else 0.0,
        "copies.bytes_per_step": float(cp["bytes"].clip(lower=0).sum()) / steps,
        "copies.h2d_gbs": _bandwidth(cp, "HtoD"), "copies.d2h_gbs": _bandwidth(cp, "DtoH"),
        "copies.pageable_per_step": len(pageable) / steps,
        "copies.pageable_bytes_per_step": float(pageable["bytes"].clip(lower=0).sum()) / steps,
        "copies.pageable_ms": float(pageable["dur"].sum()) / steps / NS_PER_MS,
        "copies.pageable_host_ms": float(blocked["dur"].sum()) / steps / NS_PER_MS,
        "copies.pageable_host_share": float(blocked["dur"].sum()) / links.window_ns if links.window_ns else 0.0,
        "copies.table": records(_table(cp, steps)),
    }
    total = float(host_side["bytes"].clip(lower=0).sum())
    out["copies.pageable_fraction"] = float(pageable["bytes"].clip(lower=0).sum()) / total if total else 0.0
    if len(pageable):
        top = pageable.groupby(["op", "src_file", "src_line", "src_func"], sort=False)["dur"].sum().idxmax()
        where = site(top[1], int(top[2]), top[3])
        out["copies.pageable_site"] = where or top[0]
        if where:
            out["copies.pageable_file"], out["copies.pageable_line"] = top[1], int(top[2])
    return out
