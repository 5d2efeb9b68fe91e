"""The HTML report's big-trace paths: counting timeline events without a frame of them all,
and the step window's joins without merging every call-to-step row, checked against the
frame- and merge-based code they replaced on real traces."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cgprof
from cgprof.io.trace import column
from cgprof.report import figures as F

D = importlib.import_module("cgprof.diff")
TRACES = Path(__file__).resolve().parents[1] / "traces"
NAMES = ["mlp_train_eager", "mlp_train_graph", "resnet18_train_graph",
         "mlp_train_graph_graphtrace", "compile_train_step", "mlp_serve_graph"]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=NAMES)
def result(request):
    return cgprof.analyze(TRACES / f"{request.param}.sqlite")


def _frame_counts(v, t0: int, t1: int, ends: np.ndarray) -> tuple[int, np.ndarray]:
    """The old count: every event as one frame, sorted, searched (what _event_starts
    replaced)."""
    ev = F._events(v, t0, t1)
    starts = np.sort(ev["start_ns"].to_numpy(np.int64))
    return len(ev), np.searchsorted(starts, ends, "left")


def test_event_starts_count_what_the_events_frame_holds(result):
    v = D.view(result, "run", mode="all")
    st = v.steps
    ends = np.maximum.accumulate(st["extent_end_ns"].to_numpy(np.int64))
    for first in (0, len(st) // 2):
        t0 = int(st["start_ns"].iloc[first])
        parts = F._event_starts(v, t0, int(ends[-1]))
        assert all((p[1:] >= p[:-1]).all() for p in parts)
        n, counts = _frame_counts(v, t0, int(ends[-1]), ends)
        assert sum(len(p) for p in parts) == n > 0
        assert np.array_equal(sum(np.searchsorted(p, ends, "left") for p in parts), counts)


def test_host_threads_are_the_busiest_ties_lower_first():
    tid = np.array([5, 3, 3, 9, 9, 1, 7, 7, 8, 8, 2, 2, 4])
    # counts: 3->2, 9->2, 7->2, 8->2, 2->2, then 1, 4, 5 with 1 call each
    assert F._host_threads(tid) == [2, 3, 7, 8, 9, 1][:F.MAX_HOST_ROWS]
    ref = (pd.Series(tid).groupby(tid).size().sort_values(ascending=False, kind="stable")
           .index[:F.MAX_HOST_ROWS].tolist())
    assert F._host_threads(tid) == ref


def _plain_busiest(calls: pd.DataFrame, hit: np.ndarray) -> np.ndarray:
    tid = column(calls, "tid").astype(np.int64, copy=False)
    return np.isin(tid, F._host_threads(tid[hit]))


def test_busiest_rows_through_thread_categories():
    """The busiest threads' rows picked through a categorical global_tid's categories equal
    the plain pick: ranking ties, one tid number in two processes, masks that leave
    threads out."""
    rng = np.random.default_rng(7)
    pids = np.array([100, 200])
    tids = np.arange(1, 3 * F.MAX_HOST_ROWS)
    gtid = (pids[rng.integers(0, 2, 5000)] << 24) | tids[rng.integers(0, len(tids), 5000)]
    gtid[:40] = (100 << 24) | 9999  # a busy thread, 40 calls
    gtid[40:80] = (200 << 24) | 9999  # the same tid number in another process
    for frame in (pd.DataFrame({"global_tid": gtid}),
                  pd.DataFrame({"global_tid": pd.Categorical(gtid)})):
        for hit in (np.ones(5000, bool), rng.random(5000) < 0.3, np.arange(5000) < 60,
                    np.arange(5000) >= 4990):
            got = F._busiest_rows(frame, hit)
            assert np.array_equal(got, _plain_busiest(pd.DataFrame({"global_tid": gtid}), hit))


def test_thread_index_through_categories_is_the_plain_one():
    rng = np.random.default_rng(11)
    gtid = (np.array([100, 200])[rng.integers(0, 2, 3000)] << 24) | rng.integers(1, 9, 3000)
    hit = rng.random(3000) < 0.6
    plain = F._thread_index(pd.DataFrame({"global_tid": gtid}), hit)
    cat = F._thread_index(pd.DataFrame({"global_tid": pd.Categorical(gtid)}), hit)
    assert cat[1].dtype == np.int8  # the categorical's codes, no int64 per call
    np.testing.assert_array_equal(cat[0], plain[0])
    np.testing.assert_array_equal(cat[0][cat[2][cat[1]]], plain[0][plain[2][plain[1]]])


def test_event_counts_sorted_apart_equal_masked(result, monkeypatch):
    """Past _MASKED_THREADS host threads the calls are sorted by thread, not masked."""
    v = D.view(result, "run", mode="all")
    masked = F._count_apart(v)
    monkeypatch.setattr(F, "_MASKED_THREADS", 0)
    sorted_ = F._count_apart(v)
    np.testing.assert_array_equal(masked.per_thread, sorted_.per_thread)
    np.testing.assert_array_equal(masked.threads, sorted_.threads)
    for total in (1, len(v.steps) // 2 + 1, len(v.steps)):
        np.testing.assert_array_equal(masked.of(total), F._step_counts(v, total))


def test_launched_in_is_the_inner_merge(result):
    cs = result.steps.call_steps
    calls = D.cached_api_calls(result.trace)
    calls = calls.assign(dur_ns=column(calls, "dur_ns"))
    steps = cs["step"].unique()
    for pick in (steps, steps[::2], steps[:1], np.array([], dtype=np.int64)):
        window = cs[cs["step"].isin(pick)]
        for name, df in (("kernels", result.trace.kernels[["pid", "corr_id", "name", "dur_ns"]]),
                         ("replays", result.replays.replays),
                         ("calls", calls[["pid", "corr_id", "family", "dur_ns"]])):
            want = df.merge(window, on=["pid", "corr_id"], how="inner")
            pd.testing.assert_frame_equal(D._launched_in(result, name, df, pick), want)


def _kernel_table_merged(result, visible: np.ndarray) -> pd.DataFrame:
    """The view's kernel table as round five made it: a merge, then two groupbys."""
    cs = result.steps.call_steps
    kern = result.trace.kernels[["pid", "corr_id", "name", "dur_ns"]].merge(
        cs, on=["pid", "corr_id"], how="inner")
    kern = kern[kern["step"].isin(visible)]
    g = kern.groupby("name", sort=False, observed=True)["dur_ns"]
    kt = g.agg(["size", "sum"]).reset_index()
    kt.columns = ["name", "instances", "total_ns"]
    kt["name"] = kt["name"].astype(str)
    kt = kt.groupby("name", sort=True, as_index=False).sum()
    kt["per_step"] = kt["instances"] / len(visible)
    kt["avg_ns"] = kt["total_ns"] / kt["instances"]
    kt = kt.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
    return kt[["name", "instances", "per_step", "total_ns", "avg_ns"]].reset_index(drop=True)


