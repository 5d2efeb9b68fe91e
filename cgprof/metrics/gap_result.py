"""The gap table and what is made of it: GPU busy time and idle gaps, per device and per
stream, each gap given a cause (:data:`GAP_KINDS`, :data:`GAP_COLUMNS`); :class:`GapResult`
and :class:`MeasuredGaps`; the per-device, per-kind, histogram and per-stream tables made
from a gap table.

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

The measurements that make the table: :mod:`cgprof.metrics.gap_measure` (a whole ops table),
:mod:`cgprof.metrics.gap_reduced` (only what the reports read),
:mod:`cgprof.metrics.gap_slices` (ops given a slice at a time).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cgprof.metrics.intervals import counts_by_code, sums_by_code, union_busy

GAP_KINDS = ("in_replay", "sync_bound", "launch_bound", "input_copy", "between_replays", "other",
             "window_edge")

#: Histogram bin edges in microseconds (the last bin is open-ended).
HIST_EDGES_US = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000)


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


def _empty_gaps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in ("kind", "next_api") else "Int64")
                         for c in GAP_COLUMNS})


def _exact_float(a: np.ndarray) -> bool:
    """True when int64 ``a`` converts to float64 exactly (|values| < 2**53): then comparing
    the ints gives what comparing them as floats would."""
    return a.dtype == np.int64 and (not len(a) or (int(a.min()) > -2**53 and int(a.max()) < 2**53))


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


def _stream_table(ops: pd.DataFrame) -> pd.DataFrame:
    u = union_busy(ops, ["device_id", "stream_id"]) if len(ops) else union_busy(
        ops.assign(device_id=pd.Series(dtype="int64"), stream_id=pd.Series(dtype="int64")),
        ["device_id", "stream_id"])
    return u[["device_id", "stream_id", "ops", "busy_ns", "span_ns", "gap_count", "gaps_ns",
              "max_gap_ns"]]
