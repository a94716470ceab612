"""The rank whose parallel operators waited for cores most: in lock-step training it holds every rank's step.

:func:`~advisor.analyze.framework.host.host_threads` measures the intra-op
pool's waits on the first rank's trace (``host.pool_*``). With several ranks
on one machine, which rank's threads lose their cores at a given moment is up
to the scheduler: on two ranks of examples/thread_oversubscription.py, one
run of three had the first rank's parallel operators wait 0.4 ms a step while
the second's waited 17.9 ms, and the first rank's step still gave back
19.7 ms when the threads were shared out, because it waited for the second
at every gradient all-reduce. So each rank's trace is measured the same way
(its probe ranges and its small operators; the collector's probe as the
recording began is only in the first rank's run metadata), and the rank whose
waits took the largest share of its own steps gives the ``ranks.pool_*``
facts, which HOST001 reads beside the first rank's.

The share, not the milliseconds: each rank's recording starts and stops on
its own, and a rank's first and last recorded steps take in the others'
profiler start-up and export, which compete for the same cores (one run:
the second rank's five steps 117, 39, 35, 37 and 94 ms, the first rank's
37-66 ms). A rank's waits per step, measured over its own longer steps, are
not the first rank's milliseconds; their share of its step is.
"""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.host import pool_wait_figures
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.digest import rank_part
from advisor.analyze.ranks.rankset import RankSet
from advisor.analyze.registry import analyzer

__all__ = ["rank_pool_waits"]

PROVIDES = (
    FactSpec("ranks.pool_wait_rank", "count", "the rank whose parallel operators waited for cores the largest share "
                                               "of its step"),
    FactSpec("ranks.parallel_region_ms", "ms", "that rank's longest wait of one small parallel operator "
                                               "(host.parallel_region_ms, from its trace alone)"),
    FactSpec("ranks.pool_waits_per_step", "count", "that rank's operators per step with a millisecond or more of "
                                                   "their own time"),
    FactSpec("ranks.pool_wait_ms", "ms", "that rank's pool waits per step (host.pool_wait_ms, from its trace alone)"),
    FactSpec("ranks.pool_wait_share", "fraction", "ranks.pool_wait_ms as a share of that rank's step"),
)


@rank_part("pool_waits")
def _pool_waits(view: TraceView) -> dict[str, Any]:
    """One rank's ``host.pool_*`` figures from its own trace ({} without the collector's probes)."""
    return pool_wait_figures(view) if view.has("cpu_op") else {}


@analyzer("rank_pool_waits", needs=("ranks", "cpu_op"), provides=PROVIDES, scope="ranks")
def rank_pool_waits(rank_set: RankSet) -> dict[str, Any]:
    """The pool waits of the rank that waited the largest share of its step."""
    measured = [(rank, figures) for rank, figures in zip(rank_set.ranks, rank_set.part("pool_waits")) if figures]
    if not measured:
        return {}
    rank, worst = max(measured,
                      key=lambda pair: (pair[1]["host.pool_wait_share"] or 0.0, pair[1]["host.pool_wait_ms"], -pair[0]))
    return {"ranks.pool_wait_rank": rank, "ranks.parallel_region_ms": worst["host.parallel_region_ms"],
            "ranks.pool_waits_per_step": worst["host.pool_waits_per_step"],
            "ranks.pool_wait_ms": worst["host.pool_wait_ms"], "ranks.pool_wait_share": worst["host.pool_wait_share"]}
