"""Memory tricks of the 10M-row analysis: constant columns as stride-0 views, the kernel
columns lent to the GPU ops while the gaps are measured, the coverage's chunked eager table.
Each must give exactly what the plain way gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import cgprof
from cgprof.io import frames as F
from cgprof.io import framestore
from cgprof.io import loader as L
from cgprof.io import trace as T
from cgprof.metrics import analyze, gap_chunked, gap_measure
from cgprof.metrics import coverage as CV
from cgprof.metrics.gpu import gpu_ops

TRACES = ["mlp_train_eager", "mlp_train_graph", "ddp_mlp_train_graph", "resnet18_infer_graph",
          "mlp_train_graph_graphtrace", "transformer_train_eager", "user_train_graph"]


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every column a fresh contiguous copy (no stride-0 view)."""
    return pd.DataFrame({c: df[c].copy(deep=True) for c in df.columns})


def _assert_same_frame(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    assert list(a.dtypes) == list(b.dtypes)
    pdt.assert_frame_equal(a, b, check_exact=True)


# ---------------------------------------------------------------------------------------
# constant columns


def test_constant_view_edge_values():
    big = np.iinfo(np.int64).max
    for values in ([5] * 7, [big] * 3, [-big - 1] * 4, [0, 0]):
        a = np.array(values, dtype=np.int64)
        v = T.constant_view(a)
        assert v.strides == (0,) and v.dtype == a.dtype and len(v) == len(a)
        assert (v == a).all() and not v.flags.writeable
        assert v.base is not None and v.base.nbytes <= 8  # one value stored
    for values in ([1, 2, 1], [1, 1, 2], [2, 1, 1], []):
        a = np.array(values, dtype=np.int64)
        assert T.constant_view(a) is a
    u = np.full(4, 2**63 + 5, dtype=np.uint64)
    assert (T.constant_view(u) == u).all() and T.constant_view(u).dtype == np.uint64
    f = np.ones(3)
    assert T.constant_view(f) is f  # integers only


def test_take_rows_keeps_a_constant_view():
    v = T.constant_view(np.full(10, 7, dtype=np.int64))
    mask = np.arange(10) % 3 == 0
    for rows in (mask, np.array([9, 0, 4]), np.zeros(0, dtype=np.int64)):
        got = T.take_rows(v, rows)
        assert got.strides == (0,) or len(got) == 0
        assert (got == np.asarray(v)[rows]).all() and len(got) == len(np.asarray(v)[rows])
    a = np.arange(5)
    assert (T.take_rows(a, np.array([4, 1])) == [4, 1]).all()


def test_share_constants_keeps_dtypes_values_and_nulls():
    df = pd.DataFrame({"k": np.full(6, 3, dtype=np.int64), "v": np.arange(6),
                       "none": pd.array([None] * 6, dtype="Int64"),
                       "some": pd.array([1, None, 1, 1, 1, 1], dtype="Int64"),
                       "name": pd.Categorical(list("aabbcc"))})
    want = _plain(df)
    got = T.share_constants(df)
    _assert_same_frame(got, want)
    assert got["k"].to_numpy().strides == (0,)
    assert got["v"].to_numpy().strides == (8,)
    assert got["none"].isna().all() and got["some"].isna().sum() == 1
    assert got["none"].astype(object).tolist() == [pd.NA] * 6


@pytest.mark.parametrize("name", TRACES)
def test_loaded_trace_equals_its_plain_copy(traces_dir, name):
    """The loaded frames (constant columns shared) hold the values and dtypes of plain
    copies, and the analysis of either gives the same result."""
    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    shared = [c for c in trace.kernels.columns if isinstance(trace.kernels[c].dtype, np.dtype)
              and trace.kernels[c].to_numpy().strides == (0,)]
    if name != "ddp_mlp_train_graph":  # one process on one GPU: pid and device are shared
        assert {"pid", "device_id"} <= set(shared)
    plain = cgprof.load(traces_dir / f"{name}.sqlite")
    for table in ("kernels", "runtime", "memcpy", "memset", "sync", "graph_trace"):
        setattr(plain, table, _plain(getattr(plain, table)))
        _assert_same_frame(getattr(trace, table), getattr(plain, table))
    a, b = analyze(trace), analyze(plain)
    for attr in ("launches", "api_summary", "kernel_summary", "nvtx_summary", "step_gaps"):
        _assert_same_frame(getattr(a, attr), getattr(b, attr))
    _assert_same_frame(a.steps.steps, b.steps.steps)
    _assert_same_frame(a.steps.call_steps, b.steps.call_steps)
    for t in ("devices", "gaps", "by_kind", "histogram", "streams"):
        _assert_same_frame(getattr(a.gaps, t), getattr(b.gaps, t))
    _assert_same_frame(a.replays.replays, b.replays.replays)
    _assert_same_frame(a.coverage.eager_top, b.coverage.eager_top)
    assert a.info == b.info and a.coverage.summary == b.coverage.summary


@pytest.mark.parametrize("name", TRACES)
def test_gpu_ops_constant_columns(traces_dir, name):
    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    ops = gpu_ops(trace)
    plain = cgprof.load(traces_dir / f"{name}.sqlite")
    for table in ("kernels", "memcpy", "memset", "graph_trace"):
        setattr(plain, table, _plain(getattr(plain, table)))
    want = gpu_ops(plain)
    _assert_same_frame(ops, want)


def test_chunked_gap_table_constant_ids(traces_dir, monkeypatch):
    """The chunked gap fill (big traces) keeps the one device's id and the one process's
    pid as constant columns; the table equals the whole-array path's, <NA> included."""
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / "mlp_train_graph.sqlite")
    ops, calls = gpu_ops(trace), api_calls(trace)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    for window in (None, (lo - 1000, hi + 1000)):
        slow = gap_measure.gpu_gaps(ops, calls, window=window)
        monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 0)
        fast = gap_measure.gpu_gaps(ops, calls, window=window)
        monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1 << 21)
        _assert_same_frame(fast.gaps, slow.gaps)
        assert fast.gaps["device_id"].to_numpy().strides == (0,)
        pid = fast.gaps["next_pid"]
        data = pid.to_numpy() if pid.dtype == np.int64 else pid.array._data
        assert data.strides == (0,)


