"""The reduced gap measurement of the chunked analysis
(cgprof.metrics.gap_reduced.measure_gaps_reduced): what the reports read of the GPU gaps and
the steps' launch wait, without the gap table, is what the whole analysis gives, bit for bit
(docs/chunked.md, 2d)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import cgprof
from cgprof.metrics import analyze, chunked, gap_chunked, gap_measure, gap_reduced, gap_result
from cgprof.metrics.gap_measure import gpu_gaps, measure_gaps
from cgprof.metrics.gap_reduced import measure_gaps_reduced
from cgprof.metrics.gap_result import GapResult
from cgprof.metrics.gpu import gpu_ops
from cgprof.metrics.launches import api_calls
from cgprof.metrics.step_attribution import _dense_steps
from cgprof.metrics.step_launch_wait import classify_steps, fill_launch_wait
from cgprof.metrics.step_result import StepResult
from cgprof.metrics.steps import compute_steps

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "traces").glob("*.sqlite")) + sorted(
    (REPO.parent / "shared" / "nsys-samples").glob("*.sqlite"))
#: Gap list limits: the report's (1000), a few, none listed, every gap (None).
LIMITS = (0, 1, 5, 1000, None)
MIN_GAPS_US = (0.0, 5.0)

_CACHE: dict[Path, Any] = {}


@dataclasses.dataclass
class _Inputs:
    calls: pd.DataFrame
    ops: pd.DataFrame
    steps: StepResult
    window: tuple[int, int] | None
    span: tuple[int, int] | None
    wait: tuple[np.ndarray, int, int]
    results: dict[float, Any]  # analyze() per min_gap_us


def _inputs(path: Path) -> _Inputs | None:
    """The chunk driver's whole-trace inputs (as analyze() makes them) and the analyses, once
    per trace; None when the chunked path does not take the trace."""
    if path not in _CACHE:
        trace = cgprof.load(path, cache=False)
        calls = api_calls(trace, derived=False)
        ops = gpu_ops(trace)
        steps = compute_steps(trace, calls, ops)
        if chunked.plan(calls, steps.steps, 1) is None:
            _CACHE[path] = None
            return None
        st = steps.steps
        gpu_end = st["gpu_end_ns"].dropna()
        span = (int(st["start_ns"].min()),
                max(int(st["end_ns"].max()), int(gpu_end.max()) if len(gpu_end) else 0))
        _CACHE[path] = _Inputs(calls, ops, steps, steps.window(), span, _wait_table(steps), {
            m: analyze(cgprof.load(path, cache=False), min_gap_us=m) for m in MIN_GAPS_US})
    return _CACHE[path]


def _wait_table(steps: StepResult) -> tuple[np.ndarray, int, int]:
    """(table, lo, steps): the call-to-step lookup classify_steps reads."""
    lookup = steps._lookup()
    if lookup is not None:
        table, lo = lookup[0], lookup[1]
    else:
        cs = steps.call_steps
        none = np.zeros(0, dtype=np.int64)
        dense = _dense_steps(none, none, cs["pid"].to_numpy(), cs["corr_id"].to_numpy(),
                             cs["step"].to_numpy())
        assert dense is not None
        table, lo = dense
    return table, lo, len(steps.steps)


def _same(got: GapResult | None, want: GapResult) -> None:
    assert got is not None
    for t in ("devices", "by_kind", "histogram", "streams", "gaps"):
        pdt.assert_frame_equal(getattr(got, t), getattr(want, t), check_exact=True, obj=t)
        assert list(getattr(got, t).dtypes) == list(getattr(want, t).dtypes), t
    assert (got.min_gap_ns, got.total, got.listed_total) == (
        want.min_gap_ns, want.total, want.listed_total)


@pytest.fixture
def reduced_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Force the chunked sweep on small traces; counts the reduced results made without a
    gap table."""
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1)
    made: list[int] = []
    result = gap_reduced._GapSummary.result

    def spy(self: Any, *a: Any, **kw: Any) -> GapResult:
        made.append(1)
        return result(self, *a, **kw)

    monkeypatch.setattr(gap_reduced._GapSummary, "result", spy)
    return made


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_reduced_gaps_are_the_analysis_report(path: Path, reduced_runs: list[int]) -> None:
    """The report's gaps (the window's, cut to the longest as the CLI keeps them) and the
    steps' launch wait (the span's gaps) against analyze() itself."""
    inp = _inputs(path)
    if inp is None:
        pytest.skip("not a trace the chunked path takes")
    for min_gap_us, result in inp.results.items():
        for limit in LIMITS:
            got, wait = measure_gaps_reduced(inp.ops, inp.calls, inp.window,
                                             int(round(min_gap_us * 1000)), limit)
            assert wait is None
            _same(got, result.light(limit).gaps)
    assert len(reduced_runs) == len(MIN_GAPS_US) * (len(LIMITS) - 1)  # None: the table
    # the span's launch wait, alone (the window is another) and beside the span's tables
    want = inp.results[0.0].steps.steps
    none, wait = measure_gaps_reduced(inp.ops, inp.calls, inp.span, wait=inp.wait,
                                      tables=False)
    assert none is None and wait is not None and wait.dtype == np.int64
    np.testing.assert_array_equal(wait, want["launch_wait_ns"].to_numpy())
    for limit in LIMITS:
        got, wait2 = measure_gaps_reduced(inp.ops, inp.calls, inp.span, 5000, limit,
                                          wait=inp.wait)
        np.testing.assert_array_equal(wait2, wait)
        _same(got, gpu_gaps(inp.ops, inp.calls, window=inp.span).above(5000).longest(limit))
    steps = dataclasses.replace(inp.steps, steps=inp.steps.steps.copy())
    fill_launch_wait(steps, wait)
    pdt.assert_frame_equal(steps.steps, want, check_exact=True)


