"""Lookup fast paths on the mid-size real traces (dense id tables, step lookups, windows from
columns) give what the general paths they skip give."""

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
    from cgprof.metrics import gap_measure

    ops, calls = _ops_calls(traces_dir, name)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    span, third = (lo - 1000, hi + 1000), (hi - lo) // 3
    measured = gap_measure.measure_gaps(ops, calls, window=span, streams=False)
    assert measured.streams is None
    full = gap_measure.measure_gaps(ops, calls, window=span).result()
    pdt.assert_frame_equal(measured.gaps, full.gaps)
    for w in ((lo, hi), (lo + third, hi - third), (lo + third, hi + 1000)):
        a = gap_measure.window_gaps(measured, ops, calls, span, w)
        b = gap_measure.window_gaps(full, ops, calls, span, w)
        for table in ("devices", "gaps", "by_kind", "histogram", "streams"):
            pdt.assert_frame_equal(getattr(a, table), getattr(b, table))
    for min_gap in (0, 2000):
        pdt.assert_frame_equal(measured.listed(min_gap), full.above(min_gap).gaps)
    with pytest.raises(ValueError):
        measured.result()


def _groups_by_frames(ranges, inst):
    """steps._groups as it was (frame filters per step thread): the reference."""
    import pandas as pd

    from cgprof import schema as S

    ranges = ranges[ranges["event_type"].isin([S.NVTX_PUSHPOP, S.NVTXT_PUSHPOP])]
    step_names = set(pd.Series(pd.unique(inst["name"])).astype(str))
    names = pd.unique(ranges["name"])
    other_names = pd.Series(names)[~pd.Series(names).astype(str).isin(step_names).to_numpy()]
    others = ranges[ranges["name"].isin(other_names).to_numpy()]
    result = np.full(len(inst), "", dtype=object)
    warm = np.zeros(len(inst), dtype=bool)
    if others.empty:
        return result, warm
    for gtid, steps in inst.groupby("global_tid", sort=False):
        o = others[others["global_tid"] == gtid].sort_values("start_ns", kind="stable")
        if o.empty:
            continue
        os_, oe = o["start_ns"].to_numpy(np.int64), o["end_ns"].to_numpy(np.int64)
        names = o["text"].astype(str).to_numpy()
        is_warm = ((o["text"] == "warmup") & (o["domain"] == "cgprof")).to_numpy()
        s = steps["start_ns"].to_numpy(np.int64)
        e = steps["end_ns"].to_numpy(np.int64)
        j = np.searchsorted(os_, s, "right")
        named = np.full(len(s), -1, dtype=np.int64)
        warm_t = np.zeros(len(s), dtype=bool)
        for d in range(1, 64):
            k = j - d
            live = k >= 0
            if not live.any():
                break
            kk = np.where(live, k, 0)
            hit = live & (oe[kk] >= e)
            named = np.where(hit & (named < 0), kk, named)
            warm_t |= hit & is_warm[kk]
        inner = np.searchsorted(os_, e, "left")
        w_idx = np.flatnonzero(is_warm)
        if len(w_idx):
            lo = np.searchsorted(w_idx, j, "left")
            hi = np.searchsorted(w_idx, inner, "left")
            ends = np.append(oe[w_idx], np.iinfo(np.int64).max)
            has = hi > lo
            first_end = np.minimum.reduceat(ends, np.ravel(np.column_stack([lo, hi])))[::2]
            warm_t |= has & (first_end <= e)
        pos = steps.index.to_numpy()
        result[pos[named >= 0]] = names[named[named >= 0]]
        warm[pos] |= warm_t
    return result, warm


