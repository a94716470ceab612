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
    ...            per ARGS   selected ``args``: int64 (-1 where absent; int32 for
                              the small numbers in INT32_COLUMNS: device, stream,
                              wait_stream, group_size), float64 (NaN) or text as a
                              Categorical ("" where absent)
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
    - ``collective``, ``dtype``, ``in_nelems``, ``out_nelems``, ``group_size``, ``pg_name``:
      the c10d collective a communication op or kernel belongs to.
    - ``seq``: the autograd sequence number that ties a backward op to its
      forward op; ``input_types``, ``input_dims`` and ``concrete_inputs``: the
      dtypes, shapes and scalar values of an operator's inputs
      (``record_shapes=True``), as JSON text ("" on every other event, so a
      trace without shapes costs nothing more).
    - ``kernel_num_gb`` and ``kernel_flop``: Inductor's estimate of a Triton
      kernel's bytes (GB of 1e9) and FLOPs, on the profiler range of its launch
      (when Inductor was asked to measure its kernels; NaN elsewhere).

    Text columns are Categoricals (a few hundred distinct values over
    millions of rows): compare them with ``==``/``isin`` as strings; to build
    new text from them, take ``.astype(str)`` or ``.to_numpy(dtype=object)``
    first, and mind that ``value_counts`` lists unused categories with 0.

    :data:`EXTRA_ARGS` (shapes, kernel launch geometry, Python ids, the
    pre-2.0 ``call_stack`` / ``module_hierarchy``, ...) are read only when
    asked for, ``load_kineto(path, args=ALL_ARGS)``: every column costs
    decoding time and 8 bytes per event, present or not.

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

How a trace is read: in pieces, never whole (:mod:`.json_stream` cuts the
``traceEvents`` array at event boundaries while it decompresses), each piece
decoded by msgspec into only the fields above and turned into column chunks
(:mod:`.kineto_pieces`); the chunks are joined and sorted at the end. Memory
holds the tables plus a few pieces, whatever the file's size. A big trace's
pieces are decoded on helper processes too (:mod:`.kineto_parallel`), with
the same tables.
tests/load/kineto_reference.py is the plain form of the same rules (the
whole document through ``orjson.loads``, a loop per column); the tables must
equal its tables (values, dtypes, categories, row order) on every fixture trace,
with :data:`ARGS` and with :data:`ALL_ARGS`.

