"""Cut a trace into steps (instances of one NVTX range) and measure each step.

Which range: ``--step NAME[@DOMAIN]``; by default cgprof's own ``step`` range in domain
``cgprof`` when present, else the best of the repeating ranges scored on evidence, or a fixed
cycle of top-level ranges, else the whole trace as one step (rules in
cgprof.metrics.stepchoice; said plainly in ``StepResult.source`` and ``rule``).

Attribution starts from what nsys's NVTX projection does: a CUDA API call belongs to a step
when it lies inside the range on the same thread. Unlike nsys, calls on threads that emit no
step ranges (PyTorch's autograd threads, which launch the whole backward pass) belong to the
step of their process that contains them in time; without this a training step would lose its
backward kernels. GPU work belongs to the step of the call that launched it (joined on pid +
correlationId), so a graph replay's kernels count for the step that called
``cudaGraphLaunch``. It is a sorted sweep, not an SQL range join.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.errors import AnalysisError
from cgprof.io.trace import Trace, column, take_rows
from cgprof.metrics import launches as L
from cgprof.metrics.intervals import (
    _first_match_dense,
    _segment_cummax,
    arrays_sorted,
    assign_to_ranges,
    dense_room,
    pair_keys,
    table_get,
)
from cgprof.metrics.stepchoice import (  # noqa: F401  (re-exported)
    DEFAULT_STEP,
    StepChoice,
    parse_step_option,
)
from cgprof.metrics.stepchoice import choose_step_ranges as _choose
from cgprof.metrics.summaries import nvtx_ranges

#: A step is launch-bound when the GPU was busy for less than BUSY_SHARE of the step's host
#: time and at least WAIT_SHARE of the GPU's idle time in the step was spent waiting for the
#: host to launch the next work (gaps of kind ``launch_bound``, see cgprof.metrics.gaps).
BUSY_SHARE = 0.5
WAIT_SHARE = 0.5

STEP_COLUMNS = [
    "step", "index", "payload", "group", "mode", "pid", "tid", "start_ns", "end_ns", "dur_ns",
    "effective_ns",
    "api_calls", "kernel_launches", "graph_launches", "memcpy_calls", "sync_calls",
    "launch_host_ns", "sync_host_ns", "kernels", "graph_replays", "gpu_ops", "gpu_start_ns",
    "gpu_end_ns", "gpu_span_ns", "gpu_busy_ns", "gpu_idle_ns", "compactness", "busy_pct",
    "launch_wait_ns", "launch_bound",
    "graph_kernels", "eager_kernels", "graph_gpu_ns", "eager_gpu_ns", "recapture", "fallback",
    "in_window",
]

#: Modes of steps outside the analysis window (warm-up, and captures before any replay).
OUT_OF_WINDOW_MODES = ("warmup", "capture")


@dataclass
class StepResult:
    """Per-step table and how the steps were chosen.

    steps   one row per step (STEP_COLUMNS):
            step          0-based after --skip; index: position among all instances
            effective_ns  the step's cost: the longer of its host range and its GPU span
                          (a graphed step returns to the host before its replay ends)
            payload       NVTX payload (e.g. the step number); group: innermost enclosing
                          range on the same thread (e.g. "eager")
            mode          "capture" (it captured a graph), "warmup" (a cgprof ``warmup``
                          range encloses or lies inside it), "graph" (it called a graph
                          launch), else "eager"
            start_ns, end_ns, dur_ns   the host range
            api_calls, kernel_launches, graph_launches, memcpy_calls, sync_calls
                          calls by family (launches during stream capture excluded)
            launch_host_ns / sync_host_ns   host time inside launch / sync calls
            kernels       kernel rows executed (<NA> when graph-granularity replays hide them)
            graph_replays, gpu_ops     replays and GPU operations launched by the step
            gpu_start_ns, gpu_end_ns, gpu_span_ns   the step's GPU projection
            gpu_busy_ns   union of the step's GPU work; gpu_idle_ns = span - busy
            compactness   busy / span (<NA> when a graph-granularity replay hides it)
            busy_pct      100 * busy / effective_ns: how much of the step's cost the GPU
                          spent working
            launch_wait_ns  GPU idle time before the step's work spent waiting for its launch
                          calls (gaps of kind launch_bound)
            launch_bound  see BUSY_SHARE and WAIT_SHARE
            graph_kernels / eager_kernels   kernels executed inside graph replays / launched
                          one by one (graph_kernels is <NA> when graph-granularity replay rows
                          hide the replayed kernels)
            graph_gpu_ns / eager_gpu_ns     GPU busy time (union) of the step's replay work /
                          of its other work (copies, memsets, eager kernels); the two may
                          overlap on different streams, so their sum can exceed gpu_busy_ns
            recapture     the step captured or instantiated a graph after earlier steps had
                          replayed graphs (CUDA graph trees re-record on new shapes); such a
                          step is steady state, not mode "capture"
            fallback      the step launched no graph although earlier steps had: it ran eager
            in_window     the step is in the analysis window: not warm-up, not a capture
                          before the first replay (every table and figure covers these steps)
    name    the range name used ("cgprof:step"), or None for whole-trace
    source  "option", "default", "scored", "cycle" or "whole-trace"
            (cgprof.metrics.stepchoice)
    skipped number of leading instances dropped with --skip
    call_steps  (pid, corr_id, step) of every API call attributed to a step
    rule    one sentence: which rule chose the steps and why
    candidates  the scored alternatives, best first (stepchoice.CANDIDATE_COLUMNS; empty
            when --step or cgprof's own step range chose)
    """

    steps: pd.DataFrame
    name: str | None
    source: str
    skipped: int
    total_instances: int
    call_steps: pd.DataFrame
    rule: str = ""
    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: ``call_steps`` as :func:`_dense_steps`' lookup table (table, lo, pid, the call_steps
    #: frame it was made of) when it applied (one process, distinct correlation ids), else
    #: None: classify_steps and :meth:`step_of_calls` read it instead of building it again
    #: (~2 ms each, ResNet-18); only while ``call_steps`` is that frame (:meth:`_lookup`)
    lookup: tuple | None = field(default=None, repr=False, compare=False)

    def _lookup(self) -> tuple[np.ndarray, int, int] | None:
        """:attr:`lookup` when it is of this result's own ``call_steps`` (a copy with other
        call_steps, ``dataclasses.replace``, has none)."""
        if self.lookup is None or self.lookup[3] is not self.call_steps:
            return None
        return self.lookup[:3]

    def step_of_calls(self, calls: pd.DataFrame) -> np.ndarray | None:
        """:func:`cgprof.metrics.coverage.call_steps_of` of ``calls`` (the step of every call,
        -1 for none) from :attr:`lookup`, or None when there is none or ``calls`` are not
        of its one process (plain int64 keys)."""
        lookup = self._lookup()
        if lookup is None or not len(calls):
            return None
        table, lo, pid = lookup
        c_pid, c_corr = calls["pid"], calls["corr_id"]
        if c_pid.dtype != np.int64 or c_corr.dtype != np.int64:
            return None
        p = c_pid.to_numpy()
        if int(p.min()) != pid or int(p.max()) != pid:
            return None
        key = c_corr.to_numpy()
        return table_get(table, key - lo if lo else key).astype(np.int64)

    def window_steps(self) -> pd.DataFrame:
        """The steps of the analysis window: steady state (``in_window``); every step when
        there is no steady step (all warm-up or capture), so there is still something to show."""
        st = self.steps
        sel = st[st["in_window"]]
        return sel if len(sel) else st

    def window_reason(self) -> str:
        """One phrase saying which steps form the window and why."""
        st = self.steps
        if self.source == "whole-trace":
            return "the whole trace (no steps)"
        n_in = int(st["in_window"].sum())
        out = {m: int((st["mode"] == m).sum()) for m in OUT_OF_WINDOW_MODES}
        dropped = ", ".join(f"{n} {m}" for m, n in out.items() if n)
        skipped = f"; {self.skipped} skipped with --skip" if self.skipped else ""
        if n_in == 0:
            return f"all {len(st)} steps (none in steady state: {dropped}{skipped})"
        left = f" (left out: {dropped})" if dropped else ""
        return f"{n_in} steady-state steps{left}{skipped}"

    def span(self) -> tuple[int, int] | None:
        """Host start of the first step to the last end of any step or of its GPU work: the
        time the gaps that classify the steps are measured over (None: whole-trace, or no
        step)."""
        st = self.steps
        if self.source == "whole-trace" or not len(st):
            return None
        gpu_end = st["gpu_end_ns"].dropna()
        return (int(st["start_ns"].min()),
                max(int(st["end_ns"].max()), int(gpu_end.max()) if len(gpu_end) else 0))

    def window(self) -> tuple[int, int] | None:
        """Host start of the first window step to the end of the last window step or its GPU
        work (see :meth:`window_steps`)."""
        st = self.steps
        if self.source == "whole-trace" or st.empty:
            return None
        # the window steps' three columns, not the frame of them (its ~40 columns: ~1.5 ms)
        rows = st["in_window"].to_numpy(dtype=bool)
        if not rows.any():
            rows = np.ones(len(st), dtype=bool)
        end = int(st["end_ns"].to_numpy()[rows].max())
        gpu_end = st["gpu_end_ns"].array[rows]
        gpu_end = gpu_end[~gpu_end.isna()]
        if len(gpu_end):
            end = max(end, int(gpu_end.max()))
        return int(st["start_ns"].to_numpy()[rows].min()), end


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
    gaps itself (cgprof.metrics.gaps.measure_gaps_reduced, without a gap table)."""
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
    for a in range(0, len(rows), _CHUNK):
        r = rows[a:a + _CHUNK]
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


