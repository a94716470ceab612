"""A small trace decoded in a second process while this one imports the libraries the analysis needs.

``advisor analyze trace.json.gz`` spends its first third of a second importing
pandas and the analyzers, with one core busy; decoding a fixture-sized trace
takes about as long. :func:`start` (called by the CLI before those imports)
forks a child that decodes the trace into column chunks
(:class:`~advisor.load.kineto_pieces.Columns`, numpy only) and sends them back
through a pipe, pickled; the load (:func:`take`, from
:func:`~advisor.load.kineto.load_kineto`) merges them exactly as a parallel
load merges its helpers' pieces, so the tables are the same as a serial load's.

Only one trace under :data:`~advisor.load.kineto_parallel.PARALLEL_MIN_BYTES`
of JSON is read this way: larger traces are decoded by helper processes
anyway, and several traces by the rank workers. Anything that goes wrong in
the child (a broken file, a trace over the memory budget, a signal) sends
nothing, and the load reads the file itself, which says what is wrong with it.
``ADVISOR_WORKERS=1`` (everything in this process) turns this off.
"""

from __future__ import annotations

import atexit
import os
import pickle
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["start", "take"]


@dataclass
class _Child:
    pid: int
    fd: int
    spec: dict[str, tuple[tuple[str, ...], str]]


_CHILDREN: dict[Path, _Child] = {}


def start(paths: list[Path]) -> None:
    """Begin decoding the trace in ``paths`` in a child process, when it is a single, small Kineto trace."""
    from advisor.load.kineto_spec import ARGS, is_kineto_trace

    if len(paths) != 1 or os.environ.get("ADVISOR_WORKERS", "").strip() == "1" or not hasattr(os, "fork"):
        return
    path = paths[0]
    if not (is_kineto_trace(path) and path.is_file()) or threading.active_count() > 1:
        return  # forking a process with threads can copy a lock that is held
    key = path.resolve()
    if key in _CHILDREN:
        return
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _decode_and_send(path, dict(ARGS), write_fd)
    os.close(write_fd)
    if not _CHILDREN:
        atexit.register(_stop_all)
    _CHILDREN[key] = _Child(pid, read_fd, dict(ARGS))


def take(path: Path, spec: dict[str, tuple[tuple[str, ...], str]]) -> tuple[Any, dict[str, Any]] | None:
    """The columns and other keys of ``path`` decoded by a child, merged into fresh ``Columns(spec)``; None
    when no child decoded it with this ``spec`` (the caller loads it itself)."""
    child = _CHILDREN.pop(path.resolve(), None)
    if child is None:
        return None
    try:
        sent = _receive(child) if child.spec == spec else None
    finally:
        _stop(child)
    if sent is None:
        return None
    from advisor.load.kineto_parallel import merge_piece
    from advisor.load.kineto_pieces import Columns

    part, meta = sent
    columns = Columns(spec)
    merge_piece(columns, part)
    return columns, meta


def _decode_and_send(path: Path, spec: dict[str, tuple[tuple[str, ...], str]], fd: int) -> None:
    """In the child: decode ``path`` and write ``(part, meta)`` pickled to ``fd``, or nothing; then exit."""
    code = 1
    try:
        import gc

        gc.disable()  # as the loader does: millions of short-lived objects, no cycles
        from advisor.load.kineto_parallel import PARALLEL_MIN_BYTES, columns_part
        from advisor.load.kineto_pieces import Columns, stream_columns
        from advisor.load.kineto_window import budget_bytes, json_size

        size = json_size(path)
        if 0 < size < PARALLEL_MIN_BYTES and size <= budget_bytes():
            columns = Columns(spec)
            meta = stream_columns(path, columns, columns.add_piece, None)
            data = pickle.dumps((columns_part(columns), meta), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            code = 0
    except BaseException:  # noqa: BLE001 - whatever it was, the load in the parent reads the file and says it
        pass
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffered output


def _receive(child: _Child) -> tuple[dict[str, Any], dict[str, Any]] | None:
    chunks = []
    with os.fdopen(child.fd, "rb", closefd=True) as pipe:
        child.fd = -1
        while block := pipe.read(1 << 20):
            chunks.append(block)
    _, status = os.waitpid(child.pid, 0)
    child.pid = 0
    if not chunks or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    try:
        return pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 - a partial write (the child was killed): read the file here
        return None


def _stop(child: _Child) -> None:
    if child.fd >= 0:
        os.close(child.fd)
        child.fd = -1
    if child.pid:
        try:
            os.kill(child.pid, 9)
            os.waitpid(child.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        child.pid = 0


def _stop_all() -> None:
    """At exit: children whose trace was never taken (the run stopped before its load) are stopped."""
    while _CHILDREN:
        _stop(_CHILDREN.popitem()[1])