@pytest.mark.parametrize("path", TRACES[4::3], ids=lambda p: p.name)
def test_reduced_gaps_across_many_fill_chunks(path: Path, reduced_runs: list[int],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few dozen ops: the longest gaps and the sums merged over many chunks;
    no window (the whole trace), the window and the span."""
    inp = _inputs(path)
    if inp is None:
        pytest.skip("not a trace the chunked path takes")
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    span_gaps = measure_gaps(inp.ops, inp.calls, window=inp.span).gaps
    for window in (None, inp.window, inp.span):
        for min_gap in (0, 2000):
            whole = gpu_gaps(inp.ops, inp.calls, window=window).above(min_gap)
            for limit in LIMITS:
                got, _ = measure_gaps_reduced(inp.ops, inp.calls, window, min_gap, limit)
                _same(got, whole.longest(limit))
    _, wait = measure_gaps_reduced(inp.ops, inp.calls, inp.span, wait=inp.wait, tables=False)
    steps = dataclasses.replace(inp.steps, steps=inp.steps.steps.copy())
    classify_steps(steps, span_gaps)
    np.testing.assert_array_equal(wait, steps.steps["launch_wait_ns"].to_numpy())
    assert reduced_runs


@pytest.mark.parametrize("name", ["mlp_train_eager", "resnet18_train_graph", "user_train"])
def test_reduced_gaps_of_several_devices(traces_dir: Path, name: str, reduced_runs: list[int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """One process on two GPUs (every third op on the other): the per-device slots."""
    inp = _inputs(traces_dir / f"{name}.sqlite")
    assert inp is not None
    ops = inp.ops.assign(device_id=np.where(np.arange(len(inp.ops)) % 3 == 0, 3, 1))
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    devices = set()
    for chunk in (37, 1 << 18):
        monkeypatch.setattr(gap_chunked, "FILL_CHUNK", chunk)
        for window in (None, inp.window, (lo + (hi - lo) // 3, hi - (hi - lo) // 3)):
            measured = measure_gaps(ops, inp.calls, window=window)
            devices.add(measured.gaps["device_id"].nunique())
            steps = dataclasses.replace(inp.steps, steps=inp.steps.steps.copy())
            classify_steps(steps, measured.gaps)
            for min_gap in (0, 5000):
                whole = measured.result(min_gap)
                for limit in LIMITS:
                    got, wait = measure_gaps_reduced(ops, inp.calls, window, min_gap, limit,
                                                     wait=inp.wait)
                    _same(got, whole.longest(limit))
                    np.testing.assert_array_equal(wait, steps.steps["launch_wait_ns"])
    assert reduced_runs and 2 in devices


def test_reduced_gaps_where_the_chunked_sweep_does_not_apply(traces_dir: Path,
                                                             reduced_runs: list[int]) -> None:
    """Two processes (no chunked sweep): the table is measured, the same result."""
    path = traces_dir / "ddp_mlp_train_graph.sqlite"
    trace = cgprof.load(path, cache=False)
    calls, ops = api_calls(trace, derived=False), gpu_ops(trace)
    window = compute_steps(trace, calls, ops).window()
    for limit in LIMITS:
        got, _ = measure_gaps_reduced(ops, calls, window, 5000, limit)
        _same(got, gpu_gaps(ops, calls, window=window).above(5000).longest(limit))
    assert not reduced_runs


@pytest.mark.parametrize("chunk", [37, 1 << 20])
def test_stream_table_swept_is_the_stream_table(traces_dir: Path, chunk: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The reduced measurement's stream table, a chunk of ops at a time (one and two GPUs)."""
    from cgprof.metrics import intervals as iv

    monkeypatch.setattr(iv, "SWEEP_CHUNK", chunk)
    for name in ("mlp_train_eager", "resnet18_train_graph", "mlp_train_graph_graphtrace"):
        inp = _inputs(traces_dir / f"{name}.sqlite")
        assert inp is not None
        two = inp.ops.assign(device_id=np.where(np.arange(len(inp.ops)) % 3 == 0, 3, 1))
        for ops in (inp.ops, two):
            for window in (None, inp.window, inp.span):
                live = gap_measure._live_ops(ops, window)
                got = gap_chunked._stream_table_swept(live)
                assert got is not None
                pdt.assert_frame_equal(got, gap_result._stream_table(live), check_exact=True)
