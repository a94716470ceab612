"""GPU work linked back to the host: each kernel, copy, memset and sync to the user's line.

:func:`build_gpu_links` derives, once per trace (``TraceView.gpu``), the
tables the GPU analyzers share:

``ops``
    One row per GPU op (``kernel``, ``gpu_memcpy``, ``gpu_memset``), in time
    order. Columns: ``cat``, ``name``, ``kind`` (compute, comm, memcpy,
    memset), ``device``, ``stream``, ``ts``, ``end``, ``dur`` (int64 ns),
    ``correlation``, ``bytes``, ``copy_kind`` (ROCm), ``collective``, ``dtype``, ``in_nelems``,
    ``out_nelems`` and ``group_size`` (of a communication kernel, where the trace records them),
    ``input_types`` of its operator, and the link to the host: ``launch`` (row of
    ``view.host`` of the runtime call that launched it, -1 when the trace has none),
    ``launch_name``, ``launch_ts``, ``launch_end`` (-1 when unknown), ``op`` (outermost CPU operator around
    the launch: what the user's code called), ``op_inner`` (innermost: the
    op that launched it), ``src_file``, ``src_line``, ``src_func``,
    ``module``, ``phase`` (from the host row), ``op_row`` (row of
    ``view.host`` of that innermost op, -1 when none), and ``step`` (index
    into ``view.steps`` of the step the op started in, -1 outside).
``host_syncs``
    One row per host call that blocks the host until the GPU catches up (see
    :data:`SYNC_APIS`), with ``sync`` (device, stream, event, copy,
    pageable_copy, free), ``item`` (inside ``.item()``/``_local_scalar_dense``),
    ``ts``, ``end``, ``dur``, ``tid``, ``op``, ``op_inner``, ``op_row``, source columns and ``step``.
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
from functools import cached_property

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.framework import event_names as by_name
from advisor.analyze.framework.trace_tables import TraceTables

__all__ = ["GpuLinks", "KINDS", "SYNC_APIS", "build_gpu_links", "gpu_window", "op_kind", "primary_device"]

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

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """The kernels that start inside the window."""
        ops = self.ops
        ts = ops["ts"].to_numpy()
        return _where(ops, (ops["cat"] == "kernel").to_numpy() & (ts >= self.lo) & (ts < self.hi))

    @cached_property
    def in_window(self) -> pd.DataFrame:
        """The ops that overlap the window."""
        ops = self.ops
        return _where(ops, (ops["end"].to_numpy() > self.lo) & (ops["ts"].to_numpy() < self.hi))

    @cached_property
    def device(self) -> int | None:
        """The device with the most GPU time in the window (see :func:`primary_device`)."""
        return primary_device(self.in_window) if len(self.in_window) else None

    @cached_property
    def device_ops(self) -> pd.DataFrame:
        """The ops of :attr:`device` that overlap the window, numbered from 0."""
        ops = self.in_window
        return _where(ops, ops["device"].to_numpy() == self.device).reset_index(drop=True)


def _where(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """The rows in ``mask``; the frame itself (no copy) when that is all of them."""
    return frame if mask.all() else frame[mask]


def primary_device(ops: pd.DataFrame) -> int:
    """The device with the most GPU time (the lowest-numbered one on a tie)."""
    devices, inverse = np.unique(ops["device"].to_numpy(), return_inverse=True)
    return int(devices[np.argmax(np.bincount(inverse, weights=ops["dur"].to_numpy()))])


def _host_context(view: TraceTables) -> dict[str, np.ndarray]:
    """For every host row: its outermost and innermost enclosing CPU operator names, and the innermost's row."""
    host = view.host
    parent, depth = host["parent"].to_numpy(), host["depth"].to_numpy()
    is_op = (host["cat"] == "cpu_op").to_numpy()
    is_top = is_op & host["op_top"].to_numpy()
    rows = np.arange(len(host))
    inner = np.where(is_op, rows, intervals.enclosing(parent, depth, is_op))  # an op is its own innermost op
    outer = np.where(is_top, rows, intervals.enclosing(parent, depth, is_top))
    names = _texts(host["name"])
    return {"op": _at(names, outer, ""), "op_inner": _at(names, inner, ""), "op_row": inner, "name": names}


