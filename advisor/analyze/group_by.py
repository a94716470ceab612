"""Group-by on numpy arrays, for the analyzers' inner loops.

A pandas ``groupby(...).agg(...)`` costs a millisecond or more of fixed
overhead, however few the rows; an analysis runs dozens of them. These
helpers do the same with one factorisation per key and ``bincount``, and keep
pandas' order conventions, so results stay identical:

- groups are numbered in order of first appearance (``groupby(sort=False)``);
- :func:`by_weight` orders groups by weight, largest first, with ties as
  pandas' ``sort_values(ascending=False, kind=...)`` leaves them: in group
  order for ``kind="stable"``, as its default quicksort does for
  ``kind="quicksort"`` (the same numpy sort on the same values).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["by_weight", "dominant", "first_rows", "group_ids", "sums"]


def _codes(key: Any) -> tuple[np.ndarray, int]:
    if isinstance(key, pd.Series):
        key = key.array if isinstance(key.dtype, pd.CategoricalDtype) else key.to_numpy()
    if isinstance(key, pd.Categorical):
        key = key.codes
    codes, uniques = pd.factorize(np.asarray(key) if not isinstance(key, np.ndarray) else key)
    return codes, len(uniques)


def group_ids(*keys: Any) -> tuple[np.ndarray, int]:
    """Each row's group (rows with equal values in every key), numbered by first appearance; and the count."""
    ids, n = _codes(keys[0])
    for key in keys[1:]:
        codes, m = _codes(key)
        ids, n = _codes(ids.astype("int64") * max(m, 1) + codes)
    return ids, n


def first_rows(ids: np.ndarray, n: int) -> np.ndarray:
    """The first row of each group."""
    first = np.full(n, len(ids), "int64")
    np.minimum.at(first, ids, np.arange(len(ids)))
    return first


def sums(ids: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    """The sum of ``values`` per group; int64 for integer values (exact below 2**53)."""
    out = np.bincount(ids, weights=values, minlength=n)
    return np.rint(out).astype("int64") if np.issubdtype(np.asarray(values).dtype, np.integer) else out


def by_weight(weights: np.ndarray, kind: str = "stable") -> np.ndarray:
    """Group numbers, largest weight first, ties ordered as ``sort_values(ascending=False, kind=kind)`` does."""
    weights = np.asarray(weights)
    # pandas' nargsort: sort the reversed values ascending, then reverse the result
    return np.arange(len(weights))[::-1][np.argsort(weights[::-1], kind=kind)][::-1]


def dominant(by: np.ndarray, n_by: int, ids: np.ndarray, n: int, weights: np.ndarray) -> np.ndarray:
    """For each value of ``by`` (codes ``0..n_by-1``), the group of ``ids`` with the most weight in it.

    ``by`` and ``ids`` are per row, ``weights`` per group of ``ids``; every group
    must lie within one ``by`` value. Ties go to the group that appears first,
    as a stable descending sort followed by ``drop_duplicates(by)`` does.
    Returns, per ``by`` code, a group number (-1 where it has none).
    """
    group_by = np.full(n, -1, "int64")
    group_by[ids] = by
    order = by_weight(weights, "stable")
    out = np.full(n_by, -1, "int64")
    seen = group_by[order]
    # the first group of each ``by`` in that order
    _, first = np.unique(seen, return_index=True)
    out[seen[first]] = order[first]
    return out
