"""Host-device synchronisation points: where the host stops and waits for the GPU.

A sync point is a host call that returns only when the GPU has caught up
(:data:`~advisor.analyze.framework.gpu_links.SYNC_APIS`): ``cudaDeviceSynchronize``,
``cudaStreamSynchronize`` and ``cudaEventSynchronize`` (also behind
``.item()``, ``.cpu()``, ``print(tensor)`` and ``torch.cuda.synchronize()``),
synchronous copies, async copies from or to pageable memory, and
``cudaFree``. Its blocked time is the call's duration. Each point gets its
operator (``aten::_local_scalar_dense`` marks ``.item()``) and the user's
line. The GPU-side ``cuda_sync`` events (Context/Stream/Event Sync, Stream
Wait Event) are counted too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

TOP_N = 10

KIND_TEXT = {
    "device": "device-wide synchronize", "stream": "stream synchronize", "event": "event synchronize",
    "copy": "synchronous copy", "pageable_copy": "copy from/to pageable memory", "free": "cudaFree (waits for the device)",
}

PROVIDES = (
    FactSpec("sync.count_per_step", "count", "host sync points per step"),
    FactSpec("sync.ms", "ms", "host time per step blocked in sync points"),
    FactSpec("sync.share", "fraction", "share of the GPU window the host is blocked in sync points"),
    FactSpec("sync.items_per_step", "count", ".item() / _local_scalar_dense calls per step (each waits for the GPU)"),
    FactSpec("sync.explicit_per_step", "count", "device/stream/event synchronize calls per step"),
    FactSpec("sync.top_kind", "text", "kind of the sync point with the most blocked time"),
    FactSpec("sync.top_api", "text", "runtime call of that sync point"),
    FactSpec("sync.top_op", "text", "operator around that sync point"),
    FactSpec("sync.top_ms", "ms", "blocked time per step at that sync point"),
    FactSpec("sync.site", "text", "the user's line of that sync point, or its operator when the trace has no stacks"),
    FactSpec("sync.file", "text", "file of that line"),
    FactSpec("sync.line", "count", "line number of that line"),
    FactSpec("sync.points", "table", "sync points grouped by kind, call and call site", columns={
        "kind": "text: device, stream, event, copy, pageable_copy or free", "what": "text: the kind in words",
        "api": "text: runtime call", "op": "text: outermost operator around it", "item": "bool: inside .item()",
        "calls_per_step": "count: per step", "ms": "ms: blocked per step", "avg_us": "us: mean blocked per call",
        "site": "text: user file:line (function)", "file": "text: file", "line": "count: line",
    }),
    FactSpec("sync.events", "table", "GPU-side cuda_sync events by kind", columns={
        "kind": "text: Context Sync, Stream Sync, Event Sync, Stream Wait Event", "per_step": "count: per step",
        "ms": "ms: per step", "op": "text: operator that issued most of them",
    }),
)


def _points(syncs: pd.DataFrame, steps: int) -> list[dict[str, Any]]:
    keys = [syncs[c].to_numpy() for c in ("sync", "name", "op", "item", "src_file", "src_line", "src_func")]
    ids, n_groups = group_by.group_ids(*keys)
    total = group_by.sums(ids, n_groups, syncs["dur"].to_numpy())
    count = np.bincount(ids, minlength=n_groups)
    first = group_by.first_rows(ids, n_groups)
    rows = []
    for k in group_by.by_weight(total, "quicksort")[:TOP_N]:
        sync, name, op, item, file, line, func = (key[first[k]] for key in keys)
        n, dur = count[k], total[k]
        rows.append({
            "kind": sync, "what": KIND_TEXT.get(sync, sync), "api": name, "op": op, "item": bool(item),
            "calls_per_step": n / steps, "ms": dur / steps / NS_PER_MS, "avg_us": dur / n / 1e3,
            "site": site(file, int(line), func), "file": file, "line": int(line),
        })
    return rows


def _events(view: TraceView, steps: int) -> list[dict[str, Any]]:
    links = view.gpu
    ev = links.sync_events
    ev = ev[(ev["ts"] >= links.lo) & (ev["ts"] < links.hi)]
    rows = []
    for kind, part in ev.groupby("name", sort=False):
        ops = part["op"][part["op"] != ""]
        rows.append({"kind": kind, "per_step": len(part) / steps, "ms": part["dur"].sum() / steps / NS_PER_MS,
                     "op": ops.mode().iloc[0] if len(ops) else ""})
    return sorted(rows, key=lambda r: -r["per_step"])


@analyzer("syncs", needs=("gpu",), provides=PROVIDES)
def syncs(view: TraceView) -> dict[str, Any]:
    """Sync points per step, the host time blocked in them, and their call sites."""
    links = view.gpu
    steps = links.steps
    all_syncs = links.host_syncs
    s = all_syncs[(all_syncs["ts"] >= links.lo) & (all_syncs["ts"] < links.hi)]
    host = view.host
    ts = host["ts"].to_numpy()
    items = np.flatnonzero(((host["cat"] == "cpu_op") & (host["name"] == "aten::_local_scalar_dense")).to_numpy()
                           & (ts >= links.lo) & (ts < links.hi))
    out: dict[str, Any] = {
        "sync.count_per_step": len(s) / steps,
        "sync.ms": float(s["dur"].sum()) / steps / NS_PER_MS,
        "sync.share": float(s["dur"].sum()) / links.window_ns if links.window_ns else 0.0,
        "sync.items_per_step": len(items) / steps,
        "sync.explicit_per_step": int(s["sync"].isin(("device", "stream", "event")).sum()) / steps,
        "sync.events": records(_events(view, steps)),
    }
    points = _points(s, steps) if len(s) else []
    out["sync.points"] = records(points)
    if points:
        top = points[0]
        out.update({"sync.top_kind": top["kind"], "sync.top_api": top["api"], "sync.top_op": top["op"],
                    "sync.top_ms": top["ms"]})
        if top["site"]:
            out.update({"sync.site": top["site"], "sync.file": top["file"], "sync.line": top["line"]})
        else:
            out["sync.site"] = f"{top['api']} in {top['op']}" if top["op"] else top["api"]
    return out
