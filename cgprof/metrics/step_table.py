"""The step table's figures (:func:`_measure`): per step its API calls and host time by
family, its mode (capture, warm-up, graph, eager), its group, and the span, busy time and
kernels of its GPU work, from the calls and operations attributed to it
(:mod:`cgprof.metrics.step_attribution`); counts and sums per step by ``np.bincount``, a
chunk of rows at a time (:data:`_CHUNK`, read through this module by every path that uses
it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.io.trace import column
from cgprof.metrics import launches as L
from cgprof.metrics.intervals import _segment_cummax, arrays_sorted
from cgprof.metrics.step_attribution import _attribute_calls, _launch_steps
from cgprof.metrics.step_result import OUT_OF_WINDOW_MODES, STEP_COLUMNS


def _as_reindexed(values: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Per-step int64 values (0 where ``found`` is False), as the pandas ``reindex`` of an
    int64 column over the steps made them: through float64 when a step is missing (NaN), so
    values past 2**53 round the same way and the table stays what it was."""
    return values if found.all() else values.astype(np.float64).astype(np.int64)


def _family_codes(fam: pd.Series) -> tuple[np.ndarray, list]:
    """Category code of every call's family (-1: missing) and the families."""
    cat = fam.array if isinstance(fam.dtype, pd.CategoricalDtype) else pd.Categorical(fam)
    return cat.codes, list(cat.categories)


def _names_with(names: pd.Series, texts: tuple[str, ...]) -> np.ndarray:
    """Rows whose name contains one of ``texts`` (``L.name_contains`` of each, or-ed), for a
    categorical decided once per category and read through the codes once."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        out = np.zeros(len(names), dtype=bool)
        for t in texts:
            out |= L.name_contains(names, t)
        return out
    per_cat = np.asarray([any(t in str(c) for t in texts) for c in names.cat.categories]
                         + [False], dtype=bool)
    return per_cat[names.cat.codes.to_numpy()]  # code -1 (missing) picks the final False


def _is_value(col: pd.Series, value: str) -> np.ndarray:
    """``(col == value).to_numpy()``, for a categorical through its codes."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        if value not in cats:
            return np.zeros(len(col), dtype=bool)
        return col.cat.codes.to_numpy() == cats.get_loc(value)
    return (col == value).to_numpy(dtype=bool)


def _busy_per_step(step: np.ndarray, start: np.ndarray, end: np.ndarray, n: int
                   ) -> dict[str, np.ndarray]:
    """Per step (arrays of length n): ops, first start, last end, busy (the length of the
    union of the step's ops) and ``found`` (the step has ops). Rows sorted by (step,
    start_ns); a step's ops end where the running maximum of ``end_ns`` (restarted per step)
    says, and its idle time is the sum of the gaps between a start and the running maximum
    before it: :func:`~cgprof.metrics.intervals.union_busy` on numpy arrays."""
    out = {k: np.zeros(n, dtype=np.int64) for k in ("ops", "first", "last", "busy")}
    out["found"] = np.zeros(n, dtype=bool)
    m = len(step)
    if not m:
        return out
    first = np.empty(m, dtype=bool)
    first[0] = True
    np.not_equal(step[1:], step[:-1], out=first[1:])
    at = np.flatnonzero(first)
    # The running maximum of end_ns restarted per step. One plain running maximum serves
    # when no step's first op ends before the ops of earlier steps did (steps follow each
    # other on the GPU); else lift each step above the ones before it (steps are sorted, so
    # the step number is a rising offset) so that one running maximum restarts per step.
    runmax = np.maximum.accumulate(end)
    if not (runmax[at[1:] - 1] <= end[at[1:]]).all():
        lo = int(end.min())
        span = int(end.max()) - lo + 1
        if (int(step[-1]) + 1) * span < 2**62:
            off = np.multiply(step, span, dtype=np.int64)
            np.subtract(end, lo, out=runmax)
            runmax += off
            np.maximum.accumulate(runmax, out=runmax)
            runmax -= off
            runmax += lo
        else:
            for a, b in zip(at, np.append(at[1:], m), strict=True):
                np.maximum.accumulate(end[a:b], out=runmax[a:b])
    gap = np.empty(m, dtype=np.int64)
    gap[0] = 0
    np.subtract(start[1:], runmax[:-1], out=gap[1:])
    np.maximum(gap, 0, out=gap)
    gap[first] = 0
    s = step[at]
    out["ops"][s] = np.diff(np.append(at, m))
    out["first"][s] = start[at]
    out["last"][s] = runmax[np.append(at[1:], m) - 1]
    out["busy"][s] = out["last"][s] - out["first"][s] - np.add.reduceat(gap, at)
    out["found"][s] = True
    return out