def choose_step_ranges(
    trace: Trace, step: str | None, calls: pd.DataFrame | None = None
) -> StepChoice:
    """The NVTX range instances that are the steps and how they were chosen
    (rules and scoring: cgprof.metrics.stepchoice)."""
    return _choose(trace, step, calls)


def compute_steps(
    trace: Trace,
    calls: pd.DataFrame,
    ops: pd.DataFrame,
    step: str | None = None,
    skip: int = 0,
) -> StepResult:
    """Measure every step; see the module doc for how work is attributed."""
    inst = step_instances(trace, calls, ops, step, skip)
    steps, call_steps, lookup = _measure(inst.ranges, inst.table, calls, ops,
                                         whole=inst.source == "whole-trace")
    return inst.result(steps, call_steps, lookup)


@dataclass
class StepInstances:
    """The chosen step instances, before they are measured: ``table`` (one row per step, in
    step order, after --skip; its ``index`` is the position among all instances), the NVTX
    ``ranges`` they were chosen from (cgprof.metrics.summaries.nvtx_ranges) and the choice."""

    table: pd.DataFrame
    ranges: pd.DataFrame
    choice: StepChoice
    skipped: int
    total: int

    @property
    def source(self) -> str:
        return self.choice.source

    def result(self, steps: pd.DataFrame, call_steps: pd.DataFrame,
               lookup: tuple | None) -> StepResult:
        """The :class:`StepResult` of these instances, measured."""
        c = self.choice
        return StepResult(steps=steps, name=c.name, source=c.source, skipped=self.skipped,
                          total_instances=self.total, call_steps=call_steps, rule=c.rule,
                          candidates=c.candidates, lookup=lookup)


