"""advisor/forked.py: a forked child sends back one value, or nothing whole, and the parent always learns which."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from advisor import forked

# The children here take no lock a leftover thread of another test could hold: they pickle and write to a file in memory.
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_the_childs_value_comes_back() -> None:
    pid, fd = forked.start(lambda: {"facts": [("gpu.idle_fraction", 0.25)], "n": list(range(100_000))})
    ok, value = forked.receive(pid, fd)
    assert ok
    assert value["facts"] == [("gpu.idle_fraction", 0.25)]
    assert value["n"][-1] == 99_999


def test_a_value_of_none_is_sent_as_a_value() -> None:
    pid, fd = forked.start(lambda: None)
    assert forked.receive(pid, fd) == (True, None)


def test_an_exception_in_the_child_sends_nothing() -> None:
    def work() -> None:
        raise ValueError("broken trace")

    pid, fd = forked.start(work)
    assert forked.receive(pid, fd) == (False, None)


def test_a_value_that_cannot_be_pickled_sends_nothing() -> None:
    pid, fd = forked.start(lambda: (lambda: 1))
    assert forked.receive(pid, fd) == (False, None)


def test_a_child_killed_by_a_signal_sends_nothing() -> None:
    def work() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    pid, fd = forked.start(work)
    assert forked.receive(pid, fd) == (False, None)


def test_the_child_leaves_the_parents_exit_handlers_alone(tmp_path) -> None:
    # os._exit in the child: a parent's atexit handler or buffered output would otherwise run twice
    marker = tmp_path / "marker"

    def work() -> int:
        marker.write_text("child ran")
        return 7

    pid, fd = forked.start(work)
    assert forked.receive(pid, fd) == (True, 7)
    assert marker.read_text() == "child ran"


def test_no_fork_with_one_worker_asked_for(monkeypatch) -> None:
    # as if no other thread ran (another test in this worker process may have left one)
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)
    monkeypatch.setenv("ADVISOR_WORKERS", "1")
    assert not forked.can_fork()
    monkeypatch.setenv("ADVISOR_WORKERS", "2")
    assert forked.can_fork()


def test_no_fork_while_another_thread_runs(monkeypatch) -> None:
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not forked.can_fork()
    finally:
        stop.set()
        thread.join()


def test_a_fork_the_system_refuses_is_none_and_closes_its_file(monkeypatch) -> None:
    def refuse():
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(forked.os, "fork", refuse)
    open_before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    assert forked.start(lambda: 1) is None
    if open_before is not None:
        assert len(os.listdir("/proc/self/fd")) == open_before


def test_a_value_of_megabytes_comes_back_after_the_child_has_ended() -> None:
    """The child writes into a file, not a pipe of 64 kB: it ends without waiting for the parent to read."""
    pid, fd = forked.start(lambda: b"x" * (8 << 20))
    _, status = os.waitpid(pid, 0)  # would wait for ever on a child blocked in a full pipe
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    os.close(fd)
    import pickle

    assert pickle.loads(data) == b"x" * (8 << 20)


def test_a_file_the_system_refuses_is_none(monkeypatch) -> None:
    def refuse(*args):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(forked, "_memory_file", refuse)
    assert forked.start(lambda: 1) is None
