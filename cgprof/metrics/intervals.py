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
    tied = np.ones(len(df) - 1, dtype=bool)  # rows equal to their predecessor so far
    for c in cols:
        a = df[c].to_numpy()
        if a.dtype.kind not in "iub":
            return False
        nxt, prv = a[1:], a[:-1]
        if (tied & (nxt < prv)).any():
            return False
        tied &= nxt == prv
        if not tied.any():
            break
    return True


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
    end = out["end_ns"].to_numpy(dtype=np.int64)
    grp = out.groupby(keys, sort=False, observed=True)
    runmax = grp["end_ns"].cummax().to_numpy(dtype=np.int64)
    first = grp.cumcount().to_numpy() == 0
    prev_end = np.empty_like(runmax)
    prev_end[1:] = runmax[:-1]
    prev_end[0] = 0
    start = out["start_ns"].to_numpy(dtype=np.int64)
    gap = np.where(first, 0, np.maximum(start - prev_end, 0))
    # Position of the row that holds the running max: a row "sets" the max when its end is
    # the new maximum; forward-fill that position within the group.
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


def union_busy(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group: first start, last end, span and busy time (length of the union of rows).

    Columns: keys..., ops, first_start_ns, last_end_ns, span_ns, busy_ns, gaps_ns (sum of
    gaps between the group's rows), max_gap_ns, gap_count.
    """
    return busy_from_gaps(group_gaps(df[keys + ["start_ns", "end_ns"]], keys), keys)


def busy_from_gaps(g: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """:func:`union_busy` of rows whose gaps :func:`group_gaps` already found (``g``)."""
    cols = ["ops", "first_start_ns", "last_end_ns", "span_ns", "busy_ns", "gaps_ns",
            "max_gap_ns", "gap_count"]
    if g.empty:
        return pd.DataFrame({**{k: pd.Series(dtype="int64") for k in keys},
                             **{c: pd.Series(dtype="int64") for c in cols}})
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
