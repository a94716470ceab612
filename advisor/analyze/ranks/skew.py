"""Synchronisation skew: how much of a collective's time is waiting for the last rank to arrive.

A collective's kernel starts on each rank when that rank reaches it, and cannot finish before the last
rank has arrived; after that the ranks move the data together and end together. So, for one collective
seen on every rank, with every rank's times on one clock:

- a rank's *skew* is the last rank's arrival minus its own start: time its kernel only waits;
- its *communication* is its end minus the last arrival: the exchange itself.

**Matching.** A collective is the k-th kernel of one type and message size in a profiler step (by its
``ProfilerStep#N`` number, so ranks whose windows start at different steps still pair up). Point-to-point
exchanges (``sendrecv``: NCCL's Send/Recv kernels) are matched by their end instead, once the clocks are
aligned: the ranks of a pipeline or of an embedding exchange issue them in different orders (rank 0's
second SendRecv of a step is rank 1's first), so the k-th of one rank is often not the k-th of another;
but the kernels of one exchange end together. Each of the first rank's SendRecv kernels is paired with
the other rank's kernel of the same step, type and size whose aligned end is nearest, within
:data:`TOLERANCE_NS`, each kernel used once (nearest pairs first); kernels without a partner are not matched.

**Clocks.** Each trace has its own clock. Since the kernels of one collective end together, the offset
of a rank's clock from the first rank's is the difference of their end times, on the k-th pairs that agree:
of the matched pairs' end differences, the value that most others lie within :data:`TOLERANCE_NS` of
(the nearest to 0 on a tie), refined to the median of those. Pairs that disagree beyond that tolerance
after the offset are not the same exchange (a rank that skipped or added a kernel shifts the order) and
are left out; ``ranks.skew.matched`` counts the collectives aligned on every rank. Fewer than
:data:`MIN_AGREEING` agreeing pairs for any rank and the clocks cannot be aligned:
``ranks.skew.unaligned`` is true and no skew is given.

The headline skew of a collective is the last arrival minus the first, the wait of the earliest rank;
``ranks.skew.ms_per_step`` sums it per step, and ``ranks.skew.share`` is that over the collectives'
span (skew plus the ranks' mean communication time).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.collectives import collective_kernels
from advisor.analyze.ranks.digest import rank_part
from advisor.analyze.ranks.rankset import RankSet
from advisor.analyze.registry import analyzer

__all__ = ["END_MATCHED", "MIN_AGREEING", "TOLERANCE_NS", "clock_offset", "keyed_collectives", "match_by_end"]

#: ends of one collective on two ranks agree within this, once the clocks are aligned. The kernels end
#: within microseconds of each other; half a millisecond leaves room for the clocks' drift over a window,
#: and is still far below the end differences of pairs that are not one exchange (9 ms and more on the
#: recsys ranks of the fixtures).
TOLERANCE_NS = 500_000
#: agreeing pairs needed to trust a clock offset
MIN_AGREEING = 2
#: collective types matched across ranks by their end time rather than their order (see the module docstring)
END_MATCHED = ("sendrecv",)

PROVIDES = (
    FactSpec("ranks.skew.matched", "count", "collectives matched on every rank with their ends aligned"),
    FactSpec("ranks.skew.ms_per_step", "ms",
             "per step, over the matched collectives, the last rank's arrival minus the first's (skew)"),
    FactSpec("ranks.skew.comm_ms_per_step", "ms",
             "per step, the matched collectives' time after the last arrival (the exchange), mean over ranks"),
    FactSpec("ranks.skew.share", "fraction", "skew as a share of the matched collectives' time (skew + exchange)"),
    FactSpec("ranks.skew.last_rank", "count", "the rank most often the last to arrive"),
    FactSpec("ranks.skew.last_share", "fraction", "the share of matched collectives it arrived last at"),
    FactSpec("ranks.skew.unaligned", "bool", "the ranks' clocks could not be aligned from the collectives' ends"),
    FactSpec("ranks.skew.table", "table", "per rank: its clock and its skew", columns={
        "rank": "count: rank", "collectives": "count: communication kernels in its window",
        "offset_us": "us: its clock minus the first rank's", "agreeing": "count: pairs that agree on that offset",
        "skew_ms": "ms: per step, the last arrival minus its own start, over the matched collectives",
        "last": "count: matched collectives it arrived last at",
    }),
)

Key = tuple[int, str, int, int]


@rank_part("keyed")
def keyed_collectives(view: TraceView) -> dict[Key, tuple[int, int]]:
    """(step number, type, bytes, k-th of those in the step) -> (start, end) ns of one rank's collectives."""
    coll = collective_kernels(view)
    if len(coll) == 0:
        return {}
    numbers = view.steps["step"].to_numpy("int64")
    idx = coll["step"].to_numpy("int64")
    step = np.where(idx >= 0, numbers[np.maximum(idx, 0)] if len(numbers) else -1, -1)
    seen: Counter[tuple[int, str, int]] = Counter()
    out: dict[Key, tuple[int, int]] = {}
    for s, kind, nbytes, ts, end in zip(step, coll["collective"], coll["bytes"], coll["ts"], coll["end"]):
        head = (int(s), str(kind), int(nbytes))
        out[(*head, seen[head])] = (int(ts), int(end))
        seen[head] += 1
    return out


