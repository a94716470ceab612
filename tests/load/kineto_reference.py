"""The reference Kineto loader: the simplest correct form, kept as the oracle for the fast one.

It reads the whole document with ``orjson.loads`` and builds each column with
a Python loop over the events; :mod:`advisor.load.kineto` must produce the same
tables (same columns, dtypes, values and row order) from every trace. It
shares the declarations (:data:`ARGS`, :data:`CATEGORY_ALIASES`) with the real
loader, so it checks how they are read, not what they say. ``load_reference(path, args)`` reads the
given ``args`` columns (:data:`ARGS` by default); text columns become ``pd.Categorical`` of the texts.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from advisor.load.kineto import ARGS, CATEGORY_ALIASES, INT32_COLUMNS, OWN_LABEL_PREFIX, KinetoTrace

_NO_STREAM = (4294967295, 0xFFFFFFFFFFFFFFFF)
_INT_IN_TEXT = re.compile(r"(0x[0-9a-fA-F]+|-?\d+)")


def load_reference(path: Path, args: Mapping[str, tuple[tuple[str, ...], str]] = ARGS) -> KinetoTrace:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    info = meta.get("distributedInfo")
    if isinstance(info, Mapping):
        for key in ("rank", "world_size", "backend"):
            if key in info:
                meta.setdefault(key, info[key])
    complete, instants, flows = _split(doc["traceEvents"])
    base_us = _base_us(complete, instants, flows)
    return KinetoTrace(path=path, events=_events_table(complete, base_us, args), memory=_memory_table(instants, base_us),
                       flows=_flow_table(flows, base_us), meta=meta)


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


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # beyond 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _events_table(complete: list[dict], base_us: int, args: Mapping[str, tuple[tuple[str, ...], str]]) -> pd.DataFrame:
    names = [str(ev.get("name", "")) for ev in complete]
    cats = [CATEGORY_ALIASES.get(ev.get("cat") or "", ev.get("cat") or "") for ev in complete]
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
    for column, (keys, kind) in args.items():
        raw = [_arg_value(a, keys) for a in arg_dicts]
        if kind == "int":
            columns[column] = np.array([-1 if v is None else _int(v) for v in raw], dtype="int64")
        elif kind == "float":
            columns[column] = np.array([float(v) if _is_num(v) else np.nan for v in raw], dtype="float64")
        else:
            columns[column] = pd.Categorical([_text(v) for v in raw])
    frame = pd.DataFrame(columns)
    frame.loc[frame["stream"].isin(_NO_STREAM), "stream"] = -1
    for column in INT32_COLUMNS:  # small numbers: -1 for anything outside int32
        if column in frame:
            frame[column] = [v if -(2**31) <= v < 2**31 else -1 for v in frame[column].tolist()]
            frame[column] = frame[column].astype("int32")
    frame["end"] = frame["ts"] + frame["dur"]
    frame = frame[frame["cat"] != "trace"]
    frame = frame.sort_values(["ts", "end"], ascending=[True, False], kind="stable").reset_index(drop=True)
    frame["cat"] = frame["cat"].cat.remove_unused_categories()
    return frame


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
