"""Which step each API call and GPU operation belongs to: a call to the step range that
contains it on its thread, or, on a thread without step ranges, to its process's step that
contains it in time (:func:`_attribute_calls`); an operation to the step of the call that
launched it, joined on (pid, correlation id) (:func:`_launch_steps`), through a lookup table
by correlation id where one applies (:func:`_dense_steps`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cgprof.io.trace import take_rows
from cgprof.metrics.intervals import (
    _first_match_dense,
    assign_to_ranges,
    dense_room,
    pair_keys,
    table_get,
)


def _attribute_calls(calls: pd.DataFrame, inst: pd.DataFrame) -> np.ndarray:
    """Step index of every API call, or -1.

    A call belongs to the step range that contains it on the same thread. PyTorch runs the
    backward pass on its own autograd threads, which emit no step ranges: a call on a thread
    without step ranges belongs to the step of the same process whose range contains it in
    time, when that process marks steps on one thread only (with several, which step a
    stray call serves is unknowable, and it stays unattributed). Such a process's steps are
    its one thread's steps, so a stray call is matched as a call of that thread: one sweep.
    """
    c_tid = calls["global_tid"].to_numpy(dtype=np.int64)
    s_tid = inst["global_tid"].to_numpy(dtype=np.int64)
    s_pid = inst["pid"].to_numpy(dtype=np.int64)
    tids = np.unique(s_tid)
    s_code = np.searchsorted(tids, s_tid)
    code = _codes(c_tid, tids)
    # Processes whose steps all lie on one thread, and that thread's code.
    pt = pd.DataFrame({"pid": s_pid, "code": s_code}).drop_duplicates()
    pt = pt[~pt["pid"].duplicated(keep=False)].sort_values("pid")
    c_pid = calls["pid"].to_numpy(dtype=np.int64)
    if 0 < len(pt) <= 4:  # a few processes: one comparison each, no code array
        for p, c in zip(pt["pid"].to_numpy(np.int64), pt["code"].to_numpy(np.int32),
                        strict=True):
            np.copyto(code, c, where=(code < 0) & (c_pid == p))
    elif len(pt):
        own = _codes(c_pid, pt["pid"].to_numpy(np.int64))
        np.copyto(code, pt["code"].to_numpy(np.int32)[own], where=(code < 0) & (own >= 0))
    return _in_ranges(code, calls["start_ns"].to_numpy(np.int64),
                      calls["end_ns"].to_numpy(np.int64), s_code,
                      inst["start_ns"].to_numpy(np.int64), inst["end_ns"].to_numpy(np.int64))


def _codes(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Position (int32) of each value in ``table`` (sorted, distinct, small: threads or
    processes with steps), -1 where absent."""
    if not len(table):
        return np.full(len(values), -1, dtype=np.int32)
    if len(table) == 1:
        return np.where(values == table[0], np.int32(0), np.int32(-1))
    pos = np.searchsorted(table, values).astype(np.int32)
    pos[pos == len(table)] = 0
    pos[table[pos] != values] = -1
    return pos