def clock_offset(diffs: np.ndarray) -> tuple[float, int]:
    """(offset ns, pairs agreeing on it) from one rank's end-time differences to the first rank's."""
    if len(diffs) == 0:
        return 0.0, 0
    support = (np.abs(diffs[:, None] - diffs[None, :]) <= TOLERANCE_NS).sum(axis=1)
    best = np.flatnonzero(support == support.max())
    pick = best[np.argmin(np.abs(diffs[best]))]
    agree = diffs[np.abs(diffs - diffs[pick]) <= TOLERANCE_NS]
    return float(np.median(agree)), int(support[pick])


def match_by_end(ref: dict[Key, tuple[int, int]], other: dict[Key, tuple[int, int]], offset: float
                 ) -> dict[Key, tuple[int, int]]:
    """``other`` with its :data:`END_MATCHED` kernels keyed as the first rank's kernel they end with.

    Within one (step, type, bytes), the pairs of the first rank's and this rank's kernels whose ends (this
    rank's clock minus ``offset``) lie within :data:`TOLERANCE_NS` are taken nearest first, each kernel once;
    a kernel of this rank with no partner is left out. Kernels of the other types keep their k-th key.
    """
    out = {k: v for k, v in other.items() if k[1] not in END_MATCHED}
    groups: dict[tuple[int, str, int], tuple[list[Key], list[Key]]] = {}
    for side, table in enumerate((ref, other)):
        for key in table:
            if key[1] in END_MATCHED:
                groups.setdefault(key[:3], ([], []))[side].append(key)
    for mine, theirs in groups.values():
        pairs = sorted((abs(other[t][1] - offset - ref[m][1]), m, t) for m in mine for t in theirs)
        used_ref: set[Key] = set()
        used_other: set[Key] = set()
        for gap, m, t in pairs:
            if gap > TOLERANCE_NS:
                break
            if m in used_ref or t in used_other:
                continue
            used_ref.add(m)
            used_other.add(t)
            out[m] = other[t]
    return out


@analyzer("rank_skew", needs=("ranks",), provides=PROVIDES, scope="ranks")
def rank_skew(rank_set: RankSet) -> dict[str, Any]:
    """Collectives matched across ranks, split into waiting for the last rank and the exchange itself."""
    keyed = rank_set.part("keyed")
    if sum(1 for k in keyed if k) < 2 or not all(keyed):
        return {}
    ranks = rank_set.ranks
    common = sorted(set.intersection(*(set(k) for k in keyed)))
    ref = keyed[0]
    offsets, agreeing = [0.0], [len(common)]
    for other in keyed[1:]:
        diffs = np.array([other[k][1] - ref[k][1] for k in common], dtype="float64")
        offset, n = clock_offset(diffs)
        offsets.append(offset)
        agreeing.append(n)
    table = [{"rank": r, "collectives": len(k), "offset_us": o / 1e3, "agreeing": n, "skew_ms": 0.0, "last": 0}
             for r, k, o, n in zip(ranks, keyed, offsets, agreeing)]
    if min(agreeing[1:]) < MIN_AGREEING:
        return {"ranks.skew.unaligned": True, "ranks.skew.matched": 0, "ranks.skew.table": records(table)}
    keyed = [ref, *(match_by_end(ref, other, o) for other, o in zip(keyed[1:], offsets[1:]))]
    common = sorted(set.intersection(*(set(k) for k in keyed)))
    skew = comm = 0.0
    own = np.zeros(len(ranks))
    last: Counter[int] = Counter()
    matched = 0
    for key in common:
        start = np.array([k[key][0] - o for k, o in zip(keyed, offsets)])
        end = np.array([k[key][1] - o for k, o in zip(keyed, offsets)])
        if np.abs(end - end[0]).max() > TOLERANCE_NS:
            continue
        matched += 1
        arrival = start.max()
        skew += arrival - start.min()
        comm += float(np.maximum(end - arrival, 0).mean())
        own += arrival - start
        last[ranks[int(np.argmax(start))]] += 1
    n_steps = len({key[0] for key in common})  # the steps every rank has collectives in
    for row, ns in zip(table, own):
        row["skew_ms"], row["last"] = ns / n_steps / NS_PER_MS, last[row["rank"]]
    out: dict[str, Any] = {"ranks.skew.unaligned": False, "ranks.skew.matched": matched,
                           "ranks.skew.table": records(table)}
    if matched == 0:
        return out
    top, count = last.most_common(1)[0]
    out.update({"ranks.skew.ms_per_step": skew / n_steps / NS_PER_MS,
                "ranks.skew.comm_ms_per_step": comm / n_steps / NS_PER_MS,
                "ranks.skew.share": skew / (skew + comm) if skew + comm > 0 else 0.0,
                "ranks.skew.last_rank": top, "ranks.skew.last_share": count / matched})
    return out