# ---------------------------------------------------------------------------------------
# kernel columns lent to the GPU ops


@pytest.mark.parametrize("name", [*TRACES, "user_train"])
def test_kernel_columns_are_lent_and_given_back(traces_dir, monkeypatch, name):
    """While the gaps are measured the kernels lack the columns the ops hold (so no stage
    there can read them); afterwards they are back, the same values, dtypes and order."""
    import cgprof.metrics as M

    monkeypatch.setattr(M, "ASIDE_MAX_ROWS", -1)  # the big-trace path: summaries first, alone
    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    want = _plain(trace.kernels)
    # a constant column (one stream) is a stride-0 view, not a copy to lend
    lent = {c for c in ("start_ns", "end_ns", "stream_id", "corr_id", "dur_ns")
            if trace.kernels[c].to_numpy().strides != (0,)}
    seen = []
    real = M.measure_gaps

    def spy(ops, calls, window=None, **options):
        seen.append(list(trace.kernels.columns))
        return real(ops, calls, window, **options)

    monkeypatch.setattr(M, "measure_gaps", spy)
    res = analyze(trace)
    assert len(seen) == 1 and {"start_ns", "end_ns", "corr_id", "dur_ns"} <= lent
    if res.step_gaps is res.gaps.gaps:  # the window is the steps' span: lent meanwhile
        assert not lent & set(seen[0]), seen[0]
    else:  # the window's gaps are measured on the ops again: nothing lent
        assert lent <= set(seen[0])
    if name.startswith("user_train"):
        assert res.step_gaps is res.gaps.gaps
    _assert_same_frame(trace.kernels, want)
    assert res.trace.kernels is trace.kernels


def test_kernel_columns_given_back_when_the_gaps_fail(traces_dir, monkeypatch):
    import cgprof.metrics as M

    monkeypatch.setattr(M, "ASIDE_MAX_ROWS", -1)  # the big-trace path: summaries first, alone
    trace = cgprof.load(traces_dir / "user_train.sqlite")
    want = _plain(trace.kernels)

    def boom(ops, calls, window=None, **options):
        assert "start_ns" not in trace.kernels
        raise RuntimeError("boom")

    monkeypatch.setattr(M, "measure_gaps", boom)
    with pytest.raises(RuntimeError, match="boom"):
        analyze(trace)
    _assert_same_frame(trace.kernels, want)


