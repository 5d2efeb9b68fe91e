"""The answer a user came for: is the step launch-bound, and what would graphs buy?

Every figure here covers the analysis window (steady-state steps, see
``StepResult.window_steps``).

What-if estimate for eager steps. A CUDA graph removes the Python and the launch call of each
kernel between a step's first launch and its end; it keeps the GPU work, the host work that
comes before the step's first launch (input preparation, data loading, Python up to the first
op), one graph launch and the wait for the replay's first node. Per eager step:

    pre_ns   = first launch call start - step start                     (measured, kept)
    gpu_side = [pre_ns + latency(nodes)] + gpu_busy_ns + nodes * node_gap (replay back to back)
    host_side= pre_ns + graph_launch(nodes)                             (host issues one launch)
    graphed  = min(max(gpu_side, host_side), the eager step's own time)

The bracketed lead counts only for steps that wait for their GPU work (a sync call inside the
step, as timed loops do): such a step costs from its start to its replay's end. A step that
does not wait overlaps its replay with the next step's host work, and its cost is the longer
of its host time and its GPU span (``effective_ns``), which the lead is not part of.

with ``nodes`` = the step's GPU operations. Launch costs are host costs, so they are expressed in
units of this host's own eager launch cost ``h`` (p50 host time of the trace's kernel launch
calls: a slow host, e.g. a VM, launches graphs slowly too):

    latency(nodes)      = (LATENCY_FIXED_H + LATENCY_PER_NODE_H * nodes) * h
    graph_launch(nodes) = (GRAPH_LAUNCH_FIXED_H + GRAPH_LAUNCH_PER_NODE_H * nodes) * h

The coefficients were measured on the machine class of the project's traces (H200, nsys
``--cuda-graph-trace=node``, which itself adds per-node cost to a graph launch) over the five
graphed node-level traces in ``traces/`` (``scripts/calibrate_estimate.py`` recomputes them):
LATENCY_* is a least-squares line of replay latency / h against nodes, GRAPH_LAUNCH_PER_NODE_H
the median cudaGraphLaunch host time per node / h, GRAPH_LAUNCH_FIXED_H the usual 10-15 us
fixed cost of a graph launch on bare metal (about two eager launches), and NODE_GAP_NS their
median inter-node gap. None is fitted to the eager/graphed pairs' speedups. When the trace
holds node-level replays of its own, their median node gap replaces NODE_GAP_NS. The
assumptions are printed with the estimate.

Without the profiler. When the trace has the untraced run's times of its steps
(cgprof.untraced), a second estimate says what the graphed step would cost without the
profiler, the same model with the profiler's cost taken out of its inputs: this run's own
untraced and traced mean eager step give the profiler's cost per API call on this host,
``(traced - untraced) / API calls per step``, which comes off ``h`` (so off every graph launch
cost too); the host work before the first launch shrinks by untraced / traced; the GPU work
stays. The node gap stays as the trace's (node-level tracing adds to it, so that estimate is
an upper bound on the graphed step, said with it). Its speedup is against the untraced eager
mean. It is printed first, the traced one ("under the profiler") after it.

No estimate without its evidence (``estimate_unavailable`` says why): none where the step
is the whole trace (no repeating step to graph), where the eager steps launch no kernel
(nothing for a graph to collapse), where they hold no GPU work, or where the trace is
incomplete (cgprof.metrics.completeness: its GPU figures are not recorded). An incomplete
trace's verdict keeps its host side (step times, launch calls per step) and leaves out every
GPU figure (busy %, launch-bound steps, replay compactness): kind "incomplete".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from cgprof.io.trace import column
from cgprof.metrics import launches as L
from cgprof.metrics.coverage import (
    StepLaunches,
    call_steps_of,
    family_mask,
    step_positions,
    window_positions,
)

#: Median gap between consecutive nodes of a replay (ns), H200 node-level traces.
NODE_GAP_NS = 420
#: Graph launch call start -> first node starts, in units of h (this host's eager launch p50).
LATENCY_FIXED_H = 8.0
LATENCY_PER_NODE_H = 0.054
#: Host time of one graph launch call, in units of h.
GRAPH_LAUNCH_FIXED_H = 2.0
GRAPH_LAUNCH_PER_NODE_H = 0.18
#: h when the trace has no kernel launch call to measure it from (bare-metal H200 host, ns).
DEFAULT_HOST_LAUNCH_NS = 7_000


@dataclass
class Verdict:
    """Numbers behind the headline, and the headline itself (``lines``)."""

    kind: str  # "launch-bound", "not launch-bound", "graphed", "incomplete", "no steps"
    eager_steps: int = 0
    graph_steps: int = 0
    launch_bound_steps: int | None = 0
    eager_step_p50_ns: float | None = None
    graph_step_p50_ns: float | None = None
    measured_speedup: float | None = None
    eager_launches_per_step: float | None = None
    graph_launches_per_step: float | None = None
    eager_busy_pct_p50: float | None = None
    graph_busy_pct_p50: float | None = None
    replay_compactness_p50: float | None = None
    estimated_graph_step_ns: float | None = None
    estimated_speedup: float | None = None
    #: the estimate without the profiler (module doc), when the untraced run measured it
    estimated_untraced_graph_step_ns: float | None = None
    estimated_untraced_speedup: float | None = None
    #: why there is no estimate (None: there is one, or there are no eager steps)
    estimate_unavailable: str | None = None
    #: why the GPU figures are left out (cgprof.metrics.completeness; None: recorded)
    gpu_unavailable: str | None = None
    assumptions: dict[str, float] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def _p50(s: pd.Series) -> float | None:
    s = s.dropna()
    return float(np.median(s.to_numpy(dtype=np.float64))) if len(s) else None


def _median_int(values: np.ndarray) -> float:
    """``float(np.median(values.astype(float)))`` of int64 values, bit for bit: one select of
    the upper middle (numpy's fast single-kth partition; two kths take its slow path) and,
    for an even count, the largest value below it."""
    n = len(values)
    part = np.partition(values, n // 2)
    high = float(part[n // 2])
    return high if n % 2 else (float(part[:n // 2].max()) + high) / 2


def _us(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1000:.1f} us"


def _calls(n: float | None) -> str:
    n = n or 0
    return f"{n:.0f} launch call{'' if round(n) == 1 else 's'}"


def host_launch_ns(calls: pd.DataFrame, call_steps: pd.DataFrame,
                   steps: pd.Series) -> tuple[float, str]:
    """This host's eager launch cost h: p50 host time of kernel launch calls (outside capture)
    in ``steps``, else anywhere in the trace, else DEFAULT_HOST_LAUNCH_NS; and where it came
    from ("window steps", "whole trace" or "default")."""
    pos = step_positions(call_steps_of(calls, call_steps), steps.to_numpy(np.int64))
    launches = StepLaunches.of(calls, pos)
    return _host_launch(calls, launches, np.ones(len(steps), dtype=bool))


def _launch_durations(calls: pd.DataFrame, launches: StepLaunches,
                      mine: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Host times (ns, int64) of the kernel launches of ``launches`` in steps ``mine`` (a bool
    per row of their steps frame), and, only when there is none, of every kernel launch of
    ``calls`` outside capture (else None: h comes from the former, the latter is not read)."""
    def dur(rows: np.ndarray) -> np.ndarray:
        return column(calls, "dur_ns", rows).astype(np.int64, copy=False)

    rows = launches.rows[launches.kernel & mine[launches.pos]]
    if len(rows):
        return dur(rows), None
    sel = family_mask(calls, L.KERNEL_LAUNCH) if len(calls) else np.zeros(0, dtype=bool)
    return np.zeros(0, dtype=np.int64), dur(sel)


def _host_launch_of(mine: Any, every: Any,
                    median: Callable[[Any], float]) -> tuple[float, str]:
    """h and its source from the durations of :func:`_launch_durations` (raw or
    :class:`ValueCounts`; ``len`` is their count) and the median that reads them."""
    if len(mine):
        return median(mine), "window steps"
    if every is not None and len(every):
        return median(every), "whole trace"
    return float(DEFAULT_HOST_LAUNCH_NS), "default"


def _host_launch(calls: pd.DataFrame, launches: StepLaunches,
                 mine: np.ndarray) -> tuple[float, str]:
    """:func:`host_launch_ns` over the kernel launches of ``launches`` in steps ``mine``
    (a bool per row of their steps frame)."""
    return _host_launch_of(*_launch_durations(calls, launches, mine), _median_int)


#: No launch call in the step (:func:`_first_launch_ns`).
_NO_LAUNCH = np.iinfo(np.int64).max


def _first_launch_ns(calls: pd.DataFrame, launches: StepLaunches,
                     mine: np.ndarray) -> np.ndarray:
    """Per row of the steps frame of ``launches`` (``mine``: a bool per row): the start of its
    first live launch call (kernel or graph) for a step in ``mine``, else and when none
    _NO_LAUNCH. int64 ns, so that the first launches of two sets of calls merge as the
    element-wise minimum."""
    hit = mine[launches.pos]
    first = np.full(len(mine), _NO_LAUNCH, dtype=np.int64)
    np.minimum.at(first, launches.pos[hit], column(calls, "start_ns", launches.rows[hit]).astype(
        np.int64, copy=False))
    return first


def _pre_launch_ns(steps: pd.DataFrame, first: np.ndarray) -> np.ndarray:
    """Per step of ``steps``: host time from its start to its first launch call (0 when none),
    ``first`` the :func:`_first_launch_ns` of those steps."""
    f = np.where(first == _NO_LAUNCH, np.nan, first.astype(np.float64))
    pre = f - steps["start_ns"].to_numpy(np.float64)
    return np.where(np.isnan(pre), 0.0, np.maximum(pre, 0.0))


@dataclass(frozen=True, eq=False)
class ValueCounts:
    """A multiset of int64 values: the distinct ``values`` (ascending) and how many times
    each occurs (``counts``, int64). What a median needs of 10M launch durations, in the
    size of their distinct values; two merge exactly (:meth:`merge`)."""

    values: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> ValueCounts:
        v, c = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
        return cls(v, c.astype(np.int64, copy=False))

    @classmethod
    def merge(cls, parts: list[ValueCounts]) -> ValueCounts:
        if not parts:
            return cls.of(np.zeros(0, dtype=np.int64))
        v, inverse = np.unique(np.concatenate([p.values for p in parts]), return_inverse=True)
        c = np.zeros(len(v), dtype=np.int64)
        np.add.at(c, inverse, np.concatenate([p.counts for p in parts]))
        return cls(v, c)

    def __len__(self) -> int:
        return int(self.counts.sum())

    def median(self) -> float:
        """:func:`_median_int` of the values, bit for bit: the same two order statistics,
        added the same way."""
        cum = np.cumsum(self.counts)
        n = int(cum[-1])

        def kth(k: int) -> float:  # the k-th smallest (0-based)
            return float(self.values[np.searchsorted(cum, k, "right")])

        high = kth(n // 2)
        return high if n % 2 else (kth(n // 2 - 1) + high) / 2


@dataclass(frozen=True, eq=False)
class VerdictPartial:
    """What the verdict reads of the API calls, for a chunk of them or, merged
    (:func:`merge_verdict_partials`), for all: the durations of the live kernel launch calls
    in eager window steps (``mine``) and, only while there are none of those, of every live
    kernel launch (``every``, None once ``mine`` has one); and each eager window step's first
    live launch call start (``first_launch_ns``, :func:`_first_launch_ns`, int64 per window
    step).
    Its size: the distinct durations plus one int64 per window step."""

    mine: ValueCounts
    every: ValueCounts | None
    first_launch_ns: np.ndarray

    def host_launch(self) -> tuple[float, str]:
        """h and its source, as :func:`_host_launch` gives them on the whole trace."""
        return _host_launch_of(self.mine, self.every, ValueCounts.median)


def verdict_partial(calls: pd.DataFrame, launches: StepLaunches,
                    is_eager: np.ndarray) -> VerdictPartial:
    """The :class:`VerdictPartial` of some API calls (a chunk's: rows ``[r0, r1)`` of the
    trace's calls); ``launches`` their :class:`StepLaunches`, whose ``pos`` are rows of the
    window step table (global positions); ``is_eager`` a bool per window step (its mode is
    "eager"), over every window step."""
    mine, every = _launch_durations(calls, launches, is_eager)
    return VerdictPartial(ValueCounts.of(mine), None if every is None else ValueCounts.of(every),
                          _first_launch_ns(calls, launches, is_eager))


def merge_verdict_partials(parts: list[VerdictPartial], joined: bool = False
                           ) -> VerdictPartial:
    """The :class:`VerdictPartial` of the union of the partials' calls (at least one part).
    Associative: a driver may fold each chunk's partial into a running one
    (``merge_verdict_partials([acc, part])``), so that only two sets of durations meet.
    ``joined``: each part's per-step array covers its own window steps, the parts' steps
    one after another (chunks measured against their own window steps): the arrays are
    joined end to end, in the parts' order, instead of taken per step at their minimum."""
    mine = ValueCounts.merge([p.mine for p in parts])
    every = None if len(mine) else ValueCounts.merge(
        [p.every for p in parts if p.every is not None])
    if joined:
        first = np.concatenate([p.first_launch_ns for p in parts])
    else:
        first = parts[0].first_launch_ns.copy()
        for p in parts[1:]:
            np.minimum(first, p.first_launch_ns, out=first)
    return VerdictPartial(mine, every, first)


def estimate_graphed(steps: pd.DataFrame, pre_ns: np.ndarray, h_ns: float,
                     node_gap_ns: float) -> np.ndarray:
    """Estimated graphed step time (ns) of each eager step (see module doc)."""
    nodes = steps["gpu_ops"].to_numpy(np.float64)
    busy = steps["gpu_busy_ns"].to_numpy(np.float64)
    # A step that waits for its GPU work (a sync call inside it, as timed loops do) costs
    # from its start to its replay's end; one that does not overlaps the next step's host
    # work with this step's replay, so only the replay itself (its GPU span) is on the GPU
    # side, as effective_ns measures it.
    synced = steps["sync_calls"].to_numpy(np.int64) > 0
    lead = np.where(synced, pre_ns + (LATENCY_FIXED_H + LATENCY_PER_NODE_H * nodes) * h_ns, 0.0)
    gpu_side = lead + busy + nodes * node_gap_ns
    host_side = pre_ns + (GRAPH_LAUNCH_FIXED_H + GRAPH_LAUNCH_PER_NODE_H * nodes) * h_ns
    # A GPU-bound step already runs its kernels back to back: graphing it gains ~nothing, and
    # the graph's launch latency is not added on top of a step that already hides its own.
    return np.minimum(np.maximum(gpu_side, host_side),
                      steps["effective_ns"].to_numpy(np.float64))


#: The step table's columns the verdict reads.
_STEP_COLUMNS = ["step", "start_ns", "effective_ns", "kernel_launches", "graph_launches",
                 "sync_calls", "gpu_ops", "gpu_busy_ns", "busy_pct", "launch_bound",
                 "api_calls"]


def estimate_untraced(eager: pd.DataFrame, pre_ns: np.ndarray, h_ns: float,
                      node_gap_ns: float, untraced: Any) -> dict[str, float] | None:
    """The estimate without the profiler (module doc) and what it assumed, or None when the
    untraced run did not time these steps."""
    if untraced is None or not untraced.available or not untraced.traced_mean_ns:
        return None
    traced, plain = float(untraced.traced_mean_ns), float(untraced.mean_ns)
    ratio = plain / traced
    calls = float(np.median(eager["api_calls"].to_numpy(np.float64)))
    per_call = max(traced - plain, 0.0) / calls if calls > 0 else 0.0
    # the cost comes off the launch call's own host time; where it is larger than that (much
    # of the profiler's cost sits outside the calls it records), the call scales with the step
    scaled = per_call >= h_ns
    h_plain = h_ns * ratio if scaled else h_ns - per_call
    steps = eager.assign(effective_ns=eager["effective_ns"].to_numpy(np.float64) * ratio)
    est = estimate_graphed(steps, pre_ns * ratio, h_plain, node_gap_ns)
    graphed = float(np.median(est))
    return {"graph_step_ns": graphed, "speedup": plain / graphed if graphed > 0 else 0.0,
            "profiler_ns_per_call": per_call, "api_calls_per_step": calls,
            "host_launch_ns": h_plain, "host_launch_scaled": float(scaled),
            "eager_step_ns": plain, "traced_step_ns": traced}


def _calls_of(steps: pd.DataFrame, calls: pd.DataFrame | None,
              call_steps: pd.DataFrame | None,
              launches: StepLaunches | None) -> tuple[pd.DataFrame, StepLaunches]:
    """The API calls :func:`verdict` was given (none: an empty frame) and the
    :class:`StepLaunches` of ``steps`` in them."""
    if calls is None:
        calls = pd.DataFrame({c: pd.Series(dtype="int64") for c in
                              ("pid", "corr_id", "start_ns", "dur_ns")}).assign(
            family=pd.Series(dtype="object"), in_capture=pd.Series(dtype="bool"))
    if call_steps is None:
        call_steps = pd.DataFrame({c: pd.Series(dtype="int64") for c in ("pid", "corr_id",
                                                                           "step")})
    if launches is None:
        launches = StepLaunches.of(calls, window_positions(calls, call_steps, steps))
    return calls, launches


def verdict(
    steps: pd.DataFrame,
    replays: Any = None,
    coverage: Any = None,
    calls: pd.DataFrame | None = None,
    call_steps: pd.DataFrame | None = None,
    graph_trace_mode: str | None = None,
    launches: StepLaunches | None = None,
    partial: VerdictPartial | None = None,
    step_source: str | None = None,
    gpu_unavailable: str | None = None,
    untraced: Any = None,
) -> Verdict:
    """Summarise the window's steps into a verdict (see module doc for the estimate).

    steps: the window steps (``StepResult.window_steps()``); replays: ReplayResult of the
    window; coverage: CoverageResult; calls / call_steps: API calls and their steps (for this
    host's launch cost and the host time before each step's first launch); launches: the
    :class:`~cgprof.metrics.coverage.StepLaunches` of ``steps``, when the caller has them;
    partial: instead of calls, call_steps and launches (then not read), what the verdict reads
    of them, for a caller without a frame of every call (the chunked analysis: the
    :func:`merge_verdict_partials` of each chunk's :func:`verdict_partial`). step_source:
    the steps' (``StepResult.source``; "whole-trace": no estimate); gpu_unavailable: why the
    trace's GPU figures are not recorded (an incomplete trace), None when they are;
    untraced: the steps' times without the profiler (cgprof.untraced.UntracedTimes), for the
    second estimate.
    """
    if steps.empty:
        return Verdict(kind="no steps", lines=["no steps to judge"])
    mode = steps["mode"].to_numpy()
    is_eager, is_graph = mode == "eager", mode == "graph"
    steps = steps[_STEP_COLUMNS]  # the columns read here, not all of the step table's
    eager, graph = steps[is_eager], steps[is_graph]
    v = Verdict(kind="", eager_steps=len(eager), graph_steps=len(graph),
                gpu_unavailable=gpu_unavailable)
    v.launch_bound_steps = int(eager["launch_bound"].sum())
    # effective_ns: a graphed step's host range ends long before its replay does.
    v.eager_step_p50_ns = _p50(eager["effective_ns"])
    v.graph_step_p50_ns = _p50(graph["effective_ns"])
    per_step = steps["kernel_launches"] + steps["graph_launches"]
    v.eager_launches_per_step = _p50(per_step[eager.index])
    v.graph_launches_per_step = _p50(per_step[graph.index])
    v.eager_busy_pct_p50 = _p50(eager["busy_pct"].astype("float64"))
    v.graph_busy_pct_p50 = _p50(graph["busy_pct"].astype("float64"))
    has_replays = replays is not None and len(replays.replays) > 0
    v.replay_compactness_p50 = replays.summary["compactness"]["p50"] if has_replays else None
    if v.eager_step_p50_ns and v.graph_step_p50_ns:
        v.measured_speedup = v.eager_step_p50_ns / v.graph_step_p50_ns

    if partial is None:
        calls, launches = _calls_of(steps, calls, call_steps, launches)
        h, h_source = _host_launch(calls, launches, is_eager)
        first = _first_launch_ns(calls, launches, is_eager)
    else:
        h, h_source = partial.host_launch()
        first = partial.first_launch_ns
    gap = float(NODE_GAP_NS)
    gap_source = "H200 node-level traces"
    own_gap = replays.summary["median_gap_ns"]["p50"] if has_replays else None
    if own_gap is not None and replays.node_level:
        gap, gap_source = float(own_gap), "this trace's replays"
    v.assumptions = {
        "host_launch_ns": h,
        "node_gap_ns": gap,
        "launch_latency_fixed_ns": LATENCY_FIXED_H * h,
        "launch_latency_per_node_ns": LATENCY_PER_NODE_H * h,
        "graph_launch_fixed_ns": GRAPH_LAUNCH_FIXED_H * h,
        "graph_launch_per_node_ns": GRAPH_LAUNCH_PER_NODE_H * h,
    }
    if len(eager):
        v.estimate_unavailable = _no_estimate(eager, step_source, gpu_unavailable)
    if len(eager) and v.estimate_unavailable is None:
        pre = _pre_launch_ns(eager, first[is_eager])
        est = estimate_graphed(eager, pre, h, gap)
        v.assumptions["kept_host_ns_p50"] = float(np.median(pre))
        v.assumptions["synced_steps"] = float((eager["sync_calls"] > 0).sum())
        v.estimated_graph_step_ns = float(np.median(est))
        if v.eager_step_p50_ns:
            v.estimated_speedup = v.eager_step_p50_ns / v.estimated_graph_step_ns
        plain = estimate_untraced(eager, pre, h, gap, untraced)
        if plain is not None:
            v.estimated_untraced_graph_step_ns = plain["graph_step_ns"]
            v.estimated_untraced_speedup = plain["speedup"]
            v.assumptions.update({f"untraced_{k}": x for k, x in plain.items()
                                  if k not in ("graph_step_ns", "speedup")})
    if gpu_unavailable is not None:
        v.launch_bound_steps = None
        v.eager_busy_pct_p50 = v.graph_busy_pct_p50 = v.replay_compactness_p50 = None

    lines = []
    if len(eager) and gpu_unavailable is not None:
        v.kind = "incomplete"
        lines.append(
            f"eager steps: {len(eager)}: step p50 {_us(v.eager_step_p50_ns)}, "
            f"{_calls(v.eager_launches_per_step)} per step; launch-bound or not and GPU busy: "
            "unavailable: not recorded (the trace is incomplete)")
    elif len(eager):
        lb = int(v.launch_bound_steps or 0)
        v.kind = "launch-bound" if lb * 2 > len(eager) else "not launch-bound"
        lines.append(
            f"eager steps: {v.kind} ({lb} of {len(eager)} steps): step p50 "
            f"{_us(v.eager_step_p50_ns)}, GPU busy {v.eager_busy_pct_p50 or 0:.0f}% of it, "
            f"{_calls(v.eager_launches_per_step)} per step")
    if len(eager) and v.estimate_unavailable is not None:
        lines.append(f"if graphed (estimate): none: {v.estimate_unavailable}")
    elif len(eager):
        a = v.assumptions
        if v.estimated_untraced_graph_step_ns is not None:
            lines.append(
                f"if graphed, without the profiler (estimate): "
                f"~{_us(v.estimated_untraced_graph_step_ns)} per step, "
                f"~{v.estimated_untraced_speedup or 0:.1f}x against the untraced eager step "
                f"({_us(a['untraced_eager_step_ns'])} mean)")
            lines.append(
                f"  assumes: the profiler costs {_us(a['untraced_profiler_ns_per_call'])} per "
                f"API call on this host (this run: {_us(a['untraced_traced_step_ns'])} traced "
                f"vs {_us(a['untraced_eager_step_ns'])} untraced per step, "
                f"{a['untraced_api_calls_per_step']:.0f} API calls per step), so a kernel "
                f"launch costs {_us(a['untraced_host_launch_ns'])}"
                + (" (scaled by untraced / traced: that cost is more than the traced launch "
                   "call's own)" if a["untraced_host_launch_scaled"] else "")
                + f"; nodes {gap / 1000:.2f} us "
                f"apart ({gap_source}, as under the profiler: an upper bound); the rest as "
                "below")
        under = "" if v.estimated_untraced_graph_step_ns is None else ", under the profiler"
        lines.append(
            f"if graphed{under} (estimate): ~{_us(v.estimated_graph_step_ns)} per step, "
            f"~{v.estimated_speedup or 0:.1f}x")
        lines.append(
            f"  assumes: this host launches a kernel in {_us(h)} (p50, {h_source}); a graph "
            f"launch costs {_us(a['graph_launch_fixed_ns'])} + "
            f"{a['graph_launch_per_node_ns'] / 1000:.2f} us/node of host time and its first "
            f"node starts {_us(a['launch_latency_fixed_ns'])} + "
            f"{a['launch_latency_per_node_ns'] / 1000:.2f} us/node after the call (waited for "
            f"in steps that sync: {a['synced_steps']:.0f} of {len(eager)}); nodes run "
            f"back to back {gap / 1000:.2f} us apart ({gap_source}); host work before each "
            f"step's first launch stays ({_us(a['kept_host_ns_p50'])} p50), Python between "
            f"launches goes")
    if len(graph) and gpu_unavailable is not None:
        v.kind = "incomplete"
        lines.append(
            f"graphed steps: {len(graph)}: step p50 {_us(v.graph_step_p50_ns)}, "
            f"{_calls(v.graph_launches_per_step)} per step; GPU busy and replay compactness: "
            "unavailable: not recorded (the trace is incomplete)")
    elif len(graph):
        if not len(eager):
            v.kind = "graphed"
        compact = ("" if v.replay_compactness_p50 is None
                   else f", replay compactness {v.replay_compactness_p50:.3f}")
        lines.append(
            f"graphed steps: {len(graph)}: step p50 {_us(v.graph_step_p50_ns)}, GPU busy "
            f"{v.graph_busy_pct_p50 or 0:.0f}% of it, {_calls(v.graph_launches_per_step)} "
            f"per step{compact}")
    if coverage is not None and gpu_unavailable is None:
        lines.extend(_coverage_lines(coverage, graph))
    if v.measured_speedup is not None:
        lines.append(
            f"measured: eager {_us(v.eager_step_p50_ns)} -> graphed {_us(v.graph_step_p50_ns)} "
            f"per step ({v.measured_speedup:.1f}x), launch calls per step "
            f"{v.eager_launches_per_step:.0f} -> {v.graph_launches_per_step:.0f}")
    if not lines:
        v.kind = "no steps"
        lines.append("only warm-up and capture steps: nothing steady to judge (see --skip)")
    v.lines = lines
    return v


def _no_estimate(eager: pd.DataFrame, step_source: str | None,
                 gpu_unavailable: str | None) -> str | None:
    """Why the eager steps get no what-if estimate, or None when they have its evidence."""
    if gpu_unavailable is not None:
        return "the trace is incomplete: its GPU figures are not recorded"
    if step_source == "whole-trace":
        return ("the step is the whole trace: there is no repeating step to graph (mark "
                "steps, or pass --step)")
    if not (eager["kernel_launches"].to_numpy() > 0).any():
        return "the steps launch no kernel: nothing for a graph to collapse"
    if not (eager["gpu_ops"].fillna(0).to_numpy() > 0).any():
        return "the steps hold no GPU activity: nothing for a graph to replay"
    return None


def _steps_list(steps: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f", ... ({len(steps)} in all)" if len(steps) > limit else "")


def _coverage_lines(coverage: Any, graph: pd.DataFrame) -> list[str]:
    """Partial graphs, re-capture and fallback, one line each (only when they occur)."""
    out = []
    partial = graph[graph["kernel_launches"] > 0]
    if len(partial):
        per = coverage.eager_per_step
        k, gpu = per.get("kernel_launches", 0.0), per.get("gpu_ns")
        top = coverage.eager_top
        names = ", ".join(f"{_short(r.name)} ({r.kernels:g}x, {r.gpu_ns / 1000:.1f} us)"
                          for r in top.head(3).itertuples()) or "n/a"
        host = per.get("launch_host_ns")
        out.append(
            f"graphed steps still launch {k:.0f} kernel{'' if round(k) == 1 else 's'} eagerly "
            f"per step ({len(partial)} of {len(graph)} steps): {_us(gpu)} of GPU outside replays, "
            f"{_us(host)} of host launch time: top: {names}")
    recap, fall = coverage.recapture_steps, coverage.fallback_steps
    if recap or fall:
        parts = []
        if recap:
            parts.append(f"{len(recap)} step{'' if len(recap) == 1 else 's'} re-captured a "
                         f"graph in steady state (steps {_steps_list(recap)})")
        if fall:
            parts.append(f"{len(fall)} step{'' if len(fall) == 1 else 's'} fell back to eager "
                         f"after graphs had replayed (steps {_steps_list(fall)})")
        out.append("; ".join(parts))
    return out


def _short(name: str, limit: int = 48) -> str:
    name = str(name)
    return name if len(name) <= limit else name[: limit - 3] + "..."
