"""A seeded mutator of real profiler outputs: Kineto traces, Nsight Systems exports, Nsight Compute CSVs.

Each ``*_case(rng, base, folder)`` writes one damaged copy of a real file into ``folder`` and returns a
:class:`Case`: the file, what was done to it, and what an honest analysis must admit to (the complete
events the mutator left without a start or a duration, for the data-quality check). The damage is what
real files suffer and what careless tools make: files cut short, fields deleted, values of the wrong type,
events shuffled or duplicated, huge numbers, names with Unicode, Rich markup, HTML and template syntax.
Everything follows from the ``random.Random`` given, so a failing case is reproduced by its seed.
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import random
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

#: names a trace, a kernel or a file may carry: markup for Rich, Markdown and HTML, template syntax, odd Unicode
NAMES = [
    "[bold]x[/bold]", "[/foo]", "aten::index[idx]", "[red", "<script>alert(1)</script>", "a | b | c", "`code`",
    "{{ run.path }}", "{% raw %}", "%s%d%n", "名前テスト", "\u202erevert", "e\u0301\u0301", "😀 kernel",
    "line\nbreak", "tab\there", "\\x00", "x" * 3000, "", " ", "ProfilerStep#", "ProfilerStep#abc",
    "../../etc/passwd", "C:\\path\\name", "**bold** _it_ # head", "&amp; &lt;",
]
#: values of the wrong type, or out of any sane range
ODD_VALUES: list[Any] = [None, "", "abc", "12.5", "0x1f", [], [1, 2], {}, {"a": 1}, True, False, -1, 0, 1.5,
                         1e300, -1e300, 2**64, 2**63 - 1, -(2**63), 1e18, -1e18, 1e-300]
HUGE: list[Any] = [1e300, -1e300, 2**64, 2**63 - 1, 1e18, -1e18, 1e16, -5.0]


@dataclass
class Case:
    path: Path
    what: list[str] = field(default_factory=list)
    #: complete events left without ts or dur, or with a negative dur (None: not known, e.g. after a byte cut)
    damaged: int | None = 0


# Kineto ------------------------------------------------------------------------------------------------------
#: the event categories of the GPU timeline (tied to the CPU side by ``args.correlation``)
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def kineto_slice(doc: dict[str, Any], cpu_events: int) -> dict[str, Any]:
    """A real trace cut to a window in the middle of its first ProfilerStep: ``cpu_events`` CPU-side events from
    where it launches GPU work, that work, the flows among them, and the rest of its structure (metadata, the
    profiler's range). The step keeps its name and is cut to the window: a trace of one short step.
    """
    events = doc["traceEvents"]
    step = next(e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    cpu = sorted((e for e in events if e.get("ph") == "X" and e is not step and e.get("cat") not in _GPU_CATS
                  and e.get("cat") != "Trace" and step["ts"] <= e["ts"] <= step["ts"] + step["dur"]),
                 key=lambda e: e["ts"])
    launches = [i for i, e in enumerate(cpu) if e.get("cat") == "cuda_runtime"]
    first = launches[len(launches) // 2] if launches else 0
    cpu = cpu[first:first + cpu_events]
    start, end = cpu[0]["ts"], max(e["ts"] + e["dur"] for e in cpu)
    launched = {e["args"]["correlation"] for e in cpu if "correlation" in e.get("args", {})}
    kept = []
    for ev in events:
        if ev is step:
            kept.append(dict(ev, ts=start, dur=end - start))
        elif ev.get("ph") == "X" and ev.get("cat") in _GPU_CATS:
            if ev.get("args", {}).get("correlation") in launched:
                kept.append(ev)
        elif ev.get("ph") in ("s", "f"):
            if ev["id"] in launched if ev.get("cat") == "ac2g" else start <= ev.get("ts", 0) <= end:
                kept.append(ev)
        elif ev.get("ph") != "X" or ev.get("cat") == "Trace":
            kept.append(ev)
    kept += cpu
    return dict(doc, traceEvents=kept)


def _events(doc: Any) -> list[Any]:
    return doc["traceEvents"] if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) else []


def _some(rng: random.Random, items: list[Any], share: float) -> list[Any]:
    if not items:
        return []
    return rng.sample(items, max(1, int(len(items) * share * rng.random())))


def _delete_fields(rng: random.Random, doc: Any) -> str:
    key = rng.choice(["ts", "dur", "ph", "name", "cat", "pid", "tid", "args", "args.device", "args.stream",
                      "args.correlation", "args.External id", "args.Sequence number"])
    share = rng.choice([0.01, 0.1, 0.5, 1.0])
    for ev in _some(rng, [e for e in _events(doc) if isinstance(e, dict)], share):
        if key.startswith("args."):
            if isinstance(ev.get("args"), dict):
                ev["args"].pop(key[5:], None)
        else:
            ev.pop(key, None)
    return f"delete {key} from up to {share:.0%} of events"


def _wrong_types(rng: random.Random, doc: Any) -> str:
    key = rng.choice(["ts", "dur", "ph", "name", "cat", "pid", "tid", "args", "id", "args.device", "args.stream",
                      "args.correlation", "args.Input type", "args.bytes"])
    value = rng.choice(ODD_VALUES)
    for ev in _some(rng, [e for e in _events(doc) if isinstance(e, dict)], rng.choice([0.01, 0.2, 1.0])):
        if key.startswith("args."):
            if isinstance(ev.get("args"), dict):
                ev["args"][key[5:]] = copy.deepcopy(value)
        else:
            ev[key] = copy.deepcopy(value)
    return f"set {key} to {value!r:.40}"


def _huge_values(rng: random.Random, doc: Any) -> str:
    key = rng.choice(["ts", "dur", "args.bytes", "args.correlation", "args.stream", "pid", "tid"])
    for ev in _some(rng, [e for e in _events(doc) if isinstance(e, dict)], 0.1):
        value = rng.choice(HUGE)
        if key.startswith("args."):
            if isinstance(ev.get("args"), dict):
                ev["args"][key[5:]] = value
        else:
            ev[key] = value
    return f"huge values in {key}"


def _odd_names(rng: random.Random, doc: Any) -> str:
    key = rng.choice(["name", "cat", "args.Input type", "args.Collective name"])
    for ev in _some(rng, [e for e in _events(doc) if isinstance(e, dict)], 0.3):
        name = rng.choice(NAMES)
        if key.startswith("args."):
            if isinstance(ev.get("args"), dict):
                ev["args"][key[5:]] = name
        else:
            ev[key] = name
    if isinstance(doc, dict) and rng.random() < 0.5:
        doc["deviceProperties"] = [{"name": rng.choice(NAMES), "totalGlobalMem": rng.choice(ODD_VALUES)}]
    return f"odd text in {key}"


def _shuffle(rng: random.Random, doc: Any) -> str:
    rng.shuffle(_events(doc))
    return "shuffle the events"


def _duplicate(rng: random.Random, doc: Any) -> str:
    events = _events(doc)
    extra = _copy(_some(rng, events, 0.5))
    for ev in extra:
        events.insert(rng.randrange(len(events) + 1), ev)
    return f"duplicate {len(extra)} events"


def _drop_events(rng: random.Random, doc: Any) -> str:
    events = _events(doc)
    gone = {id(e) for e in _some(rng, events, 0.9)}
    events[:] = [e for e in events if id(e) not in gone]
    return f"delete {len(gone)} events"


def _structure(rng: random.Random, doc: Any) -> Any:
    choice = rng.randrange(8)
    if choice == 0:
        return _events(doc)  # a bare list of events (old Chrome traces)
    if choice == 1:
        doc["traceEvents"] = rng.choice([{}, "events", None, 5, [[1, 2]], [None, "x", 3]])
    elif choice == 2:
        doc["distributedInfo"] = rng.choice(ODD_VALUES + [{"rank": "x", "world_size": -1}, {"rank": 2**70}])
    elif choice == 3:
        doc["deviceProperties"] = rng.choice(ODD_VALUES + [[{"name": None}], [1, 2]])
    elif choice == 4:
        doc["traceEvents"] = _events(doc) + [rng.choice(ODD_VALUES) for _ in range(5)]
    elif choice == 5:
        doc["baseTimeNanoseconds"] = rng.choice(ODD_VALUES)
    elif choice == 6:
        return rng.choice([[], "a string", 42, None])
    else:
        doc["schemaVersion"] = rng.choice(ODD_VALUES)
    return doc


_KINETO_MUTATIONS = [_delete_fields, _wrong_types, _huge_values, _odd_names, _shuffle, _duplicate, _drop_events]


def damaged_events(doc: Any) -> int:
    """Complete events without ts or dur, or with a negative dur: what the data-quality check must count."""
    n = 0
    for ev in _events(doc):
        if not isinstance(ev, dict) or ev.get("ph") != "X" or ev.get("cat") in ("Trace", "trace"):
            continue
        dur = ev.get("dur")
        negative = isinstance(dur, (int, float)) and not isinstance(dur, bool) and dur < 0
        n += "ts" not in ev or "dur" not in ev or negative
    return n


def _copy(value: Any) -> Any:
    """A deep copy, ten times faster than copy.deepcopy (an int beyond 64 bits: the slow way)."""
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:
        return copy.deepcopy(value)


def _dumps(doc: Any, *, ascii: bool) -> bytes:
    """JSON text, non-ASCII as it is or escaped (orjson where it can: it does not escape, nor write big ints)."""
    if not ascii:
        try:
            return orjson.dumps(doc)
        except TypeError:
            pass
    return json.dumps(doc, ensure_ascii=ascii).encode()


def kineto_case(rng: random.Random, base: dict[str, Any], folder: Path) -> Case:
    """One damaged copy of a Kineto trace: 1-3 mutations of its events, sometimes of its structure or bytes."""
    doc: Any = _copy(base)
    what = [rng.choice(_KINETO_MUTATIONS)(rng, doc) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.15:
        doc = _structure(rng, doc)
        what.append("change the structure")
    damaged: int | None = damaged_events(doc)
    text = _dumps(doc, ascii=rng.random() < 0.5)
    gz = rng.random() < 0.5
    raw = gzip.compress(text, compresslevel=1) if gz else text
    if rng.random() < 0.12:
        raw, how = _damage_bytes(rng, raw)
        what.append(how)
        damaged = None
    name = rng.choice(["trace", "[bold]t[/bold]", "run [1]", "名前", "t{{x}}"]) + (".json.gz" if gz else ".json")
    path = folder / name.replace("/", "_")
    path.write_bytes(raw)
    return Case(path, what, damaged)


def _damage_bytes(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    at = rng.randrange(max(len(raw), 1))
    kind = rng.randrange(4)
    if kind == 0:
        return raw[:at], f"cut at byte {at}"
    if kind == 1:
        return raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1:], f"flip byte {at}"
    if kind == 2:
        return raw[:at] + b"NaN, Infinity, }{][" + raw[at:], f"garbage at byte {at}"
    return b"", "empty file"


# Nsight Systems ----------------------------------------------------------------------------------------------
_NSYS_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME",
                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API", "StringIds", "NVTX_EVENTS", "ThreadNames",
                "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "META_DATA_EXPORT", "CUPTI_ACTIVITY_KIND_MEMSET"]


def _nsys_mutation(rng: random.Random, con: sqlite3.Connection) -> str:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    present = [t for t in _NSYS_TABLES if t in tables]
    table = rng.choice(present)
    columns = [r[1] for r in con.execute(f"PRAGMA table_info([{table}])")]
    column = rng.choice(columns)
    # rows chosen by the seeded generator (SQLite's random() would make a case irreproducible)
    rowids = [r[0] for r in con.execute(f"SELECT rowid FROM [{table}]")]
    some = ",".join(str(r) for r in _some(rng, rowids, 1.0)) or "-1"
    kind = rng.randrange(9)
    if kind == 0:
        con.execute(f"DELETE FROM [{table}]")
        return f"empty {table}"
    if kind == 1:
        con.execute(f"DROP TABLE [{table}]")
        return f"drop {table}"
    if kind == 2:
        con.execute(f"UPDATE [{table}] SET [{column}] = NULL WHERE rowid IN ({some})")
        return f"NULL {table}.{column}"
    if kind == 3:
        value = rng.choice(["abc", "", "[bold]x[/bold]", "12.5"])
        con.execute(f"UPDATE [{table}] SET [{column}] = ?", (value,))
        return f"text {value!r} in {table}.{column}"
    if kind == 4:
        value = rng.choice([2**62, -(2**62), -1, 0, 1e300])
        con.execute(f"UPDATE [{table}] SET [{column}] = ?", (value,))
        return f"{value} in {table}.{column}"
    if kind == 5 and {"start", "end"} <= set(columns):
        con.execute(f"UPDATE [{table}] SET start = end, end = start")
        return f"swap start and end of {table}"
    if kind == 6:
        con.execute(f"INSERT INTO [{table}] SELECT * FROM [{table}]")
        return f"duplicate the rows of {table}"
    if kind == 7 and "StringIds" in tables:
        ids = [r[0] for r in con.execute("SELECT id FROM StringIds")]
        for sid in _some(rng, ids, 0.5):
            con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (rng.choice(NAMES), sid))
        return "odd text in StringIds"
    con.execute(f"DELETE FROM [{table}] WHERE rowid IN ({some})")
    return f"delete some rows of {table}"


def nsys_case(rng: random.Random, base: Path, folder: Path) -> Case:
    """One damaged copy of an nsys SQLite export: 1-3 changes to its tables, sometimes to its bytes."""
    path = folder / rng.choice(["report.sqlite", "[b]rep[_b].sqlite", "報告 [1].sqlite"])
    shutil.copyfile(base, path)
    con = sqlite3.connect(path)
    try:
        what = []
        for _ in range(rng.randint(1, 3)):
            try:
                what.append(_nsys_mutation(rng, con))
            except sqlite3.Error as exc:  # a primary key refuses text or a duplicate: no change, and go on
                what.append(f"(a change SQLite refused: {exc})")
        con.commit()
    finally:
        con.close()
    if rng.random() < 0.1:
        raw, how = _damage_bytes(rng, path.read_bytes())
        path.write_bytes(raw)
        what.append(how)
    return Case(path, what, None)


# Nsight Compute CSV -----------------------------------------------------------------------------------------
def ncu_case(rng: random.Random, base: str, folder: Path) -> Case:
    """One damaged copy of ncu --csv output: rows and cells changed, the header or the text itself damaged."""
    lines = base.splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), 0)
    preamble, rows = lines[:head], [r for r in csv.reader(lines[head:])]
    what = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(8)
        body = rows[1:]
        if kind == 0 and body:
            for row in _some(rng, body, 0.5):
                if row:
                    row[rng.randrange(len(row))] = str(rng.choice(ODD_VALUES + NAMES))
            what.append("odd cells")
        elif kind == 1 and rows and rows[0]:
            col = rng.randrange(len(rows[0]))
            rows = [r[:col] + r[col + 1:] for r in rows]
            what.append(f"delete column {col}")
        elif kind == 2:
            rng.shuffle(body)
            rows = rows[:1] + body
            what.append("shuffle rows")
        elif kind == 3:
            rows = rows[:1] + body + [list(r) for r in _some(rng, body, 0.5)]
            what.append("duplicate rows")
        elif kind == 4 and body:
            for row in _some(rng, body, 0.3):
                if len(row) > 4:
                    row[4] = rng.choice(NAMES)
            what.append("odd kernel names")
        elif kind == 5:
            rows = rows[1:] if rng.random() < 0.5 else rows[:1]
            what.append("no header" if rows and rows[0] != lines[head] else "header only")
        elif kind == 6 and body:
            for row in _some(rng, body, 0.3):
                if row:
                    row[-1] = str(rng.choice(HUGE + ["nan", "inf", "-inf", "1,234.5", "n/a"]))
            what.append("odd metric values")
        else:
            rows = rows[: rng.randrange(len(rows) + 1)]
            what.append("cut rows")
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator=rng.choice(["\n", "\r\n"])).writerows(rows)
    text = "\n".join(preamble) + ("\n" if preamble else "") + out.getvalue()
    raw = text.encode()
    if rng.random() < 0.1:
        raw, how = _damage_bytes(rng, raw)
        what.append(how)
    path = folder / rng.choice(["kernels.csv", "[k]ncu[_k].csv", "ncu log.log", "核 [x].txt"])
    path.write_bytes(raw)
    return Case(path, what, None)