def test_step_groups_from_arrays_equal_the_frame_filters(traces_dir, monkeypatch):
    """steps._groups on every shipped trace whose steps are NVTX ranges (and with every
    range's name blanked once: a missing name is never a step's) gives what the per-thread
    frame filters gave."""
    import cgprof
    from cgprof.metrics import step_table, steps
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls
    from cgprof.metrics.summaries import nvtx_ranges

    seen = []
    real = step_table._groups
    monkeypatch.setattr(step_table, "_groups", lambda r, i: seen.append((r, i)) or real(r, i))
    for path in sorted(traces_dir.glob("*.sqlite")):
        trace = cgprof.load(path)
        steps.compute_steps(trace, api_calls(trace), gpu_ops(trace))
        assert nvtx_ranges(trace) is not None
    assert len(seen) >= 10
    for ranges, inst in seen:
        for r in (ranges, ranges.assign(name=None), ranges.iloc[::2]):
            got, want = real(r, inst), _groups_by_frames(r, inst)
            assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    assert any((g != "").any() for g in (real(r, i)[0] for r, i in seen))
    assert any(real(r, i)[1].any() for r, i in seen)


def test_window_from_columns_equals_the_window_steps_frame(traces_dir):
    import cgprof
    from cgprof.metrics import step_result, steps
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    def by_frame(res):  # StepResult.window as it was: from the window_steps frame
        st = res.window_steps()
        if res.source == "whole-trace" or st.empty:
            return None
        end = int(st["end_ns"].max())
        gpu_end = st["gpu_end_ns"].dropna()
        if len(gpu_end):
            end = max(end, int(gpu_end.max()))
        return int(st["start_ns"].min()), end

    for path in sorted(traces_dir.glob("*.sqlite")):
        trace = cgprof.load(path)
        res = steps.compute_steps(trace, api_calls(trace), gpu_ops(trace))
        assert res.window() == by_frame(res), path.name
        none_in = res.steps.assign(in_window=False)  # no steady step: every step
        other = step_result.StepResult(**{**res.__dict__, "steps": none_in})
        assert other.window() == by_frame(other), path.name


def test_step_lookup_kept_from_compute_steps_equals_the_joins(traces_dir):
    """StepResult.step_of_calls (compute_steps' correlation-id table) gives call_steps_of;
    classify_steps with it gives what it gives without; a copy with other call_steps and
    the analysis's result keep none."""
    import dataclasses

    import cgprof
    from cgprof.metrics import analyze, step_launch_wait, steps
    from cgprof.metrics.coverage import call_steps_of
    from cgprof.metrics.gap_measure import gpu_gaps
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    kept = 0
    for path in sorted(traces_dir.glob("*.sqlite")):
        trace = cgprof.load(path)
        ops, calls = gpu_ops(trace), api_calls(trace)
        res = steps.compute_steps(trace, calls, ops)
        got = res.step_of_calls(calls)
        if got is not None:
            kept += 1
            assert got.tolist() == call_steps_of(calls, res.call_steps).tolist(), path.name
            gaps = gpu_gaps(ops, calls).gaps
            other = dataclasses.replace(res, steps=res.steps.copy())
            step_launch_wait.classify_steps(res, gaps)
            other.lookup = None
            step_launch_wait.classify_steps(other, gaps)
            pdt.assert_frame_equal(res.steps, other.steps)
        copy = dataclasses.replace(res, call_steps=res.call_steps.iloc[0:0].copy())
        assert copy.step_of_calls(calls) is None and copy._lookup() is None
        assert analyze(trace).steps.lookup is None
    assert kept >= 10


def test_names_from_one_index_lookup_equal_a_get_per_id():
    import pandas as pd

    from cgprof.io import frames as T

    def by_get(ids, strings, index):  # _names as it was: strings.get per distinct id
        codes, uniq = pd.factorize(ids, sort=False)
        cat = pd.Categorical([strings.get(int(i), f"<unknown string {int(i)}>") for i in uniq])
        return pd.Series(pd.Categorical.from_codes(cat.codes[codes], dtype=cat.dtype),
                         index=index, copy=False)

    strings = pd.Series({1: "a", 5: "b", 7: None, 9: "zz", 2: "a"}, dtype="object")
    for ids in ([1, 5, 7, 9, 2, 3, -1, 1, 5], [3, 4], [9, 9, 1], list(range(-3, 2000, 7))):
        ids = np.array(ids, dtype=np.int64)
        index = pd.RangeIndex(len(ids))
        for s in (strings, pd.Series(dtype="object")):
            pdt.assert_series_equal(T._names(ids, s, index), by_get(ids, s, index))
