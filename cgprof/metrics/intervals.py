"""Interval sweeps shared by the metrics: unions, gaps, containment.

Everything here is a sorted sweep in numpy/pandas (no SQL range joins, which hang or run out of
memory on big traces). Inputs are int64 nanoseconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def is_sorted(df: pd.DataFrame, cols: list[str]) -> bool:
    """True when the rows are already in (cols...) order: then a stable sort is the identity."""
    if len(df) < 2:
        return True
    return arrays_sorted([df[c].to_numpy() for c in cols])


def starts_before(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each of ``ends``, how many of ``starts`` (int64, any order) lie before it: what a
    timeline counts per step of the events that start before the step's end (sorted only
    when they are not already)."""
    return np.searchsorted(starts if arrays_sorted([starts]) else np.sort(starts), ends, "left")


def arrays_sorted(arrays: list[np.ndarray]) -> bool:
    """:func:`is_sorted` over columns given as numpy arrays (False unless integer or bool).
    After the first column that is not constant, only the rows tied so far are compared (a
    gather of those few, not another pass over every row)."""
    if not arrays or len(arrays[0]) < 2:
        return True
    at = None  # i where rows i and i + 1 tie on the columns so far; None: every i
    for a in arrays:
        if a.dtype.kind not in "iub":
            return False
        nxt, prv = (a[1:], a[:-1]) if at is None else (a[at + 1], a[at])
        if (nxt < prv).any():
            return False
        tied = nxt == prv
        if at is None:
            if tied.all():
                continue
            at = np.flatnonzero(tied)
        else:
            at = at[tied]
        if not len(at):
            break
    return True


#: Up to this many group codes, :func:`group_order` gathers each code's rows in turn.
_FEW_CODES = 8


