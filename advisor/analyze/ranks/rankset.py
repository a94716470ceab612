"""All the rank traces of one run, for the analyzers that compare ranks (``scope="ranks"``).

A :class:`RankSet` holds one :class:`~advisor.analyze.framework.view.TraceView` per
rank, ordered by rank. Ranks come from each trace's ``distributedInfo``;
when those are missing or repeat (traces from unrelated runs, or written
without torch.distributed), the traces are numbered in file order instead,
and :attr:`RankSet.numbered_by_order` says so.

Each view keeps its own clock: analyzers compare per-rank figures (step
time, time in collectives), never timestamps across ranks.

A member may also be a :class:`~advisor.analyze.ranks.digest.RankDigest`: a
trace already reduced to the per-rank parts the analyzers read, so that many
ranks are compared without holding all their tables. Analyzers read a
rank through :meth:`RankSet.part`, which gives the same value for either.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Union

from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.digest import RankDigest, part_of_view

#: a rank's trace: loaded whole, or reduced to its per-rank parts
Member = Union[TraceView, RankDigest]

__all__ = ["RankSet"]


class RankSet:
    """The views (or digests) of a run's rank traces, with their rank numbers."""

    def __init__(self, views: Sequence[Member]) -> None:
        ranks = [_rank(v) for v in views]
        self.numbered_by_order = len(set(ranks)) != len(ranks)
        if self.numbered_by_order:
            ranks = list(range(len(views)))
        pairs = sorted(zip(ranks, views), key=lambda pair: pair[0])
        self.ranks: list[int] = [r for r, _ in pairs]
        self.views: list[Member] = [v for _, v in pairs]

    def __len__(self) -> int:
        return len(self.views)

    def __iter__(self) -> Iterator[tuple[int, Member]]:
        return iter(zip(self.ranks, self.views))

    @property
    def paths(self) -> list[Path]:
        """The members' trace files, in rank order."""
        return [v.path if isinstance(v, RankDigest) else v.trace.path for v in self.views]

    def part(self, name: str) -> list[Any]:
        """Per member, in rank order, one per-rank part (see :func:`~advisor.analyze.ranks.digest.rank_part`):
        computed from a view, or a shallow copy of a digest's (analyzers set and pop keys of what they get)."""
        return [copy.copy(v.parts[name]) if isinstance(v, RankDigest) else part_of_view(v, name)
                for v in self.views]

    def has(self, table: str) -> bool:
        """``"ranks"``: two or more ranks; any other table: every rank's trace has it."""
        if table == "ranks":
            return len(self.views) >= 2
        return bool(self.views) and all(v.has(table) for v in self.views)


def _rank(member: Member) -> int:
    return member.rank if isinstance(member, RankDigest) else member.trace.rank
