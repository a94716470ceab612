"""Vectorised interval arithmetic on int64 nanosecond arrays.

Everything here works on numpy arrays of starts and ends, with no Python loop
over events: sort, running maxima and ``searchsorted`` only. The nesting
functions assume what holds for host events of one thread: intervals are
properly nested (a child starts and ends inside its parent).
"""

from __future__ import annotations

import numpy as np

__all__ = ["clip", "complement", "covered", "covered_before", "covered_between", "enclosing", "intersect", "nest",
           "self_time", "union"]


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping intervals; return sorted, disjoint (starts, ends)."""
    if len(starts) == 0:
        return np.empty(0, "int64"), np.empty(0, "int64")
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, "int64")[order]
    e = np.maximum.accumulate(np.asarray(ends, "int64")[order])
    # A new run starts where the interval begins after everything before it ended.
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    run = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s), "int64")
    np.maximum.at(out_e, run, e)
    return out_s, out_e


def covered(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of the intervals."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the intervals inside [lo, hi]; empty ones dropped."""
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def nest(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent index (-1 for roots) and depth of each interval of one thread.

    Inputs in any order; outputs aligned with the inputs. A parent is the
    innermost interval that contains the child; equal intervals nest in input
    order of their sorted position (the earlier, longer one is the parent).
    """
    n = len(starts)
    parent = np.full(n, -1, "int64")
    depth = np.zeros(n, "int64")
    if n == 0:
        return parent, depth
    starts = np.asarray(starts, "int64")
    ends = np.asarray(ends, "int64")
    order = np.lexsort((-ends, starts))  # by start, then longest first
    s, e = starts[order], ends[order]
    # Intervals that ended by the time i starts are not its ancestors. Every such
    # interval sorts before i, except zero-length ones at the same instant that
    # sort after it (and i itself when it has zero length).
    ended = np.searchsorted(np.sort(e), s, side="right")
    zero = e <= s
    later_zero = _count_later_zero(s, zero)
    d = np.arange(n) - (ended - later_zero)
    d = np.maximum(d, 0)
    par_sorted = np.full(n, -1, "int64")
    levels = _levels(d)
    for level in range(1, len(levels)):
        here, above = levels[level], levels[level - 1]
        if len(above) == 0 or len(here) == 0:
            continue
        k = np.searchsorted(above, here, side="left") - 1
        ok = k >= 0
        par_sorted[here[ok]] = above[k[ok]]
    parent_pos = np.where(par_sorted >= 0, order[np.maximum(par_sorted, 0)], -1)
    parent[order] = parent_pos
    depth[order] = d
    return parent, depth


def _levels(depth: np.ndarray) -> list[np.ndarray]:
    """The positions at each depth 0..max, each in ascending order: one stable sort, where selecting each
    level from the whole array took a pass over it per level (the host tables nest tens of levels deep)."""
    depth = np.asarray(depth)
    top = int(depth.max()) if len(depth) else -1
    if len(depth) and 0 <= int(depth.min()) and top < 256:
        depth = depth.astype("uint8")  # numpy sorts small unsigned ints stably by radix: 10x faster than int64
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(top + 2), side="left")
    return [order[bounds[level]:bounds[level + 1]] for level in range(top + 1)]


def _count_later_zero(s: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """For each i: zero-length intervals at index >= i with the same start as i."""
    n = len(s)
    out = np.zeros(n, "int64")
    if not zero.any():
        return out
    # Within each group of equal starts, zero-length intervals sort last
    # (longest first), so count them from the end of the group.
    group_end = np.searchsorted(s, s, side="right")
    zero_cum = np.concatenate([[0], np.cumsum(zero)])
    out = zero_cum[group_end] - zero_cum[np.arange(n)]
    return out.astype("int64")


def self_time(durations: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Duration minus the durations of direct children."""
    child_total = np.zeros(len(durations), "float64")
    has = parent >= 0
    np.add.at(child_total, parent[has], durations[has])
    return np.maximum(durations - child_total.astype("int64"), 0)


def enclosing(parent: np.ndarray, depth: np.ndarray, is_candidate: np.ndarray) -> np.ndarray:
    """For each interval, the index of its nearest strict ancestor that is a candidate, or -1."""
    n = len(parent)
    out = np.full(n, -1, "int64")
    if n == 0:
        return out
    levels = _levels(depth)
    for level in range(1, len(levels)):
        here = levels[level]
        p = parent[here]
        ok = p >= 0
        here, p = here[ok], p[ok]
        out[here] = np.where(is_candidate[p], p, out[p])
    return out


def covered_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For sorted, disjoint intervals: their total length before each time in ``t``."""
    t = np.asarray(t, "int64")
    if len(starts) == 0:
        return np.zeros(len(t), "int64")
    lengths = np.concatenate([[0], np.cumsum(ends - starts)])
    k = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
    inside = np.minimum(np.maximum(t - starts[np.maximum(k - 1, 0)], 0), (ends - starts)[np.maximum(k - 1, 0)])
    return lengths[np.maximum(k - 1, 0)] + np.where(k > 0, inside, 0)


def covered_between(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For sorted, disjoint intervals: how much of each [lo, hi) they cover."""
    return np.maximum(covered_before(starts, ends, hi) - covered_before(starts, ends, lo), 0)


def intersect(s1: np.ndarray, e1: np.ndarray, s2: np.ndarray, e2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two sets of sorted, disjoint intervals, as sorted, disjoint intervals."""
    if len(s1) == 0 or len(s2) == 0:
        return np.empty(0, "int64"), np.empty(0, "int64")
    # Each piece of the intersection starts at a start of one set inside an interval of the other.
    starts = np.concatenate([s1, s2])
    ends_1 = _end_of_containing(s1, e1, starts)
    ends_2 = _end_of_containing(s2, e2, starts)
    ends = np.minimum(ends_1, ends_2)
    keep = ends > starts
    return union(starts[keep], ends[keep])


def containing(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For sorted, disjoint intervals [start, end): the index of the one containing each t, or -1."""
    t = np.asarray(t)
    if len(starts) == 0:
        return np.full(len(t), -1, "int64")
    k = np.searchsorted(starts, t, side="right") - 1
    return np.where((k >= 0) & (t < ends[np.maximum(k, 0)]), k, -1)


def _end_of_containing(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """End of the interval containing each t, or t itself when none does."""
    k = containing(s, e, t)
    return np.where(k >= 0, e[np.maximum(k, 0)], t)


def complement(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of sorted, disjoint intervals inside [lo, hi]."""
    s, e = clip(starts, ends, lo, hi)
    gap_s = np.concatenate([[lo], e]).astype("int64")
    gap_e = np.concatenate([s, [hi]]).astype("int64")
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]
