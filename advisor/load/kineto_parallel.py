"""A big trace's pieces decoded on more cores: helper processes turn pieces into column chunks beside this one.

The stream (:mod:`.json_stream`) cuts the ``traceEvents`` array into pieces
here, as in a serial load; :class:`ParallelDecode` is its ``decode``
function. Each piece goes to a helper process while the helpers have fewer
than :data:`QUEUE_PER_HELPER` pieces each waiting, and is decoded here
otherwise, so the work balances itself whatever else the machine is doing.
A piece is always decoded on its own (:func:`piece_columns`: fresh text
tables, codes in the order texts first appear in the piece) and then merged,
in piece order, into the load's :class:`~.kineto_pieces.Columns`
(:func:`merge_piece`): each text is given its code in the same order as a
serial load gives it, and every chunk is appended in the same order, so the
tables are identical to the serial load's (tests/load/test_kineto_parallel.py).

A piece that is not valid JSON where it was cut fast (a cut inside a string)
is recut exactly by the stream when it is decoded here; when a helper finds
it, the load stops with :class:`HelperFoundMalformed` (or, where the stream
went on cutting from the wrong place and called the JSON broken, with that
error once a helper's piece is found malformed) and is done again serially,
which then recuts it or says where the JSON is broken (rare: no real trace
has such a cut). Windowed loads (a trace over the memory budget)
stay serial.

Helpers: ``$ADVISOR_WORKERS`` - 1 (``ADVISOR_WORKERS=1``: none), else the
usable cores - 1, at most :data:`MAX_HELPERS`; only for traces of at least
:data:`PARALLEL_MIN_BYTES` of JSON, below which starting a helper costs about
what it saves. They are forked, so they start with the modules imported.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from advisor.load.json_stream import MalformedPiece
from advisor.load.kineto_pieces import BASE_SAMPLE, Columns

__all__ = ["HelperFoundMalformed", "MAX_HELPERS", "PARALLEL_MIN_BYTES", "ParallelDecode", "columns_part",
           "helper_count", "merge_piece", "piece_columns"]

#: traces with less JSON than this load serially
PARALLEL_MIN_BYTES = 16 << 20
#: helper processes at most: the process cutting and merging the pieces is the limit beyond a few
MAX_HELPERS = 3
#: pieces waiting per helper before this process decodes one itself
QUEUE_PER_HELPER = 2
#: pieces this process may decode ahead of a helper's before it waits for that one
OWN_AHEAD = 4

_TEXT_TABLES = (("events", "name", "names"), ("events", "cat", "cats"), ("flows", "cat", "flow_cats"))


class HelperFoundMalformed(Exception):
    """A helper was given a piece that is not valid JSON as cut: the load is done again serially."""


def helper_count(path: Path, json_bytes: int) -> int:
    """How many helper processes to load ``path`` with (0: serially, in this process)."""
    if json_bytes < PARALLEL_MIN_BYTES:
        return 0
    text = os.environ.get("ADVISOR_WORKERS", "").strip()
    if text.isdigit():
        cores = int(text)
    else:  # an unreadable value is said by the rank folder's worker count (advisor.rank_files); here: the cores
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(cores - 1, MAX_HELPERS))


# helper side ----------------------------------------------------------------------------------------------
_HELPER_COLUMNS: Columns | None = None


def _start_helper(args_spec: dict[str, tuple[tuple[str, ...], str]]) -> None:
    global _HELPER_COLUMNS
    os.environ["ADVISOR_WORKERS"] = "1"  # a helper never starts helpers of its own
    _HELPER_COLUMNS = Columns(args_spec)


def _helper_decode(piece: bytes, sample: dict[str, int]) -> dict[str, Any] | None:
    """A piece's columns, in a helper; None for a piece that is not valid JSON as cut."""
    assert _HELPER_COLUMNS is not None
    try:
        return piece_columns(_HELPER_COLUMNS, piece, sample)
    except MalformedPiece:
        return None


# both sides -----------------------------------------------------------------------------------------------
def piece_columns(columns: Columns, piece: bytes, sample: dict[str, int] | None = None) -> dict[str, Any]:
    """One piece decoded on its own by ``columns`` (emptied first): its chunks and the texts its codes point to.

    ``sample``: per table, how many more first ts the load still needs for ``base_us`` (default: all of them).
    """
    done = {t: BASE_SAMPLE - (sample[t] if sample is not None else BASE_SAMPLE) for t in columns.sampled}
    columns.chunks = {"events": {}, "memory": {}, "flows": {}}
    columns.names, columns.cats, columns.flow_cats = {}, {}, {}
    columns.texts = {c: {} for c in columns.texts}
    columns.sampled = {t: [None] * n for t, n in done.items()}  # so ``_sample_ts`` takes only what is needed
    columns.missing_ts, columns.events_seen = {}, 0
    columns.add_piece(piece)
    return columns_part(columns, done)