@pytest.mark.parametrize("as_object", [False, True])
def test_kernel_table_is_the_merge_and_groupbys(result, as_object):
    k = result.trace.kernels
    steps = result.steps.call_steps["step"].unique()
    step_of = D._steps_of(result, "kernels", k)
    assert D._steps_of(result, "kernels", k) is step_of  # once per result
    names = k["name"].astype(object) if as_object else k["name"]
    for visible in (steps, steps[1::3]):
        rows = D._step_rows(step_of, visible)
        got = D._kernel_table(names, k["dur_ns"], rows, len(visible))
        pd.testing.assert_frame_equal(got, _kernel_table_merged(result, visible))


@pytest.mark.parametrize("as_object", [False, True])
def test_per_family_is_the_groupby(result, as_object):
    calls = D.cached_api_calls(result.trace)
    assert "dur_ns" not in calls and "tid" not in calls  # derived where read: memory
    calls = calls.assign(dur_ns=column(calls, "dur_ns"))
    fam = calls["family"].astype(object) if as_object else calls["family"]
    per = calls.groupby(calls["family"].astype(object), sort=False)["dur_ns"].agg(
        ["size", "sum"])
    want = [(f, int(per.at[f, "size"]), int(per.at[f, "sum"])) for f in D.FAMILIES
            if f in per.index]
    assert D._per_family(fam, calls["dur_ns"]) == want and want
    rows = np.arange(len(calls)) % 3 == 0
    sub = calls[rows]
    per = sub.groupby(sub["family"].astype(object), sort=False)["dur_ns"].agg(["size", "sum"])
    want = [(f, int(per.at[f, "size"]), int(per.at[f, "sum"])) for f in D.FAMILIES
            if f in per.index]
    assert D._per_family(fam, calls["dur_ns"], rows) == want