#: Calls per chunk of :func:`_per_step_family`.
_CHUNK = 1 << 20


def _per_step_family(call_step: np.ndarray, live: np.ndarray | None, fcode: np.ndarray,
                     dur: np.ndarray | None, n: int, k: int, plus: int = 1
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows and (``dur`` not None) float64 sums of ``dur`` per (step, family) of the ``live``
    rows (None: all): bincounts over ``step * k + family + plus``, reshaped to (n, k). A chunk
    of rows at a time while every float sum is exact (so adding the chunks' sums gives the
    one-pass bincount's figures): the bin numbers, the float64 weights and the live rows'
    values were each a 10M-long fresh array."""
    m = int(np.count_nonzero(live)) if live is not None else len(call_step)
    big = max(-int(dur.min()), int(dur.max())) if dur is not None and len(dur) else 0
    step = _CHUNK if big * max(m, 1) < 2**53 else max(len(call_step), 1)
    counts = np.zeros(n * k, dtype=np.int64)
    sums = np.zeros(n * k, dtype=np.float64) if dur is not None else None
    for a in range(0, len(call_step), step):
        cut = slice(a, a + step)
        sc, fc = call_step[cut], fcode[cut]
        d = dur[cut] if dur is not None else None
        if live is not None:
            keep = live[cut]
            sc, fc = sc[keep], fc[keep]
            d = d[keep] if d is not None else None
        bins = np.multiply(sc, k, dtype=np.int64)
        bins += fc
        if plus:
            bins += plus
        counts += np.bincount(bins, minlength=n * k)[: n * k]
        if d is not None:
            assert sums is not None  # d is not None: dur is not None
            sums += np.bincount(bins, weights=d.astype(np.float64), minlength=n * k)[: n * k]
    return counts.reshape(n, k), (sums.reshape(n, k) if sums is not None else None)


def _steps_follow_time(step: np.ndarray, start: np.ndarray, end: np.ndarray,
                       mask: np.ndarray | None) -> bool:
    """True when the ops are in (start, end) order and the steps of the ``mask`` rows (None:
    all) never decrease: then those rows are in (step, start) order as they stand."""
    if not arrays_sorted([start, end]):
        return False
    last = -1
    for a in range(0, len(step), _CHUNK):
        v = step[a:a + _CHUNK] if mask is None else step[a:a + _CHUNK][mask[a:a + _CHUNK]]
        if len(v):
            if v[0] < last or (v[1:] < v[:-1]).any():
                return False
            last = v[-1]
    return True


def _busy_per_step_chunked(step: np.ndarray, start: np.ndarray, end: np.ndarray, n: int,
                           mask: np.ndarray | None) -> dict[str, np.ndarray]:
    """:func:`_busy_per_step` of the ``mask`` rows (None: all), which are in (step, start)
    order (:func:`_steps_follow_time`), a chunk at a time: a step that continues from the
    last chunk carries its running max of the ends in. Each temporary is a chunk long (the
    rows taken, the running maximum, the gaps: 80 MB fresh arrays each at 10M ops)."""
    out = {k: np.zeros(n, dtype=np.int64) for k in ("ops", "first", "last", "busy")}
    out["found"] = np.zeros(n, dtype=bool)
    gaps = np.zeros(n, dtype=np.int64)
    c_step, c_max = -1, 0
    for a in range(0, len(step), _CHUNK):
        cut = slice(a, a + _CHUNK)
        st, s, e = step[cut], start[cut], end[cut]
        if mask is not None:
            keep = mask[cut]
            st, s, e = st[keep], s[keep], e[keep]
        m = len(st)
        if not m:
            continue
        first = np.empty(m, dtype=bool)
        first[0] = st[0] != c_step
        np.not_equal(st[1:], st[:-1], out=first[1:])
        if not first[0]:
            e = e.copy()  # row 0 carries the running max in (``e`` may be the ops' column)
            e[0] = max(int(e[0]), c_max)
        starts = first.copy()
        starts[0] = True  # restarting at a carried row 0 is the same: its end holds the max
        at = np.flatnonzero(starts)
        # one plain running maximum when no step's first op ends before the earlier steps'
        # ops did (steps follow each other on the GPU), as _busy_per_step
        runmax = np.maximum.accumulate(e)
        if not (runmax[at[1:] - 1] <= e[at[1:]]).all():
            runmax = _segment_cummax(e, starts)
        gap = np.empty(m, dtype=np.int64)
        gap[0] = 0 if first[0] else max(int(s[0]) - c_max, 0)
        np.subtract(s[1:], runmax[:-1], out=gap[1:])
        np.maximum(gap[1:], 0, out=gap[1:])
        gap[first] = 0
        sv = st[at]
        seg_end = np.append(at[1:], m)
        out["ops"][sv] += seg_end - at
        new = first[at]
        out["first"][sv[new]] = s[at[new]]
        out["last"][sv] = runmax[seg_end - 1]
        gaps[sv] += np.add.reduceat(gap, at)
        out["found"][sv] = True
        c_step, c_max = int(st[-1]), int(runmax[-1])
    found = out["found"]
    out["busy"][found] = (out["last"] - out["first"] - gaps)[found]
    return out


def _measure(ranges: pd.DataFrame, inst: pd.DataFrame, calls: pd.DataFrame, ops: pd.DataFrame,
             whole: bool, first_step: int = 0, replayed_before: bool = False
             ) -> tuple[pd.DataFrame, pd.DataFrame, tuple | None]:
    """The step table and call_steps; numpy over the few columns needed, each call and op
    given its step once, counts and sums per step by ``np.bincount``. ``first_step``: the
    step number of ``inst``'s first row, ``replayed_before``: an earlier step launched a
    graph (both for a chunk of the steps: :func:`measure_chunk`)."""
    n = len(inst)
    idx = np.arange(n)
    if whole:
        call_step = np.zeros(len(calls), dtype=np.int64)
    else:
        call_step = _attribute_calls(calls, inst)
    # Steps that captured a graph (calls made during stream capture, or its begin call).
    begins = _names_with(calls["name"], ("StreamBeginCapture", "GraphInstantiate"))
    in_capture = calls["in_capture"].to_numpy(dtype=bool)
    capturing = call_step[(call_step >= 0) & (in_capture | begins)]
    live = (call_step >= 0) & ~in_capture
    every = bool(live.all())

    def pick(a: np.ndarray) -> np.ndarray:  # the live calls' values
        return a if every else a[live]

    step_c = pick(call_step)
    # Calls and host time per (step, family): one bincount each over step * k + family.
    fcode, fams = _family_codes(calls["family"])
    k = len(fams) + 1
    per_fam, host_fam = _per_step_family(call_step, None if every else live, fcode,
                                         column(calls, "dur_ns").astype(np.int64, copy=False),
                                         n, k)
    assert host_fam is not None  # dur given: its sums

    def fam_col(table: np.ndarray, family: str) -> np.ndarray:
        return table[:, fams.index(family) + 1] if family in fams else np.zeros(n, table.dtype)

    launches = fam_col(per_fam, L.KERNEL_LAUNCH)
    graph_launches = fam_col(per_fam, L.GRAPH_LAUNCH)
    launch_host = fam_col(host_fam, L.KERNEL_LAUNCH) + fam_col(host_fam, L.GRAPH_LAUNCH)

    if whole:
        groups, warm_a = np.full(n, "", dtype=object), np.zeros(n, dtype=bool)
    else:
        groups, warm_a = _groups(ranges, inst)
        if "warmup" in inst:  # steps found in the launch stream say which are warm-up
            warm_a = warm_a | inst["warmup"].to_numpy(dtype=bool)
    start_ns = inst["start_ns"].to_numpy(np.int64)
    end_ns = inst["end_ns"].to_numpy(np.int64)
    dur_ns = end_ns - start_ns
    captured = np.zeros(n, dtype=bool)
    captured[capturing] = True
    launched = graph_launches > 0
    # Graphs "existed" for a step when an earlier step (in time) replayed one.
    order = np.argsort(start_ns, kind="stable")
    before: np.ndarray = np.cumsum(launched[order]) - launched[order]
    seen = np.zeros(n, dtype=bool)
    seen[order] = (before > 0) | replayed_before
    recapture = captured & seen & ~warm_a
    mode = np.select([captured & ~recapture, warm_a, launched],
                     ["capture", "warmup", "graph"], default="eager")

    # GPU work -> step of its launch call, on (pid, corr_id).
    in_graph = ops["in_graph"].to_numpy(dtype=bool)
    op_step, replays, call_steps, lookup = _launch_steps(ops, calls, live if not every else None,
                                                         step_c, in_graph, n, whole)
    hit = op_step >= 0
    all_hit = bool(hit.all())

    def mine(a: np.ndarray) -> np.ndarray:  # the values of the ops of some step
        return a if all_hit else a[hit]

    # Ops per (step, class): 0/1 non-kernel eager/replayed, 2/3 kernel eager/replayed,
    # 4 graph-granularity replay rows.
    cls = np.where(_is_value(ops["kind"], "graph"), np.int8(4),
                   _is_value(ops["kind"], "kernel").astype(np.int8) * np.int8(2) + in_graph)
    per_cls = _per_step_family(op_step, None if all_hit else hit, cls, None, n, 5, plus=0)[0]
    del cls
    hidden = per_cls[:, 4] > 0
    # The union of each step's ops, of its replayed ops and of its other ops.
    s_all, e_all = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    if _steps_follow_time(op_step, s_all, e_all, None if all_hit else hit):
        # in (step, start) order already: each union a chunk of ops at a time
        u = _busy_per_step_chunked(op_step, s_all, e_all, n, None if all_hit else hit)
        g_busy = _busy_per_step_chunked(op_step, s_all, e_all, n, hit & in_graph)
        e_busy = _busy_per_step_chunked(op_step, s_all, e_all, n, hit & ~in_graph)
        del op_step
    else:
        # ops sorted by (step, start_ns), then the two subsets as masks of that order
        st, ig = mine(op_step), mine(in_graph)
        s0, e0 = mine(s_all), mine(e_all)
        del op_step
        by_time = arrays_sorted([s0, e0])  # (start, end) order, as gpu_ops gives them
        if not by_time or np.any(st[1:] < st[:-1]):
            # in time order already, a stable sort by step keeps each step's ops in time order
            order = np.argsort(st, kind="stable") if by_time else np.lexsort((e0, s0, st))
            st, ig, s0, e0 = st[order], ig[order], s0[order], e0[order]
            del order
        u = _busy_per_step(st, s0, e0, n)
        g_busy = _busy_per_step(st[ig], s0[ig], e0[ig], n)
        e_busy = _busy_per_step(st[~ig], s0[~ig], e0[~ig], n)
        del st, ig, s0, e0

    found = u["found"]
    missing = ~found
    span = u["last"] - u["first"]
    busy = _as_reindexed(u["busy"], found)
    if found.all():
        idle = span - u["busy"]
    else:
        idle = (span.astype(np.float64) - u["busy"].astype(np.float64)).astype(np.int64)
    span = _as_reindexed(span, found)
    effective = np.maximum(dur_ns, span)
    span_f = np.where(missing, 0.0, span.astype(np.float64))
    ok = found & (span_f > 0)
    compactness = np.divide(busy.astype(np.float64), span_f, out=np.zeros(n), where=ok)
    eff_ok = effective > 0
    busy_pct = np.divide(100.0 * busy, effective.astype(np.float64), out=np.zeros(n),
                         where=eff_ok)
    # Graph-granularity rows hide the replay's inside: its kernels and gaps are unknown.
    out = pd.DataFrame({
        "step": idx + first_step if first_step else idx,
        "index": inst["index"].to_numpy(np.int64),
        "payload": pd.array(inst["payload"], dtype="Int64"),
        "group": groups,
        "mode": mode,
        "pid": inst["pid"].to_numpy(np.int64),
        "tid": inst["tid"].to_numpy(np.int64),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "dur_ns": dur_ns,
        "effective_ns": effective,
        "api_calls": np.bincount(step_c, minlength=n)[:n],
        "kernel_launches": launches,
        "graph_launches": graph_launches,
        "memcpy_calls": fam_col(per_fam, L.MEMCPY),
        "sync_calls": fam_col(per_fam, L.SYNC),
        "launch_host_ns": launch_host.astype(np.int64),
        "sync_host_ns": fam_col(host_fam, L.SYNC).astype(np.int64),
        "kernels": pd.arrays.IntegerArray(
            np.where(hidden, 0, per_cls[:, 2] + per_cls[:, 3]), hidden.copy()),
        "graph_replays": replays,
        "gpu_ops": _as_reindexed(u["ops"], found),
        "gpu_start_ns": pd.arrays.IntegerArray(_as_reindexed(u["first"], found), missing),
        "gpu_end_ns": pd.arrays.IntegerArray(_as_reindexed(u["last"], found), missing.copy()),
        "gpu_span_ns": pd.arrays.IntegerArray(span, missing.copy()),
        "gpu_busy_ns": busy,
        "gpu_idle_ns": pd.arrays.IntegerArray(idle, missing.copy()),
        "compactness": pd.arrays.FloatingArray(compactness, ~ok | hidden),
        "busy_pct": pd.arrays.FloatingArray(busy_pct, ~eff_ok),
        # Filled by classify_steps() once the GPU gaps are known.
        "launch_wait_ns": np.zeros(n, dtype=np.int64),
        "launch_bound": np.zeros(n, dtype=bool),
        "graph_kernels": pd.arrays.IntegerArray(per_cls[:, 3].copy(), hidden.copy()),
        "eager_kernels": pd.array(per_cls[:, 2].copy(), dtype="Int64"),
        "graph_gpu_ns": _as_reindexed(g_busy["busy"], g_busy["found"]),
        "eager_gpu_ns": _as_reindexed(e_busy["busy"], e_busy["found"]),
        "recapture": recapture,
        "fallback": seen & ~launched & ~warm_a & ~recapture,
        "in_window": ~np.isin(mode, OUT_OF_WINDOW_MODES),
    })
    return out[STEP_COLUMNS], call_steps, lookup


def _groups(ranges: pd.DataFrame, inst: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step: the innermost other push/pop range enclosing it on its thread (e.g. "eager"),
    and whether a ``warmup`` range of domain ``cgprof`` encloses or lies inside it (the
    runners' warm-up steps: cgprof.mark's NVTX contract). ``ranges``: the trace's
    cgprof.metrics.summaries.nvtx_ranges.

    The other ranges' columns are made once as arrays (names, warm-up flags, threads, times),
    then each step thread takes its rows from them: the per-thread frame filters, sorts and
    string casts cost the ResNet-18 trace ~3 ms (1282 ranges, 320 steps)."""
    pushpop = ranges["event_type"].isin([S.NVTX_PUSHPOP, S.NVTXT_PUSHPOP]).to_numpy(dtype=bool)
    ranges = ranges if pushpop.all() else ranges[pushpop]
    step_names = set(pd.Series(pd.unique(inst["name"])).astype(str))
    # Ranges named otherwise than the steps (a missing name is never a step's): decided once
    # per distinct name.
    codes, uniques = pd.factorize(ranges["name"])
    other_name = np.asarray([str(u) not in step_names for u in uniques] + [True], dtype=bool)
    keep = other_name[codes]  # code -1 (missing) picks the last True
    others = ranges if keep.all() else ranges[keep]
    result = np.full(len(inst), "", dtype=object)
    warm = np.zeros(len(inst), dtype=bool)
    if others.empty:
        return result, warm
    o_tid = others["global_tid"].to_numpy()
    o_start = others["start_ns"].to_numpy(np.int64)
    o_end = others["end_ns"].to_numpy(np.int64)
    o_text = others["text"].astype(str).to_numpy()
    o_warm = ((others["text"] == "warmup") & (others["domain"] == "cgprof")).to_numpy()
    s_tid = inst["global_tid"].to_numpy()
    s_start = inst["start_ns"].to_numpy(np.int64)
    s_end = inst["end_ns"].to_numpy(np.int64)
    for gtid in pd.unique(s_tid):
        rows = np.flatnonzero(o_tid == gtid)
        if not len(rows):
            continue
        rows = rows[np.argsort(o_start[rows], kind="stable")]
        os_, oe = o_start[rows], o_end[rows]
        names = o_text[rows]
        is_warm = o_warm[rows]
        pos = np.flatnonzero(s_tid == gtid)  # inst has a RangeIndex; each step is in one group
        s, e = s_start[pos], s_end[pos]
        j = np.searchsorted(os_, s, "right")
        # Push/pop ranges nest: walk back over the latest-starting ones that enclose (at most
        # 63 back), all steps of the thread at once; the first that encloses names the group.
        named = np.full(len(s), -1, dtype=np.int64)
        warm_t = np.zeros(len(s), dtype=bool)
        for d in range(1, 64):
            k = j - d
            live = k >= 0
            if not live.any():
                break
            kk = np.where(live, k, 0)
            hit = live & (oe[kk] >= e)
            named = np.where(hit & (named < 0), kk, named)
            warm_t |= hit & is_warm[kk]
        # A warm-up range inside the step (graph warm-up iterations on a side stream): one
        # that starts in (start, end) and ends by the step's end.
        inner = np.searchsorted(os_, e, "left")
        w_idx = np.flatnonzero(is_warm)
        if len(w_idx):
            lo = np.searchsorted(w_idx, j, "left")
            hi = np.searchsorted(w_idx, inner, "left")
            ends = np.append(oe[w_idx], np.iinfo(np.int64).max)
            has = hi > lo
            first_end = np.minimum.reduceat(ends, np.ravel(np.column_stack([lo, hi])))[::2]
            warm_t |= has & (first_end <= e)
        result[pos[named >= 0]] = names[named[named >= 0]]
        warm[pos] |= warm_t
    return result, warm
