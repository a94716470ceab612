"""One row per NCCL/RCCL kernel of a rank trace: its collective, message size, algorithm and bandwidths.

The kernel name says the collective, algorithm and protocol
(``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``);
c10d records the message on the kernel (``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``dtype``, ``Group size``). A kernel whose trace has no
message keeps its type and time, with ``bytes`` 0 and no bandwidth.

Bandwidths follow nccl-tests' PERFORMANCE.md
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):

- ``algbw = bytes / time``, where ``bytes`` is the message size nccl-tests
  counts: the whole buffer (all-gather: the gathered output, ``Out msg
  nelems``; reduce-scatter: the input, ``In msg nelems``; the larger of the
  two covers both, and every other collective, whose two are equal);
- ``busbw = algbw * factor``, the traffic each rank's link carries, which is
  comparable to the link's peak whatever the collective and the rank count:

  ========================  ==============  ====================================
  collective                factor          why (PERFORMANCE.md)
  ========================  ==============  ====================================
  all-reduce                2 (n - 1) / n   a reduce-scatter then an all-gather
  all-gather                (n - 1) / n     each rank receives n - 1 of n parts
  reduce-scatter            (n - 1) / n     each rank sends n - 1 of n parts
  broadcast, reduce         1               the buffer crosses each link once
  send/recv                 1               point to point
  all-to-all                (n - 1) / n     n - 1 of n parts leave each rank
  ========================  ==============  ====================================

``n`` is the collective's group size (``Group size``, else the trace's
world size); a point-to-point kernel's factor is 1 whatever ``n``.
"""

from __future__ import annotations

import re
from weakref import WeakKeyDictionary

import numpy as np
import pandas as pd

from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.comm_sizes import dtype_bytes

__all__ = ["BUS_FACTORS", "bus_factor", "collective_kernels", "collective_type"]

_NAME = re.compile(r"nccl(?:Dev)?Kernel_(?P<coll>[A-Za-z]+)")
#: NCCL's algorithm and protocol, where the kernel name has them (``_RING_LL_``; 2.19+ puts them last)
_ALGO = re.compile(r"_(?P<algo>RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|NVLS_TREE|NVLS|PAT)_(?P<proto>LL128|LL|SIMPLE)"
                   r"(?![A-Za-z0-9])")
#: kernel-name and c10d spellings of each collective type
_TYPES = {"allreduce": "allreduce", "all_reduce": "allreduce", "allgather": "allgather",
          "all_gather": "allgather", "_allgather_base": "allgather", "allgather_into_tensor_coalesced": "allgather",
          "reducescatter": "reducescatter", "reduce_scatter": "reducescatter", "_reduce_scatter_base": "reducescatter",
          "reduce_scatter_tensor_coalesced": "reducescatter", "broadcast": "broadcast", "reduce": "reduce",
          "sendrecv": "sendrecv", "send": "sendrecv", "recv": "sendrecv", "alltoall": "alltoall",
          "all_to_all": "alltoall", "alltoall_base": "alltoall", "all_to_allv": "alltoall"}

#: collective type -> bus-bandwidth factor as a function of the group size (see the module docstring)
BUS_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "alltoall": lambda n: (n - 1) / n,
}

COLUMNS = ("ts", "end", "dur", "step", "stream", "kernel", "collective", "algo", "proto", "group", "bytes",
           "algbw_gb_s", "busbw_gb_s")


def collective_type(kernel: str, c10d_name: str = "") -> str:
    """allreduce, allgather, ... from c10d's ``Collective name``, else the kernel's name; "other" when neither says."""
    m = _NAME.search(kernel)
    for text in (c10d_name, m["coll"] if m else ""):
        kind = _TYPES.get(str(text).lower())
        if kind:
            return kind
    return "other"


def bus_factor(collective: str, group: int) -> float:
    """The bus-bandwidth factor of a collective over ``group`` ranks (1 for an unknown type or group)."""
    if collective not in BUS_FACTORS or group < 1:
        return 1.0
    return float(BUS_FACTORS[collective](group))


def _column(ops: pd.DataFrame, name: str, missing: object) -> np.ndarray:
    return ops[name].to_numpy(dtype=object if isinstance(missing, str) else "int64") if name in ops else \
        np.full(len(ops), missing, dtype=object if isinstance(missing, str) else "int64")


#: the window's table per view: the bandwidth analyzer and the ranks' skew both read the first rank's
_WINDOW_ROWS: WeakKeyDictionary[TraceView, pd.DataFrame] = WeakKeyDictionary()


def collective_kernels(view: TraceView, ops: pd.DataFrame | None = None) -> pd.DataFrame:
    """The communication kernels of the analysed device in the window (or of ``ops``), one row each (:data:`COLUMNS`).

    Times are int64 ns; ``bytes`` 0 and the bandwidths NaN where the trace records no message size. The window's
    table is computed once per view; callers must not modify it.
    """
    if ops is None:
        hit = _WINDOW_ROWS.get(view)
        if hit is None:
            hit = _WINDOW_ROWS[view] = (
                collective_kernels(view, view.gpu.device_ops)
                if view.trace.has_gpu and len(view.gpu.in_window) else pd.DataFrame(columns=list(COLUMNS)))
        return hit
    comm = ops[(ops["kind"] == "comm").to_numpy()]
    names = comm["name"].astype(str).to_numpy(dtype=object)
    c10d = _column(comm, "collective", "")
    matches = [_ALGO.search(n) for n in names]
    kinds = np.array([collective_type(n, c) for n, c in zip(names, c10d)], dtype=object)
    world = int(view.meta.get("world_size") or 0)
    group = _column(comm, "group_size", -1)
    group = np.where(group > 0, group, world).astype("int64")
    per = np.array([dtype_bytes(str(d)) for d in _column(comm, "dtype", "")], dtype="int64")
    nelems = np.maximum(_column(comm, "in_nelems", -1), _column(comm, "out_nelems", -1))
    nbytes = np.where((nelems > 0) & (per > 0), nelems * per, 0)
    dur = comm["dur"].to_numpy("int64")
    algbw = np.where((nbytes > 0) & (dur > 0), nbytes / np.maximum(dur, 1), np.nan)  # bytes/ns = GB/s
    factors = np.array([bus_factor(k, int(n)) for k, n in zip(kinds, group)])
    return pd.DataFrame({
        "ts": comm["ts"].to_numpy("int64"), "end": comm["end"].to_numpy("int64"), "dur": dur,
        "step": comm["step"].to_numpy("int64"), "stream": comm["stream"].to_numpy("int64"),
        "kernel": names, "collective": kinds,
        "algo": np.array([(m and m["algo"] or "").upper() for m in matches], dtype=object),
        "proto": np.array([(m and m["proto"] or "").upper() for m in matches], dtype=object),
        "group": group, "bytes": nbytes.astype("int64"), "algbw_gb_s": algbw, "busbw_gb_s": algbw * factors,
    })
