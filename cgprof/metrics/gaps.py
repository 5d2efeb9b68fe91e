"""GPU busy time and idle gaps, per device and per stream, each gap given a cause.

Busy = the union of every GPU operation on a device (kernels, copies, memsets, and in graph-
granularity traces the whole-replay rows). A gap is a stretch between busy intervals inside the
analysed window; the stretch from the window's start to the first operation and from the last
operation to the window's end are gaps too (kind ``window_edge``).

Gap kinds (first that applies):

``in_replay``       the operations on both sides belong to the same graph replay
``sync_bound``      the host sat in a synchronize call when the GPU went idle and launched the
                    next work only after it returned
``launch_bound``    the host was still inside (or had not begun) the launch call of the next
                    work when the GPU went idle: the GPU waited for the CPU to launch
``input_copy``      the GPU had just finished a copy or memset (e.g. inputs staged before a replay)
``between_replays`` between two graph replays, or between a replay and other work
``other``           anything else (dependencies across streams, events, unknown launches)
``window_edge``     before the first or after the last operation in the window

All durations are integer nanoseconds; summaries carry microsecond figures in ``*_us`` fields.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from cgprof.metrics import launches as L
from cgprof.metrics.intervals import (
    BUSY_COLUMNS,
    _distinct_table,
    arrays_sorted,
    busy_from_gaps,
    counts_by_code,
    gap_sweep,
    group_gaps,
    group_order,
    match_pairs,
    segment_busy,
    sort_stable,
    starts_before,
    sums_by_code,
    sweep_chunks,
    table_get,
    union_busy,
)

GAP_KINDS = ("in_replay", "sync_bound", "launch_bound", "input_copy", "between_replays", "other",
             "window_edge")

#: Histogram bin edges in microseconds (the last bin is open-ended).
HIST_EDGES_US = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000)

#: Log-spaced bin edges of the gap-length histogram of a window of steps (cgprof.diff,
#: :class:`GapBins`), microseconds: 4 bins per decade from 0.01 us (10 ns) to 1 s. Shorter
#: gaps count in the first bin, longer ones in the last.
GAP_BIN_EDGES_US: tuple[float, ...] = tuple(
    float(f"{v:.6g}") for v in 10.0 ** np.arange(-2.0, 6.0001, 0.25))
_GAP_BIN_EDGES = np.array(GAP_BIN_EDGES_US, dtype=np.float64)
_GAP_BIN_EDGES.flags.writeable = False

GAP_COLUMNS = ["device_id", "start_ns", "end_ns", "gap_ns", "kind", "prev_stream_id",
               "next_stream_id", "next_pid", "next_corr_id", "next_api"]


@dataclass
class GapResult:
    """Busy/idle per device, every gap, and their distribution.

    devices    device_id window_start_ns window_end_ns window_ns busy_ns idle_ns idle_pct
               gap_count gap_p50_ns gap_p95_ns gap_max_ns
    gaps       one row per gap: GAP_COLUMNS (kind is one of GAP_KINDS; next_* describe the
               operation after the gap and its launch call, <NA>/"" when unknown; kind and
               next_api are categoricals)
    by_kind    device_id kind count total_ns share_pct (share of that device's idle time)
    histogram  device_id bin_lo_us bin_hi_us (inf for the last) count total_ns
    streams    device_id stream_id ops busy_ns span_ns gap_count gaps_ns max_gap_ns
    """

    devices: pd.DataFrame
    gaps: pd.DataFrame
    by_kind: pd.DataFrame
    histogram: pd.DataFrame
    streams: pd.DataFrame
    min_gap_ns: int
    #: How many gaps the whole list holds when ``gaps`` keeps only its longest
    #: (:meth:`longest`); None: ``gaps`` is the whole list.
    total: int | None = None

    @property
    def listed_total(self) -> int:
        """Gaps in the whole list (``gaps_total`` of the JSON document)."""
        return len(self.gaps) if self.total is None else self.total

    def longest(self, limit: int | None) -> GapResult:
        """The same result listing only the ``limit`` longest gaps (:func:`longest_gaps`;
        None: all); :attr:`listed_total` still counts the whole list. What a report prints
        of a result it keeps past the analysis (a rank's, cgprof.ranks)."""
        if limit is None or len(self.gaps) <= limit:
            if limit is None and self.total is not None:
                raise ValueError("the gap list was cut to its longest gaps")
            return self
        return dataclasses.replace(self, gaps=longest_gaps(self.gaps, limit),
                                   total=self.listed_total)

    def above(self, min_gap_ns: int) -> GapResult:
        """The same result listing only gaps longer than ``min_gap_ns`` (totals unchanged)."""
        if self.total is not None:
            raise ValueError("the gap list was cut to its longest gaps")
        listed = _listed(self.gaps, min_gap_ns)
        if listed is self.gaps:
            return dataclasses.replace(self, min_gap_ns=min_gap_ns)  # nothing to drop
        return dataclasses.replace(self, gaps=listed, histogram=histogram(listed),
                                   min_gap_ns=min_gap_ns)


def longest_gaps(gaps: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """The ``limit`` longest rows of a gap table (ties: the earlier row), in the table's own
    order (device, start); every row when ``limit`` is None or the table is not longer.

    The rows a stable sort by length would put first, without sorting a million gaps: every
    row longer than the ``limit``-th longest length (one ``np.partition``), then the earliest
    rows of exactly that length up to ``limit``."""
    if limit is None or len(gaps) <= limit:
        return gaps
    dur = gaps["gap_ns"].to_numpy(dtype=np.int64, na_value=0)
    if limit <= 0:
        return gaps.iloc[0:0].reset_index(drop=True)
    return gaps.take(_longest_rows(dur, limit)).reset_index(drop=True)


def _longest_rows(dur: np.ndarray, limit: int) -> np.ndarray:
    """The positions (ascending) of the ``limit`` longest of ``dur`` (0 < limit < len(dur)),
    ties to the earlier position: :func:`longest_gaps`' rows."""
    cut = np.partition(dur, len(dur) - limit)[len(dur) - limit]  # the limit-th longest
    longer = np.flatnonzero(dur > cut)
    equal = np.flatnonzero(dur == cut)[:limit - len(longer)]
    return np.sort(np.concatenate([longer, equal]))


def _listed(gaps: pd.DataFrame, min_gap_ns: int) -> pd.DataFrame:
    """The rows of ``gaps`` longer than ``min_gap_ns`` (``gaps`` itself when that is all)."""
    keep = gaps["gap_ns"].to_numpy() > min_gap_ns
    if keep.all() and gaps.index.equals(pd.RangeIndex(len(keep))):
        return gaps
    return gaps[keep].reset_index(drop=True)


def _window_clip(ops: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    if window is None:
        return ops
    w0, w1 = window
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    if not len(start) or (start.dtype == end.dtype == np.int64 and start.min() >= w0
                          and end.max() <= w1 and end.min() > w0 and start.max() < w1):
        return ops  # nothing to drop or clip (four reductions): no copy of a 10M-row table
    inside = (end > w0) & (start < w1)
    if inside.all() and start.min() >= w0 and end.max() <= w1:
        return ops
    rows = np.flatnonzero(inside)
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        ops = ops.iloc[rows[0]:rows[-1] + 1]  # one run of rows (ops sorted by start): a view
    else:
        ops = ops[inside]
    s, e = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    if not len(s) or (s.min() >= w0 and e.max() <= w1):
        return ops
    return ops.assign(start_ns=ops["start_ns"].clip(lower=w0), end_ns=ops["end_ns"].clip(upper=w1))


def gpu_gaps(
    ops: pd.DataFrame,
    calls: pd.DataFrame,
    window: tuple[int, int] | None = None,
    min_gap_ns: int = 0,
) -> GapResult:
    """Busy time, idle gaps and their causes.

    ``ops`` comes from :func:`cgprof.metrics.gpu.gpu_ops`, ``calls`` from
    :func:`cgprof.metrics.launches.api_calls`. ``window`` (start_ns, end_ns) bounds the analysis
    (default: each device's first to last operation). Gaps shorter than or equal to
    ``min_gap_ns`` are not listed (they still count as idle time).
    """
    return measure_gaps(ops, calls, window).result(min_gap_ns)


@dataclass
class MeasuredGaps:
    """What :func:`gpu_gaps` measures on the GPU ops (every gap, the busy table per device,
    the stream table); :meth:`result` makes the rest from these alone, so that a caller done
    with the ops can free them first (10M ops: 0.35 GB, under the per-device quantiles' and
    per-kind tables' temporaries)."""

    gaps: pd.DataFrame
    busy: pd.DataFrame | None  # None: no op
    streams: pd.DataFrame | None  # None: not measured (measure_gaps(streams=False))
    window: tuple[int, int] | None
    #: every gap is in ``gaps`` (what :func:`window_gaps` reads of a GapResult besides them)
    min_gap_ns = 0

    def listed(self, min_gap_ns: int) -> pd.DataFrame:
        """The gaps longer than ``min_gap_ns``: ``self.result().above(min_gap_ns).gaps``."""
        return _listed(self.gaps, min_gap_ns)

    def result(self, min_gap_ns: int = 0) -> GapResult:
        """The :class:`GapResult` (as :func:`gpu_gaps` returns it)."""
        if self.streams is None:
            raise ValueError("measured with streams=False: no stream table for a result")
        devices = _device_table(self.busy, self.gaps, self.window)
        by_kind, hist = _kind_tables(self.gaps, devices)
        result = GapResult(devices=devices, gaps=self.gaps, by_kind=by_kind, histogram=hist,
                           streams=self.streams, min_gap_ns=0)
        return result.above(min_gap_ns) if min_gap_ns > 0 else result


def measure_gaps(ops: pd.DataFrame, calls: pd.DataFrame,
                 window: tuple[int, int] | None = None, streams: bool = True) -> MeasuredGaps:
    """The part of :func:`gpu_gaps` that reads ``ops``. ``streams=False``: no stream table,
    for a caller that reads only the gaps (the steps' span when the report's window is
    another: :func:`window_gaps` measures the window's own)."""
    ops = _live_ops(ops, window)
    # before the gap table exists: its sort is a big transient
    stream_table = _stream_table(ops) if streams else None
    chunked = _Chunked.of(ops, calls)
    table = chunked.gaps(window) if chunked is not None else None
    del chunked
    sweep = _Sweep.of(ops) if table is None else None
    if table is not None:
        gaps, busy = table
        edges = None
    elif sweep is not None:
        gaps = _inner_gaps(sweep.gap_rows(ops), calls, columns=True)
        busy = sweep.busy()
        del sweep
        edges = _edge_gaps(ops, window, busy)
    else:
        g = group_gaps(ops, ["device_id"])
        gaps = _inner_gaps(_frame_gap_rows(g, ops), calls)
        busy = busy_from_gaps(g, ["device_id"]) if len(ops) else None
        del g
        edges = _edge_gaps(ops, window)
    all_gaps = gaps if edges is None else _merge_sorted(gaps, edges)
    if isinstance(gaps, dict):
        gaps = pd.DataFrame(gaps, copy=False)  # what is left of it (the fast path took it all)
    if all_gaps is None:
        assert edges is not None  # else all_gaps is gaps, never None
        if len(gaps) and isinstance(gaps["next_api"].dtype, pd.CategoricalDtype):
            gaps = gaps.assign(next_api=_str_array(gaps["next_api"]))  # concat with edges' str
        all_gaps = pd.concat([d for d in (gaps, edges) if len(d)], ignore_index=True) if (
            len(gaps) or len(edges)) else _empty_gaps()
        all_gaps = all_gaps.sort_values(["device_id", "start_ns"],
                                        kind="stable").reset_index(drop=True)
        all_gaps["kind"] = pd.Categorical(all_gaps["kind"], categories=list(GAP_KINDS))

    del gaps
    if not len(ops):
        busy = None
    elif busy is None:
        busy = union_busy(ops, ["device_id"])
    return MeasuredGaps(gaps=all_gaps, busy=busy, streams=stream_table, window=window)


def measure_gaps_reduced(ops: pd.DataFrame, calls: pd.DataFrame,
                         window: tuple[int, int] | None, min_gap_ns: int = 0,
                         limit: int | None = None,
                         wait: tuple[np.ndarray, int, int] | None = None, tables: bool = True,
                         bins: tuple[GapSink, ...] = (),
                         ) -> tuple[GapResult | None, np.ndarray | None]:
    """``gpu_gaps(ops, calls, window).above(min_gap_ns).longest(limit)`` (what a report
    reads: :meth:`cgprof.metrics.AnalysisResult.light`), and with ``wait`` = (table, lo,
    steps) the launch wait per step of these gaps, every gap however short (int64[steps]:
    ``launch_wait_ns`` as :func:`cgprof.metrics.steps.classify_steps` sums it from this
    measurement's table; ``table[corr_id - lo]`` is the step of a correlation id's call, -1
    none, as :func:`cgprof.metrics.steps._dense_steps` makes it, for the one process of
    ``ops`` and ``calls``); else None. ``tables=False``: the wait only (no GapResult: the
    steps' span when the report's window is another). ``bins``: :class:`GapBins` that the
    listed gaps, the window's edges left out, are added to (:attr:`GapAsk.bins`).

    Where the chunked sweep applies (:class:`_Chunked`: from CHUNKED_MIN_OPS ops) the gap
    table is never made: :class:`_GapSummary` keeps every gap's length and kind and the
    ``limit`` longest listed gaps (10M gaps: ~0.1 GB where the table is ~0.5 GB). Elsewhere,
    and for ``limit`` None (every gap listed), the table is measured (:func:`measure_gaps`).
    Same values, dtypes and row order either way; the waits equal classify_steps' while each
    step's sum is below 2**53 ns (its float64 sums are exact there)."""
    live = _live_ops(ops, window)
    chunked = _Chunked.of(live, calls) if limit is not None or not tables else None
    if chunked is not None:
        streams = None
        if tables:  # before the sweep, as measure_gaps
            streams = _stream_table_swept(live)
            streams = _stream_table(live) if streams is None else streams
        mine = _fresh_bins(bins)
        make = functools.partial(_GapSummary, min_gap_ns=min_gap_ns, limit=limit or 0,
                                 wait=wait, keep=tables, bins=mine)
        run = chunked.run(window, make)
        del chunked
        if run is not None:
            del live
            _commit_bins(bins, mine)
            out, n, edges, busy = run
            del run
            assert isinstance(out, _GapSummary)
            result = out.result(n, edges, busy, streams, window) if tables else None
            return result, out.wait_ns
    del live
    measured = measure_gaps(ops, calls, window=window, streams=tables)
    add_gap_table(bins, measured.gaps, min_gap_ns)
    per = launch_wait_of(measured.gaps, *wait) if wait is not None else None
    result = measured.result(min_gap_ns).longest(limit) if tables else None
    return result, per


def extent_positions(starts: np.ndarray, ext_cummax: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Window position of the step whose extent holds each time ``t`` (-1 outside every
    extent): ``starts`` the window steps' host starts (ascending), ``ext_cummax`` the running
    max of their extents' ends (``np.maximum.accumulate(extent_end_ns)``). A time belongs
    to the last step starting at or before it, while it is before that step's running max
    (an extent reaching past later steps' starts covers the stretch up to its end)."""
    t = np.asarray(t)
    if not len(starts):
        return np.full(t.shape, -1, dtype=np.intp)
    j = np.searchsorted(starts, t, "right") - 1
    ok = j >= 0
    jj = np.where(ok, j, 0)
    ok &= t < ext_cummax[jj]
    return np.where(ok, j, -1)


def bin_gaps(gap_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gap lengths ``gap_ns`` (int64 ns) binned on GAP_BIN_EDGES_US: per bin the count and
    the exact int64 sum of the lengths (int64[bins] each). A length's bin is the last edge
    at or below its float64 microseconds, clipped to the first and last bin."""
    nb = len(GAP_BIN_EDGES_US) - 1
    v = np.asarray(gap_ns, dtype=np.int64)
    b = np.searchsorted(_GAP_BIN_EDGES, v.astype(np.float64) / 1000.0, "right") - 1
    np.clip(b, 0, nb - 1, out=b)
    return counts_by_code(b, nb), sums_by_code(b, v, nb)


class GapBins:
    """The histogram (:func:`bin_gaps`) of the gaps whose start lies in a window of steps'
    extents (:func:`extent_positions` of ``starts`` and ``ext_cummax``), summed a batch of
    gaps at a time (:meth:`add`) into ``count`` and ``total_ns`` (int64 per bin, zeros at
    first): cgprof.diff's histogram of a view, without a table of every gap
    (:attr:`GapAsk.bins`)."""

    def __init__(self, starts: np.ndarray, ext_cummax: np.ndarray):
        self.starts = np.asarray(starts, dtype=np.int64)
        self.ext_cummax = np.asarray(ext_cummax, dtype=np.int64)
        if self.starts.shape != self.ext_cummax.shape or self.starts.ndim != 1:
            raise ValueError("starts and ext_cummax: one value per step each")
        nb = len(GAP_BIN_EDGES_US) - 1
        self.count = np.zeros(nb, dtype=np.int64)
        self.total_ns = np.zeros(nb, dtype=np.int64)

    def add(self, start_ns: np.ndarray, gap_ns: np.ndarray) -> None:
        """Count the gaps starting at ``start_ns`` of lengths ``gap_ns`` (int64 ns) whose
        start lies in an extent (the others are left out), a chunk at a time."""
        for a in range(0, len(start_ns), _HIST_CHUNK):
            g = gap_ns[a:a + _HIST_CHUNK]
            inside = extent_positions(self.starts, self.ext_cummax,
                                      start_ns[a:a + _HIST_CHUNK]) >= 0
            if not inside.any():
                continue
            count, total = bin_gaps(g if inside.all() else g[inside])
            self.count += count
            self.total_ns += total

    def frame(self) -> pd.DataFrame:
        """bin_lo_us bin_hi_us (float64) count total_ns (int64), a row per bin."""
        return pd.DataFrame({"bin_lo_us": _GAP_BIN_EDGES[:-1].copy(),
                             "bin_hi_us": _GAP_BIN_EDGES[1:].copy(),
                             "count": self.count.copy(), "total_ns": self.total_ns.copy()})

    # -- what a measurement calls (GapAsk.bins) -------------------------------------------

    def fresh(self) -> GapBins:
        """Empty bins of the same extents (:func:`_fresh_bins`)."""
        return GapBins(self.starts, self.ext_cummax)

    def commit(self, got: GapBins) -> None:
        """Add the counts of ``got`` (a :meth:`fresh` copy a sweep filled)."""
        self.count += got.count
        self.total_ns += got.total_ns

    def add_batch(self, batch: GapBatch) -> None:
        """Count a batch of listed gaps of a measurement (its window edges left out)."""
        if not batch.edge:
            self.add(batch.start, batch.gap)

    def add_table(self, gaps: pd.DataFrame, min_gap_ns: int) -> None:
        """Count the gaps of table ``gaps`` longer than ``min_gap_ns``, window edges left
        out (:func:`add_gap_table`)."""
        ns = gaps["gap_ns"].to_numpy(dtype=np.int64)
        rows = np.flatnonzero((ns > min_gap_ns) & (gaps["kind"] != "window_edge").to_numpy(
            dtype=bool))
        self.add(gaps["start_ns"].to_numpy(dtype=np.int64)[rows], ns[rows])


@dataclass
class GapBatch:
    """Listed gaps of one device as a measurement hands them to what it was asked to fill
    (GapAsk.bins: :class:`GapBins`, :class:`GapTimeline`): their starts and lengths (int64),
    kinds (codes into GAP_KINDS) and next calls' names (codes into ``api_categories``);
    ``edge``: window-edge gaps."""

    start: np.ndarray
    gap: np.ndarray
    device: int
    kind: np.ndarray
    api: np.ndarray
    api_categories: list[str]
    edge: bool = False


class GapTimeline:
    """What a timeline of a window of steps draws of a measurement's listed gaps
    (cgprof.report.figures.timeline_apart), without a table of every gap: per window step
    the gaps that overlap the window ``[t0, ends[-1])`` and start before that step's end
    (``counts``, int64; ``ends``: the steps' extent ends as a running max), and those
    gaps whole (:meth:`frame`) as far as a timeline can draw them: at least the earliest
    ``keep`` by start, ties kept (more while few have come: a caller cuts them by time). A
    timeline of the window's first steps whose events fit ``keep`` draws only gaps among
    those: they start before its end, and at most ``keep`` of the window's gaps do; one
    that draws a step holding more events draws the first ``keep`` events by start only."""

    def __init__(self, t0: int, ends: np.ndarray, keep: int):
        self.t0 = int(t0)
        self.ends = np.asarray(ends, dtype=np.int64)
        if self.ends.ndim != 1 or not len(self.ends):
            raise ValueError("ends: one value per window step, at least one")
        self.keep = max(int(keep), 1)
        self.counts = np.zeros(len(self.ends), dtype=np.int64)
        self.parts: list[pd.DataFrame] = []
        self.held = 0  # rows in parts
        self.bound: int | None = None  # no gap starting after it is kept

    def fresh(self) -> GapTimeline:
        return GapTimeline(self.t0, self.ends, self.keep)

    def commit(self, got: GapTimeline) -> None:
        self.counts += got.counts
        for part in got.parts:
            self._keep(part)

    def add_batch(self, batch: GapBatch) -> None:
        def text(values: list[str], codes: np.ndarray):
            return lambda rows: np.asarray(values, dtype=object)[codes[rows]]

        self._add(batch.start, batch.gap, batch.device, text(list(GAP_KINDS), batch.kind),
                  text(batch.api_categories, batch.api))

    def add_table(self, gaps: pd.DataFrame, min_gap_ns: int) -> None:
        ns = gaps["gap_ns"].to_numpy(dtype=np.int64)
        rows = np.flatnonzero(ns > min_gap_ns)
        sub = gaps.iloc[rows]
        kind, api = sub["kind"].astype(str).to_numpy(), sub["next_api"].astype(str).to_numpy()
        self._add(sub["start_ns"].to_numpy(dtype=np.int64), ns[rows],
                  sub["device_id"].to_numpy(dtype=np.int64), lambda r: kind[r],
                  lambda r: api[r])

    def _add(self, start: np.ndarray, gap: np.ndarray, device: int | np.ndarray,
             kind: Callable[[np.ndarray], np.ndarray],
             api: Callable[[np.ndarray], np.ndarray]) -> None:
        end = start + gap
        hit = np.flatnonzero((end > self.t0) & (start < self.ends[-1]))
        if not len(hit):
            return
        s = start[hit]
        self.counts += starts_before(s, self.ends)
        if len(hit) > self.keep:  # no gap after this batch's keep-th earliest is kept
            cut = int(np.partition(s, self.keep - 1)[self.keep - 1])
            self.bound = cut if self.bound is None else min(self.bound, cut)
        if self.bound is not None:
            hit = hit[s <= self.bound]
            if not len(hit):
                return
        dev = (np.full(len(hit), device, dtype=np.int64) if np.ndim(device) == 0
               else np.asarray(device, dtype=np.int64)[hit])
        self._keep(pd.DataFrame({"device_id": dev, "start_ns": start[hit],
                                 "end_ns": end[hit], "gap_ns": gap[hit],
                                 "kind": kind(hit), "next_api": api(hit)}))

    def _keep(self, part: pd.DataFrame) -> None:
        if self.bound is not None:
            part = part[part["start_ns"].to_numpy() <= self.bound]
        if not len(part):
            return
        self.parts.append(part)
        self.held += len(part)
        if self.held > 2 * self.keep:
            kept = self.frame()
            s = np.sort(kept["start_ns"].to_numpy())
            self.bound = int(s[self.keep - 1]) if self.bound is None else min(
                self.bound, int(s[self.keep - 1]))
            self.parts = [kept[kept["start_ns"].to_numpy() <= self.bound]]
            self.held = len(self.parts[0])

    def frame(self) -> pd.DataFrame:
        """The gaps kept: device_id start_ns end_ns gap_ns (int64), kind, next_api (str),
        in the gap table's order (device, start)."""
        if not self.parts:
            return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "next_api")
                                              else "int64")
                                 for c in ("device_id", "start_ns", "end_ns", "gap_ns",
                                           "kind", "next_api")})
        out = pd.concat(self.parts, ignore_index=True)
        if self.bound is not None:
            out = out[out["start_ns"].to_numpy() <= self.bound]
        return out.sort_values(["device_id", "start_ns"], kind="stable").reset_index(drop=True)



#: What a measurement can be asked to fill as it goes (GapAsk.bins).
GapSink = GapBins | GapTimeline


def _fresh_bins(bins: tuple[GapSink, ...]) -> tuple[GapSink, ...]:
    """Empty copies of ``bins``: what a sweep fills, handed over only where it finishes
    (:func:`_commit_bins`; a sweep given up leaves ``bins`` as they were)."""
    return tuple(b.fresh() for b in bins)


def _commit_bins(bins: tuple[GapSink, ...], got: tuple[GapSink, ...]) -> None:
    """Add what ``got`` (:func:`_fresh_bins` of ``bins``) took into ``bins``."""
    for b, g in zip(bins, got, strict=True):
        b.commit(g)  # type: ignore[arg-type]  # (g is b.fresh())


def _edges_to(bins: tuple[GapSink, ...], edges: list[tuple[int, int, int]], min_gap_ns: int,
              api_categories: list[str]) -> None:
    """Hand ``bins`` the window-edge gaps ``edges`` (device, start, end) longer than
    ``min_gap_ns`` (as the listed gaps, cgprof.metrics.AnalysisResult.step_gaps, hold them)."""
    blank = api_categories.index("") if "" in api_categories else -1
    for device, start, end in edges:
        if not bins or end - start <= min_gap_ns:
            continue
        batch = GapBatch(np.array([start], dtype=np.int64), np.array([end - start],
                                                                     dtype=np.int64),
                         int(device), np.array([GAP_KINDS.index("window_edge")], dtype=np.int8),
                         np.array([blank]), [*api_categories, ""] if blank < 0 else
                         api_categories, edge=True)
        for b in bins:
            b.add_batch(batch)


def add_gap_table(bins: tuple[GapSink, ...], gaps: pd.DataFrame, min_gap_ns: int) -> None:
    """Add to ``bins`` the gaps of table ``gaps`` (GAP_COLUMNS) longer than ``min_gap_ns``
    (a measurement's fallback; a view's histogram of a whole analysis's ``step_gaps``,
    cgprof.diff)."""
    if not bins or not len(gaps):
        return
    for b in bins:
        b.add_table(gaps, min_gap_ns)


@dataclass(frozen=True)
class GapAsk:
    """One measurement of :func:`measure_gaps_sliced_each`: the arguments of
    :func:`measure_gaps_reduced` but for the ops and calls.

    ``bins``: :class:`GapBins` to add the measurement's gaps to (filled in place, whichever
    path measures them): its gaps longer than ``min_gap_ns``, window-edge gaps left out,
    as ``measure_gaps(ops, calls, window).listed(min_gap_ns)`` lists them."""

    window: tuple[int, int] | None
    min_gap_ns: int = 0
    limit: int | None = None
    wait: tuple[np.ndarray, int, int] | None = None
    tables: bool = True
    bins: tuple[GapSink, ...] = ()


def measure_gaps_sliced(slices: Callable[[], Iterable[pd.DataFrame]], calls: pd.DataFrame,
                        window: tuple[int, int] | None, min_gap_ns: int = 0,
                        limit: int | None = None,
                        wait: tuple[np.ndarray, int, int] | None = None, tables: bool = True,
                        concat: Callable[[list[pd.DataFrame]], pd.DataFrame] | None = None,
                        ) -> tuple[GapResult | None, np.ndarray | None]:
    """``measure_gaps_reduced(ops, calls, window, min_gap_ns, limit, wait, tables)`` of the
    GPU ops ``ops`` given a slice at a time, never all of them at once: ``slices()`` yields
    frames of the ops' columns start_ns end_ns device_id stream_id pid corr_id kind in_graph
    (more are left alone), each in (start, end) order as
    :func:`cgprof.metrics.gpu.gpu_ops` sorts, whose concatenation in order is ``ops`` (some
    may be empty); calling it again reads them again. The same tables, dtypes, longest gaps
    and their order, totals and waits, bit for bit.

    Where :func:`measure_gaps_reduced` takes the chunked sweep (:class:`_Chunked`: from
    CHUNKED_MIN_OPS live ops, one process, plain int64 columns, times exact in float64, ops
    in (start, end) order, devices fewer than _MAX_CODES ids apart, an inner gap), the
    slices are swept in one pass (:class:`_SliceSweep`): each device's running max end and
    the columns of the op that reached it, its busy figures and (``tables``) each (device,
    stream)'s are carried from slice to slice; each gap's length and kind, the ``limit``
    longest and the waits are taken in as :class:`_GapSummary` takes them; the gap rows are
    placed, device by device with the window's edges, after the last slice. Held at once:
    one slice, what a gap summary keeps (9 bytes a gap), a few figures per device and
    stream, the calls' lookups; and at first the live slices until CHUNKED_MIN_OPS live ops
    have come (fewer are measured whole). The checks of :meth:`_Chunked.of` are made slice
    by slice (and across: each slice's first op not before the last one's last).

    Elsewhere it falls back on the whole measurement: ``measure_gaps_reduced(concat(live),
    ...)`` of the live ops (clipped to the window, none of zero length: what it measures of
    ``ops``) joined by ``concat`` (default: ``pd.concat``), held slice by slice (below
    CHUNKED_MIN_OPS, that is every one, or where a check fails before the sweep began) or
    read again (``slices()`` once more, where the sweep was under way: a check failing on a
    later slice, no inner gap, devices too far apart). ``limit`` None with ``tables``
    (every gap listed) always falls back."""
    ask = GapAsk(window, min_gap_ns, limit, wait, tables)
    return measure_gaps_sliced_each(slices, calls, [ask], concat)[0]


def measure_gaps_sliced_each(slices: Callable[[], Iterable[pd.DataFrame]], calls: pd.DataFrame,
                             asks: list[GapAsk],
                             concat: Callable[[list[pd.DataFrame]], pd.DataFrame] | None = None,
                             ) -> list[tuple[GapResult | None, np.ndarray | None]]:
    """:func:`measure_gaps_sliced` of each of ``asks`` (e.g. the steps' span for the waits,
    the report's window for the tables), from one read of the slices (and one more for
    those that fall back after their sweep began); the calls' lookups made once. An ask's
    ``bins`` are filled by the path that measures it: by its sweep, a chunk of gaps at a
    time (into fresh bins, added to the ask's only once the sweep finishes), or by its
    fallback, from the gap table that :func:`measure_gaps_reduced` measures there."""
    join = concat if concat is not None else _concat_ops
    shared = _SliceShared(calls)
    runs = [_SlicedRun(ask, shared) for ask in asks]
    for ops in slices():
        cols = _slice_arrays(ops) if len(ops) else None  # (read once for every run)
        for run in runs:
            run.add(ops, cols)
        del ops, cols
    shared.drop()  # the calls' lookups, before the results' temporaries
    results = [run.finish() for run in runs]
    lost = [run for run in runs if run.lost]
    if lost:
        for ops in slices():
            for run in lost:
                run.hold(_live_ops(ops, run.ask.window))
            del ops
    return [got if got is not None else run.fallback(calls, join)
            for run, got in zip(runs, results, strict=True)]


def _concat_ops(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The slices of ops joined (:func:`measure_gaps_sliced`'s default ``concat``)."""
    return pd.concat(frames, ignore_index=True)


def add_launch_wait(per: np.ndarray, corr: np.ndarray, gap: np.ndarray, table: np.ndarray,
                    lo: int) -> None:
    """Add launch-bound gaps to the launch wait per step ``per`` (int64, in place): ``gap``
    their lengths, ``corr`` their next ops' correlation ids, whose step is ``table[corr -
    lo]`` (-1: none; steps past ``per`` are dropped, as classify_steps' bincount does).
    Exact int64 sums, a chunk of gaps at a time."""
    if not len(corr):
        return
    step = table_get(table, corr - lo if lo else corr)
    hit = (step >= 0) & (step < len(per))
    per += sums_by_code(step[hit], gap[hit], len(per))


def launch_wait_of(gaps: pd.DataFrame, table: np.ndarray, lo: int, n: int) -> np.ndarray:
    """The launch wait per step (int64[n]) of a gap table (:func:`add_launch_wait`)."""
    per = np.zeros(n, dtype=np.int64)
    rows = np.flatnonzero((gaps["kind"] == "launch_bound").to_numpy(dtype=bool))
    if len(rows):
        corr, gap = (_int64_at(gaps[c], rows) for c in ("next_corr_id", "gap_ns"))
        add_launch_wait(per, corr, gap, table, lo)
    return per


def _int64_at(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The int64 values of ``col`` at positions ``rows`` (none <NA>), one gather."""
    return col.to_numpy()[rows] if col.dtype == np.int64 else col.array[rows].to_numpy(
        dtype=np.int64)


def _live_ops(ops: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    """The ops :func:`measure_gaps` sweeps: clipped to ``window``, those of no length left
    out."""
    ops = _window_clip(ops, window)
    if len(ops):
        start, end = ops["start_ns"], ops["end_ns"]
        live = (end.to_numpy() > start.to_numpy()) if start.dtype == end.dtype == np.int64 else (
            end > start).to_numpy(dtype=bool)
        ops = ops if live.all() else ops[live]
    return ops


def window_gaps(span: GapResult | MeasuredGaps, ops: pd.DataFrame, calls: pd.DataFrame,
                span_window: tuple[int, int] | None,
                window: tuple[int, int] | None) -> GapResult:
    """``gpu_gaps(ops, calls, window=window)``, derived from ``span`` (``gpu_gaps(ops, calls,
    window=span_window)``, unfiltered, or the :func:`measure_gaps` it comes from: only its
    gaps are read) when ``window`` lies inside ``span_window``.

    The trick: the busy union of the ops clipped to the window is the span's union cut to the
    window, so the window's inner gaps are the span's inner gaps strictly inside it, with the
    same ops on either side, hence the same causes; only the window-edge gaps, the busy
    figures and the stream table are measured again (no second sweep, launch join or sync
    search). The ops on either side are the same unless clipping ties two of them in the
    sort: two ops of a device starting at the same time and reaching the window's end, or
    two starting at or before its start and ending at the same time inside it; then, as
    for big tables (the chunked path) and any column that is not plain int64, the window
    is measured from scratch."""
    derived = _derive_window(span, ops, span_window, window)
    return derived if derived is not None else gpu_gaps(ops, calls, window=window)


def _derive_window(span: GapResult | MeasuredGaps, ops: pd.DataFrame,
                   span_window: tuple[int, int] | None,
                   window: tuple[int, int] | None) -> GapResult | None:
    """:func:`window_gaps` from ``span``, or None where it does not apply."""
    if window is None or span_window is None or span.min_gap_ns:
        return None
    w0, w1 = window
    if not (span_window[0] <= w0 < w1 <= span_window[1]) or not (
            0 < len(ops) < CHUNKED_MIN_OPS):
        return None
    if any(ops[c].dtype != np.int64 for c in _OP_INTS) or ops["in_graph"].dtype != bool:
        return None
    g = span.gaps
    if not len(g) or not isinstance(g["kind"].dtype, pd.CategoricalDtype) or not isinstance(
            g["next_api"].dtype, pd.CategoricalDtype) or any(
            g[c].dtype != np.int64 for c in ("device_id", "start_ns", "end_ns", "gap_ns")):
        return None
    dev, start, end = (ops[c].to_numpy() for c in ("device_id", "start_ns", "end_ns"))
    live = (end > start) & (end > w0) & (start < w1)  # the window's ops, as _window_clip
    if not live.any():
        return None
    # Ties that clipping would make (see window_gaps): per device, distinct starts among the
    # ops reaching the window's end, distinct ends among those clipped at its start.
    for tie, key in (((start > w0) & (end >= w1), start), ((start <= w0) & (end < w1), end)):
        rows = np.flatnonzero(live & tie)
        if len(rows) > 1 and len(np.unique(np.stack([dev[rows], key[rows]]), axis=1)[0]) < len(
                rows):
            return None
    g_start, g_end = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
    codes = g["kind"].cat.codes.to_numpy()
    keep = (g_start > w0) & (g_end < w1) & (codes != GAP_KINDS.index("window_edge"))
    if not keep.any():
        return None
    inner: dict[str, object] = {}
    for c in GAP_COLUMNS:
        col = g[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            inner[c] = col.array[keep]
        else:
            inner[c] = col.array[keep].to_numpy(dtype=np.int64)
    # The window's busy figures per device: its ops clipped to it, less the inner gaps.
    w_ops = _window_clip(ops, window)
    w_start, w_end = w_ops["start_ns"].to_numpy(), w_ops["end_ns"].to_numpy()
    w_live = w_end > w_start
    if not w_live.all():
        w_ops = w_ops[w_live]
    busy = _window_busy(w_ops, inner)
    if busy is None:
        return None
    streams = _stream_table(w_ops)
    edges = _edge_gaps(w_ops, window, busy)
    all_gaps = _merge_sorted(inner, edges)
    if all_gaps is None:
        return None
    devices = _device_table(busy, all_gaps, window)
    by_kind, hist = _kind_tables(all_gaps, devices)
    return GapResult(devices=devices, gaps=all_gaps, by_kind=by_kind, histogram=hist,
                     streams=streams, min_gap_ns=0)


def _window_busy(w_ops: pd.DataFrame, inner: dict[str, Any]) -> pd.DataFrame | None:
    """Per device of the window's (clipped, live) ops: first start, last end and busy time
    (span less the inner gaps), the columns :func:`_edge_gaps` and :func:`_device_table`
    read; None when an inner gap's device has no op."""
    dev = w_ops["device_id"].to_numpy()
    start, end = w_ops["start_ns"].to_numpy(), w_ops["end_ns"].to_numpy()
    lo, hi = int(dev.min()), int(dev.max())
    g_dev, g_ns = inner["device_id"], inner["gap_ns"]
    if lo == hi:
        devs = dev[:1].copy()
        first, last = start.min(keepdims=True), end.max(keepdims=True)
        if int(g_dev.min()) != lo or int(g_dev.max()) != lo:
            return None
        gaps = np.array([int(g_ns.sum())], dtype=np.int64)
    else:
        devs, inv = np.unique(dev, return_inverse=True)
        first = np.full(len(devs), np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full(len(devs), np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(first, inv, start)
        np.maximum.at(last, inv, end)
        at = np.searchsorted(devs, g_dev)
        if (at >= len(devs)).any() or (devs[np.minimum(at, len(devs) - 1)] != g_dev).any():
            return None
        gaps = np.zeros(len(devs), dtype=np.int64)
        np.add.at(gaps, at, g_ns)
    return pd.DataFrame({"device_id": devs.astype(np.int64), "first_start_ns": first,
                         "last_end_ns": last, "busy_ns": last - first - gaps})


def _gather(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``a[rows]``; a fill, not a gather, where ``a`` holds one value (one device)."""
    if len(a) and a[0] == a[-1] and a.min() == a.max():
        return np.full(len(rows), a[0])
    return a[rows]


def _empty_gaps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in ("kind", "next_api") else "Int64")
                         for c in GAP_COLUMNS})


_OP_INTS = ("start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id")


@dataclass
class _Sweep:
    """:func:`group_gaps` by device of ``ops`` in numpy, without its frame: ``order`` puts the
    ops in (device, start, end) order (None: they are in it), and per row of that order
    ``first`` (a device's first op), ``gap``, ``prev_end`` and ``prev_pos`` (position in
    ``ops`` of the op that ended last before the row)."""

    order: np.ndarray | None
    dev: np.ndarray
    start: np.ndarray
    end: np.ndarray
    first: np.ndarray
    gap: np.ndarray
    prev_end: np.ndarray
    prev_pos: np.ndarray

    @staticmethod
    def of(ops: pd.DataFrame) -> _Sweep | None:
        """None (take the frame path) when empty or a column is not plain int64/bool."""
        if not len(ops) or any(ops[c].dtype != np.int64 for c in _OP_INTS) or (
                ops["in_graph"].dtype != bool):
            return None
        dev, start, end = (ops[c].to_numpy() for c in ("device_id", "start_ns", "end_ns"))
        order = group_order([dev], start, end)
        if order is not None:
            dev, start, end = dev[order], start[order], end[order]
        first = np.empty(len(dev), dtype=bool)
        first[0] = True
        np.not_equal(dev[1:], dev[:-1], out=first[1:])
        gap, prev_end, prev_pos = gap_sweep(start, end, first)
        if order is not None:
            prev_pos = order[prev_pos]
        assert prev_end is not None  # want_prev_end=True
        return _Sweep(order, dev, start, end, first, gap, prev_end, prev_pos)

    def gap_rows(self, ops: pd.DataFrame) -> dict[str, np.ndarray]:
        """The ops after a gap and before it, as :func:`_frame_gap_rows` gives them."""
        rows = np.flatnonzero(self.gap > 0)
        nxt = rows if self.order is None else self.order[rows]
        prv = self.prev_pos[rows]
        out = {"device_id": _gather(self.dev, rows), "gap_start": self.prev_end[rows],
               "gap_end": self.start[rows]}
        for c in ("stream_id", "pid", "corr_id", "in_graph"):
            a = ops[c].to_numpy()
            if c == "pid" and len(a) and a.dtype == np.int64 and a.min() == a.max():
                out[c] = out["prev_" + c] = np.full(len(rows), a[0])  # one process
                continue
            out[c] = a[nxt]
            out["prev_" + c] = a[prv]
        out["prev_copy"] = _is_copy(ops["kind"], prv)
        return out

    def busy(self) -> pd.DataFrame:
        """``busy_from_gaps(group_gaps(ops, ["device_id"]), ["device_id"])``."""
        return segment_busy(["device_id"], [self.dev], self.start, self.end, self.gap, self.first)


#: Ops below this count take the whole-array sweep (:class:`_Sweep`): the chunked one
#: (:class:`_Chunked`) pays where the gap table's temporaries would be hundreds of MB (10M
#: ops: -0.3 GB peak, -2 s); at 1M ops it cost ~30 ms more CPU and ~60 MB more peak RSS.
CHUNKED_MIN_OPS = 1 << 21
#: Rows per chunk of :meth:`_Chunked._fill` (at most SWEEP_CHUNK).
FILL_CHUNK = 1 << 18

#: Distinct (device, stream) codes the chunked sweep takes (one uint16 code per op).
_MAX_CODES = 1 << 16


def _dense_code(arrays: list[np.ndarray]) -> tuple[np.ndarray | None, list[np.ndarray]] | None:
    """One small code per row for the distinct tuples of int64 ``arrays`` (in sorted tuple
    order): the uint16 codes (None: one tuple) and each array's value per code; None when the
    values span more than _MAX_CODES tuples. Counted a chunk at a time (no full-length
    int64 temporary)."""
    n = len(arrays[0])
    los = [int(a.min()) for a in arrays]
    spans = [int(a.max()) - lo + 1 for a, lo in zip(arrays, los, strict=True)]
    width = int(np.prod(spans, dtype=object))
    if width > _MAX_CODES:
        return None
    step = 1 << 20

    def combo(a: int, b: int) -> np.ndarray:
        out = np.zeros(b - a, dtype=np.int64)
        for arr, lo, span in zip(arrays, los, spans, strict=True):
            out *= span
            out += arr[a:b]
            out -= lo
        return out

    counts = np.zeros(width, dtype=np.int64)
    for a in range(0, n, step):
        counts += np.bincount(combo(a, min(a + step, n)), minlength=width)
    present = np.flatnonzero(counts)
    values, rest = [], present
    for lo, span in zip(los[::-1], spans[::-1], strict=True):
        values.append(rest % span + lo)
        rest = rest // span
    values = values[::-1]
    if len(present) == 1:
        return None, values
    lut = np.zeros(width, dtype=np.uint16)
    lut[present] = np.arange(len(present), dtype=np.uint16)
    code = np.empty(n, dtype=np.uint16)
    for a in range(0, n, step):
        b = min(a + step, n)
        code[a:b] = lut[combo(a, b)]
    return code, values


def _busy_chunked(keys: list[str], values: list[np.ndarray], code: np.ndarray | None,
                  start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """:func:`segment_busy` of rows in (start, end) order grouped by ``code``
    (:func:`_dense_code`), through :func:`sweep_chunks`."""
    stats = _BusyStats(len(values[0]))
    for c, _rows, st, en, gap, _pe, _pp in sweep_chunks(start, end, code, stats.ncodes,
                                                        positions=False):
        stats.add(c, st, en, gap, np.count_nonzero(gap > 0))
    return stats.frame(keys, values)


class _BusyStats:
    """The busy table's figures per group, summed over the chunks of :func:`sweep_chunks`."""

    def __init__(self, ncodes: int):
        self.ncodes = ncodes
        # rows: ops first_start last_end gaps max_gap gap_count
        self.stats = np.zeros((6, ncodes), dtype=np.int64)

    def add(self, c: int, st: np.ndarray, en: np.ndarray, gap: np.ndarray,
            gaps: int | np.integer) -> None:
        col = self.stats[:, c]
        lo, hi = int(st.min()), int(en.max())
        col[1] = min(int(col[1]), lo) if col[0] else lo
        col[2] = max(int(col[2]), hi) if col[0] else hi
        col[0] += len(st)
        col[3] += gap.sum()
        col[4] = max(int(col[4]), int(gap.max()))
        col[5] += gaps

    def grow(self, m: int) -> None:
        """Room for ``m`` more groups (codes ``ncodes`` on)."""
        self.stats = np.concatenate([self.stats, np.zeros((6, m), dtype=np.int64)], axis=1)
        self.ncodes += m

    def taken(self, order: np.ndarray) -> _BusyStats:
        """The figures of groups ``order`` (codes), coded 0, 1, ... in that order."""
        out = _BusyStats(len(order))
        out.stats = self.stats[:, order]
        return out

    def frame(self, keys: list[str], values: list[np.ndarray]) -> pd.DataFrame:
        """:func:`segment_busy`'s table."""
        ops, first, last, gaps, gmax, count = self.stats
        agg = dict(zip(keys, values, strict=True))
        agg.update(ops=ops, first_start_ns=first, last_end_ns=last, span_ns=last - first,
                   busy_ns=last - first - gaps, gaps_ns=gaps, max_gap_ns=gmax, gap_count=count)
        return pd.DataFrame({c: np.asarray(agg[c], dtype=np.int64) for c in keys + BUSY_COLUMNS})


def _calls_pid(calls: pd.DataFrame) -> int | None:
    """The one process of ``calls`` when they are what :class:`_Chunked` takes: some calls,
    plain int64 ids and times (the times exact in float64), categorical names, one process,
    correlation ids in [0, 2**32) (match_pairs' coded keys); else None."""
    if not len(calls):
        return None
    if any(calls[c].dtype != np.int64 for c in ("pid", "corr_id", "start_ns", "end_ns")) or (
            not isinstance(calls["name"].dtype, pd.CategoricalDtype)):
        return None
    if not all(_exact_float(calls[c].to_numpy()) for c in ("start_ns", "end_ns")):
        return None
    pid, corr = calls["pid"].to_numpy(), calls["corr_id"].to_numpy()
    if int(pid.min()) != int(pid.max()) or int(corr.min()) < 0 or int(corr.max()) >= 2**32:
        return None
    return int(pid[0])


def _ops_fit(ops: pd.DataFrame, pid: int) -> bool:
    """Non-empty ``ops`` as :class:`_Chunked` takes them beside calls of process ``pid``
    (:func:`_calls_pid`), but for their order: plain int64 columns (times exact in float64),
    bool ``in_graph``, categorical ``kind``, every op of ``pid``, correlation ids in
    [0, 2**32)."""
    if any(ops[c].dtype != np.int64 for c in _OP_INTS) or ops["in_graph"].dtype != bool or (
            not isinstance(ops["kind"].dtype, pd.CategoricalDtype)):
        return False
    if not all(_exact_float(ops[c].to_numpy()) for c in ("start_ns", "end_ns")):
        return False
    p, corr = ops["pid"].to_numpy(), ops["corr_id"].to_numpy()
    return int(p.min()) == int(p.max()) == pid and int(corr.min()) >= 0 and int(
        corr.max()) < 2**32


@dataclass
class _Chunked:
    """:func:`gpu_gaps` of a big ops table a chunk at a time (:func:`sweep_chunks`): the gap
    table's columns are allocated once at their final length and filled chunk by chunk, with
    the window-edge rows in their slots, where the whole-array path gathered ~20 columns
    of every gap, classified them and copied each again to insert the edges (at 10M gaps:
    +1.4 GB of transients and ~4 s of fresh-page faults). Same rows and dtypes as that path.

    It applies to plain int64 ops in (start, end) order and API calls of the same single
    process, with categorical names, and times that float64 holds exactly (so that the int
    compares are the float ones of the general path); :meth:`of` says None otherwise."""

    ops: pd.DataFrame
    calls: pd.DataFrame
    #: correlation id - lo -> first call row (-1: none), or None: ``uniq``/``first`` (the
    #: sorted distinct ids and each one's first row, as :func:`first_match` finds them)
    table: np.ndarray | None
    lo: int
    uniq: np.ndarray | None = None
    first: np.ndarray | None = None

    @staticmethod
    def of(ops: pd.DataFrame, calls: pd.DataFrame) -> _Chunked | None:
        if len(ops) < max(CHUNKED_MIN_OPS, 1):
            return None
        pid = _calls_pid(calls)
        if pid is None or not _ops_fit(ops, pid):
            return None
        if not arrays_sorted([ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()]):
            return None
        return _Chunked.lookups(ops, calls)

    @staticmethod
    def lookups(ops: pd.DataFrame, calls: pd.DataFrame) -> _Chunked:
        """The sweep of ``ops`` (:meth:`of` checked them) with its lookup of the calls by
        correlation id (:meth:`launch_rows`)."""
        corr = calls["corr_id"].to_numpy()
        dense = _distinct_table(corr, narrow=True)  # launch_rows' values index call columns
        if dense is not None:
            return _Chunked(ops, calls, *dense)
        uniq, first = np.unique(corr, return_index=True)
        return _Chunked(ops, calls, None, 0, uniq, first)

    def launch_rows(self, corr: np.ndarray) -> np.ndarray:
        """The row of each correlation id's (first) call, -1 where none: :func:`first_match`
        of the one process's keys."""
        if self.table is not None:
            return table_get(self.table, corr - self.lo if self.lo else corr)
        assert self.uniq is not None and self.first is not None  # of(): set when table is None
        pos = np.searchsorted(self.uniq, corr)
        pos[pos == len(self.uniq)] = 0
        return np.where(self.uniq[pos] == corr, self.first[pos], -1).astype(np.int64)

    def gaps(self, window: tuple[int, int] | None) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """The whole gap table (inner and window-edge gaps, in (device, start) order) and
        the device busy table; None when there is no inner gap (the general path)."""
        run = self.run(window, _GapColumns)
        if run is None:
            return None
        out, n, edges, busy = run
        edge = None
        if edges:
            edge = np.zeros(n, dtype=bool)
            edge[edges] = True
        return out.frame(n, edge), busy

    def run(self, window: tuple[int, int] | None, make: Callable[..., _GapColumns]
            ) -> tuple[Any, int, list[int], pd.DataFrame] | None:
        """The sweep behind :meth:`gaps`, into ``make(n, api_categories, device=, pid=)``
        (:class:`_GapColumns`, or :class:`_GapSummary` that keeps only what the reports
        read): that sink, the gap table's length, the rows of its window-edge gaps and the
        device busy table; None when there is no inner gap (the general path)."""
        ops = self.ops
        dev = ops["device_id"].to_numpy()
        start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
        w0, w1 = window if window is not None else (None, None)
        cats = self._api_categories()
        if int(dev.min()) == int(dev.max()):
            # One device: one pass, into columns long enough for every op but the first to
            # follow a gap, plus the two edges. Only the rows written are ever faulted in
            # (np.empty's pages), and the table is views of their first rows.
            devs = dev[:1].copy()
            # start[0]: the min
            lead = np.array([window is not None and int(start[0]) > cast(int, w0)])
            out = make(len(start) + 1, cats, device=int(devs[0]), pid=self._pid())
            busy = self._fill(out, None, devs, start, end, lead.astype(np.int64))
        else:
            coded = _dense_code([dev])
            if coded is None:
                return None
            code, (devs,) = coded
            busy = _busy_chunked(["device_id"], [devs], code, start, end)
            first = busy["first_start_ns"].to_numpy()
            lead = (first > w0) if window is not None else np.zeros(len(devs), dtype=bool)
            trail = (busy["last_end_ns"].to_numpy() < w1) if window is not None else lead & False
            size = lead + busy["gap_count"].to_numpy() + trail
            out = make(int(size.sum()), cats, pid=self._pid())
            self._fill(out, code, devs, start, end, np.cumsum(size) - size + lead)
        layout = _Layout.of(busy, lead, window)
        if not layout.count.sum():
            return None
        return out, layout.n, layout.place(out, devs, busy, window), busy

    def _pid(self) -> int:
        """The one process's id (:meth:`of` checked there is one)."""
        return int(self.ops["pid"].to_numpy()[0])

    def _api_categories(self) -> list[str]:
        cats = [str(c) for c in self.calls["name"].cat.categories]
        return cats if "" in cats else [*cats, ""]

    def _fill(self, out: _GapColumns, code, devs, start, end, cursor) -> pd.DataFrame:
        """The inner gaps, chunk by chunk, each device's from its ``cursor`` on (as
        :meth:`_Sweep.gap_rows` and :func:`_inner_gaps` make them); returns the device busy
        table (:func:`_busy_chunked`'s)."""
        ncodes = len(devs)
        stats = _BusyStats(ncodes)
        cols = _OpColumns(_op_arrays(self.ops))
        classify = _Classify(self)
        # Chunks of FILL_CHUNK rows: at the fill's end the whole gap table is in memory, and
        # a 1M-row chunk's ~20 temporaries added ~0.18 GB to the 10M peak.
        for c, rows, st, en, gap, prev_end, prev_pos in sweep_chunks(start, end, code, ncodes,
                                                                      chunk=FILL_CHUNK):
            sel = np.flatnonzero(gap > 0)
            stats.add(c, st, en, gap, len(sel))
            if not len(sel):
                continue
            o = int(cursor[c])
            cursor[c] += len(sel)
            classify.write(out, o, prev_end[sel], st[sel], cols, rows[sel], prev_pos[sel],
                           int(devs[c]))
        return stats.frame(["device_id"], [devs])


def _op_arrays(ops: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns of (categorical-kind) ``ops`` that a sweep reads, as numpy arrays:
    _OP_INTS, in_graph, the kinds' codes ("kcode") and per code whether it is a copy or a
    memset ("is_copy", one more, False, for code -1)."""
    out = {c: ops[c].to_numpy() for c in (*_OP_INTS, "in_graph")}
    kinds = ops["kind"]
    out["kcode"] = kinds.cat.codes.to_numpy()
    out["is_copy"] = np.append(kinds.cat.categories.isin(["memcpy", "memset"]), False)
    return out


class _OpColumns:
    """The op columns that classifying a gap reads (:meth:`_Classify.write`) of its ops before
    and after, by position in ``ops`` (their :func:`_op_arrays`). Positions from ``len(ops)``
    on are ``held`` ops (:class:`_SliceSweep`: per device of the slice, the op of an earlier
    slice holding the running max end), whose columns are ``held[c][position - len(ops)]``."""

    #: The columns read, "copy" being the op's kind is memcpy or memset.
    NAMES = ("stream_id", "pid", "corr_id", "in_graph", "copy")

    def __init__(self, ops: dict[str, np.ndarray], held: dict[str, np.ndarray] | None = None):
        self.cols = ops
        self.n = len(ops["start_ns"])
        self.held = held

    def _own(self, c: str, rows: np.ndarray) -> np.ndarray:
        cols = self.cols
        return cols["is_copy"][cols["kcode"][rows]] if c == "copy" else cols[c][rows]

    def take(self, c: str, rows: np.ndarray) -> np.ndarray:
        """Column ``c`` (one of :attr:`NAMES`) of the ops at positions ``rows``."""
        if self.held is None or not len(rows) or int(rows.max()) < self.n:
            return self._own(c, rows)
        past = rows >= self.n
        out = self._own(c, np.where(past, 0, rows))
        out[past] = self.held[c][rows[past] - self.n]
        return out


class _Classify:
    """What classifying a chunk of gaps reads of the API calls (:meth:`write`), made once per
    sweep: the calls' lookup by correlation id (``chunked``'s), times, names and sync calls."""

    def __init__(self, chunked: _Chunked):
        calls = chunked.calls
        self.launch_rows = chunked.launch_rows
        self.api_categories = chunked._api_categories()
        self.c_start, self.c_end = calls["start_ns"].to_numpy(), calls["end_ns"].to_numpy()
        self.names = calls["name"].cat.codes.to_numpy()
        self.blank = self.api_categories.index("")
        self.sync = _SyncEnds.of(calls)

    def write(self, out: _GapColumns, o: int, g_start: np.ndarray, g_end: np.ndarray,
              cols: _OpColumns, nxt: np.ndarray, prv: np.ndarray, device: int) -> None:
        """Gaps from ``g_start`` to ``g_end``, the ops after and before them at positions
        ``nxt`` and ``prv`` of ``cols``: their table rows [o, o + len(nxt)), written into
        ``out`` with their kinds (as :func:`_inner_gaps` gives them) and handed over
        (:meth:`_GapColumns.done`): gaps of the device ``device``."""
        k_other, k_between, k_copy, k_launch, k_sync, k_replay = (GAP_KINDS.index(k) for k in (
            "other", "between_replays", "input_copy", "launch_bound", "sync_bound", "in_replay"))
        k = len(nxt)
        at = out.slots(o, k)
        out.start[at], out.end[at] = g_start, g_end
        np.subtract(g_end, g_start, out=out.gap[at])
        out.prev_stream[at] = cols.take("stream_id", prv)
        out.next_stream[at] = cols.take("stream_id", nxt)
        n_pid, n_corr = cols.take("pid", nxt), cols.take("corr_id", nxt)
        out.next_corr[at] = n_corr
        if out.next_pid.flags.writeable:  # else the one process's constant column
            out.next_pid[at] = n_pid
        ig, pg = cols.take("in_graph", nxt), cols.take("in_graph", prv)
        both = np.flatnonzero(pg & ig)  # the same replay: compared only where both are
        same = np.zeros(k, dtype=bool)
        pb = prv[both]
        same[both] = (cols.take("pid", pb) == n_pid[both]) & (
            cols.take("corr_id", pb) == n_corr[both])
        take = self.launch_rows(n_corr)
        known = take >= 0
        take[~known] = 0
        a_start, a_end = self.c_start[take], self.c_end[take]
        kind = np.full(k, k_other, dtype=np.int8)
        kind[pg | ig] = k_between
        kind[cols.take("copy", prv)] = k_copy
        kind[known & (a_end > g_start)] = k_launch
        kind[self.sync.returned(g_start, a_start, known & ~same)] = k_sync
        kind[same] = k_replay
        out.kind[at] = kind
        out.api[at] = np.where(known, self.names[take], self.blank)
        out.done(o, k, device)


@dataclass
class _Layout:
    """Where each device's gaps go in the gap table (device by device, each a window-edge
    gap before its first op where ``lead``, its inner gaps, one after its last op where
    ``trail``): per device its inner gaps' ``count``, rows (``size``) and first inner gap's
    row (``base``); ``n`` rows in all."""

    lead: np.ndarray
    count: np.ndarray
    trail: np.ndarray
    size: np.ndarray
    base: np.ndarray
    n: int

    @staticmethod
    def of(busy: pd.DataFrame, lead: np.ndarray, window: tuple[int, int] | None) -> _Layout:
        """``busy``: the device busy table; ``lead``: each device's first op starts after the
        window's start."""
        count = busy["gap_count"].to_numpy()
        last = busy["last_end_ns"].to_numpy()
        trail = (last < window[1]) if window is not None else np.zeros(len(count), dtype=bool)
        size = lead + count + trail
        base = np.cumsum(size) - size + lead  # each device's first inner gap
        return _Layout(lead, count, trail, size, base, int(size.sum()))

    def edges(self, devs: np.ndarray, busy: pd.DataFrame, window: tuple[int, int] | None
              ) -> list[tuple[int, int, int]]:
        """The window-edge gaps :meth:`place` writes: (device, start, end) each, in row
        order."""
        first, last = busy["first_start_ns"].to_numpy(), busy["last_end_ns"].to_numpy()
        w0, w1 = window if window is not None else (0, 0)  # (no edge without a window)
        out = []
        for i, d in enumerate(devs.tolist()):
            if self.lead[i]:
                out.append((int(d), int(w0), int(first[i])))
            if self.trail[i]:
                out.append((int(d), int(last[i]), int(w1)))
        return out

    def place(self, out: _GapColumns, devs: np.ndarray, busy: pd.DataFrame,
              window: tuple[int, int] | None) -> list[int]:
        """Write the device column (where ``out``'s is not one device's constant) and the
        window-edge rows into ``out``; returns the edge rows."""
        first, last = busy["first_start_ns"].to_numpy(), busy["last_end_ns"].to_numpy()
        lead, count, trail, size, base = self.lead, self.count, self.trail, self.size, self.base
        w0, w1 = window if window is not None else (None, None)
        edges = []
        for i, d in enumerate(devs.tolist()):
            lo = int(base[i]) - int(lead[i])
            if out.dev.flags.writeable:  # else the one device's constant column
                out.dev[lo:lo + int(size[i])] = d
            if lead[i]:
                out.edge(lo, cast(int, w0), int(first[i]), device=d)
                edges.append(lo)
            if trail[i]:
                at = int(base[i] + count[i])
                out.edge(at, int(last[i]), cast(int, w1), device=d)
                edges.append(at)
        return edges


@dataclass
class _SyncEnds:
    """The sync calls of one process by end time, for :func:`_sync_returned_in_gap`'s test
    a chunk of gaps at a time (the same arrays, so the same tie order)."""

    ends: np.ndarray
    starts: np.ndarray

    @staticmethod
    def of(calls: pd.DataFrame) -> _SyncEnds:
        rows = np.flatnonzero((calls["family"] == L.SYNC).to_numpy(dtype=bool))
        ends = calls["end_ns"].to_numpy(dtype=np.int64)[rows]
        by_end = np.argsort(ends, kind="stable")
        return _SyncEnds(ends[by_end], calls["start_ns"].to_numpy(dtype=np.int64)[rows][by_end])

    def returned(self, gap_start, api_start, need) -> np.ndarray:
        out = np.zeros(len(gap_start), dtype=bool)
        if not len(self.ends):
            return out
        idx = np.flatnonzero(need)
        out[idx] = _returned_in_gap(self.ends, self.starts, gap_start[idx], api_start[idx])
        return out


def _returned_in_gap(ends: np.ndarray, starts: np.ndarray, gap_start: np.ndarray,
                     api_start: np.ndarray) -> np.ndarray:
    """Per gap: did a sync call (``ends`` ascending, ``starts`` in the same order) run at
    the gap's start and return by the next launch call's start (start <= gap start <= end
    <= launch start)? Any such call counts, whichever order calls ending at the same ns
    come in. The last call to return is tried first (calls of one thread do not overlap,
    so it is the only candidate there); the earlier ones only where it started after the
    gap did, by one ``np.minimum.reduceat`` over their ranges of ``starts``."""
    lo = np.searchsorted(ends, gap_start, "left")  # the calls that end in the gap ...
    hi = np.searchsorted(ends, api_start, "right")  # ... by the launch: [lo, hi)
    some = hi > lo
    out = np.zeros(len(gap_start), dtype=bool)
    q = np.flatnonzero(some)
    if not len(q):
        return out
    last = starts[hi[q] - 1] <= gap_start[q]
    out[q[last]] = True
    rest = q[~last & (hi[q] - 1 > lo[q])]  # the last started later: any earlier one?
    if len(rest):
        rest = rest[np.argsort(lo[rest], kind="stable")]  # ranges by start: the spans
        at = np.empty(2 * len(rest), dtype=np.intp)     # between them are disjoint
        at[0::2], at[1::2] = lo[rest], hi[rest] - 1
        first = np.minimum.reduceat(starts, at)[0::2]
        out[rest[first <= gap_start[rest]]] = True
    return out


class _GapColumns:
    """The gap table's columns at their final length, filled in place by :class:`_Chunked`."""

    def __init__(self, n: int, api_categories: list[str], device: int | None = None,
                 pid: int | None = None):
        self.api_categories = api_categories
        self.start, self.end, self.gap, self.prev_stream, self.next_stream, self.next_corr = (
            np.empty(n, dtype=np.int64) for _ in range(6))
        # One GPU, one process (the chunked path's traces): the device id and the next op's
        # pid as trace.constant_view columns (10M gaps: 80 MB each). Under the window
        # edges' <NA> the pid column holds the pid, not 0: values no reader sees.
        self.dev, self.next_pid = (
            np.empty(n, dtype=np.int64) if v is None else
            np.broadcast_to(np.array(v, dtype=np.int64), (n,)) for v in (device, pid))
        self.kind = np.empty(n, dtype=np.int8)
        self.api = np.empty(n, dtype=_api_code_dtype(api_categories))

    def slots(self, at: int, k: int) -> slice:
        """Where :meth:`_Chunked._fill` writes the ``k`` gaps of table rows [at, at + k)."""
        return slice(at, at + k)

    def done(self, at: int, k: int, device: int) -> None:
        """Table rows [at, at + k), gaps of ``device``, are written (:class:`_GapSummary`
        takes them in)."""

    def edge(self, at: int, start: int, end: int, device: int = 0) -> None:
        """A window-edge row at ``at`` of ``device`` (the device column is filled by the
        caller)."""
        self.start[at], self.end[at], self.gap[at] = start, end, end - start
        self.kind[at] = GAP_KINDS.index("window_edge")
        for a in (self.prev_stream, self.next_stream, self.next_pid, self.next_corr):
            if a.flags.writeable:
                a[at] = 0
        self.api[at] = self.api_categories.index("")

    def frame(self, n: int, edge: np.ndarray | None) -> pd.DataFrame:
        """GAP_COLUMNS of the first ``n`` rows; ``edge`` marks the window-edge rows (their
        next_* are <NA>; None: no edge, plain int64 columns as :func:`_merge_sorted` leaves
        them). The four next_*/prev_* columns share one read-only mask (10M gaps: 30 MB
        less than a copy each; a write into one raises instead of changing the others). The
        caller gives ``edge`` up."""
        if edge is not None:
            edge.flags.writeable = False

        def ints(a: np.ndarray):
            return a[:n] if edge is None else pd.arrays.IntegerArray(a[:n], edge)

        cols = {
            "device_id": self.dev[:n], "start_ns": self.start[:n], "end_ns": self.end[:n],
            "gap_ns": self.gap[:n],
            "kind": pd.Categorical.from_codes(self.kind[:n], categories=list(GAP_KINDS)),
            "prev_stream_id": ints(self.prev_stream), "next_stream_id": ints(self.next_stream),
            "next_pid": ints(self.next_pid), "next_corr_id": ints(self.next_corr),
            "next_api": pd.Categorical.from_codes(self.api[:n], categories=self.api_categories),
        }
        return pd.DataFrame(cols, copy=False)


def _api_code_dtype(api_categories: list[str]) -> type[np.signedinteger]:
    """The dtype of next_api's codes: the one pandas gives codes of that many categories
    (so that :meth:`_GapColumns.frame` makes the categorical without a copy)."""
    m = len(api_categories)
    return np.int8 if m < 127 else np.int16 if m < 32767 else np.int32


#: Columns of :class:`_GapSummary`'s longest gaps, as :class:`_GapColumns` names them.
_TOP_COLUMNS = ("start", "end", "gap", "prev_stream", "next_stream", "next_pid", "next_corr",
                "kind", "api")


class _GapSummary(_GapColumns):
    """What the reports read of a gap table, taken in a chunk of gaps at a time as
    :class:`_Chunked` fills it, in place of the table (:func:`measure_gaps_reduced`):
    every gap's length and kind (the device table's quantiles, the per-kind table and the
    histogram come from these alone), the ``limit`` longest gaps longer than ``min_gap_ns``
    whole (what :meth:`GapResult.longest` keeps of the listed gaps), and, given ``wait``
    (table, lo, steps), the launch wait per step (:func:`add_launch_wait`), and given
    ``bins``, the listed inner gaps added to them (:meth:`GapBins.add`; the window's edges
    are left out). ``keep=False``: only the wait and the bins. The fill writes each chunk
    into chunk-long columns (:meth:`slots`), taken in by :meth:`done`.

    The trick for the longest gaps: :func:`longest_gaps`' order, longest first and ties to
    the earlier row, is an order on (length, row), so the longest of the longest of each
    chunk are the longest of all; the chunks come device by device, not in row order, so
    the kept rows carry their row numbers. At 10M gaps: 9 bytes a gap kept (90 MB), where
    the table held ~51 (0.5 GB)."""

    def __init__(self, n: int, api_categories: list[str], device: int | None = None,
                 pid: int | None = None, *, min_gap_ns: int = 0, limit: int = 0,
                 wait: tuple[np.ndarray, int, int] | None = None, keep: bool = True,
                 bins: tuple[GapSink, ...] = ()):
        self.api_categories = api_categories
        self.pid, self.keep, self.bins = pid, keep, bins
        self.min_gap_ns, self.limit = min_gap_ns, limit
        # Kept for every gap (np.empty: only the rows written are faulted in); the device
        # column as :class:`_GapColumns`' (filled by :meth:`_Chunked.run`).
        self.gap_ns = np.empty(n if keep else 0, dtype=np.int64)
        self.kinds = np.empty(n if keep else 0, dtype=np.int8)
        self.dev = np.empty(n, dtype=np.int64) if device is None and keep else np.broadcast_to(
            np.array(device or 0, dtype=np.int64), (n,))
        self._scratch(0)
        self.table: np.ndarray | None = wait[0] if wait is not None else None
        self.lo = wait[1] if wait is not None else 0
        self.wait_ns = np.zeros(wait[2], dtype=np.int64) if wait is not None else None
        # the longest listed gaps so far, in row order (``slot``: the row; ``edge``: a
        # window-edge gap), and the shortest of them once there are ``limit`` (None before)
        self.top = {"slot": np.zeros(0, dtype=np.int64), "edge": np.zeros(0, dtype=bool),
                    **{c: getattr(self, c)[:0].copy() for c in _TOP_COLUMNS}}
        self.cut: int | None = None

    def _scratch(self, m: int) -> None:
        """Chunk-long columns for :meth:`_Chunked._fill` to write (``m`` rows)."""
        self.start, self.end, self.gap, self.prev_stream, self.next_stream, self.next_corr = (
            np.empty(m, dtype=np.int64) for _ in range(6))
        self.next_pid = np.empty(m, dtype=np.int64) if self.pid is None else np.broadcast_to(
            np.array(self.pid, dtype=np.int64), (m,))
        self.kind = np.empty(m, dtype=np.int8)
        self.api = np.empty(m, dtype=_api_code_dtype(self.api_categories))

    def slots(self, at: int, k: int) -> slice:
        if k > len(self.start):
            self._scratch(max(k, min(FILL_CHUNK, 1 << 20)))
        return slice(0, k)

    def done(self, at: int, k: int, device: int) -> None:
        gap, kind = self.gap[:k], self.kind[:k]
        if self.wait_ns is not None:
            rows = np.flatnonzero(kind == GAP_KINDS.index("launch_bound"))
            assert self.table is not None  # set with wait_ns
            add_launch_wait(self.wait_ns, self.next_corr[rows], gap[rows], self.table, self.lo)
        if self.bins:  # the inner gaps (no edge comes here) longer than min_gap_ns
            start, api = self.start[:k], self.api[:k]
            listed = gap > self.min_gap_ns
            sel: Any = slice(None) if bool(listed.all()) else listed
            batch = GapBatch(start[sel], gap[sel], device, kind[sel], api[sel],
                             self.api_categories)
            for b in self.bins:
                b.add_batch(batch)
        if not self.keep:
            return
        self._keep(at, gap, kind)
        if self.limit <= 0:
            return
        # the listed gaps that can be among the longest: as long as the shortest kept
        floor = self.min_gap_ns if self.cut is None else max(self.min_gap_ns, self.cut - 1)
        rows = np.flatnonzero(gap > floor)
        if len(rows) > self.limit:  # rows of one device, in row order: ties to the earlier
            rows = rows[_longest_rows(gap[rows], self.limit)]
        if len(rows):
            self._offer({"slot": rows + at, "edge": np.zeros(len(rows), dtype=bool),
                         **{c: getattr(self, c)[rows] for c in _TOP_COLUMNS}})

    def _keep(self, at: int, gap: np.ndarray, kind: np.ndarray) -> None:
        """Keep the lengths and kinds of table rows [at, at + len(gap))."""
        self.gap_ns[at:at + len(gap)] = gap
        self.kinds[at:at + len(gap)] = kind

    def edge(self, at: int, start: int, end: int, device: int = 0) -> None:
        _edges_to(self.bins, [(device, start, end)], self.min_gap_ns, self.api_categories)
        if not self.keep:
            return
        gap = end - start
        self.gap_ns[at] = gap
        self.kinds[at] = GAP_KINDS.index("window_edge")
        if self.limit > 0 and gap > self.min_gap_ns and (self.cut is None or gap >= self.cut):
            row = {"slot": at, "edge": True, "start": start, "end": end, "gap": gap,
                   "prev_stream": 0, "next_stream": 0, "next_corr": 0,
                   "next_pid": 0 if self.pid is None else self.pid,  # as _GapColumns.edge
                   "kind": GAP_KINDS.index("window_edge"),
                   "api": self.api_categories.index("")}
            self._offer({c: np.array([v], dtype=self.top[c].dtype) for c, v in row.items()})

    def _offer(self, rows: dict[str, np.ndarray]) -> None:
        """Merge ``rows`` into the longest gaps kept (at most ``limit``, in row order)."""
        top = {c: np.concatenate([self.top[c], rows[c]]) for c in self.top}
        order = np.argsort(top["slot"], kind="stable")
        if len(order) > self.limit:
            order = order[_longest_rows(top["gap"][order], self.limit)]
        self.top = {c: v[order] for c, v in top.items()}
        if len(order) >= self.limit:
            self.cut = int(self.top["gap"].min())

    def result(self, n: int, edges: list[int], busy: pd.DataFrame,
               streams: pd.DataFrame | None, window: tuple[int, int] | None,
               ) -> GapResult:
        """``MeasuredGaps(table of n rows, busy, streams, window).result(min_gap_ns)
        .longest(limit)``; ``edges``: the table's window-edge rows (:meth:`_Chunked.run`)."""
        narrow = pd.DataFrame({
            "device_id": self.dev[:n], "gap_ns": self.gap_ns[:n],
            "kind": pd.Categorical.from_codes(self.kinds[:n], categories=list(GAP_KINDS)),
        }, copy=False)
        result = MeasuredGaps(gaps=narrow, busy=busy, streams=streams,
                              window=window).result(self.min_gap_ns)
        listed = len(result.gaps)  # the gaps longer than min_gap_ns
        t = self.top
        dev = self.dev[t["slot"]]
        del narrow
        # the whole table's next_*/prev_* columns are Int64 when it holds an edge
        mask = t["edge"] if edges else None
        if mask is not None:
            mask.flags.writeable = False

        def ints(a: np.ndarray):
            return a if mask is None else pd.arrays.IntegerArray(a, mask)

        top = pd.DataFrame({
            "device_id": dev, "start_ns": t["start"], "end_ns": t["end"],
            "gap_ns": t["gap"],
            "kind": pd.Categorical.from_codes(t["kind"], categories=list(GAP_KINDS)),
            "prev_stream_id": ints(t["prev_stream"]), "next_stream_id": ints(t["next_stream"]),
            "next_pid": ints(t["next_pid"]), "next_corr_id": ints(t["next_corr"]),
            "next_api": pd.Categorical.from_codes(t["api"], categories=self.api_categories),
        }, copy=False)
        return dataclasses.replace(result, gaps=top,
                                   total=listed if listed > self.limit else None)


#: Bits of a gap's position among its device's gaps in a :class:`_SlicedSummary` slot.
_SLOT_BITS = 40


class _SlicedSummary(_GapSummary):
    """The :class:`_GapSummary` of a sweep over slices (:class:`_SliceSweep`), where a gap's
    table row is not known before the last slice (it follows every gap of the devices with
    lower ids): each gap is taken in at a slot ``key << _SLOT_BITS`` plus its position among
    its device's gaps, ``key`` rising with the device id (:meth:`_SliceSweep.key`), so that
    slots order as the rows will (the longest gaps' tie order); the lengths and kinds are
    kept per key in the chunks they come in, placed by :meth:`_SliceSweep.finish`."""

    def __init__(self, api_categories: list[str], pid: int, *, min_gap_ns: int, limit: int,
                 wait: tuple[np.ndarray, int, int] | None, keep: bool,
                 bins: tuple[GapSink, ...] = ()):
        super().__init__(0, api_categories, pid=pid, min_gap_ns=min_gap_ns, limit=limit,
                         wait=wait, keep=keep, bins=bins)
        self.kept: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}

    def _keep(self, at: int, gap: np.ndarray, kind: np.ndarray) -> None:
        self.kept.setdefault(at >> _SLOT_BITS, []).append((gap.copy(), kind.copy()))


def _sweep_carried(start: np.ndarray, end: np.ndarray, code: np.ndarray | None,
                   cmax: np.ndarray, cpos: np.ndarray, positions: bool = True,
                   chunk: int | None = None):
    """:func:`sweep_chunks` of a slice of a longer run of rows, each group's running max end
    and holder carried in from the slices before: ``cmax``/``cpos`` per code (in place; cpos
    -1: no row yet). ``code``: ints in [0, len(cmax)), None: one group."""
    return sweep_chunks(start, end, code, len(cmax), positions, chunk, carry=(cmax, cpos))


def _slice_codes(arrays: list[np.ndarray]) -> tuple[np.ndarray | None, list[np.ndarray]]:
    """Per row of a slice, a code of its tuple of ``arrays``' values among the slice's
    distinct tuples (in sorted tuple order), and each array's value per code; None for the
    codes where there is one tuple (:func:`_dense_code`, else ``np.unique``)."""
    if all(int(a.min()) == int(a.max()) for a in arrays):
        return None, [a[:1].astype(np.int64) for a in arrays]
    coded = _dense_code(arrays)
    if coded is not None:
        return coded
    uniq, inv = np.unique(np.stack(arrays), axis=1, return_inverse=True)
    return inv.reshape(-1), list(uniq)


class _Carry:
    """Per group of ops (a device, or a device's stream), what a sweep carries from slice to
    slice: the group's key, running max end and whether it has an op yet, its busy figures
    (:class:`_BusyStats`), and (``held``) the columns (:attr:`_OpColumns.NAMES`) of the op
    that reached the max, which the next gap's classification reads. Groups are coded in
    the order they come (:meth:`codes`)."""

    def __init__(self, held: bool = False):
        self.codes_by_key: dict[tuple[int, ...], int] = {}
        self.keys: list[tuple[int, ...]] = []
        self.cmax = np.zeros(0, dtype=np.int64)
        self.seen = np.zeros(0, dtype=bool)
        self.stats = _BusyStats(0)
        self.held = {c: np.zeros(0, dtype=bool if c in ("in_graph", "copy") else np.int64)
                     for c in _OpColumns.NAMES} if held else None

    def codes(self, values: list[np.ndarray]) -> np.ndarray:
        """The codes of the groups whose keys are ``values`` (one array per key column),
        new groups added."""
        keys = list(zip(*(v.tolist() for v in values), strict=True))
        new = [k for k in keys if k not in self.codes_by_key]
        if new:
            for k in new:
                self.codes_by_key[k] = len(self.keys)
                self.keys.append(k)
            m = len(new)
            self.cmax = np.concatenate([self.cmax, np.zeros(m, dtype=np.int64)])
            self.seen = np.concatenate([self.seen, np.zeros(m, dtype=bool)])
            self.stats.grow(m)
            if self.held is not None:
                self.held = {c: np.concatenate([a, np.zeros(m, dtype=a.dtype)])
                             for c, a in self.held.items()}
        return np.array([self.codes_by_key[k] for k in keys], dtype=np.intp)

    def begin(self, lut: np.ndarray, n: int, positions: bool
              ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray] | None]:
        """The carry of groups ``lut`` into a slice of ``n`` rows, coded by their position in
        ``lut``: (cmax, cpos) for :func:`_sweep_carried` (a group's holder at position ``n +``
        its code: past the slice's rows) and the holders' columns (:class:`_OpColumns`'
        ``held``)."""
        cmax = self.cmax[lut]
        seen = self.seen[lut]
        cpos = np.where(seen, n + np.arange(len(lut)) if positions else 0, -1).astype(np.int64)
        held = {c: a[lut] for c, a in self.held.items()} if self.held is not None else None
        return cmax, cpos, held

    def end(self, lut: np.ndarray, cmax: np.ndarray, cpos: np.ndarray,
            cols: _OpColumns | None = None) -> None:
        """Carry groups ``lut`` out of the slice swept (``cols``: its columns, to read the
        new holders of the max from)."""
        self.cmax[lut] = cmax
        self.seen[lut] = cpos >= 0
        if self.held is not None and cols is not None:
            moved = np.flatnonzero((cpos >= 0) & (cpos < cols.n))  # a row of this slice
            for c, a in self.held.items():
                a[lut[moved]] = cols.take(c, cpos[moved])


class _SliceShared:
    """What the measurements of one :func:`measure_gaps_sliced_each` share: the calls' one
    process (None: not what :class:`_Chunked` takes) and, made at the first sweep, their
    lookups (:class:`_Classify`)."""

    def __init__(self, calls: pd.DataFrame):
        self.calls = calls
        self.pid = _calls_pid(calls)
        self._classify: _Classify | None = None

    def classify(self) -> _Classify:
        if self._classify is None:
            self._classify = _Classify(_Chunked.lookups(pd.DataFrame(), self.calls))
        return self._classify

    def drop(self) -> None:
        self._classify = None


def _slice_arrays(ops: pd.DataFrame) -> dict[str, np.ndarray] | None:
    """:func:`_op_arrays` of a slice of ops whose columns' dtypes are what :class:`_Chunked`
    takes (:func:`_ops_fit`'s first test), else None."""
    if any(ops[c].dtype != np.int64 for c in _OP_INTS) or ops["in_graph"].dtype != bool or (
            not isinstance(ops["kind"].dtype, pd.CategoricalDtype)):
        return None
    return _op_arrays(ops)


def _live_arrays(cols: dict[str, np.ndarray], window: tuple[int, int] | None
                 ) -> dict[str, np.ndarray]:
    """:func:`_live_ops` of a slice's :func:`_slice_arrays`: the rows that end after they
    start once clipped to ``window`` (an op outside it ends at or before its clipped start),
    their times clipped."""
    start, end = cols["start_ns"], cols["end_ns"]
    if window is not None and (int(start.min()) < window[0] or int(end.max()) > window[1]):
        start, end = np.maximum(start, window[0]), np.minimum(end, window[1])
    live = end > start
    if live.all():
        return {**cols, "start_ns": start, "end_ns": end}
    rows = np.flatnonzero(live)
    return {c: a if c == "is_copy" else a[rows]
            for c, a in {**cols, "start_ns": start, "end_ns": end}.items()}


class _SlicedRun:
    """One measurement of :func:`measure_gaps_sliced_each` through the slices: its live ops
    (:func:`_live_ops`) held while they are fewer than CHUNKED_MIN_OPS, then swept
    (:class:`_SliceSweep`: the held ones first); every live slice held where the sweep
    does not apply (the whole measurement, :meth:`fallback`); ``lost``: the sweep failed
    after slices were let go (read them again into :meth:`hold`)."""

    def __init__(self, ask: GapAsk, shared: _SliceShared):
        self.ask, self.shared = ask, shared
        self.held: list[pd.DataFrame] = []
        self.rows = 0
        self.empty: pd.DataFrame | None = None  # an empty live slice (no op live at all)
        self.sweep: _SliceSweep | None = None
        # measure_gaps_reduced's chunked sweep may apply: one process's calls, not every
        # gap listed
        self.may_sweep = shared.pid is not None and (ask.limit is not None or not ask.tables)
        self.lost = False

    def add(self, ops: pd.DataFrame, cols: dict[str, np.ndarray] | None) -> None:
        """Take in a slice; ``cols``: its :func:`_slice_arrays`."""
        if self.lost or (self.sweep is not None and not len(ops)):
            return
        if self.sweep is not None:
            live = _live_arrays(cols, self.ask.window) if cols is not None else None
            if live is None or (len(live["start_ns"]) and not self.sweep.add(live)):
                self.sweep, self.lost = None, True
            return
        self.hold(_live_ops(ops, self.ask.window))
        if self.may_sweep and self.rows >= max(CHUNKED_MIN_OPS, 1):
            sweep = _SliceSweep(self.ask, self.shared)
            if all((c := _slice_arrays(f)) is not None and sweep.add(c) for f in self.held):
                self.sweep, self.held = sweep, []
            else:
                self.may_sweep = False  # hold them all: the whole measurement

    def hold(self, live: pd.DataFrame) -> None:
        if len(live):
            self.held.append(live)
            self.rows += len(live)
        elif self.empty is None:
            self.empty = live.iloc[0:0].copy()

    def finish(self) -> tuple[GapResult | None, np.ndarray | None] | None:
        """The sweep's result, or None (fall back; ``lost`` where its slices are gone)."""
        if self.sweep is None:
            return None
        got = self.sweep.finish()
        self.sweep = None
        self.lost = got is None
        return got

    def fallback(self, calls: pd.DataFrame, concat: Callable[[list[pd.DataFrame]], pd.DataFrame]
                 ) -> tuple[GapResult | None, np.ndarray | None]:
        """:func:`measure_gaps_reduced` of the live slices held, joined by ``concat``."""
        held, self.held = self.held, []
        if not held:
            held = [self.empty if self.empty is not None else pd.DataFrame(
                {c: pd.Series(dtype="int64") for c in _OP_INTS})]
        ops = concat(held)
        del held
        a = self.ask
        return measure_gaps_reduced(ops, calls, a.window, a.min_gap_ns, a.limit, a.wait,
                                    a.tables, a.bins)


class _SliceSweep:
    """:meth:`_Chunked.run` into a :class:`_GapSummary` (and :func:`_stream_table_swept`)
    over the live ops of :func:`measure_gaps_sliced` a slice at a time (:meth:`add`), the
    result made after the last (:meth:`finish`). The trick: a slice's first op of a device
    is swept against that device's carry (:class:`_Carry`), whose holder of the running max
    end sits at a position past the slice's rows (:class:`_OpColumns`' ``held``), as a chunk
    of sweep_chunks is swept against the chunks before."""

    def __init__(self, ask: GapAsk, shared: _SliceShared):
        assert shared.pid is not None  # (_SlicedRun.may_sweep)
        self.ask, self.shared, self.pid = ask, shared, shared.pid
        self.bins = _fresh_bins(ask.bins)  # into ask.bins once finished (a fallback: never)
        self.out: _SlicedSummary | None = _SlicedSummary(
            shared.classify().api_categories, self.pid, min_gap_ns=ask.min_gap_ns,
            limit=ask.limit or 0, wait=ask.wait, keep=ask.tables, bins=self.bins)
        self.devices = _Carry(held=True)
        self.streams = _Carry() if ask.tables else None
        self.cursor: list[int] = []  # per device code: its gaps so far
        self.last: tuple[int, int] | None = None  # (start, end) of the last op swept
        self.d0: int | None = None  # the first device's id (:meth:`key`)
        self.d_lo = self.d_hi = 0  # the lowest and highest device ids

    def key(self, dev: np.ndarray) -> np.ndarray:
        """:class:`_SlicedSummary`'s slot base of devices ``dev`` (ids < _MAX_CODES apart)."""
        assert self.d0 is not None
        return (dev.astype(np.int64) - self.d0 + _MAX_CODES) << _SLOT_BITS

    def add(self, live: dict[str, np.ndarray]) -> bool:
        """Sweep a non-empty slice of live ops (:func:`_live_arrays`); False: the chunked
        sweep does not apply (a check of :meth:`_Chunked.of` or :meth:`_Chunked.run`
        fails)."""
        start, end = live["start_ns"], live["end_ns"]
        p, corr = live["pid"], live["corr_id"]
        if not (_exact_float(start) and _exact_float(end)) or not (
                int(p.min()) == int(p.max()) == self.pid) or int(corr.min()) < 0 or int(
                corr.max()) >= 2**32:
            return False  # (as _ops_fit)
        head = (int(start[0]), int(end[0]))
        if (self.last is not None and head < self.last) or not arrays_sorted([start, end]):
            return False
        self.last = (int(start[-1]), int(end[-1]))
        dev = live["device_id"]
        code, (devs,) = _slice_codes([dev])
        if self.d0 is None:
            self.d0 = self.d_lo = self.d_hi = int(devs[0])
        self.d_lo, self.d_hi = min(self.d_lo, int(devs[0])), max(self.d_hi, int(devs[-1]))
        if self.d_hi - self.d_lo + 1 > _MAX_CODES:
            return False  # as _dense_code of the devices in run()
        n = len(start)
        carry = self.devices
        lut = carry.codes([devs])
        self.cursor += [0] * (len(carry.keys) - len(self.cursor))
        cmax, cpos, held = carry.begin(lut, n, positions=True)
        cols = _OpColumns(live, held)
        classify = self.shared.classify()
        keys = self.key(devs)
        out = self.out
        assert out is not None  # (until finish)
        for c, rows, st, en, gap, prev_end, prev_pos in _sweep_carried(
                start, end, code, cmax, cpos, chunk=FILL_CHUNK):
            g = int(lut[c])
            sel = np.flatnonzero(gap > 0)
            carry.stats.add(g, st, en, gap, len(sel))
            if not len(sel):
                continue
            o = self.cursor[g]
            self.cursor[g] += len(sel)
            assert self.cursor[g] < 1 << _SLOT_BITS
            classify.write(out, int(keys[c]) + o, prev_end[sel], st[sel], cols, rows[sel],
                           prev_pos[sel], int(devs[c]))
        carry.end(lut, cmax, cpos, cols)
        del cols
        if self.streams is not None:  # (device, stream) busy figures, as _stream_table_swept
            code, values = _slice_codes([dev, live["stream_id"]])
            lut = self.streams.codes(values)
            cmax, cpos, _ = self.streams.begin(lut, n, positions=False)
            for c, _rows, st, en, gap, _pe, _pp in _sweep_carried(start, end, code, cmax, cpos,
                                                                  positions=False):
                self.streams.stats.add(int(lut[c]), st, en, gap, np.count_nonzero(gap > 0))
            self.streams.end(lut, cmax, cpos)
        return True

    def finish(self) -> tuple[GapResult | None, np.ndarray | None] | None:
        """:func:`measure_gaps_reduced`'s result (as :meth:`_GapSummary.result` makes it
        after :meth:`_Chunked.run`); None where there is no inner gap (the whole path)."""
        ask, sink = self.ask, self.out
        assert sink is not None
        self.out = None
        ids = np.array([k[0] for k in self.devices.keys], dtype=np.int64)
        order = np.argsort(ids)
        devs = ids[order]
        busy = self.devices.stats.taken(order).frame(["device_id"], [devs])
        window = ask.window
        lead = (busy["first_start_ns"].to_numpy() > window[0]) if window is not None else (
            np.zeros(len(devs), dtype=bool))
        layout = _Layout.of(busy, lead, window)
        if not layout.count.sum():
            return None
        _edges_to(self.bins, layout.edges(devs, busy, window), ask.min_gap_ns,
                  sink.api_categories)
        _commit_bins(ask.bins, self.bins)
        if not ask.tables:
            return None, sink.wait_ns
        out = _GapSummary(layout.n, sink.api_categories,
                          device=int(devs[0]) if len(devs) == 1 else None, pid=self.pid,
                          min_gap_ns=ask.min_gap_ns, limit=ask.limit or 0)
        keys = self.key(devs) >> _SLOT_BITS
        for i, key in enumerate(keys.tolist()):
            at = int(layout.base[i])
            kept = sink.kept.pop(key, [])[::-1]
            while kept:  # each chunk given back once in place
                gap, kind = kept.pop()
                out.gap_ns[at:at + len(gap)] = gap
                out.kinds[at:at + len(gap)] = kind
                at += len(gap)
                del gap, kind
            assert at == int(layout.base[i] + layout.count[i])
        edges = layout.place(out, devs, busy, window)
        top = sink.top
        if len(top["slot"]):  # each device's slots to its rows
            slot = top["slot"]
            i = np.searchsorted(keys, slot >> _SLOT_BITS)
            out._offer({**top, "slot": layout.base[i] + (slot & ((1 << _SLOT_BITS) - 1))})
        out.wait_ns = sink.wait_ns
        del sink
        streams = self._stream_table()
        return out.result(layout.n, edges, busy, streams, window), out.wait_ns

    def _stream_table(self) -> pd.DataFrame:
        """:func:`_stream_table_swept`'s table (:func:`_stream_table`'s, beyond _MAX_CODES
        pairs: the same figures)."""
        assert self.streams is not None
        keys = ["device_id", "stream_id"]
        dev, stream = (np.array([k[i] for k in self.streams.keys], dtype=np.int64)
                       for i in (0, 1))
        order = np.lexsort((stream, dev))
        u = self.streams.stats.taken(order).frame(keys, [dev[order], stream[order]])
        return u[[*keys, "ops", "busy_ns", "span_ns", "gap_count", "gaps_ns", "max_gap_ns"]]


def _is_copy(kinds: pd.Series, rows: np.ndarray) -> np.ndarray:
    """True where the op at position ``rows`` is a copy or memset (``kinds``: ops["kind"])."""
    if isinstance(kinds.dtype, pd.CategoricalDtype):  # per category, then by code (-1: NaN)
        flag = np.append(kinds.cat.categories.isin(["memcpy", "memset"]), False)
        return flag[kinds.cat.codes.to_numpy()[rows]]
    return kinds.isin(["memcpy", "memset"]).to_numpy(dtype=bool)[rows]


def _frame_gap_rows(g: pd.DataFrame, ops: pd.DataFrame) -> dict[str, np.ndarray]:
    """The gap rows of :func:`group_gaps`' table ``g`` (any column types): the op after each
    gap and, through ``prev_idx``, the op before it."""
    sel = g["gap_ns"].to_numpy() > 0
    if not sel.any():
        return {"gap_end": np.zeros(0, dtype=np.int64)}
    every = bool(sel.all())

    def col(c: str, **kw) -> np.ndarray:  # the gap rows' values, no copy of the whole frame
        a = g[c].to_numpy(**kw)
        return a if every else a[sel]

    prev = _rows_at(ops, col("prev_idx", dtype=np.int64, na_value=0),
                    ["stream_id", "pid", "corr_id", "in_graph", "kind"])
    out = {"device_id": col("device_id"), "gap_start": col("prev_end_ns", dtype=np.int64,
                                                            na_value=0),
           "gap_end": col("start_ns", dtype=np.int64), "stream_id": col("stream_id"),
           "pid": col("pid"), "corr_id": col("corr_id"), "in_graph": col("in_graph", dtype=bool),
           "prev_copy": prev.pop("kind")}
    out.update({"prev_" + c: v for c, v in prev.items()})
    return out


def _next_launch(pid: np.ndarray, corr: np.ndarray, calls: pd.DataFrame):
    """The launch call of each gap's next operation, joined on (pid, correlationId): its start
    and end (int64, or float64 with NaN where unknown), ``known``, and its name (``next_api``)."""
    nxt = pd.DataFrame({"pid": pid, "corr_id": corr}, copy=False)
    take = match_pairs(nxt, calls) if len(calls) and isinstance(
        calls["name"].dtype, pd.CategoricalDtype) else None  # the call's row, -1 where none
    if take is not None:
        known = take >= 0
        take[~known] = 0  # unknown rows read call 0, masked by ``known`` below
        c_start, c_end = calls["start_ns"].to_numpy(), calls["end_ns"].to_numpy()
        api_start, api_end = c_start[take], c_end[take]  # unknown rows: masked by ``known``
        if not (_exact_float(c_start) and _exact_float(c_end)):  # compare as the float path
            api_start = np.where(known, api_start, np.nan)
            api_end = np.where(known, api_end, np.nan)
        # A categorical over the API names plus "" (unknown): one byte or two per gap, not a
        # string object each (10M gaps).
        cats = [str(c) for c in calls["name"].cat.categories]
        blank = cats.index("") if "" in cats else len(cats)
        next_api = pd.Categorical.from_codes(
            np.where(known, calls["name"].cat.codes.to_numpy()[take], blank),
            categories=cats if blank < len(cats) else [*cats, ""])
        return api_start, api_end, known, next_api
    launch = calls[["pid", "corr_id", "start_ns", "end_ns", "name", "family"]]
    launch = launch.drop_duplicates(["pid", "corr_id"])
    nxt = nxt.merge(launch, how="left", on=["pid", "corr_id"], suffixes=("", "_api"))
    api_start = nxt["start_ns"].to_numpy(dtype="float64", na_value=np.nan)
    api_end = nxt["end_ns"].to_numpy(dtype="float64", na_value=np.nan)
    return api_start, api_end, ~np.isnan(api_start), _str_array(nxt["name"])


def _exact_float(a: np.ndarray) -> bool:
    """True when int64 ``a`` converts to float64 exactly (|values| < 2**53): then comparing
    the ints gives what comparing them as floats would."""
    return a.dtype == np.int64 and (not len(a) or (int(a.min()) > -2**53 and int(a.max()) < 2**53))


def _inner_gaps(r: dict[str, np.ndarray], calls: pd.DataFrame,
                columns: bool = False) -> pd.DataFrame | dict[str, object]:
    """The gaps between operations, classified (GAP_KINDS); ``r``: the gap rows (see
    :meth:`_Sweep.gap_rows`), in (device, start) order. ``columns``: the table as its dict of
    columns (for :func:`_merge_sorted`): a frame would copy the int64 columns into one block
    and copy that block again as each column is taken out."""
    if not len(r["gap_end"]):
        return _empty_gaps()
    gap_start, gap_end = r["gap_start"], r["gap_end"]
    pid, corr, in_graph = r["pid"], r["corr_id"], r["in_graph"]
    api_start, api_end, known, next_api = _next_launch(pid, corr, calls)
    if api_end.dtype == np.int64 and not _exact_float(gap_start):
        api_start = np.where(known, api_start, np.nan)
        api_end = np.where(known, api_end, np.nan)

    prev_graph = r["prev_in_graph"].astype(bool)
    same_replay = prev_graph & in_graph & (r["prev_pid"] == pid) & (r["prev_corr_id"] == corr)
    # Later rules only decide where the earlier ones did not: written in reverse order, each
    # over the rows still open (as np.select, first true wins); the sync search only where
    # it can decide.
    code = np.full(len(gap_end), GAP_KINDS.index("other"), dtype=np.int8)
    code[prev_graph | in_graph] = GAP_KINDS.index("between_replays")
    code[r["prev_copy"]] = GAP_KINDS.index("input_copy")
    code[known & (api_end > gap_start)] = GAP_KINDS.index("launch_bound")
    code[_sync_returned_in_gap(calls, pid, gap_start, api_start, known & ~same_replay)] = (
        GAP_KINDS.index("sync_bound"))
    code[same_replay] = GAP_KINDS.index("in_replay")
    del api_start, api_end, known
    # Categorical over GAP_KINDS from the start: gpu_gaps() makes the column that anyway.
    kind = pd.Categorical.from_codes(code, categories=list(GAP_KINDS))
    table = {
        "device_id": r["device_id"],
        "start_ns": gap_start,
        "end_ns": gap_end,
        "gap_ns": gap_end - gap_start,
        "kind": kind,
        "prev_stream_id": r["prev_stream_id"],
        "next_stream_id": r["stream_id"],
        "next_pid": pid,
        "next_corr_id": corr,
        "next_api": next_api,
    }
    return table if columns else pd.DataFrame(table, copy=False)


def _rows_at(ops: pd.DataFrame, labels: np.ndarray, cols: list[str]) -> dict[str, np.ndarray]:
    """``ops.loc[labels, cols]`` as numpy arrays, taking only those columns (``kind``: True
    for copies and memsets): a ``.loc`` of every column of a million-row frame costs more."""
    index = ops.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        pos = labels
    elif index.is_monotonic_increasing and index.is_unique:
        pos = np.searchsorted(index.to_numpy(), labels)
    else:
        pos = index.get_indexer(labels)
    if len(pos) and (pos.min() < 0 or pos.max() >= len(ops)):
        raise KeyError("gap before an operation that is not in the table")
    out = {}
    for c in cols:
        if c == "kind":
            out[c] = ops["kind"].isin(["memcpy", "memset"]).to_numpy(dtype=bool)[pos]
        else:
            out[c] = ops[c].to_numpy()[pos]
    return out


def _merge_sorted(gaps: pd.DataFrame | dict[str, Any],
                  edges: pd.DataFrame) -> pd.DataFrame | None:
    """``concat([gaps, edges]).sort_values(["device_id", "start_ns"], kind="stable")`` with
    ``kind`` over GAP_KINDS, built column by column: the window-edge rows (two per device at
    most) are inserted into the inner gaps, which are in (device, start) order already.
    None when that fast path does not apply (then the caller concatenates and sorts).
    ``gaps`` may be a frame or its dict of columns; either way its columns are taken out.
    The dict comes from the sweep (:meth:`_Sweep.gap_rows`), whose gaps are in (device,
    start) order by construction: within a device a gap starts at the running max of the
    ends before it, which the gap's next op then exceeds. Only a frame is checked."""
    if not len(gaps["gap_ns"]) or not isinstance(gaps["kind"].dtype, pd.CategoricalDtype):
        return None
    dev = np.asarray(gaps["device_id"])
    start = np.asarray(gaps["start_ns"])
    if dev.dtype != np.int64 or start.dtype != np.int64:
        return None
    if not (isinstance(gaps, dict) or arrays_sorted([dev, start])):
        return None
    if not len(edges):
        if isinstance(gaps, dict):
            table, gaps = gaps, None
            return pd.DataFrame({c: table.pop(c) for c in GAP_COLUMNS}, copy=False)
        return gaps
    edges = sort_stable(edges, ["device_id", "start_ns"])
    e_dev = edges["device_id"].to_numpy(dtype=np.int64)
    e_start = edges["start_ns"].to_numpy(dtype=np.int64)
    # Stable: an edge goes after the inner gaps with the same (device, start).
    lo = np.searchsorted(dev, e_dev, "left")
    hi = np.searchsorted(dev, e_dev, "right")
    at = np.array([a + np.searchsorted(start[a:b], s, "right")
                   for a, b, s in zip(lo, hi, e_start, strict=True)], dtype=np.int64)
    api = gaps["next_api"].dtype
    if not (api == edges["next_api"].dtype or isinstance(api, pd.CategoricalDtype)) or any(
            np.asarray(gaps[c]).dtype != np.int64 or edges[c].notna().any()
            for c in ("prev_stream_id", "next_stream_id", "next_pid", "next_corr_id")):
        return None
    # Each column of ``gaps`` (the caller's own table) is dropped once its merged copy exists.
    data: dict[str, object] = {}
    at_edge = np.zeros(len(dev) + len(at), dtype=bool)  # where np.insert puts the edge rows
    at_edge[at + np.arange(len(at))] = True
    for c in GAP_COLUMNS:
        col, ecol = gaps.pop(c), edges[c]
        if not isinstance(col, pd.Series):
            col = pd.Series(col, copy=False)
        if c == "kind":
            codes = np.insert(col.cat.codes.to_numpy(), at, GAP_KINDS.index("window_edge"))
            data[c] = pd.Categorical.from_codes(codes, dtype=col.dtype)
        elif c in ("device_id", "start_ns", "end_ns", "gap_ns"):
            data[c] = np.insert(col.to_numpy(dtype=np.int64), at, ecol.to_numpy(dtype=np.int64))
        elif c == "next_api" and isinstance(col.dtype, pd.CategoricalDtype):
            blank = list(col.cat.categories).index("")
            data[c] = pd.Categorical.from_codes(
                np.insert(col.cat.codes.to_numpy(), at, blank), dtype=col.dtype)
        elif c == "next_api":
            arr = col.array
            data[c] = type(arr)._concat_same_type([arr, ecol.array]).take(
                np.insert(np.arange(len(arr)), at, len(arr) + np.arange(len(ecol))))
        else:  # prev_stream_id, next_*: int64 inner, <NA> at the edges -> Int64
            data[c] = pd.arrays.IntegerArray(np.insert(col.to_numpy(), at, 0), at_edge.copy())
        del col
    return pd.DataFrame(data, copy=False)


def _str_array(names: pd.Series) -> object:
    """``names`` with NaN as "", as the column pandas builds from Python strings, but made
    from the categories (one string each) rather than one Python object per row."""
    target = pd.Series(np.array(["x"], dtype=object)).dtype  # str (pandas 3) or object
    if not isinstance(names.dtype, pd.CategoricalDtype) or target == np.dtype(object):
        return names.astype(object).fillna("").astype(str).to_numpy()
    import pyarrow as pa

    cats = [str(c) for c in names.cat.categories]
    codes = names.cat.codes.to_numpy()
    codes = np.where(codes < 0, len(cats), codes).astype(np.int32)
    dictionary = pa.array([*cats, ""], type=pa.large_string())
    values = pa.DictionaryArray.from_arrays(pa.array(codes), dictionary).dictionary_decode()
    return pd.array(values, dtype=target)


def _sync_returned_in_gap(calls, pids, gap_start, api_start, need) -> np.ndarray:
    """True where a sync call of the same process ended inside [gap start, next launch]; looked
    up only where ``need`` (the next launch is known, and no earlier rule decided)."""
    out = np.zeros(len(pids), dtype=bool)
    rows = np.flatnonzero((calls["family"] == L.SYNC).to_numpy(dtype=bool))
    if not len(rows):
        return out
    s_pid = calls["pid"].to_numpy()[rows]
    s_start = calls["start_ns"].to_numpy(dtype=np.int64)[rows]
    s_end = calls["end_ns"].to_numpy(dtype=np.int64)[rows]
    one = pids.dtype == np.int64 and len(pids) and pids.min() == pids.max()
    for pid in (pids[:1] if one else np.unique(pids)):
        mine = s_pid == pid
        if not mine.any():
            continue
        every = bool(mine.all())
        ends = s_end if every else s_end[mine]
        by_end = np.argsort(ends, kind="stable")
        ends, starts_by_end = ends[by_end], (s_start if every else s_start[mine])[by_end]
        want = need if one else (pids == pid) & need
        if one and np.count_nonzero(want) * 4 >= 3 * len(want):
            # Most gaps: every row at once, masked after (no positions, no gathers of the
            # gaps' columns); rows not wanted are searched too, and dropped by ``want``.
            out |= want & _returned_in_gap(ends, starts_by_end, gap_start, api_start)
            continue
        idx = np.flatnonzero(want)
        out[idx] = _returned_in_gap(ends, starts_by_end, gap_start[idx], api_start[idx])
    return out


def _edge_gaps(ops: pd.DataFrame, window: tuple[int, int] | None,
               busy: pd.DataFrame | None = None) -> pd.DataFrame:
    """The window-edge gaps; ``busy``: the device busy table of plain int64 ``ops`` (it holds
    each device's first start and last end), else None (group the ops)."""
    if window is None or ops.empty:
        return _empty_gaps()
    w0, w1 = window
    rows = []
    spans: Iterator[tuple[Any, Any, Any]]
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
        return _empty_gaps()
    # Column by column, in one frame: assigning each column to a frame cost ~5 ms of pandas
    # overhead per call, a fifth of a small trace's gap stage.
    n = len(rows)
    g_start: list[Any] | np.ndarray
    g_end: list[Any] | np.ndarray
    dev, g_start, g_end = (list(c) for c in zip(*rows, strict=True))
    g_start = np.array(g_start, dtype=np.int64)
    g_end = np.array(g_end, dtype=np.int64)
    data = {
        "device_id": pd.Series(dev).to_numpy(),  # the dtype a frame of the tuples gives
        "start_ns": g_start,
        "end_ns": g_end,
        "gap_ns": g_end - g_start,
        "kind": pd.Categorical.from_codes(np.full(n, GAP_KINDS.index("window_edge")),
                                          categories=list(GAP_KINDS)),
    }
    for c in ("prev_stream_id", "next_stream_id", "next_pid", "next_corr_id"):
        data[c] = pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    data["next_api"] = pd.Series([""] * n).array
    return pd.DataFrame(data, copy=False)


def _device_table(busy, gaps, window) -> pd.DataFrame:
    """``busy``: ``union_busy(ops, ["device_id"])`` of the ops (None: there is none)."""
    cols = ["device_id", "window_start_ns", "window_end_ns", "window_ns", "busy_ns", "idle_ns",
            "idle_pct", "gap_count", "gap_p50_ns", "gap_p95_ns", "gap_max_ns"]
    if busy is None:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    u = busy
    g_dev = gaps["device_id"].to_numpy()
    g_ns = gaps["gap_ns"]
    g_ns = g_ns.to_numpy() if g_ns.dtype == np.int64 else g_ns
    rows = []
    for r in u.itertuples(index=False):
        w0, w1 = window if window is not None else (r.first_start_ns, r.last_end_ns)
        on_dev = g_dev == r.device_id
        dg = g_ns if on_dev.all() else g_ns[on_dev]
        # both quantiles from one np.quantile (the same figures as one call each); of the
        # int64 gaps themselves when float64 holds them exactly (the same interpolation,
        # without a float copy of every gap)
        exact = isinstance(dg, np.ndarray) and _exact_float(dg)
        p50, p95 = (float(q) for q in np.quantile(dg if exact else np.asarray(
            dg, dtype=np.float64), [0.5, 0.95])) if len(dg) else (None, None)
        win = int(w1 - w0)
        idle = win - int(r.busy_ns)
        rows.append({
            "device_id": int(r.device_id), "window_start_ns": int(w0), "window_end_ns": int(w1),
            "window_ns": win, "busy_ns": int(r.busy_ns), "idle_ns": idle,
            "idle_pct": 100.0 * idle / win if win else 0.0,
            "gap_count": int(len(dg)), "gap_p50_ns": p50, "gap_p95_ns": p95,
            "gap_max_ns": int(dg.max()) if len(dg) else None,
        })
    return pd.DataFrame(rows, columns=cols)


@dataclass
class _KindBins:
    """Gap counts and total ns of one device's gaps per (kind, histogram bin)."""

    device_id: int
    counts: np.ndarray  # [len(GAP_KINDS), len(HIST_EDGES_US)]
    totals: np.ndarray


def _kind_bin_sums(gaps: pd.DataFrame) -> _KindBins | None:
    """The figures of :func:`_by_kind` and :func:`histogram` from one pass: the trick is one
    code per gap, ``kind * bins + bin``, whose counts and exact sums, summed over bins or
    over kinds, are each table's (a chunk of gaps at a time, as :func:`histogram`). None
    unless the gaps are of one device, with int64 lengths at or above 0 and a kind each."""
    if not len(gaps):
        return None
    kinds, dev, ns = gaps["kind"], gaps["device_id"], gaps["gap_ns"]
    if not (isinstance(kinds.dtype, pd.CategoricalDtype) and list(kinds.cat.categories) == list(
            GAP_KINDS) and dev.dtype.kind in "iu" and ns.dtype == np.int64):
        return None
    d, v, codes = dev.to_numpy(), ns.to_numpy(), kinds.cat.codes.to_numpy()
    if d.min() != d.max() or codes.min() < 0 or v.min() < 0:
        return None
    nb = len(HIST_EDGES_US)
    n = len(GAP_KINDS) * nb
    counts = np.zeros(n, dtype=np.int64)
    totals = np.zeros(n, dtype=np.int64)
    for a in range(0, len(v), _HIST_CHUNK):  # chunk-sized temporaries
        vc = v[a:a + _HIST_CHUNK]
        code = codes[a:a + _HIST_CHUNK].astype(np.intp)
        code *= nb
        code += _hist_bins(vc)
        counts += counts_by_code(code, n)
        totals += sums_by_code(code, vc, n)
    return _KindBins(int(d[0]), counts.reshape(len(GAP_KINDS), nb),
                     totals.reshape(len(GAP_KINDS), nb))


def _by_kind_of(kb: _KindBins, devices: pd.DataFrame) -> pd.DataFrame:
    """:func:`_by_kind` from :func:`_kind_bin_sums` of the gaps."""
    rows = []
    counts, totals = kb.counts.sum(axis=1).tolist(), kb.totals.sum(axis=1).tolist()
    idle = sum(totals)
    for dev in devices["device_id"].tolist():
        if dev != kb.device_id:
            continue  # no gap on it
        for i, kind in enumerate(GAP_KINDS):
            if not counts[i]:
                continue
            total = totals[i]
            rows.append({"device_id": int(dev), "kind": kind, "count": counts[i],
                         "total_ns": total, "share_pct": 100.0 * total / idle if idle else 0.0})
    return pd.DataFrame(rows, columns=["device_id", "kind", "count", "total_ns", "share_pct"])


def _kind_tables(gaps: pd.DataFrame, devices: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`_by_kind` and :func:`histogram` of ``gaps``, from one pass where it applies."""
    kb = _kind_bin_sums(gaps)
    if kb is None:
        return _by_kind(gaps, devices), histogram(gaps)
    return _by_kind_of(kb, devices), histogram(gaps, kb)


def _by_kind(gaps: pd.DataFrame, devices: pd.DataFrame) -> pd.DataFrame:
    rows = []
    g_dev = gaps["device_id"].to_numpy()
    g_ns = gaps["gap_ns"].to_numpy()
    kinds = gaps["kind"]
    if isinstance(kinds.dtype, pd.CategoricalDtype) and list(kinds.cat.categories) == list(
            GAP_KINDS) and g_dev.dtype.kind in "iu" and g_ns.dtype == np.int64:
        codes = kinds.cat.codes.to_numpy()
    else:
        codes = None
    for dev in devices["device_id"].tolist():
        on_dev = g_dev == dev
        if codes is not None:  # per kind: counts and sums by code, exact int64 sums
            every = bool(on_dev.all())
            dc = codes if every else codes[on_dev]
            dv = g_ns if every else g_ns[on_dev]
            counts, totals = _sums_by_code(dc, dv, len(GAP_KINDS))
            idle = int(dv.sum())
            for i, kind in enumerate(GAP_KINDS):
                if not counts[i]:
                    continue
                total = totals[i]
                rows.append({"device_id": int(dev), "kind": kind, "count": counts[i],
                             "total_ns": total,
                             "share_pct": 100.0 * total / idle if idle else 0.0})
            continue
        dg = gaps[on_dev]
        idle = int(dg["gap_ns"].sum())
        for kind in GAP_KINDS:
            k = dg[dg["kind"] == kind]
            if k.empty:
                continue
            total = int(k["gap_ns"].sum())
            rows.append({"device_id": int(dev), "kind": kind, "count": int(len(k)),
                         "total_ns": total, "share_pct": 100.0 * total / idle if idle else 0.0})
    return pd.DataFrame(rows, columns=["device_id", "kind", "count", "total_ns", "share_pct"])


def _sums_by_code(code: np.ndarray, ns: np.ndarray, n: int) -> tuple[list[int], list[int]]:
    """Per code in [0, n): the count of rows and the int64 sum of their ``ns`` (codes outside
    are skipped; sums by :func:`~cgprof.metrics.intervals.sums_by_code`)."""
    if len(code) and (int(code.min()) < 0 or int(code.max()) >= n):
        keep = (code >= 0) & (code < n)
        code, ns = code[keep], ns[keep]
    counts = counts_by_code(code, n)
    return [int(c) for c in counts], [int(t) for t in sums_by_code(code, ns, n)]


#: Gaps per chunk of :func:`histogram`.
_HIST_CHUNK = 1 << 20


#: Bin of each whole microsecond from -1 to the last edge (:func:`_hist_bins`).
_US_BIN = np.searchsorted(np.array(HIST_EDGES_US), np.arange(-1, HIST_EDGES_US[-1] + 1),
                          "right").astype(np.int8) - 1


def _hist_bins(v: np.ndarray) -> np.ndarray:
    """``searchsorted(edges_ns, v, "right") - 1`` (int8; -1 below the first edge).

    The trick: every edge is a whole microsecond, so the bin of ``v`` ns is the bin of
    ``floor(v / 1000)`` us, read from a table of every microsecond up to the last edge (one
    division, clip and gather per gap, where 13 compares cost twice as much)."""
    us = v // 1000
    np.clip(us, -1, HIST_EDGES_US[-1], out=us)
    us += 1
    return _US_BIN[us]


def histogram(gaps: pd.DataFrame, kb: _KindBins | None = None) -> pd.DataFrame:
    """Gap counts and time per microsecond bin (HIST_EDGES_US), per device. ``kb``:
    :func:`_kind_bin_sums` of ``gaps`` (None: counted here)."""
    cols = ["device_id", "bin_lo_us", "bin_hi_us", "count", "total_ns"]
    if gaps.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    dev = gaps["device_id"]
    if kb is not None:
        groups: Iterable[tuple[Any, pd.DataFrame | None]] = [(kb.device_id, None)]
    else:
        one = dev.dtype.kind in "iu" and dev.min() == dev.max()  # one device: no grouping
        groups = [(dev.iloc[0], gaps)] if one else gaps.groupby("device_id", sort=True)
    rows = []
    for d, g in groups:
        if kb is not None:
            counts, totals = kb.counts.sum(axis=0), kb.totals.sum(axis=0)
        else:
            assert g is not None  # kb is None: a frame per device
            v = g["gap_ns"].to_numpy(dtype=np.int64)
            counts = np.zeros(len(HIST_EDGES_US), dtype=np.int64)
            totals = np.zeros(len(HIST_EDGES_US), dtype=np.int64)
            for a in range(0, len(v), _HIST_CHUNK):  # chunk-sized temporaries
                vc = v[a:a + _HIST_CHUNK]
                b = _hist_bins(vc)
                c, t = _sums_by_code(b, vc, len(HIST_EDGES_US))
                counts += c
                totals += t
        counts, totals = counts.tolist(), totals.tolist()
        for i, lo in enumerate(HIST_EDGES_US):
            hi = HIST_EDGES_US[i + 1] if i + 1 < len(HIST_EDGES_US) else float("inf")
            rows.append({"device_id": int(d), "bin_lo_us": float(lo), "bin_hi_us": float(hi),
                         "count": counts[i], "total_ns": totals[i]})
    return pd.DataFrame(rows, columns=cols)


def _stream_table_swept(ops: pd.DataFrame) -> pd.DataFrame | None:
    """:func:`_stream_table` of plain int64 ops in (start, end) order (as :class:`_Chunked`
    takes them) through :func:`_busy_chunked`: chunk-long temporaries, where union_busy's
    sort and gathers of every op peaked ~0.4 GB above the ops at 10M. None where that does
    not apply (more than _MAX_CODES (device, stream) pairs)."""
    keys = ["device_id", "stream_id"]
    if not len(ops) or any(ops[c].dtype != np.int64 for c in [*keys, "start_ns", "end_ns"]):
        return None
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    if not arrays_sorted([start, end]):
        return None
    coded = _dense_code([ops[c].to_numpy() for c in keys])
    if coded is None:
        return None
    code, values = coded
    u = _busy_chunked(keys, values, code, start, end)
    return u[[*keys, "ops", "busy_ns", "span_ns", "gap_count", "gaps_ns", "max_gap_ns"]]


def _stream_table(ops: pd.DataFrame) -> pd.DataFrame:
    u = union_busy(ops, ["device_id", "stream_id"]) if len(ops) else union_busy(
        ops.assign(device_id=pd.Series(dtype="int64"), stream_id=pd.Series(dtype="int64")),
        ["device_id", "stream_id"])
    return u[["device_id", "stream_id", "ops", "busy_ns", "span_ns", "gap_count", "gaps_ns",
              "max_gap_ns"]]
