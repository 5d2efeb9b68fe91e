"""The numpy sweeps of cgprof.metrics.steps and its parts (step_attribution, step_table,
step_launch_wait) against the straightforward helpers they replace."""

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from cgprof.metrics import step_attribution, step_launch_wait, step_table, steps
from cgprof.metrics.intervals import assign_to_ranges, union_busy


def _ranges(rng, k, per, nested):
    """k threads, ``per`` ranges each: back to back, or (nested) some inside others."""
    code, start, end = [], [], []
    for c in range(k):
        t = int(rng.integers(0, 50))
        for _ in range(per):
            s = t + int(rng.integers(0, 5))
            e = s + int(rng.integers(0, 40))
            code.append(c), start.append(s), end.append(e)
            if nested and rng.random() < 0.3:
                code.append(c), start.append(s + 2), end.append(s + 5)
            t = e
    return np.array(code), np.array(start, dtype=np.int64), np.array(end, dtype=np.int64)


@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_in_ranges_equals_assign_to_ranges(k, nested, seed):
    """Both the running-count path (sorted points, few codes) and the composite searchsorted
    path give assign_to_ranges' answer, ties and nesting included."""
    rng = np.random.default_rng(seed)
    r_code, r_start, r_end = _ranges(rng, k, 30, nested)
    m = 2000
    p_start = np.sort(rng.integers(0, int(r_end.max()) + 20, m)).astype(np.int64)
    p_end = p_start + rng.integers(0, 8, m)
    p_code = rng.integers(-1, k + 1, m)  # -1 and k: keys without ranges
    p_code[p_code == k] = -1
    want = assign_to_ranges(p_code, p_start, p_end, r_code, r_start, r_end)
    got = step_attribution._in_ranges(p_code.astype(np.int32), p_start, p_end, r_code, r_start,
                                      r_end)
    np.testing.assert_array_equal(got, want)
    shuffled = rng.permutation(m)  # unsorted points: the composite path
    got = step_attribution._in_ranges(p_code[shuffled].astype(np.int32), p_start[shuffled],
                                      p_end[shuffled], r_code, r_start, r_end)
    np.testing.assert_array_equal(got, want[shuffled])
    assert (want >= 0).any()


@pytest.mark.parametrize("seed", range(5))
def test_busy_per_step_equals_union_busy(seed):
    rng = np.random.default_rng(seed)
    m, n = 3000, 40
    step = rng.integers(0, n - 5, m)  # some steps have no ops
    start = rng.integers(0, 10**6, m).astype(np.int64)
    end = start + rng.integers(0, 5000, m)
    order = np.lexsort((start, step))
    got = step_table._busy_per_step(step[order], start[order], end[order], n)
    want = union_busy(pd.DataFrame({"step": step, "start_ns": start, "end_ns": end}), ["step"])
    found = np.flatnonzero(got["found"])
    np.testing.assert_array_equal(found, want["step"].to_numpy())
    for mine, theirs in (("ops", "ops"), ("first", "first_start_ns"), ("last", "last_end_ns"),
                         ("busy", "busy_ns")):
        np.testing.assert_array_equal(got[mine][found], want[theirs].to_numpy())
    assert not got["ops"][~got["found"]].any()


def test_as_reindexed_rounds_like_pandas_reindex():
    big = np.array([2**60 + 1, 5], dtype=np.int64)
    found = np.array([True, False])
    want = pd.Series([2**60 + 1], index=[0]).reindex([0, 1]).fillna(0).astype("int64")
    np.testing.assert_array_equal(step_table._as_reindexed(big * found, found), want.to_numpy())
    np.testing.assert_array_equal(step_table._as_reindexed(big, np.array([True, True])), big)


def test_classify_steps_merge_fallback_equals_lookup(traces_dir):
    """classify_steps' key lookup gives the inner merge's launch_wait_ns (the path taken when
    call_steps' keys are not plain int64)."""
    import cgprof
    from cgprof.metrics.gap_measure import gpu_gaps
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / "mlp_train_eager.sqlite")
    ops, calls = gpu_ops(trace), api_calls(trace)
    res = steps.compute_steps(trace, calls, ops)
    gaps = gpu_gaps(ops, calls).gaps
    step_launch_wait.classify_steps(res, gaps)
    fast = res.steps.copy()
    res.call_steps = res.call_steps.astype({"pid": "Int64"})
    step_launch_wait.classify_steps(res, gaps)
    pdt.assert_frame_equal(res.steps, fast)
    assert fast["launch_wait_ns"].sum() > 0


def _attribute_calls_reference(calls, inst):
    """The per-key assign_to_ranges version that _attribute_calls replaced."""
    c_tid, c_pid = calls["global_tid"].to_numpy(), calls["pid"].to_numpy()
    c_start, c_end = calls["start_ns"].to_numpy(), calls["end_ns"].to_numpy()
    s_tid, s_pid = inst["global_tid"].to_numpy(), inst["pid"].to_numpy()
    s_start, s_end = inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy()
    step = assign_to_ranges(c_tid, c_start, c_end, s_tid, s_start, s_end)
    threads_per_pid = pd.Series(s_tid).groupby(s_pid).nunique()
    single = threads_per_pid.index[threads_per_pid == 1].to_numpy()
    other = ~np.isin(c_tid, np.unique(s_tid)) & np.isin(c_pid, single)
    if other.any():
        step[other] = assign_to_ranges(c_pid[other], c_start[other], c_end[other],
                                       s_pid, s_start, s_end)
    return step


@pytest.mark.parametrize("procs", [1, 2, 10])
@pytest.mark.parametrize("seed", range(4))
def test_attribute_calls_equals_per_key_sweeps(procs, seed):
    """Calls on step threads, on other threads of processes with one step thread (matched in
    time), and of processes with several step threads (left out), for few and many
    processes (the per-process comparison and the code-array paths)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(procs):
        threads = 1 if p % 2 == 0 else 2  # odd processes mark steps on two threads
        for t in range(threads):
            t0 = int(rng.integers(0, 100))
            for _ in range(20):
                s = t0 + int(rng.integers(0, 4))
                e = s + int(rng.integers(1, 30))
                rows.append((1000 + p, (1000 + p) * 100 + t, s, e))
                t0 = e
    inst = pd.DataFrame(rows, columns=["pid", "global_tid", "start_ns", "end_ns"])
    inst = inst.sort_values(["start_ns", "global_tid"], kind="stable").reset_index(drop=True)
    m = 3000
    pid = 1000 + rng.integers(0, procs + 1, m)  # one process without steps
    tid = pid * 100 + rng.integers(0, 4, m)  # threads 2, 3: no step ranges
    start = np.sort(rng.integers(0, int(inst["end_ns"].max()) + 10, m))
    calls = pd.DataFrame({"pid": pid, "global_tid": tid, "start_ns": start,
                          "end_ns": start + rng.integers(0, 6, m)})
    want = _attribute_calls_reference(calls, inst)
    np.testing.assert_array_equal(step_attribution._attribute_calls(calls, inst), want)
    assert (want >= 0).sum() > m // 4