def test_a_wrong_rebuild_is_caught(traces_dir):
    import cgprof.metrics as M

    trace = cgprof.load(traces_dir / "mlp_train_eager.sqlite")
    ops = gpu_ops(trace)
    lent = M._lend_kernel_columns(trace, ops)
    assert lent is not None
    ops["start_ns"] = ops["start_ns"].to_numpy() + 1
    with pytest.raises(AssertionError, match="differ"):
        M._return_kernel_columns(trace, ops, lent)


# ---------------------------------------------------------------------------------------
# the coverage's eager table, a chunk of kernels at a time


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_eager_top_chunked(traces_dir, monkeypatch, name, chunk):
    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    want = analyze(trace).coverage
    monkeypatch.setattr(CV, "_TOP_CHUNK", chunk)
    got = analyze(trace).coverage
    _assert_same_frame(got.eager_top, want.eager_top)
    assert got.eager_per_step == want.eager_per_step


def _reference_top(kernels, calls, launch_rows, n):
    """The eager table by pandas: each eager kernel joined to its launch call, the call's host
    time charged to its first kernel, launch_api the most frequent (first seen on a tie)."""
    k = kernels[kernels["graph_node_id"].isna()].reset_index(drop=True)
    c = calls.iloc[launch_rows][["corr_id", "dur_ns", "name"]].rename(
        columns={"dur_ns": "api_ns", "name": "api"})
    j = k.merge(c, on="corr_id", how="inner")
    j["api_ns"] = j["api_ns"].where(~j["corr_id"].duplicated(), 0)
    j = j[j["name"].notna()]
    rows = []
    for name, g in j.groupby(j["name"].astype(str), sort=False):
        pairs = g[g["api"].notna()]["api"].astype(str)
        counts = pairs.value_counts(sort=False)  # in order of first appearance
        best = counts[counts == counts.max()].index[0] if len(counts) else None
        rows.append({"name": name, "kernels": len(g) / n, "gpu_ns": g["dur_ns"].sum() / n,
                     "launch_api": best, "launch_host_ns": g["api_ns"].sum() / n})
    top = pd.DataFrame(rows).sort_values(["gpu_ns", "name"], ascending=[False, True],
                                         kind="stable")
    return top.head(CV.EAGER_TOP_N).reset_index(drop=True)


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 20])
def test_eager_top_ties_and_shared_launches(monkeypatch, chunk):
    """Names launched equally often by two APIs (the first seen wins), a launch call that
    starts two kernels (its host time counted once), kernels without a name."""
    rng = np.random.default_rng(7)
    n_calls = 40
    apis = ["cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"]
    calls = pd.DataFrame({
        "pid": np.full(n_calls, 1, dtype=np.int64),
        "corr_id": np.arange(10, 10 + n_calls, dtype=np.int64),
        "dur_ns": rng.integers(1, 1000, n_calls),
        "name": pd.Categorical([apis[i % 3] if i % 11 else None for i in range(n_calls)],
                               categories=apis),
    })
    corr = np.concatenate([calls["corr_id"].to_numpy(), calls["corr_id"].to_numpy()[:7]])
    nk = len(corr)
    names = ["k_a", "k_b", "k_c"]
    kernels = pd.DataFrame({
        "pid": np.full(nk, 1, dtype=np.int64),
        "corr_id": corr,
        "graph_node_id": pd.array([None if i % 5 else 3 for i in range(nk)], dtype="Int64"),
        "name": pd.Categorical([names[i % 3] if i % 13 else None for i in range(nk)],
                               categories=names),
        "dur_ns": rng.integers(1, 5000, nk),
    })
    n = 4
    rows = np.arange(n_calls, dtype=np.int32)
    launches = CV.StepLaunches(rows=rows, pos=(rows % n).astype(np.int32),
                               kernel=np.ones(n_calls, dtype=bool))
    ws = pd.DataFrame({"step": np.arange(n)})
    monkeypatch.setattr(CV, "_TOP_CHUNK", chunk)
    top, host = CV._eager_top(ws, kernels, calls, launches)
    want = _reference_top(kernels, calls, rows, n)
    pdt.assert_frame_equal(top.reset_index(drop=True), want, check_dtype=False)
    assert host.sum() == calls["dur_ns"].sum()


def test_launch_api_tie_goes_to_the_first_pair():
    table = np.array([[2, 2, 0], [0, 0, 3]])
    order = {0 * 3 + 1: 4, 0 * 3 + 0: 9, 1 * 3 + 2: 0}
    got = CV._launch_api(table, np.array([0, 1]), np.array(["a", "b", "c"], dtype=object),
                         lambda pair: order[pair])
    assert got == ["b", "c"]


