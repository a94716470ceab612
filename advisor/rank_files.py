"""A folder of rank traces, analysed one trace per core with bounded memory.

The run's findings are the first rank's (its trace loaded whole, every
framework analyzer over it) plus the ranks compared. The comparison reads only
a few per-rank figures of each trace (:mod:`advisor.analyze.ranks.digest`), so
every other trace is loaded, reduced to its :class:`RankDigest` and let go:
memory holds the first rank's tables plus one trace per worker, however many
ranks there are.

Workers: ``$ADVISOR_WORKERS`` if set, else the cores this process may use;
1 means every trace in this process, one after the other; N > 1 means up to N
worker processes (at most one per other trace) digest the other traces, one
trace each at a time, while this process loads the first rank's. Never more
than the memory budget (``$ADVISOR_MEMORY_MB``, see
:mod:`advisor.load.kineto_window`) has room for: each worker is counted at
what the largest trace would take to analyse, beside the first rank's tables.
Worker processes are forked, so they start with the modules already imported.

Which trace is the first rank is known only once the ranks are read: the first
file (in name order: ``rank0`` before ``rank1``) is loaded here while the
workers digest the rest; should a digest name a lower rank, the first file is
digested here and that rank's file is loaded instead. The findings are the same
as :func:`advisor.pipeline.analyze_traces` over all the traces loaded at once
(tests/test_rank_files.py checks it on the fixtures, with 1 and 2 workers).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advisor.analyze.findings import Findings
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.digest import RankDigest, digest_view
from advisor.errors import TraceError

__all__ = ["WORKERS_ENV", "analyze_rank_files", "digest_file", "worker_count"]

WORKERS_ENV = "ADVISOR_WORKERS"


def worker_count(paths: Sequence[Path], requested: int | None = None) -> int:
    """How many worker processes digest the other traces: ``requested``, ``$ADVISOR_WORKERS`` or the usable
    cores, within what the memory budget leaves beside the first rank's tables; 0: none, all in this process."""
    from advisor.load.kineto_window import FIXED_MB, MEMORY_PER_JSON, json_size, memory_budget_mb

    if requested is None:
        text = os.environ.get(WORKERS_ENV, "").strip()
        if text:
            try:
                requested = int(text)
            except ValueError:
                raise TraceError(Path(f"${WORKERS_ENV}"), f"is {text!r}, not a number of worker processes") from None
            if requested < 1:
                raise TraceError(Path(f"${WORKERS_ENV}"), f"is {text!r}; give 1 or more worker processes")
        else:
            requested = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if requested <= 1 or len(paths) < 2:
        return 0
    each_mb = FIXED_MB + MEMORY_PER_JSON * max(json_size(p) for p in paths) / (1 << 20)
    room = int((memory_budget_mb() - each_mb) // each_mb)  # the first rank's tables stay loaded meanwhile
    return max(0, min(requested, len(paths) - 1, room))


def _load(path: Path, run_meta: dict[str, Any] | None, helpers: int | None = None) -> TraceView:
    """``helpers``: see :func:`~advisor.load.kineto.load_kineto` (0 while workers have the other cores)."""
    from advisor.load.kineto import load_kineto
    from advisor.load.kineto_window import plan_window

    return TraceView(load_kineto(path, window=plan_window(path), helpers=helpers), run_meta)


def _start_worker() -> None:
    os.environ[WORKERS_ENV] = "1"  # the workers have the cores: a worker's load starts no helpers of its own


def digest_file(path: Path, run_meta: dict[str, Any] | None = None) -> RankDigest:
    """Load one rank trace, reduce it to its digest, and let its tables go."""
    return digest_view(_load(path, run_meta))


def analyze_rank_files(paths: Sequence[Path], run_meta: dict[str, Any] | None = None,
                       workers: int | None = None) -> Findings:
    """The findings of several rank traces (see the module docstring); ``workers`` overrides the count."""
    from advisor.pipeline import analyze_views
    from advisor.progress import Progress

    paths = list(paths)
    if len(paths) < 2:
        raise ValueError("analyze_rank_files compares two or more traces")
    count = worker_count(paths, workers)
    with Progress(f"Analysing {len(paths)} rank traces") as bar:
        if count == 0:
            first = _load(paths[0], run_meta)
            digests = []
            for done, p in enumerate(paths[1:], start=1):
                bar.update(done, len(paths))
                digests.append(digest_file(p, run_meta))
        else:
            first, digests = _in_parallel(paths, run_meta, count, bar)
        members: list[tuple[TraceView | RankDigest, int]] = [(first, 0), *((d, i) for i, d in enumerate(digests, 1))]
        lowest = min(range(len(members)), key=lambda i: (_rank(members[i][0]), i))
        if lowest != 0:  # a later file holds the first rank: its tables are the ones to keep
            members[0] = (digest_view(first), 0)
            del first
            members[lowest] = (_load(paths[lowest], run_meta), lowest)
    members.sort(key=lambda m: (_rank(m[0]), m[1]))  # as the loaded traces are ordered: by rank, then file
    return analyze_views([m for m, _ in members], run_meta)


def _in_parallel(paths: list[Path], run_meta: dict[str, Any] | None, count: int,
                 bar: Any) -> tuple[TraceView, list[RankDigest]]:
    """The first file loaded here while ``count`` worker processes digest the others, in file order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=count, mp_context=multiprocessing.get_context(method),
                             initializer=_start_worker) as pool:
        futures = [pool.submit(digest_file, p, run_meta) for p in paths[1:]]
        try:
            first = _load(paths[0], run_meta, helpers=0)
            digests = []
            for done, future in enumerate(futures, start=1):
                digests.append(future.result())
                bar.update(done, len(futures))
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return first, digests


def _rank(member: TraceView | RankDigest) -> int:
    return member.rank if isinstance(member, RankDigest) else member.trace.rank

