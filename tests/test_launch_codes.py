"""The code-based launch table and capture marking agree with the plain frame versions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgprof.metrics import launches as L


def _calls(rows: list[tuple[int, int, str]]) -> pd.DataFrame:
    """(start_ns, global_tid, name) rows -> a calls frame as api_calls has it."""
    df = pd.DataFrame(rows, columns=["start_ns", "global_tid", "name"])
    df["name"] = df["name"].astype("category")
    df["dur_ns"] = np.arange(1, len(df) + 1, dtype=np.int64) * 10
    df["end_ns"] = df["start_ns"] + df["dur_ns"]
    return df


B, E, K, G = "cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaLaunchKernel", "cudaGraphLaunch"


def test_in_capture_marks_spans_per_thread():
    """Two threads interleaved, thread 1 captures twice (the second never ended), thread 2
    once; a thread's begin does not open a capture on the other."""
    rows = [(0, 1, K), (1, 1, B), (2, 2, K), (3, 1, K), (4, 2, B), (5, 1, K), (6, 2, K),
            (7, 1, E), (8, 2, K), (9, 1, K), (10, 2, E), (11, 1, B), (12, 2, K), (13, 1, K)]
    calls = _calls(rows)
    got = L._in_capture(calls)
    marks = L._capture_marks(calls["name"])
    assert got.tolist() == [False, False, False, True, False, True, True, False, True, False,
                            False, False, False, True]
    assert np.array_equal(got, L._in_capture_sweep(calls, marks > 0, marks < 0))


def test_in_capture_out_of_start_order_takes_the_sweep():
    rows = [(5, 1, K), (1, 1, B), (3, 1, K), (4, 1, E), (2, 1, K)]
    calls = _calls(rows)
    marks = L._capture_marks(calls["name"])
    got = L._in_capture(calls)
    assert np.array_equal(got, L._in_capture_sweep(calls, marks > 0, marks < 0))
    assert got.tolist() == [False, False, True, False, True]


def test_launch_summary_by_codes_matches_the_frame_filters():
    rows = [(i, 1 + i % 2, [K, G, B, E, "cudaMemcpyAsync", "cudaStreamSynchronize"][i % 6])
            for i in range(60)]
    calls = _calls(rows)
    calls = calls.assign(family=L._families(calls["name"]), in_capture=L._in_capture(calls))
    sel = np.arange(len(calls)) % 5 != 0
    want = L._launch_summary_frames(calls[sel].reset_index(drop=True))
    pd.testing.assert_frame_equal(L.launch_summary(calls, sel), want)
    pd.testing.assert_frame_equal(L.launch_summary(calls), L._launch_summary_frames(calls))
    empty = calls.iloc[0:0]
    pd.testing.assert_frame_equal(L.launch_summary(empty), L._launch_summary_frames(empty))


def test_range_names_match_the_string_concatenation():
    """Two (domain, text) pairs that read the same ("a:b:c") are one name; a missing text is
    written as ""."""
    from cgprof.metrics.summaries import _range_names

    domain = pd.Series(["a:b", "a", "cgprof", "cgprof", "a:b"], dtype=object)
    text = pd.Series(["c", "b:c", None, "step", "c"], dtype=object)
    got = _range_names(domain, text)
    want = domain.astype(str) + ":" + text.fillna("").astype(str)
    assert [str(v) for v in got] == list(want)
    assert got.nunique() == 3


def test_stats_order_most_total_first_then_names():
    from cgprof.metrics.summaries import _stats

    df = pd.DataFrame({"name": ["b", "a", "c", "a", "b", "d"],
                       "dur_ns": np.array([5, 2, 7, 3, 2, 1], dtype=np.int64)})
    got = _stats(df, ["name"], "instances")
    assert got["name"].tolist() == ["b", "c", "a", "d"]  # b and c tie on 7 ns: by name
    assert got["instances"].tolist() == [2, 1, 2, 1]
    assert got["med_ns"].tolist() == [3.5, 7.0, 2.5, 1.0]


