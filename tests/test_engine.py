"""Small pieces of the columnar path that must give exactly what the slow way gave."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgprof.io import frames as T
from cgprof.metrics.intervals import is_sorted, sort_stable


@pytest.mark.parametrize(("a", "b", "expected"), [
    ([1, 2, 3], [9, 0, 5], True),
    ([1, 1, 2], [3, 4, 0], True),
    ([1, 1, 2], [4, 3, 0], False),   # tie on the first key, second goes down
    ([2, 1, 3], [0, 0, 0], False),
    ([5, 5, 5], [1, 1, 1], True),
    ([7], [1], True),
])
def test_is_sorted_matches_a_stable_sort(a, b, expected):
    df = pd.DataFrame({"a": a, "b": b, "c": range(len(a))})
    assert is_sorted(df, ["a", "b"]) is expected
    pd.testing.assert_frame_equal(sort_stable(df, ["a", "b"]),
                                  df.sort_values(["a", "b"], kind="stable"))


def test_is_sorted_refuses_non_integer_keys():
    df = pd.DataFrame({"a": ["x", "y"]})
    assert is_sorted(df, ["a"]) is False


def test_names_are_the_categorical_the_row_by_row_map_gave():
    strings = pd.Series({1: "b", 2: "a", 3: "b"}, dtype="object")  # 1 and 3: same text
    ids = np.array([3, 1, 2, -1, 7, 2], dtype=np.int64)
    index = pd.RangeIndex(len(ids))
    got = T._names(ids, strings, index)
    lookup = {i: strings.get(i, f"<unknown string {i}>") for i in pd.unique(ids)}
    want = pd.Series(ids).map(lookup).astype("category")
    pd.testing.assert_series_equal(got, want)
    assert list(got) == ["b", "b", "a", "<unknown string -1>", "<unknown string 7>", "a"]
