"""Analysing a one-process trace in chunks of whole steps (docs/chunked.md), so that a trace
whose whole analysis would exceed the memory cap is analysed within it: :func:`analyze_path`.

The chunk contract every partial and merge function is written against:

- ``calls`` is :func:`cgprof.metrics.launches.api_calls` of the whole trace (sorted by
  ``start_ns``), ``ops`` is :func:`cgprof.metrics.gpu.gpu_ops`.
- A chunk is a run of consecutive steps; its API calls are the rows ``[r0, r1)`` of
  ``calls`` that start from its first step's start up to the next chunk's first step's start
  (the first chunk from the trace's start, the last to its end). With the steps one after
  another in time (no overlap) every call of a step is in its step's chunk.
- Its GPU work (ops, kernels, copies, memsets, graph rows) is what its calls launched: the
  rows whose (pid, corr_id) is a call of the chunk. On the traces this path takes
  (:func:`plan`), each chunk's calls' correlation ids lie below the next chunk's, so that is
  the correlation-id range ``[corr_lo, corr_hi]`` of its calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from cgprof.io import cache as C
from cgprof.io.estimate import WHOLE_BYTES_BASE, WHOLE_BYTES_PER_ROW
from cgprof.io.filters import RowRange
from cgprof.io.loader import has_cache_entry, load_rows, spill_tables
from cgprof.io.memory import release_memory
from cgprof.io.trace import Trace, column, constant_value
from cgprof.io.validate import distinct_pids
from cgprof.metrics import AnalysisResult, trace_info
from cgprof.metrics import launches as L
from cgprof.metrics.completeness import (
    completeness_partial,
    graph_check_mode,
    merge_completeness,
    open_capture,
    recording_span,
)
from cgprof.metrics.coverage import (
    CoverageResult,
    StepLaunches,
    call_steps_of,
    coverage_partial,
    family_mask,
    merge_coverage_partials,
    step_positions,
    window_positions,
)
from cgprof.metrics.gap_result import GapResult
from cgprof.metrics.gap_sinks import GapBins, GapSink, GapTimeline
from cgprof.metrics.gap_slices import GapAsk, measure_gaps_sliced_each
from cgprof.metrics.gpu import gpu_ops
from cgprof.metrics.intervals import table_get
from cgprof.metrics.launches import api_calls, launch_cells, launch_table
from cgprof.metrics.launchsteps import launch_labels
from cgprof.metrics.replays import ReplayResult, graph_replays, merge_replays
from cgprof.metrics.step_launch_wait import fill_launch_wait
from cgprof.metrics.step_result import StepResult
from cgprof.metrics.steps import measure_chunk, step_instances
from cgprof.metrics.summaries import api_summary, kernel_summary, nvtx_ranges, nvtx_summary
from cgprof.metrics.verdict import (
    VerdictPartial,
    merge_verdict_partials,
    verdict,
    verdict_partial,
)
from cgprof.metrics.windows import (
    TIMELINE_MAX_CELLS,
    EventCounter,
    StepFamilies,
    TimelineCut,
    WindowTotals,
    extent_ends,
    family_codes,
    merge_name_totals,
    name_totals,
)
from cgprof.scratch import Detail, checkpoint
from cgprof.untraced import measure as untraced_times

__all__ = ["Chunk", "plan", "cut_calls", "rows_of_corr"]


@dataclass(frozen=True)
class Chunk:
    """One chunk: steps ``[s0, s1)`` (rows of the step table), API-call rows ``[r0, r1)``
    of ``calls``, and the correlation ids of those calls, ``[corr_lo, corr_hi]`` (an empty
    range, corr_lo > corr_hi, when the chunk has no call)."""

    s0: int
    s1: int
    r0: int
    r1: int
    corr_lo: int
    corr_hi: int


def cut_calls(call_start: np.ndarray, step_start: np.ndarray, chunk_steps: int) -> list[
        tuple[int, int, int, int]]:
    """The (s0, s1, r0, r1) of each chunk of ``chunk_steps`` steps: ``call_start`` is the
    calls' start_ns (ascending), ``step_start`` the steps' (ascending)."""
    n = len(step_start)
    if chunk_steps < 1:
        raise ValueError("chunk_steps must be 1 or more")
    firsts = list(range(0, n, chunk_steps)) or [0]
    cuts = [0] + [int(np.searchsorted(call_start, step_start[s], "left")) for s in firsts[1:]]
    cuts.append(len(call_start))
    bounds = firsts + [n]
    return [(bounds[i], bounds[i + 1], cuts[i], cuts[i + 1]) for i in range(len(firsts))]


def plan(calls: pd.DataFrame, steps: pd.DataFrame, chunk_steps: int) -> list[Chunk] | None:
    """The chunks of ``chunk_steps`` steps of the step table ``steps`` (its start_ns, in
    step order), or None when this trace is not one the chunked path takes: calls of more
    than one process, steps that overlap in time or are not in start order, or chunks whose
    calls' correlation ids are not apart (each chunk's ids all below the next chunk's: the
    ids rise with the calls, but for calls of two threads that start together)."""
    if not len(steps):
        return None
    pid = calls["pid"].to_numpy()
    if len(pid) and (pid.min() != pid.max()):
        return None
    s_start = steps["start_ns"].to_numpy(np.int64)
    s_end = steps["end_ns"].to_numpy(np.int64)
    if (np.diff(s_start) < 0).any() or (s_start[1:] < s_end[:-1]).any():
        return None
    corr = calls["corr_id"].to_numpy()
    if corr.dtype != np.int64:
        return None
    start = calls["start_ns"].to_numpy()
    out = []
    for s0, s1, r0, r1 in cut_calls(start, s_start, chunk_steps):
        lo, hi = (int(corr[r0:r1].min()), int(corr[r0:r1].max())) if r1 > r0 else (0, -1)
        out.append(Chunk(s0, s1, r0, r1, lo, hi))
    ranges = [(c.corr_lo, c.corr_hi) for c in out if c.r1 > c.r0]
    if any(a[1] >= b[0] for a, b in zip(ranges[:-1], ranges[1:], strict=True)):
        return None
    return out


def rows_of_corr(corr: np.ndarray, chunk: Chunk) -> np.ndarray:
    """The rows (ascending) of a GPU table whose correlation ids ``corr`` fall in the
    chunk's range: the work its calls launched."""
    return np.flatnonzero((corr >= chunk.corr_lo) & (corr <= chunk.corr_hi))


