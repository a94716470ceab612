"""Vectorised interval arithmetic against plain-Python references."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.analyze.intervals import covered, enclosing, nest, self_time, union


def _random_nested(seed: int, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: list[tuple[int, int]] = []

    def fill(lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi and len(out) < n:
            a = t + int(rng.integers(0, 5))
            b = min(hi, a + int(rng.integers(0, 60)))
            if a > hi:
                return
            out.append((a, b))
            if depth < 6 and b - a > 4:
                fill(a, b, depth + 1)
            t = b

    fill(0, 10**6, 0)
    perm = rng.permutation(len(out))
    return np.array([out[i][0] for i in perm]), np.array([out[i][1] for i in perm])


def _reference_parents(s: np.ndarray, e: np.ndarray) -> list[int]:
    order = sorted(range(len(s)), key=lambda i: (s[i], -e[i]))
    stack: list[int] = []
    parent = [-1] * len(s)
    for i in order:
        while stack and e[stack[-1]] <= s[i] and not (e[i] == s[i] == s[stack[-1]] and e[stack[-1]] > s[stack[-1]]):
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nest_matches_a_stack_walk(seed: int) -> None:
    s, e = _random_nested(seed)
    parent, depth = nest(s, e)
    assert parent.tolist() == _reference_parents(s, e)
    assert (depth[parent >= 0] == depth[parent[parent >= 0]] + 1).all()


def test_self_time_subtracts_direct_children_only() -> None:
    s = np.array([0, 10, 20, 60])
    e = np.array([100, 50, 40, 90])
    parent, _ = nest(s, e)
    assert self_time(e - s, parent).tolist() == [100 - 40 - 30, 40 - 20, 20, 30]


def test_enclosing_finds_nearest_candidate_ancestor() -> None:
    s = np.array([0, 10, 20, 30])
    e = np.array([100, 90, 80, 70])
    parent, depth = nest(s, e)
    found = enclosing(parent, depth, np.array([True, False, True, False]))
    assert found.tolist() == [-1, 0, 0, 2]


def test_union_and_covered() -> None:
    s, e = union(np.array([5, 1, 10, 12]), np.array([8, 6, 11, 20]))
    assert s.tolist() == [1, 10, 12] and e.tolist() == [8, 11, 20]
    assert covered(np.array([0, 0, 50]), np.array([10, 5, 60])) == 20
    assert covered(np.array([], "int64"), np.array([], "int64")) == 0
