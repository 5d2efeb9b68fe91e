"""The launch table and the graph replays of a one-process trace, merged from chunks of whole
steps (docs/chunked.md), equal the whole analysis's: the same rows, order, dtypes and float
bits; the replay summary and cost model compared with ``==`` (bit for bit)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from cgprof.metrics import _window_calls, chunked
from cgprof.metrics import launches as L
from cgprof.metrics.coverage import family_mask
from cgprof.metrics.replays import (
    REPLAY_COLUMNS,
    _no_replays,
    graph_replays,
    merge_replays,
)

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "nsys-samples"
TRACES = sorted((REPO / "traces").glob("*.sqlite"))
SAMPLE_TRACES = sorted(SAMPLES.glob("*.sqlite")) if SAMPLES.is_dir() else []
#: chunk sizes in steps; 10**6: one chunk holding every step
SIZES = (1, 2, 3, 7, 10**6)


@functools.cache
def _whole(path: Path):
    """What analyze() computes for the launch table and the replays, and the inputs a chunk
    driver slices; None when the chunked path does not take the trace."""
    import cgprof
    from cgprof.metrics.coverage import window_positions
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.steps import compute_steps

    trace = cgprof.load(path, cache=False)
    calls = L.api_calls(trace, derived=False)
    ops = gpu_ops(trace)
    steps = compute_steps(trace, calls, ops)
    if chunked.plan(calls, steps.steps, 1) is None:
        return None
    early = steps.window_steps().drop(columns=["launch_wait_ns", "launch_bound"])
    call_pos = window_positions(calls, steps.call_steps, early, steps.step_of_calls(calls))
    in_window, replay_calls = _window_calls(calls, steps, call_pos)
    node_level = trace.meta.graph_trace_mode != "graph" and trace.graph_trace.empty
    return {
        "calls": calls, "ops": ops, "steps": steps, "call_pos": call_pos,
        "in_window": in_window, "replay_calls": replay_calls, "node_level": node_level,
        "launches": L.launch_summary(calls, in_window),
        "replays": graph_replays(ops, replay_calls, node_level=node_level),
    }


def _eligible(path: Path) -> dict:
    w = _whole(path)
    if w is None:
        pytest.skip(f"{path.name}: not a trace the chunked path takes")
    return w


def _chunk_inputs(w: dict, chunk: chunked.Chunk) -> tuple[pd.DataFrame, pd.DataFrame,
                                                           np.ndarray | None, pd.DataFrame]:
    """calls_c, ops_c (fresh RangeIndex), the window flags and the replay calls of a chunk,
    the latter as the driver makes them: _window_calls over the chunk's calls."""
    calls_c = w["calls"].iloc[chunk.r0:chunk.r1].reset_index(drop=True)
    ops = w["ops"]
    ops_c = ops.iloc[chunked.rows_of_corr(ops["corr_id"].to_numpy(), chunk)].reset_index(
        drop=True)
    in_window_c, replay_calls_c = _window_calls(calls_c, w["steps"],
                                                w["call_pos"][chunk.r0:chunk.r1])
    return calls_c, ops_c, in_window_c, replay_calls_c


def _assert_same_replays(got, want) -> None:
    pdt.assert_frame_equal(got.replays, want.replays, check_exact=True)
    assert got.replays.dtypes.to_dict() == want.replays.dtypes.to_dict()
    assert list(got.replays.columns) == REPLAY_COLUMNS
    assert got.summary == want.summary
    assert got.cost_model == want.cost_model
    assert got.node_level == want.node_level


def _bits(col: pd.Series) -> list[str | None]:
    """The float bits of a column that may hold None (an object column)."""
    return [None if pd.isna(v) else float(v).hex() for v in col]


PATHS = [pytest.param(p, id=p.stem) for p in TRACES + SAMPLE_TRACES]


@pytest.mark.parametrize("path", PATHS)
def test_launch_table_from_chunks_equals_the_whole(path):
    w = _eligible(path)
    want = w["launches"]
    in_window = w["in_window"]
    for k in SIZES:
        chunks = chunked.plan(w["calls"], w["steps"].steps, k)
        parts = []
        for chunk in chunks:
            calls_c = w["calls"].iloc[chunk.r0:chunk.r1].reset_index(drop=True)
            sel = None if in_window is None else in_window[chunk.r0:chunk.r1]
            parts.append(L.launch_cells(calls_c, sel))
        got = L.launch_table(parts)
        pdt.assert_frame_equal(got, want, check_exact=True)
        assert got.dtypes.to_dict() == want.dtypes.to_dict()
        assert _bits(got["avg_ns"]) == _bits(want["avg_ns"])
        pdt.assert_frame_equal(L.launch_table(parts[::-1]), want, check_exact=True)


