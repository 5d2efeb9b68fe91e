"""The launch wait per step: the GPU idle time before each step's work spent waiting for its
launch calls (the gaps of kind ``launch_bound``, summed by the step of the call that launched
the operation after the gap: ``launch_wait_ns``), and whether the step is launch-bound
(``launch_bound``: :data:`BUSY_SHARE`, :data:`WAIT_SHARE`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cgprof.metrics import step_table  # _CHUNK is read there: one value for every path
from cgprof.metrics.intervals import _first_match_dense, pair_keys, table_get
from cgprof.metrics.step_attribution import _dense_steps
from cgprof.metrics.step_result import StepResult
from cgprof.metrics.step_table import _is_value

#: A step is launch-bound when the GPU was busy for less than BUSY_SHARE of the step's host
#: time and at least WAIT_SHARE of the GPU's idle time in the step was spent waiting for the
#: host to launch the next work (gaps of kind ``launch_bound``, see cgprof.metrics.gap_result).
BUSY_SHARE = 0.5
WAIT_SHARE = 0.5


def classify_steps(result: StepResult, gaps: pd.DataFrame) -> None:
    """Fill ``launch_wait_ns`` and ``launch_bound`` from the classified GPU gaps (in place).

    The launch-bound gaps are matched to ``call_steps`` (one row per (pid, corr_id)) by key
    lookup (a table by correlation id for one process, else sorted int64 keys), not a hash
    merge of a million-row frame; the inner merge is kept for keys that are not plain int64
    or repeat."""
    st = result.steps
    n = len(st)
    is_wait = _is_value(gaps["kind"], "launch_bound")
    cs = result.call_steps
    # positions, not the mask: a take of an Int64 column costs a fifth of its mask selection
    wait_rows = np.flatnonzero(is_wait)
    per = _wait_per_step_chunked(gaps, wait_rows, cs, n, result._lookup())
    if per is None:
        per = _wait_per_step(gaps, wait_rows, cs, n)
    fill_launch_wait(result, per)


def fill_launch_wait(result: StepResult, per: np.ndarray) -> None:
    """Fill ``launch_wait_ns`` (``per``: int64 ns per step) and ``launch_bound`` (in place):
    what :func:`classify_steps` does with the sums, for a caller that summed the launch-bound
    gaps itself (cgprof.metrics.gap_reduced.measure_gaps_reduced, without a gap table)."""
    st = result.steps
    dur = st["dur_ns"].to_numpy(np.int64)
    busy = st["gpu_busy_ns"].to_numpy(np.int64)
    idle = np.maximum(dur - busy, 0)
    st["launch_wait_ns"] = per
    st["launch_bound"] = (dur > 0) & (busy < BUSY_SHARE * dur) & (per >= WAIT_SHARE * idle)


def _wait_per_step_chunked(gaps: pd.DataFrame, rows: np.ndarray, cs: pd.DataFrame,
                           n: int, lookup: tuple | None = None) -> np.ndarray | None:
    """:func:`_wait_per_step` for one process (the steps from :func:`_dense_steps`' table) a
    chunk of gaps at a time, while the float64 sums are exact: the gathered keys, gaps and
    steps were 10M-long fresh arrays. None where that does not apply."""
    cols = [gaps[c] for c in ("next_pid", "next_corr_id")]
    g = gaps["gap_ns"]
    if g.dtype != np.int64 or not all(c.dtype == np.int64 or isinstance(c.dtype, pd.Int64Dtype)
                                      for c in cols):
        return None
    g = g.to_numpy()
    if len(rows) and max(-int(g.min()), int(g.max())) * len(rows) >= 2**53:
        return None
    if lookup is not None:  # the table compute_steps made of these call_steps
        table, lo, p = lookup
    else:
        pid_c = cs["pid"].to_numpy()
        none = np.zeros(0, dtype=np.int64)
        dense = _dense_steps(none, none, pid_c, cs["corr_id"].to_numpy(), cs["step"].to_numpy())
        if dense is None:
            return None
        (table, lo), p = dense, pid_c[0]
    per = np.zeros(n, dtype=np.float64)
    for a in range(0, len(rows), step_table._CHUNK):
        r = rows[a:a + step_table._CHUNK]
        w_pid, w_corr = (_int64_rows(c, r) for c in cols)
        if (w_pid != p).any():
            return None  # another process: the general path
        step = table_get(table, w_corr - lo if lo else w_corr)
        hit = step >= 0
        per += np.bincount(step[hit], weights=g[r][hit].astype(np.float64), minlength=n)[:n]
    return per.astype(np.int64)


def _wait_per_step(gaps: pd.DataFrame, wait_rows: np.ndarray, cs: pd.DataFrame,
                   n: int) -> np.ndarray:
    """Launch-wait ns per step: the ``wait_rows`` gaps summed by the step of their next op's
    launch call (``cs``: ``call_steps``)."""
    w_pid = _int64_rows(gaps["next_pid"], wait_rows)
    w_corr = _int64_rows(gaps["next_corr_id"], wait_rows)
    gap = _int64_rows(gaps["gap_ns"], wait_rows).astype(np.float64)
    dense = _dense_steps(w_pid, w_corr,
                         cs["pid"].to_numpy(), cs["corr_id"].to_numpy(), cs["step"].to_numpy())
    if dense is not None:  # one process: the steps from a lookup table
        key = w_corr
        step = table_get(dense[0], key - dense[1] if dense[1] else key)
        hit = step >= 0
        step, gap = step[hit], gap[hit]
    else:
        wait = pd.DataFrame({"pid": w_pid, "corr_id": w_corr}, copy=False)
        pair = pair_keys(wait, cs)
        row = _unique_match(*pair) if pair is not None else None
        if row is None:  # not plain keys, or a key repeats in call_steps: the merge's rows
            m = wait.assign(gap_ns=gap).merge(cs, on=["pid", "corr_id"], how="inner")
            step, gap = m["step"].to_numpy(np.int64), m["gap_ns"].to_numpy(np.float64)
        else:
            hit = row >= 0
            step = cs["step"].to_numpy(np.int64)[row[hit]]
            gap = gap[hit]
    return np.bincount(step, weights=gap, minlength=n)[:n].astype(np.int64)


def _int64_rows(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``col.iloc[rows].astype("int64")`` (``rows``: positions) as a numpy array (raises the
    same way on missing values), without a Series and index per column when the column is
    plain int64."""
    if col.dtype == np.int64:
        return col.to_numpy()[rows]
    if isinstance(col.dtype, pd.Int64Dtype):  # the masked take itself, when it holds no <NA>
        sub = col.array.take(rows)
        if not sub.isna().any():
            return sub.to_numpy(dtype=np.int64)
    return pd.Series(col.array[rows]).astype("int64").to_numpy()


def _unique_match(left_key: np.ndarray, right_key: np.ndarray) -> np.ndarray | None:
    """Per left key, the position of the right row with that key, or -1; None when a right
    key repeats (an inner merge would then give a left row several times)."""
    if not len(right_key):
        return np.full(len(left_key), -1, dtype=np.int64)
    row = _first_match_dense(left_key, right_key)
    if row is not None:
        return row
    uniq, first = np.unique(right_key, return_index=True)
    if len(uniq) != len(right_key):
        return None
    pos = np.searchsorted(uniq, left_key)
    pos[pos == len(uniq)] = 0
    return np.where(uniq[pos] == left_key, first[pos], -1)
