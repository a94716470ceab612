"""All the rank traces of one run, for the analyzers that compare ranks (``scope="ranks"``).

A :class:`RankSet` holds one :class:`~advisor.analyze.framework.view.TraceView` per
rank, ordered by rank. Ranks come from each trace's ``distributedInfo``;
when those are missing or repeat (traces from unrelated runs, or written
without torch.distributed), the traces are numbered in file order instead,
and :attr:`RankSet.numbered_by_order` says so.

Each view keeps its own clock: analyzers compare per-rank figures (step
time, time in collectives), never timestamps across ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from advisor.analyze.framework.view import TraceView

__all__ = ["RankSet"]


class RankSet:
    """The views of a run's rank traces, with their rank numbers."""

    def __init__(self, views: Sequence[TraceView]) -> None:
        ranks = [v.trace.rank for v in views]
        self.numbered_by_order = len(set(ranks)) != len(ranks)
        if self.numbered_by_order:
            ranks = list(range(len(views)))
        pairs = sorted(zip(ranks, views), key=lambda pair: pair[0])
        self.ranks: list[int] = [r for r, _ in pairs]
        self.views: list[TraceView] = [v for _, v in pairs]

    def __len__(self) -> int:
        return len(self.views)

    def __iter__(self) -> Iterator[tuple[int, TraceView]]:
        return iter(zip(self.ranks, self.views))

    def has(self, table: str) -> bool:
        """``"ranks"``: two or more ranks; any other table: every rank's trace has it."""
        if table == "ranks":
            return len(self.views) >= 2
        return bool(self.views) and all(v.has(table) for v in self.views)
