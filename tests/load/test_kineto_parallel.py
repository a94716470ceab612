"""A trace loaded with helper processes (advisor/load/kineto_parallel.py) has the serial load's tables, exactly:
values, dtypes, categories and their order, row order, meta and data quality; awkward cuts fall back to serial."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from advisor.errors import TraceError
from advisor.load import json_stream, kineto_parallel, kineto_pieces
from advisor.load.kineto import ALL_ARGS, load_kineto
from conftest import KINETO_TRACES, fixture_path


def _assert_same(path, helpers: int, args=None) -> None:
    serial = load_kineto(path, args=args, helpers=0)
    parallel = load_kineto(path, args=args, helpers=helpers)
    for table in ("events", "memory", "flows"):
        a, b = getattr(parallel, table), getattr(serial, table)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        for column in a.columns:  # codes and their texts alike: the categories in the same order
            if isinstance(a[column].dtype, pd.CategoricalDtype):
                assert list(a[column].cat.categories) == list(b[column].cat.categories), column
    assert parallel.meta == serial.meta and list(parallel.meta) == list(serial.meta)
    assert parallel.quality == serial.quality


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_fixture_tables_equal_the_serial_load(name: str, monkeypatch) -> None:
    """Pieces of 64 KiB, so that every fixture is many pieces shared between this process and the helpers."""
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 64 << 10)
    _assert_same(fixture_path("kineto", name), helpers=2)


@pytest.mark.parametrize("name", ["a100_ddp_nccl_rank0.pt.trace.json.gz", "a100_alexnet_cuda_sync.pt.trace.json.gz"])
def test_every_arg_column_equals_the_serial_load(name: str, monkeypatch) -> None:
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 64 << 10)
    _assert_same(fixture_path("kineto", name), helpers=1, args=ALL_ARGS)


def _event(i: int, name: str = "aten::mm", **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": 1000.5 + i, "dur": 0.75,
            "args": {"External id": i, **args}}


def test_a_cut_inside_a_string_found_by_a_helper_loads_again_serially(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 300)
    monkeypatch.setattr(json_stream, "CHUNK_BYTES", 128)
    tricky = ['f"}, {"x', 'a\\"}, {\\', "plain"]
    events = [_event(i, name=tricky[i % 3] * (1 + i % 4)) for i in range(200)]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    streams = []
    real_stream = kineto_pieces.stream_columns
    monkeypatch.setattr(kineto_pieces, "stream_columns", lambda *a: streams.append(a[2]) or real_stream(*a))
    _assert_same(path, helpers=1)
    assert isinstance(streams[1], kineto_parallel.ParallelDecode) and len(streams) == 3  # serial, parallel, serial


def test_broken_json_is_the_same_error_as_serially(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 1000)
    text = json.dumps({"traceEvents": [_event(i) for i in range(200)]}, indent=2)
    at = text.index('"External id": 150')
    path = tmp_path / "broken.json"
    path.write_text(text[:at] + "oops" + text[at:])
    errors = []
    for helpers in (0, 1):
        with pytest.raises(TraceError) as caught:
            load_kineto(path, helpers=helpers)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "is not valid JSON" in errors[0]


def test_helpers_by_size_and_cores(monkeypatch, tmp_path) -> None:
    path = tmp_path / "t.json"
    monkeypatch.setenv("ADVISOR_WORKERS", "2")
    assert kineto_parallel.helper_count(path, kineto_parallel.PARALLEL_MIN_BYTES) == 1
    assert kineto_parallel.helper_count(path, kineto_parallel.PARALLEL_MIN_BYTES - 1) == 0  # small: serial
    monkeypatch.setenv("ADVISOR_WORKERS", "1")
    assert kineto_parallel.helper_count(path, 1 << 30) == 0
    monkeypatch.setenv("ADVISOR_WORKERS", "64")
    assert kineto_parallel.helper_count(path, 1 << 30) == kineto_parallel.MAX_HELPERS