def _texts(column: pd.Series) -> np.ndarray:
    """A text column as an object array (a Categorical's strings are shared, not copied)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        labels = np.asarray(column.cat.categories, dtype=object)
        codes = column.cat.codes.to_numpy()
        return np.where(codes >= 0, labels[np.maximum(codes, 0)], "") if len(labels) else np.full(len(codes), "", object)
    return column.to_numpy(dtype=object)


def _at(values: np.ndarray, rows: np.ndarray, missing: object) -> np.ndarray:
    """``values[rows]``, with ``missing`` where a row is -1."""
    if len(values) == 0:
        return np.full(len(rows), missing, dtype=values.dtype if values.dtype != object else object)
    return np.where(rows >= 0, values[np.maximum(rows, 0)], missing)


def _first_rows(keys: np.ndarray, rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each wanted key, the row of its first occurrence in ``keys`` (in ``rows`` order), or -1."""
    order = np.argsort(keys, kind="stable")
    k, r = keys[order], rows[order]
    first = np.ones(len(k), bool)
    first[1:] = k[1:] != k[:-1]
    k, r = k[first], r[first]
    if len(k) == 0:
        return np.full(len(wanted), -1, "int64")
    pos = np.minimum(np.searchsorted(k, wanted), len(k) - 1)
    return np.where(k[pos] == wanted, r[pos], -1).astype("int64")


#: what NCCL kernels say about their collective (c10d's process-group info), where the trace has it
_COLLECTIVE_COLS = ("collective", "dtype", "in_nelems", "out_nelems", "group_size")
_HOST_COLS = ("op", "op_inner", "src_file", "src_line", "src_func", "module", "phase")


def _host_values(view: TraceTables, context: dict[str, np.ndarray], col: str, rows: np.ndarray) -> np.ndarray:
    """One of :data:`_HOST_COLS` at these host rows ("" or -1 where a row is -1)."""
    missing = -1 if col == "src_line" else ""
    if col in context:
        return _at(context[col], rows, missing)
    column = view.host[col]
    if isinstance(column.dtype, pd.CategoricalDtype):  # the codes at the rows, then their texts: no full-length copy
        labels = np.append(np.asarray(column.cat.categories, dtype=object), "")
        codes = column.cat.codes.to_numpy()
        return labels[np.where(rows >= 0, codes[np.maximum(rows, 0)], len(labels) - 1)] if len(codes) else \
            np.full(len(rows), missing, dtype=object)
    return _at(column.to_numpy(), rows, missing)


def _attach_host(frame: dict[str, np.ndarray], view: TraceTables, context: dict[str, np.ndarray]) -> pd.DataFrame:
    """Join GPU-side rows to their runtime call (by correlation), else to their op (by External id)."""
    host = view.host
    cat = host["cat"]
    host_rows = np.arange(len(host))
    corr, ext = host["correlation"].to_numpy(), host["external_id"].to_numpy()
    runtime = (cat.isin(("cuda_runtime", "cuda_driver")).to_numpy()) & (corr >= 0)
    launch = _first_rows(corr[runtime], host_rows[runtime], frame["correlation"])
    launch[frame["correlation"] < 0] = -1
    ops = (cat == "cpu_op").to_numpy() & (ext >= 0)
    via_op = _first_rows(ext[ops], host_rows[ops], frame["external_id"])
    anchor = np.where(launch >= 0, launch, via_op)
    out = dict(frame)
    out["launch"] = launch
    out["launch_name"] = _at(context["name"], launch, "")
    for col in ("ts", "end", "tid"):
        out[f"launch_{col}"] = _at(host[col].to_numpy(), launch, -1)
    for col in _HOST_COLS:
        out[col] = _host_values(view, context, col, anchor)
    op_row = _at(context["op_row"], anchor, -1)
    out["op_row"] = op_row
    out["input_types"] = _at(_texts(host["input_types"]), op_row, "")
    out["step"] = view.step_of(frame["ts"])
    return pd.DataFrame(out, copy=False)


