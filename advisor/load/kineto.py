"""Kineto (PyTorch Profiler) Chrome-trace JSON -> tables.

One :class:`KinetoTrace` per file. Its tables:

``events``
    Every complete (``ph == "X"``) event, one row each. Columns:

    =============  =========  ====================================================
    cat            category   normalised category: cpu_op, user_annotation,
                              python_function, cuda_runtime, cuda_driver,
                              cuda_sync, kernel, gpu_memcpy, gpu_memset,
                              gpu_user_annotation, ... (old names mapped)
    name           category   event name
    ts, dur, end   int64 ns   start, duration and end, on the trace's clock
    pid, tid       int64      process and thread; for GPU events device and stream
    ...            per ARGS   selected ``args``; -1 (ints), NaN (floats) or ""
                              (strings) where the event does not carry them
    =============  =========  ====================================================

    The ``args`` columns (see :data:`ARGS`) that link and describe events:

    - ``correlation`` joins a GPU op (kernel, gpu_memcpy, gpu_memset, cuda_sync)
      to the runtime call that launched or waited for it; ``external_id``
      joins both to the CPU operator around that call (the only link left
      when a trace has no runtime events).
    - GPU ops carry ``device`` and ``stream`` (also in pid and tid); 64-bit
      "no stream" values (4294967295, ``0xffffffff``) become -1.
    - ``sync_kind`` and ``wait_stream`` describe cuda_sync events;
      ``copy_kind`` is ROCm's memcpy direction (CUDA writes it in the name).
    - ``collective``, ``dtype``, ``in_nelems``, ``group_size``, ``pg_name``:
      the c10d collective a communication op or kernel belongs to.
    - ``input_dims``, ``input_types``: the shapes and dtypes of an operator's
      inputs (``record_shapes=True``), as JSON text.
    - ``call_stack``, ``module_hierarchy``: the Python stack and module path
      that older (pre-2.0) profilers wrote as ``args`` instead of
      python_function events.

``memory``
    ``[memory]`` instant events (``profile_memory=True``): ts, bytes,
    total_allocated, total_reserved, device_type, device_id, addr.

``flows``
    ``ac2g`` / ``fwdbwd`` flow endpoints: cat, ph (s/f), id, ts, pid, tid.

``meta``
    The trace's top-level keys (``deviceProperties``, ``distributedInfo``,
    ``baseTimeNanoseconds``, ...) plus ``rank`` and ``world_size`` where known.

Which ``args`` become columns is declared once, in :data:`ARGS`. The loader
knows file formats, not performance.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from advisor.errors import TraceError

__all__ = ["ARGS", "CATEGORY_ALIASES", "GPU_CATS", "KinetoTrace", "is_kineto_trace", "load_kineto", "read_json_document"]

#: Old and vendor category names, mapped to the names current Kineto writes.
CATEGORY_ALIASES: dict[str, str] = {
    "Operator": "cpu_op",
    "operator": "cpu_op",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "cuda_runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "hip_runtime": "cuda_runtime",
    "Python": "python_function",
    "python_function": "python_function",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "Trace": "trace",
    "Sync": "cuda_sync",
    "cuda_sync": "cuda_sync",
    "Memcpy_HtoD": "gpu_memcpy",
    "Memcpy_DtoH": "gpu_memcpy",
    "GPU_User_Annotation": "gpu_user_annotation",
    "User_Annotation": "user_annotation",
    "Python_Function": "python_function",
}

#: Trace ``args`` kept as columns: column -> (arg keys in order of preference, kind).
ARGS: dict[str, tuple[tuple[str, ...], str]] = {
    "external_id": (("External id",), "int"),
    "correlation": (("correlation",), "int"),
    "seq": (("Sequence number",), "int"),
    "fwd_tid": (("Fwd thread id",), "int"),
    "device": (("device",), "int"),
    "stream": (("stream",), "int"),
    "bytes": (("bytes", "size"), "int"),
    "bandwidth_gbs": (("memory bandwidth (GB/s)",), "float"),
    "python_id": (("Python id",), "int"),
    "python_parent_id": (("Python parent id",), "int"),
    "input_dims": (("Input Dims",), "str"),
    "input_types": (("Input type",), "str"),
    "grid": (("grid",), "str"),
    "block": (("block",), "str"),
    "registers": (("registers per thread",), "int"),
    "shared_memory": (("shared memory",), "int"),
    "occupancy_pct": (("est. achieved occupancy %",), "float"),
    "cbid": (("cbid", "cid"), "int"),
    "queued": (("queued",), "int"),
    "sync_kind": (("cuda_sync_kind",), "str"),
    "wait_stream": (("wait_on_stream",), "int"),
    "copy_kind": (("kind",), "str"),
    "collective": (("Collective name",), "str"),
    "dtype": (("dtype",), "str"),
    "in_nelems": (("In msg nelems", "in_msg_nelems"), "int"),
    "out_nelems": (("Out msg nelems", "out_msg_nelems"), "int"),
    "group_size": (("Group size",), "int"),
    "pg_name": (("Process Group Name",), "str"),
    "call_stack": (("Call stack",), "str"),
    "module_hierarchy": (("Module Hierarchy",), "str"),
}

#: GPU-side categories, whose ``stream`` is a device stream
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
#: stream values that mean "no particular stream" (device-wide syncs)
_NO_STREAM = (4294967295, 0xFFFFFFFFFFFFFFFF)

OWN_LABEL_PREFIX = "advisor::"
_INT_IN_TEXT = re.compile(r"(0x[0-9a-fA-F]+|-?\d+)")


@dataclass
class KinetoTrace:
    """The tables of one Kineto trace file."""

    path: Path
    events: pd.DataFrame
    memory: pd.DataFrame
    flows: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return int(self.meta.get("rank", 0))

    @property
    def devices(self) -> list[dict[str, Any]]:
        return list(self.meta.get("deviceProperties") or [])

    def of(self, *cats: str) -> pd.DataFrame:
        """The events of the given categories, in time order."""
        return self.events[self.events["cat"].isin(cats)]

    @property
    def has_gpu(self) -> bool:
        return bool(self.events["cat"].isin(("kernel", "gpu_memcpy", "gpu_memset")).any())


def read_json_document(path: Path) -> Any:
    """Read a (possibly gzipped) JSON file, with one clear error for each way it can be broken."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except EOFError:
            raise TraceError(path, "the gzip stream is truncated; the file was cut short while being written or copied") from None
        except (OSError, zlib.error) as exc:
            raise TraceError(path, f"is not a valid gzip file ({exc})") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        hint = "the file ends early; it was probably cut short" if exc.pos >= len(raw) - 1 else "is this a Kineto trace?"
        raise TraceError(path, f"is not valid JSON ({exc.msg} at byte {exc.pos}); {hint}") from None