#: Gaps listed when the caller does not say: the JSON document's list
#: (cgprof.report.json_report.GAP_LIST_LIMIT, the report side's, not imported here).
GAP_LIMIT = 1000

#: Steps per chunk when the caller does not say.
CHUNK_STEPS = 1000


def chunk_rows(cap_bytes: int) -> int:
    """Kernels + API calls per chunk under a memory cap of ``cap_bytes``: an eighth of what
    a whole analysis could hold within it (cgprof.io.estimate.whole_analysis_bytes): a chunk's
    read and measurement hold ~2.5 times a whole analysis's bytes per row, beside what the
    chunks keep (the calls' narrow columns for the gaps, each call's step)."""
    return max(_MIN_CHUNK_ROWS, (cap_bytes - WHOLE_BYTES_BASE) // (8 * WHOLE_BYTES_PER_ROW))


#: The fewest kernels + API calls per chunk (many tiny chunks cost reads, not memory).
_MIN_CHUNK_ROWS = 50_000


def analyze_path(path: str | Path, step: str | None = None, skip: int = 0,
                 min_gap_us: float = 0.0, progress: Callable[[str], None] | None = None,
                 chunk_steps: int | None = None, chunk_rows: int | None = None,
                 planned: Callable[[int], None] | None = None,
                 gap_limit: int = GAP_LIMIT,
                 windows: Windows | None = None,
                 timelines: int | None = None) -> AnalysisResult | None:
    """:func:`cgprof.metrics.analyze` of the one-process trace at ``path``, its rows read a
    chunk of steps at a time (:func:`cgprof.io.loader.load_rows`): ``chunk_steps`` steps, else
    as many as hold about ``chunk_rows`` kernels + API calls, else :data:`CHUNK_STEPS`; the
    result as a report reads it (:meth:`AnalysisResult.light` of the whole analysis: no
    trace, no call-to-step map, the gap list cut to its longest), or None when the trace is
    not one this path takes (the caller analyses it whole).

    Passes: (1) the kernels' summary, alone; (2) the API calls and NVTX ranges, whole (the
    step choice, the chunk plan, the API and NVTX summaries; the calls' narrow columns are
    kept for the gaps); (3) each chunk: its calls and the GPU work they launched, measured
    and reduced to partials (steps, launches, replays, coverage, verdict); (4) the GPU
    timeline a slice of time at a time, for the gaps; then the partials merged.

    ``windows``: given the step table (every step), the step numbers of each window of
    steps a view will show (cgprof.diff.view); the result's ``windows`` then holds their
    totals (:class:`cgprof.metrics.windows.WindowTotals`), gathered in the chunk pass, one
    more pass over the chunks' kernels and the gap pass. ``timelines`` (with ``windows``):
    each window's totals also hold what a timeline of it drawing at most that many events
    draws (:class:`cgprof.metrics.windows.TimelineCut`: one more pass over the chunks' API
    calls and GPU rows to count them, and a read of the span it can draw)."""
    path = Path(path)
    with _spilled(path, progress) as (spill, done):
        result = _analyze_path(path, spill, step, skip, min_gap_us, progress, chunk_steps,
                               chunk_rows, planned, gap_limit, windows, timelines)
        if result is not None:
            done()
        return result


def analyze_capped(path: str | Path, step: str | None = None, skip: int = 0,
                   min_gap_us: float = 0.0, progress: Callable[[str], None] | None = None,
                   planned: Callable[[int], None] | None = None,
                   gap_limit: int = GAP_LIMIT,
                   windows: Windows | None = None,
                   timelines: int | None = None) -> AnalysisResult | None:
    """:func:`analyze_path` with chunks of the size the memory cap gives
    (:func:`chunk_rows` of the settings' memory cap; their ``chunk_steps`` sets a number of
    steps per chunk): what ``cgprof analyze`` and ``cgprof check`` run for a one-process
    trace whose whole analysis would exceed the cap. None when the trace is not one that
    path takes (a report, a trace without step ranges, ...: analysed whole then)."""
    from cgprof.settings import current

    path = Path(path)
    if path.suffix.lower() == ".nsys-rep":
        return None
    settings = current()
    rows = chunk_rows(settings.memory_limit_bytes)
    return analyze_path(path, step=step, skip=skip, min_gap_us=min_gap_us, progress=progress,
                        chunk_steps=settings.chunk_steps, chunk_rows=rows,
                        planned=planned, gap_limit=gap_limit, windows=windows,
                        timelines=timelines)


@contextlib.contextmanager
def _spilled(path: Path, progress: Callable[[str], None] | None) -> Iterator[
        tuple[Any, Callable[[], None]]]:
    """(spill, done): the activity tables of the SQLite export at ``path`` written once to
    Parquet for the chunks to read (cgprof.io.loader.spill_tables), and what to call once the
    analysis is done. With the cache on, the spill is a new cache entry of nsys columns,
    committed by ``done`` (a later run reads it, not SQLite; a run that fails or is
    analysed whole commits nothing); else a temporary folder of the system's, removed at
    the end. The spill is None when the trace has a cache entry (read instead), is not an
    SQLite file, or cannot be spilled (each chunk then scans it)."""

    def nothing() -> None:
        return None

    if not path.is_file() or path.suffix.lower() == ".nsys-rep" or has_cache_entry(path):
        yield None, nothing
        return
    pending = C.begin(path) if C.enabled() else None
    if pending is not None:
        try:
            if progress is not None:
                progress("writing the trace's columnar copy once, for its chunks")
            spill = spill_tables(path, pending.tmp, spool=pending.write)
            if spill is not None:
                done: list[bool] = []
                yield spill, lambda: done.append(True)
                if done:
                    pending.commit_columns(spill.source_tables)
                return
        finally:
            pending.abort()  # (nothing, once committed: the folder is the entry's now)
    with C.temp_folder("chunks-") as folder:
        if progress is not None:
            progress("writing the trace's tables once for its chunks")
        yield spill_tables(path, folder / "tables"), nothing


def _analyze_path(path: Path, spill: Any, step: str | None, skip: int, min_gap_us: float,
                  progress: Callable[[str], None] | None, chunk_steps: int | None,
                  chunk_rows: int | None, planned: Callable[[int], None] | None,
                  gap_limit: int, windows: Windows | None = None,
                  timelines: int | None = None) -> AnalysisResult | None:
    """:func:`analyze_path` with the tables read from ``spill`` (None: the trace's cache
    entry, or the file itself)."""
    from cgprof import schema as S
    say = checkpoint(progress)

    def load(rows: RowRange) -> Trace:
        return load_rows(path, rows, spill=spill)

    say("summarising the kernels")
    # the columns the summary, the coverage's tie rule and the graph mode read (a cache
    # entry's frame is read whole)
    heads = load(RowRange(tables=[S.KERNEL, S.GRAPH_TRACE], columns={S.KERNEL: _SUMMARY}))
    kernel_table = kernel_summary(heads)
    meta, gpus = heads.meta, heads.gpus
    n_kernels, n_graph_rows = len(heads.stored("kernels")), len(heads.graph_trace)
    # each chunk's kernels are the rows of these correlation ids (the coverage's tie rule
    # reads their rows in the whole table)
    k_corr = heads.stored("kernels")["corr_id"].to_numpy().copy()
    del heads
    say("reading CUDA API calls and NVTX ranges")
    light = load(RowRange(tables=[S.RUNTIME, S.NVTX]))
    light.meta = meta
    api_table = api_summary(light)  # first: its temporaries beside the calls' frame alone
    release_memory(len(light.stored("runtime")))
    calls = api_calls(light, derived=False)
    inst = step_instances(light, calls, None, step, skip, labels=lambda: launch_labels(
        load(RowRange(tables=[S.KERNEL, S.GRAPH_TRACE],
                        columns={S.KERNEL: [*_SUMMARY, "globalPid"]})))
    ) if len(calls) else None
    if inst is None or inst.source == "whole-trace" or inst.table["global_tid"].nunique() > 1:
        return None
    if chunk_steps is None:
        n = len(inst.table)
        chunk_steps = CHUNK_STEPS if chunk_rows is None else max(
            1, chunk_rows * n // max(n_kernels + len(calls), 1))
    chunks = plan(calls, inst.table, chunk_steps)
    if chunks is None or not _exact_times(calls):
        return None
    if planned is not None:
        planned(len(chunks))
    ranges = inst.ranges
    nvtx_table = nvtx_summary(light, ranges)
    in_capture = calls["in_capture"].to_numpy(dtype=bool)
    captured = open_capture(calls)  # over every call: a capture may open in an earlier chunk
    # what the gap sweep reads of the calls: their narrow columns, kept
    narrow = calls[["pid", "corr_id", "start_ns", "end_ns", "name", "family"]]
    processes = sorted(int(p) for p in distinct_pids(calls["pid"]))
    n_calls = len(calls)
    corr = calls["corr_id"].to_numpy()
    corr0 = int(corr.min()) if len(corr) else 0
    if len(corr) and int(corr.max()) - corr0 >= 4 * len(corr) + (1 << 20):
        return None  # ids too sparse for a table by id (never seen from CUPTI)
    # each call's step by correlation id (-1: none), for the launch waits of the gaps
    call_step = np.full(int(corr.max()) - corr0 + 1 if len(corr) else 0, -1, dtype=np.int32)
    capture = corr[in_capture].copy() if timelines is not None else None  # (few)
    del calls, corr, light
    release_memory(n_calls)
    node_level = meta.graph_trace_mode != "graph" and n_graph_rows == 0
    graph_check = graph_check_mode(meta.graph_trace_mode, meta.graph_trace_mode_source,
                                   n_graph_rows)
    recording = recording_span(meta.diagnostics)
    complete_parts = []
    families = StepFamilies(len(inst.table)) if windows is not None else None

    say("measuring the steps a chunk at a time")
    cuts = [int(inst.table["start_ns"].iloc[c.s0]) for c in chunks[1:]]
    lows, highs = [_MIN] + cuts, cuts + [_MAX]
    parts = _Parts()
    replayed = False
    for i, (c, t0, t1) in enumerate(zip(chunks, lows, highs, strict=True)):
        say(Detail(f"measuring the steps: chunk {i + 1} of {len(chunks)}"))
        sub = load(RowRange(start=(t0, t1), corr=(c.corr_lo, c.corr_hi)))
        calls_c = api_calls(sub, derived=False)
        if len(calls_c) != c.r1 - c.r0:
            raise AssertionError("cgprof: a chunk's API calls are not those planned")
        calls_c["in_capture"] = in_capture[c.r0:c.r1]
        ops_c = gpu_ops(sub)
        if not _exact_times(ops_c):
            return None
        st, cs = measure_chunk(inst, c.s0, c.s1, calls_c, ops_c, replayed)
        replayed = replayed or bool((st["graph_launches"].to_numpy() > 0).any())
        if len(cs):
            call_step[cs["corr_id"].to_numpy() - corr0] = cs["step"].to_numpy()
        if families is not None:  # (what a window's view sums of its calls)
            families.add(call_steps_of(calls_c, cs), family_codes(calls_c["family"]),
                         column(calls_c, "dur_ns"), ~in_capture[c.r0:c.r1], c.s0, c.s1)
        kernels_c = sub.stored("kernels")
        k_rows = rows_of_corr(k_corr, c)  # their rows in the whole kernel table
        if len(k_rows) != len(kernels_c):
            raise AssertionError("cgprof: a chunk's kernels are not those planned")
        parts.add(st, cs, calls_c, ops_c, kernels_c, k_rows, node_level)
        complete_parts.append(completeness_partial(
            calls_c, kernels_c, sub.memcpy, sub.memset, sub.graph_trace, graph_check,
            recording, captured[c.r0:c.r1]))
        del sub, calls_c, ops_c, st, cs, kernels_c, k_rows
        release_memory(n_calls)  # the chunk's frames, before the next one is read
    del k_corr, in_capture, captured
    complete = merge_completeness(complete_parts, graph_check, meta.diagnostics)
    del complete_parts
    steps = inst.result(parts.steps(), _no_call_steps(), None)
    if not steps.steps["in_window"].any():
        return None  # every step warm-up or capture: the window is every step (whole path)
    span = steps.span()
    assert span is not None  # steps from NVTX ranges, some in the window
    window = steps.window()
    early = steps.window_steps()
    replays = parts.replays(node_level)
    asked = None
    if windows is not None:
        assert families is not None  # (made with windows)
        say("summing the kernels of the windows' steps a chunk at a time")
        asked = _Asked.of(steps.steps, windows, timelines)
        asked.sum_kernels(chunks, load, (call_step, corr0), say)
        asked.count_events(lows, highs, load, say, n_calls)
        asked.take_replays(replays.replays, (call_step, corr0))
        asked.families = families
    del families

    say("measuring GPU gaps a slice of time at a time")
    min_gap_ns = int(round(min_gap_us * 1000))
    ops = _timeline(path, lows, highs, n_calls, spill, say)
    gaps = _gaps(ops, narrow, span, window, min_gap_ns, steps, (call_step, corr0), gap_limit,
                 asked.sinks if asked is not None else ())
    del ops, narrow, call_step
    if asked is not None and timelines is not None:
        say("reading the span each timeline draws")
        asked.cut(steps.steps, load, capture)
    win_steps = steps.window_steps()
    coverage = parts.coverage(early)
    untraced = untraced_times(path, steps)
    v = verdict(win_steps, replays, coverage, graph_trace_mode=meta.graph_trace_mode,
                partial=parts.verdict(), step_source=steps.source,
                gpu_unavailable=complete.reason, untraced=untraced)
    info = trace_info(path, meta, gpus, processes, n_kernels, n_graph_rows, n_calls,
                      len(ranges), steps, window, win_steps)
    info["incomplete"] = list(complete.missing)
    return AnalysisResult(info=info, launches=parts.launches(), api_summary=api_table,
                          kernel_summary=kernel_table, nvtx_summary=nvtx_table, gaps=gaps,
                          replays=replays, steps=steps, verdict=v,
                          # no trace: a light result's (AnalysisResult.light)
                          trace=None,  # type: ignore[arg-type]
                          coverage=coverage, step_gaps=gaps.gaps.iloc[0:0].copy(),
                          windows=asked.totals() if asked is not None else (),
                          completeness=complete, untraced=untraced)


#: What a caller asks of :func:`analyze_path` for its views: given the step table, the step
#: numbers of each window of steps, in window order.
Windows = Callable[[pd.DataFrame], list[np.ndarray]]


class _Asked:
    """The windows of steps a caller asked for (:data:`Windows`) and their totals, gathered
    as the passes go (:class:`cgprof.metrics.windows.WindowTotals`)."""

    def __init__(self, steps: list[np.ndarray], visible: list[np.ndarray],
                 bins: tuple[GapBins, ...], cap: int | None = None) -> None:
        self.steps, self.visible, self.bins = steps, visible, bins
        self.kernels: list[list[pd.DataFrame]] = [[] for _ in steps]
        self.replays: list[pd.DataFrame] = []
        self.families: StepFamilies | None = None
        # what a timeline of each (non-empty) window draws, at most ``cap`` events
        self.cap = cap
        self.counters: list[EventCounter | None] = []
        self.gap_cuts: list[GapTimeline | None] = []
        for w, b in zip(steps, bins, strict=True):
            on = cap is not None and len(w) > 0
            self.counters.append(EventCounter(int(b.starts[0]), b.ext_cummax) if on else None)
            self.gap_cuts.append(GapTimeline(int(b.starts[0]), b.ext_cummax, cast(int, cap))
                                 if on else None)
        self.max_call_ns = self.max_gpu_ns = 0  # the longest API call and GPU row
        self.cuts: list[TimelineCut | None] = [None for _ in steps]

    @property
    def sinks(self) -> tuple[GapSink, ...]:
        """What the gap measurement fills: the windows' gap bins and timelines' gaps."""
        return (*self.bins, *(g for g in self.gap_cuts if g is not None))

    @classmethod
    def of(cls, table: pd.DataFrame, windows: Windows, cap: int | None = None) -> _Asked:
        """The windows of the step table ``table`` (every step; a step's number is its row),
        with each window's steps whose kernels are in the trace and its gap bins (the
        steps' extents as cgprof.diff.view makes them: host start to the later of the host
        end and the step's last GPU work); ``cap``: their timelines' events (None: no
        timeline)."""
        if not (table["step"].to_numpy() == np.arange(len(table))).all():
            raise AssertionError("cgprof: a step's number is not its row")
        start = table["start_ns"].to_numpy(np.int64)
        extent = extent_ends(table)
        shown = table["kernels"].notna().to_numpy(dtype=bool)
        steps, visible, bins = [], [], []
        for w in windows(table):
            w = np.asarray(w, dtype=np.int64)
            steps.append(w)
            visible.append(w[shown[w]])
            bins.append(GapBins(start[w], np.maximum.accumulate(extent[w])))
        return cls(steps, visible, tuple(bins), cap)

    def count_events(self, lows: list[int], highs: list[int],
                     load: Callable[[RowRange], Any], say: Callable[[str], None],
                     rows: int) -> None:
        """Count the API calls and GPU rows of the timelines' windows
        (:class:`EventCounter`), a slice of start times at a time, and note the longest
        call and GPU row (where the span read of :meth:`cut` has to begin)."""
        from cgprof import schema as S

        on = [c for c in self.counters if c is not None]
        if not on:
            return
        tables = [S.RUNTIME, S.KERNEL, S.MEMCPY, S.MEMSET, S.GRAPH_TRACE]
        for i, (t0, t1) in enumerate(zip(lows, highs, strict=True)):
            say(Detail(f"counting the timelines' events: slice {i + 1} of {len(lows)}"))
            sub = load(RowRange(start=(t0, t1), gpu_start=(t0, t1), tables=tables))
            calls = api_calls(sub, derived=False)
            c_start, c_end = column(calls, "start_ns"), column(calls, "end_ns")
            tid = column(calls, "tid")
            if len(c_start):
                self.max_call_ns = max(self.max_call_ns, int((c_end - c_start).max()))
            for c in on:
                c.add_calls(c_start, c_end, tid)
            del calls, c_start, c_end, tid
            for df in (sub.stored("kernels"), sub.memcpy, sub.memset, sub.graph_trace):
                g_start = df["start_ns"].to_numpy(np.int64)
                g_end = df["end_ns"].to_numpy(np.int64)
                if len(g_start):
                    self.max_gpu_ns = max(self.max_gpu_ns, int((g_end - g_start).max()))
                for c in on:
                    c.add(g_start, g_end)
            del sub, df, g_start, g_end
            release_memory(rows)  # the slice's frames, before the next one is read

    def cut(self, table: pd.DataFrame, load: Callable[[RowRange], Any],
            capture: np.ndarray | None) -> None:
        """Each timeline's :class:`TimelineCut`: its steps and NVTX ranges counted, with
        the gaps the measurement counted, the span it can draw found and read."""
        from cgprof import schema as S

        if not any(c is not None for c in self.counters):
            return
        nvtx = nvtx_ranges(load(RowRange(tables=[S.NVTX])))
        n_start, n_end = nvtx["start_ns"].to_numpy(np.int64), nvtx["end_ns"].to_numpy(np.int64)
        s_start = table["start_ns"].to_numpy(np.int64)
        s_end = table["end_ns"].to_numpy(np.int64)
        for k, (w, counter, gap_cut) in enumerate(zip(self.steps, self.counters,
                                                       self.gap_cuts, strict=True)):
            if counter is None or gap_cut is None:
                continue
            counter.add(s_start[w], s_end[w])
            counter.add(n_start, n_end)
            other = counter.other + gap_cut.counts
            threads, per_thread = counter.per_thread()
            ends, t0 = counter.ends, counter.t0
            fit = max(int(np.searchsorted(other, cast(int, self.cap), "right")), 1)
            t1 = int(ends[fit - 1])
            trace = None
            if len(threads) * len(ends) <= TIMELINE_MAX_CELLS:
                whole = load(RowRange(
                    start=(t0 - self.max_call_ns, t1), gpu_start=(t0 - self.max_gpu_ns, t1),
                    tables=[S.RUNTIME, S.KERNEL, S.MEMCPY, S.MEMSET, S.GRAPH_TRACE, S.NVTX]))
                trace = whole.cut(t0, t1, ("kernels", "runtime", "memcpy", "memset",
                                           "graph_trace"))
                del whole
            gaps = gap_cut.frame()
            g_start = gaps["start_ns"].to_numpy(np.int64)
            g_end = gaps["end_ns"].to_numpy(np.int64)
            self.cuts[k] = TimelineCut(
                t0=t0, ends=ends, other=other, threads=threads, per_thread=per_thread, t1=t1,
                trace=trace, capture=capture if capture is not None else np.zeros(0, np.int64),
                gaps=gaps[(g_end > t0) & (g_start < t1)].reset_index(drop=True))

    def sum_kernels(self, chunks: list[Chunk], load: Callable[[RowRange], Any],
                    lookup: tuple[np.ndarray, int], say: Callable[[str], None]) -> None:
        """Each window's kernels per name, a chunk's kernels at a time (those its calls
        launched: their correlation ids), each kernel's step that of its call."""
        from cgprof import schema as S

        table, lo = lookup
        for i, c in enumerate(chunks):
            if c.r1 == c.r0 or not any(len(v) for v in self.visible):
                continue
            say(Detail(f"summing the windows' kernels: chunk {i + 1} of {len(chunks)}"))
            sub = load(RowRange(corr=(c.corr_lo, c.corr_hi), tables=[S.KERNEL],
                                  columns={S.KERNEL: _SUMMARY}))
            kernels = sub.stored("kernels")
            del sub
            step = _step_by_corr(kernels["corr_id"].to_numpy(), table, lo)
            dur = pd.Series(column(kernels, "dur_ns"), copy=False)
            for v, parts in zip(self.visible, self.kernels, strict=True):
                rows = step_positions(step, v) >= 0
                if rows.any():
                    parts.append(name_totals(kernels["name"], dur, rows))
            del kernels, step, dur

    def take_replays(self, replays: pd.DataFrame, lookup: tuple[np.ndarray, int]) -> None:
        """Each window's replays (rows of ``replays``, the analysis's), with their steps."""
        step = _step_by_corr(replays["corr_id"].to_numpy(), *lookup)
        for w in self.steps:
            rows = step_positions(step, w) >= 0
            self.replays.append(replays[rows].assign(step=step[rows]).reset_index(drop=True))

    def totals(self) -> tuple[WindowTotals, ...]:
        assert self.families is not None  # (set in the chunk pass)
        return tuple(
            WindowTotals(steps=w, kernels=merge_name_totals(k), families=self.families.of(w),
                         replays=r, gap_hist=b.frame(), timeline=c)
            for w, k, r, b, c in zip(self.steps, self.kernels, self.replays, self.bins,
                                     self.cuts, strict=True))



def _step_by_corr(corr: np.ndarray, table: np.ndarray, lo: int) -> np.ndarray:
    """The step (-1: none) of each correlation id ``corr``: ``table[corr - lo]`` where in
    the table, -1 elsewhere (int64, as a whole analysis's call steps)."""
    return table_get(table, corr.astype(np.int64) - lo).astype(np.int64)


_MIN, _MAX = -(2**62), 2**62

#: The kernels' nsys columns pass 1 reads: times (durations, the table's order), names,
#: correlation ids, graph node ids (a trace's graph mode where its metadata does not say).
_SUMMARY = ["start", "end", "correlationId", "demangledName", "shortName", "graphNodeId"]

#: The columns of the GPU ops the gap sweep reads.
_OP_COLUMNS = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id", "kind",
               "in_graph"]


def _no_call_steps() -> pd.DataFrame:
    """An empty call_steps table (what a light result keeps)."""
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("pid", "corr_id", "step")})


