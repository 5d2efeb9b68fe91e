"""window_gaps (the window's gaps derived from the steps' span) against gpu_gaps of the window."""

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from cgprof.metrics import gap_measure, gap_result

TRACES = ["mlp_train_eager", "mlp_train_graph", "ddp_mlp_train_graph", "resnet18_train_eager",
          "resnet18_infer_graph", "mlp_train_graph_graphtrace", "transformer_train_eager",
          "user_train_graph"]


def _assert_same(a: gap_result.GapResult, b: gap_result.GapResult) -> None:
    pdt.assert_frame_equal(a.gaps, b.gaps)
    for table in ("devices", "by_kind", "histogram", "streams"):
        pdt.assert_frame_equal(getattr(a, table), getattr(b, table))
    assert a.min_gap_ns == b.min_gap_ns


def _check(ops, calls, span, windows, derived=None):
    full = gap_measure.gpu_gaps(ops, calls, window=span)
    for w in windows:
        got = gap_measure.window_gaps(full, ops, calls, span, w)
        _assert_same(got, gap_measure.gpu_gaps(ops, calls, window=w))
        if derived is not None:
            derived.append(gap_measure._derive_window(full, ops, span, w) is not None)


@pytest.mark.parametrize("name", TRACES)
def test_window_gaps_equal_gpu_gaps_on_traces(traces_dir, name):
    import cgprof
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    ops, calls = gpu_ops(trace), api_calls(trace)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    span = (lo - 1000, hi + 1000)
    third = (hi - lo) // 3
    windows = [span, (lo, hi), (lo + third, hi - third), (lo + third, hi + 1000),
               (lo - 1000, hi - third)]
    # windows cut at op boundaries: starts and ends of ops in the middle
    mid = len(ops) // 2
    s, e = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    windows += [(int(s[mid]), int(e[-1])), (int(e[mid]), int(s[-1])),
                (int(s[mid // 2]), int(e[mid]))]
    derived = []
    _check(ops, calls, span, [w for w in windows if w[0] < w[1]], derived)
    if name != "ddp_mlp_train_graph":
        assert any(derived)


def _ops(rng, n, ndev, ties):
    start = np.sort(rng.integers(0, 400 if ties else 10**6, n))
    end = start + rng.integers(0, 30 if ties else 5000, n)
    o = np.lexsort((end, start))
    start, end = start[o], end[o]
    return pd.DataFrame({
        "start_ns": start.astype(np.int64), "end_ns": end.astype(np.int64),
        "device_id": rng.integers(0, ndev, n).astype(np.int64),
        "stream_id": rng.integers(0, 3, n).astype(np.int64),
        "pid": np.full(n, 7, dtype=np.int64),
        "corr_id": rng.permutation(n).astype(np.int64) + 1,
        "kind": pd.Categorical(rng.choice(["kernel", "memcpy", "memset"], n, p=[.8, .1, .1])),
        "in_graph": rng.random(n) < 0.3,
    })


def _calls(rng, ops):
    n = len(ops)
    corr = ops["corr_id"].to_numpy()
    start = ops["start_ns"].to_numpy() - rng.integers(0, 40, n)
    dur = rng.integers(1, 20, n)
    fam = rng.choice(["kernel_launch", "sync"], n, p=[.8, .2])
    return pd.DataFrame({
        "pid": np.full(n, 7, dtype=np.int64), "corr_id": corr.astype(np.int64),
        "start_ns": start.astype(np.int64), "end_ns": (start + dur).astype(np.int64),
        "name": pd.Categorical(rng.choice(["cudaLaunchKernel", "cudaDeviceSynchronize"], n)),
        "family": pd.Categorical(fam),
    })


@pytest.mark.parametrize("seed", range(40))
def test_window_gaps_equal_gpu_gaps_random(seed):
    """Random ops with many ties at the window's edges (where the derivation falls back)."""
    rng = np.random.default_rng(seed)
    ties = seed % 2 == 0
    ops = _ops(rng, int(rng.integers(2, 300)), int(rng.integers(1, 3)), ties)
    calls = _calls(rng, ops)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    span = (lo - int(rng.integers(0, 5)), hi + int(rng.integers(0, 5)))
    pts = np.concatenate([ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy(),
                          rng.integers(lo, hi + 1, 20)])
    windows = []
    for _ in range(25):
        a, b = np.sort(rng.choice(pts, 2))
        if a < b:
            windows.append((int(a), int(b)))
    _check(ops, calls, span, windows)


def test_window_gaps_fall_back_outside_the_span(traces_dir):
    import cgprof
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / "mlp_train_eager.sqlite")
    ops, calls = gpu_ops(trace), api_calls(trace)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    span = (lo + 10, hi - 10)
    full = gap_measure.gpu_gaps(ops, calls, window=span)
    for w in [None, (lo, hi), (lo + 20, hi)]:
        assert gap_measure._derive_window(full, ops, span, w) is None
        _assert_same(gap_measure.window_gaps(full, ops, calls, span, w),
                     gap_measure.gpu_gaps(ops, calls, window=w))


def _edge_gaps_frame(ops, window, busy=None):
    """The window-edge gaps as the frame-built version made them (the reference)."""
    if window is None or ops.empty:
        return gap_result._empty_gaps()
    w0, w1 = window
    rows = []
    if busy is not None:
        spans = zip(*(busy[c].tolist() for c in ("device_id", "first_start_ns", "last_end_ns")),
                    strict=True)
    else:
        spans = ((dev, d["start_ns"].min(), d["end_ns"].max())
                 for dev, d in ops.groupby("device_id", sort=True))
    for dev, first, last in spans:
        first, last = int(first), int(last)
        if first > w0:
            rows.append((dev, w0, first))
        if last < w1:
            rows.append((dev, last, w1))
    if not rows:
        return gap_result._empty_gaps()
    df = pd.DataFrame(rows, columns=["device_id", "start_ns", "end_ns"])
    df["gap_ns"] = df["end_ns"] - df["start_ns"]
    df["kind"] = pd.Categorical(["window_edge"] * len(df), categories=list(gap_result.GAP_KINDS))
    for c in ("prev_stream_id", "next_stream_id", "next_pid", "next_corr_id"):
        df[c] = pd.array([pd.NA] * len(df), dtype="Int64")
    df["next_api"] = ""
    return df[gap_result.GAP_COLUMNS]


@pytest.mark.parametrize("seed", range(12))
def test_edge_gaps_equal_the_frame_built_table(seed):
    from cgprof.metrics.intervals import union_busy

    rng = np.random.default_rng(seed)
    ops = _ops(rng, int(rng.integers(1, 50)), int(rng.integers(1, 4)), seed % 2 == 0)
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    busy = union_busy(ops, ["device_id"])
    for w in [None, (lo, hi), (lo - 5, hi), (lo, hi + 5), (lo - 5, hi + 5),
              (np.int64(lo - 1), np.int64(hi + 1))]:
        for b in (busy, None):
            pdt.assert_frame_equal(gap_measure._edge_gaps(ops, w, b), _edge_gaps_frame(ops, w, b))


def test_hist_bins_equal_searchsorted():
    rng = np.random.default_rng(2)
    edges = np.array(gap_result.HIST_EDGES_US, dtype=np.int64) * 1000
    v = np.concatenate([rng.integers(-3000, 2 * 10**7, 10**5), edges, edges - 1, edges + 1,
                        [-1, 0, -1000, -1001, 2**62, -2**62]]).astype(np.int64)
    want = (np.searchsorted(edges, v, "right") - 1).astype(np.int8)
    np.testing.assert_array_equal(gap_result._hist_bins(v), want)


def _sync_reference(calls, pids, gap_start, api_start, need):
    """By definition, one gap at a time: a sync call of the gap's process ran at the gap's
    start and returned by the next launch call's start (start <= gap start <= end <= launch
    start), any one of them."""
    out = np.zeros(len(pids), dtype=bool)
    rows = np.flatnonzero((calls["family"] == "sync").to_numpy(dtype=bool))
    s_pid = calls["pid"].to_numpy()[rows]
    s_start = calls["start_ns"].to_numpy(dtype=np.int64)[rows]
    s_end = calls["end_ns"].to_numpy(dtype=np.int64)[rows]
    for i in np.flatnonzero(need):
        g, a = gap_start[i], api_start[i]
        out[i] = bool(((s_pid == pids[i]) & (s_start <= g) & (s_end >= g)
                       & (s_end <= a)).any())
    return out


@pytest.mark.parametrize("seed", range(30))
def test_sync_returned_in_gap_equals_the_definition(seed):
    rng = np.random.default_rng(seed)
    ops = _ops(rng, int(rng.integers(2, 400)), 1, seed % 2 == 0)
    calls = _calls(rng, ops)
    n = int(rng.integers(1, 300))
    pids = np.full(n, 7, dtype=np.int64)
    gap_start = rng.integers(-10, 500, n).astype(np.int64)
    api_start = (gap_start + rng.integers(-20, 60, n)).astype(np.int64)
    for dense in (0.0, 0.5, 0.74, 0.76, 0.9, 1.0):
        need = rng.random(n) < dense
        nan = np.where(need, api_start.astype(np.float64), np.nan)  # unknown launches
        for a in (api_start, api_start.astype(np.float64), nan):
            np.testing.assert_array_equal(
                gap_measure._sync_returned_in_gap(calls, pids, gap_start, a, need),
                _sync_reference(calls, pids, gap_start, a, need))


@pytest.mark.parametrize("name", ["mlp_train_graph", "resnet18_train_eager", "ddp_mlp_train_graph",
                                  "transformer_train_graph", "compile_train_step"])
def test_launch_summary_equals_the_frame_filters_on_traces(traces_dir, name):
    import cgprof
    from cgprof.metrics import launches as L

    calls = L.api_calls(cgprof.load(traces_dir / f"{name}.sqlite"))
    sel = np.arange(len(calls)) % 3 != 0
    pdt.assert_frame_equal(L.launch_summary(calls), L._launch_summary_frames(calls))
    pdt.assert_frame_equal(L.launch_summary(calls, sel),
                           L._launch_summary_frames(calls[sel].reset_index(drop=True)))


@pytest.mark.parametrize("seed", range(20))
def test_kind_bin_sums_give_the_per_table_counts(seed):
    """by_kind and histogram from the (kind, bin) sums equal their own counting."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    gaps = pd.DataFrame({
        "device_id": np.full(n, int(rng.integers(0, 3)), dtype=np.int64),
        "gap_ns": rng.choice([0, 1, 999, 1000, 1001, 5000, 10**6, 10**7, 10**8], n)
        + rng.integers(0, 3, n),
        "kind": pd.Categorical.from_codes(rng.integers(0, len(gap_result.GAP_KINDS), n),
                                          categories=list(gap_result.GAP_KINDS)),
    })
    devices = pd.DataFrame({"device_id": [0, 1, 2]})
    kb = gap_result._kind_bin_sums(gaps)
    assert kb is not None
    pdt.assert_frame_equal(gap_result._by_kind_of(kb, devices), gap_result._by_kind(gaps, devices))
    objects = gaps.assign(kind=gaps["kind"].astype(object))  # the pandas-mask loop
    pdt.assert_frame_equal(gap_result._by_kind_of(kb, devices),
                           gap_result._by_kind(objects, devices))
    pdt.assert_frame_equal(gap_result.histogram(gaps, kb), gap_result.histogram(gaps))
    two = gaps.assign(device_id=np.arange(n) % 2)
    assert gap_result._kind_bin_sums(two) is None


@pytest.mark.parametrize("name", ["mlp_train_graph", "resnet18_train_eager", "ddp_mlp_train_graph"])
def test_kind_bin_sums_on_traces(traces_dir, name):
    import cgprof
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    r = gap_measure.gpu_gaps(gpu_ops(trace), api_calls(trace))
    pdt.assert_frame_equal(r.by_kind, gap_result._by_kind(r.gaps, r.devices))
    objects = r.gaps.assign(kind=r.gaps["kind"].astype(object))  # the pandas-mask loop
    pdt.assert_frame_equal(r.by_kind, gap_result._by_kind(objects, r.devices))
    pdt.assert_frame_equal(r.histogram, gap_result.histogram(r.gaps))