def columns_part(columns: Columns, done: dict[str, int] | None = None) -> dict[str, Any]:
    """What ``columns`` decoded, as :func:`merge_piece` takes it (picklable: arrays, lists and dicts).

    ``done``: per table, how many of the sampled first ts the load had before (they are left out).
    """
    done = done or {}
    return {"chunks": columns.chunks, "names": list(columns.names), "cats": list(columns.cats),
            "flow_cats": list(columns.flow_cats), "texts": {c: list(t) for c, t in columns.texts.items()},
            "sampled": {t: ts[done.get(t, 0):] for t, ts in columns.sampled.items()},
            "missing_ts": columns.missing_ts, "events_seen": columns.events_seen}


def merge_piece(columns: Columns, part: dict[str, Any]) -> None:
    """Append a piece decoded on its own to the load's ``columns``, as if ``columns`` had decoded it."""
    chunks = part["chunks"]
    for table, column, attr in _TEXT_TABLES:
        _recode(chunks[table], column, part[attr], getattr(columns, attr))
    for column, labels in part["texts"].items():
        _recode(chunks["events"], column, labels, columns.texts[column])
    for table, by_column in chunks.items():
        for column, parts in by_column.items():
            for values in parts:
                columns._put(table, column, values)
    for table, ts in part["sampled"].items():
        sampled = columns.sampled[table]
        sampled.extend(ts[:max(BASE_SAMPLE - len(sampled), 0)])
    for kind, n in part["missing_ts"].items():
        columns.missing_ts[kind] = columns.missing_ts.get(kind, 0) + n
    columns.events_seen += part["events_seen"]
    columns._pieces_seen += 1


def _recode(by_column: dict[str, list[Any]], column: str, labels: list[str], table: dict[str, int]) -> None:
    """The piece's codes of ``column`` into the load's text table (new texts coded in the piece's order)."""
    if column not in by_column or not labels:
        return
    setdefault = table.setdefault
    remap = np.array([setdefault(label, len(table)) for label in labels], dtype="int32")
    by_column[column] = [remap[codes] for codes in by_column[column]]


# this side ------------------------------------------------------------------------------------------------
class ParallelDecode:
    """The ``decode`` function of a load on helper processes; :meth:`close` when the stream is done."""

    def __init__(self, columns: Columns, helpers: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.columns = columns
        self._own = Columns(columns.args_spec)  # this side's pieces are decoded on their own too
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        self._pool = ProcessPoolExecutor(max_workers=helpers, mp_context=multiprocessing.get_context(method),
                                         initializer=_start_helper, initargs=(columns.args_spec,))
        self._limit = helpers * QUEUE_PER_HELPER
        self._queue: deque[Any] = deque()  # futures and decoded pieces, in piece order
        self._at_helpers = 0

    def __call__(self, piece: bytes) -> int:
        sample = {t: max(BASE_SAMPLE - len(ts), 0) for t, ts in self.columns.sampled.items()}
        if self._at_helpers < self._limit:
            self._queue.append(self._pool.submit(_helper_decode, piece, sample))
            self._at_helpers += 1
        else:  # MalformedPiece: the stream recuts it
            self._queue.append(piece_columns(self._own, piece, sample))
        self._merge_ready()
        return 0

    def _merge_ready(self, wait: bool = False) -> None:
        """Merge the pieces at the head of the queue that are decoded (all of them with ``wait``)."""
        while self._queue:
            head = self._queue[0]
            if isinstance(head, dict):
                part = head
            elif wait or head.done() or len(self._queue) > self._limit + OWN_AHEAD:
                part = head.result()
                self._at_helpers -= 1
                if part is None:
                    raise HelperFoundMalformed()
            else:
                return
            self._queue.popleft()
            merge_piece(self.columns, part)

    def helper_found_malformed(self) -> bool:
        """Whether a piece still out at a helper is not valid JSON as cut (waits for them all).

        The stream goes on cutting after a piece it handed to a helper, so after a wrong cut there it cuts from a
        wrong place, and may say the JSON is broken where it is not: the load asks this before believing it.
        """
        return any(not isinstance(item, dict) and item.result() is None for item in self._queue)

    def finish(self) -> None:
        """Merge every piece still out (after the stream's last piece)."""
        self._merge_ready(wait=True)

    def close(self) -> None:
        for item in self._queue:
            if not isinstance(item, dict):
                item.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