def group_order(karr: list[np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Positions that put rows in (keys..., start, end) order as a stable sort does; None when
    they are in that order already. Integer arrays only.

    The trick: rows already in (start, end) order (as :func:`cgprof.metrics.gpu.gpu_ops` makes
    them) need only a stable sort by their group, and a group is one small integer code (the
    keys' offsets from their minimum, mixed radix): ``argsort(kind="stable")`` of a uint16 code
    is a radix sort, O(n), where ``np.lexsort`` of four columns costs ~0.05 s per million rows.
    With a few codes (streams of one device) the rows of each code, in turn, are that same
    stable order: one compare and ``flatnonzero`` per code, ~0.3 ms each per million rows
    against ~6 ms for the radix sort.
    """
    if karr and arrays_sorted([start, end]):
        # In (start, end) order already, the rows are in (keys, start, end) order exactly
        # when the keys never decrease (one compare of the code, not arrays_sorted's
        # gathers of the rows tied on the keys: half of 10M ops are tied on a replay's key).
        code = None  # keys that hold one value add nothing to it (one device)
        width = 1
        for a in karr:
            lo, hi = int(a.min()), int(a.max())
            if width * (hi - lo + 1) >= 2**62:
                break
            if lo == hi:
                continue
            code = a if code is None and lo == 0 else a - lo if code is None else (
                code * (hi - lo + 1) + (a - lo))
            width *= hi - lo + 1
        else:
            if code is None or (code[1:] >= code[:-1]).all():
                return None
            if width <= _FEW_CODES:
                return np.concatenate([np.flatnonzero(code == c) for c in range(width)])
            if width <= 2**16:
                code = code.astype(np.uint16)
            return np.argsort(code, kind="stable")
    if arrays_sorted([*karr, start, end]):
        return None
    return np.lexsort([end, start, *karr[::-1]])


def sort_stable(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``df.sort_values(cols, kind="stable")``, skipped when the rows are in order already."""
    return df if is_sorted(df, cols) else df.sort_values(cols, kind="stable")


def group_gaps(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Idle gap before each row inside its group, rows sorted by (keys, start_ns).

    Adds ``prev_end_ns`` (the running maximum of ``end_ns`` over earlier rows of the group,
    <NA> for a group's first row), ``gap_ns`` (``start_ns - prev_end_ns`` when positive, else 0)
    and ``prev_idx`` (index label of the earlier row that reached that running maximum: the op
    the GPU finished last before the gap). Overlapping rows (two streams) give no gap.
    """
    out = sort_stable(df, keys + ["start_ns", "end_ns"])
    if out.empty:
        return out.assign(prev_end_ns=pd.Series(dtype="Int64"), gap_ns=pd.Series(dtype="int64"),
                          prev_idx=pd.Series(dtype="Int64"))
    first = _group_starts(out, keys)
    if first is None:
        return _group_gaps_pandas(out, keys)
    gap, prev_end, prev_holder = gap_sweep(out["start_ns"].to_numpy(), out["end_ns"].to_numpy(),
                                           first)
    labels = out.index.to_numpy()
    if isinstance(out.index, pd.RangeIndex) and out.index.start == 0 and out.index.step == 1:
        prev_idx = prev_holder  # labels are positions
    else:
        prev_idx = labels[prev_holder]
        del prev_holder
    prev_idx = prev_idx.astype(np.int64, copy=False)
    prev_idx[first] = 0
    assert prev_end is not None  # want_prev_end=True
    prev_end[first] = 0
    return out.assign(
        prev_end_ns=pd.arrays.IntegerArray(prev_end, first.copy()),
        gap_ns=gap.astype(np.int64, copy=False),
        prev_idx=pd.arrays.IntegerArray(prev_idx, first),
    )


def gap_sweep(start: np.ndarray, end: np.ndarray, first: np.ndarray,
              want_prev_end: bool = True) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The sweep of :func:`group_gaps` over int64 rows sorted into groups (``first`` marks each
    group's first row): per row its gap (0 on a group's first row), the running max of the
    ends before it (``prev_end``) and the position of the row that reached that max
    (``prev_pos``); both 0 on a group's first row.

    Over SWEEP_CHUNK rows, a chunk at a time into the three results: a chunk that continues
    the last one's group is swept with that group's running max and its row as an extra
    row 0 (as :func:`sweep_chunks` carries it), so the running maxima and holder positions
    are a chunk long (at 5M in-graph ops they were two 40 MB fresh arrays).
    ``want_prev_end=False``: ``prev_end`` is None (not kept past each chunk)."""
    n = len(start)
    if n <= SWEEP_CHUNK:
        out = _gap_sweep(start, end, first)
        return out if want_prev_end else (out[0], None, out[2])
    gap, prev_pos = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    prev_end = np.empty(n, dtype=np.int64) if want_prev_end else None
    cmax = cpos = 0
    for a in range(0, n, SWEEP_CHUNK):
        b = min(a + SWEEP_CHUNK, n)
        f = first[a:b]
        if f[0]:
            g, pe, pp = _gap_sweep(start[a:b], end[a:b], f)
            pp += a
        else:
            s2, e2, f2 = (np.empty(b - a + 1, dtype=x.dtype) for x in (start, end, first))
            s2[0] = e2[0] = cmax
            f2[0] = True
            s2[1:], e2[1:], f2[1:] = start[a:b], end[a:b], f
            g, pe, pp = (x[1:] for x in _gap_sweep(s2, e2, f2))
            at_carry = pp == 0
            pp += a - 1
            pp[at_carry] = cpos
        pp[f] = 0
        gap[a:b], prev_pos[a:b] = g, pp
        if prev_end is not None:
            prev_end[a:b] = pe
        last = b - 1
        if f[-1] or end[last] >= pe[-1]:
            cmax, cpos = int(end[last]), last
        else:
            cmax, cpos = int(pe[-1]), int(pp[-1])
    return gap, prev_end, prev_pos


def _gap_sweep(start: np.ndarray, end: np.ndarray,
               first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`gap_sweep` of the whole arrays at once."""
    n = len(start)
    runmax = _segment_cummax(end, first)
    # Position of the row that holds the running max: a row "sets" the max when its end is
    # the new maximum (a group's first row always does); forward-fill that position.
    # (In place where it can be: at 10M rows each temporary is 80 MB.)
    holder = np.arange(n)
    holder[end < runmax] = 0
    np.maximum.accumulate(holder, out=holder)
    prev_end = np.empty_like(runmax)
    prev_end[1:] = runmax[:-1]
    prev_end[0] = 0
    del runmax
    gap = np.subtract(start, prev_end)
    np.maximum(gap, 0, out=gap)
    gap[first] = 0
    prev_pos = np.empty(n, dtype=np.int64)
    prev_pos[1:] = holder[:-1]
    prev_pos[0] = 0
    del holder
    prev_pos[first] = 0
    prev_end[first] = 0
    return gap, prev_end, prev_pos


#: Rows per chunk of :func:`sweep_chunks` (8 MB per int64 temporary).
SWEEP_CHUNK = 1 << 20


def sweep_chunks(start: np.ndarray, end: np.ndarray, code: np.ndarray | None = None,
                 ncodes: int = 1, positions: bool = True, chunk: int | None = None,
                 carry: tuple[np.ndarray, np.ndarray] | None = None):
    """:func:`gap_sweep` of int64 rows in (start, end) order, grouped by ``code`` (ints in
    [0, ncodes); None: one group), a chunk of SWEEP_CHUNK rows (or ``chunk``, when fewer) at a
    time.

    Yields ``(c, rows, st, en, gap, prev_end, prev_pos)`` per chunk and group present in it:
    ``rows`` the positions of the group's rows in the chunk (ascending), then per row its start,
    end, gap, the running max of the group's ends before it and the position of the row that
    reached that max (``positions=False``: None), as :func:`gap_sweep` gives them over the rows
    stably sorted by code (the (code, start, end) order, since the rows are in (start, end)
    order). The trick: each group carries its running max and that row's position from one
    chunk into the next, so no temporary is longer than a chunk: at 10M rows the whole-array
    sweep's gathers, running maxima and gap arrays were each an 80 MB fresh allocation.
    ``carry``: each group's running max and its row's position (``cpos`` -1: no row yet)
    carried in from rows swept before these (a slice of a longer run), updated in place.
    """
    n = len(start)
    step = SWEEP_CHUNK if chunk is None else max(1, min(chunk, SWEEP_CHUNK))
    if carry is None:
        cmax = np.zeros(ncodes, dtype=np.int64)
        cpos = np.full(ncodes, -1, dtype=np.int64)  # -1: the group has no row yet
    else:
        cmax, cpos = carry
    for a in range(0, n, step):
        b = min(a + step, n)
        if code is None:
            groups: list[tuple[int, np.ndarray | None]] = [(0, None)]
        else:
            cc = code[a:b]
            by = np.argsort(cc, kind="stable")  # radix sort of small codes
            bounds = np.cumsum(np.bincount(cc, minlength=ncodes))
            groups = [(c, by[lo:hi]) for c, (lo, hi) in
                      enumerate(zip([0, *bounds[:-1]], bounds, strict=True)) if hi > lo]
        for c, r in groups:
            rows = np.arange(a, b) if r is None else r + a
            st = start[a:b] if r is None else start[rows]
            en = end[a:b] if r is None else end[rows]
            gap, prev_end, prev_pos = _sweep_run(st, en, rows, cmax, cpos, c, positions)
            yield c, rows, st, en, gap, prev_end, prev_pos


def _sweep_run(st, en, rows, cmax, cpos, c, positions):
    """One group's rows of one chunk for :func:`sweep_chunks`; updates the carry ``cmax[c]``,
    ``cpos[c]``. A carried group is swept with its carry as an extra row 0."""
    carry = cpos[c] >= 0
    if carry:
        e = np.empty(len(en) + 1, dtype=np.int64)
        e[0] = cmax[c]
        e[1:] = en
    else:
        e = en
    runmax = np.maximum.accumulate(e)
    if carry:
        prev_end = runmax[:-1]
    else:
        prev_end = np.empty_like(runmax)
        prev_end[0] = 0
        prev_end[1:] = runmax[:-1]
    gap = np.subtract(st, prev_end)
    np.maximum(gap, 0, out=gap)
    if not carry:
        gap[0] = 0
    prev_pos = None
    if positions:
        # a row holds the max when its end reaches it (as gap_sweep: ties go to the later row)
        holder = np.arange(len(e))
        holder[e < runmax] = 0
        np.maximum.accumulate(holder, out=holder)
        glob = np.concatenate(([cpos[c]], rows)) if carry else rows
        prev_pos = glob[holder[:-1]] if carry else np.concatenate(([0], glob[holder[:-1]]))
        cpos[c] = glob[holder[-1]]
    else:
        cpos[c] = 0
    cmax[c] = runmax[-1]
    return gap, prev_end, prev_pos


def _group_starts(df: pd.DataFrame, keys: list[str]) -> np.ndarray | None:
    """Rows sorted by keys: True where a group begins. None when a key or the times are not
    plain numpy integers (nullable or categorical keys go through pandas' groupby, which
    drops NA keys)."""
    if df["start_ns"].dtype != np.int64 or df["end_ns"].dtype != np.int64:
        return None
    first = np.zeros(len(df), dtype=bool)
    first[0] = True
    for k in keys:
        a = df[k].to_numpy()
        if not isinstance(df[k].dtype, np.dtype) or a.dtype.kind not in "iu":
            return None
        first[1:] |= a[1:] != a[:-1]
    return first


def _segment_cummax(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Running maximum of int64 ``values`` restarting where ``first`` is True."""
    if not first[1:].any():  # one group (one device): a plain running maximum
        return np.maximum.accumulate(values)
    at = np.flatnonzero(first)
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if len(at) > 64 and len(at) * span < 2**62:
        # Lift each group above every earlier one so one accumulate restarts per group
        # (in place: one offset array and the result).
        off = np.repeat(np.arange(len(at), dtype=np.int64) * span, np.diff(at, append=len(values)))
        out = values - lo
        out += off
        np.maximum.accumulate(out, out=out)
        out -= off
        out += lo
        return out
    # a few groups (streams), or values too wide to lift: one accumulate over each
    out = np.empty_like(values)
    for a, b in zip(at, [*at[1:], len(values)], strict=True):
        np.maximum.accumulate(values[a:b], out=out[a:b])
    return out


def _group_gaps_pandas(out: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """:func:`group_gaps` through pandas' groupby (rows already sorted)."""
    end = out["end_ns"].to_numpy(dtype=np.int64)
    grp = out.groupby(keys, sort=False, observed=True)
    runmax = grp["end_ns"].cummax().to_numpy(dtype=np.int64)
    first = grp.cumcount().to_numpy() == 0
    prev_end = np.empty_like(runmax)
    prev_end[1:] = runmax[:-1]
    prev_end[0] = 0
    start = out["start_ns"].to_numpy(dtype=np.int64)
    gap = np.where(first, 0, np.maximum(start - prev_end, 0))
    pos = np.arange(len(out))
    sets = end >= runmax
    holder = pd.Series(np.where(sets, pos, -1)).replace(-1, np.nan).ffill().to_numpy()
    prev_holder = np.empty(len(out))
    prev_holder[1:] = holder[:-1]
    prev_holder[0] = np.nan
    prev_idx = _take_labels(out.index.to_numpy(), prev_holder, first)
    out = out.assign(
        prev_end_ns=pd.array(np.where(first, 0, prev_end), dtype="Int64"),
        gap_ns=gap.astype(np.int64),
        prev_idx=prev_idx,
    )
    out.loc[first, "prev_end_ns"] = pd.NA
    return out


def _take_labels(
    labels: np.ndarray, holder: np.ndarray, first: np.ndarray
) -> pd.arrays.IntegerArray:
    valid = ~first & ~np.isnan(holder)
    vals = np.zeros(len(holder), dtype=np.int64)
    vals[valid] = labels[holder[valid].astype(np.int64)]
    return pd.arrays.IntegerArray(vals, ~valid)


#: The columns of a busy table after its keys (:func:`union_busy`, :func:`busy_from_gaps`).
BUSY_COLUMNS = ["ops", "first_start_ns", "last_end_ns", "span_ns", "busy_ns", "gaps_ns",
                "max_gap_ns", "gap_count"]


def union_busy(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group: first start, last end, span and busy time (length of the union of rows).

    Columns: keys..., ops, first_start_ns, last_end_ns, span_ns, busy_ns, gaps_ns (sum of
    gaps between the group's rows), max_gap_ns, gap_count.
    """
    fast = _union_busy_numpy(df, keys)
    if fast is not None:
        return fast
    return busy_from_gaps(group_gaps(df[keys + ["start_ns", "end_ns"]], keys), keys)


def _union_busy_numpy(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame | None:
    """:func:`union_busy` on the columns as numpy arrays: one ``np.lexsort`` (skipped when the
    rows are in order) and the gap sweep of :func:`group_gaps` without its frame or ``prev_idx``.
    None (take the frame path) when empty or a key or the times are not plain numpy integers.
    Rows tied on every sort column are interchangeable here, so any tie order gives the same
    result as the stable sort."""
    if df.empty:
        return None
    cols = keys + ["start_ns", "end_ns"]
    for c in cols:
        if not isinstance(df[c].dtype, np.dtype) or df[c].dtype.kind not in "iu":
            return None
    if df["start_ns"].dtype != np.int64 or df["end_ns"].dtype != np.int64:
        return None
    arrays = [df[c].to_numpy() for c in cols]
    # A key with one value (one device) is the same in any order: neither gathered nor
    # compared for group starts.
    const = [a[0] == a.min() == a.max() for a in arrays[:-2]]
    order = group_order(arrays[:-2], arrays[-2], arrays[-1])
    if order is not None:
        arrays = [a if i < len(const) and const[i] else a[order] for i, a in enumerate(arrays)]
        del order
    *karr, start, end = arrays
    n = len(start)
    first = np.zeros(n, dtype=bool)
    first[0] = True
    for a, one in zip(karr, const, strict=True):
        if not one:
            first[1:] |= a[1:] != a[:-1]
    runmax = _segment_cummax(end, first)
    gap = np.empty(n, dtype=np.int64)
    np.subtract(start[1:], runmax[:-1], out=gap[1:])
    del runmax
    np.maximum(gap, 0, out=gap)
    gap[first] = 0
    return segment_busy(keys, karr, start, end, gap, first, BUSY_COLUMNS)


def busy_from_gaps(g: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """:func:`union_busy` of rows whose gaps :func:`group_gaps` already found (``g``)."""
    cols = BUSY_COLUMNS
    if g.empty:
        return pd.DataFrame({**{k: pd.Series(dtype="int64") for k in keys},
                             **{c: pd.Series(dtype="int64") for c in cols}})
    first = _group_starts(g, keys) if is_sorted(g, keys) else None
    if first is not None and g["gap_ns"].dtype == np.int64:
        return _busy_segments(g, keys, first, cols)
    g = g.assign(has_gap=(g["gap_ns"] > 0).astype(np.int64))
    agg = g.groupby(keys, sort=True, observed=True).agg(
        ops=("start_ns", "size"),
        first_start_ns=("start_ns", "min"),
        last_end_ns=("end_ns", "max"),
        gaps_ns=("gap_ns", "sum"),
        max_gap_ns=("gap_ns", "max"),
        gap_count=("has_gap", "sum"),
    ).reset_index()
    agg["span_ns"] = agg["last_end_ns"] - agg["first_start_ns"]
    agg["busy_ns"] = agg["span_ns"] - agg["gaps_ns"]
    return agg[keys + cols].astype({c: "int64" for c in cols})


def _busy_segments(g: pd.DataFrame, keys: list[str], first: np.ndarray,
                   cols: list[str]) -> pd.DataFrame:
    """:func:`busy_from_gaps` over rows sorted by integer keys: one reduceat per column."""
    return segment_busy(keys, [g[k].to_numpy() for k in keys], g["start_ns"].to_numpy(),
                         g["end_ns"].to_numpy(), g["gap_ns"].to_numpy(), first, cols)


def segment_busy(keys: list[str], karr: list[np.ndarray], start: np.ndarray, end: np.ndarray,
                 gap: np.ndarray, first: np.ndarray,
                 cols: list[str] = BUSY_COLUMNS) -> pd.DataFrame:
    """The busy table of rows sorted into groups (``first`` marks each group's first row),
    given each row's gap to the union of the rows before it: one reduceat per column."""
    at = np.flatnonzero(first)
    agg = {k: a[at] for k, a in zip(keys, karr, strict=True)}
    agg["ops"] = np.diff(np.append(at, len(start))).astype(np.int64)
    agg["first_start_ns"] = np.minimum.reduceat(start, at)
    agg["last_end_ns"] = np.maximum.reduceat(end, at)
    agg["span_ns"] = agg["last_end_ns"] - agg["first_start_ns"]
    agg["gaps_ns"] = np.add.reduceat(gap, at)
    agg["busy_ns"] = agg["span_ns"] - agg["gaps_ns"]
    agg["max_gap_ns"] = np.maximum.reduceat(gap, at)
    agg["gap_count"] = np.add.reduceat((gap > 0).astype(np.int64), at)
    return pd.DataFrame({c: agg[c] for c in keys + cols})


def assign_to_ranges(
    points_key: np.ndarray,
    points_start: np.ndarray,
    points_end: np.ndarray,
    ranges_key: np.ndarray,
    ranges_start: np.ndarray,
    ranges_end: np.ndarray,
) -> np.ndarray:
    """For each point interval, the index of the range (same key) that contains it, or -1.

    Ranges of one key must not overlap (steps on one thread); when they nest, the latest-
    starting range that begins at or before the point wins if it also contains it. Sorted
    sweep: O((n + m) log m).
    """
    result = np.full(len(points_start), -1, dtype=np.int64)
    if len(ranges_start) == 0 or len(points_start) == 0:
        return result
    order = np.lexsort((ranges_start, ranges_key))
    rk, rs, re = ranges_key[order], ranges_start[order], ranges_end[order]
    # Composite search: within each key, ranges sorted by start.
    for key in np.unique(points_key):
        lo, hi = np.searchsorted(rk, key, "left"), np.searchsorted(rk, key, "right")
        if lo == hi:
            continue
        pmask = points_key == key
        ps, pe = points_start[pmask], points_end[pmask]
        j = np.searchsorted(rs[lo:hi], ps, "right") - 1
        ok = j >= 0
        jj = np.where(ok, j, 0) + lo
        ok &= pe <= re[jj]
        result[np.flatnonzero(pmask)[ok]] = order[jj[ok]]
    return result


def quantile_ns(values: pd.Series | np.ndarray, q: float) -> float | None:
    """Quantile of a non-empty series (linear interpolation), None when empty."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return None
    return float(np.quantile(arr, q))


def pair_keys(left: pd.DataFrame, right: pd.DataFrame,
              cols: tuple[str, str] = ("pid", "corr_id")) -> tuple[np.ndarray, np.ndarray] | None:
    """One int64 key per row for a (pid, corr_id) join: ``code(pid) << 32 | corr_id``, pids
    coded over both frames. None when a column is not plain int64 or a correlation id is
    outside [0, 2**32) (then callers join with pandas)."""
    return _pair_keys(left, right, cols, copy=True)


def match_pairs(left: pd.DataFrame, right: pd.DataFrame) -> np.ndarray | None:
    """``first_match(*pair_keys(left, right))``: for each left row, the position of the first
    right row with its (pid, corr_id), or -1; None where :func:`pair_keys` is None. The keys
    of one process are the correlation-id columns themselves, not copies (only read here)."""
    keys = _pair_keys(left, right, ("pid", "corr_id"), copy=False)
    return None if keys is None else first_match(*keys)


def _pair_keys(left: pd.DataFrame, right: pd.DataFrame, cols: tuple[str, str],
               copy: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`pair_keys`; ``copy=False``: one process's keys may be the columns' own arrays."""
    a, b = cols
    arrs = []
    for df in (left, right):
        for c in cols:
            if df[c].dtype != np.int64:
                return None
        arrs.append((df[a].to_numpy(), df[b].to_numpy()))
    corr = [x[1] for x in arrs]
    if any(len(c) and (c.min() < 0 or c.max() >= 2**32) for c in corr):
        return None
    pid = [x[0] for x in arrs]
    lo_hi = [(int(p.min()), int(p.max())) for p in pid if len(p)]
    if len({v for pair in lo_hi for v in pair}) <= 1:
        # One process (or none): every pid codes to 0, so each key is its correlation id
        # (no concatenation, hash or searchsorted of every row).
        return corr[0].astype(np.int64, copy=copy), corr[1].astype(np.int64, copy=copy)
    # the distinct pids (a handful) by hashing, then sorted: not a sort of every row
    pids = np.sort(pd.unique(np.concatenate(pid)))
    lk, rk = (np.searchsorted(pids, p).astype(np.int64, copy=False) << 32 | c for p, c in arrs)
    return lk, rk


def pairs_distinct(df: pd.DataFrame, cols: tuple[str, str] = ("pid", "corr_id")) -> bool:
    """True when no (pid, corr_id) pair repeats in ``df`` (then ``df.drop_duplicates(cols)`` is
    ``df`` and ``df.duplicated(cols)`` is all False): one write into a lookup table indexed by
    ``code(pid) * width + corr_id - min``, O(n) with no hash or sort. False when that does not
    apply (not plain int64, or the keys span far more than their count), meaning "unknown":
    callers then take the pandas path."""
    n = len(df)
    if n < 2:
        return True
    a, b = cols
    if df[a].dtype != np.int64 or df[b].dtype != np.int64:
        return False
    pid, corr = df[a].to_numpy(), df[b].to_numpy()
    pids = np.sort(pd.unique(pid))
    lo = int(corr.min())
    width = int(corr.max()) - lo + 1
    if len(pids) * width >= dense_room(n):
        return False
    key = corr - lo
    if len(pids) > 1:
        key = key + np.searchsorted(pids, pid).astype(np.int64) * width
    return _distinct_table(key) is not None


def first_match(left_key: np.ndarray, right_key: np.ndarray) -> np.ndarray:
    """For each left key, the position of the first right row with that key, or -1 (the rows
    ``right.drop_duplicates(key)`` keeps, joined as a left/inner merge would)."""
    if len(right_key) == 0:
        return np.full(len(left_key), -1, dtype=np.int64)
    row = _first_match_dense(left_key, right_key)
    if row is not None:
        return row
    uniq, first = np.unique(right_key, return_index=True)
    pos = np.searchsorted(uniq, left_key)
    pos[pos == len(uniq)] = 0
    return np.where(uniq[pos] == left_key, first[pos], -1).astype(np.int64)


def _first_match_dense(left_key: np.ndarray, right_key: np.ndarray) -> np.ndarray | None:
    """:func:`first_match` through a lookup table indexed by key, when the right keys are
    distinct and span a range not much wider than their count (one process: the keys are its
    correlation ids). O(n), where the sort of ``np.unique`` and a ``searchsorted`` of every
    left key cost ~0.1 s per million rows. None when it does not apply."""
    dense = _distinct_table(right_key, narrow=True)  # int32 positions: half the table
    if dense is None:  # sparse, or a key repeats: first occurrences need the sort
        return None
    table, lo = dense
    return table_get(table, left_key - lo if lo else left_key)


def table_get(table: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``table[key]`` (a lookup table indexed by key, e.g. :func:`_distinct_table`'s), -1 of
    the table's dtype where a key falls outside it. Every key inside: two reductions and the
    gather, no masks."""
    if not len(key):
        return table[key]
    lo, hi = int(key.min()), int(key.max())
    if lo >= 0 and hi < len(table):
        return table[key]
    if lo >= 0:  # keys past the table only (ids of calls the table does not hold): clipped
        out = table[np.minimum(key, len(table) - 1)]
        out[key >= len(table)] = -1
        return out
    out = np.full(len(key), -1, dtype=table.dtype)
    inside = (key >= 0) & (key < len(table))
    out[inside] = table[key[inside]]
    return out


def sums_by_code(code: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of int ``values`` per ``code`` in [0, n) (every code in range):
    ``np.bincount``'s float64 sums while every partial sum is exact (a chunk's row count times
    the largest |value| below 2**53), else ``np.add.at`` in int64. A chunk at a time: the
    float64 weights and intp codes bincount makes are a chunk long (not 80 + 80 MB fresh at
    10M rows)."""
    out = np.zeros(n, dtype=np.int64)
    if not len(values):
        return out
    step = SWEEP_CHUNK
    if max(-int(values.min()), int(values.max())) * min(len(values), step) >= 2**53:
        np.add.at(out, code, values)
        return out
    for a in range(0, len(values), step):
        out += np.bincount(code[a:a + step], weights=values[a:a + step],
                           minlength=n)[:n].astype(np.int64)
    return out


def counts_by_code(code: np.ndarray, n: int) -> np.ndarray:
    """``np.bincount(code, minlength=n)[:n]`` a chunk at a time (bincount copies small int
    codes to intp: 80 MB fresh at 10M rows)."""
    out = np.zeros(n, dtype=np.int64)
    for a in range(0, len(code), SWEEP_CHUNK):
        out += np.bincount(code[a:a + SWEEP_CHUNK], minlength=n)[:n]
    return out


def dense_room(n: int) -> int:
    """The widest span of keys (max - min) for which a lookup table indexed by key stands in
    for a sort of ``n`` keys: 4 slots per key, or up to 16 while the table stays under 4M
    slots. Real traces' correlation ids span several times the API calls kept (CUPTI numbers
    every activity): the 300-step ResNet-18 trace's 212k calls span 1.6M ids, where each
    np.unique + searchsorted match took 6-10 ms and the 1.6M-slot table takes ~2 ms.
    From 1M keys on, 4 slots per key is the bound (memory of 10M-row traces)."""
    return max(4 * n, min(16 * n, 1 << 22), 1 << 16)


def _distinct_table(key: np.ndarray, narrow: bool = False) -> tuple[np.ndarray, int] | None:
    """A lookup table of int64 keys: ``table[k - lo]`` is the position of key ``k`` (-1 where
    none), and ``lo``; None when the keys span far more than their count (the table would be
    mostly empty) or one repeats. One write and one read of the table, no hash or sort.
    ``narrow``: int32 positions when they fit (half the table: 10M calls, 40 MB), for a
    caller that only indexes with them."""
    n = len(key)
    lo, hi = int(key.min()), int(key.max())
    if hi - lo >= dense_room(n):
        return None
    if 0 < lo <= n:  # index by the key itself (correlation ids start near 0): no k - lo
        lo = 0
    dtype = np.int32 if narrow and n < 2**31 else np.int64
    table = np.full(hi - lo + 1, -1, dtype=dtype)
    table[key - lo if lo else key] = np.arange(n, dtype=dtype)
    # Rising keys (API calls in time order carry rising correlation ids) are distinct: a pass
    # over the keys, not over a table several times longer (ResNet-18 trace: 0.7 -> 0.1 ms).
    if n > 1 and (key[1:] > key[:-1]).all():
        return table, lo
    # A repeated key overwrites its earlier slot: the keys are distinct exactly when n slots
    # are filled (a sequential count, not a gather that reads every key's slot back).
    if np.count_nonzero(table >= 0) != n:
        return None
    return table, lo


def join_unique(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    """``left.merge(right, on=["pid", "corr_id"], how="inner")`` where ``right`` holds each
    (pid, corr_id) once (e.g. ``StepResult.call_steps``): a key match (:func:`pair_keys`,
    :func:`first_match`) and column takes, not a hash join of two million-row frames. Same
    rows, order (left's), columns and dtypes as the merge."""
    keys = pair_keys(left, right)
    if keys is None:
        return left.merge(right, on=["pid", "corr_id"], how="inner")
    row = first_match(*keys)
    hit = row >= 0
    out = (left if hit.all() else left[hit]).reset_index(drop=True)
    at = row[hit]
    for c in right.columns:
        if c not in ("pid", "corr_id"):
            out[c] = right[c].take(at).reset_index(drop=True) if isinstance(
                right[c].dtype, pd.CategoricalDtype) else right[c].to_numpy()[at]
    return out