Data quality: events the tables cannot hold as recorded are counted in
``KinetoTrace.quality`` (:mod:`.kineto_quality`), never dropped silently;
events far outside the profiled span (which the reference does not know of:
no real trace has them) are left out, as their times cannot be placed. A trace
with nothing to analyse (no events, none placed in time, none lasting any
time) is a :class:`~advisor.errors.TraceError` naming the file.
"""

from __future__ import annotations

import gc
import gzip
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from advisor.errors import TraceError
from advisor.load.kineto_spec import ALL_ARGS, ARGS, EXTRA_ARGS, is_kineto_trace
from advisor.load.kineto_quality import (MAX_TS_US, STEP_KIND, STEP_PREFIX, DataQuality, check_events, check_meta,
                                         check_span)
from advisor.load.kineto_shapes import OPTIONAL_COLUMNS, SHAPE_COLUMNS
from advisor.naming import LABEL_PREFIX

__all__ = ["ALL_ARGS", "ARGS", "CATEGORY_ALIASES", "EXTRA_ARGS", "INT32_COLUMNS", "GPU_CATS", "KinetoTrace", "is_kineto_trace", "load_kineto", "read_json_document"]

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


#: small-number ``args`` columns kept as int32 (a value outside int32 is not a device, stream or group size: -1)
INT32_COLUMNS = ("device", "stream", "wait_stream", "group_size")


def to_int32(values: np.ndarray) -> np.ndarray:
    """int64 -> int32, with -1 for what does not fit."""
    fits = (values >= np.iinfo("int32").min) & (values <= np.iinfo("int32").max)
    return np.where(fits, values, -1).astype("int32")


#: GPU-side categories, whose ``stream`` is a device stream
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
#: stream values that mean "no particular stream" (device-wide syncs)
_NO_STREAM = (4294967295, 0xFFFFFFFFFFFFFFFF)

OWN_LABEL_PREFIX = LABEL_PREFIX


@dataclass
class KinetoTrace:
    """The tables of one Kineto trace file."""

    path: Path
    events: pd.DataFrame
    memory: pd.DataFrame
    flows: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    #: the events that cannot be used as recorded (see :mod:`advisor.load.kineto_quality`)
    quality: DataQuality = field(default_factory=DataQuality)

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
    """Read a whole (possibly gzipped) JSON file, with one clear error for each way it can be broken.

    For small JSON files only: a trace goes through :func:`load_kineto`, which streams.
    """
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


def load_kineto(path: str | Path, *, on_progress: Callable[[int, int], None] | None = None,
                args: Mapping[str, tuple[tuple[str, ...], str]] | None = None, window: Any = None,
                helpers: int | None = None, shapes: bool = True) -> KinetoTrace:
    """Load one Kineto trace (``.json`` or ``.json.gz``); ``on_progress(done, total)`` follows the file bytes read.

    ``args``: the ``args`` columns to read (default :data:`ARGS`; :data:`ALL_ARGS` adds :data:`EXTRA_ARGS`).
    ``window``: a :class:`~advisor.load.kineto_window.Window` (see :func:`~advisor.load.kineto_window.plan_window`):
    only the events that overlap it are kept, and ``meta`` records it under ``advisor_window``.
    ``helpers``: processes that decode pieces beside this one (:mod:`.kineto_parallel`; default: by the trace's
    size and the cores; 0: none). The tables are the same either way.
    ``shapes``: give the operators the input shapes the collector recorded apart, in
    :data:`~advisor.naming.SHAPES_DIR` beside the trace, when there is such a file (:mod:`.kineto_shapes`).
    """
    path = Path(path)
    # Loading makes millions of short-lived objects and no reference cycles; the
    # cyclic GC would walk every live object again and again for nothing.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        columns, meta = _read_columns(path, dict(ARGS if args is None else args), window, on_progress, helpers)
        meta_notes = check_meta(meta)
        _add_rank(meta)
        if window is not None:
            from advisor.load.kineto_window import META_KEY

            meta[META_KEY] = window.to_meta()
        base_us = columns.base_us
        events, quality = _events_table(columns, base_us)
        if events.empty or not events["dur"].any():  # nothing to analyse: say why, rather than analyse nothing
            raise TraceError(path, _no_events(columns, quality, events))
        quality.meta_notes = meta_notes
        if shapes and all(c in events for c in SHAPE_COLUMNS):
            events = _with_shapes_recorded_apart(path, events, meta)
        return KinetoTrace(
            path=path,
            events=events,
            memory=_memory_table(columns, base_us),
            flows=_flow_table(columns, base_us),
            meta=meta,
            quality=quality,
        )
    finally:
        if gc_was_on:
            gc.enable()


def _with_shapes_recorded_apart(path: Path, events: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    """``events`` with the shapes of the steps the collector recorded apart (see :mod:`.kineto_shapes`). What
    the operators lack, or a shape file that cannot be read, is a note in ``meta`` for the findings, not a
    data-quality problem: the times are whole either way."""
    from advisor.load.kineto_shapes import META_KEY, give_shapes, shapes_file

    found = shapes_file(path)
    if found is None:
        return events
    try:
        recorded = load_kineto(found, args={c: ARGS[c] for c in (*SHAPE_COLUMNS, *OPTIONAL_COLUMNS)}, helpers=0,
                               shapes=False)
    except TraceError as exc:
        meta[META_KEY] = {"file": found.name, "error": str(exc),
                          "note": f"the input shapes recorded apart were not used: {exc}"}
        return events
    events, match = give_shapes(events, recorded.events, f"{found.parent.name}/{found.name}")
    meta[META_KEY] = {**match.to_meta(), "note": match.sentence() if match.matched < match.ops else None}
    return events


def _read_columns(path: Path, spec: dict[str, tuple[tuple[str, ...], str]], window: Any,
                  on_progress: Callable[[int, int], None] | None, helpers: int | None) -> tuple[Any, dict[str, Any]]:
    """The trace's column chunks and its other keys, read on helper processes when that pays (see ``helpers``)."""
    from advisor.load.kineto_pieces import Columns, stream_columns

    if window is None and helpers is None:
        from advisor.load.kineto_prefetch import take

        prefetched = take(path, spec)
        if prefetched is not None:
            return prefetched
    if helpers is None:
        from advisor.load.kineto_parallel import helper_count
        from advisor.load.kineto_window import json_size

        helpers = 0 if window is not None else helper_count(path, json_size(path))
    if helpers and window is None:
        from advisor.load.kineto_parallel import HelperFoundMalformed, ParallelDecode

        columns = Columns(spec)
        decode = ParallelDecode(columns, helpers)
        try:
            meta = stream_columns(path, columns, decode, on_progress)
            decode.finish()
            return columns, meta
        except HelperFoundMalformed:
            pass  # read again serially: the stream recuts that piece exactly, or says where the JSON is broken
        except TraceError:
            if not decode.helper_found_malformed():  # else cut from a wrong place after a helper's piece: again
                raise
        finally:
            decode.close()
    columns = Columns(spec, window)
    return columns, stream_columns(path, columns, columns.add_piece, on_progress)