# ---------------------------------------------------------------------------------------
# the cache stores a constant column as its value


def test_cache_layout_keeps_constant_columns_as_values(tmp_path):
    from cgprof.io import cache

    df = T.share_constants(pd.DataFrame({
        "start_ns": np.array([1, 5, 9], dtype=np.int64),
        "pid": np.full(3, 4242, dtype=np.int64),
        "big": np.full(3, np.iinfo(np.int64).min, dtype=np.int64),
        "none": pd.array([None] * 3, dtype="Int64"),
        "some": pd.array([None, 3, None], dtype="Int64"),
        "plain": np.array([7, 7, 7], dtype=np.int64)}))
    df["plain"] = np.array([7, 7, 7], dtype=np.int64)  # one value, but not a shared view
    tbl, layout, _ = framestore.frame_to_arrow(df)
    kinds = dict(map(tuple, layout))
    assert kinds == {"start_ns": "int64", "pid": "constant:int64:4242",
                     "big": f"constant:int64:{np.iinfo(np.int64).min}",
                     "none": "constant:Int64:null", "some": "Int64", "plain": "int64"}
    assert tbl.column_names == ["start_ns", "some", "plain"]
    pending = cache.Pending(tmp_path / "t.sqlite", tmp_path)
    pending.write_frame("T", df)
    src = cache.CachedSource(tmp_path, {}, tmp_path / "t.sqlite", pending.frames)
    back = src.frame("T")
    _assert_same_frame(back, _plain(df))
    assert back["pid"].to_numpy().strides == (0,)
    # a frame of constants only keeps one stored column (the file holds the row count)
    only = T.share_constants(pd.DataFrame({"a": np.full(4, 1, dtype=np.int64),
                                           "b": np.full(4, 2, dtype=np.int64)}))
    tbl, layout, _ = framestore.frame_to_arrow(only)
    assert tbl.num_rows == 4 and [k for _, k in layout] == ["int64", "int64"]


def test_cached_trace_equals_the_first_load(traces_dir, tmp_path, monkeypatch):
    import shutil

    from cgprof.io import cache

    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "c"))
    src = tmp_path / "run.sqlite"
    shutil.copyfile(traces_dir / "user_train.sqlite", src)
    first = L.load(src)
    assert cache.lookup(src) is not None and cache.FORMAT_VERSION >= 3  # 4: Trace.shed frames
    layout = dict(map(tuple, cache.lookup(src).frames["CUPTI_ACTIVITY_KIND_KERNEL"]))
    assert layout["pid"].startswith("constant:int64:")
    again = L.load(src)
    for table in ("kernels", "runtime", "memcpy", "memset", "sync", "graph_trace", "nvtx"):
        _assert_same_frame(getattr(again, table), getattr(first, table))


def test_sort_keeps_one_value_columns_and_equals_sort_values():
    rng = np.random.default_rng(3)
    n = 50
    start = rng.integers(0, 20, n)
    df = pd.DataFrame({"start_ns": start, "end_ns": start + rng.integers(0, 5, n),
                       "pid": np.full(n, 7, dtype=np.int64),
                       "graph_id": pd.array([None] * n, dtype="Int64"),
                       "node": pd.array([None if i % 3 else i for i in range(n)], dtype="Int64"),
                       "name": pd.Categorical(rng.choice(["a", "b"], n))})
    want = df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    got = F._sort(df.copy(), ["start_ns", "end_ns"])
    _assert_same_frame(got, want)
    assert got["pid"].to_numpy().strides == (0,)


def test_no_kernel_column_is_lent_while_the_summaries_thread_reads_them(traces_dir,
                                                                        monkeypatch):
    """Below ASIDE_MAX_ROWS the summaries run in a thread that reads the kernels: the gaps
    then borrow nothing from them."""
    import cgprof.metrics as M

    trace = cgprof.load(traces_dir / "user_train.sqlite")
    assert M._aside_ok(trace)
    seen = []
    real = M.measure_gaps

    def spy(ops, calls, window=None, **options):
        seen.append(set(trace.kernels.columns))
        return real(ops, calls, window=window, **options)

    monkeypatch.setattr(M, "measure_gaps", spy)
    analyze(trace)
    assert seen and {"start_ns", "end_ns", "dur_ns"} <= seen[0]
