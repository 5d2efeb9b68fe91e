"""Pure functions from a loaded :class:`~cgprof.io.trace.Trace` to results; no I/O, no plotting.

:func:`analyze` runs them all and returns an :class:`AnalysisResult`, the object behind
``cgprof analyze``: every table the command prints or writes is an attribute of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cgprof.io.loader import load
from cgprof.io.memory import release_arrow_pool, release_memory
from cgprof.io.threads import InThread
from cgprof.io.trace import Trace, column
from cgprof.io.validate import distinct_pids
from cgprof.metrics.completeness import CompletenessResult, completeness, graph_check_mode
from cgprof.metrics.coverage import (
    CoverageResult,
    StepLaunches,
    family_mask,
    graph_coverage,
    window_positions,
)
from cgprof.metrics.gap_measure import measure_gaps, window_gaps
from cgprof.metrics.gap_result import GapResult, MeasuredGaps
from cgprof.metrics.gpu import gpu_ops
from cgprof.metrics.launches import GRAPH_LAUNCH, api_calls, launch_summary
from cgprof.metrics.replays import ReplayResult, graph_replays
from cgprof.metrics.step_launch_wait import classify_steps
from cgprof.metrics.step_result import StepResult
from cgprof.metrics.steps import compute_steps
from cgprof.metrics.summaries import api_summary, kernel_summary, nvtx_ranges, nvtx_summary
from cgprof.metrics.verdict import Verdict, verdict
from cgprof.scratch import checkpoint
from cgprof.untraced import UntracedTimes
from cgprof.untraced import measure as untraced_times

__all__ = ["AnalysisResult", "analyze"]

@dataclass
class AnalysisResult:
    """Everything ``cgprof analyze`` computes for one trace.

    info            trace facts (path, nsys and export schema versions, graph trace mode, GPUs,
                    counts of kernels/API calls/NVTX ranges, the analysis window:
                    window_start_ns/window_end_ns, window_steps (step numbers) and
                    window_reason)
    launches        launch-family table of the calls in window steps
                    (cgprof.metrics.launches.launch_summary)
    api_summary     per API name, as nsys cuda_api_sum (whole trace)
    kernel_summary  per kernel name, as nsys cuda_gpu_kern_sum (whole trace)
    nvtx_summary    per NVTX range, as nsys nvtx_sum (whole trace)
    gaps            GPU busy/idle and classified gaps in the window (GapResult)
    replays         graph replays launched by window steps (ReplayResult)
    steps           per-step table, every step, ``in_window`` marking the window (StepResult)
    coverage        graph coverage of the window steps (CoverageResult)
    step_gaps       every listed GPU gap from the first step to the last (GAP_COLUMNS), not
                    only the window's: what views of warm-up or capture steps draw
                    (``cgprof diff --mode all``); the same rows as ``gaps.gaps`` when the
                    window holds every step
    verdict         headline and what-if estimate, over the window steps (Verdict)
    windows         (a chunked analysis's, when asked) the totals of windows of steps that
                    views of it read (cgprof.metrics.windows.WindowTotals)
    completeness    whether the GPU side is all there, and what is missing
                    (cgprof.metrics.completeness.CompletenessResult): where it is not, the
                    reports mark the GPU figures unavailable and the verdict leaves them out
    untraced        the window steps' times without the profiler, from the untraced run
                    recorded beside the trace (cgprof.untraced.UntracedTimes), None: none

    The analysis window is the steady state: the steps after --skip that are neither warm-up
    nor a capture before the first replay. Every table and figure covers it except the three
    per-name summaries, which mirror ``nsys stats`` over the whole trace.
    trace           the loaded trace (for reports that draw the timeline)

    Data flows one way (metrics -> report): the JSON document is made on the report side,
    ``cgprof.report.json_report.result_to_dict(result)``.
    """

    info: dict[str, Any]
    launches: pd.DataFrame
    api_summary: pd.DataFrame
    kernel_summary: pd.DataFrame
    nvtx_summary: pd.DataFrame
    gaps: GapResult
    replays: ReplayResult
    steps: StepResult
    verdict: Verdict
    trace: Trace
    coverage: CoverageResult
    step_gaps: pd.DataFrame
    #: the totals of the windows of steps a caller asked a chunked analysis for
    #: (cgprof.metrics.windows.WindowTotals; cgprof.metrics.chunked.analyze_path's
    #: ``windows``), what its views read in place of the rows it does not keep
    windows: tuple[Any, ...] = ()
    completeness: CompletenessResult | None = None
    untraced: UntracedTimes | None = None

    def light(self, gap_limit: int | None = None) -> AnalysisResult:
        """The same result without the loaded trace, the call-to-step map and the gaps over
        every step (``step_gaps``): what the text and JSON reports print stays, the gap list
        cut to the ``gap_limit`` longest gaps (None: every gap; the JSON document's
        ``gaps_total`` still counts them all). What a caller keeps of an analysis it only
        reports on (10M kernels: ~1.5 GB less)."""
        if self.trace is None:
            return self
        steps = dataclasses.replace(self.steps,
                                    call_steps=self.steps.call_steps.iloc[0:0].copy())
        gaps = self.gaps.longest(gap_limit)
        # (ignore: a light result has no trace; the field is typed for a full analysis)
        return dataclasses.replace(self, steps=steps, gaps=gaps,
                                   trace=None,  # type: ignore[arg-type]
                                   step_gaps=gaps.gaps.iloc[0:0].copy())


def _window_calls(calls: pd.DataFrame, steps: StepResult,
                  call_pos: np.ndarray) -> tuple[np.ndarray | None, pd.DataFrame]:
    """The API calls of the window steps: a bool per call (what the launch table counts;
    None: every call), and the graph-launch calls with the columns the replay join reads, a
    narrow copy (a filtered copy of every column of a 10M-call frame is a GB). ``call_pos``:
    each call's window step (:func:`cgprof.metrics.coverage.window_positions`; -1: none)."""
    if steps.source == "whole-trace":
        return None, calls
    hit = call_pos >= 0
    cols = ["pid", "tid", "corr_id", "start_ns", "dur_ns", "name", "family", "in_capture"]
    graph = hit & family_mask(calls, GRAPH_LAUNCH, live=False)
    return hit, _take_rows(calls, np.flatnonzero(graph), cols)


def _processes(pid: pd.Series) -> list[int]:
    """The distinct pids, ascending."""
    return sorted(int(p) for p in distinct_pids(pid))


def _take_rows(df: pd.DataFrame, rows: np.ndarray, cols: list[str]) -> pd.DataFrame:
    """``df[cols].iloc[rows].reset_index(drop=True)`` with one gather per column: selecting
    the columns and then the rows of a frame copies every column twice."""
    return pd.DataFrame({c: column(df, c, rows) if c not in df.columns or isinstance(
        df[c].dtype, np.dtype) else df[c].array.take(rows) for c in cols}, copy=False)


def _summaries(trace: Trace) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """The whole-trace summaries, as nsys stats (AnalysisResult's api_summary,
    kernel_summary and nvtx_summary), and the NVTX ranges."""
    out = {"api_summary": api_summary(trace), "kernel_summary": kernel_summary(trace)}
    ranges = nvtx_ranges(trace)
    out["nvtx_summary"] = nvtx_summary(trace, ranges)
    return out, ranges


#: Up to this many kernels + API calls the summaries run in a thread beside the other
#: metrics; above it, first and alone: their sort buffers beside the analysis's tables
#: would raise the peak RSS of a 10M-row analysis.
ASIDE_MAX_ROWS = 4_000_000


def _measure_span_gaps(ops: pd.DataFrame, calls: pd.DataFrame, span: tuple[int, int] | None,
                       tables: bool) -> GapResult | MeasuredGaps:
    """The span's gaps; ``tables``: with the tables of a GapResult (the span is the report's
    window), else the gaps only (the window's tables are derived from them)."""
    measured = measure_gaps(ops, calls, window=span, streams=tables)
    return measured.result() if tables else measured


def _aside_ok(trace: Trace) -> bool:
    import os

    return ((os.cpu_count() or 1) > 1
            and len(trace.stored("kernels")) + len(trace.stored("runtime")) <= ASIDE_MAX_ROWS)


#: Kernel columns the GPU ops table holds too, in the kernels' row order once the ops of other
#: kinds are left out (gpu_ops merges sorted sources stably).
_SHARED_WITH_OPS = ("start_ns", "end_ns", "stream_id", "corr_id")


def _plain_int64(col: pd.Series) -> bool:
    a = col.to_numpy() if col.dtype == np.int64 else None
    return a is not None and a.ndim == 1 and a.strides != (0,)


def _fingerprint(a: np.ndarray) -> tuple[int, bytes]:
    """A cheap check that a rebuilt column is the one lent: its wrapped sum and a sample."""
    return int(a.view(np.uint64).sum(dtype=np.uint64)), a[::4099].tobytes()


@dataclass
class _Lent:
    columns: list[str]  # the kernel frame's columns, in order
    taken: list[str]  # those taken out: rebuilt from the ops (dur_ns: end_ns - start_ns)
    sums: dict[str, tuple[int, bytes]]


def _lend_kernel_columns(trace: Trace, ops: pd.DataFrame) -> _Lent | None:
    """Take out of ``trace.kernels`` the columns the GPU ops table also holds, and dur_ns,
    while the gaps are measured: at the gap fill's end the gap table, the ops and the trace
    are all in memory, and these are the kernels' copies of the ops' biggest columns (10M
    kernels: 0.4 GB). :func:`_return_kernel_columns` puts back the same values. The frame
    is replaced, not changed: a holder of the old one (the cache writer) keeps it whole.
    None when the ops are not plain int64 columns with their ``kind``."""
    k = trace.stored("kernels")
    kind = ops["kind"] if "kind" in ops else None
    if len(k) < 2 or kind is None or not isinstance(kind.dtype, pd.CategoricalDtype) or (
            "kernel" not in kind.cat.categories):
        return None
    taken = [c for c in _SHARED_WITH_OPS if c in k and c in ops and _plain_int64(k[c])
             and _plain_int64(ops[c])]
    if {"start_ns", "end_ns"} <= set(taken) and "dur_ns" in k and _plain_int64(k["dur_ns"]):
        taken.append("dur_ns")
    if not taken:
        return None
    lent = _Lent(list(k.columns), taken, {c: _fingerprint(k[c].to_numpy()) for c in taken})
    trace.restore("kernels", k.drop(columns=taken))
    del k
    release_arrow_pool()  # the columns were views of Arrow buffers (cached and first loads)
    return lent


def _return_kernel_columns(trace: Trace, ops: pd.DataFrame, lent: _Lent) -> None:
    """Put back what :func:`_lend_kernel_columns` took, from the ops' kernel rows; each ops
    column is given up as its kernel copy is made, so no column exists twice for long."""
    kind = ops["kind"]
    rows = kind.cat.codes.to_numpy() == list(kind.cat.categories).index("kernel")
    every = bool(rows.all())
    back: dict[str, np.ndarray] = {}
    for c in lent.taken:
        if c == "dur_ns":
            back[c] = back["end_ns"] - back["start_ns"]  # as the load makes it
            continue
        col = ops.pop(c).to_numpy()
        back[c] = col if every else col[rows]
        del col
    if any(_fingerprint(back[c]) != lent.sums[c] for c in lent.taken):
        raise AssertionError("cgprof: kernel columns rebuilt from the GPU ops differ")
    k = trace.stored("kernels")
    trace.restore("kernels", pd.DataFrame({c: back[c] if c in back else k[c]
                                           for c in lent.columns}, copy=False))


def analyze(
    trace_or_path: Trace | str | Path,
    step: str | None = None,
    skip: int = 0,
    min_gap_us: float = 0.0,
    progress: Callable[[str], None] | None = None,
    rank: int | None = None,
) -> AnalysisResult:
    """Load (if given a path) and analyse one trace.

    step: ``NAME[@DOMAIN]`` of the NVTX range that marks a step (default: ``step@cgprof``,
    else a repeating range or cycle scored on evidence, else the whole trace; rules in
    cgprof.metrics.stepchoice). skip: leading steps to
    drop (warm-up). min_gap_us: gaps at or below this are not listed (still counted as idle).
    rank: the trace's data-parallel rank, when it is one rank of a run: which process of the
    untraced run recorded beside it (cgprof.untraced) times its steps.
    """
    say_ = checkpoint(progress)
    trace = trace_or_path if isinstance(trace_or_path, Trace) else load(trace_or_path, say_)
    # No malloc_trim between the stages (cgprof.io.memory.release_memory): each stage reuses the
    # heap the last one freed. Trimming there cost 10M kernels ~5 s of page faults (cached:
    # 20.1 -> 15.5 s wall) for 13 MB less peak RSS; the load still trims after each big table,
    # and the analysis once at its end (below).
    say = say_

    # The whole-trace summaries first, while only the trace is in memory: their per-name
    # temporaries (10M kernels: ~0.24 GB each) never sit beside the analysis's tables. Up to
    # ASIDE_MAX_ROWS rows, in a thread beside the other metrics instead (the kernels then
    # lend no columns to the gaps: the thread reads them; the gaps get a thread too).
    say("summarising")
    aside = InThread(_summaries, trace, name="cgprof-summaries") if _aside_ok(trace) else None
    if aside is None:
        summaries, ranges = _summaries(trace)
    say("classifying API calls")
    # The calls without the columns the trace derives (tid, dur_ns: cgprof.io.trace.DERIVED),
    # made where read, at the rows read: 10M calls hold 160 MB less.
    calls = api_calls(trace, derived=False)
    # (no stage of its own on the progress bar: ~10 ms on the shipped traces)
    complete = completeness(calls, trace.stored("kernels"), trace.memcpy, trace.memset,
                            trace.graph_trace, graph_check_mode(
                                trace.meta.graph_trace_mode, trace.meta.graph_trace_mode_source,
                                len(trace.graph_trace)), trace.meta.diagnostics)
    ops = gpu_ops(trace)
    say("cutting steps")
    steps = compute_steps(trace, calls, ops, step=step, skip=skip)
    span = steps.span()
    window = steps.window()
    # Beside the summaries' thread, the gaps get one too (they read the ops and calls only),
    # while this one measures the replays and the coverage (H200 host, cached 1M kernels + 1M
    # API calls, 8 interleaved runs each: mean 1.18 -> 1.10 s).
    # The span's per-device, per-kind and stream tables only where the span is the window:
    # else only its gaps are read (ResNet-18 eager, 300 steps after 20: ~12 ms less).
    gap_job = (InThread(_measure_span_gaps, ops, calls, span, window == span,
                        name="cgprof-gaps") if aside is not None else None)
    # The replays and the coverage before the gaps: the GPU ops table (10M kernels: 0.35 GB)
    # is freed once the gaps are measured, and the replays' and coverage's temporaries never
    # sit beside the gap table (10M cached: the replays' stage peak 3.56 -> 2.46 GB, the
    # coverage's 2.95 -> 2.69 GB). The window's steps are known before classify_steps; the
    # coverage reads neither of the two columns it fills (dropped from its copy, so that a
    # read would fail), the verdict reads them (win_steps below).
    say("measuring graph replays")
    early_steps = steps.window_steps().drop(columns=["launch_wait_ns", "launch_bound"])
    call_pos = window_positions(calls, steps.call_steps, early_steps,  # every call's
                                steps.step_of_calls(calls))
    in_window, replay_calls = _window_calls(calls, steps, call_pos)
    launch_table = launch_summary(calls, in_window)
    del in_window
    launches = StepLaunches.of(calls, call_pos)  # read by the coverage and the verdict
    del call_pos
    node_level = trace.meta.graph_trace_mode != "graph" and trace.graph_trace.empty
    replays = graph_replays(ops, replay_calls, node_level=node_level)
    del replay_calls
    coverage = graph_coverage(early_steps, trace.stored("kernels"), calls, steps.call_steps,
                              launches)
    del early_steps
    say("measuring GPU gaps")
    min_gap_ns = int(round(min_gap_us * 1000))
    # The window's gaps are measured on the ops again where it is not the span; else the
    # ops are freed before the per-device and per-kind tables and classify_steps make
    # their temporaries (10M cached: 2.74 -> 2.63 x 10^9 B peak), and the kernels lend
    # the ops their copies of the ops' columns meanwhile (2.63 -> 2.56 x 10^9 B; the gap
    # stage itself 2.71 -> 2.37 GB).
    if gap_job is not None:
        span_gaps = gap_job.result()
        del gap_job
        w_ops = ops if window != span else None
        del ops
    else:
        lent = _lend_kernel_columns(trace, ops) if window == span and aside is None else None
        try:
            measured = measure_gaps(ops, calls, window=span, streams=window == span)
        finally:
            if lent is not None:
                # (lent only where window == span: the ops are given up below) the ops keep
                # only what the return reads, so that their stream ids and flags are freed
                # before its gathers (10M cached: that stage's peak 1.90 -> 1.80 GB)
                ops = ops[["kind", *(c for c in lent.taken if c in ops.columns)]]
                _return_kernel_columns(trace, ops, lent)
        w_ops = ops if window != span else None
        del ops
        span_gaps = measured.result() if window == span else measured
        del measured
    # the reported figures cover the analysis window only
    gaps = window_gaps(span_gaps, w_ops, calls, span, window) if w_ops is not None else span_gaps
    del w_ops
    classify_steps(steps, span_gaps.gaps)  # every step's gaps, however short
    # every listed gap from the first step to the last (the window's own when they agree)
    step_gaps = span_gaps.listed(min_gap_ns) if isinstance(span_gaps, MeasuredGaps) else None
    del span_gaps
    gaps = gaps.above(min_gap_ns)
    win_steps = steps.window_steps()
    untraced = untraced_times(trace.path, steps, rank=rank)
    v = verdict(win_steps, replays, coverage, calls, steps.call_steps,
                graph_trace_mode=trace.meta.graph_trace_mode, launches=launches,
                step_source=steps.source, gpu_unavailable=complete.reason, untraced=untraced)
    del launches
    steps.lookup = None  # the analysis's own (its table is not kept in the result)
    if aside is not None:
        summaries, ranges = aside.result()
    # One trim, after the last big temporaries: the reports then start from what is alive
    # (10M cached, three runs each: peak RSS 2.42-2.46 -> 2.38-2.42 x 10^6 KB, the same
    # time; a trace under cgprof.io.memory.RELEASE_MIN_ROWS rows keeps its heap).
    release_memory(len(trace.stored("kernels")) + len(trace.stored("runtime")))
    info = _info(trace, calls, ranges, steps, window, win_steps)
    info["incomplete"] = list(complete.missing)
    return AnalysisResult(
        info=info,
        launches=launch_table,
        **summaries,
        gaps=gaps,
        replays=replays,
        steps=steps,
        verdict=v,
        trace=trace,
        coverage=coverage,
        step_gaps=step_gaps if step_gaps is not None else gaps.gaps,
        completeness=complete,
        untraced=untraced,
    )


def _info(trace: Trace, calls: pd.DataFrame, ranges: pd.DataFrame, steps: StepResult,
          window: tuple[int, int] | None, win_steps: pd.DataFrame) -> dict[str, Any]:
    """:attr:`AnalysisResult.info`."""
    return trace_info(trace.path, trace.meta, trace.gpus, _processes(calls["pid"]),
                      len(trace.stored("kernels")), len(trace.graph_trace), len(calls),
                      len(ranges), steps, window, win_steps)


def trace_info(path: Any, meta: Any, gpus: pd.DataFrame, processes: list[int], kernels: int,
               graph_trace_rows: int, api_calls: int, nvtx_ranges: int, steps: StepResult,
               window: tuple[int, int] | None, win_steps: pd.DataFrame) -> dict[str, Any]:
    """:attr:`AnalysisResult.info` from the trace's facts and counts (``meta``: its
    TraceMeta) and the steps' window: what an analysis of the whole trace and one of its
    chunks (cgprof.metrics.chunked) both report."""
    return {
        "path": str(path),
        "nsys_version": meta.nsys_version,
        "schema_version": meta.schema_version,
        "graph_trace_mode": meta.graph_trace_mode,
        "graph_trace_mode_source": meta.graph_trace_mode_source,
        "gpus": [{"device_id": int(d), "name": str(n)} for d, n in
                 zip(gpus["device_id"], gpus["name"], strict=True)],
        "processes": processes,
        "kernels": int(kernels),
        "graph_trace_rows": int(graph_trace_rows),
        "api_calls": int(api_calls),
        "nvtx_ranges": int(nvtx_ranges),
        "window_start_ns": window[0] if window else None,
        "window_end_ns": window[1] if window else None,
        "window_steps": [int(x) for x in win_steps["step"]] if window else [],
        "window_reason": steps.window_reason(),
        "summaries_scope": "whole trace, as nsys stats",
        "step_range": steps.name,
        "step_source": steps.source,
        "steps": int(len(steps.steps)),
        "steps_skipped": steps.skipped,
    }