def _no_events(columns: Any, quality: DataQuality, events: pd.DataFrame) -> str:
    """Why a trace has nothing to analyse: no events, no complete event, none placed in time, none with a duration."""
    if not columns.events_seen:
        return "has no events: its traceEvents list is empty (was the profiler stopped before it recorded a step?)"
    if not quality.events:
        return (f"has {columns.events_seen:,} events but no complete (\"ph\": \"X\") event: no operator, kernel or "
                "step to analyse")
    if events.empty:
        return (f"none of its {quality.events:,} complete events can be placed in time, so there is nothing to "
                f"analyse: {quality.details()}")
    return (f"none of its {quality.events:,} complete events lasts any time, so nothing can be timed: "
            f"{quality.details() or 'every `dur` is 0'}")


def _add_rank(meta: dict[str, Any]) -> None:
    info = meta.get("distributedInfo")
    if isinstance(info, Mapping):
        for key in ("rank", "world_size", "backend"):
            if key in info:
                meta.setdefault(key, info[key])


def _joined(chunks: dict[str, list[Any]], column: str, dtype: str) -> np.ndarray:
    parts = chunks.get(column)
    if not parts:
        return np.empty(0, dtype)
    if dtype == "object" and not isinstance(parts[0], np.ndarray):
        parts[:] = [np.array(part, dtype=object) for part in parts]
    joined = np.concatenate(parts) if len(parts) > 1 else np.asarray(parts[0])
    parts.clear()  # free each chunk as soon as its column is joined
    trim_heap()
    return joined.astype(dtype, copy=False)


def trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    A load frees hundreds of MB of column chunks that sit on the heap between
    other allocations; glibc keeps such memory, so without this it would count
    in the process's RSS for the rest of the run (on a 500 MB trace, 300 MB).
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def _to_ns(values: np.ndarray, base_us: int) -> np.ndarray:
    """µs floats -> int64 ns; missing (NaN) values, and any that int64 ns cannot hold, become the origin.

    (Events of the events table that far out are left out before, and counted: see :mod:`.kineto_quality`.)
    """
    held = np.abs(values) < MAX_TS_US  # NaN compares False: also the origin
    offset = np.where(held, values, float(base_us)) - base_us
    return np.round(offset * 1000.0).astype("int64") + base_us * 1000


def _categorical(codes: np.ndarray, labels: list[str], *, used_only: bool = False) -> pd.Categorical:
    """Codes into ``labels`` as a Categorical with sorted, distinct categories, as ``pd.Categorical(values)`` has.

    ``used_only``: only the labels that rows use (``remove_unused_categories``).
    """
    present = np.unique(codes) if used_only else range(len(labels))
    categories = sorted({labels[i] for i in present})
    where = {label: i for i, label in enumerate(categories)}
    remap = np.array([where.get(label, -1) for label in labels], dtype="int32")
    return pd.Categorical.from_codes(remap[codes] if len(codes) else np.empty(0, "int32"),
                                     categories=pd.Index(categories, dtype="str" if categories else object))


