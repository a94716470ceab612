"""The streaming loader gives the reference loader's tables, on every fixture and on awkward JSON layouts."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from advisor.errors import TraceError
from advisor.load import json_stream
from advisor.load.json_stream import exact_cut
from advisor.load.kineto import ALL_ARGS, load_kineto
from conftest import KINETO_TRACES, fixture_path
from kineto_reference import load_reference


def _assert_same(path, args=None) -> None:
    new = load_kineto(path, args=args)
    ref = load_reference(path) if args is None else load_reference(path, args)
    for table in ("events", "memory", "flows"):
        # An empty table's text columns are str here; the reference's are float64 (pandas' guess for []).
        pd.testing.assert_frame_equal(getattr(new, table), getattr(ref, table), check_exact=True,
                                      check_dtype=len(getattr(ref, table)) > 0)
    assert new.meta == ref.meta
    assert list(new.meta) == list(ref.meta)


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_fixture_tables_equal_the_reference(name: str) -> None:
    _assert_same(fixture_path("kineto", name))


@pytest.mark.parametrize("name", ["a100_ddp_nccl_rank0.pt.trace.json.gz", "a100_alexnet_cuda_sync.pt.trace.json.gz"])
def test_every_arg_column_equals_the_reference(name: str) -> None:
    """The extra args columns (read on request) follow the same rules."""
    _assert_same(fixture_path("kineto", name), ALL_ARGS)


@pytest.mark.parametrize("name", ["a100_ddp_nccl_rank0.pt.trace.json.gz", "mi250_rocm_minitoy.pt.trace.json.gz"])
def test_small_pieces_equal_the_reference(name: str, monkeypatch, tmp_path) -> None:
    """Many cuts and reads: pieces of 8 KiB from chunks of 4 KiB, gzip and plain."""
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 8 << 10)
    monkeypatch.setattr(json_stream, "CHUNK_BYTES", 4 << 10)
    path = fixture_path("kineto", name)
    _assert_same(path)
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    _assert_same(plain)


def _event(i: int, name: str = "aten::mm", **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": 1000.5 + i, "dur": 0.75,
            "args": {"External id": i, **args}}


def _write(tmp_path, doc, *, compact: bool = False, gz: bool = False, name: str = "t.json"):
    text = json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=2)
    path = tmp_path / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("gz", [False, True])
def test_cuts_inside_strings_and_nested_objects(tmp_path, monkeypatch, compact: bool, gz: bool) -> None:
    """Names holding ``}, {``, escaped quotes and backslashes, and args with lists of objects.

    With pieces of 300 bytes the fast cut lands inside those strings and
    objects; the exact cut must take over and give the same tables.
    """
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 300)
    monkeypatch.setattr(json_stream, "CHUNK_BYTES", 128)
    tricky = ['f"}, {"x', 'a\\"}, {\\', 'path\\\\}, {\\\\', "}],[{", "plain"]
    events = []
    for i in range(60):
        ev = _event(i, name=tricky[i % len(tricky)] * (1 + i % 3), **{"Concrete Inputs": [{"a": "}, {"}, {"b": 1}]})
        events.append(ev)
        events.append({"ph": "s", "id": i, "pid": 1, "tid": 2, "ts": 1000.5 + i, "cat": "ac2g", "name": "ac2g"})
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "]}, {"}],
           "traceEvents": events, "traceName": "x]", "logs": ["a]", "b"], "displayTimeUnit": "ns"}
    path = _write(tmp_path, doc, compact=compact, gz=gz)
    _assert_same(path)
    trace = load_kineto(path)
    assert len(trace.events) == 60 and len(trace.flows) == 60
    assert trace.meta["logs"] == ["a]", "b"] and trace.meta["deviceProperties"][0]["name"] == "]}, {"


def test_array_first_last_and_empty(tmp_path) -> None:
    events = [_event(i) for i in range(5)]
    _assert_same(_write(tmp_path, {"traceEvents": events, "after": {"k": [1, 2]}}, name="first.json"))
    _assert_same(_write(tmp_path, {"before": "traceEvents", "traceEvents": events}, name="last.json"))
    empty = _write(tmp_path, {"schemaVersion": 1, "traceEvents": []}, name="empty.json")
    with pytest.raises(TraceError, match=r"empty.json: has no events: its traceEvents list is empty"):
        load_kineto(empty)  # nothing to analyse is an error naming the file, not an empty analysis


def test_odd_values_take_the_untyped_path(tmp_path) -> None:
    """Text ids and streams, nulls, booleans, list args, elements that are not events, args that are not objects."""
    events = [
        _event(0, stream="7", device=None, bytes=True),
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "Device 0", "tid": "stream 7", "ts": "1002.25", "dur": 3,
         "args": {"correlation": "0x1f", "grid": [1, 2, 3], "registers per thread": 32.0, "Input Dims": [[1, 2]]}},
        {"ph": "X", "cat": None, "name": 5, "pid": 1, "tid": 1, "ts": 1003, "args": [1, 2]},
        {"ph": "X", "cat": "Kernel", "name": "old", "pid": 1, "tid": 1, "ts": None, "dur": None},
        {"ph": "X", "name": "no ts"},
        7,
        "text",
        {"ph": "i", "name": "[memory]", "ts": 1004, "args": {"Bytes": 64, "Addr": "0x10", "Device Id": 0}},
        {"ph": "f", "id": "12", "ts": 1005, "cat": "fwdbwd", "pid": 1, "tid": 1},
        {"ph": "M", "name": "process_name", "args": {"name": "python"}},
    ]
    _assert_same(_write(tmp_path, {"traceEvents": events}))


def test_stream_beyond_int64_is_no_stream(tmp_path) -> None:
    ev = {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
          "args": {"stream": 0xFFFFFFFFFFFFFFFF, "correlation": 3}}
    trace = load_kineto(_write(tmp_path, {"traceEvents": [ev, _event(1, stream=4294967295)]}))
    assert list(trace.events["stream"]) == [-1, -1]
    assert list(trace.events["correlation"]) == [3, -1]


def test_broken_json_deep_in_the_array(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 1000)
    text = json.dumps({"traceEvents": [_event(i) for i in range(200)]}, indent=2)
    at = text.index('"External id": 150')
    path = tmp_path / "broken.json"
    path.write_text(text[:at] + "oops" + text[at:])
    with pytest.raises(TraceError, match=r"broken.json: is not valid JSON \(.* at byte \d+\)"):
        load_kineto(path)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(TraceError, match="cut.json: is not valid JSON .*ends early"):
        load_kineto(cut)


def test_exact_cut_sees_strings_and_escapes() -> None:
    body = b'{"a": "x\\"}, {"}, {"b": [1, {"c": "\\\\"}]} , {"d": 1}] , "k": 1}'
    at, last = exact_cut(body, 0, 0)
    assert (body[:at], last) == (b'{"a": "x\\"}, {"}', False)  # the string holds `"}, {`
    second, last = exact_cut(body, at + 1, 0)
    assert (body[at + 1:second].strip(), last) == (b'{"b": [1, {"c": "\\\\"}]}', False)  # ends in an escaped backslash
    end, last = exact_cut(body, at + 1, 10_000)
    assert last and body[end + 1:].strip() == b', "k": 1}'
    assert exact_cut(b'{"a": "]', 0, 0) is None


def test_memory_stays_bounded_by_the_piece_size(tmp_path) -> None:
    """Reading never holds the decompressed file: the buffer stays near a piece plus a chunk."""
    sizes = []
    original = json_stream._Source.read_more

    def spy(self, at_least=json_stream.CHUNK_BYTES):
        got = original(self, at_least)
        sizes.append(len(self.buf))
        return got

    events = [_event(i, name="x" * 200) for i in range(40_000)]
    path = _write(tmp_path, {"traceEvents": events}, gz=True)
    assert path.stat().st_size < 2 << 20 and len(gzip.decompress(path.read_bytes())) > 12 << 20
    import unittest.mock as mock

    with mock.patch.object(json_stream._Source, "read_more", spy):
        trace = load_kineto(path)
    assert len(trace.events) == 40_000
    assert max(sizes) <= json_stream.PIECE_BYTES + 3 * json_stream.CHUNK_BYTES
    assert np.array_equal(trace.events["external_id"].to_numpy(), np.arange(40_000))
