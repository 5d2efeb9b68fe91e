"""The step table's contract: its columns (:data:`STEP_COLUMNS`), the modes of the steps left
out of the analysis window (:data:`OUT_OF_WINDOW_MODES`), and :class:`StepResult`: the
per-step table, how the steps were chosen, the step of every API call, and the window of
steps the tables and figures cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cgprof.metrics.intervals import table_get

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
            launch_bound  see cgprof.metrics.step_launch_wait.BUSY_SHARE and WAIT_SHARE
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
