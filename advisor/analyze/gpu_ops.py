"""GPU work linked back to the host: each kernel, copy, memset and sync to the user's line.

:func:`build_gpu_links` derives, once per trace (``TraceView.gpu``), the
tables the GPU analyzers share:

``ops``
    One row per GPU op (``kernel``, ``gpu_memcpy``, ``gpu_memset``), in time
    order. Columns: ``cat``, ``name``, ``kind`` (compute, comm, memcpy,
    memset), ``device``, ``stream``, ``ts``, ``end``, ``dur`` (int64 ns),
    ``correlation``, ``bytes``, ``copy_kind`` (ROCm), ``input_types`` of its operator, and the link
    to the host: ``launch`` (row of ``view.host`` of the runtime call that
    launched it, -1 when the trace has none), ``launch_name``, ``launch_ts``,
    ``launch_end`` (-1 when unknown), ``op`` (outermost CPU operator around
    the launch: what the user's code called), ``op_inner`` (innermost: the
    op that launched it), ``src_file``, ``src_line``, ``src_func``,
    ``module``, ``phase`` (from the host row), and ``step`` (index into
    ``view.steps`` of the step the op started in, -1 outside).
``host_syncs``
    One row per host call that blocks the host until the GPU catches up (see
    :data:`SYNC_APIS`), with ``sync`` (device, stream, event, copy,
    pageable_copy, free), ``item`` (inside ``.item()``/``_local_scalar_dense``),
    ``ts``, ``end``, ``dur``, ``tid``, ``op``, ``op_inner``, source columns and ``step``.
``sync_events``
    The GPU-side ``cuda_sync`` events (Context Sync, Stream Sync, Event Sync,
    Stream Wait Event) with the same host columns, through their correlation.

The link is: GPU op --correlation--> runtime call --nesting--> operator
--nesting--> Python frame or advisor source label --> file:line and module.
Where a trace has no runtime event for an op, the ``External id`` joins it
straight to its operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from advisor.analyze import intervals, names as by_name

if TYPE_CHECKING:
    from advisor.analyze.view import TraceView

__all__ = ["GpuLinks", "KINDS", "SYNC_APIS", "build_gpu_links", "gpu_window", "op_kind"]

KINDS = ("compute", "comm", "memcpy", "memset")
GPU_OP_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_COMM = re.compile(r"(^|\s)(nccl|rccl)\w*Kernel|^ncclDevKernel|^void ncclKernel", re.IGNORECASE)

#: host API -> kind of synchronisation; the host waits in the call until the GPU is done
SYNC_APIS: dict[str, str] = {
    "cudaDeviceSynchronize": "device", "hipDeviceSynchronize": "device", "cuCtxSynchronize": "device",
    "cudaStreamSynchronize": "stream", "hipStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event", "hipEventSynchronize": "event", "cuEventSynchronize": "event",
    "cudaMemcpy": "copy", "hipMemcpy": "copy", "cudaMemcpy2D": "copy", "cudaMemcpyToSymbol": "copy",
    "cudaMemcpyFromSymbol": "copy", "hipMemcpyWithStream": "copy", "cuMemcpyDtoH_v2": "copy",
    "cuMemcpyHtoD_v2": "copy",
    # cudaFree waits for all work on the device before it returns the memory
    "cudaFree": "free", "cudaFreeHost": "free", "hipFree": "free", "hipHostFree": "free",
}
#: async copy APIs that still block the host when one side is pageable memory
ASYNC_COPY_APIS = frozenset({"cudaMemcpyAsync", "hipMemcpyAsync", "cudaMemcpy2DAsync", "cuMemcpyAsync"})
ITEM_OPS = frozenset({"aten::_local_scalar_dense", "aten::item"})


def op_kind(cat: str, name: str) -> str:
    """compute, comm, memcpy or memset, from an op's category and name."""
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    return "comm" if _COMM.search(name) else "compute"