def is_kineto_trace(path: Path) -> bool:
    """Cheap check on the file name, used to pick a loader."""
    name = path.name.lower()
    return name.endswith((".json", ".json.gz"))


def load_kineto(path: str | Path) -> KinetoTrace:
    """Load one Kineto trace (``.json`` or ``.json.gz``)."""
    path = Path(path)
    doc = read_json_document(path)
    if not isinstance(doc, dict):
        raise TraceError(path, "is JSON but not a Kineto trace: the top level is not an object")
    raw_events = doc.get("traceEvents")
    if not isinstance(raw_events, list):
        raise TraceError(path, "is JSON but not a Kineto trace: it has no `traceEvents` list")
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    _add_rank(meta)
    complete, instants, flows = _split(raw_events)
    base_us = _base_us(complete, instants, flows)
    return KinetoTrace(
        path=path,
        events=_events_table(complete, base_us),
        memory=_memory_table(instants, base_us),
        flows=_flow_table(flows, base_us),
        meta=meta,
    )


def _add_rank(meta: dict[str, Any]) -> None:
    info = meta.get("distributedInfo")
    if isinstance(info, Mapping):
        for key in ("rank", "world_size", "backend"):
            if key in info:
                meta.setdefault(key, info[key])


def _split(raw_events: list[Any]) -> tuple[list[dict], list[dict], list[dict]]:
    complete: list[dict] = []
    instants: list[dict] = []
    flows: list[dict] = []
    for ev in raw_events:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph == "X":
            if "ts" in ev:
                complete.append(ev)
        elif ph == "i" or ph == "I":
            if ev.get("name") == "[memory]":
                instants.append(ev)
        elif ph in ("s", "f") and "id" in ev:
            flows.append(ev)
    return complete, instants, flows


