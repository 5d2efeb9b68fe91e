"""The chunked gap sweep of a big ops table (:class:`_Chunked`): the gap table of plain
int64 ops in (start, end) order and one process's API calls, swept a chunk at a time and
written in place (:class:`_GapColumns`) with each gap's cause (:class:`_Classify`); the
same rows and dtypes as the whole-table path of :mod:`cgprof.metrics.gap_measure`.

Also the sweep's tunables, read through this module by every path that uses them:
:data:`CHUNKED_MIN_OPS` (from how many ops the chunked sweep is taken) and
:data:`FILL_CHUNK` (rows per chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from cgprof.metrics import launches as L
from cgprof.metrics.gap_result import GAP_KINDS, _exact_float
from cgprof.metrics.intervals import (
    BUSY_COLUMNS,
    _distinct_table,
    arrays_sorted,
    sweep_chunks,
    table_get,
)

_OP_INTS = ("start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id")


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
