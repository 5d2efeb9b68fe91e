"""The numpy/Arrow fast paths give exactly what the pandas paths they replace give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from cgprof.metrics import intervals as iv
from cgprof.report import json_report as jr


def _ops() -> pd.DataFrame:
    # Two devices, two streams; overlapping and nested ops, a tie, hand-checkable ns.
    return pd.DataFrame({
        "device_id": np.array([0, 0, 0, 0, 1, 1, 0, 1], dtype=np.int64),
        "stream_id": np.array([7, 7, 8, 7, 7, 9, 8, 9], dtype=np.int64),
        "start_ns": np.array([100, 150, 120, 400, 10, 30, 500, 30], dtype=np.int64),
        "end_ns": np.array([200, 180, 300, 450, 20, 60, 510, 40], dtype=np.int64),
    }, index=pd.Index([10, 11, 12, 13, 14, 15, 16, 17]))


def test_group_gaps_fast_path_equals_pandas_groupby():
    ops = _ops()
    for keys in (["device_id"], ["device_id", "stream_id"]):
        fast = iv.group_gaps(ops, keys)
        slow = iv._group_gaps_pandas(iv.sort_stable(ops, keys + ["start_ns", "end_ns"]), keys)
        pdt.assert_frame_equal(fast, slow)
    g = iv.group_gaps(ops, ["device_id"])
    dev0 = g[g["device_id"] == 0]
    # 100-200, 120-300 (overlap), 150-180 (inside), 400-450 (gap 100 after 300), 500-510
    assert dev0["gap_ns"].tolist() == [0, 0, 0, 100, 50]
    assert dev0["prev_idx"].tolist()[1:] == [10, 12, 12, 13]
    assert dev0["prev_end_ns"].isna().tolist() == [True, False, False, False, False]


def test_segment_cummax_wide_values_fall_back_to_a_loop():
    v = np.array([5, 2**61, 3, 1, 9, 2], dtype=np.int64)
    first = np.array([True, False, False, True, False, False])
    assert iv._segment_cummax(v, first).tolist() == [5, 2**61, 2**61, 1, 9, 9]


def test_busy_segments_equal_groupby_aggregation():
    ops = _ops()
    keys = ["device_id", "stream_id"]
    g = iv.group_gaps(ops, keys)
    fast = iv.busy_from_gaps(g, keys)
    slow = iv.busy_from_gaps(g.astype({"device_id": "Int64"}), keys)  # nullable: groupby path
    pdt.assert_frame_equal(fast, slow.astype({"device_id": "int64"}))
    assert fast["busy_ns"].tolist() == [150, 190, 10, 30]  # (0,7) (0,8) (1,7) (1,9)


def test_union_busy_numpy_equals_group_gaps_then_busy_from_gaps():
    rng = np.random.default_rng(3)
    start = rng.integers(0, 2000, 500)
    big = pd.DataFrame({
        "device_id": rng.integers(0, 3, 500), "stream_id": rng.integers(0, 4, 500),
        "start_ns": start, "end_ns": start + rng.integers(0, 50, 500)})
    for ops in (_ops(), big, big.sort_values(["device_id", "stream_id", "start_ns", "end_ns"]),
                big.head(1)):
        for keys in (["device_id"], ["device_id", "stream_id"]):
            fast = iv._union_busy_numpy(ops, keys)
            slow = iv.busy_from_gaps(iv.group_gaps(ops[keys + ["start_ns", "end_ns"]], keys),
                                     keys)
            pdt.assert_frame_equal(fast, slow)
            pdt.assert_frame_equal(iv.union_busy(ops, keys), slow)
    assert iv._union_busy_numpy(_ops().astype({"device_id": "Int64"}), ["device_id"]) is None
    assert iv._union_busy_numpy(_ops().head(0), ["device_id"]) is None


def test_pairs_distinct_is_no_duplicated_pair():
    rng = np.random.default_rng(5)
    for pids, corr_hi in ((1, 2000), (3, 700), (2, 10**9)):
        df = pd.DataFrame({"pid": rng.integers(100, 100 + pids, 600),
                           "corr_id": rng.integers(0, corr_hi, 600)})
        uniq = df.drop_duplicates(["pid", "corr_id"])
        for d in (df, uniq):
            if iv.pairs_distinct(d):  # True must mean distinct (False only means unknown)
                assert not d.duplicated(["pid", "corr_id"]).any()
        if corr_hi < 10**9:
            assert iv.pairs_distinct(uniq) and not iv.pairs_distinct(df)
    assert not iv.pairs_distinct(pd.DataFrame({"pid": [1, 1], "corr_id": [5, 5]}))
    assert iv.pairs_distinct(pd.DataFrame({"pid": [1, 2], "corr_id": [5, 5]}))
    assert not iv.pairs_distinct(pd.DataFrame({"pid": [1, 2], "corr_id": [5, 5]}, dtype="Int64"))


def test_first_match_is_drop_duplicates_then_merge():
    left = pd.DataFrame({"pid": np.array([5, 5, 9, 5, 9], dtype=np.int64),
                         "corr_id": np.array([1, 2, 1, 7, 3], dtype=np.int64)})
    right = pd.DataFrame({"pid": np.array([9, 5, 5, 9], dtype=np.int64),
                          "corr_id": np.array([1, 2, 2, 3], dtype=np.int64),
                          "v": [10, 20, 30, 40]})
    keys = iv.pair_keys(left, right)
    assert keys is not None
    row = iv.first_match(*keys)
    assert row.tolist() == [-1, 1, 0, -1, 3]
    merged = left.merge(right.drop_duplicates(["pid", "corr_id"]), how="left")
    got = np.where(row >= 0, right["v"].to_numpy()[np.maximum(row, 0)], -1)
    assert got.tolist() == merged["v"].fillna(-1).astype(int).tolist()
    assert iv.pair_keys(left.assign(corr_id=left["corr_id"] + 2**32), right) is None


def test_pair_keys_single_pid_equal_the_coded_keys():
    def coded(left, right):  # the general path: pids coded over both frames, << 32 | corr_id
        pids = np.sort(pd.unique(np.concatenate([left["pid"], right["pid"]])))
        return tuple(np.searchsorted(pids, d["pid"]).astype(np.int64) << 32 | d["corr_id"]
                     .to_numpy() for d in (left, right))

    a = pd.DataFrame({"pid": np.full(4, 7, dtype=np.int64),
                      "corr_id": np.array([3, 1, 3, 9], dtype=np.int64)})
    b = pd.DataFrame({"pid": np.full(3, 7, dtype=np.int64),
                      "corr_id": np.array([9, 2, 3], dtype=np.int64)})
    for left, right in ((a, b), (a, b.head(0)), (a.head(0), b.head(0)),
                        (a, b.assign(pid=np.int64(8))), (a.assign(pid=[7, 7, 8, 7]), b)):
        got, want = iv.pair_keys(left, right), coded(left, right)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.int64 and g.tolist() == w.tolist()
    lk, _ = iv.pair_keys(a, b)
    lk[0] = -1  # keys are new arrays: callers may write into them
    assert a["corr_id"].iloc[0] == 3


def test_arrow_json_writer_gives_pandas_bytes(monkeypatch):
    df = pd.DataFrame({
        "n": np.array([0, -3, 2**62, 7, 1], dtype=np.int64),
        "m": pd.array([1, None, 3, None, 5], dtype="Int64"),
        "kind": pd.Categorical(["a/b", None, 'q"<x>', "é", "a/b"]),
        "api": np.array(["cudaLaunchKernel", "", "x\\y\n", "\u0001", "z"], dtype=object),
        "s": pd.array(["p", None, "q", "", "r"], dtype="str"),
    })
    monkeypatch.setattr(jr, "_ARROW_MIN_ROWS", 1)
    fast = jr._Table(df)
    assert fast.raw is not None
    monkeypatch.setattr(jr, "_ARROW_MIN_ROWS", 10**9)
    slow = jr._Table(df)
    assert slow.raw is None
    for rows in (2, 5, 100):
        assert "".join(fast.chunks(rows)) == "".join(slow.chunks(rows))
    assert "".join(fast.chunks(2)).startswith('[{"api":"cudaLaunchKernel","kind":"a\\/b","m":1,')
    monkeypatch.setattr(jr, "_ARROW_MIN_ROWS", 1)
    floats = df.assign(f=[1.5, np.nan, 1e-7, 2.0, -0.0], b=[True, False, True, True, False])
    fast = jr._Table(floats)  # floats and bools too: pandas' own float text, cut by Arrow
    assert fast.raw is not None
    assert "".join(fast.chunks(2)) == floats[sorted(floats.columns)].to_json(
        orient="records", double_precision=15, force_ascii=False)
    assert jr._Table(df.assign(f=[1.5, np.inf, 0.0, 0.0, 0.0])).raw is None  # "inf" strings


def test_step_groups_enclosing_and_inner_warmup_ranges(make_db):
    """The vectorised group sweep: the innermost enclosing range names the group; a warm-up
    range enclosing a step or lying inside it (ending by the step's end) marks it warm-up."""
    from nsysdb import K, N, R

    import cgprof

    ks, rs, ns = [], [], []
    for s in range(6):
        t = 1_000_000 + s * 100_000
        ns.append(N(t, t + 99_000, "step", domain="cgprof"))
        rs.append(R(t + 1000, t + 3000, "cudaLaunchKernel_v7000", corr=s + 1))
        ks.append(K(t + 5000, t + 9000, "gemm", corr=s + 1))
    ns.append(N(900_000, 1_700_000, "outer"))
    ns.append(N(950_000, 1_250_000, "eager"))  # steps 0-1 (innermost beats "outer")
    ns.append(N(999_000, 1_099_500, "warmup", domain="cgprof"))  # encloses step 0
    ns.append(N(1_210_000, 1_250_000, "warmup", domain="cgprof"))  # inside step 2
    ns.append(N(1_310_000, 1_450_000, "warmup", domain="cgprof"))  # starts in 3, ends in 4
    r = cgprof.analyze(make_db(kernels=ks, runtime=rs, nvtx=ns, graph_trace_mode="node"))
    st = r.steps.steps
    assert list(st["group"]) == ["warmup", "eager", "outer", "outer", "outer", "outer"]
    assert list(st["mode"]) == ["warmup", "eager", "warmup", "eager", "eager", "eager"]


@pytest.mark.parametrize("name", ["mlp_train_eager", "mlp_train_graph", "ddp_mlp_train_graph",
                                  "resnet18_infer_graph", "mlp_train_graph_graphtrace"])
def test_gap_table_fast_assembly_equals_concat_and_sort(traces_dir, monkeypatch, name):
    """gpu_gaps' column-wise merge of window-edge rows into the inner gaps (and the per-kind
    and per-device tables) give exactly the concat + sort_values + pandas masks they replace."""
    import cgprof
    from cgprof.metrics import gap_measure, gap_result
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    ops, calls = gpu_ops(trace), api_calls(trace)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    windows = [None, (lo - 1000, hi + 1000), (lo + (hi - lo) // 3, hi - (hi - lo) // 3)]
    fast = [gap_measure.gpu_gaps(ops, calls, window=w) for w in windows]
    used = []
    by_kind = gap_result._by_kind
    monkeypatch.setattr(gap_measure, "_merge_sorted", lambda a, b: used.append(1) or None)
    monkeypatch.setattr(gap_measure, "busy_from_gaps", lambda g, k: None)

    def by_kind_pandas(gaps, devices):  # object kinds: the pandas-mask loop
        return by_kind(gaps.assign(kind=gaps["kind"].astype(object)), devices)

    monkeypatch.setattr(gap_result, "_by_kind", by_kind_pandas)
    monkeypatch.setattr(gap_result, "_kind_bin_sums", lambda gaps: None)  # not the one-pass tables
    slow = [gap_measure.gpu_gaps(ops, calls, window=w) for w in windows]
    assert len(used) == len(windows)
    for f, s in zip(fast, slow, strict=True):
        # the fast path keeps next_api a categorical; the concat path makes it str
        fg = f.gaps
        if len(fg) > 2:
            assert isinstance(fg["next_api"].dtype, pd.CategoricalDtype)
            fg = fg.assign(next_api=gap_measure._str_array(fg["next_api"]))
        pdt.assert_frame_equal(fg, s.gaps)
        for table in ("devices", "by_kind", "histogram", "streams"):
            pdt.assert_frame_equal(getattr(f, table), getattr(s, table))
    assert any(int((f.gaps["kind"] == "window_edge").sum()) for f in fast)


def test_trace_sort_by_lexsort_equals_sort_values():
    from cgprof.io import frames as T

    def frame() -> pd.DataFrame:
        return pd.DataFrame({
            "start_ns": np.array([5, 3, 3, 9, 3, 1], dtype=np.int64),
            "end_ns": np.array([6, 8, 4, 9, 4, 2], dtype=np.int64),
            "graph_node_id": pd.array([1, None, 3, None, 5, 6], dtype="Int64"),
            "name": pd.Categorical(["b", "a", "b", "c", "a", "a"]),
            "text": pd.array(["x", "y", "z", "w", "v", "u"], dtype="str"),
        }, index=pd.Index([7, 6, 5, 4, 3, 2]))

    want = frame().sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    got = T._sort(frame(), ["start_ns", "end_ns"])
    pdt.assert_frame_equal(got, want)
    assert got["graph_node_id"].tolist()[:3] == [6, 3, 5]  # the tie (3, 4) keeps row order


def test_join_unique_is_the_merge(traces_dir):
    import cgprof

    r = cgprof.analyze(traces_dir / "mlp_train_eager.sqlite")
    calls = r.trace.api_calls[["pid", "corr_id", "name", "dur_ns"]].drop_duplicates(
        ["pid", "corr_id"])
    for left, right in ((calls, r.steps.call_steps),
                        (r.trace.kernels[["pid", "corr_id", "name", "dur_ns"]],
                         calls.rename(columns={"name": "api", "dur_ns": "api_ns"}))):
        want = left.merge(right, on=["pid", "corr_id"], how="inner")
        got = iv.join_unique(left, right)
        assert len(got) > 100
        pdt.assert_frame_equal(got, want)


def test_families_by_codes_equal_the_string_map():
    from cgprof.metrics import launches as L

    names = pd.Series(pd.Categorical(
        ["cudaLaunchKernel", None, "cudaGraphLaunch", "cudaLaunchKernel", "cudaFree"],
        categories=["cudaFree", "cudaGraphLaunch", "cudaLaunchKernel", "cudaMemcpyAsync"]))
    for cats in (names, names.cat.add_categories(["cudaMalloc", "cudaStreamSynchronize"])):
        # one family per name (pandas maps the categories) and several names per family
        want = cats.map({c: L.family_of(c) for c in cats.cat.categories}).astype("category")
        got = L._families(cats)
        pdt.assert_series_equal(got, want, check_names=False)
        assert got.isna().tolist() == [False, True, False, False, False]


@pytest.mark.parametrize("name", ["mlp_train_graph", "mlp_train_graph_graphtrace",
                                  "resnet18_train_eager", "ddp_mlp_train_graph"])
def test_gpu_ops_by_columns_equal_the_concat(traces_dir, name):
    import cgprof
    from cgprof import schema as S
    from cgprof.metrics import gpu as G

    tr = cgprof.load(traces_dir / f"{name}.sqlite")
    k, m, s, g = tr.kernels, tr.memcpy, tr.memset, tr.graph_trace
    sources = [(k, "kernel", k["graph_node_id"].notna(), False),
               (m, "memcpy", m["graph_node_id"].notna(), m["copy_kind"] == S.MEMCPY_HTOD),
               (s, "memset", s["graph_node_id"].notna(), False), (g, "graph", True, False)]
    want = G._gpu_ops_concat([src for src in sources if len(src[0])])
    pdt.assert_frame_equal(G.gpu_ops(tr), want)


@pytest.mark.parametrize("name", ["mlp_train_graph", "resnet18_train_eager", "user_train_graph"])
def test_step_keys_by_lookup_table_equal_the_unique_path(traces_dir, monkeypatch, name):
    """_measure's lookup tables from correlation id to step (one process, distinct call keys)
    give exactly the np.unique + searchsorted path they skip, in compute_steps and in
    classify_steps."""
    import cgprof
    from cgprof.metrics import step_attribution, step_launch_wait, steps
    from cgprof.metrics.gap_measure import gpu_gaps
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    ops, calls = gpu_ops(trace), api_calls(trace)
    gaps = gpu_gaps(ops, calls).gaps
    used = []
    dense = step_attribution._dense_steps
    readers = (step_attribution, step_launch_wait)  # the modules that call them
    for m in readers:
        monkeypatch.setattr(m, "_dense_steps",
                            lambda *a: used.append(dense(*a) is not None) or dense(*a))
    fast = steps.compute_steps(trace, calls, ops)
    step_launch_wait.classify_steps(fast, gaps)
    for m in readers:
        monkeypatch.setattr(m, "_dense_steps", lambda *a: None)
        monkeypatch.setattr(m, "_first_match_dense", lambda a, b: None)
    slow = steps.compute_steps(trace, calls, ops)
    step_launch_wait.classify_steps(slow, gaps)
    # resnet18_train_eager's correlation ids span 6.8 times its calls: a table since
    # intervals.dense_room (4 slots per call before, the np.unique path then)
    assert used[0]
    pdt.assert_frame_equal(fast.steps, slow.steps)
    pdt.assert_frame_equal(fast.call_steps, slow.call_steps)
