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

from advisor.analyze import group_by, intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework import event_names
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

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


def copy_direction(name: str, copy_kind: str = "") -> str:
    """HtoD, DtoH, DtoD, ... from a copy's name (CUDA) or its ``kind`` (ROCm); "" when neither says."""
    direction = _parse(name)[0]
    return direction or copy_kind or ""


def _parse(name: str) -> tuple[str | None, str]:
    """(direction, "src dst" in lower case) from a copy's name; None when the name does not say."""
    m = _NAME.search(name)
    if m is None:
        return None, " "
    return m["dir"], f"{m['src'] or ''} {m['dst'] or ''}".lower()


def _classify(copies: pd.DataFrame) -> dict[str, np.ndarray]:
    """The copies' columns that the figures use, as arrays, with ``direction`` and host ``memory``."""
    parsed = event_names.mapped(copies["name"], _parse)
    named = np.array([p[0] for p in parsed], dtype=object)
    sides = np.array([p[1] for p in parsed], dtype=object)
    kind = copies["copy_kind"].to_numpy(dtype=object)
    direction = np.where(named != None, named, np.where(kind != "", kind, "unknown"))  # noqa: E711
    pageable = event_names.mapped(sides, lambda t: "pageable" in t, bool)
    pinned = event_names.mapped(sides, lambda t: "pinned" in t, bool)
    memory = np.select([pageable, pinned, direction == "DtoD"], ["pageable", "pinned", "device"], "unknown")
    out = {c: copies[c].to_numpy() for c in ("ts", "end", "dur", "bytes", "src_line")}
    out.update({c: copies[c].to_numpy(dtype=object) for c in ("op", "src_file", "src_func")})
    out["direction"], out["memory"] = direction.astype(object), memory.astype(object)
    return out


def _top_site(cp: dict[str, np.ndarray], rows: np.ndarray) -> tuple[Any, ...]:
    """(op, file, line, function) with the most copy time among ``rows`` (the first seen on a tie)."""
    keys = [cp[c][rows] for c in ("op", "src_file", "src_line", "src_func")]
    ids, n = group_by.group_ids(*keys)
    best = int(np.argmax(group_by.sums(ids, n, cp["dur"][rows])))
    r = group_by.first_rows(ids, n)[best]
    return tuple(k[r] for k in keys)


def _table(cp: dict[str, np.ndarray], steps: int) -> list[dict[str, Any]]:
    rows = []
    ids, n = group_by.group_ids(cp["direction"], cp["memory"])
    for g in range(n):
        part = np.flatnonzero(ids == g)
        nbytes = int(np.clip(cp["bytes"][part], 0, None).sum())
        dur = int(cp["dur"][part].sum())
        top = _top_site(cp, part)
        rows.append({
            "direction": cp["direction"][part[0]], "memory": cp["memory"][part[0]], "per_step": len(part) / steps,
            "bytes_per_step": nbytes / steps, "ms": dur / steps / NS_PER_MS, "avg_bytes": nbytes / len(part),
            "gbs": nbytes / dur if dur else 0.0,
            "op": top[0], "site": site(top[1], int(top[2]), top[3]), "file": top[1], "line": int(top[2]),
        })
    return sorted(rows, key=lambda r: -r["ms"])


def _bandwidth(cp: dict[str, np.ndarray], direction: str) -> float | None:
    part = (cp["direction"] == direction) & (cp["bytes"] > 0)
    dur = int(cp["dur"][part].sum())
    return float(cp["bytes"][part].sum()) / dur if dur else None  # bytes/ns == GB/s


def _bytes(cp: dict[str, np.ndarray], mask: np.ndarray) -> float:
    return float(np.clip(cp["bytes"][mask], 0, None).sum())


@analyzer("copies", needs=("gpu_memcpy",), provides=PROVIDES)
def copies(view: TraceView) -> dict[str, Any]:
    """Copies per direction and host memory kind, their size, time and bandwidth."""
    links = view.gpu
    ops = links.ops
    ts = ops["ts"].to_numpy()
    selected = (ops["kind"] == "memcpy").to_numpy() & (ts >= links.lo) & (ts < links.hi)
    if not selected.any():
        return {}
    cp = _classify(ops[selected])
    steps = links.steps
    busy = intervals.covered(cp["ts"], cp["end"])
    host_side = np.isin(cp["direction"], ("HtoD", "DtoH"))
    pageable = cp["memory"] == "pageable"
    syncs = links.host_syncs
    sync_ts = syncs["ts"].to_numpy()
    blocked = int(syncs["dur"].to_numpy()[(syncs["sync"] == "pageable_copy").to_numpy() & (sync_ts >= links.lo)
                                          & (sync_ts < links.hi)].sum())
    everything = np.ones(len(pageable), bool)
    out: dict[str, Any] = {
        "copies.count_per_step": len(pageable) / steps, "copies.ms": busy / steps / NS_PER_MS,
        "copies.share": busy / links.window_ns if links.window_ns else 0.0,
        "copies.bytes_per_step": _bytes(cp, everything) / steps,
        "copies.h2d_gbs": _bandwidth(cp, "HtoD"), "copies.d2h_gbs": _bandwidth(cp, "DtoH"),
        "copies.pageable_per_step": int(pageable.sum()) / steps,
        "copies.pageable_bytes_per_step": _bytes(cp, pageable) / steps,
        "copies.pageable_ms": float(cp["dur"][pageable].sum()) / steps / NS_PER_MS,
        "copies.pageable_host_ms": float(blocked) / steps / NS_PER_MS,
        "copies.pageable_host_share": float(blocked) / links.window_ns if links.window_ns else 0.0,
        "copies.table": records(_table(cp, steps)),
    }
    total = _bytes(cp, host_side)
    out["copies.pageable_fraction"] = _bytes(cp, pageable) / total if total else 0.0
    if pageable.any():
        top = _top_site(cp, np.flatnonzero(pageable))
        where = site(top[1], int(top[2]), top[3])
        out["copies.pageable_site"] = where or top[0]
        if where:
            out["copies.pageable_file"], out["copies.pageable_line"] = top[1], int(top[2])
    return out