def _base_us(*groups: list[dict]) -> int:
    """An integer microsecond origin, so that ns conversion keeps float precision."""
    starts = [ev["ts"] for group in groups for ev in group[:1000] if _is_num(ev.get("ts"))]
    return int(math.floor(min(starts))) if starts else 0


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _to_ns(values: list[Any], base_us: int) -> np.ndarray:
    arr = pd.to_numeric(pd.Series(values, dtype="object"), errors="coerce").to_numpy(dtype="float64")
    arr = np.nan_to_num(arr, nan=float(base_us))
    return np.round((arr - base_us) * 1000.0).astype("int64") + base_us * 1000


def _int(value: Any) -> int:
    if _is_num(value):
        return int(value) if math.isfinite(value) else -1
    if isinstance(value, str):
        m = _INT_IN_TEXT.search(value)
        if m:
            text = m.group(1)
            return int(text, 16) if text.startswith("0x") else int(text)
    return -1


def _arg_value(args: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in args:
            return args[key]
    return None


def _events_table(complete: list[dict], base_us: int) -> pd.DataFrame:
    names = [str(ev.get("name", "")) for ev in complete]
    cats = [CATEGORY_ALIASES.get(ev.get("cat") or "", ev.get("cat") or "") for ev in complete]
    # The collector's labels are annotations even when recorded with the fast
    # record function, which Kineto files as cpu_op.
    cats = ["user_annotation" if c == "cpu_op" and n.startswith(OWN_LABEL_PREFIX) else c for c, n in zip(cats, names)]
    columns: dict[str, Any] = {
        "cat": pd.Categorical(cats),
        "name": pd.Categorical(names),
        "ts": _to_ns([ev["ts"] for ev in complete], base_us),
        "dur": np.maximum(_to_ns([ev.get("dur", 0) for ev in complete], 0), 0),
        "pid": np.array([_int(ev.get("pid")) for ev in complete], dtype="int64"),
        "tid": np.array([_int(ev.get("tid")) for ev in complete], dtype="int64"),
    }
    arg_dicts = [ev.get("args") if isinstance(ev.get("args"), dict) else {} for ev in complete]
    for column, (keys, kind) in ARGS.items():
        raw = [_arg_value(a, keys) for a in arg_dicts]
        if kind == "int":
            columns[column] = np.array([-1 if v is None else _int(v) for v in raw], dtype="int64")
        elif kind == "float":
            columns[column] = np.array([float(v) if _is_num(v) else np.nan for v in raw], dtype="float64")
        else:
            columns[column] = [_text(v) for v in raw]
    frame = pd.DataFrame(columns)
    frame.loc[frame["stream"].isin(_NO_STREAM), "stream"] = -1
    frame["end"] = frame["ts"] + frame["dur"]
    frame = frame[frame["cat"] != "trace"]
    frame = frame.sort_values(["ts", "end"], ascending=[True, False], kind="stable").reset_index(drop=True)
    frame["cat"] = frame["cat"].cat.remove_unused_categories()
    return frame


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _memory_table(instants: list[dict], base_us: int) -> pd.DataFrame:
    args = [ev.get("args") if isinstance(ev.get("args"), dict) else {} for ev in instants]
    return pd.DataFrame(
        {
            "ts": _to_ns([ev.get("ts") for ev in instants], base_us),
            "bytes": np.array([_int(a.get("Bytes")) for a in args], dtype="int64"),
            "total_allocated": np.array([_int(a.get("Total Allocated")) for a in args], dtype="int64"),
            "total_reserved": np.array([_int(a.get("Total Reserved")) for a in args], dtype="int64"),
            "device_type": np.array([_int(a.get("Device Type")) for a in args], dtype="int64"),
            "device_id": np.array([_int(a.get("Device Id")) for a in args], dtype="int64"),
            "addr": np.array([_int(a.get("Addr")) for a in args], dtype="int64"),
        }
    ).sort_values("ts", kind="stable").reset_index(drop=True)


def _flow_table(flows: list[dict], base_us: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "cat": pd.Categorical([str(ev.get("cat", "")) for ev in flows]),
            "ph": pd.Categorical([ev["ph"] for ev in flows]),
            "id": np.array([_int(ev.get("id")) for ev in flows], dtype="int64"),
            "ts": _to_ns([ev.get("ts") for ev in flows], base_us),
            "pid": np.array([_int(ev.get("pid")) for ev in flows], dtype="int64"),
            "tid": np.array([_int(ev.get("tid")) for ev in flows], dtype="int64"),
        }
    )
