"""Synthetic big Kineto traces, made from a real one by repeating its steps.

Copy ``k`` of the source's events is shifted in time by ``k`` times the
source's span (plus a small gap) and every id that links events (External id,
correlation, sequence numbers, Python ids, flow ids, ProfilerStep numbers) by
``k`` times that id's range, so the copies form one long, consistent run: the
same analysis, ``k`` times as many steps. Copies are added until the JSON text
reaches the target size; the file is gzip (level 1) and cached by name, so a
size is generated once.

    python bench/synth.py --size 100MB --out bench/out
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
import time
from pathlib import Path
from typing import Any

import orjson

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto" / "v100_resnet_single_rank.pt.trace.json.gz"
#: args whose values are ids that must stay unique across copies
ID_ARGS = ("External id", "correlation", "Sequence number", "Python id", "Python parent id", "Record function id",
           "Ev Idx")
_STEP = re.compile(r"^(ProfilerStep#)(\d+)$")
_UNITS = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "b": 1}


def parse_size(text: str) -> int:
    """``100MB``, ``2GB``, ``500mb`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?b)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 100MB or 2GB")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def size_label(size: int) -> str:
    return f"{size >> 30}GB" if size >= 1 << 30 and size % (1 << 30) == 0 else f"{size >> 20}MB"


class Repeater:
    """One source trace, ready to be written out shifted ``k`` times."""

    def __init__(self, source: Path) -> None:
        raw = source.read_bytes()
        doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        self.meta = {k: v for k, v in doc.items() if k != "traceEvents"}
        self.events: list[dict[str, Any]] = [e for e in doc["traceEvents"] if isinstance(e, dict)]
        timed = [e for e in self.events if isinstance(e.get("ts"), (int, float))]
        start = min(e["ts"] for e in timed)
        end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
        self.span_us = float(end - start) + 1000.0
        self.id_range = {key: self._range(key) for key in ID_ARGS}
        self.flow_range = max((int(e["id"]) for e in self.events if isinstance(e.get("id"), int)), default=0) + 1
        steps = [int(m.group(2)) for e in self.events if (m := _STEP.match(str(e.get("name", ""))))]
        self.step_range = (max(steps) - min(steps) + 1) if steps else 0
        self.copy_bytes = len(orjson.dumps(self.events))

    def _range(self, key: str) -> int:
        values = [e["args"][key] for e in self.events if isinstance(e.get("args"), dict)
                  and isinstance(e["args"].get(key), int) and e["args"][key] >= 0]
        return max(values, default=0) + 1

    def copy(self, k: int) -> list[dict[str, Any]]:
        """The source's events, shifted to be the k-th repetition."""
        if k == 0:
            return self.events
        dt = k * self.span_us
        out = []
        for e in self.events:
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + dt
            if isinstance(e.get("id"), int):
                e["id"] = e["id"] + k * self.flow_range
            args = e.get("args")
            if isinstance(args, dict):
                shifted = {key: args[key] + k * r for key, r in self.id_range.items()
                           if isinstance(args.get(key), int) and args[key] >= 0}
                if shifted:
                    e["args"] = {**args, **shifted}
            if self.step_range and (m := _STEP.match(str(e.get("name", "")))):
                e["name"] = f"{m.group(1)}{int(m.group(2)) + k * self.step_range}"
            out.append(e)
        return out

    def write(self, path: Path, target: int) -> int:
        """Write copies until the JSON text reaches ``target`` bytes; returns the JSON size."""
        tmp = path.with_suffix(".partial")
        written = 0
        with gzip.open(tmp, "wb", compresslevel=1) as out:
            head = orjson.dumps(self.meta)[:-1] + (b', "traceEvents": [\n' if self.meta else b'"traceEvents": [\n')
            out.write(head)
            written += len(head)
            k = 0
            while written < target:
                body = orjson.dumps(self.copy(k), option=orjson.OPT_APPEND_NEWLINE)[1:-2]
                if k:
                    body = b",\n" + body
                out.write(body)
                written += len(body)
                k += 1
            out.write(b"\n]}\n")
            written += 4
        tmp.rename(path)
        return written


def synthetic_trace(size: int, workdir: Path, source: Path = DEFAULT_SOURCE, log=print) -> Path:
    """The cached synthetic trace of about ``size`` bytes of JSON, made if missing."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"synthetic_{source.name.split('.')[0]}_{size_label(size)}.pt.trace.json.gz"
    if path.exists():
        return path
    started = time.perf_counter()
    repeater = Repeater(source)
    written = repeater.write(path, size)
    log(f"made {path.name}: {written / (1 << 20):.0f} MiB of JSON, {path.stat().st_size / (1 << 20):.0f} MiB gzip, "
        f"{-(-written // repeater.copy_bytes)} copies, {time.perf_counter() - started:.0f} s")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, action="append", help="JSON size, e.g. 100MB (repeatable)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out", help="folder for the traces")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real trace to repeat")
    args = parser.parse_args(argv)
    for size in args.size or [parse_size(s) for s in ("100MB", "500MB", "2GB")]:
        print(synthetic_trace(size, args.out, args.source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