def _in_ranges(p_code: np.ndarray, p_start: np.ndarray, p_end: np.ndarray,
               r_code: np.ndarray, r_start: np.ndarray, r_end: np.ndarray) -> np.ndarray:
    """:func:`~cgprof.metrics.intervals.assign_to_ranges` with the keys coded 0..k-1 (-1: a
    point whose key has no range): the index of the range of the same code that contains
    each point (the latest-starting one that begins by the point), or -1.

    Points sorted by start (API calls are) and few codes: per code, each range's first point
    at or after its start (a ``searchsorted`` of the ranges into the points, not of a
    million points into the ranges); repeating each range's number up to the next one's
    first point numbers the latest range begun by every point. Otherwise one
    ``searchsorted`` of the points into the ranges over the composite
    ``code * width + (start - lo)``, which sorts as (code, start). (Few million-row
    temporaries: each costs its page faults.)"""
    m = len(p_start)
    if not len(r_start) or not m:
        return np.full(m, -1, dtype=np.int64)
    order = np.lexsort((r_start, r_code))
    rc, rs = r_code[order], r_start[order]
    k = int(rc[-1]) + 1
    if k <= 4 and not (p_start[1:] < p_start[:-1]).any():
        j = None
        bounds = np.searchsorted(rc, np.arange(k + 1))
        for c, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            if a == b:
                continue
            at = np.searchsorted(p_start, rs[a:b], "left")
            runs = np.diff(np.concatenate([[0], at, [m]]))
            jc = np.repeat(np.concatenate([[-1], np.arange(a, b)]), runs)
            if j is None:
                j = jc
                j[p_code != c] = -1
            else:
                mine = p_code == c
                j[mine] = jc[mine]
        if j is None:
            return np.full(m, -1, dtype=np.int64)
    else:
        lo = min(int(rs[0]), int(p_start.min()))
        width = max(int(r_start.max()), int(p_start.max())) - lo + 1
        if k * width >= 2**62:
            return assign_to_ranges(p_code, p_start, p_end, r_code, r_start, r_end)
        j = np.searchsorted(rc * width + (rs - lo),
                            p_code.astype(np.int64) * width + (p_start - lo), "right") - 1
        j[(j >= 0) & (rc[np.maximum(j, 0)] != p_code)] = -1
    bad = j < 0
    np.maximum(j, 0, out=j)
    if (order == np.arange(len(order))).all():  # ranges in (code, start) order: j is the index
        bad |= p_end > r_end[j]
        j[bad] = -1
        return j
    res = r_end[order][j]
    bad |= p_end > res
    np.take(order, j, out=res)
    res[bad] = -1
    return res


def _launch_steps(ops: pd.DataFrame, calls: pd.DataFrame, live: np.ndarray | None,
                  step_c: np.ndarray, in_graph: np.ndarray, n: int, whole: bool
                  ) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, tuple | None]:
    """Each op's step (the step of the live call with its (pid, corr_id), the first such
    call when one repeats; -1: none), graph replays per step (distinct keys among replayed
    ops) and call_steps (the first live call of each key, in call order). ``live`` selects
    the live calls (None: every call), whose steps are ``step_c``. Whole-trace: every op is
    step 0's. Also :attr:`StepResult.lookup` (None where the table does not apply)."""
    pid_c, corr_c = calls["pid"].to_numpy(), calls["corr_id"].to_numpy()
    if live is not None:  # one process: pid_c stays a constant_view (10M calls: 80 MB)
        pid_c, corr_c = take_rows(pid_c, live), corr_c[live]
    dense = _dense_steps(ops["pid"].to_numpy(), ops["corr_id"].to_numpy(), pid_c, corr_c,
                         step_c)
    if dense is not None:  # one process, distinct correlation ids: every call is its key's
        table, lo = dense
        call_steps = pd.DataFrame({"pid": pid_c, "corr_id": corr_c, "step": step_c},
                                  copy=False)
        # kept for later stages while small (not a 10M-call trace's: its memory)
        lookup = (table, lo, int(pid_c[0]), call_steps) if len(table) <= _LOOKUP_KEPT else None
        del pid_c, corr_c
        if whole:
            op_step = np.zeros(len(ops), dtype=np.int32)
            replays = np.array([len(ops[["pid", "corr_id"]][in_graph].drop_duplicates())])
            return op_step, replays, call_steps, lookup
        key = ops["corr_id"].to_numpy()
        key = key - lo if lo else key
        op_step = table_get(table, key)
        # A replay is a distinct key among the replayed ops that have a step.
        seen = np.zeros(len(table), dtype=bool)
        seen[key[(op_step >= 0) & in_graph]] = True
        replays = np.bincount(table[seen], minlength=n)[:n]
        return op_step, replays, call_steps, lookup
    # ``row``: the position among the live calls of the first one with the op's key (-1:
    # none); ``keep``: the positions of the first call of each key (None: every call).
    pair = pair_keys(ops, calls)
    keep = None
    if pair is not None:
        left, right = pair[0], pair[1] if live is None else pair[1][live]
        del pair
        row = _first_match_dense(left, right) if len(right) else None
        if row is None:
            # The first call of each (pid, corr_id), in call order (drop_duplicates), and each
            # op's row among the calls, from one np.unique of the int64 keys.
            uniq, first = np.unique(right, return_index=True)
            keep = np.sort(first)
            if len(uniq):
                pos = np.searchsorted(uniq, left)
                pos[pos == len(uniq)] = 0
                row = np.where(uniq[pos] == left, first[pos], -1)
            else:
                row = np.full(len(left), -1, dtype=np.int64)
            del uniq, first
        del left, right
        call_steps = pd.DataFrame(
            {"pid": pid_c, "corr_id": corr_c, "step": step_c} if keep is None else
            {"pid": take_rows(pid_c, keep), "corr_id": corr_c[keep], "step": step_c[keep]},
            copy=False)
    else:  # keys that are not plain int64: pandas' duplicated and a left merge
        c = calls[["pid", "corr_id"]]
        c = (c if live is None else c[live]).reset_index(drop=True)
        keep = np.flatnonzero(~c.duplicated(["pid", "corr_id"]).to_numpy(dtype=bool))
        call_steps = c.take(keep).assign(step=step_c[keep]).reset_index(drop=True)
        look = call_steps[["pid", "corr_id"]].assign(row=keep)
        row = (ops[["pid", "corr_id"]].merge(look, on=["pid", "corr_id"], how="left")["row"]
               .fillna(-1).to_numpy(np.int64))
        del c, look
    del pid_c, corr_c
    if whole:
        op_step = np.zeros(len(ops), dtype=np.int32)
        replays = np.array([len(ops[["pid", "corr_id"]][in_graph].drop_duplicates())])
        return op_step, replays, call_steps, None
    hit = row >= 0
    op_step = np.full(len(ops), -1, dtype=np.int32)
    op_step[hit] = step_c[row[hit]]
    # A replay is a distinct (pid, corr_id) among replayed ops: a distinct call row.
    replayed = np.zeros(len(step_c), dtype=bool)
    replayed[row[hit & in_graph]] = True
    replays = np.bincount(step_c[replayed], minlength=n)[:n]
    return op_step, replays, call_steps, None