def test_arrow_records_with_batched_int_columns_are_pandas_bytes():
    """Plain and nullable int64 columns cast together, with bools, floats, text and NA, and
    empty strings: the same bytes as pandas' records encoder."""
    from cgprof.report.json_report import _ARROW_MIN_ROWS, _Table

    n = _ARROW_MIN_ROWS + 7
    rng = np.random.default_rng(1)
    ints = rng.integers(-2**62, 2**62, n)
    df = pd.DataFrame({
        "a_start_ns": ints,
        "b_count": np.arange(n, dtype=np.int64),
        "c_maybe": pd.array([None if i % 3 == 0 else i * 7 for i in range(n)], dtype="Int64"),
        "d_flag": np.arange(n) % 2 == 0,
        "e_share": pd.array([None if i % 5 == 0 else i / 7 for i in range(n)], dtype="Float64"),
        "f_name": pd.Series(["x/y" if i % 4 else "" for i in range(n)], dtype="str"),
    })
    table = _Table(df)
    assert table.raw is not None
    want = df.to_json(orient="records", double_precision=15, force_ascii=False)
    assert table.to_json() == want
    assert "".join(table.chunks(rows=1000)) == want


def test_thread_names_fast_path_is_the_pandas_frame():
    """The threads table built in one go equals the drop_duplicates/map frame, dtypes
    included, on a real export."""
    from pathlib import Path

    from cgprof import schema as S
    from cgprof.io import frames as T
    from cgprof.io import loader as L

    path = Path(__file__).resolve().parents[1] / "traces" / "mlp_train_eager.sqlite"
    src = L.open_source(path)
    try:
        strings = T._load_strings(src)
        rows = [r for r in T._rows(src, S.THREAD_NAMES, ["globalTid", "nameId"])
                if isinstance(r[0], int)]
        want = pd.DataFrame(rows, columns=["global_tid", "name_id"]).drop_duplicates(
            "global_tid")
        want["pid"] = T._pid_from_global(want["global_tid"])
        want["tid"] = T._tid_from_global(want["global_tid"])
        want["name"] = want["name_id"].map(strings)
        want = want.drop(columns=["name_id"]).reset_index(drop=True)
        got = T._load_threads(src, strings)
    finally:
        src.close()
    assert len(got) > 1
    pd.testing.assert_frame_equal(got, want)


def _all_traces():
    from conftest import REPO

    return sorted((REPO / "traces").glob("*.sqlite"))


def test_summaries_beside_the_metrics_equal_those_after_them(monkeypatch):
    """The per-name summaries computed in a thread beside the other metrics (traces up to
    ASIDE_MAX_ROWS rows) give the same JSON as computed after them, on every shipped trace."""
    import cgprof.metrics as M
    from cgprof.io.loader import load
    from cgprof.report import json_report

    for path in _all_traces():
        trace = load(path, cache=False)
        if len({int(p) for p in trace.kernels["pid"]}) > 1:
            continue  # several ranks: cgprof.ranks analyses each
        assert M._aside_ok(trace)
        aside = json_report.render([M.analyze(trace)])
        monkeypatch.setattr(M, "ASIDE_MAX_ROWS", -1)
        assert not M._aside_ok(trace)
        assert json_report.render([M.analyze(trace)]) == aside, path.name
        monkeypatch.undo()


@pytest.mark.parametrize("stage", ["kernel_summary", "measure_gaps"])
def test_an_error_in_a_metrics_thread_reaches_the_caller(stage, monkeypatch):
    """The summaries' and the gaps' threads (traces up to ASIDE_MAX_ROWS rows) hand their
    exceptions to analyze's caller."""
    import cgprof.metrics as M
    from cgprof.io.loader import load

    def broken(*args, **kwargs):
        raise ValueError(f"{stage} broke")

    monkeypatch.setattr(M, stage, broken)
    trace = load(_all_traces()[0], cache=False)
    assert M._aside_ok(trace)
    with pytest.raises(ValueError, match=f"{stage} broke"):
        M.analyze(trace)
