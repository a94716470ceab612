"""Nsight Systems SQLite export (``nsys export --type sqlite``) -> tables.

One :class:`NsysTrace` per file. It reads exports of Nsight Systems 2022.x to
2025.x (export schema 2.9 to 3.x) and hides their differences:

- names are ids into ``StringIds`` (kernel, API and thread names; NVTX text of
  registered strings) or inline text (NVTX ``text``, older ``name`` columns);
  both come out as plain strings;
- the metadata table is ``EXPORT_META_DATA`` (up to 2024) or
  ``META_DATA_EXPORT`` (2025);
- ``ENUM_*`` tables (memcpy kinds, memory kinds, sync types, event classes)
  are used when present, else the same numbering, built in here;
- ``globalTid`` / ``globalPid`` pack the process and thread ids:
  ``pid = (gtid >> 24) & 0xFFFFFF``, ``tid = gtid & 0xFFFFFF``;
- a table the capture did not produce is absent from the file (lazy export):
  its frame is empty, and :meth:`NsysTrace.has` says so.

Tables (all times int64 nanoseconds on the export's clock, ``dur = end - start``):

=========  ===================================================================
kernels    start end dur device context stream correlation pid name full_name
           grid block registers shared_bytes
memcpy     start end dur device stream correlation pid bytes kind src_memory
           dst_memory  (kind: HtoD, DtoH, DtoD, HtoH, PtoP, ...; memory:
           Pageable, Pinned, Device, Managed, ...)
memset     start end dur device stream correlation pid bytes memory
runtime    start end dur pid tid correlation name api layer return_value
           callchain  (CUDA runtime and driver calls; ``name`` as recorded,
           ``cudaMemcpy_v3020``; ``api`` without the version, ``cudaMemcpy``;
           layer: runtime | driver). Backtrace rows (event class 67) are not
           calls: they are folded into ``callchain`` of the call they belong to.
sync       start end dur device stream correlation pid sync_type
           (Event sync, Stream sync, Context sync, Stream wait sync, Unknown)
nvtx       start end dur pid tid name domain kind  (kind: range | mark;
           push/pop and start/end ranges, and marks)
osrt       start end dur pid tid name return_value nesting
threads    pid tid name process
=========  ===================================================================

Rows whose times cannot be used are never dropped silently: a row without a
numeric ``start`` is left out, one without ``end`` or with ``end`` before
``start`` is counted as 0 long, and ``NsysTrace.notes`` says how many of
which table (a *data quality* note in the report).

The loader knows file formats and versions; it knows nothing about performance.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.errors import TraceError
from advisor.load.nsys_schema import (
    EVENT_CLASSES,
    MEMCPY_KINDS,
    MEMORY_KINDS,
    NVTX_TYPE_NAMES,
    SYNC_TYPES,
    TEXT_COLUMNS,
    event_layer,
    memcpy_kind_of_enum,
    split_global_id,
    unversioned,
)

__all__ = ["TABLES", "NsysTrace", "is_nsys_sqlite", "load_nsys_sqlite", "split_global_id"]

TABLES = ("kernels", "memcpy", "memset", "runtime", "sync", "nvtx", "osrt", "threads")

#: export table -> our table
SOURCES = {
    "kernels": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "runtime": "CUPTI_ACTIVITY_KIND_RUNTIME",
    "sync": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "nvtx": "NVTX_EVENTS",
    "osrt": "OSRT_API",
    "threads": "ThreadNames",
}

@dataclass
class NsysTrace:
    """The tables of one Nsight Systems export."""

    path: Path
    tables: dict[str, pd.DataFrame]
    present: set[str]
    meta: dict[str, Any] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    #: data-quality notes: rows whose times could not be used as recorded, per table, with what was done
    notes: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> pd.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(name)

    def has(self, table: str) -> bool:
        """The export has this table with at least one row."""
        frame = self.tables.get(table)
        return frame is not None and len(frame) > 0

    @property
    def version(self) -> str:
        return str(self.meta.get("product_version", ""))

    @property
    def schema(self) -> str:
        return str(self.meta.get("schema_version", ""))

    def counts(self) -> dict[str, int]:
        return {name: len(frame) for name, frame in self.tables.items()}


def is_nsys_sqlite(path: Path) -> bool:
    """A SQLite file with the tables an nsys export always has."""
    try:
        with path.open("rb") as fh:
            if fh.read(16) != b"SQLite format 3\x00":
                return False
    except OSError:
        return False
    try:
        con = _connect(path)
    except TraceError:
        return False
    try:
        names = _table_names(con)
    finally:
        con.close()
    return "StringIds" in names and bool({"EXPORT_META_DATA", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME"} & names)


def load_nsys_sqlite(path: Path) -> NsysTrace:
    """Read an nsys SQLite export; :class:`TraceError` when it is not one."""
    if not path.is_file():
        raise TraceError(path, "no such file")
    con = _connect(path)
    try:
        reader = _Reader(con, path)
        tables = {
            "kernels": reader.kernels(),
            "memcpy": reader.memcpy(),
            "memset": reader.memset(),
            "runtime": reader.runtime(),
            "sync": reader.sync(),
            "nvtx": reader.nvtx(),
            "osrt": reader.osrt(),
            "threads": reader.threads(),
        }
        present = {ours for ours, theirs in SOURCES.items() if theirs in reader.names}
        return NsysTrace(path, tables, present, reader.meta(), reader.gpus(), reader.notes())
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"could not be read as an Nsight Systems export ({exc})") from None
    finally:
        con.close()


#: an int64 column holds nothing beyond this; larger (or REAL 1e300) is not a time or an id
_MAX_INT = 2**62


def _numbers(values: pd.Series) -> pd.Series:
    """Numbers as float, NaN for text, NULL and what no int64 column can hold."""
    numeric = pd.to_numeric(values, errors="coerce")
    return numeric.where(numeric.abs() < _MAX_INT)


def _connect(path: Path) -> sqlite3.Connection:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.execute("select count(*) from sqlite_master").fetchone()
        return con
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"is not a SQLite database ({exc}); export the report with "
                               "`nsys export --type sqlite`") from None


def _table_names(con: sqlite3.Connection) -> set[str]:
    return {row[0] for row in con.execute("select name from sqlite_master where type in ('table', 'view')")}


class _Reader:
    """Reads the export's tables one by one, resolving names and enums."""

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self.con = con
        self.path = path
        self.names = _table_names(con)
        if "StringIds" not in self.names:
            raise TraceError(path, "has no StringIds table, so it is not an Nsight Systems SQLite export; "
                                   "make one with `nsys export --type sqlite REPORT.nsys-rep`")
        self.strings = dict(con.execute("select id, value from StringIds").fetchall())
        #: (table, problem) -> rows, and rows per table: what could not be used as recorded (never dropped silently)
        self.problems: dict[tuple[str, str], int] = {}
        self.rows: dict[str, int] = {}

    # helpers ---------------------------------------------------------------------
    def columns(self, table: str) -> list[str]:
        return [row[1] for row in self.con.execute(f"pragma table_info([{table}])")]

    def frame(self, table: str, wanted: list[str]) -> pd.DataFrame | None:
        """The wanted columns that exist, or None when the table is absent."""
        if table not in self.names:
            return None
        have = self.columns(table)
        cols = [c for c in wanted if c in have]
        query = f"select {', '.join(f'[{c}]' for c in cols)} from [{table}]"
        return pd.read_sql_query(query, self.con)

    def text(self, frame: pd.DataFrame, *columns: str) -> pd.Series:
        """The first of ``columns`` present, as strings: ids go through StringIds, text stays text."""
        out = pd.Series([None] * len(frame), index=frame.index, dtype=object)
        for col in columns:
            if col not in frame:
                continue
            values = frame[col]
            numeric = pd.to_numeric(values, errors="coerce")
            resolved = numeric.map(self.strings).where(numeric.notna(), values.where(values.map(
                lambda v: isinstance(v, str))))
            out = out.where(out.notna(), resolved)
        return out.fillna("").astype(str)

    def enum(self, table: str, fallback: dict[int, str]) -> dict[int, str]:
        if table not in self.names:
            return fallback
        rows = self.con.execute(f"select * from [{table}]").fetchall()
        out = {}
        for row in rows:
            ident, name = int(row[0]), str(row[1])
            label = str(row[2]) if len(row) > 2 and row[2] is not None else name
            if table == "ENUM_CUDA_MEMCPY_OPER":
                label = memcpy_kind_of_enum(name, label)
            out[ident] = label
        return out

    def times(self, frame: pd.DataFrame, table: str, instants: pd.Series | None = None) -> pd.DataFrame:
        """start, end, dur of each row; rows whose times cannot be used are counted (see :meth:`kept`).

        ``instants``: the rows that have no end by nature (NVTX marks).
        """
        start = _numbers(frame["start"]) if "start" in frame else pd.Series(np.nan, index=frame.index)
        end = _numbers(frame["end"]) if "end" in frame else pd.Series(np.nan, index=frame.index)
        placed = start.notna()
        self._count(table, "`start` missing or not a number (left out)", ~placed, len(frame))
        ranged = placed if instants is None else placed & ~instants
        self._count(table, "`end` missing or not a number (counted as 0 long)", ranged & end.isna(), len(frame))
        backwards = placed & end.notna() & (end < start)
        self._count(table, "`end` before `start` (counted as 0 long)", backwards, len(frame))
        start = start.fillna(0).astype("int64")
        end = end.where(end.notna() & ~backwards, start).astype("int64")
        return pd.DataFrame({"start": start, "end": end, "dur": end - start, "_placed": placed}, index=frame.index)

    @staticmethod
    def kept(out: pd.DataFrame) -> pd.DataFrame:
        """The rows that have a place in time."""
        return out[out["_placed"]] if "_placed" in out else out

    def _count(self, table: str, problem: str, mask: pd.Series, rows: int) -> None:
        n = int(mask.sum())
        if n:
            self.problems[(table, problem)] = self.problems.get((table, problem), 0) + n
            self.rows[table] = rows

    def notes(self) -> list[str]:
        """The data-quality notes: per table, the rows whose times could not be used as recorded."""
        return [f"data quality: {SOURCES[table]}: {n:,} of {self.rows[table]:,} rows: {problem}"
                for (table, problem), n in self.problems.items()]

    @staticmethod
    def ints(frame: pd.DataFrame, col: str, default: int = -1) -> pd.Series:
        if col not in frame:
            return pd.Series(default, index=frame.index, dtype="int64")
        return _numbers(frame[col]).fillna(default).astype("int64")

    @staticmethod
    def empty(columns: list[str]) -> pd.DataFrame:
        """A table with no rows and the right column types."""
        return pd.DataFrame({c: pd.Series(dtype=object if c in TEXT_COLUMNS else "int64") for c in columns})

    # tables ------------------------------------------------------------------------
    def kernels(self) -> pd.DataFrame:
        cols = ["start", "end", "dur", "device", "context", "stream", "correlation", "pid", "name", "full_name",
                "grid", "block", "registers", "shared_bytes"]
        raw = self.frame(SOURCES["kernels"], [
            "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
            "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
            "staticSharedMemory", "dynamicSharedMemory"])
        if raw is None or raw.empty:
            return self.empty(cols)
        out = self.times(raw, "kernels")
        self._device_cols(out, raw)
        out["context"] = self.ints(raw, "contextId")
        out["name"] = self.text(raw, "shortName", "demangledName")
        out["full_name"] = self.text(raw, "demangledName", "shortName")
        out["grid"] = [f"{x},{y},{z}" for x, y, z in zip(self.ints(raw, "gridX"), self.ints(raw, "gridY"),
                                                          self.ints(raw, "gridZ"))]
        out["block"] = [f"{x},{y},{z}" for x, y, z in zip(self.ints(raw, "blockX"), self.ints(raw, "blockY"),
                                                           self.ints(raw, "blockZ"))]
        out["registers"] = self.ints(raw, "registersPerThread")
        out["shared_bytes"] = self.ints(raw, "staticSharedMemory", 0) + self.ints(raw, "dynamicSharedMemory", 0)
        return self.kept(out)[cols].sort_values("start", kind="stable").reset_index(drop=True)

    def _device_cols(self, out: pd.DataFrame, raw: pd.DataFrame) -> None:
        out["device"] = self.ints(raw, "deviceId")
        out["stream"] = self.ints(raw, "streamId")
        out["correlation"] = self.ints(raw, "correlationId")
        out["pid"] = split_global_id(raw["globalPid"])[0] if "globalPid" in raw else -1

    def memcpy(self) -> pd.DataFrame:
        cols = ["start", "end", "dur", "device", "stream", "correlation", "pid", "bytes", "kind", "src_memory",
                "dst_memory"]
        raw = self.frame(SOURCES["memcpy"], ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                              "bytes", "copyKind", "srcKind", "dstKind"])
        if raw is None or raw.empty:
            return self.empty(cols)
        kinds = self.enum("ENUM_CUDA_MEMCPY_OPER", MEMCPY_KINDS)
        memory = self.enum("ENUM_CUDA_MEM_KIND", MEMORY_KINDS)
        out = self.times(raw, "memcpy")
        self._device_cols(out, raw)
        out["bytes"] = self.ints(raw, "bytes", 0)
        out["kind"] = self.ints(raw, "copyKind", 0).map(kinds).fillna("Unknown")
        out["src_memory"] = self.ints(raw, "srcKind", 7).map(memory).fillna("Unknown")
        out["dst_memory"] = self.ints(raw, "dstKind", 7).map(memory).fillna("Unknown")
        return self.kept(out)[cols].sort_values("start", kind="stable").reset_index(drop=True)

    def memset(self) -> pd.DataFrame:
        cols = ["start", "end", "dur", "device", "stream", "correlation", "pid", "bytes", "memory"]
        raw = self.frame(SOURCES["memset"], ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                              "bytes", "memKind"])
        if raw is None or raw.empty:
            return self.empty(cols)
        memory = self.enum("ENUM_CUDA_MEM_KIND", MEMORY_KINDS)
        out = self.times(raw, "memset")
        self._device_cols(out, raw)
        out["bytes"] = self.ints(raw, "bytes", 0)
        out["memory"] = self.ints(raw, "memKind", 7).map(memory).fillna("Unknown")
        return self.kept(out)[cols].sort_values("start", kind="stable").reset_index(drop=True)

    def runtime(self) -> pd.DataFrame:
        cols = ["start", "end", "dur", "pid", "tid", "correlation", "name", "api", "layer", "return_value", "callchain"]
        raw = self.frame(SOURCES["runtime"], ["start", "end", "eventClass", "globalTid", "correlationId", "nameId",
                                               "name", "returnValue", "callchainId"])
        if raw is None or raw.empty:
            return self.empty(cols)
        classes = {k: event_layer(v) for k, v in self.enum("ENUM_NSYS_EVENT_CLASS", {}).items()} or EVENT_CLASSES
        layer = self.ints(raw, "eventClass", 0).map(lambda c: classes.get(c, EVENT_CLASSES.get(c, "other")))
        out = self.times(raw, "runtime")
        out["pid"], out["tid"] = split_global_id(raw["globalTid"])
        out["correlation"] = self.ints(raw, "correlationId")
        out["name"] = self.text(raw, "nameId", "name")
        out["api"] = unversioned(out["name"])
        out["layer"] = layer
        out["return_value"] = self.ints(raw, "returnValue", 0)
        out["callchain"] = self.ints(raw, "callchainId")
        out = self.kept(out)
        calls = out[out["layer"] != "backtrace"].copy()
        traces = out[(out["layer"] == "backtrace") & (out["callchain"] >= 0)]
        if len(traces):
            # 2022.x writes the backtrace of a call as a second row with the same correlation id.
            chain = traces.drop_duplicates(["pid", "correlation"]).set_index(["pid", "correlation"])["callchain"]
            keys = pd.MultiIndex.from_arrays([calls["pid"], calls["correlation"]])
            found = pd.Series(chain.reindex(keys).to_numpy(), index=calls.index)
            calls["callchain"] = calls["callchain"].where(calls["callchain"] >= 0, found.fillna(-1).astype("int64"))
        return calls[cols].sort_values("start", kind="stable").reset_index(drop=True)

    def sync(self) -> pd.DataFrame:
        cols = ["start", "end", "dur", "device", "stream", "correlation", "pid", "sync_type"]
        raw = self.frame(SOURCES["sync"], ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                            "syncType"])
        if raw is None or raw.empty:
            return self.empty(cols)
        types = self.enum("ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES)
        out = self.times(raw, "sync")
        self._device_cols(out, raw)
        out["sync_type"] = self.ints(raw, "syncType", 0).map(types).fillna("Unknown")
        return self.kept(out)[cols].sort_values("start", kind="stable").reset_index(drop=True)

    def nvtx(self) -> pd.DataFrame:
        cols = ["start", "end", "dur", "pid", "tid", "name", "domain", "kind"]
        raw = self.frame(SOURCES["nvtx"], ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"])
        if raw is None or raw.empty:
            return self.empty(cols)
        types = self._nvtx_types()
        etype = self.ints(raw, "eventType")
        raw = raw.assign(_type=etype, _text=self.text(raw, "text", "textId"))
        domains = raw[raw["_type"] == types["NvtxDomainCreate"]]
        domain_names = dict(zip(self.ints(domains, "domainId", 0), domains["_text"]))
        kept = raw[raw["_type"].isin(types["ranges"] | types["marks"])]
        out = self.times(kept, "nvtx", instants=kept["_type"].isin(types["marks"]))
        out["pid"], out["tid"] = split_global_id(kept["globalTid"])
        out["name"] = kept["_text"]
        out["domain"] = self.ints(kept, "domainId", 0).map(domain_names).fillna("")
        out["kind"] = np.where(kept["_type"].isin(types["ranges"]), "range", "mark")
        return self.kept(out)[cols].sort_values("start", kind="stable").reset_index(drop=True)

    def _nvtx_types(self) -> dict[str, Any]:
        """NVTX event type ids, from ENUM_NSYS_EVENT_TYPE when the export has it."""
        ids = dict(NVTX_TYPE_NAMES)
        if "ENUM_NSYS_EVENT_TYPE" in self.names:
            for ident, name in self.con.execute("select id, name from ENUM_NSYS_EVENT_TYPE"):
                if name in ids:
                    ids[name] = int(ident)
        return {
            "ranges": {ids[n] for n in ("NvtxPushPopRange", "NvtxStartEndRange", "NvtxtPushPopRange",
                                        "NvtxtStartEndRange")},
            "marks": {ids["NvtxMark"], ids["NvtxtMark"]},
            "NvtxDomainCreate": ids["NvtxDomainCreate"],
        }

    def osrt(self) -> pd.DataFrame:
        cols = ["start", "end", "dur", "pid", "tid", "name", "return_value", "nesting"]
        raw = self.frame(SOURCES["osrt"], ["start", "end", "globalTid", "nameId", "returnValue", "nestingLevel"])
        if raw is None or raw.empty:
            return self.empty(cols)
        out = self.times(raw, "osrt")
        out["pid"], out["tid"] = split_global_id(raw["globalTid"])
        out["name"] = self.text(raw, "nameId")
        out["return_value"] = self.ints(raw, "returnValue", 0)
        out["nesting"] = self.ints(raw, "nestingLevel", 0)
        return self.kept(out)[cols].sort_values("start", kind="stable").reset_index(drop=True)

    def threads(self) -> pd.DataFrame:
        cols = ["pid", "tid", "name", "process"]
        raw = self.frame(SOURCES["threads"], ["globalTid", "nameId"])
        if raw is None or raw.empty:
            return self.empty(cols)
        out = pd.DataFrame(index=raw.index)
        out["pid"], out["tid"] = split_global_id(raw["globalTid"])
        out["name"] = self.text(raw, "nameId")
        processes = self.frame("PROCESSES", ["globalPid", "pid", "name"])
        names = {} if processes is None else dict(zip(self.ints(processes, "pid"), processes["name"].astype(str)))
        out["process"] = out["pid"].map(names).fillna("")
        return out[cols].drop_duplicates(["pid", "tid"], keep="last").reset_index(drop=True)

    # metadata ----------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        raw: dict[str, str] = {}
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if table in self.names:
                raw.update({str(k): str(v) for k, v in self.con.execute(f"select name, value from [{table}]")})
        out: dict[str, Any] = {
            "product_version": raw.get("EXPORT_PRODUCT_VERSION", ""),
            "schema_version": raw.get("EXPORT_SCHEMA_VERSION", ""),
            "has_enum_tables": any(n.startswith("ENUM_") for n in self.names),
        }
        if "TARGET_INFO_SESSION_START_TIME" in self.names:
            cols = self.columns("TARGET_INFO_SESSION_START_TIME")
            row = self.con.execute("select * from TARGET_INFO_SESSION_START_TIME").fetchone()
            if row:
                out["session_start"] = dict(zip(cols, row))
        if "ANALYSIS_DETAILS" in self.names:
            cols = self.columns("ANALYSIS_DETAILS")
            row = self.con.execute("select * from ANALYSIS_DETAILS").fetchone()
            if row:
                details = dict(zip(cols, row))
                out["duration_ns"] = int(details.get("duration") or 0)
        return out

    def gpus(self) -> list[dict[str, Any]]:
        raw = self.frame("TARGET_INFO_GPU", ["id", "name", "smCount", "totalMemory", "computeMajor", "computeMinor"])
        if raw is None:
            return []
        return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in raw.to_dict("records")]