#: Slots of a :attr:`StepResult.lookup` table at most (int32: 16 MB).
_LOOKUP_KEPT = 1 << 22


def _dense_steps(o_pid: np.ndarray, o_corr: np.ndarray, pid_c: np.ndarray,
                 corr_c: np.ndarray, step_c: np.ndarray) -> tuple[np.ndarray, int] | None:
    """A lookup table from correlation id to step, ``table[corr_id - lo]`` (int32, -1: no
    call), and ``lo``, for looking up keys (``o_pid``, ``o_corr``: ops, or gaps' next ops)
    among calls (``pid_c``, ``corr_c``, ``step_c``), when all are of one process (int64
    keys) and the calls' correlation ids are distinct and span not much more than their
    count: one write of the table, no hash, sort or int64 position arrays (each
    million-row temporary costs its page faults). None otherwise."""
    m = len(corr_c)
    if not m or m >= 2**31 or not all(a.dtype == np.int64 for a in
                                      (pid_c, corr_c, o_pid, o_corr)):
        return None
    p = pid_c[0]
    if pid_c.min() != p or pid_c.max() != p or (len(o_pid) and (o_pid.min() != p
                                                                 or o_pid.max() != p)):
        return None
    lo, hi = int(corr_c.min()), int(corr_c.max())
    room = dense_room(m)
    if hi - lo >= room:
        return None
    if 0 <= lo and hi < room:  # ids from about 0 (as CUPTI counts): index by the id itself
        lo = 0
    table = np.full(hi - lo + 1, -1, dtype=np.int32)
    table[corr_c - lo if lo else corr_c] = step_c
    # Steps are >= 0: as many filled slots as calls when no correlation id repeats (else the
    # first call of each id is needed: the sort path); rising ids repeat none (a pass over
    # the calls, not over the table: see dense_room).
    if step_c.min() < 0 or not ((corr_c[1:] > corr_c[:-1]).all()
                                or np.count_nonzero(table >= 0) == m):
        return None
    return table, lo
