"""The numpy group-by helpers give pandas' groups, sums and orders, ties included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from advisor.analyze import group_by


def _frame(seed: int, n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "op": rng.choice(["aten::mm", "aten::add", "", "aten::copy_", "aten::relu"], n).astype(object),
        "line": rng.integers(-1, 6, n),
        "file": rng.choice(["train.py", "model.py", ""], n).astype(object),
        "dur": rng.integers(0, 4, n) * 1000,  # few distinct values: many ties
    })


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_groups_sums_and_first_rows_follow_groupby_without_sorting(seed: int) -> None:
    frame = _frame(seed)
    ids, n = group_by.group_ids(frame["op"], frame["line"].to_numpy(), frame["file"].to_numpy())
    expected = frame.groupby(["op", "line", "file"], sort=False)["dur"].agg(["sum", "size"]).reset_index()
    assert n == len(expected)
    first = group_by.first_rows(ids, n)
    got = frame.iloc[first][["op", "line", "file"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected[["op", "line", "file"]], check_dtype=False)
    assert group_by.sums(ids, n, frame["dur"].to_numpy()).tolist() == expected["sum"].tolist()
    assert np.bincount(ids, minlength=n).tolist() == expected["size"].tolist()


@pytest.mark.parametrize("kind", ["quicksort", "stable"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_by_weight_orders_ties_as_pandas_sort_values(kind: str, seed: int) -> None:
    weights = np.random.default_rng(seed).integers(0, 5, 200) * 7  # many equal weights
    expected = pd.Series(weights).sort_values(ascending=False, kind=kind).index.to_numpy()
    assert group_by.by_weight(weights, kind).tolist() == expected.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dominant_is_the_stable_sort_then_first_per_key(seed: int) -> None:
    """As ``groupby([by, *keys]).sum().sort_values(stable, desc).drop_duplicates(by)`` does."""
    frame = _frame(seed)
    g = frame.groupby(["op", "file", "line"], sort=False)["dur"].sum().reset_index()
    expected = g.sort_values("dur", ascending=False, kind="stable").drop_duplicates("op").set_index("op")
    by, n_by = group_by.group_ids(frame["op"])
    ids, n = group_by.group_ids(by, frame["file"].to_numpy(), frame["line"].to_numpy())
    best = group_by.dominant(by, n_by, ids, n, group_by.sums(ids, n, frame["dur"].to_numpy()))
    first = group_by.first_rows(ids, n)
    for group in best:
        row = frame.iloc[first[group]]
        assert (row["file"], row["line"]) == tuple(expected.loc[row["op"], ["file", "line"]])
