"""One rank trace reduced to what the ranks' comparison reads of it, so that its tables can be let go.

The ``ranks``-scope analyzers (:mod:`.host`, :mod:`.gpu`, :mod:`.skew`) read
each rank's trace only through per-rank functions their modules register
with :func:`rank_part` (``figures``: :func:`.host.rank_figures`;
``gpu_row``: :func:`.gpu.rank_row`; ``keyed``: :func:`.skew.keyed_collectives`),
which :meth:`~.rankset.RankSet.part` calls. Their results are a few
kilobytes, where the trace's tables are megabytes or more. A
:class:`RankDigest` holds those results for one trace, computed once, plus
what the pipeline says about the trace (its rank, its window, its data
quality) and which tables it has. So a folder of many rank traces is analysed
one trace at a time, each in any process (a digest pickles), and memory holds
the first rank's full tables (its findings are the run's) plus one trace per
worker, whatever the number of ranks.

:class:`~.rankset.RankSet` takes views or digests alike; :meth:`RankSet.part`
gives an analyzer the same value from either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RankDigest", "digest_view", "part_names", "part_of_view", "rank_part"]

#: part name -> the function of a TraceView that computes it; each ranks analyzer's module registers its own
_PARTS: dict[str, Callable[[Any], Any]] = {}


def rank_part(name: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Register ``func(view)`` as the per-rank part ``name`` a ranks analyzer reads (``RankSet.part(name)``)."""
    def register(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
        _PARTS[name] = func
        return func
    return register


def part_names() -> list[str]:
    """Every registered per-rank part, once the built-in analyzers are loaded."""
    from advisor.analyze.registry import registered

    registered()  # loads the built-in analyzers, whose modules register their parts
    return sorted(_PARTS)


def part_of_view(view: Any, name: str) -> Any:
    """One per-rank part computed from a full :class:`~advisor.analyze.framework.view.TraceView`."""
    if name not in _PARTS and name not in part_names():
        raise KeyError(f"no per-rank part {name!r}; the parts are {', '.join(part_names())}")
    return _PARTS[name](view)


@dataclass
class RankDigest:
    """What the ranks' comparison and the pipeline's notes need of one rank trace; no tables."""

    path: Path
    rank: int
    #: ``meta["advisor_window"]`` of a trace over the memory budget (see :mod:`advisor.load.kineto_window`)
    window: dict[str, Any] | None
    #: the trace's data-quality note when it is material, else None
    quality_note: str | None
    #: table name -> whether the trace has it, for every table a ranks-scope analyzer needs
    tables: dict[str, bool] = field(default_factory=dict)
    parts: dict[str, Any] = field(default_factory=dict)

    def has(self, table: str) -> bool:
        return self.tables.get(table, False)


def digest_view(view: Any) -> RankDigest:
    """The digest of a loaded trace's view: every per-rank part computed now."""
    from advisor.analyze.registry import registered
    from advisor.load.kineto_window import META_KEY

    trace = view.trace
    needed = {t for a in registered("framework", "ranks") for t in a.needs if t != "ranks"}
    return RankDigest(path=trace.path, rank=trace.rank, window=trace.meta.get(META_KEY),
                      quality_note=trace.quality.note() if trace.quality.material else None,
                      tables={t: view.has(t) for t in sorted(needed)},
                      parts={name: part_of_view(view, name) for name in part_names()})
