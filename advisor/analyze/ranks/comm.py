"""Communication: collective kernels (NCCL, RCCL), their time, and how much of it overlaps compute.

Communication kernels are found by name (``ncclKernel_*``, ``ncclDevKernel_*``;
RCCL keeps the NCCL names). On the analysed device:

- ``comm.ms``: time some communication kernel runs (union), per step;
- ``comm.overlap_fraction``: the share of that time during which a compute
  kernel also runs (Holistic Trace Analysis' comm/comp overlap);
- ``comm.exposed_ms``: the rest, communication nothing hides.

gloo collectives run on the CPU; their time shows as host operators
(``gloo:*``, ``c10d::*``) and is reported in ``comm.host_ms``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by, intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework import event_names as by_name
from advisor.analyze.framework.gpu_time import gpu_time  # noqa: F401 - registered before comm, as the findings have always been
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

__all__ = ["comm_overlap"]

_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_(?P<name>[A-Za-z]+)")
_HOST_COMM = re.compile(r"^(?:gloo|nccl|c10d|record_param_comms)[:_]|ProcessGroup", re.IGNORECASE)

PROVIDES = (
    FactSpec("comm.backend", "text", "the process-group backend (nccl, gloo, ...), from distributedInfo or kernel names"),
    FactSpec("comm.world_size", "count", "ranks in the job"),
    FactSpec("comm.ms", "ms", "time per step a communication kernel runs on the device (union)"),
    FactSpec("comm.share", "fraction", "share of the GPU window with communication running"),
    FactSpec("comm.busy_share", "fraction", "share of the device's busy time with communication running"),
    FactSpec("comm.kernels_per_step", "count", "communication kernels per step"),
    FactSpec("comm.overlap_fraction", "fraction", "share of communication time that overlaps compute kernels"),
    FactSpec("comm.exposed_ms", "ms", "communication time per step with no compute kernel running"),
    FactSpec("comm.exposed_share", "fraction", "share of the GPU window with only communication running"),
    FactSpec("comm.host_ms", "ms", "host time per step in collective operators (all backends, gloo included)"),
    FactSpec("comm.collectives", "table", "communication by collective", columns={
        "collective": "text: AllReduce, AllGather, ...", "per_step": "count: kernels per step",
        "ms": "ms: kernel time per step", "avg_us": "us: mean kernel duration",
        "op": "text: operator that launched most of them", "site": "text: the user's line", "file": "text: file",
        "line": "count: line",
    }),
)


def comm_overlap(ops: pd.DataFrame, lo: int, hi: int) -> tuple[int, int]:
    """(communication ns, ns of it overlapped by compute) for one device's ops inside [lo, hi)."""
    ts, end = ops["ts"].to_numpy("int64"), ops["end"].to_numpy("int64")
    comm, compute = (ops["kind"] == "comm").to_numpy(), (ops["kind"] == "compute").to_numpy()
    cs, ce = intervals.union(*intervals.clip(ts[comm], end[comm], lo, hi))
    ps, pe = intervals.union(*intervals.clip(ts[compute], end[compute], lo, hi))
    both = intervals.intersect(cs, ce, ps, pe)
    return int((ce - cs).sum()), int((both[1] - both[0]).sum())


def _collective(name: str) -> str:
    m = _COLLECTIVE.search(name)
    return m["name"] if m else "other"


def _collectives(comm: pd.DataFrame, steps: int) -> list[dict[str, Any]]:
    colls = by_name.mapped(comm["name"], _collective)
    dur = comm["dur"].to_numpy()
    keys = [comm[c].to_numpy(dtype=object if c != "src_line" else "int64") for c in ("op", "src_file", "src_line",
                                                                                      "src_func")]
    coll_ids, n_colls = group_by.group_ids(colls)
    rows = []
    for k in range(n_colls):
        part = np.flatnonzero(coll_ids == k)
        ids, n = group_by.group_ids(*(key[part] for key in keys))
        best = group_by.first_rows(ids, n)[int(np.argmax(group_by.sums(ids, n, dur[part])))]
        op, file, line, func = (key[part][best] for key in keys)
        total = int(dur[part].sum())
        rows.append({"collective": colls[part[0]], "per_step": len(part) / steps, "ms": total / steps / NS_PER_MS,
                     "avg_us": total / len(part) / 1e3, "op": op, "site": site(file, int(line), func),
                     "file": file, "line": int(line)})
    return sorted(rows, key=lambda r: -r["ms"])


def _host_comm_ms(view: TraceView, lo: int, hi: int, steps: int) -> float:
    host = view.host
    ts, end, tid = host["ts"].to_numpy(), host["end"].to_numpy(), host["tid"].to_numpy()
    sel = np.flatnonzero(host["cat"].isin(("cpu_op", "user_annotation")).to_numpy()
                         & view.host_names(_HOST_COMM.search, bool) & (ts >= lo) & (ts < hi))
    if len(sel) == 0:
        return 0.0
    covered = 0
    for t in np.unique(tid[sel]):
        rows = sel[tid[sel] == t]
        covered += intervals.covered(ts[rows], end[rows])
    return covered / steps / NS_PER_MS


@analyzer("comm", provides=PROVIDES)
def comm(view: TraceView) -> dict[str, Any]:
    """Communication time on the device, its overlap with compute, and collectives on the host."""
    meta = view.meta
    out: dict[str, Any] = {"comm.backend": meta.get("backend"),
                           "comm.world_size": int(meta["world_size"]) if "world_size" in meta else None}
    if not view.trace.has_gpu:
        lo, hi = view.window
        host = _host_comm_ms(view, lo, hi, max(view.step_count, 1))
        out["comm.host_ms"] = host if host or out["comm.backend"] else None
        return out
    links = view.gpu
    out["comm.host_ms"] = _host_comm_ms(view, links.lo, links.hi, links.steps)
    if len(links.in_window) == 0:
        return out
    ops = links.device_ops
    comm_ops = ops[ops["kind"] == "comm"]
    if len(comm_ops) == 0:
        return out
    steps, window = links.steps, links.window_ns
    total, overlapped = comm_overlap(ops, links.lo, links.hi)
    busy = intervals.covered(*intervals.clip(ops["ts"].to_numpy(), ops["end"].to_numpy(), links.lo, links.hi))
    out.update({
        "comm.backend": out["comm.backend"] or ("rccl" if np.any(comm_ops["name"].str.contains("rccl", case=False)) else "nccl"),
        "comm.ms": total / steps / NS_PER_MS, "comm.share": total / window, "comm.busy_share": total / busy if busy else 0.0,
        "comm.kernels_per_step": len(comm_ops) / steps,
        "comm.overlap_fraction": overlapped / total if total else 0.0,
        "comm.exposed_ms": (total - overlapped) / steps / NS_PER_MS, "comm.exposed_share": (total - overlapped) / window,
        "comm.collectives": records(_collectives(comm_ops, steps)),
    })
    return out
