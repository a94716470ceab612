"""A trace decoded by a forked child while the CLI imports (advisor/load/kineto_prefetch.py) has the serial load's
tables exactly; whatever goes wrong in the child, the load reads the file itself and says what is wrong."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pandas as pd
import pytest

from advisor.errors import TraceError
from advisor.load import kineto_parallel, kineto_prefetch
from advisor.load.kineto import ALL_ARGS, ARGS, load_kineto
from conftest import KINETO_TRACES, fixture_path


@pytest.fixture(autouse=True)
def _no_leftover_children():
    yield
    kineto_prefetch._stop_all()


def _child_of(path):
    return kineto_prefetch._CHILDREN.get(path.resolve())


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_fixture_tables_equal_the_serial_load(name: str, monkeypatch) -> None:
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    path = fixture_path("kineto", name)
    serial = load_kineto(path, helpers=0)
    kineto_prefetch.start([path])
    child = _child_of(path)
    assert child is not None
    prefetched = load_kineto(path)
    assert _child_of(path) is None  # taken, and the child reaped
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)
    for table in ("events", "memory", "flows"):
        a, b = getattr(prefetched, table), getattr(serial, table)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        for column in a.columns:
            if isinstance(a[column].dtype, pd.CategoricalDtype):
                assert list(a[column].cat.categories) == list(b[column].cat.categories), column
    assert prefetched.meta == serial.meta and list(prefetched.meta) == list(serial.meta)
    assert prefetched.quality == serial.quality


def test_the_load_uses_what_the_child_sent(monkeypatch) -> None:
    """No second read of the file in this process when the child's columns came back."""
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    path = fixture_path("kineto", KINETO_TRACES[0])
    kineto_prefetch.start([path])
    monkeypatch.setattr("advisor.load.kineto_pieces.stream_columns",
                        lambda *a: pytest.fail("the file was read again in this process"))
    assert len(load_kineto(path).events) > 0


def test_a_broken_trace_is_reported_by_the_load_itself(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": ')[:-6])
    kineto_prefetch.start([path])
    assert _child_of(path) is not None
    with pytest.raises(TraceError) as err:
        load_kineto(path)
    assert "cut.json.gz" in str(err.value) and "truncated" in str(err.value)


def test_another_args_spec_is_loaded_here(monkeypatch) -> None:
    """The child decodes the default columns; a load that asks for more reads the file itself."""
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    path = fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz")
    kineto_prefetch.start([path])
    trace = load_kineto(path, args=ALL_ARGS)
    assert "module_hierarchy" in trace.events.columns and _child_of(path) is None


def test_when_there_is_no_child(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    trace = fixture_path("kineto", KINETO_TRACES[0])
    kineto_prefetch.start([trace, trace])  # several traces: the rank workers read them
    kineto_prefetch.start([tmp_path])  # a folder
    kineto_prefetch.start([tmp_path / "report.nsys-rep"])
    assert not kineto_prefetch._CHILDREN
    monkeypatch.setenv("ADVISOR_WORKERS", "1")  # everything in this process
    kineto_prefetch.start([trace])
    assert not kineto_prefetch._CHILDREN


def test_a_big_trace_is_left_to_the_helpers(monkeypatch) -> None:
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    monkeypatch.setattr(kineto_parallel, "PARALLEL_MIN_BYTES", 1 << 10)
    path = fixture_path("kineto", KINETO_TRACES[0])
    kineto_prefetch.start([path])
    assert kineto_prefetch.take(path, dict(ARGS)) is None


def test_a_child_never_taken_is_stopped_at_exit() -> None:
    """The run ended before its load (an error in another file): no process is left behind."""
    code = ("import os, sys; from pathlib import Path; from advisor.load import kineto_prefetch as p; "
            "p.start([Path(sys.argv[1])]); print(p._CHILDREN[Path(sys.argv[1]).resolve()].pid)")
    path = fixture_path("kineto", KINETO_TRACES[0])
    env = {k: v for k, v in os.environ.items() if k != "ADVISOR_WORKERS"}
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    pid = int(done.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