def _events_table(columns: Any, base_us: int) -> tuple[pd.DataFrame, DataQuality]:
    chunks = columns.chunks["events"]
    names = list(columns.names)
    name_codes = _joined(chunks, "name", "int32")
    raw_cats = [CATEGORY_ALIASES.get(c, c) for c in columns.cats]
    cat_labels = raw_cats + ["user_annotation"]
    cat_codes = _joined(chunks, "cat", "int32")
    # The collector's labels are annotations even when recorded with the fast
    # record function, which Kineto files as cpu_op.
    own = np.array([n.startswith(OWN_LABEL_PREFIX) for n in names], dtype=bool)
    if own.any() and "cpu_op" in raw_cats:
        is_cpu_op = np.array([c == "cpu_op" for c in raw_cats], dtype=bool)
        cat_codes = np.where(is_cpu_op[cat_codes] & own[name_codes], len(raw_cats), cat_codes)
    is_trace = np.array([c == "trace" for c in cat_labels], dtype=bool)[cat_codes] if len(cat_codes) \
        else np.zeros(0, bool)
    ts_us = _joined(chunks, "ts", "float64")
    dur_us = _joined(chunks, "dur", "float64")
    inside = check_span(ts_us, dur_us, is_trace)
    kind_labels = [*cat_labels, STEP_KIND]
    is_step = np.array([n.startswith(STEP_PREFIX) for n in names], dtype=bool)
    kinds = np.where(is_step[name_codes], len(cat_labels), cat_codes) if len(cat_codes) else cat_codes
    outside = kinds[~inside & ~is_trace]
    keep = np.flatnonzero(~is_trace & inside)
    ts = _to_ns(ts_us[keep], base_us)
    dur = np.maximum(_to_ns(dur_us[keep], 0), 0)
    end = ts + dur
    order = np.lexsort((-end, ts))
    rows = keep[order]
    data: dict[str, Any] = {
        "cat": _categorical(cat_codes[rows], cat_labels, used_only=True),
        "name": _categorical(name_codes[rows], names),
        "ts": ts[order],
        "dur": dur[order],
        "pid": _joined(chunks, "pid", "int64")[rows],
        "tid": _joined(chunks, "tid", "int64")[rows],
    }
    for column, (_, kind) in columns.args_spec.items():
        if kind == "str":
            data[column] = _categorical(_joined(chunks, column, "int32")[rows], list(columns.texts[column]))
        else:
            data[column] = _joined(chunks, column, {"int": "int64", "float": "float64"}[kind])[rows]
    if "stream" in data:
        data["stream"][data["stream"] == _NO_STREAM[0]] = -1
    for column in INT32_COLUMNS:
        if column in data:
            data[column] = to_int32(data[column])
    data["end"] = end[order]
    checked = {c: data[c] for c in ("ts", "dur", "pid", "tid", "device", "stream", "correlation", "external_id")
               if c in data}
    checked.update(name=name_codes[rows], cat=cat_codes[rows])
    quality = check_events(checked, kinds=kinds[rows], labels=kind_labels,
                           raw={"ts": ts_us[rows], "dur": dur_us[rows]}, outside=outside,
                           missing_ts=columns.missing_ts)
    return pd.DataFrame(data, copy=False), quality  # the arrays are ours: no second copy of every column


def _memory_table(columns: Any, base_us: int) -> pd.DataFrame:
    from advisor.load.kineto_pieces import MEMORY_ARGS

    chunks = columns.chunks["memory"]
    frame = pd.DataFrame({"ts": _to_ns(_joined(chunks, "ts", "float64"), base_us),
                          **{c: _joined(chunks, c, "int64") for c in MEMORY_ARGS}})
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)


def _flow_table(columns: Any, base_us: int) -> pd.DataFrame:
    chunks = columns.chunks["flows"]
    return pd.DataFrame({
        "cat": _categorical(_joined(chunks, "cat", "int32"), list(columns.flow_cats)),
        "ph": pd.Categorical(_joined(chunks, "ph", "object")),
        "id": _joined(chunks, "id", "int64"),
        "ts": _to_ns(_joined(chunks, "ts", "float64"), base_us),
        "pid": _joined(chunks, "pid", "int64"),
        "tid": _joined(chunks, "tid", "int64"),
    })