@dataclass
class GpuLinks:
    ops: pd.DataFrame
    host_syncs: pd.DataFrame
    sync_events: pd.DataFrame
    #: the analysed window [lo, hi) in ns, how it was chosen, and how many steps it holds
    lo: int
    hi: int
    window: str
    steps: int

    @property
    def window_ns(self) -> int:
        return max(self.hi - self.lo, 0)


def _host_context(view: TraceView) -> pd.DataFrame:
    """For every host row: its outermost and innermost enclosing CPU operator names."""
    host = view.host
    parent, depth = host["parent"].to_numpy(), host["depth"].to_numpy()
    is_op = (host["cat"] == "cpu_op").to_numpy()
    inner = intervals.enclosing(parent, depth, is_op)
    outer = intervals.enclosing(parent, depth, is_op & host["op_top"].to_numpy())
    names = host["name"].to_numpy(dtype=object)
    rows = np.arange(len(host))
    inner = np.where(is_op, rows, inner)  # an op is its own innermost op
    outer = np.where(is_op & host["op_top"].to_numpy(), rows, outer)
    return pd.DataFrame({
        "op": np.where(outer >= 0, names[np.maximum(outer, 0)], ""),
        "op_inner": np.where(inner >= 0, names[np.maximum(inner, 0)], ""),
        "op_row": inner,
    })


_HOST_COLS = ("op", "op_inner", "src_file", "src_line", "src_func", "module", "phase")


def _attach_host(frame: pd.DataFrame, view: TraceView, context: pd.DataFrame) -> pd.DataFrame:
    """Join GPU-side rows to their runtime call (by correlation), else to their op (by External id)."""
    host = view.host
    runtime = host[host["cat"].isin(("cuda_runtime", "cuda_driver")) & (host["correlation"] >= 0)]
    by_corr = pd.Series(runtime.index.to_numpy(), index=runtime["correlation"].to_numpy())
    by_corr = by_corr[~by_corr.index.duplicated()]
    launch = by_corr.reindex(frame["correlation"].to_numpy()).fillna(-1).astype("int64").to_numpy().copy()
    launch[frame["correlation"].to_numpy() < 0] = -1
    ops = host[(host["cat"] == "cpu_op") & (host["external_id"] >= 0)]
    by_ext = pd.Series(ops.index.to_numpy(), index=ops["external_id"].to_numpy())
    by_ext = by_ext[~by_ext.index.duplicated()]
    via_op = by_ext.reindex(frame["external_id"].to_numpy()).fillna(-1).astype("int64").to_numpy()
    anchor = np.where(launch >= 0, launch, via_op)
    ok = anchor >= 0
    take = np.maximum(anchor, 0)
    out = frame.copy()
    out["launch"] = launch
    out["launch_name"] = np.where(launch >= 0, host["name"].to_numpy(dtype=object)[np.maximum(launch, 0)], "")
    out["launch_ts"] = np.where(launch >= 0, host["ts"].to_numpy()[np.maximum(launch, 0)], -1)
    out["launch_end"] = np.where(launch >= 0, host["end"].to_numpy()[np.maximum(launch, 0)], -1)
    out["launch_tid"] = np.where(launch >= 0, host["tid"].to_numpy()[np.maximum(launch, 0)], -1)
    for col in _HOST_COLS:
        source = context[col] if col in context else host[col]
        values = source.to_numpy(dtype=object if col != "src_line" else "int64")
        empty = -1 if col == "src_line" else ""
        out[col] = np.where(ok, values[take], empty)
    out["src_line"] = out["src_line"].astype("int64")
    op_row = np.where(ok, context["op_row"].to_numpy()[take], -1)
    types = host["input_types"].to_numpy(dtype=object)
    out["input_types"] = np.where(op_row >= 0, types[np.maximum(op_row, 0)], "")
    out["step"] = view.step_of(out["ts"].to_numpy())
    return out


