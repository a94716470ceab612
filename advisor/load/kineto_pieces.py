"""Kineto events -> column chunks, one piece of the ``traceEvents`` array at a time.

:class:`Columns` is given pieces (``[ev, ...]`` JSON bytes, see
:mod:`advisor.load.json_stream`) and keeps, per table, one numpy array per
column and piece; :mod:`advisor.load.kineto` joins them into the tables.
No event is kept as a Python object beyond its piece.

Each piece is decoded by msgspec straight into small structs that hold only
the fields the tables use (:data:`~advisor.load.kineto_spec.ARGS`), typed: ints as
int, floats as float. Every other field and arg is skipped by the decoder
without being built. A piece whose values do not fit those types (a string
``tid``, a ``null`` stream, an arg that is a list) is decoded again with every
field untyped and converted value by value, the way the reference rules say
(:func:`to_int`, :func:`to_text`); so odd traces cost time, never correctness.

Typed pieces are turned into columns without a Python loop per column and
event: ``msgspec.structs.astuple`` gives each event's (and its args') fields
as a tuple, and ``zip(*tuples)`` transposes them into one tuple per field, which
numpy converts in C. Text columns are kept as codes into one dict per column
(the table stores them as Categoricals), so a repeated text costs an int.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
from msgspec.structs import astuple

from advisor.errors import TraceError
from advisor.load.json_stream import MalformedPiece, error_position, read_array
from advisor.load.kineto_quality import MAX_TS_US, STEP_KIND, STEP_PREFIX

__all__ = ["ARG_ATTRS", "Columns", "MEMORY_ARGS", "stream_columns", "to_int", "to_text"]

#: ``[memory]`` instant event args -> memory table column
MEMORY_ARGS: dict[str, str] = {
    "bytes": "Bytes", "total_allocated": "Total Allocated", "total_reserved": "Total Reserved",
    "device_type": "Device Type", "device_id": "Device Id", "addr": "Addr",
}
#: pieces whose column chunks are joined into one array (see ``Columns._put``)
JOIN_EVERY = 32
#: the first ts of this many events of each table sets the integer µs origin (see ``Columns.base_us``)
BASE_SAMPLE = 1000
#: sampled starts farther than this from the sample's median do not set the origin (11.6 days, in µs)
BASE_SPREAD_US = 1e12
_INT_IN_TEXT = re.compile(r"(0x[0-9a-fA-F]+|-?\d+)")
UNSET = msgspec.UNSET
#: "this arg was absent" for typed int args read from several keys
ABSENT_INT = -(1 << 63)


def _struct_types(args_spec: dict[str, tuple[tuple[str, ...], str]]
                  ) -> tuple[type, type, type, type, dict[str, tuple[str, ...]]]:
    """The typed and the untyped event and args structs, and column -> arg attributes in order of preference."""
    attrs: dict[str, tuple[str, ...]] = {}
    typed: list[tuple[str, Any, Any]] = []
    loose: list[tuple[str, Any, Any]] = []
    kinds = {"int": int, "float": float, "str": Any}
    for column, (keys, kind) in args_spec.items():
        names = tuple(column if i == 0 else f"{column}__{i}" for i in range(len(keys)))
        attrs[column] = names
        for attr, key in zip(names, keys):
            # Typed defaults mark "absent": -1 is also the table's "none" for a single key; with
            # several keys (the first present wins) ints need a value JSON never holds in practice,
            # and floats NaN, which JSON cannot hold.
            default = {"int": -1 if len(keys) == 1 else ABSENT_INT, "float": math.nan, "str": ""}[kind]
            if kind == "str" and len(keys) > 1:
                default = UNSET
            typed.append((attr, kinds[kind], msgspec.field(default=default, name=key)))
            loose.append((attr, Any, msgspec.field(default=UNSET, name=key)))
    for column, key in MEMORY_ARGS.items():
        typed.append((f"mem_{column}", int, msgspec.field(default=-1, name=key)))
        loose.append((f"mem_{column}", Any, msgspec.field(default=UNSET, name=key)))
    # gc=False: the structs hold only scalars and lists, never cycles, and millions of
    # GC-tracked objects would make every collection walk them all.
    typed_args = msgspec.defstruct("TypedArgs", typed, gc=False)
    loose_args = msgspec.defstruct("LooseArgs", loose, gc=False)
    typed_event = msgspec.defstruct("TypedEvent", [
        ("ph", str, ""), ("cat", str, ""), ("name", str, ""), ("pid", int | str, -1), ("tid", int | str, -1),
        # dur NaN when absent (JSON cannot hold NaN): the table says 0, the data-quality check counts it
        ("ts", float | msgspec.UnsetType, UNSET), ("dur", float, math.nan), ("id", int | str | msgspec.UnsetType, UNSET),
        ("args", typed_args | None, None),
    ], gc=False)
    loose_event = msgspec.defstruct("LooseEvent", [
        (name, Any, UNSET) for name in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id")
    ] + [("args", loose_args | None, None)], gc=False)
    return typed_event, loose_event, typed_args, loose_args, attrs


def to_int(value: Any) -> int:
    """An int from a number or from the first integer in a text (``"stream 7"``, ``"0x1f"``); -1 otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) if math.isfinite(value) else -1
    if isinstance(value, str):
        m = _INT_IN_TEXT.search(value)
        if m:
            text = m.group(1)
            return int(text, 16) if text.startswith("0x") else int(text)
    return -1