class _Parts:
    """Each chunk's measurements, reduced to what merges (cgprof.metrics.chunked's contract):
    its step rows, and the launch table, replays, coverage and verdict partials of its window
    steps, their positions counted from the chunk's first window step."""

    def __init__(self) -> None:
        self.step_parts: list[pd.DataFrame] = []
        self.launch_parts: list[Any] = []
        self.replay_parts: list[Any] = []
        self.coverage_parts: list[Any] = []
        self.verdict_parts: list[VerdictPartial] = []

    def add(self, steps: pd.DataFrame, call_steps: pd.DataFrame, calls: pd.DataFrame,
            ops: pd.DataFrame, kernels: pd.DataFrame, kernel_rows: np.ndarray,
            node_level: bool) -> None:
        from cgprof.metrics import _take_rows

        self.step_parts.append(steps)
        early = steps[steps["in_window"].to_numpy(dtype=bool)]
        pos = window_positions(calls, call_steps, early)  # positions among early's rows
        in_window = pos >= 0
        self.launch_parts.append(launch_cells(calls, in_window))
        graph = np.flatnonzero(in_window & family_mask(calls, L.GRAPH_LAUNCH, live=False))
        if len(graph):  # (a chunk without one adds nothing: merge_replays drops it)
            cols = ["pid", "tid", "corr_id", "start_ns", "dur_ns", "name", "family",
                    "in_capture"]
            self.replay_parts.append(graph_replays(ops, _take_rows(calls, graph, cols),
                                                   node_level))
        launches = StepLaunches.of(calls, pos)
        self.coverage_parts.append(coverage_partial(early, kernels, calls, launches,
                                                    kernel_rows=kernel_rows))
        is_eager = early["mode"].to_numpy() == "eager"
        self.verdict_parts.append(verdict_partial(calls, launches, is_eager))

    def steps(self) -> pd.DataFrame:
        return pd.concat(self.step_parts, ignore_index=True)

    def launches(self) -> pd.DataFrame:
        return launch_table(self.launch_parts)

    def replays(self, node_level: bool) -> ReplayResult:
        return merge_replays(self.replay_parts, node_level)

    def coverage(self, early: pd.DataFrame) -> CoverageResult:
        return merge_coverage_partials(self.coverage_parts, early)

    def verdict(self) -> VerdictPartial:
        """The verdict partials merged: the chunks' window steps follow one another, so
        their per-step arrays are joined end to end."""
        return merge_verdict_partials(self.verdict_parts, joined=True)


