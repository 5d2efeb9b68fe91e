"""The gap measurement of GPU ops given a slice at a time (:func:`measure_gaps_sliced`,
:func:`measure_gaps_sliced_each`): the reduced measurement of
:mod:`cgprof.metrics.gap_reduced` without ever holding every op, the chunked sweep carried
from slice to slice (:class:`_SliceSweep`), else the whole measurement of the live ops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cgprof.metrics import gap_chunked  # its tunables are read there: one value for every path
from cgprof.metrics.gap_chunked import (
    _MAX_CODES,
    _OP_INTS,
    _BusyStats,
    _calls_pid,
    _Chunked,
    _Classify,
    _dense_code,
    _Layout,
    _op_arrays,
    _OpColumns,
)
from cgprof.metrics.gap_measure import _live_ops
from cgprof.metrics.gap_reduced import _GapSummary, measure_gaps_reduced
from cgprof.metrics.gap_result import GapResult, _exact_float
from cgprof.metrics.gap_sinks import GapSink, _commit_bins, _edges_to, _fresh_bins
from cgprof.metrics.intervals import arrays_sorted, sweep_chunks


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
        if self.may_sweep and self.rows >= max(gap_chunked.CHUNKED_MIN_OPS, 1):
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
                start, end, code, cmax, cpos, chunk=gap_chunked.FILL_CHUNK):
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
