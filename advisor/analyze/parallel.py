"""One trace's analyzers on two cores: a forked child runs some of them beside this process.

The analyzers of a trace are pure functions of its view (:mod:`advisor.analyze.registry`), so they can run in any
process that has the view. After the tables every analyzer reads (``view.host``) are built, this process forks;
the two processes then take analyzers in registration order from one queue, a pipe that holds one byte per
analyzer (a read of one byte is atomic, so each analyzer goes to exactly one of them), and the child sends its
analyzers' facts back, pickled. The caller gets every analyzer's facts whichever process computed them, and
adds them in registration order, so the findings are the same as a serial run's
(tests/analyze/test_parallel_analyzers.py).

An analyzer that raises in the child, and every analyzer of a child that sends nothing back (killed, out of
memory), is run again in this process, where its error is raised as in a serial run.

Only where it pays and is safe: two or more usable cores, ``$ADVISOR_WORKERS`` not ``1``, a trace of at least
:data:`MIN_EVENTS` events, no other thread in this process, and memory for a second copy of this process within
the memory budget (``$ADVISOR_MEMORY_MB``).
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["MIN_EVENTS", "run_on_two_cores", "two_cores_pay"]

#: traces with fewer events are analysed in one process: the fork and the transfer cost about what they save
MIN_EVENTS = 10_000
#: what the child sends for an analyzer that raised: the parent runs it again, and raises its error
_FAILED = "failed"

Facts = list[tuple[str, Any]]


def two_cores_pay(view: Any) -> bool:
    """Whether ``view``'s analyzers should run on two cores (see the module's conditions)."""
    if not hasattr(os, "fork") or os.environ.get("ADVISOR_WORKERS", "").strip() == "1":
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or threading.active_count() > 1:  # forking a process with threads can copy a held lock
        return False
    if len(view.events) < MIN_EVENTS:
        return False
    from advisor.errors import TraceError
    from advisor.load.kineto_window import memory_budget_mb

    try:
        return 2 * _rss_mb() <= memory_budget_mb()
    except TraceError:  # an unreadable budget is said by the load, before this
        return False


def run_on_two_cores(view: Any, analyzers: Sequence[Any], run: Callable[[Any, Any], Facts],
                     on_done: Callable[[int], None] | None = None) -> list[Facts]:
    """``run(analyzer, view)`` of every analyzer, shared between this process and a forked child, in order.

    ``on_done(n)`` is told how many this process has finished, as it goes.
    """
    if len(analyzers) > 255:  # one byte per analyzer in the queue
        return [run(a, view) for a in analyzers]
    queue_r, queue_w = os.pipe()
    os.write(queue_w, bytes(range(len(analyzers))))
    os.close(queue_w)
    result_r, result_w = os.pipe()
    gc.freeze()  # the child's collections then leave the parent's objects (and their pages) alone
    try:
        pid = os.fork()
    finally:
        gc.unfreeze()
    if pid == 0:  # the child: never returns
        os.close(result_r)
        _child(view, analyzers, run, queue_r, result_w)
    os.close(result_w)
    results: dict[int, Facts] = {}
    try:
        while index := _claim(queue_r):
            results[index[0]] = run(analyzers[index[0]], view)
            if on_done is not None:
                on_done(len(results))
    finally:
        os.close(queue_r)
        from_child = _receive(pid, result_r)
    for i, facts in from_child.items():
        if facts != _FAILED:
            results[i] = facts
    # whatever the child did not send back (it raised, or died), computed here
    return [results[i] if i in results else run(a, view) for i, a in enumerate(analyzers)]


def _claim(queue: int) -> bytes:
    return os.read(queue, 1)


def _child(view: Any, analyzers: Sequence[Any], run: Callable[[Any, Any], Facts], queue: int, out: int) -> None:
    code = 1
    try:
        results: dict[int, Facts | str] = {}
        while index := _claim(queue):
            try:
                results[index[0]] = run(analyzers[index[0]], view)
            except Exception:  # noqa: BLE001 - the parent runs it again and raises the error there
                results[index[0]] = _FAILED
        data = pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(out, "wb") as pipe:
            pipe.write(data)
        code = 0
    except BaseException:  # noqa: BLE001 - a value that cannot be pickled, a signal: the parent computes them all
        pass
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffered output


def _receive(pid: int, fd: int) -> dict[int, Facts | str]:
    chunks = []
    try:
        with os.fdopen(fd, "rb") as pipe:
            while block := pipe.read(1 << 20):
                chunks.append(block)
    finally:
        _, status = os.waitpid(pid, 0)
    if not chunks or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return {}
    try:
        return pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 - a partial write: computed here
        return {}


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return 0.0