def step_instances(trace: Trace, calls: pd.DataFrame, ops: pd.DataFrame | None,
                   step: str | None = None, skip: int = 0,
                   labels: Callable[[], pd.DataFrame] | None = None) -> StepInstances:
    """The step instances :func:`compute_steps` measures (``ops``: read only for a
    whole-trace step, None when the caller knows the steps come from NVTX ranges;
    ``labels``: what names each launch when the steps come from the launch stream, see
    cgprof.metrics.stepchoice)."""
    ranges = nvtx_ranges(trace)  # once, for the choice and the steps' groups
    choice = _choose(trace, step, calls, ranges, labels)
    sel, name, source = choice.ranges, choice.name, choice.source
    if source == "whole-trace":
        if ops is None:
            raise ValueError("a whole-trace step needs the GPU ops")
        inst = _whole_trace_step(trace, calls, ops)
    else:
        inst = sel.sort_values(["start_ns", "global_tid"], kind="stable").reset_index(drop=True)
        inst = inst.assign(end_ns=inst["end_ns"].astype("int64"))
    total = len(inst)
    if skip < 0:
        raise AnalysisError("--skip must be 0 or more")
    if skip and skip >= total:
        raise AnalysisError(
            f"{trace.path}: --skip {skip} leaves no steps ({total} instances of {name})")
    inst = inst.assign(index=np.arange(total, dtype=np.int64)).iloc[skip:].reset_index(drop=True)
    return StepInstances(table=inst, ranges=ranges, choice=choice, skipped=skip, total=total)


def measure_chunk(inst: StepInstances, s0: int, s1: int, calls: pd.DataFrame,
                  ops: pd.DataFrame, replayed_before: bool
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The step table rows of steps ``[s0, s1)`` (rows of ``inst.table``) and their
    call_steps, from the chunk's own API calls and GPU ops (cgprof.metrics.chunked's
    contract): what :func:`compute_steps` gives for those steps. ``replayed_before``: a step
    before ``s0`` launched a graph (what decides recapture and fallback)."""
    sub = inst.table.iloc[s0:s1].reset_index(drop=True)
    steps, call_steps, _ = _measure(inst.ranges, sub, calls, ops, whole=False, first_step=s0,
                                    replayed_before=replayed_before)
    if s0 and len(call_steps):
        call_steps = call_steps.assign(step=call_steps["step"].to_numpy() + s0)
    return steps, call_steps


def _whole_trace_step(trace: Trace, calls: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    starts = [df["start_ns"].min() for df in (calls, ops) if len(df)]
    ends = [df["end_ns"].max() for df in (calls, ops) if len(df)]
    start, end = (int(min(starts)), int(max(ends))) if starts else (0, 0)
    return pd.DataFrame({"start_ns": [start], "end_ns": [end], "global_tid": [-1], "pid": [-1],
                         "tid": [-1], "payload": pd.array([pd.NA], dtype="Int64"),
                         "text": [""], "domain": [""], "name": [""]})


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
