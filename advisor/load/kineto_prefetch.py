"""A small trace decoded in a second process while this one imports the libraries the analysis needs.

``advisor analyze trace.json.gz`` spends its first third of a second importing
pandas and the analyzers, with one core busy; decoding a fixture-sized trace
takes about as long. :func:`start` (called by the CLI before those imports)
forks a child that decodes the trace into column chunks
(:class:`~advisor.load.kineto_pieces.Columns`, numpy only) and hands them back
pickled, in a file in memory (:mod:`advisor.forked`); the load (:func:`take`, from
:func:`~advisor.load.kineto.load_kineto`) merges them exactly as a parallel
load merges its helpers' pieces, so the tables are the same as a serial load's.

Only one trace under :data:`~advisor.load.kineto_parallel.PARALLEL_MIN_BYTES`
of JSON is read this way: larger traces are decoded by helper processes
anyway, and several traces by the rank workers. Anything that goes wrong in
the child (a broken file, a trace over the memory budget, a signal) sends
nothing (:mod:`advisor.forked`), and the load reads the file itself, which says
what is wrong with it.
``ADVISOR_WORKERS=1`` (everything in this process) turns this off.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor import forked

__all__ = ["start", "take"]


@dataclass(frozen=True)
class _Child:
    pid: int
    fd: int


_CHILDREN: dict[Path, _Child] = {}


def start(paths: list[Path]) -> None:
    """Begin decoding the trace in ``paths`` in a child process, when it is a single, small Kineto trace."""
    from advisor.load.kineto_spec import is_kineto_trace

    if len(paths) != 1 or not (is_kineto_trace(paths[0]) and paths[0].is_file()) or not forked.can_fork():
        return
    path = paths[0]
    key = path.resolve()
    if key in _CHILDREN:
        return
    child = forked.start(lambda: _decode(path))
    if child is None:  # the system made no process: the load reads the file itself
        return
    pid, fd = child
    if not _CHILDREN:
        atexit.register(_stop_all)
    _CHILDREN[key] = _Child(pid, fd)


def take(path: Path, spec: dict[str, tuple[tuple[str, ...], str]]) -> tuple[Any, dict[str, Any]] | None:
    """The columns and other keys of ``path`` decoded by a child, merged into fresh ``Columns(spec)``; None
    when no child decoded it with this ``spec`` (the caller loads it itself)."""
    from advisor.load.kineto_spec import ARGS

    child = _CHILDREN.pop(path.resolve(), None)
    if child is None:
        return None
    if spec != ARGS:  # the child decodes the default columns only
        _stop(child)
        return None
    _, sent = forked.receive(child.pid, child.fd)
    if sent is None:
        return None
    from advisor.load.kineto_parallel import merge_piece
    from advisor.load.kineto_pieces import Columns

    part, meta = sent
    columns = Columns(spec)
    merge_piece(columns, part)
    return columns, meta


def _decode(path: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """In the child: ``path``'s columns (as :func:`~advisor.load.kineto_parallel.columns_part` gives them) and
    other keys; None for a trace the helpers or a window should read."""
    import gc

    gc.disable()  # as the loader does: millions of short-lived objects, no cycles
    from advisor.load.kineto_parallel import PARALLEL_MIN_BYTES, columns_part
    from advisor.load.kineto_pieces import Columns, stream_columns
    from advisor.load.kineto_spec import ARGS
    from advisor.load.kineto_window import budget_bytes, json_size

    size = json_size(path)
    if not 0 < size < PARALLEL_MIN_BYTES or size > budget_bytes():
        return None
    columns = Columns(dict(ARGS))
    meta = stream_columns(path, columns, columns.add_piece, None)
    return columns_part(columns), meta


def _stop(child: _Child) -> None:
    os.close(child.fd)
    try:
        os.kill(child.pid, 9)
        os.waitpid(child.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _stop_all() -> None:
    """At exit: children whose trace was never taken (the run stopped before its load) are stopped."""
    while _CHILDREN:
        _stop(_CHILDREN.popitem()[1])