def to_text(value: Any) -> str:
    """A string arg as it is; any other value as compact JSON text; missing as ""."""
    if value is None or value is UNSET:
        return ""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits, which orjson does not write
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int64(values: list[Any]) -> np.ndarray:
    """int64 array of Python ints; one outside int64 (a 64-bit "none" id) becomes -1."""
    try:
        return np.array(values, dtype="int64")
    except OverflowError:
        return np.array([v if -(1 << 63) <= v < (1 << 63) else -1 for v in values], dtype="int64")


def _overlapping(events: list[Any], lo: float, hi: float) -> list[Any]:
    """The events with a numeric start that overlap [lo, hi) (an instant at lo or later counts)."""
    out = []
    for e in events:
        ts = e.ts
        if _is_num(ts) and ts < hi:
            dur = e.dur if _is_num(e.dur) else 0
            if ts >= lo or ts + dur > lo:
                out.append(e)
    return out


def _codes(values: Any, table: dict[str, int]) -> np.ndarray:
    """int32 codes of ``values`` in ``table``; a value not yet there gets the next code."""
    setdefault = table.setdefault
    empty = values.count("")  # a C loop; most text args are absent ("") on most events
    if empty * 2 > len(values):
        out = np.full(len(values), setdefault("", len(table)), dtype="int32")
        if empty < len(values):
            given = np.flatnonzero(np.array(values, dtype=object) != "")
            out[given] = [setdefault(values[i], len(table)) for i in given.tolist()]
        return out
    return np.array([setdefault(v, len(table)) for v in values], dtype="int32")


def _float_or_nan(values: list[Any]) -> np.ndarray:
    """Numbers as float64; anything else NaN (a timestamp given as text is parsed, as pandas would)."""
    try:
        out = np.array(values, dtype="float64")
        if out.ndim == 1:  # lists of numbers would make a table of them
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    import pandas as pd

    series = pd.Series([_finite_or_none(v) if isinstance(v, (int, float, str)) else None for v in values],
                       dtype="object")
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64")


