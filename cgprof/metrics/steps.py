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

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.errors import AnalysisError
from cgprof.metrics import launches as L
from cgprof.metrics.intervals import _first_match_dense, assign_to_ranges, pair_keys, union_busy
from cgprof.metrics.stepchoice import (  # noqa: F401  (re-exported)
    DEFAULT_STEP,
    StepChoice,
    parse_step_option,
)
from cgprof.metrics.stepchoice import choose_step_ranges as _choose
from cgprof.metrics.summaries import nvtx_ranges
from cgprof.trace import Trace

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

    def window(self) -> tuple[int, int] | None:
        """Host start of the first window step to the end of the last window step or its GPU
        work (see :meth:`window_steps`)."""
        st = self.window_steps()
        if self.source == "whole-trace" or st.empty:
            return None
        end = int(st["end_ns"].max())
        gpu_end = st["gpu_end_ns"].dropna()
        if len(gpu_end):
            end = max(end, int(gpu_end.max()))
        return int(st["start_ns"].min()), end


def classify_steps(result: StepResult, gaps: pd.DataFrame) -> None:
    """Fill ``launch_wait_ns`` and ``launch_bound`` from the classified GPU gaps (in place)."""
    st = result.steps
    wait = gaps[gaps["kind"] == "launch_bound"][["next_pid", "next_corr_id", "gap_ns"]]
    wait = wait.astype({"next_pid": "int64", "next_corr_id": "int64", "gap_ns": "int64"})
    wait = wait.merge(result.call_steps, left_on=["next_pid", "next_corr_id"],
                      right_on=["pid", "corr_id"], how="inner")
    per = np.bincount(wait["step"].to_numpy(np.int64),
                      weights=wait["gap_ns"].to_numpy(np.float64), minlength=len(st))
    st["launch_wait_ns"] = per[: len(st)].astype(np.int64)
    idle = (st["dur_ns"] - st["gpu_busy_ns"]).clip(lower=0)
    st["launch_bound"] = (
        (st["dur_ns"] > 0)
        & (st["gpu_busy_ns"] < BUSY_SHARE * st["dur_ns"])
        & (st["launch_wait_ns"] >= WAIT_SHARE * idle)
    )


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
    choice = choose_step_ranges(trace, step, calls)
    sel, name, source = choice.ranges, choice.name, choice.source
    if source == "whole-trace":
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
    steps, call_steps = _measure(trace, inst, calls, ops, whole=source == "whole-trace")
    return StepResult(steps=steps, name=name, source=source, skipped=skip, total_instances=total,
                      call_steps=call_steps, rule=choice.rule, candidates=choice.candidates)


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
    stray call serves is unknowable, and it stays unattributed).
    """
    c_tid = calls["global_tid"].to_numpy(dtype=np.int64)
    c_start = calls["start_ns"].to_numpy(np.int64)
    c_end = calls["end_ns"].to_numpy(np.int64)
    s_tid = inst["global_tid"].to_numpy(dtype=np.int64)
    s_start = inst["start_ns"].to_numpy(np.int64)
    s_end = inst["end_ns"].to_numpy(np.int64)
    step = assign_to_ranges(c_tid, c_start, c_end, s_tid, s_start, s_end)
    s_pid = inst["pid"].to_numpy(dtype=np.int64)
    c_pid = calls["pid"].to_numpy(dtype=np.int64)
    threads_per_pid = pd.Series(s_tid).groupby(s_pid).nunique()
    single = threads_per_pid.index[threads_per_pid == 1].to_numpy()
    other_thread = ~np.isin(c_tid, np.unique(s_tid)) & np.isin(c_pid, single)
    if other_thread.any():
        by_time = assign_to_ranges(c_pid[other_thread], c_start[other_thread],
                                   c_end[other_thread], s_pid, s_start, s_end)
        step[other_thread] = by_time
    return step


def _measure(trace, inst, calls, ops, whole: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    n = len(inst)
    idx = np.arange(n)
    if whole:
        call_step = np.zeros(len(calls), dtype=np.int64)
    else:
        call_step = _attribute_calls(calls, inst)
    # Steps that captured a graph (calls made during stream capture, or its begin call).
    begins = (L.name_contains(calls["name"], "StreamBeginCapture")
              | L.name_contains(calls["name"], "GraphInstantiate"))
    in_capture = calls["in_capture"].to_numpy(dtype=bool)
    capturing = call_step[(call_step >= 0) & (in_capture | begins)]
    # Only the columns used below: a filtered copy of every column of a 10M-row frame is GBs.
    live = (call_step >= 0) & ~in_capture
    c = calls[["pid", "corr_id", "family", "dur_ns"]].assign(step=call_step)
    c = c if live.all() else c[live]

    def count(mask: pd.Series) -> np.ndarray:
        return np.bincount(c.loc[mask, "step"].to_numpy(np.int64), minlength=n)[:n]

    def host(mask: pd.Series) -> np.ndarray:
        sub = c.loc[mask]
        return np.bincount(sub["step"].to_numpy(np.int64),
                           weights=sub["dur_ns"].to_numpy(np.float64), minlength=n)[:n]

    groups, warm = _groups(trace, inst) if not whole else ([""] * n, [False] * n)
    fam = c["family"]
    is_launch = fam.isin([L.KERNEL_LAUNCH, L.GRAPH_LAUNCH])
    out = pd.DataFrame({
        "step": idx,
        "index": inst["index"].to_numpy(np.int64),
        "payload": pd.array(inst["payload"], dtype="Int64"),
        "group": groups,
        "pid": inst["pid"].to_numpy(np.int64),
        "tid": inst["tid"].to_numpy(np.int64),
        "start_ns": inst["start_ns"].to_numpy(np.int64),
        "end_ns": inst["end_ns"].to_numpy(np.int64),
        "api_calls": count(pd.Series(True, index=c.index)),
        "kernel_launches": count(fam == L.KERNEL_LAUNCH),
        "graph_launches": count(fam == L.GRAPH_LAUNCH),
        "memcpy_calls": count(fam == L.MEMCPY),
        "sync_calls": count(fam == L.SYNC),
        "launch_host_ns": host(is_launch).astype(np.int64),
        "sync_host_ns": host(fam == L.SYNC).astype(np.int64),
    })
    out["dur_ns"] = out["end_ns"] - out["start_ns"]
    captured = np.zeros(n, dtype=bool)
    captured[capturing] = True
    launched = out["graph_launches"].to_numpy() > 0
    # Graphs "existed" for a step when an earlier step (in time) replayed one.
    order = np.argsort(out["start_ns"].to_numpy(np.int64), kind="stable")
    before = np.cumsum(launched[order]) - launched[order]
    seen = np.zeros(n, dtype=bool)
    seen[order] = before > 0
    warm_a = np.asarray(warm, dtype=bool)
    recapture = captured & seen & ~warm_a
    out["mode"] = np.select(
        [captured & ~recapture, warm_a, launched],
        ["capture", "warmup", "graph"], default="eager")
    out["recapture"] = recapture
    out["fallback"] = seen & ~launched & ~warm_a & ~recapture
    out["in_window"] = ~out["mode"].isin(OUT_OF_WINDOW_MODES).to_numpy()

    # GPU work -> step of its launch call, on (pid, corr_id).
    # Only the op columns used below (a 10M-row copy of every column is GBs).
    ops = ops[["start_ns", "end_ns", "pid", "corr_id", "kind", "in_graph"]]
    pair = None if whole else pair_keys(ops, c)
    row = None
    if pair is not None and len(pair[1]):
        # Distinct call keys spanning about their count (one process): every call is its
        # key's first, and each op's row comes from a lookup table (None otherwise).
        row = _first_match_dense(pair[0], pair[1])
    if row is not None:
        keep = np.arange(len(c), dtype=np.int64)
        key = c[["pid", "corr_id", "step"]].take(keep)
        del keep
    elif pair is not None:
        # The first call of each (pid, corr_id), in call order (drop_duplicates), and each
        # op's row among those, from one np.unique of the int64 keys.
        uniq, first = np.unique(pair[1], return_index=True)
        keep = np.sort(first)
        key = c[["pid", "corr_id", "step"]].take(keep)
    else:
        key = c[["pid", "corr_id", "step"]].drop_duplicates(["pid", "corr_id"])
    c = fam = is_launch = None  # big: free before the GPU side's temporaries
    if whole:
        w = ops.assign(step=0)
    elif pair is not None:
        if row is None:
            if len(uniq):
                pos = np.searchsorted(uniq, pair[0])
                pos[pos == len(uniq)] = 0
                found = uniq[pos] == pair[0]
                row = np.where(found, np.searchsorted(keep, first[pos]), -1)
            else:
                pos = found = None
                row = np.full(len(pair[0]), -1, dtype=np.int64)
            del pos, found, uniq, first, keep
        del pair
        hit = row >= 0
        w = ops[hit].reset_index(drop=True)
        w["step"] = key["step"].to_numpy()[row[hit]]
        del row, hit
    else:
        w = ops.merge(key, on=["pid", "corr_id"], how="inner")
    kernels = np.bincount(w.loc[w["kind"] == "kernel", "step"].to_numpy(np.int64), minlength=n)
    replay_rows = w[w["in_graph"]].drop_duplicates(["pid", "corr_id"])
    out["kernels"] = kernels[:n]
    is_k = w["kind"] == "kernel"
    out["graph_kernels"] = pd.array(
        np.bincount(w.loc[is_k & w["in_graph"], "step"].to_numpy(np.int64), minlength=n)[:n],
        dtype="Int64")
    out["eager_kernels"] = pd.array(
        np.bincount(w.loc[is_k & ~w["in_graph"], "step"].to_numpy(np.int64), minlength=n)[:n],
        dtype="Int64")
    in_graph = w["in_graph"].to_numpy(dtype=bool)
    for col, mask in (("graph_gpu_ns", in_graph), ("eager_gpu_ns", ~in_graph)):
        ub = union_busy(w.loc[mask, ["step", "start_ns", "end_ns"]], ["step"]).set_index("step")
        out[col] = ub["busy_ns"].reindex(idx).fillna(0).astype("int64").to_numpy()
    out["graph_replays"] = np.bincount(replay_rows["step"].to_numpy(np.int64), minlength=n)[:n]
    u = union_busy(w[["step", "start_ns", "end_ns"]], ["step"])
    u = u.set_index("step").reindex(idx)
    out["gpu_ops"] = u["ops"].fillna(0).astype("int64").to_numpy()
    out["gpu_start_ns"] = pd.array(u["first_start_ns"], dtype="Int64")
    out["gpu_end_ns"] = pd.array(u["last_end_ns"], dtype="Int64")
    out["gpu_span_ns"] = pd.array(u["span_ns"], dtype="Int64")
    out["gpu_busy_ns"] = u["busy_ns"].fillna(0).astype("int64").to_numpy()
    out["gpu_idle_ns"] = pd.array(u["span_ns"] - u["busy_ns"], dtype="Int64")
    out["effective_ns"] = np.maximum(out["dur_ns"].to_numpy(np.int64),
                                     u["span_ns"].fillna(0).to_numpy(np.int64))
    span = out["gpu_span_ns"].astype("Float64")
    out["compactness"] = (out["gpu_busy_ns"] / span.where(span > 0)).astype("Float64")
    eff = out["effective_ns"].where(out["effective_ns"] > 0)
    out["busy_pct"] = (100.0 * out["gpu_busy_ns"] / eff).astype("Float64")
    # Graph-granularity rows hide the replay's inside: its kernels and gaps are unknown.
    hidden = np.bincount(w.loc[w["kind"] == "graph", "step"].to_numpy(np.int64),
                         minlength=n)[:n] > 0
    out["kernels"] = pd.array(np.where(hidden, 0, out["kernels"]), dtype="Int64")
    out.loc[hidden, "kernels"] = pd.NA
    out.loc[hidden, "graph_kernels"] = pd.NA
    out.loc[hidden, "compactness"] = pd.NA
    # Filled by classify_steps() once the GPU gaps are known.
    out["launch_wait_ns"] = np.zeros(n, dtype=np.int64)
    out["launch_bound"] = np.zeros(n, dtype=bool)
    return out[STEP_COLUMNS], key.reset_index(drop=True)


def _groups(trace: Trace, inst: pd.DataFrame) -> tuple[list[str], list[bool]]:
    """Per step: the innermost other push/pop range enclosing it on its thread (e.g. "eager"),
    and whether a ``warmup`` range of domain ``cgprof`` encloses or lies inside it (the
    runners' warm-up steps: cgprof.mark's NVTX contract)."""
    ranges = nvtx_ranges(trace)
    ranges = ranges[ranges["event_type"].isin([S.NVTX_PUSHPOP, S.NVTXT_PUSHPOP])]
    step_names = set(inst["name"].astype(str))
    others = ranges[~ranges["name"].astype(str).isin(step_names)]
    result = [""] * len(inst)
    warm = [False] * len(inst)
    if others.empty:
        return result, warm
    for gtid, steps in inst.groupby("global_tid", sort=False):
        o = others[others["global_tid"] == gtid].sort_values("start_ns", kind="stable")
        if o.empty:
            continue
        os_, oe = o["start_ns"].to_numpy(np.int64), o["end_ns"].to_numpy(np.int64)
        names = o["text"].astype(str).to_numpy()
        is_warm = ((o["text"] == "warmup") & (o["domain"] == "cgprof")).to_numpy()
        s = steps["start_ns"].to_numpy(np.int64)
        e = steps["end_ns"].to_numpy(np.int64)
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
        for pos, nk, wt in zip(steps.index, named, warm_t, strict=True):
            if nk >= 0 and not result[pos]:
                result[pos] = names[nk]
            warm[pos] = warm[pos] or bool(wt)
    return result, warm