def _timeline(path: Path, lows: list[int], highs: list[int], rows: int, spill: Any,
              say: Callable[[str], None]) -> Callable[[], Iterator[pd.DataFrame]]:
    """The GPU ops (:func:`cgprof.metrics.gpu.gpu_ops`) of the trace at ``path``, only the
    columns the gap sweep reads (:func:`_narrow`), a slice of start times at a time: a
    callable that reads the slices (again at each call), saying each (``say``). The ops are
    sorted by start, so the slices joined (:func:`_join`) are the whole table's rows in
    its order."""
    from cgprof import schema as S
    gpu = [S.KERNEL, S.MEMCPY, S.MEMSET, S.GRAPH_TRACE]

    def slices() -> Iterator[pd.DataFrame]:
        for i, (t0, t1) in enumerate(zip(lows, highs, strict=True)):
            say(Detail(f"measuring GPU gaps: slice {i + 1} of {len(lows)}"))
            sub = load_rows(path, RowRange(gpu_start=(t0, t1), tables=gpu), spill=spill)
            ops = gpu_ops(sub)
            del sub
            narrow = _narrow(ops)
            del ops
            release_memory(rows)  # the slice's other columns
            yield narrow
            del narrow
        release_memory(rows)  # the last slice

    return slices


def _narrow(ops: pd.DataFrame) -> pd.DataFrame:
    """The columns of ``ops`` the gap sweep reads (_OP_COLUMNS), copies that hold no view of
    ``ops`` (a device, stream or process id that is one value: a constant view), ``kind``
    categorical (a slice without ops: an empty object column)."""
    out: dict[str, Any] = {}
    for c in _OP_COLUMNS:
        if c == "kind":
            k = ops[c]
            out[c] = k.array if isinstance(k.dtype, pd.CategoricalDtype) else pd.Categorical(
                k.astype(str))
        else:  # a copy (or one value), not a view holding the slice's frame
            a = ops[c].to_numpy()
            v = constant_value(a) if c in ("device_id", "stream_id", "pid") else None
            out[c] = (np.broadcast_to(np.array(v, dtype=np.int64), a.shape) if v is not None
                      else a.copy())
    return pd.DataFrame(out, copy=False)


