"""Tests and maps over event names, done once per distinct name.

A trace repeats a few thousand names over millions of events, so a regex or a
parser applied per row is the slow part of an analysis. These helpers factor
the names (a Categorical's codes are already that), apply the Python function
to each distinct name only, and spread the result back with one numpy take.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["codes_and_uniques", "mapped", "used", "where"]


def codes_and_uniques(names: pd.Series | np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Per-row codes into a list of distinct values (code -1 for a missing value)."""
    if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype):
        return names.cat.codes.to_numpy(), list(names.cat.categories)
    codes, uniques = pd.factorize(np.asarray(names, dtype=object) if not isinstance(names, pd.Series) else names)
    return np.asarray(codes), list(uniques)


def used(codes: np.ndarray, count: int) -> np.ndarray:
    """The codes that some row has: a subset of a Categorical keeps every category of the whole column."""
    return np.flatnonzero(np.bincount(codes[codes >= 0], minlength=count))


def where(names: pd.Series | np.ndarray, test: Callable[[str], Any]) -> np.ndarray:
    """``bool(test(name))`` for every row, as a numpy bool array."""
    codes, uniques = codes_and_uniques(names)
    if not uniques:
        return np.zeros(len(codes), bool)
    hit = np.zeros(len(uniques), bool)
    for i in used(codes, len(uniques)):
        hit[i] = bool(test(uniques[i]))
    return np.where(codes >= 0, hit[np.maximum(codes, 0)], False)


def mapped(names: pd.Series | np.ndarray, func: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
    """``func(name)`` for every row (missing names give ``func("")``)."""
    codes, uniques = codes_and_uniques(names)
    values = np.zeros(len(uniques) + 1, dtype=dtype)  # only the used entries are read
    for i in used(codes, len(uniques)):
        values[i] = func(uniques[i])
    values[len(uniques)] = func("")
    return values[np.where(codes >= 0, codes, len(uniques))]
