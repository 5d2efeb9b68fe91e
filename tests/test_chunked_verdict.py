"""The verdict from per-chunk partials of the API calls (cgprof.metrics.verdict.verdict_partial,
merge_verdict_partials) is the whole analysis's verdict, bit for bit (docs/chunked.md, 2e)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cgprof
from cgprof.metrics import analyze, chunked
from cgprof.metrics.coverage import StepLaunches, window_positions
from cgprof.metrics.launches import api_calls
from cgprof.metrics.verdict import (
    ValueCounts,
    Verdict,
    _median_int,
    merge_verdict_partials,
    verdict,
    verdict_partial,
)

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "traces").glob("*.sqlite")) + sorted(
    (REPO.parent / "shared" / "nsys-samples").glob("*.sqlite"))
#: Steps per chunk; 10**6: one chunk holding every step.
CHUNK_STEPS = (1, 2, 3, 7, 10**6)


def _bits(x: Any) -> Any:
    """``x`` with every float as its hex form: == on the result is bit-exact (NaN, -0.0)."""
    if isinstance(x, float):
        return x.hex()
    if isinstance(x, dict):
        return {k: _bits(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_bits(v) for v in x]
    return x


def _same(a: Verdict, b: Verdict) -> None:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    for f in da:
        assert _bits(da[f]) == _bits(db[f]), f
        assert type(da[f]) is type(db[f]), f


@pytest.mark.parametrize("skip", [0, 3])
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_verdict_from_chunk_partials_is_the_whole_verdict(path: Path, skip: int) -> None:
    result = analyze(cgprof.load(path, cache=False), skip=skip)
    steps = result.steps
    calls = api_calls(result.trace, derived=False)
    if chunked.plan(calls, steps.steps, 1) is None:
        pytest.skip("not a trace the chunked path takes")
    win = steps.window_steps()
    early = win.drop(columns=["launch_wait_ns", "launch_bound"])
    call_pos = window_positions(calls, steps.call_steps, early, steps.step_of_calls(calls))
    is_eager = early["mode"].to_numpy() == "eager"
    mode = result.info["graph_trace_mode"]
    whole = verdict(win, result.replays, result.coverage, calls, steps.call_steps,
                    graph_trace_mode=mode, launches=StepLaunches.of(calls, call_pos))
    _same(whole, result.verdict)
    for k in CHUNK_STEPS:
        chunks = chunked.plan(calls, steps.steps, k)
        assert chunks is not None
        parts = []
        for chunk in chunks:
            calls_c = calls.iloc[chunk.r0:chunk.r1].reset_index(drop=True)
            launches_c = StepLaunches.of(calls_c, call_pos[chunk.r0:chunk.r1])
            parts.append(verdict_partial(calls_c, launches_c, is_eager))
        merged = merge_verdict_partials(parts)
        assert merged.first_launch_ns.dtype == np.int64
        assert len(merged.first_launch_ns) == len(win)
        got = verdict(win, result.replays, result.coverage, graph_trace_mode=mode,
                      partial=merged)
        _same(got, result.verdict)


def test_verdict_without_launch_calls_from_partials() -> None:
    """No call at all: h is the default and no step has host time before a launch."""
    result = analyze(cgprof.load(REPO / "traces" / "mlp_train_eager.sqlite", cache=False))
    win = result.steps.window_steps()
    is_eager = win["mode"].to_numpy() == "eager"
    none = api_calls(result.trace, derived=False).iloc[0:0].reset_index(drop=True)
    part = verdict_partial(none, StepLaunches.of(none, np.zeros(0, dtype=np.int64)), is_eager)
    got = verdict(win, result.replays, result.coverage,
                  partial=merge_verdict_partials([part, part]))
    want = verdict(win, result.replays, result.coverage)
    _same(got, want)
    assert "default" in got.lines[2] and got.assumptions["kept_host_ns_p50"] == 0.0


def _samples(rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for n in (1, 2, 3, 4, 5, 10, 11, 100, 101, 1000, 1001):
        out.append(rng.integers(-50, 50, n))  # many repeats
        out.append(rng.integers(0, 2**62, n))  # wide: floats round
        out.append(rng.integers(3_000, 12_000, n))  # launch durations
    out.append(np.full(6, 7))
    out.append(np.array([2**53 + 1, 2**53 + 3]))  # the sum's rounding is numpy's
    return [a.astype(np.int64) for a in out]


def test_median_from_value_counts_is_numpy_median() -> None:
    rng = np.random.default_rng(13)
    for x in _samples(rng):
        want = float(np.median(x.astype(np.float64)))
        assert _median_int(x).hex() == want.hex()
        whole = ValueCounts.of(x)
        assert whole.values.dtype == np.int64 and whole.counts.dtype == np.int64
        assert len(whole) == len(x)
        assert whole.median().hex() == want.hex()
        # split into random pieces (some empty), merged back
        cuts = np.sort(rng.integers(0, len(x) + 1, 4))
        merged = ValueCounts.merge([ValueCounts.of(p) for p in np.split(x, cuts)])
        assert merged.values.tolist() == whole.values.tolist()
        assert merged.counts.tolist() == whole.counts.tolist()
        assert merged.counts.dtype == np.int64 and merged.values.dtype == np.int64
        assert merged.median().hex() == want.hex()