def _join(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Slices of the GPU ops' narrow columns (:func:`_narrow`'s) in a frame: the kinds over
    the categories of all, a device, stream or process id that is one value in every slice
    a constant view (the gap sweep's fallback: :func:`measure_gaps_sliced_each`)."""
    n = sum(len(f) for f in frames)
    if not n:
        return frames[-1].iloc[0:0].copy()  # the empty table
    kinds = [f["kind"].array for f in frames]
    out: dict[str, Any] = {}
    for c in _OP_COLUMNS:
        if c == "kind":
            cats = sorted({str(v) for k in kinds for v in k.categories})
            codes = np.concatenate([
                np.asarray([cats.index(str(v)) for v in k.categories] + [-1],
                           dtype=np.int8)[k.codes] for k in kinds])
            out[c] = pd.Categorical.from_codes(codes, categories=cats)
            continue
        parts = [f[c].to_numpy() for f in frames]
        same = {constant_value(a) for a in parts if len(a)}
        if c in ("device_id", "stream_id", "pid") and len(same) == 1 and None not in same:
            out[c] = np.broadcast_to(np.array(same.pop(), dtype=np.int64), (n,))
        else:
            out[c] = np.concatenate(parts)
        del parts
    return pd.DataFrame(out, copy=False)


def _exact_times(df: pd.DataFrame) -> bool:
    """Every time below 2**53: a chunk's float64 round trips (steps._as_reindexed) are
    then exact, as the whole run's."""
    lim = 2**53
    return not len(df) or all(int(df[c].max()) < lim and int(df[c].min()) > -lim
                              for c in ("start_ns", "end_ns"))


def _gaps(slices: Callable[[], Iterator[pd.DataFrame]], calls: pd.DataFrame,
          span: tuple[int, int], window: tuple[int, int] | None, min_gap_ns: int,
          steps: StepResult, lookup: tuple[np.ndarray, int], gap_limit: int,
          bins: tuple[GapSink, ...] = ()) -> GapResult:
    """The report window's gaps (the ``gap_limit`` longest listed) and each step's launch
    wait (filled into ``steps``, from the span's gaps however short), measured on the GPU
    timeline's narrow columns a slice at a time (:func:`_timeline`), without a table of
    every gap, both from one read of the slices
    (:func:`cgprof.metrics.gap_slices.measure_gaps_sliced_each`: as
    :func:`cgprof.metrics.gap_reduced.measure_gaps_reduced` of the slices joined). ``bins``
    (:class:`cgprof.metrics.gap_sinks.GapBins`) are filled with the span's gaps longer than
    ``min_gap_ns``: what a view bins of ``step_gaps`` (cgprof.diff.view)."""
    wait = (lookup[0], lookup[1], len(steps.steps))
    if window == span:
        (gaps, per), = measure_gaps_sliced_each(
            slices, calls, [GapAsk(span, min_gap_ns, gap_limit, wait=wait, bins=bins)], _join)
    else:
        (_, per), (gaps, _) = measure_gaps_sliced_each(slices, calls, [
            GapAsk(span, min_gap_ns, wait=wait, tables=False, bins=bins),
            GapAsk(window, min_gap_ns, gap_limit)], _join)
    assert gaps is not None and per is not None  # (asked for both)
    fill_launch_wait(steps, per)
    return gaps