@pytest.mark.parametrize("path", PATHS)
def test_replays_from_chunks_equal_the_whole(path):
    w = _eligible(path)
    want = w["replays"]
    graph_rows = None
    if w["in_window"] is not None:  # the whole run's replay calls: these rows of calls
        graph_rows = np.flatnonzero(w["in_window"] & family_mask(w["calls"], L.GRAPH_LAUNCH,
                                                                 live=False))
    for k in SIZES:
        parts = []
        for chunk in chunked.plan(w["calls"], w["steps"].steps, k):
            _, ops_c, _, replay_calls_c = _chunk_inputs(w, chunk)
            if graph_rows is not None:  # the same as slicing the whole run's replay calls
                a, b = np.searchsorted(graph_rows, [chunk.r0, chunk.r1])
                pdt.assert_frame_equal(replay_calls_c, w["replay_calls"].iloc[a:b].reset_index(
                    drop=True), check_exact=True)
            parts.append(graph_replays(ops_c, replay_calls_c, node_level=w["node_level"]))
        _assert_same_replays(merge_replays(parts, w["node_level"]), want)


def test_the_shipped_traces_are_tested():
    """The eligible traces span eager, graphed and graph-level traces."""
    kinds = {(len(w["replays"].replays) > 0, w["node_level"]) for w in (
        _whole(p) for p in TRACES) if w is not None}
    assert kinds == {(False, True), (True, True), (True, False)}


# --- synthetic: start ties across threads, calls out of start order, a cost model ----------

