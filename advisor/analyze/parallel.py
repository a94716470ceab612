"""One trace's analyzers on two cores: a forked child runs some of them beside this process.

The analyzers of a trace are pure functions of its view (:mod:`advisor.analyze.registry`), so they can run in any
process that has the view. After the tables every analyzer reads (``view.host``) are built, this process forks;
the two processes then take analyzers in registration order from one queue, a pipe that holds one byte per
analyzer (a read of one byte is atomic, so each analyzer goes to exactly one of them), and the child sends its
analyzers' facts back, pickled. The caller gets every analyzer's facts whichever process computed them, and
adds them in registration order, so the findings are the same as a serial run's
(tests/analyze/test_parallel_analyzers.py).

An analyzer that raises in the child, and every analyzer of a child that sends nothing back (killed, out of
memory; :mod:`advisor.forked`), is run again in this process, where its error is raised as in a serial run.

Only where it pays and is safe: two or more usable cores, ``$ADVISOR_WORKERS`` not ``1``, a trace of at least
:data:`MIN_EVENTS` events, no other thread in this process, and memory for a second copy of this process within
the memory budget (``$ADVISOR_MEMORY_MB``).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from typing import Any

from advisor import forked

__all__ = ["MIN_EVENTS", "run_on_two_cores", "two_cores_pay"]

#: traces with fewer events are analysed in one process: the fork and the transfer cost about what they save
MIN_EVENTS = 10_000
#: what the child sends for an analyzer that raised: the parent runs it again, and raises its error
_FAILED = "failed"

Facts = list[tuple[str, Any]]


def two_cores_pay(view: Any) -> bool:
    """Whether ``view``'s analyzers should run on two cores (see the module's conditions)."""
    if not forked.can_fork():
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or len(view.events) < MIN_EVENTS:
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
        return _serial(view, analyzers, run, on_done)
    try:
        queue_r, queue_w = os.pipe()
    except OSError:
        return _serial(view, analyzers, run, on_done)
    os.write(queue_w, bytes(range(len(analyzers))))
    os.close(queue_w)
    # The child's collections then leave the parent's objects (and their pages) alone. What was frozen before
    # (the command's modules, advisor.cli.app.imports_done) stays frozen: unfreeze() would thaw it too.
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        child = forked.start(lambda: _take_and_run(view, analyzers, run, queue_r))
    finally:
        if not frozen_before:
            gc.unfreeze()
    if child is None:  # the system made no process
        os.close(queue_r)
        return _serial(view, analyzers, run, on_done)
    pid, result_r = child
    results: dict[int, Facts] = {}
    try:
        while index := os.read(queue_r, 1):
            results[index[0]] = run(analyzers[index[0]], view)
            if on_done is not None:
                on_done(len(results))
    finally:
        os.close(queue_r)
        _, from_child = forked.receive(pid, result_r)
    for i, facts in (from_child or {}).items():
        if facts != _FAILED:
            results[i] = facts
    # whatever the child did not send back (it raised, or died), computed here
    return [results[i] if i in results else run(a, view) for i, a in enumerate(analyzers)]


def _serial(view: Any, analyzers: Sequence[Any], run: Callable[[Any, Any], Facts],
            on_done: Callable[[int], None] | None) -> list[Facts]:
    out = []
    for a in analyzers:
        out.append(run(a, view))
        if on_done is not None:
            on_done(len(out))
    return out


def _take_and_run(view: Any, analyzers: Sequence[Any], run: Callable[[Any, Any], Facts],
                  queue: int) -> dict[int, Facts | str]:
    """In the child: the facts of each analyzer it takes from the queue, or :data:`_FAILED`."""
    results: dict[int, Facts | str] = {}
    while index := os.read(queue, 1):
        try:
            results[index[0]] = run(analyzers[index[0]], view)
        except Exception:  # noqa: BLE001 - the parent runs it again and raises the error there
            results[index[0]] = _FAILED
    return results


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return 0.0
