"""The columns a loaded trace derives on demand (``cgprof.io.trace.DERIVED``: the kernels' and
API calls' ``dur_ns``, the API calls' ``tid``): what a user reads is what the load always
returned, and an analysis never makes them again."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from cgprof import schema as S
from cgprof.io import cache as C
from cgprof.io import loader as L
from cgprof.io import trace as T
from cgprof.metrics import analyze
from cgprof.metrics.launches import api_calls

ROOT = Path(__file__).resolve().parent.parent
TRACES = sorted((ROOT / "traces").glob("*.sqlite"))
KERNEL_COLUMNS = ["start_ns", "end_ns", "device_id", "stream_id", "corr_id", "graph_node_id",
                  "graph_id", "pid", "name", "short_name", "dur_ns"]
RUNTIME_COLUMNS = ["start_ns", "end_ns", "event_class", "global_tid", "corr_id", "pid", "tid",
                   "name_raw", "name", "nsys_name", "dur_ns"]


def _shed(trace: T.Trace) -> dict:
    return trace.__dict__.get("_shed", {})


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_loaded_frames_are_whole_and_derived_columns_exact(path, tmp_path, monkeypatch):
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path))
    first = L.load(path)  # from SQLite, the cache entry written
    C.finish_writes()
    cached = L.load(path)  # from the cache
    for trace in (first, cached):
        assert set(_shed(trace)) == {"kernels", "runtime"}
        assert "dur_ns" not in trace.stored("kernels").columns
        assert not {"tid", "dur_ns"} & set(trace.stored("runtime").columns)
        k, rt = trace.kernels, trace.runtime  # made whole, once
        assert not _shed(trace)
        assert trace.kernels is k and trace.runtime is rt
        assert list(k.columns) == KERNEL_COLUMNS and list(rt.columns) == RUNTIME_COLUMNS
        assert k["dur_ns"].dtype == np.int64 and rt["tid"].dtype == np.int64
        assert (k["dur_ns"].to_numpy() == k["end_ns"].to_numpy() - k["start_ns"].to_numpy()).all()
        assert (rt["tid"].to_numpy() == rt["global_tid"].to_numpy() & S.ID_MASK).all()
    pdt.assert_frame_equal(first.kernels, cached.kernels, check_exact=True)
    pdt.assert_frame_equal(first.runtime, cached.runtime, check_exact=True)
    # the load without the cache builds the same frames
    plain = L.load(path, cache=False)
    pdt.assert_frame_equal(plain.runtime, first.runtime, check_exact=True)
    pdt.assert_frame_equal(plain.kernels, first.kernels, check_exact=True)


@pytest.mark.parametrize("name", ["mlp_train_graph", "transformer_train_eager",
                                  "resnet18_train_eager"])
def test_analysis_does_not_make_the_derived_columns(name, monkeypatch):
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")
    path = ROOT / "traces" / f"{name}.sqlite"
    trace = L.load(path)
    if not len(trace.stored("kernels")):
        pytest.skip("no kernels")
    lean = analyze(trace)
    assert set(_shed(trace)) == {"kernels", "runtime"}  # nothing read trace.kernels/.runtime
    assert lean.trace is trace
    other = L.load(path)
    full = T.Trace(**{f: getattr(other, f) for f in T.Trace.__dataclass_fields__})
    assert not _shed(full) and "dur_ns" in full.stored("kernels").columns
    whole = analyze(full)  # the frames as every load made them before
    for attr in ("launches", "api_summary", "kernel_summary", "step_gaps"):
        pdt.assert_frame_equal(getattr(lean, attr), getattr(whole, attr), check_exact=True)
    pdt.assert_frame_equal(lean.replays.replays, whole.replays.replays, check_exact=True)
    pdt.assert_frame_equal(lean.steps.steps, whole.steps.steps, check_exact=True)
    assert lean.verdict == whole.verdict and lean.info == whole.info


def test_pickle_and_assignment_keep_the_frames():
    trace = L.load(ROOT / "traces" / "mlp_train_eager.sqlite", cache=False)
    back = pickle.loads(pickle.dumps(trace))
    assert set(_shed(back)) == {"kernels", "runtime"}
    pdt.assert_frame_equal(back.kernels, trace.kernels, check_exact=True)
    # an assigned frame is the whole frame, as given (nothing added to it)
    small = trace.runtime[["start_ns", "end_ns"]]
    trace.runtime = small
    assert trace.runtime is small and list(trace.runtime.columns) == ["start_ns", "end_ns"]
    # restore() keeps the frame shed: the columns come back on the next read
    other = L.load(ROOT / "traces" / "mlp_train_eager.sqlite", cache=False)
    stored = other.stored("kernels")
    other.restore("kernels", stored.copy())
    assert list(other.kernels.columns) == KERNEL_COLUMNS


def test_column_derives_at_the_rows_asked():
    df = pd.DataFrame({"start_ns": np.array([5, 7, 2**62], dtype=np.int64),
                       "end_ns": np.array([9, 7, 2**62 + 3], dtype=np.int64),
                       "global_tid": np.array([(3 << 24) | 11, -1, 2**40 + 5],
                                              dtype=np.int64)})
    assert T.column(df, "dur_ns").tolist() == [4, 0, 3]
    assert T.column(df, "dur_ns", np.array([2, 0])).tolist() == [3, 4]
    assert T.column(df, "dur_ns", np.array([True, False, True])).tolist() == [4, 3]
    assert T.column(df, "tid").tolist() == [11, S.ID_MASK, 5]
    assert T.column(df, "start_ns", np.array([1])).tolist() == [7]
    with pytest.raises(KeyError):
        T.column(df, "corr_id")
    whole = df.assign(dur_ns=np.array([1, 2, 3], dtype=np.int64))  # a frame's own column wins
    assert T.column(whole, "dur_ns").tolist() == [1, 2, 3]


def test_api_calls_whole_or_without_derived_columns():
    trace = L.load(ROOT / "traces" / "mlp_train_graph.sqlite", cache=False)
    lean = api_calls(trace, derived=False)
    assert not {"tid", "dur_ns"} & set(lean.columns)
    assert set(_shed(trace)) == {"kernels", "runtime"}
    whole = api_calls(trace)
    assert {"tid", "dur_ns"} <= set(whole.columns)
    pdt.assert_frame_equal(whole.drop(columns=["tid", "dur_ns"]), lean, check_exact=True)


# ---------------------------------------------------------------------------------------
# few-valued columns held as categoricals (Trace.shed above COMPACT_MIN_ROWS rows)


@pytest.mark.parametrize("name", ["mlp_train_graph", "transformer_train_eager",
                                  "resnet18_train_graph", "mlp_train_graph_graphtrace"])
def test_compacted_columns_read_back_and_analyse_the_same(name, monkeypatch):
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")
    path = ROOT / "traces" / f"{name}.sqlite"
    plain = L.load(path)
    monkeypatch.setattr(T, "COMPACT_MIN_ROWS", 0)
    small = L.load(path)
    held = {(f, c) for f, cols in T.COMPACT.items() for c in cols
            if isinstance(small.stored(f)[c].dtype, pd.CategoricalDtype)}
    assert {("runtime", "event_class"), ("runtime", "global_tid")} <= held
    k = small.stored("kernels")  # each few-valued kernel column: compacted or a constant view
    assert isinstance(k["stream_id"].dtype, pd.CategoricalDtype) or (
        k["stream_id"].to_numpy().strides == (0,))
    a, b = analyze(plain), analyze(small)
    assert set(_shed(small)) == {"kernels", "runtime"}  # the analysis read the stored frames
    for attr in ("launches", "api_summary", "kernel_summary", "step_gaps"):
        pdt.assert_frame_equal(getattr(a, attr), getattr(b, attr), check_exact=True)
    pdt.assert_frame_equal(a.replays.replays, b.replays.replays, check_exact=True)
    pdt.assert_frame_equal(a.steps.steps, b.steps.steps, check_exact=True)
    pdt.assert_frame_equal(a.steps.call_steps, b.steps.call_steps, check_exact=True)
    assert a.verdict == b.verdict and a.info == b.info
    for f in ("kernels", "runtime"):
        pdt.assert_frame_equal(getattr(small, f), getattr(plain, f), check_exact=True)
        assert not isinstance(getattr(small, f)["event_class" if f == "runtime" else
                                                 "graph_node_id"].dtype, pd.CategoricalDtype)


def test_compacted_edge_values():
    big = np.iinfo(np.int64).max
    col = pd.Series(np.array([big, -big - 1, 0, big] * 3, dtype=np.int64))
    cat = T._compacted(col)
    assert cat.codes.dtype == np.int8
    assert (T._expanded(pd.Series(cat), "int64") == col.to_numpy()).all()
    nullable = pd.Series(pd.array([5, None, 2**40, None, 5], dtype="Int64"))
    back = T._expanded(pd.Series(T._compacted(nullable)), "Int64")
    pdt.assert_extension_array_equal(back, nullable.array)
    assert back.to_numpy(dtype=np.int64, na_value=0).tolist() == [5, 0, 2**40, 0, 5]
    none = pd.Series(pd.array([None, None], dtype="Int64"))
    pdt.assert_extension_array_equal(T._expanded(pd.Series(T._compacted(none)), "Int64"),
                                     none.array)
    many = pd.Series(np.arange(T._COMPACT_MAX + 1, dtype=np.int64))
    assert T._compacted(many) is None  # more values than int8 codes hold
    assert T._compacted(pd.Series(T.constant_view(np.full(4, 3, dtype=np.int64)),
                                  copy=False)) is None


@pytest.mark.parametrize("name", ["mlp_train_graph", "resnet18_train_graph"])
def test_cache_stores_the_frames_as_held(name, tmp_path, monkeypatch):
    """Format 4: the kernel and API-call frames stored as the trace holds them (no derived
    column, compacted ones as codes), read back the same and made whole the same."""
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path))
    monkeypatch.setattr(T, "COMPACT_MIN_ROWS", 0)
    path = ROOT / "traces" / f"{name}.sqlite"
    first = L.load(path)
    C.finish_writes()
    (entry,) = [e for e in tmp_path.iterdir() if not e.name.startswith(".tmp")]
    cached = L.load(path)
    assert C.lookup(path) is not None and entry.exists()
    for f in ("kernels", "runtime"):
        a, b = first.stored(f), cached.stored(f)
        assert list(a.columns) == list(b.columns) and list(a.dtypes) == list(b.dtypes)
        pdt.assert_frame_equal(a, b, check_exact=True)
        assert cached.__dict__["_compact"].get(f) == first.__dict__["_compact"].get(f)
    assert cached.__dict__["_compact"]["runtime"] >= {"event_class", "global_tid"}
    plain = L.load(path, cache=False)
    monkeypatch.setattr(T, "COMPACT_MIN_ROWS", 10**12)
    for f in ("kernels", "runtime"):
        pdt.assert_frame_equal(getattr(cached, f), getattr(plain, f), check_exact=True)
