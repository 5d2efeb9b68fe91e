"""The reduced gap measurement (:func:`measure_gaps_reduced`): what a report reads of a gap
table (the per-device tables, the longest listed gaps) and the launch wait per step, taken
in a chunk of gaps at a time (:class:`_GapSummary`) where the chunked sweep applies, so
that the table of every gap is never made.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pandas as pd

from cgprof.metrics import gap_chunked  # FILL_CHUNK is read there: one value for every path
from cgprof.metrics.gap_chunked import (
    _api_code_dtype,
    _Chunked,
    _GapColumns,
    _stream_table_swept,
)
from cgprof.metrics.gap_measure import _live_ops, measure_gaps
from cgprof.metrics.gap_result import (
    GAP_KINDS,
    GapResult,
    MeasuredGaps,
    _longest_rows,
    _stream_table,
)
from cgprof.metrics.gap_sinks import (
    GapBatch,
    GapSink,
    _commit_bins,
    _edges_to,
    _fresh_bins,
    add_gap_table,
)
from cgprof.metrics.intervals import sums_by_code, table_get


def measure_gaps_reduced(ops: pd.DataFrame, calls: pd.DataFrame,
                         window: tuple[int, int] | None, min_gap_ns: int = 0,
                         limit: int | None = None,
                         wait: tuple[np.ndarray, int, int] | None = None, tables: bool = True,
                         bins: tuple[GapSink, ...] = (),
                         ) -> tuple[GapResult | None, np.ndarray | None]:
    """``gpu_gaps(ops, calls, window).above(min_gap_ns).longest(limit)`` (what a report
    reads: :meth:`cgprof.metrics.AnalysisResult.light`), and with ``wait`` = (table, lo,
    steps) the launch wait per step of these gaps, every gap however short (int64[steps]:
    ``launch_wait_ns`` as :func:`cgprof.metrics.step_launch_wait.classify_steps` sums it from this
    measurement's table; ``table[corr_id - lo]`` is the step of a correlation id's call, -1
    none, as :func:`cgprof.metrics.step_attribution._dense_steps` makes it, for the one process of
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
            self._scratch(max(k, min(gap_chunked.FILL_CHUNK, 1 << 20)))
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
