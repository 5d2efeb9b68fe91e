"""The numpy sweeps behind gpu_gaps/graph_replays against their plain definitions."""

import numpy as np
import pandas as pd

from cgprof.metrics import intervals as iv


def _sorted_by_pandas(arrays):
    df = pd.DataFrame({i: a for i, a in enumerate(arrays)})
    return df.equals(df.sort_values(list(range(len(arrays))), kind="stable")
                     .reset_index(drop=True))


def test_arrays_sorted_matches_a_stable_sort():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n, k = int(rng.integers(0, 8)), int(rng.integers(1, 4))
        arrays = [rng.integers(0, 3, n) for _ in range(k)]
        if rng.random() < 0.3:
            arrays = [np.zeros(n, dtype=np.int64), *arrays]  # a constant leading key
        if rng.random() < 0.4:
            order = np.lexsort(arrays[::-1])
            arrays = [a[order] for a in arrays]
        assert iv.arrays_sorted(arrays) == _sorted_by_pandas(arrays)


def test_group_order_is_the_stable_lexsort():
    rng = np.random.default_rng(1)
    for _ in range(500):
        n = int(rng.integers(1, 40))
        start = rng.integers(0, 20, n)
        end = start + rng.integers(0, 5, n)
        if rng.random() < 0.7:  # gpu_ops' order: (start, end)
            o = np.lexsort((end, start))
            start, end = start[o], end[o]
        wide = rng.random() < 0.3  # keys too wide for one int64 code: the lexsort
        keys = [rng.choice([0, 2**62], n) if wide else rng.integers(0, 3, n),
                rng.integers(0, 4, n)]
        want = np.lexsort((end, start, *keys[::-1]))
        got = iv.group_order(keys, start, end)
        got = np.arange(n) if got is None else got
        assert got.tolist() == want.tolist()


def test_segment_cummax_restarts_per_group():
    rng = np.random.default_rng(2)
    for groups in (1, 3, 64, 65, 300):
        sizes = rng.integers(1, 5, groups)
        values = rng.integers(-50, 50, int(sizes.sum()))
        first = np.zeros(len(values), dtype=bool)
        first[np.cumsum(sizes) - sizes] = True
        want = np.concatenate([np.maximum.accumulate(values[a:a + s])
                               for a, s in zip(np.cumsum(sizes) - sizes, sizes, strict=True)])
        assert iv._segment_cummax(values, first).tolist() == want.tolist()


def test_match_pairs_is_first_match_of_the_pair_keys():
    a = pd.DataFrame({"pid": np.full(4, 7, dtype=np.int64),
                      "corr_id": np.array([3, 1, 3, 9], dtype=np.int64)})
    b = pd.DataFrame({"pid": np.array([7, 7, 7, 7], dtype=np.int64),
                      "corr_id": np.array([9, 2, 3, 3], dtype=np.int64)})
    for right in (b, b.assign(pid=[7, 8, 7, 7])):
        assert iv.match_pairs(a, right).tolist() == iv.first_match(
            *iv.pair_keys(a, right)).tolist()
    assert iv.match_pairs(a, b).tolist() == [2, -1, 2, 0]