def _synthetic(seed: int, sorted_starts: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One process, two threads: graph launches (some during capture, some without GPU work,
    varied node counts), eager launches and syncs; call starts with ties across threads; the
    correlation ids rise with the call rows (chunked.plan's contract). ``sorted_starts``
    False: the rows are not in start order (the whole run's stable sort then reorders)."""
    rng = np.random.default_rng(seed)
    n = 400
    start = np.sort(rng.integers(0, 40, n)) * 1000  # many ties
    if not sorted_starts:
        start = rng.permutation(start)
    names = rng.choice(["cudaGraphLaunch", "cudaLaunchKernel", "cudaStreamSynchronize"], n,
                       p=[0.6, 0.3, 0.1])
    calls = pd.DataFrame({
        "start_ns": start.astype(np.int64),
        "end_ns": (start + rng.integers(1, 900, n)).astype(np.int64),
        "global_tid": np.where(rng.random(n) < 0.5, 7 << 24 | 11, 7 << 24 | 12).astype(
            np.int64),
        "corr_id": np.arange(100, 100 + n, dtype=np.int64),
        "pid": np.full(n, 7, dtype=np.int64),
        "name": pd.Categorical(names),
        "in_capture": rng.random(n) < 0.05,
    })
    calls["family"] = L._families(calls["name"])
    rows = []
    for i in np.flatnonzero(names == "cudaGraphLaunch"):
        if rng.random() < 0.1:
            continue  # its work is not in the trace
        t = int(start[i]) + int(rng.integers(0, 3000))
        for _ in range(int(rng.integers(1, 9))):
            t += int(rng.integers(0, 4)) * 10  # ties of start and of gaps
            rows.append((t, t + int(rng.integers(0, 3)) * 40, int(calls["corr_id"][i]),
                         str(rng.choice(["kernel", "memcpy", "memset"])),
                         int(rng.integers(0, 3))))
    for i in np.flatnonzero(names == "cudaLaunchKernel"):
        t = int(start[i]) + 500
        rows.append((t, t + 30, int(calls["corr_id"][i]), "kernel", -1))
    st, en, corr, kind, stream = (np.array(c) for c in zip(*rows, strict=True))
    ops = pd.DataFrame({
        "start_ns": st.astype(np.int64), "end_ns": en.astype(np.int64),
        "device_id": np.zeros(len(st), dtype=np.int64),
        "stream_id": np.where(stream < 0, 7, 20 + stream).astype(np.int64),
        "pid": np.full(len(st), 7, dtype=np.int64), "corr_id": corr.astype(np.int64),
        "kind": pd.Categorical(kind, categories=["kernel", "memcpy", "memset"]),
        "in_graph": stream >= 0, "is_input_copy": np.zeros(len(st), dtype=bool),
    })
    ops = ops.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    return calls, ops


def _cuts(n: int, rng: np.random.Generator, k: int) -> list[chunked.Chunk]:
    """Chunks of the call rows at k - 1 random cuts (the correlation ids are 100 + row)."""
    at = np.unique(np.concatenate(([0, n], rng.integers(0, n, k - 1))))
    return [chunked.Chunk(0, 0, int(a), int(b), 100 + int(a), 100 + int(b) - 1)
            for a, b in zip(at[:-1], at[1:], strict=True)]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("sorted_starts", [True, False])
def test_synthetic_replays_merge_in_the_whole_runs_order(seed, sorted_starts):
    calls, ops = _synthetic(seed, sorted_starts)
    rng = np.random.default_rng(seed + 100)
    for node_level in (True, False):
        want = graph_replays(ops, calls, node_level=node_level)
        assert len(want.replays) > 100
        if node_level:
            assert want.cost_model is not None  # several node counts
            assert (np.diff(want.replays["api_start_ns"].to_numpy()) == 0).any()  # ties
        for k in (1, 4, 12):
            parts = []
            for chunk in _cuts(len(calls), rng, k):
                calls_c = calls.iloc[chunk.r0:chunk.r1].reset_index(drop=True)
                ops_c = ops.iloc[chunked.rows_of_corr(ops["corr_id"].to_numpy(), chunk)
                                 ].reset_index(drop=True)
                parts.append(graph_replays(ops_c, calls_c, node_level=node_level))
            _assert_same_replays(merge_replays(parts, node_level), want)


def test_merge_of_no_replays_is_the_empty_result():
    for node_level in (True, False):
        want = _no_replays(node_level)
        _assert_same_replays(merge_replays([], node_level), want)
        _assert_same_replays(merge_replays([_no_replays(node_level)] * 3, node_level), want)


def test_merge_keeps_the_call_order_of_several_processes():
    """Replays of two processes whose calls interleave: the parts in call order, ties
    across them in call-row order, as the whole run's stable sort."""
    calls, ops = _synthetic(0, True)
    other = calls.assign(pid=8)
    both = pd.concat([calls, other], ignore_index=True)
    both = both.iloc[np.argsort(both["start_ns"].to_numpy(), kind="stable")].reset_index(
        drop=True)
    all_ops = pd.concat([ops, ops.assign(pid=8)], ignore_index=True)
    want = graph_replays(all_ops, both, node_level=True)
    half = len(both) // 2
    parts = [graph_replays(all_ops, both.iloc[a:b].reset_index(drop=True), node_level=True)
             for a, b in ((0, half), (half, len(both)))]
    _assert_same_replays(merge_replays(parts, True), want)


def test_launch_cells_name_calls_without_a_name_as_the_frame_path_does():
    """A call without a name (None / NaN; object or categorical names) is written as
    ``str`` of its value, in the whole table and merged from chunks."""
    rng = np.random.default_rng(5)
    n = 300
    names = rng.choice(["cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync",
                        "cudaStreamSynchronize", "cudaEventRecord"], n).astype(object)
    names[::17] = None
    names[5::23] = np.nan
    dur = rng.integers(0, 10**6, n)
    for col in (pd.Series(names, dtype=object), pd.Series(names).astype("category")):
        calls = pd.DataFrame({"start_ns": np.arange(n, dtype=np.int64) * 10,
                              "end_ns": np.arange(n, dtype=np.int64) * 10 + dur,
                              "name": col, "in_capture": rng.random(n) < 0.2})
        calls["family"] = pd.Categorical([L.family_of(v) if isinstance(v, str) else L.OTHER
                                          for v in names])
        sel = rng.random(n) < 0.7
        want = L._launch_summary_frames(calls[sel].reset_index(drop=True))
        pdt.assert_frame_equal(L.launch_summary(calls, sel), want, check_exact=True)
        parts = [L.launch_cells(calls.iloc[a:a + 40].reset_index(drop=True), sel[a:a + 40])
                 for a in range(0, n, 40)]
        pdt.assert_frame_equal(L.launch_table(parts), want, check_exact=True)
    assert L.launch_table([]).equals(L.launch_summary(calls.iloc[0:0]))
