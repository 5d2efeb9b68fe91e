"""The gap measurement of a whole ops table: :func:`gpu_gaps` and :func:`measure_gaps`
(every gap, classified, with the window's edges; the chunked sweep of
:mod:`cgprof.metrics.gap_chunked` for big tables, else one sweep of the whole arrays or the
frame path), and :func:`window_gaps` (a window's gaps derived from a longer span's).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cgprof.metrics import gap_chunked  # CHUNKED_MIN_OPS is read there: one value for every path
from cgprof.metrics import launches as L
from cgprof.metrics.gap_chunked import _OP_INTS, _Chunked, _returned_in_gap
from cgprof.metrics.gap_result import (
    GAP_COLUMNS,
    GAP_KINDS,
    GapResult,
    MeasuredGaps,
    _device_table,
    _empty_gaps,
    _exact_float,
    _kind_tables,
    _stream_table,
)
from cgprof.metrics.intervals import (
    arrays_sorted,
    busy_from_gaps,
    gap_sweep,
    group_gaps,
    group_order,
    match_pairs,
    segment_busy,
    sort_stable,
    union_busy,
)


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
            0 < len(ops) < gap_chunked.CHUNKED_MIN_OPS):
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
