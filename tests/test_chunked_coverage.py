"""The graph coverage measured in chunks of whole steps (coverage_partial per chunk, then
merge_coverage_partials) is exactly the whole-trace graph_coverage: the same eager table (values,
dtypes, row order, float bits), per-step medians and summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import cgprof
from cgprof.metrics import chunked
from cgprof.metrics import coverage as CV
from cgprof.metrics.gpu import gpu_ops
from cgprof.metrics.launches import api_calls
from cgprof.metrics.steps import compute_steps

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "nsys-samples"
TRACES = sorted(p.name for p in (REPO / "traces").glob("*.sqlite"))
SAMPLE_TRACES = sorted(p.name for p in SAMPLES.glob("*.sqlite")) if SAMPLES.is_dir() else []
SIZES = [1, 2, 3, 7, 10**6]  # steps per chunk; the last: one chunk holding everything


def _assert_same(got: CV.CoverageResult, want: CV.CoverageResult) -> None:
    pdt.assert_frame_equal(got.eager_top, want.eager_top, check_exact=True)
    assert got.eager_top.dtypes.tolist() == want.eager_top.dtypes.tolist()
    assert got.summary == want.summary
    assert got.eager_per_step == want.eager_per_step
    assert got.recapture_steps == want.recapture_steps
    assert got.fallback_steps == want.fallback_steps


def _check_trace(path: Path) -> int:
    """Chunked against whole on one trace, every chunk size; the number of chunk sizes run
    (0: the trace is not one the chunked path takes)."""
    trace = cgprof.load(path, cache=False)
    calls = api_calls(trace, derived=False)
    ops = gpu_ops(trace)
    steps = compute_steps(trace, calls, ops)
    if chunked.plan(calls, steps.steps, 1) is None:
        return 0
    early = steps.window_steps().drop(columns=["launch_wait_ns", "launch_bound"])
    call_pos = CV.window_positions(calls, steps.call_steps, early, steps.step_of_calls(calls))
    kernels = trace.stored("kernels")
    want = CV.graph_coverage(early, kernels, calls, steps.call_steps,
                             CV.StepLaunches.of(calls, call_pos))
    whole = CV.coverage_partial(early, kernels, calls, CV.StepLaunches.of(calls, call_pos))
    corr = kernels["corr_id"].to_numpy()
    for k in SIZES:
        chunks = chunked.plan(calls, steps.steps, k)
        assert chunks is not None
        parts, local = [], []
        win_step = early["step"].to_numpy()
        for c in chunks:
            calls_c = calls.iloc[c.r0:c.r1].reset_index(drop=True)
            rows = chunked.rows_of_corr(corr, c)
            kernels_c = kernels.iloc[rows].reset_index(drop=True)
            pos_c = call_pos[c.r0:c.r1]
            launches_c = CV.StepLaunches.of(calls_c, pos_c)
            parts.append(CV.coverage_partial(early, kernels_c, calls_c, launches_c, rows))
            # the chunk's own window steps, positions counted from its first one
            mine = (win_step >= c.s0) & (win_step < c.s1)
            first = int(np.count_nonzero(win_step < c.s0))
            pos_local = np.where(pos_c >= 0, pos_c - first, -1)
            local.append(CV.coverage_partial(early[mine], kernels_c, calls_c,
                                             CV.StepLaunches.of(calls_c, pos_local), rows))
        _assert_same(CV.merge_coverage_partials(parts, early), want)
        _assert_same(CV.merge_coverage_partials(local, early), want)
        # folded in two halves first (a driver that merges as it goes): the same
        half = len(parts) // 2
        folded = [CV.CoveragePartial.combine(parts[:half] or parts[:1]),
                  CV.CoveragePartial.combine(parts[half:])] if half else parts
        _assert_same(CV.merge_coverage_partials(folded, early), want)
        merged = CV.CoveragePartial.combine(parts)
        np.testing.assert_array_equal(merged.host, whole.host)
        assert merged.host.dtype == np.int64
    return len(SIZES)


@pytest.mark.parametrize("name", TRACES)
def test_chunked_coverage_equals_whole_on_traces(traces_dir, name):
    _check_trace(traces_dir / name)


@pytest.mark.parametrize("name", SAMPLE_TRACES or ["(none)"])
def test_chunked_coverage_equals_whole_on_samples(samples_dir, name):
    assert _check_trace(samples_dir / name) == len(SIZES)


def test_most_traces_take_the_chunked_path(traces_dir):
    """The comparison above runs on the one-process traces, not only skips."""
    taken = [n for n in TRACES if _plan_ok(traces_dir / n)]
    assert len(taken) >= 13, taken


def _plan_ok(path: Path) -> bool:
    trace = cgprof.load(path, cache=False)
    calls = api_calls(trace, derived=False)
    return chunked.plan(calls, compute_steps(trace, calls, gpu_ops(trace)).steps, 1) is not None


# ---------------------------------------------------------------------------------------
# built traces: ties across chunks, shared launch calls, unnamed kernels, launches outside
# the window, kernels of neighbouring calls interleaved in the kernel table

APIS = ["cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"]
NAMES = ["k_a", "k_b", "k_c", "k_d"]


def _built(seed: int):
    rng = np.random.default_rng(seed)
    n_calls = int(rng.integers(5, 60))
    step = np.sort(rng.integers(0, 8, n_calls))  # 8 steps of calls; 2..6 are the window
    pos = np.where((step >= 2) & (step <= 6), step - 2, -1)
    calls = pd.DataFrame({
        "pid": np.full(n_calls, 1, dtype=np.int64),
        "corr_id": np.arange(100, 100 + n_calls, dtype=np.int64),
        "dur_ns": rng.integers(1, 50, n_calls),  # few values: ties in gpu_ns and counts
        "name": pd.Categorical.from_codes(rng.integers(-1, 3, n_calls), categories=APIS),
    })
    rows = np.flatnonzero(pos >= 0)
    launches = CV.StepLaunches(rows=rows.astype(np.int32), pos=pos[rows].astype(np.int32),
                               kernel=rng.random(len(rows)) < 0.85)
    per_call = rng.integers(0, 4, n_calls)  # kernels launched by each call
    corr = np.repeat(calls["corr_id"].to_numpy(), per_call)
    corr = corr[np.argsort(corr + rng.random(len(corr)) * 2.5, kind="stable")]  # interleaved
    nk = len(corr)
    kernels = pd.DataFrame({
        "pid": np.full(nk, 1, dtype=np.int64),
        "corr_id": corr,
        "graph_node_id": pd.array([None if r < 0.8 else 3 for r in rng.random(nk)],
                                  dtype="Int64"),
        "name": pd.Categorical.from_codes(rng.integers(-1, 4, nk), categories=NAMES),
        "dur_ns": rng.integers(1, 4, nk) * 100,
    })
    n = 5
    ws = pd.DataFrame({"step": np.arange(2, 7)})
    for c in ("graph_kernels", "eager_kernels", "graph_gpu_ns", "eager_gpu_ns", "sync_calls",
              "memcpy_calls", "kernel_launches", "graph_launches"):
        ws[c] = rng.integers(0, 3, n)
    ws["recapture"] = rng.random(n) < 0.2
    ws["fallback"] = rng.random(n) < 0.2
    return ws, kernels, calls, launches, step


def _chunk_partials(ws, kernels, calls, launches, step, k, n_steps=8):
    """Partials of chunks of ``k`` of the ``n_steps`` call steps, built as the chunk driver
    does."""
    parts = []
    corr = kernels["corr_id"].to_numpy()
    for s0 in range(0, n_steps, k):
        r0, r1 = (int(np.searchsorted(step, s, "left")) for s in (s0, s0 + k))
        lo, hi = (int(calls["corr_id"].iat[r0]), int(calls["corr_id"].iat[r1 - 1])) if (
            r1 > r0) else (0, -1)
        c = chunked.Chunk(s0, s0 + k, r0, r1, lo, hi)
        krows = chunked.rows_of_corr(corr, c)
        inside = (launches.rows >= r0) & (launches.rows < r1)
        launches_c = CV.StepLaunches(rows=launches.rows[inside] - r0, pos=launches.pos[inside],
                                     kernel=launches.kernel[inside])
        parts.append(CV.coverage_partial(ws, kernels.iloc[krows].reset_index(drop=True),
                                         calls.iloc[r0:r1].reset_index(drop=True),
                                         launches_c, krows))
    return parts


def _reference_top(ws, kernels, calls, launches):
    """The eager table by pandas: each eager kernel joined to its window kernel-launch call,
    the call's host time charged to its first kernel, launch_api the most frequent (the pair
    seen first in kernel order on a tie)."""
    n = len(ws)
    k = kernels[kernels["graph_node_id"].isna()].reset_index(drop=True)
    c = calls.iloc[launches.rows[launches.kernel]][["corr_id", "dur_ns", "name"]].rename(
        columns={"dur_ns": "api_ns", "name": "api"})
    j = k.merge(c, on="corr_id", how="inner")
    j["api_ns"] = j["api_ns"].where(~j["corr_id"].duplicated(), 0)
    j = j[j["name"].notna()]
    rows = []
    for name, g in j.groupby(j["name"].astype(str), sort=False):
        counts = g[g["api"].notna()]["api"].astype(str).value_counts(sort=False)
        best = counts[counts == counts.max()].index[0] if len(counts) else None
        rows.append({"name": name, "kernels": len(g) / n, "gpu_ns": g["dur_ns"].sum() / n,
                     "launch_api": best, "launch_host_ns": g["api_ns"].sum() / n})
    if not rows:
        return None
    top = pd.DataFrame(rows).sort_values(["gpu_ns", "name"], ascending=[False, True],
                                         kind="stable")
    return top.head(CV.EAGER_TOP_N).reset_index(drop=True)


@pytest.mark.parametrize("top_chunk", [2, 1 << 20])
def test_chunked_coverage_on_built_traces(monkeypatch, top_chunk):
    monkeypatch.setattr(CV, "_TOP_CHUNK", top_chunk)
    ties = 0
    for seed in range(40):
        ws, kernels, calls, launches, step = _built(seed)
        want = CV.graph_coverage(ws, kernels, calls, pd.DataFrame(), launches)
        ref = _reference_top(ws, kernels, calls, launches)
        if ref is None:
            assert want.eager_top.empty
        else:
            pdt.assert_frame_equal(want.eager_top, ref, check_dtype=False, check_exact=True)
        for k in (1, 3, 8):
            parts = _chunk_partials(ws, kernels, calls, launches, step, k)
            _assert_same(CV.merge_coverage_partials(parts, ws), want)
            _assert_same(CV.merge_coverage_partials(parts[::-1], ws), want)  # any order
        part = CV.CoveragePartial.combine(_chunk_partials(ws, kernels, calls, launches, step, 1))
        pairs = pd.DataFrame({"name": part.pair_name, "n": part.pair_kernels})
        most = pairs[pairs["n"] == pairs.groupby("name")["n"].transform("max")]
        ties += int((most.groupby("name").size() > 1).sum())
    assert ties > 5  # the first-seen tie rule was exercised across chunks


def test_tie_goes_to_the_pair_seen_first_in_the_kernel_table():
    """k_a: launched twice by cuLaunchKernel (chunk 1) and twice by cudaLaunchKernel
    (chunk 2): a tie, and the first pair in kernel-table order wins, whatever the API codes."""
    calls = pd.DataFrame({
        "pid": np.ones(4, dtype=np.int64), "corr_id": np.arange(1, 5, dtype=np.int64),
        "dur_ns": np.array([10, 20, 30, 40]),
        "name": pd.Categorical.from_codes([1, 1, 0, 0], categories=APIS)})
    kernels = pd.DataFrame({
        "pid": np.ones(5, dtype=np.int64), "corr_id": np.array([1, 2, 2, 3, 4]),
        "graph_node_id": pd.array([None] * 5, dtype="Int64"),
        "name": pd.Categorical.from_codes([0, 0, -1, 0, 0], categories=NAMES),
        "dur_ns": np.array([5, 5, 7, 5, 5])})
    launches = CV.StepLaunches(rows=np.arange(4, dtype=np.int32),
                               pos=np.array([0, 0, 1, 1], dtype=np.int32),
                               kernel=np.ones(4, dtype=bool))
    ws = pd.DataFrame({"step": [0, 1]})
    for c in ("graph_kernels", "eager_kernels", "graph_gpu_ns", "eager_gpu_ns", "sync_calls",
              "memcpy_calls", "kernel_launches", "graph_launches"):
        ws[c] = 1
    ws["recapture"] = ws["fallback"] = False
    step = np.array([0, 0, 1, 1])
    want = CV.graph_coverage(ws, kernels, calls, pd.DataFrame(), launches)
    assert want.eager_top["launch_api"].tolist() == ["cuLaunchKernel"]
    assert want.eager_top["launch_host_ns"].tolist() == [50.0]  # call 2 once, on its first
    parts = _chunk_partials(ws, kernels, calls, launches, step, 1, n_steps=2)
    assert [p.pair_first.tolist() for p in parts] == [[0], [3]]
    assert parts[1].host.tolist() == [0, 70]
    _assert_same(CV.merge_coverage_partials(parts[::-1], ws), want)