def _finite_or_none(value: Any) -> Any:
    """A number pandas can hold as a float (an int beyond float range is none), a text, or None."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 1023:
        return None
    return value


class Columns:
    """Column chunks of the three tables, filled piece by piece; see the module docstring."""

    def __init__(self, args_spec: dict[str, tuple[tuple[str, ...], str]], window: Any = None) -> None:
        """``window``: a :class:`~advisor.load.kineto_window.Window`; only the events that overlap it are kept."""
        self.args_spec = args_spec
        self.window = window
        self._pieces_seen = 0
        typed_event, loose_event, typed_args, loose_args, self.arg_attrs = _struct_types(args_spec)
        self._typed = msgspec.json.Decoder(list[typed_event])
        self._loose = msgspec.json.Decoder(list[loose_event])
        self._loose_type = list[loose_event]
        self._typed_empty = typed_args()
        self._loose_empty = loose_args()
        #: attribute -> its position in ``astuple`` of an args struct
        self._arg_index = {name: i for i, name in enumerate(typed_args.__struct_fields__)}
        #: table -> column -> list of per-piece arrays (or lists, for text columns)
        self.chunks: dict[str, dict[str, list[Any]]] = {"events": {}, "memory": {}, "flows": {}}
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.flow_cats: dict[str, int] = {}
        #: text column -> text -> code (the order of first appearance)
        self.texts: dict[str, dict[str, int]] = {c: {} for c, (_, kind) in args_spec.items() if kind == "str"}
        #: table -> the ts of its first BASE_SAMPLE events (None where not a number), for ``base_us``
        self.sampled: dict[str, list[float | None]] = {"events": [], "memory": [], "flows": []}
        #: a chunk this long or shorter is a piece's own (not yet joined)
        self._small = 1 << 16
        #: kind -> complete events without ts (left out of the tables; see advisor.load.kineto_quality)
        self.missing_ts: dict[str, int] = {}
        #: trace events decoded (of any kind)
        self.events_seen = 0

    # decoding -----------------------------------------------------------------
    def add_piece(self, piece: bytes) -> int:
        """Decode one ``[ev, ...]`` piece into column chunks; returns its number of events."""
        index = self._pieces_seen
        if self.window is not None and index in self.window.skip:
            from advisor.load.kineto_window import piece_key

            if piece_key(piece) == self.window.skip[index]:  # the first pass found no event of the window in it
                self._pieces_seen += 1
                return 0
        try:
            events = self._typed.decode(piece)
            typed = True
        except msgspec.ValidationError:
            # The typed decoder can stop at an odd value before it reaches broken JSON further on: the
            # untyped decode still has to say that the piece is not JSON (the stream then cuts it again).
            try:
                events = self._decode_loose(piece)
            except (msgspec.DecodeError, orjson.JSONDecodeError) as exc:
                raise MalformedPiece(str(exc), error_position(str(exc))) from None
            typed = False
        except msgspec.DecodeError as exc:
            raise MalformedPiece(str(exc), error_position(str(exc))) from None
        self._pieces_seen += 1
        self._add(events, typed)
        return len(events)

    def add_objects(self, objects: list[Any]) -> None:
        """The same from already parsed JSON (a document that could not be streamed)."""
        self._add(self._convert_loose(objects), False)

    def _decode_loose(self, piece: bytes) -> list[Any]:
        try:
            return self._loose.decode(piece)
        except msgspec.ValidationError:  # an element that is not an object, or args that are not one
            return self._convert_loose(orjson.loads(piece))

    def _convert_loose(self, objects: list[Any]) -> list[Any]:
        clean = []
        for ev in objects:
            if isinstance(ev, dict):
                if "args" in ev and not isinstance(ev["args"], dict):
                    ev = {k: v for k, v in ev.items() if k != "args"}
                clean.append(ev)
        return msgspec.convert(clean, self._loose_type, strict=True)

    def _add(self, events: list[Any], typed: bool) -> None:
        self.events_seen += len(events)
        complete = [e for e in events if e.ph == "X" and e.ts is not UNSET]
        rest = [e for e in events if e.ph != "X"] if len(complete) < len(events) else []
        if len(complete) + len(rest) < len(events):  # complete events without ts: left out, and counted
            self._count_missing_ts(events)
        memory = [e for e in rest if (e.ph == "i" or e.ph == "I") and e.name == "[memory]"]
        flows = [e for e in rest if (e.ph == "s" or e.ph == "f") and e.id is not UNSET]
        if self.window is not None:
            lo, hi = self.window.lo_us, self.window.hi_us
            complete, memory, flows = (_overlapping(group, lo, hi) for group in (complete, memory, flows))
        for table, group in (("events", complete), ("memory", memory), ("flows", flows)):
            self._sample_ts(table, group)
        if complete:
            self._add_complete(complete, typed)
        if memory:
            self._add_memory(memory, typed)
        if flows:
            self._add_flows(flows, typed)

    def _count_missing_ts(self, events: list[Any]) -> None:
        from advisor.load.kineto import CATEGORY_ALIASES

        for e in events:
            if e.ph == "X" and e.ts is UNSET:
                cat = str(e.cat) if e.cat is not UNSET and e.cat else ""
                name = "" if e.name is UNSET else str(e.name)
                kind = STEP_KIND if name.startswith(STEP_PREFIX) else CATEGORY_ALIASES.get(cat, cat) or "(no category)"
                if kind != "trace":  # the profiler's own range is not an event of the analysis
                    self.missing_ts[kind] = self.missing_ts.get(kind, 0) + 1

    def _sample_ts(self, table: str, group: list[Any]) -> None:
        """Keep the ts of the first BASE_SAMPLE events of each table (for ``base_us``)."""
        sampled = self.sampled[table]
        take = BASE_SAMPLE - len(sampled)
        if take > 0 and group:
            sampled.extend(e.ts if _is_num(e.ts) else None for e in group[:take])

    @property
    def base_us(self) -> int:
        """An integer µs origin near the trace's start, so that the ns conversion keeps float precision.

        The earliest sampled start, of those near the sample's median: one absurd ``ts`` among the first
        events must not move the origin of all the others (it is left out as outside the span).
        """
        sample = np.array([t for ts in self.sampled.values() for t in ts if t is not None], dtype="float64")
        sample = sample[np.isfinite(sample) & (np.abs(sample) < MAX_TS_US)]
        if not len(sample):
            return 0
        near = sample[np.abs(sample - np.median(sample)) <= BASE_SPREAD_US]
        return int(math.floor(near.min()))

    def _put(self, table: str, column: str, values: Any) -> None:
        parts = self.chunks[table].setdefault(column, [])
        parts.append(values)
        # Join each column's chunks every JOIN_EVERY pieces: a few big arrays rather than thousands of small ones
        # interleaved on the heap with each piece's temporaries, which leaves it fragmented and RSS high.
        tail = parts[-JOIN_EVERY:]
        if len(tail) == JOIN_EVERY and all(isinstance(p, np.ndarray) and len(p) <= self._small for p in tail):
            parts[-JOIN_EVERY:] = [np.concatenate(tail)]

    @staticmethod
    def _ints(values: list[Any], typed: bool) -> np.ndarray:
        if typed and str not in set(map(type, values)):
            return _int64(values)
        return _int64([-1 if v is UNSET or v is None else to_int(v) for v in values])

    def _add_complete(self, events: list[Any], typed: bool) -> None:
        if typed:
            self._add_typed_complete(events)
            return
        put = self._put
        put("events", "ts", _float_or_nan([e.ts for e in events]))
        put("events", "dur", _float_or_nan([e.dur for e in events]))  # absent: NaN, as in the typed path
        put("events", "pid", self._ints(list(map(attrgetter("pid"), events)), typed))
        put("events", "tid", self._ints(list(map(attrgetter("tid"), events)), typed))
        raw_names = ["" if e.name is UNSET else str(e.name) for e in events]
        raw_cats = [str(e.cat) if e.cat is not UNSET and e.cat else "" for e in events]
        put("events", "name", _codes(raw_names, self.names))
        put("events", "cat", _codes(raw_cats, self.cats))
        args = [e.args if e.args is not None else self._loose_empty for e in events]
        for column, (_, kind) in self.args_spec.items():
            put("events", column, self._arg_column(args, self.arg_attrs[column], kind, column))

    def _add_typed_complete(self, events: list[Any]) -> None:
        """Events decoded into the typed structs: every field transposed at once, converted in C."""
        put = self._put
        _ph, cats, names, pids, tids, ts, dur, _id, args = zip(*map(astuple, events))
        put("events", "ts", np.array(ts, dtype="float64"))
        put("events", "dur", np.array(dur, dtype="float64"))
        put("events", "pid", self._ints(pids, True))
        put("events", "tid", self._ints(tids, True))
        put("events", "name", _codes(names, self.names))
        put("events", "cat", _codes(cats, self.cats))
        empty = self._typed_empty
        fields = list(zip(*[astuple(a if a is not None else empty) for a in args]))
        index = self._arg_index
        for column, (_, kind) in self.args_spec.items():
            attrs = self.arg_attrs[column]
            if kind == "str":
                values: Any = fields[index[attrs[0]]]
                for attr in attrs[1:]:  # the first key present wins
                    values = [v if v is not UNSET else w for v, w in zip(values, fields[index[attr]])]
                put("events", column, self._text_codes(column, values))
            else:
                put("events", column, self._typed_number([fields[index[a]] for a in attrs], kind))

    def _arg_column(self, args: list[Any], attrs: tuple[str, ...], kind: str, column: str) -> Any:
        """One column from untyped args, value by value as the reference rules say."""
        values = np.array(list(map(attrgetter(attrs[0]), args)), dtype=object)
        for attr in attrs[1:]:  # the first key present wins
            unset = values == UNSET
            if unset.any():
                values[unset] = np.array(list(map(attrgetter(attr), args)), dtype=object)[unset]
        if kind == "str":
            return self._text_codes(column, values.tolist())
        values = values.tolist()
        if kind == "int":
            return _int64([-1 if v is None or v is UNSET else to_int(v) for v in values])
        return np.array([float(v) if _is_num(v) else math.nan for v in values], dtype="float64")

    @staticmethod
    def _typed_number(values: list[tuple[Any, ...]], kind: str) -> np.ndarray:
        """An int or float column from the typed values of its keys, the first key present winning."""
        convert = _int64 if kind == "int" else (lambda v: np.array(v, dtype="float64"))
        out = convert(values[0])
        for more in values[1:]:
            absent = out == ABSENT_INT if kind == "int" else np.isnan(out)
            if not absent.any():
                break
            out[absent] = convert(more)[absent]
        if kind == "int" and len(values) > 1:
            out[out == ABSENT_INT] = -1
        return out

    def _text_codes(self, column: str, values: Any) -> np.ndarray:
        """Codes of a text column's values (non-text values as compact JSON, missing ones as "")."""
        codes = self.texts[column]
        if set(map(type, values)) <= {str}:
            return _codes(values, codes)
        return _codes([v if type(v) is str else to_text(v) for v in values], codes)

    def _add_memory(self, events: list[Any], typed: bool) -> None:
        self._put("memory", "ts", _float_or_nan([e.ts if e.ts is not UNSET else None for e in events]))
        empty = self._typed_empty if typed else self._loose_empty
        args = [e.args if e.args is not None else empty for e in events]
        for column in MEMORY_ARGS:
            values = list(map(attrgetter(f"mem_{column}"), args))
            self._put("memory", column, _int64(values) if typed else _int64([to_int(v) for v in values]))

    def _add_flows(self, events: list[Any], typed: bool) -> None:
        if typed:  # transposed at once, as complete events are
            ph, cats, _name, pids, tids, ts, _dur, ids, _args = zip(*map(astuple, events))
            self._put("flows", "cat", _codes(cats, self.flow_cats))
            self._put("flows", "ph", list(ph))
            self._put("flows", "id", self._ints(ids, True))
            self._put("flows", "ts", _float_or_nan([t if t is not UNSET else None for t in ts]))
            self._put("flows", "pid", self._ints(pids, True))
            self._put("flows", "tid", self._ints(tids, True))
            return
        raw_cats = ["" if e.cat is UNSET else str(e.cat) for e in events]
        self._put("flows", "cat", _codes(raw_cats, self.flow_cats))
        self._put("flows", "ph", [e.ph for e in events])
        self._put("flows", "id", self._ints([e.id for e in events], typed))
        self._put("flows", "ts", _float_or_nan([e.ts if e.ts is not UNSET else None for e in events]))
        self._put("flows", "pid", self._ints([e.pid for e in events], typed))
        self._put("flows", "tid", self._ints([e.tid for e in events], typed))


def stream_columns(path: Path, columns: Columns, decode: Callable[[bytes], int],
                   on_progress: Callable[[int, int], None] | None) -> dict[str, Any]:
    """Every piece of ``path``'s ``traceEvents`` array through ``decode`` (``columns.add_piece``, or a decode
    that merges into ``columns``); the document's other keys."""
    meta, pieces, whole = read_array(path, "traceEvents", decode, on_progress=on_progress)
    if pieces is None:
        return _whole_document(path, whole, columns)
    for _ in pieces:
        pass  # each piece lands in ``columns``; the keys after the array land in ``meta`` at the end
    return meta


def _whole_document(path: Path, doc: Any, columns: Columns) -> dict[str, Any]:
    """A document whose array could not be streamed: say what is wrong with it, or take it whole."""
    if not isinstance(doc, dict):
        raise TraceError(path, "is JSON but not a Kineto trace: the top level is not an object")
    raw_events = doc.get("traceEvents")
    if not isinstance(raw_events, list):
        raise TraceError(path, "is JSON but not a Kineto trace: it has no `traceEvents` list")
    columns.add_objects(raw_events)
    return {k: v for k, v in doc.items() if k != "traceEvents"}
