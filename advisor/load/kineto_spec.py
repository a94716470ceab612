"""What of a Kineto trace the loader reads, and which files are traces.

Apart from :mod:`advisor.load.kineto` (which imports pandas) so that
``advisor analyze`` can start reading a trace in a second process before the
tables' libraries are imported (:mod:`advisor.load.kineto_prefetch`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ALL_ARGS", "ARGS", "EXTRA_ARGS", "is_kineto_trace"]

#: Trace ``args`` kept as columns: column -> (arg keys in order of preference, kind). Only what the
#: analyzers read: every column costs decoding time and memory on every event, present or not.
ARGS: dict[str, tuple[tuple[str, ...], str]] = {
    "external_id": (("External id",), "int"),
    "correlation": (("correlation",), "int"),
    "seq": (("Sequence number",), "int"),
    "device": (("device",), "int"),
    "stream": (("stream",), "int"),
    "bytes": (("bytes", "size"), "int"),
    "input_types": (("Input type",), "str"),
    "input_dims": (("Input Dims",), "str"),
    "concrete_inputs": (("Concrete Inputs",), "str"),
    "input_strides": (("Input Strides",), "str"),  # the layout copies' pattern (analyze/framework/copy_price.py)
    "sync_kind": (("cuda_sync_kind",), "str"),
    "wait_stream": (("wait_on_stream",), "int"),
    "copy_kind": (("kind",), "str"),
    "collective": (("Collective name",), "str"),
    "dtype": (("dtype",), "str"),
    "in_nelems": (("In msg nelems", "in_msg_nelems"), "int"),
    "out_nelems": (("Out msg nelems", "out_msg_nelems"), "int"),
    "group_size": (("Group size",), "int"),
    "pg_name": (("Process Group Name",), "str"),
    "kernel_num_gb": (("kernel_num_gb",), "float"),
    "kernel_flop": (("kernel_flop",), "float"),
}

#: More ``args`` a trace may carry, read only when asked for (``load_kineto(path, args=ALL_ARGS)``);
#: an analyzer that needs one moves it into :data:`ARGS`.
EXTRA_ARGS: dict[str, tuple[tuple[str, ...], str]] = {
    "fwd_tid": (("Fwd thread id",), "int"),
    "bandwidth_gbs": (("memory bandwidth (GB/s)",), "float"),
    "python_id": (("Python id",), "int"),
    "python_parent_id": (("Python parent id",), "int"),
    "grid": (("grid",), "str"),
    "block": (("block",), "str"),
    "registers": (("registers per thread",), "int"),
    "shared_memory": (("shared memory",), "int"),
    "occupancy_pct": (("est. achieved occupancy %",), "float"),
    "cbid": (("cbid", "cid"), "int"),
    "queued": (("queued",), "int"),
    "call_stack": (("Call stack",), "str"),
    "module_hierarchy": (("Module Hierarchy",), "str"),
}
ALL_ARGS = {**ARGS, **EXTRA_ARGS}


def is_kineto_trace(path: Path) -> bool:
    """Cheap check on the file name, used to pick a loader."""
    name = path.name.lower()
    return name.endswith((".json", ".json.gz"))
