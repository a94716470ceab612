"""The size of each collective: how many of a step's NCCL/RCCL kernels move so little that latency bounds them.

c10d records each collective's element count and dtype on its
communication kernels (``In msg nelems``, ``dtype``, ``Collective name``);
bytes are elements times the dtype's size. A collective under
:data:`SMALL_BYTES` (64 KiB) is latency-bound: its fixed cost (launch,
synchronisation between ranks, protocol set-up) outweighs moving the data,
so a hundred of them cost about a hundred times one, whatever their sizes.
Kernels whose trace carries no size are left out of the figures
(``comm.sized_per_step`` says how many had one). Times are kernel time per
step (sum of durations) on the analysed device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

__all__ = ["SMALL_BYTES", "dtype_bytes"]

#: a collective smaller than this is latency-bound (NCCL switches to its low-latency protocol below it)
SMALL_BYTES = 64 * 1024
_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
                "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "byte": 1, "uint8": 1,
                "char": 1, "int8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16}

PROVIDES = (
    FactSpec("comm.sized_per_step", "count", "communication kernels per step whose collective size the trace records"),
    FactSpec("comm.small_per_step", "count", f"collectives per step under {SMALL_BYTES // 1024} KiB"),
    FactSpec("comm.small_ms", "ms", "kernel time per step of those small collectives"),
    FactSpec("comm.small_share", "fraction", "that time as a share of the GPU window"),
    FactSpec("comm.small_bytes_per_step", "bytes", "bytes per step the small collectives move"),
    FactSpec("comm.small_collective", "text", "the kind of small collective with the most time (allreduce, ...)"),
    FactSpec("comm.small_site", "text", "the user's line (or operator) that issues most of their time"),
    FactSpec("comm.sizes", "table", "collectives by kind and size class", columns={
        "collective": "text: allreduce, broadcast, ...", "size": "text: small (latency-bound) or large",
        "per_step": "count: kernels per step", "ms": "ms: kernel time per step", "avg_bytes": "bytes: mean size",
        "op": "text: operator that launched most of them", "site": "text: the user's line", "file": "text: file",
        "line": "count: line",
    }),
)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a c10d dtype name (Float, BFloat16, Long, ...); 0 when unknown."""
    return _DTYPE_BYTES.get(dtype.lower().replace("c10::", "").replace("torch.", ""), 0)


def _table(comm: Any, nbytes: np.ndarray, small: np.ndarray, steps: int) -> list[dict[str, Any]]:
    keys = [comm["collective"].to_numpy(dtype=object), np.where(small, "small", "large").astype(object)]
    where = [comm[c].to_numpy(dtype=object if c != "src_line" else "int64") for c in ("op", "src_file", "src_line",
                                                                                       "src_func")]
    ids, n = group_by.group_ids(*keys)
    dur = comm["dur"].to_numpy()
    ns = group_by.sums(ids, n, dur)
    first = group_by.first_rows(ids, n)
    count = np.bincount(ids, minlength=n)
    rows = []
    for k in group_by.by_weight(ns, "quicksort"):
        part = np.flatnonzero(ids == k)
        sub_ids, m = group_by.group_ids(*(w[part] for w in where))
        best = part[group_by.first_rows(sub_ids, m)[int(np.argmax(group_by.sums(sub_ids, m, dur[part])))]]
        op, file, line, func = (w[best] for w in where)
        rows.append({"collective": keys[0][first[k]], "size": keys[1][first[k]], "per_step": count[k] / steps,
                     "ms": ns[k] / steps / NS_PER_MS, "avg_bytes": float(nbytes[part].mean()), "op": op,
                     "site": site(file, int(line), func), "file": file, "line": int(line)})
    return rows


@analyzer("comm_sizes", needs=("kernel",), provides=PROVIDES)
def comm_sizes(view: TraceView) -> dict[str, Any]:
    """Collectives by size: the small, latency-bound ones per step and their kernel time."""
    links = view.gpu
    if len(links.in_window) == 0 or links.window_ns <= 0 or "in_nelems" not in links.ops:
        return {}
    ops = links.device_ops
    comm = ops[((ops["kind"] == "comm") & (ops["in_nelems"] >= 0)).to_numpy()]
    if len(comm) == 0:
        return {}
    per = np.array([dtype_bytes(str(d)) for d in comm["dtype"].to_numpy(dtype=object)])
    comm = comm[per > 0]
    if len(comm) == 0:
        return {}
    nbytes = comm["in_nelems"].to_numpy() * per[per > 0]
    small = nbytes < SMALL_BYTES
    steps = links.steps
    small_ns = int(comm["dur"].to_numpy()[small].sum())
    rows = _table(comm, nbytes, small, steps)
    out: dict[str, Any] = {
        "comm.sized_per_step": len(comm) / steps, "comm.small_per_step": int(small.sum()) / steps,
        "comm.small_ms": small_ns / steps / NS_PER_MS, "comm.small_share": small_ns / links.window_ns,
        "comm.small_bytes_per_step": float(nbytes[small].sum()) / steps, "comm.sizes": records(rows),
    }
    tiny = [r for r in rows if r["size"] == "small"]
    if tiny:
        out["comm.small_collective"] = tiny[0]["collective"]
        out["comm.small_site"] = tiny[0]["site"] or tiny[0]["op"] or tiny[0]["collective"]
    return out
