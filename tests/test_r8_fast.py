"""Round eight's fast paths (the mid-size real trace) give what the paths they skip give."""

import numpy as np
import pandas.testing as pdt
import pytest

from cgprof.metrics import intervals as iv
from cgprof.metrics import replays as R

EAGER = ["mlp_train_eager", "resnet18_train_eager", "transformer_train_eager"]


def _ops_calls(traces_dir, name):
    import cgprof
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    return gpu_ops(trace), api_calls(trace)


@pytest.mark.parametrize("name", EAGER)
@pytest.mark.parametrize("node_level", [True, False])
def test_no_graph_launch_gives_the_general_paths_empty_table(traces_dir, name, node_level):
    ops, calls = _ops_calls(traces_dir, name)
    assert "graph_launch" not in calls["family"].cat.categories
    fast = R.graph_replays(ops, calls, node_level=node_level)
    slow = R._replays_of(ops, calls.iloc[:0], node_level=node_level)
    pdt.assert_frame_equal(fast.replays, slow.replays, check_exact=True,
                           check_index_type=True, check_column_type=True)
    assert fast.summary == slow.summary
    assert (fast.cost_model, fast.node_level) == (slow.cost_model, slow.node_level)


def _first_match_sorted(left, right):
    """first_match's sort path (np.unique + searchsorted), the reference."""
    uniq, first = np.unique(right, return_index=True)
    pos = np.searchsorted(uniq, left)
    pos[pos == len(uniq)] = 0
    return np.where(uniq[pos] == left, first[pos], -1)


@pytest.mark.parametrize("spread", [1, 3, 7, 15, 40])
@pytest.mark.parametrize("rising", [True, False])
def test_first_match_by_table_on_sparse_keys_equals_the_sort(spread, rising):
    # correlation ids spread over `spread` times their count (a real trace: ~7.5), left keys
    # also below, between and past the right ones; a repeated key takes the sort path
    rng = np.random.default_rng(spread)
    n = 5000
    right = np.sort(rng.choice(np.arange(1, spread * n + 1), n, replace=False))
    if not rising:
        right = rng.permutation(right)
    left = rng.integers(-5, spread * n + 500, 3 * n)
    for r in (right, np.append(right, right[7])):
        got = iv.first_match(left, r)
        assert got.tolist() == _first_match_sorted(left, r).tolist()
    table = iv._distinct_table(right)
    assert (table is not None) == (spread * n < iv.dense_room(n))
    assert iv._distinct_table(np.append(right, right[3])) is None


def test_table_get_outside_the_table_is_minus_one():
    table = np.array([4, -1, 6], dtype=np.int32)
    for key in ([0, 1, 2], [2, 3, 9, 0], [-1, 0, 5], []):
        k = np.array(key, dtype=np.int64)
        want = [table[x] if 0 <= x < 3 else -1 for x in key]
        got = iv.table_get(table, k)
        assert got.tolist() == want and got.dtype == np.int32


def test_dense_room_is_wider_only_below_a_million_keys():
    assert iv.dense_room(10) == 1 << 16
    assert iv.dense_room(212_821) == 16 * 212_821  # the ResNet-18 trace's calls
    assert iv.dense_room(1 << 20) == 4 << 20  # 1M keys on: 4 slots per key, as before
    assert iv.dense_room(10_000_000) == 40_000_000


@pytest.mark.parametrize("name", ["resnet18_train_eager", "mlp_train_graph", "user_train_graph"])
def test_window_gaps_from_the_span_gaps_alone_equal_those_from_its_result(traces_dir, name):
    """analyze measures the steps' span without its tables when the window is another:
    window_gaps reads only the gaps, and listed() is above().gaps."""
    from cgprof.metrics import gaps as G

    ops, calls = _ops_calls(traces_dir, name)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    span, third = (lo - 1000, hi + 1000), (hi - lo) // 3
    measured = G.measure_gaps(ops, calls, window=span, streams=False)
    assert measured.streams is None
    full = G.measure_gaps(ops, calls, window=span).result()
    pdt.assert_frame_equal(measured.gaps, full.gaps)
    for w in ((lo, hi), (lo + third, hi - third), (lo + third, hi + 1000)):
        a = G.window_gaps(measured, ops, calls, span, w)
        b = G.window_gaps(full, ops, calls, span, w)
        for table in ("devices", "gaps", "by_kind", "histogram", "streams"):
            pdt.assert_frame_equal(getattr(a, table), getattr(b, table))
    for min_gap in (0, 2000):
        pdt.assert_frame_equal(measured.listed(min_gap), full.above(min_gap).gaps)
    with pytest.raises(ValueError):
        measured.result()
