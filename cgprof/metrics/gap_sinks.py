"""What a gap measurement fills as it goes for a window of steps, without a table of every
gap: the gap-length histogram of the window (:class:`GapBins`, on :data:`GAP_BIN_EDGES_US`)
and the gaps a timeline of it draws (:class:`GapTimeline`), each handed the listed gaps a
batch at a time (:class:`GapBatch`) or from a gap table (:func:`add_gap_table`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cgprof.metrics.gap_result import _HIST_CHUNK, GAP_KINDS
from cgprof.metrics.intervals import counts_by_code, starts_before, sums_by_code

#: Log-spaced bin edges of the gap-length histogram of a window of steps (cgprof.diff,
#: :class:`GapBins`), microseconds: 4 bins per decade from 0.01 us (10 ns) to 1 s. Shorter
#: gaps count in the first bin, longer ones in the last.
GAP_BIN_EDGES_US: tuple[float, ...] = tuple(
    float(f"{v:.6g}") for v in 10.0 ** np.arange(-2.0, 6.0001, 0.25))
_GAP_BIN_EDGES = np.array(GAP_BIN_EDGES_US, dtype=np.float64)
_GAP_BIN_EDGES.flags.writeable = False


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