def _columns(view: TraceTables, rows: np.ndarray, cols: list[str]) -> dict[str, np.ndarray]:
    """Some events' columns as arrays (text columns as object arrays)."""
    e = view.events
    return {c: (_texts(e[c])[rows] if isinstance(e[c].dtype, pd.CategoricalDtype) else e[c].to_numpy()[rows])
            for c in cols}


def _gpu_ops(view: TraceTables, context: dict[str, np.ndarray]) -> pd.DataFrame:
    e = view.events
    rows = np.flatnonzero(e["cat"].isin(GPU_OP_CATS).to_numpy())
    ts, end = e["ts"].to_numpy()[rows], e["end"].to_numpy()[rows]
    rows = rows[np.lexsort((end, ts))]  # by start, then end (the events are by start, then longest first)
    frame = _columns(view, rows, ["ts", "end", "dur", "device", "stream", "correlation", "external_id", "bytes",
                                  "copy_kind", *(c for c in _COLLECTIVE_COLS if c in view.events)])
    # Old traces carry the device and stream only as pid and tid.
    frame["device"] = np.where(frame["device"] >= 0, frame["device"], e["pid"].to_numpy()[rows])
    frame["stream"] = np.where(frame["stream"] >= 0, frame["stream"], e["tid"].to_numpy()[rows])
    cat = e["cat"].array.take(rows).remove_unused_categories()
    name = e["name"].array.take(rows)
    is_comm = by_name.where(pd.Series(name), _COMM.search)
    kind = np.where(cat == "gpu_memcpy", "memcpy", np.where(cat == "gpu_memset", "memset",
                                                            np.where(is_comm, "comm", "compute")))
    out = _attach_host(frame, view, context)
    out.insert(0, "cat", cat)
    out.insert(1, "name", name)
    out.insert(2, "kind", pd.Categorical(kind, categories=sorted(KINDS)))
    return out


def _host_syncs(view: TraceTables, context: dict[str, np.ndarray], ops: pd.DataFrame) -> pd.DataFrame:
    host = view.host
    kind = view.host_names(SYNC_APIS.get)
    is_async = view.host_names(ASYNC_COPY_APIS.__contains__, bool)
    if is_async.any():
        pageable = ops["launch"].to_numpy()[((ops["kind"] == "memcpy").to_numpy()
                                             & by_name.where(ops["name"], lambda n: "Pageable" in n))]
        async_copy = is_async & np.isin(np.arange(len(host)), pageable[pageable >= 0])
        kind = np.where(async_copy, "pageable_copy", kind)
    rows = np.flatnonzero(kind != None)  # noqa: E711 - elementwise
    ts = host["ts"].to_numpy()[rows]
    out = {"row": rows, "name": context["name"][rows], "sync": kind[rows].astype(object), "ts": ts,
           "end": host["end"].to_numpy()[rows], "dur": host["dur"].to_numpy()[rows],
           "tid": host["tid"].to_numpy()[rows], "correlation": host["correlation"].to_numpy()[rows],
           "op_row": context["op_row"][rows], **{c: _host_values(view, context, c, rows) for c in _HOST_COLS}}
    item = np.isin(out["op"], list(ITEM_OPS)) | np.isin(out["op_inner"], list(ITEM_OPS))
    return pd.DataFrame({**out, "item": item, "step": view.step_of(ts)}, copy=False)


def _sync_events(view: TraceTables, context: dict[str, np.ndarray]) -> pd.DataFrame:
    e = view.events
    rows = np.flatnonzero((e["cat"] == "cuda_sync").to_numpy())
    frame = _columns(view, rows, ["name", "device", "stream", "ts", "end", "dur", "correlation", "external_id",
                                  "sync_kind", "wait_stream"])
    return _attach_host(frame, view, context)


def gpu_window(view: TraceTables, ops: pd.DataFrame) -> tuple[int, int, str, int]:
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


def build_gpu_links(view: TraceTables) -> GpuLinks:
    context = _host_context(view)
    ops = _gpu_ops(view, context)
    lo, hi, text, steps = gpu_window(view, ops)
    return GpuLinks(ops, _host_syncs(view, context, ops), _sync_events(view, context), lo, hi, text, steps)