def _gpu_ops(view: TraceView, context: pd.DataFrame) -> pd.DataFrame:
    e = view.events
    cols = ["cat", "name", "device", "stream", "ts", "end", "dur", "correlation", "external_id", "bytes", "copy_kind",
            "pid", "tid"]
    ops = e.loc[e["cat"].isin(GPU_OP_CATS), cols].copy()
    ops["cat"] = ops["cat"].astype(str)
    ops["name"] = ops["name"].astype(str)
    # Old traces carry the device and stream only as pid and tid.
    ops["device"] = np.where(ops["device"] >= 0, ops["device"], ops["pid"])
    ops["stream"] = np.where(ops["stream"] >= 0, ops["stream"], ops["tid"])
    cat = ops["cat"].to_numpy(dtype=object)
    kind = np.where(cat == "gpu_memcpy", "memcpy", np.where(cat == "gpu_memset", "memset", np.where(
        by_name.where(ops["name"], _COMM.search), "comm", "compute")))
    ops["kind"] = pd.Series(kind.astype(object), index=ops.index, dtype="str")
    ops = ops.drop(columns=["pid", "tid"]).reset_index(drop=True)
    return _attach_host(ops, view, context)


def _host_syncs(view: TraceView, context: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    host = view.host
    names = host["name"]
    kind = pd.Series(view.host_names(SYNC_APIS.get), index=host.index, dtype="str")
    pageable = ops[(ops["kind"] == "memcpy").to_numpy() & by_name.where(ops["name"], lambda n: "Pageable" in n)
                   & (ops["launch"] >= 0).to_numpy()]
    async_copy = names.isin(ASYNC_COPY_APIS) & host.index.isin(pageable["launch"])
    kind = kind.where(~async_copy, "pageable_copy")
    rows = host[kind.notna()]
    out = pd.DataFrame({
        "name": rows["name"], "sync": kind[kind.notna()], "ts": rows["ts"], "end": rows["end"], "dur": rows["dur"],
        "tid": rows["tid"], "correlation": rows["correlation"],
        **{c: (context[c] if c in context else host[c]).loc[rows.index] for c in _HOST_COLS},
    })
    out["item"] = out["op"].isin(ITEM_OPS) | out["op_inner"].isin(ITEM_OPS)
    out["step"] = view.step_of(out["ts"].to_numpy())
    return out.reset_index(names="row")


def _sync_events(view: TraceView, context: pd.DataFrame) -> pd.DataFrame:
    e = view.events
    cols = ["name", "device", "stream", "ts", "end", "dur", "correlation", "external_id", "sync_kind", "wait_stream"]
    ev = e.loc[e["cat"] == "cuda_sync", cols].copy()
    ev["name"] = ev["name"].astype(str)
    return _attach_host(ev.reset_index(drop=True), view, context)


def gpu_window(view: TraceView, ops: pd.DataFrame) -> tuple[int, int, str, int]:
    """The window GPU figures are measured over: the analysed steps, or, without steps, the GPU's active span.

    Without ProfilerStep ranges the host's span can start long before any GPU
    work (CUDA context creation, model set-up), so the span of GPU ops is used,
    as Holistic Trace Analysis does.
    """
    if view.profiler_steps_present:
        lo, hi = view.window
        steps = view.steps["step"]
        first, last = int(steps.iloc[0]), int(steps.iloc[-1])
        return lo, hi, f"ProfilerStep#{first} to #{last}: {view.step_count} step(s), GPU ops clipped to them", view.step_count
    if len(ops) == 0:
        lo, hi = view.window
        return lo, hi, "the whole trace (no ProfilerStep ranges, no GPU ops)", 1
    lo, hi = int(ops["ts"].min()), int(ops["end"].max())
    return lo, hi, "no ProfilerStep ranges: from the first GPU op's start to the last one's end, as one window", 1


def build_gpu_links(view: TraceView) -> GpuLinks:
    context = _host_context(view)
    ops = _gpu_ops(view, context).sort_values(["ts", "end"], kind="stable").reset_index(drop=True)
    lo, hi, text, steps = gpu_window(view, ops)
    return GpuLinks(ops, _host_syncs(view, context, ops), _sync_events(view, context), lo, hi, text, steps)
