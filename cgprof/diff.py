"""Compare two analysed runs step by step: the numbers behind ``cgprof diff``.

Two :class:`~cgprof.metrics.AnalysisResult` objects go in, a :class:`DiffResult` comes out.
Nothing here recomputes a metric: every figure is read from the results' step, gap, replay
and launch tables, restricted to a *window* of steps and aligned by step position (step i of
the baseline's window against step i of the candidate's). The report renderers
(:mod:`cgprof.report.html`, :mod:`cgprof.report.diff_text`) only format a DiffResult.

A window is chosen per run: a ``mode`` filter, then a slice ``A:B`` (0-based, B exclusive) of
the remaining steps. By default the filter keeps the steady-state steps (modes "eager" and
"graph"), leaving out "warmup" and "capture" steps as the analysis verdict does; "all" keeps
every step, and "eager", "graph", "warmup" or "capture" keeps one kind. Two windows of one
trace can be compared, e.g. the eager and the graphed steps of a trace that holds both::

    r = cgprof.analyze("traces/mlp8_node.sqlite")
    d = cgprof.diff(r, r, labels=("eager", "graph"), modes=("eager", "graph"))

:class:`RunView` (one run's window) is also what the single-run report draws.

All durations are integer nanoseconds (``*_ns``); shares are percentages (``*_pct``).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from cgprof.diff_options import STEADY_MODES, slice_text
from cgprof.diff_verdict import ratio, verdict_lines
from cgprof.errors import AnalysisError, CgprofError
from cgprof.io.trace import Trace, column
from cgprof.metrics import AnalysisResult
from cgprof.metrics.coverage import call_steps_of, step_positions
from cgprof.metrics.gap_sinks import GAP_BIN_EDGES_US, GapBins, add_gap_table, extent_positions
from cgprof.metrics.intervals import counts_by_code, sums_by_code
from cgprof.metrics.launches import FAMILIES, api_calls
from cgprof.metrics.windows import WindowTotals, extent_ends, name_totals
from cgprof.version import DIFF_SCHEMA_VERSION

__all__ = [
    "DiffResult", "RunView", "diff", "view",
    "SLOWER_RATIO", "GAP_BIN_EDGES_US", "DIFF_SCHEMA_VERSION",
]

#: A kernel is "slower" in the candidate when its average duration is more than this many times
#: the baseline's ("faster" below the inverse).
SLOWER_RATIO = 1.5

STEP_VIEW_COLUMNS = ["i", "step", "mode", "start_ns", "end_ns", "extent_end_ns", "effective_ns",
                     "dur_ns", "launch_calls", "api_calls", "kernels", "gpu_ops", "gpu_busy_ns",
                     "idle_pct", "compactness", "graph_replays"]


@dataclass
class RunView:
    """One run restricted to its window of steps: what a report shows for it.

    label       display name ("baseline", "eager", ...)
    result      the full analysis (its ``trace`` has the raw events a timeline draws)
    steps       the window's steps (STEP_VIEW_COLUMNS): i (0-based position in the window),
                step (the step number in the analysis), mode, start_ns/end_ns (host range),
                extent_end_ns (the later of the host end and the step's last GPU work),
                effective_ns, dur_ns, launch_calls (kernel + graph launch calls), api_calls,
                kernels (<NA> when a graph-granularity replay hides them), gpu_ops,
                gpu_busy_ns, idle_pct (100 * (effective - busy) / effective), compactness
                (GPU busy / GPU span of the step), graph_replays
    mode        the step-mode filter asked for (None: steady-state steps, or "all", "eager",
                "graph", "warmup", "capture")
    left_out    steps the default filter left out (warm-up and capture steps)
    first, stop the window as a slice of the (mode-filtered) steps
    total_steps steps available before the slice
    gaps        rows of ``result.step_gaps`` that start inside a window step's extent, plus
                ``step`` (the step whose extent holds the gap start)
    replays     rows of ``result.replays.replays`` launched by window steps, plus ``step`` and
                ``i`` (position of that step in the window)
    families    family, calls, calls_per_step, host_ns: API calls attributed to window steps
                (stream-capture calls excluded), one row per launch family present
    kernels     name, instances, per_step, total_ns, avg_ns: kernels of the window's visible
                steps (steps whose kernels are hidden by graph-granularity replays excluded)
    hidden_steps  window steps whose replayed kernels are not in the trace
    gap_hist    bin_lo_us, bin_hi_us, count, total_ns: the window's gaps (window_edge gaps
                excluded) binned on GAP_BIN_EDGES_US
    headline    the run's headline numbers (see :func:`view`)
    """

    label: str
    result: AnalysisResult
    steps: pd.DataFrame
    mode: str | None
    first: int
    stop: int
    total_steps: int
    #: what :attr:`gaps` is made of when first read (:class:`_WindowGaps`; None: not kept,
    #: :meth:`without_events`)
    window_gaps: _WindowGaps | None
    replays: pd.DataFrame
    families: pd.DataFrame
    kernels: pd.DataFrame
    hidden_steps: int
    gap_hist: pd.DataFrame
    headline: dict[str, Any]
    left_out: int = 0
    #: the events a timeline of this view draws, when kept apart from the analysis
    #: (:func:`cgprof.report.figures.timeline_apart`); None: the analysis's own
    timeline: Any = None

    @property
    def events_trace(self) -> Trace:
        """The trace whose events a timeline draws (the analysis's, or a cut of it)."""
        return self.timeline.trace if self.timeline is not None else self.result.trace

    @property
    def events_gaps(self) -> pd.DataFrame:
        """The GPU gaps a timeline draws (``result.step_gaps``, or a cut of them)."""
        return self.timeline.gaps if self.timeline is not None else self.result.step_gaps

    @functools.cached_property
    def gaps(self) -> pd.DataFrame:
        """The window's gaps (see the class doc), made on first read: no report reads
        them (the view's histogram is made from ``result.step_gaps`` directly), and a copy
        per view of a 10M-gap trace is ~0.6 GB while a page's views are alive together."""
        if self.window_gaps is None:
            raise CgprofError(f"{self.label}: the view was made without its events "
                              "(RunView.without_events): its gaps are not kept")
        return self.window_gaps.frame()

    @property
    def start_ns(self) -> int:
        """Host start of the window's first step: time 0 of this run's timeline."""
        return int(self.steps["start_ns"].iloc[0])

    @property
    def end_ns(self) -> int:
        return int(self.steps["extent_end_ns"].max())

    @property
    def path(self) -> str:
        return str(self.result.info["path"])

    def without_events(self) -> RunView:
        """This view without the analysis's events and per-row tables (the trace, its gap
        tables, each call's step): what a text or JSON diff reads of it stays (the view's
        own tables, the analysis's facts and step table). A diff of two big traces then
        holds one analysis at a time, not two (cgprof diff without -o: 10M kernels each,
        ~1.7 GB less); a timeline (the HTML page) and :attr:`gaps` need the events."""
        facts = _Facts(info=self.result.info,
                       steps=_StepFacts(steps=self.result.steps.steps,
                                        rule=self.result.steps.rule))
        # (the facts stand in for the analysis: all a text or JSON diff reads of it)
        return dataclasses.replace(self, result=cast(AnalysisResult, facts), window_gaps=None)

    def describe(self) -> str:
        """"steps 0-19 of 40 (eager only)" for notes and headers."""
        st = self.steps["step"]
        if self.mode and self.mode != "all":
            mode = f", {self.mode} steps only"
        elif self.left_out:
            mode = f", {self.left_out} warm-up/capture steps left out"
        else:
            mode = ""
        return (f"steps {int(st.iloc[0])}-{int(st.iloc[-1])} ({len(st)} of "
                f"{len(self.result.steps.steps)}{mode})")


@dataclass
class DiffResult:
    """Baseline vs candidate, aligned by step position. Columns prefixed ``base_``/``cand_``.

    labels     (baseline label, candidate label)
    baseline, candidate   the two :class:`RunView` windows
    headline   {"speedup": baseline step p50 / candidate step p50, "baseline": {...},
               "candidate": {...}} with each run's headline numbers (see :func:`view`)
    steps      one row per aligned step position ``i`` (outer join: a shorter window leaves
               <NA>): base_step, cand_step, base_mode, cand_mode, base_effective_ns,
               cand_effective_ns, delta_ns (cand - base), speedup (base / cand),
               base_launch_calls, cand_launch_calls, base_kernels, cand_kernels,
               base_gpu_busy_ns, cand_gpu_busy_ns, base_idle_pct, cand_idle_pct,
               base_compactness, cand_compactness
    families   family, base_calls, cand_calls, base_per_step, cand_per_step, base_host_ns,
               cand_host_ns (API calls attributed to each window's steps)
    work       the kernel work check, one row per kernel name: name, base_instances,
               cand_instances, base_per_step, cand_per_step (instances per visible step),
               base_avg_ns, cand_avg_ns, avg_ratio (cand / base), status, base_total_ns:
               status is "missing" (baseline only), "extra" (candidate only), "fewer" /
               "more" (fewer or more per step), "slower" / "faster" (same count, average
               duration off by more than SLOWER_RATIO), "same", or "unknown" (the counts
               differ but a graph-granularity trace hides replayed kernels on the side that
               has fewer: not reported missing). Sorted problems first, then by GPU time.
    gap_hist   bin_lo_us, bin_hi_us, base_count, cand_count (window gaps per log bin)
    lines      the verdict in words, first line the headline
    """

    labels: tuple[str, str]
    baseline: RunView
    candidate: RunView
    headline: dict[str, Any]
    steps: pd.DataFrame
    families: pd.DataFrame
    work: pd.DataFrame
    gap_hist: pd.DataFrame
    lines: list[str] = field(default_factory=list)

    @property
    def views(self) -> tuple[RunView, RunView]:
        return self.baseline, self.candidate

    def incomplete(self) -> dict[str, list[str]]:
        """Label -> what is missing, for each run whose trace is incomplete (none: {})."""
        return {v.label: list(v.headline["incomplete"]) for v in self.views
                if v.headline.get("incomplete")}

    def incomplete_lines(self) -> list[str]:
        """The first lines of a diff of which a side is incomplete."""
        out = []
        for label, missing in self.incomplete().items():
            out.append(f"INCOMPLETE TRACE ({label}): GPU records are missing, so its GPU "
                       "figures (idle, replay compactness) are unavailable: not recorded")
            out += [f"  missing: {m}" for m in missing]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``cgprof diff --json`` writes (``schema_version`` inside)."""
        from cgprof.records import frame_records
        from cgprof.records import scalar as _scalar
        from cgprof.version import __version__

        def run(v: RunView) -> dict[str, Any]:
            return {"label": v.label, "path": v.path, "mode": v.mode, "first": v.first,
                    "stop": v.stop, "total_steps": v.total_steps, "left_out": v.left_out,
                    "hidden_steps": v.hidden_steps,
                    "graph_trace_mode": v.result.info["graph_trace_mode"],
                    "step_range": v.result.info["step_range"],
                    "step_source": v.result.info["step_source"],
                    "step_rule": v.result.steps.rule,
                    "headline": {k: _scalar(x) for k, x in v.headline.items()}}

        return {
            "schema_version": DIFF_SCHEMA_VERSION,
            "cgprof_version": __version__,
            "kind": "cgprof.diff",
            "labels": list(self.labels),
            "baseline": run(self.baseline),
            "candidate": run(self.candidate),
            "speedup": _scalar(self.headline["speedup"]),
            "untraced_speedup": _scalar(self.headline.get("untraced_speedup")),
            "incomplete": self.incomplete(),
            "lines": list(self.lines),
            "steps": frame_records(self.steps),
            "families": frame_records(self.families),
            "work": frame_records(self.work),
            "gap_histogram": frame_records(self.gap_hist),
        }


# ---------------------------------------------------------------------------------------
# one run


def _p50(values: Any) -> float | None:
    v = pd.Series(values, dtype="Float64").dropna().to_numpy(dtype=np.float64)
    return float(np.median(v)) if len(v) else None


def _window_steps(result: AnalysisResult, label: str, steps: slice | None, mode: str | None):
    return _window_of(result.steps.steps, result.info["path"], label, steps, mode)


def _window_of(table: pd.DataFrame, path: Any, label: str, steps: slice | None,
               mode: str | None):
    """The rows of the step table ``table`` (of the trace at ``path``) a view of ``label``
    shows (:func:`view`), the slice's first and stop positions, the steps available and
    those the default filter left out."""
    st = table
    if st.empty:
        raise AnalysisError(f"{label} ({path}): no steps to compare")
    left_out = 0
    if mode is None:
        steady = st[st["mode"].isin(STEADY_MODES)]
        if len(steady):
            left_out = len(st) - len(steady)
            st = steady
    elif mode != "all":
        st = st[st["mode"] == mode]
        if st.empty:
            have = ", ".join(sorted(set(table["mode"]))) or "none"
            raise AnalysisError(f"{label} ({path}): no {mode} steps (step modes here: {have})")
    total = len(st)
    first, stop, _ = (steps or slice(None)).indices(total)
    sel = st.iloc[first:stop]
    if sel.empty:
        what = (f"{mode} steps" if mode and mode != "all" else
                "steady-state steps" if left_out else "steps")
        raise AnalysisError(
            f"{label} ({path}): --steps {slice_text(steps)} selects no steps; "
            f"it has {total} {what} (positions 0-{total - 1})")
    return sel.reset_index(drop=True), first, first + len(sel), total, left_out


#: (id of the object, what) -> (a weak reference to the object, the value made of it).
_MADE: dict[tuple[Any, ...], tuple[weakref.ref, Any]] = {}


def _forget(key: tuple[Any, ...], ref: weakref.ref) -> None:
    hit = _MADE.get(key)
    if hit is not None and hit[0] is ref:  # not a later object's, made at the same address
        del _MADE[key]


def _once(owner: Any, what: tuple[Any, ...], make: Any) -> Any:
    """``make()`` once per live ``owner`` object and ``what``; forgotten when the object is
    (a weak reference's callback: a diff that lets the baseline's analysis go before the
    candidate's frees what was made of it, 10M kernels: ~0.5 GB)."""
    key = (id(owner), *what)
    hit = _MADE.get(key)
    if hit is not None and hit[0]() is owner:
        return hit[1]
    value = make()
    ref = weakref.ref(owner, functools.partial(_forget, key))
    _MADE[key] = (ref, value)
    return value


def seed_api_calls(trace: Trace, calls: pd.DataFrame) -> None:
    """Make ``calls`` what :func:`cached_api_calls` gives for ``trace``: a cut of a trace
    whose calls were classified whole (a capture begun before the cut still marks them)."""
    _once(trace, ("api_calls",), lambda: calls)


def cached_api_calls(trace: Trace) -> pd.DataFrame:
    """:func:`cgprof.metrics.launches.api_calls` of ``trace``, computed once per trace object.

    Several windows of one trace (and its timeline) need the calls with their launch family;
    on a trace with a million calls classifying them takes about a second each time. Without
    the columns the trace derives (``tid``, ``dur_ns``; read them with
    :func:`cgprof.io.trace.column`): the frame lives as long as the trace (10M calls: 160 MB)."""
    return _once(trace, ("api_calls",), lambda: api_calls(trace, derived=False))


def view(
    result: AnalysisResult,
    label: str = "run",
    steps: slice | None = None,
    mode: str | None = None,
) -> RunView:
    """Restrict one analysis to a window of steps (see the module doc).

    ``headline`` keys: steps, first_step, last_step, mode ("eager", "graph" or "mixed"),
    step_p50_ns (median effective step time), step_mean_ns, launch_calls_per_step (median
    kernel + graph launch calls), api_calls_per_step, gpu_idle_pct (100 * (sum of effective
    - sum of GPU busy) / sum of effective over the window's steps), replays,
    replay_compactness_p50 (None without replays or when a graph-granularity trace hides
    the inside of replays), kernels_per_step (median over visible steps, None if all hidden),
    hidden_steps, graph_trace_mode; untraced_step_mean_ns and traced_step_mean_ns: the
    analysis window's mean step time without and with the profiler, from the untraced run
    recorded beside the trace (cgprof.untraced; None when not measured).
    """
    sel, first, stop, total, left_out = _window_steps(result, label, steps, mode)
    st = pd.DataFrame({
        "i": np.arange(len(sel), dtype=np.int64),
        "step": sel["step"].to_numpy(np.int64),
        "mode": sel["mode"].astype(str).to_numpy(),
        "start_ns": sel["start_ns"].to_numpy(np.int64),
        "end_ns": sel["end_ns"].to_numpy(np.int64),
    })
    st["extent_end_ns"] = extent_ends(sel)
    st["effective_ns"] = sel["effective_ns"].to_numpy(np.int64)
    st["dur_ns"] = sel["dur_ns"].to_numpy(np.int64)
    st["launch_calls"] = (sel["kernel_launches"] + sel["graph_launches"]).to_numpy(np.int64)
    st["api_calls"] = sel["api_calls"].to_numpy(np.int64)
    st["kernels"] = pd.array(sel["kernels"], dtype="Int64")
    st["gpu_ops"] = sel["gpu_ops"].to_numpy(np.int64)
    st["gpu_busy_ns"] = sel["gpu_busy_ns"].to_numpy(np.int64)
    eff = st["effective_ns"].to_numpy(np.float64)
    idle = np.where(eff > 0, 100.0 * (eff - st["gpu_busy_ns"].to_numpy(np.float64)) /
                    np.where(eff > 0, eff, 1.0), np.nan)
    st["idle_pct"] = pd.array(np.clip(idle, 0.0, 100.0), dtype="Float64")
    st["compactness"] = pd.array(sel["compactness"], dtype="Float64")
    st["graph_replays"] = sel["graph_replays"].to_numpy(np.int64)
    st = st[STEP_VIEW_COLUMNS]

    step_ids = st["step"].to_numpy(np.int64)
    pos_of_step = pd.Series(np.arange(len(st), dtype=np.int64), index=step_ids)

    hidden = st["kernels"].isna().to_numpy(dtype=bool)
    visible_steps = step_ids[~hidden]
    wgaps: _WindowGaps | None = None
    if result.trace is None:  # a chunked analysis: the totals it gathered for this window
        totals = window_totals(result, label, step_ids)
        rep = totals.replays
        kt = _finish_kernels(totals.kernels, len(visible_steps))
        per_family = totals.families
        hist = totals.gap_hist.copy()
    else:
        # Gaps whose start lies in the union of the window steps' extents.
        starts = st["start_ns"].to_numpy(np.int64)
        ext_cummax = np.maximum.accumulate(st["extent_end_ns"].to_numpy(np.int64))
        wgaps = _WindowGaps(result.step_gaps, starts, ext_cummax, step_ids)
        # Each frame's rows whose (pid, corr_id) is a window step's call, with that step:
        # what an inner merge with the window's call_steps gives (call_steps holds each pair
        # once), without factorising its every row for each frame (10M kernels: GBs and
        # seconds).
        rep = _launched_in(result, "replays", result.replays.replays, step_ids)
        kernels = result.trace.stored("kernels")  # dur_ns made below, for the table only
        kern = _step_rows(_steps_of(result, "kernels", kernels), visible_steps)
        kt = _kernel_table(kernels["name"], _series(column(kernels, "dur_ns")), kern,
                           len(visible_steps))
        calls = cached_api_calls(result.trace)
        rows = _step_rows(_steps_of(result, "calls", calls), step_ids)
        rows &= ~calls["in_capture"].to_numpy(dtype=bool)
        per_family = _per_family(calls["family"], _series(column(calls, "dur_ns")), rows)
        hist = wgaps.histogram()
    rep = rep.sort_values("replay", kind="stable").reset_index(drop=True)
    rep["i"] = pos_of_step.reindex(rep["step"].to_numpy()).to_numpy(np.int64)
    families = pd.DataFrame(
        [{"family": f, "calls": n_calls, "calls_per_step": n_calls / len(st), "host_ns": host_ns}
         for f, n_calls, host_ns in per_family],
        columns=["family", "calls", "calls_per_step", "host_ns"])

    comp = rep["compactness"].astype("Float64").dropna() if len(rep) else pd.Series([])
    modes = sorted(set(st["mode"]))
    eff_sum = float(st["effective_ns"].sum())
    # an incomplete trace's GPU figures are not recorded (cgprof.metrics.completeness)
    incomplete = list(result.info.get("incomplete") or [])
    headline = {
        "steps": int(len(st)),
        "first_step": int(step_ids[0]),
        "last_step": int(step_ids[-1]),
        "mode": modes[0] if len(modes) == 1 else "mixed",
        "step_p50_ns": _p50(st["effective_ns"]),
        "step_mean_ns": float(st["effective_ns"].mean()),
        "launch_calls_per_step": _p50(st["launch_calls"]),
        "api_calls_per_step": _p50(st["api_calls"]),
        "gpu_idle_pct": (100.0 * (eff_sum - float(st["gpu_busy_ns"].sum())) / eff_sum
                         if eff_sum > 0 and not incomplete else None),
        "replays": int(len(rep)),
        "replay_compactness_p50": _p50(comp) if len(comp) and not incomplete else None,
        "incomplete": incomplete,
        "kernels_per_step": _p50(st["kernels"]),
        "hidden_steps": int(hidden.sum()),
        "graph_trace_mode": result.info["graph_trace_mode"],
        **_untraced_headline(result),
    }
    return RunView(label=label, result=result, steps=st, mode=mode, first=first, stop=stop,
                   total_steps=total, window_gaps=wgaps, replays=rep, families=families, kernels=kt,
                   hidden_steps=int(hidden.sum()), gap_hist=hist, headline=headline,
                   left_out=left_out)


def window_totals(result: AnalysisResult, label: str, step_ids: np.ndarray) -> WindowTotals:
    """The totals a chunked analysis (no trace kept) gathered for the window of ``step_ids``
    (cgprof.metrics.chunked.analyze_path's ``windows``: :func:`window_asker`)."""
    for totals in result.windows:
        if np.array_equal(totals.steps, step_ids):
            return cast(WindowTotals, totals)
    raise CgprofError(f"{label} ({result.info['path']}): analysed in chunks without this "
                      f"window of steps' totals (steps {int(step_ids[0])}-"
                      f"{int(step_ids[-1])}): analyse it with the windows a view will show")


def window_asker(path: Any, runs: list[tuple[str, slice | None, str | None]]
                 ) -> Callable[[pd.DataFrame], list[np.ndarray]]:
    """What a chunked analysis of the trace at ``path`` (cgprof.metrics.chunked.analyze_path's
    ``windows``) is to gather totals for: the windows of the views ``runs`` (label, steps,
    mode) of :func:`view`, given its step table. A window that selects no steps gathers
    nothing: its view raises the error, where a whole analysis's does."""
    def windows(table: pd.DataFrame) -> list[np.ndarray]:
        out = []
        for label, steps, mode in runs:
            try:
                sel = _window_of(table, path, label, steps, mode)[0]
            except CgprofError:
                sel = table.iloc[0:0]
            out.append(sel["step"].to_numpy(np.int64))
        return out

    return windows


def _series(a: np.ndarray) -> pd.Series:
    return pd.Series(a, copy=False)


def _launched_in(result: AnalysisResult, name: str, df: pd.DataFrame,
                 steps: np.ndarray) -> pd.DataFrame:
    """``df.merge(call_steps[call_steps.step in steps], on=["pid", "corr_id"])`` (``df``: the
    frame ``name`` of ``result``, or some of its columns): the rows launched by a call of
    those steps, in ``df``'s order, with its ``step``."""
    step = _steps_of(result, name, df)
    rows = _step_rows(step, steps)
    return df[rows].assign(step=step[rows]).reset_index(drop=True)


def _step_rows(step_of: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Which rows' step (``step_of``, -1: none) is one of ``steps``."""
    return step_positions(step_of, np.unique(steps)) >= 0


def _steps_of(result: AnalysisResult, name: str, df: pd.DataFrame) -> np.ndarray:
    """``call_steps_of(df, result.steps.call_steps)`` (the step of each row of the frame
    ``name`` of ``result``: its kernels, its API calls), once per result: the three views
    of one report (10M kernels: ~1 s each time)."""
    return _once(result, ("steps of", name, len(df)),
                 lambda: call_steps_of(df, result.steps.call_steps))


def _kernel_table(names: pd.Series, dur: pd.Series, rows: np.ndarray,
                  n_steps: int) -> pd.DataFrame:
    """Per kernel name of the rows marked: name, instances, per_step (over ``n_steps``),
    total_ns, avg_ns, longest total first (ties: by name)."""
    return _finish_kernels(name_totals(names, dur, rows), n_steps)


def _finish_kernels(kt: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """:func:`_kernel_table` of a table of name, instances, total_ns (by name)."""
    kt = kt.copy()
    kt["per_step"] = kt["instances"] / n_steps
    kt["avg_ns"] = kt["total_ns"] / kt["instances"]
    kt = kt.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
    return kt[["name", "instances", "per_step", "total_ns", "avg_ns"]].reset_index(drop=True)


def _per_family(family: pd.Series, dur: pd.Series,
                rows: np.ndarray | None = None) -> list[tuple[str, int, int]]:
    """(family, calls, host ns) of each of FAMILIES that has calls (among ``rows``: a mask,
    None: all), in FAMILIES' order."""
    if isinstance(family.dtype, pd.CategoricalDtype) and dur.dtype == np.int64:
        cats = [str(c) for c in family.cat.categories]
        codes, values = family.cat.codes.to_numpy(), dur.to_numpy()
        keep = codes >= 0 if rows is None else rows & (codes >= 0)
        if not keep.all():
            codes, values = codes[keep], values[keep]
        count = counts_by_code(codes, len(cats))
        total = sums_by_code(codes, values, len(cats))
        per = {c: (int(count[i]), int(total[i])) for i, c in enumerate(cats) if count[i]}
    else:
        if rows is not None:
            family, dur = family[rows], dur[rows]
        g = dur.groupby(family.astype(object), sort=False).agg(["size", "sum"])
        per = {f: (int(g.at[f, "size"]), int(g.at[f, "sum"])) for f in g.index}
    return [(f, *per[f]) for f in FAMILIES if f in per]


@dataclass(frozen=True)
class _StepFacts:
    """What a text or JSON diff reads of a :class:`~cgprof.metrics.step_result.StepResult`."""

    steps: pd.DataFrame
    rule: Any


@dataclass(frozen=True)
class _Facts:
    """What a text or JSON diff reads of an :class:`AnalysisResult` (its ``info`` and its
    steps): a view's ``result`` after :meth:`RunView.without_events`."""

    info: dict[str, Any]
    steps: _StepFacts


@dataclass(frozen=True, eq=False)
class _WindowGaps:
    """The rows of ``source`` (a result's ``step_gaps``) that start inside a window step's
    extent (:func:`cgprof.metrics.gap_sinks.extent_positions` of the steps' ``starts`` and
    ``ext_cummax``), with the ``step`` of ``step_ids`` that holds each: :attr:`RunView.gaps`,
    made only when read."""

    source: pd.DataFrame
    starts: np.ndarray
    ext_cummax: np.ndarray
    step_ids: np.ndarray

    def _positions(self) -> np.ndarray:
        return extent_positions(self.starts, self.ext_cummax,
                       self.source["start_ns"].to_numpy(np.int64))

    def frame(self) -> pd.DataFrame:
        pos = self._positions()
        keep = pos >= 0
        return self.source[keep].assign(step=self.step_ids[pos[keep]]).reset_index(drop=True)

    def histogram(self) -> pd.DataFrame:
        """The histogram of :meth:`frame`'s gaps (window edges left out), from the columns
        of the source it reads (the gaps a chunked analysis bins: GapAsk.bins). Every row
        of ``step_gaps`` is longer than the analysis's floor, itself at least 0."""
        bins = GapBins(self.starts, self.ext_cummax)
        add_gap_table((bins,), self.source, 0)
        return bins.frame()


# ---------------------------------------------------------------------------------------
# two runs


def diff(
    baseline: AnalysisResult,
    candidate: AnalysisResult,
    labels: tuple[str, str] = ("baseline", "candidate"),
    steps: slice | tuple[slice | None, slice | None] | None = None,
    modes: tuple[str | None, str | None] | None = None,
) -> DiffResult:
    """Compare ``candidate`` against ``baseline`` (see :class:`DiffResult`).

    steps: one slice for both windows, or (baseline slice, candidate slice). modes: per-run
    step-mode filter applied before the slice (None: the steady-state eager and graph steps;
    "all", "eager", "graph", "warmup", "capture"), e.g. ("eager", "graph") to compare the eager
    and graphed steps of one trace. Raises AnalysisError when a window holds no steps.
    """
    (la, sa, ma), (lb, sb, mb) = windows(labels, steps, modes)
    return compare(view(baseline, la, sa, ma), view(candidate, lb, sb, mb))


def windows(labels: tuple[str, str] = ("baseline", "candidate"),
            steps: slice | tuple[slice | None, slice | None] | None = None,
            modes: tuple[str | None, str | None] | None = None,
            ) -> tuple[tuple[str, slice | None, str | None], tuple[str, slice | None, str | None]]:
    """:func:`diff`'s options per run: (label, steps, mode) of the baseline and of the
    candidate, what :func:`view` of each takes. Raises CgprofError when the labels are
    the same."""
    labels = (str(labels[0]), str(labels[1]))
    if labels[0] == labels[1]:
        raise CgprofError(f"labels must differ (both are {labels[0]!r})")
    sa, sb = steps if isinstance(steps, tuple) else (steps, steps)
    ma, mb = modes if modes is not None else (None, None)
    return (labels[0], sa, ma), (labels[1], sb, mb)


def _untraced_headline(result: Any) -> dict[str, float | None]:
    u = getattr(result, "untraced", None)
    if u is None or not u.available:
        return {"untraced_step_mean_ns": None, "traced_step_mean_ns": None}
    return {"untraced_step_mean_ns": u.mean_ns, "traced_step_mean_ns": u.traced_mean_ns}


def compare(a: RunView, b: RunView) -> DiffResult:
    """The :class:`DiffResult` of two views (:func:`view`; :func:`diff` is both steps)."""
    labels = (a.label, b.label)
    ha, hb = a.headline, b.headline
    speedup = (ha["step_p50_ns"] / hb["step_p50_ns"]
               if ha["step_p50_ns"] and hb["step_p50_ns"] else None)
    headline = {"speedup": speedup, "baseline": ha, "candidate": hb,
                "untraced_speedup": ratio(ha["untraced_step_mean_ns"],
                                           hb["untraced_step_mean_ns"])}
    work = work_check(a, b)
    d = DiffResult(labels=labels, baseline=a, candidate=b, headline=headline,
                   steps=_aligned_steps(a, b), families=_families(a, b), work=work,
                   gap_hist=_hist_pair(a, b))
    d.lines = verdict_lines(d)
    return d


def _aligned_steps(a: RunView, b: RunView) -> pd.DataFrame:
    cols = ["step", "mode", "effective_ns", "launch_calls", "kernels", "gpu_busy_ns",
            "idle_pct", "compactness"]
    left = a.steps[["i"] + cols].rename(columns={c: f"base_{c}" for c in cols})
    right = b.steps[["i"] + cols].rename(columns={c: f"cand_{c}" for c in cols})
    out = left.merge(right, on="i", how="outer").sort_values("i").reset_index(drop=True)
    for c in ("step", "effective_ns", "launch_calls", "kernels", "gpu_busy_ns"):
        for p in ("base_", "cand_"):
            out[p + c] = out[p + c].astype("Int64")
    for p in ("base_", "cand_"):
        out[p + "mode"] = out[p + "mode"].astype(object).where(out[p + "mode"].notna(), None)
        out[p + "idle_pct"] = out[p + "idle_pct"].astype("Float64")
        out[p + "compactness"] = out[p + "compactness"].astype("Float64")
    out["delta_ns"] = (out["cand_effective_ns"] - out["base_effective_ns"]).astype("Int64")
    cand = out["cand_effective_ns"].astype("Float64")
    out["speedup"] = (out["base_effective_ns"].astype("Float64") / cand.where(cand > 0))
    order = ["i", "base_step", "cand_step", "base_mode", "cand_mode", "base_effective_ns",
             "cand_effective_ns", "delta_ns", "speedup", "base_launch_calls",
             "cand_launch_calls", "base_kernels", "cand_kernels", "base_gpu_busy_ns",
             "cand_gpu_busy_ns", "base_idle_pct", "cand_idle_pct", "base_compactness",
             "cand_compactness"]
    return out[order]


def _families(a: RunView, b: RunView) -> pd.DataFrame:
    fa = a.families.set_index("family")
    fb = b.families.set_index("family")
    rows = []
    for f in FAMILIES:
        if f not in fa.index and f not in fb.index:
            continue
        ra = fa.loc[f] if f in fa.index else None
        rb = fb.loc[f] if f in fb.index else None
        rows.append({
            "family": f,
            "base_calls": int(ra["calls"]) if ra is not None else 0,
            "cand_calls": int(rb["calls"]) if rb is not None else 0,
            "base_per_step": float(ra["calls_per_step"]) if ra is not None else 0.0,
            "cand_per_step": float(rb["calls_per_step"]) if rb is not None else 0.0,
            "base_host_ns": int(ra["host_ns"]) if ra is not None else 0,
            "cand_host_ns": int(rb["host_ns"]) if rb is not None else 0,
        })
    return pd.DataFrame(rows, columns=["family", "base_calls", "cand_calls", "base_per_step",
                                       "cand_per_step", "base_host_ns", "cand_host_ns"])


def _hist_pair(a: RunView, b: RunView) -> pd.DataFrame:
    out = a.gap_hist[["bin_lo_us", "bin_hi_us"]].copy()
    out["base_count"] = a.gap_hist["count"].to_numpy()
    out["cand_count"] = b.gap_hist["count"].to_numpy()
    return out


WORK_ORDER = {"missing": 0, "extra": 1, "fewer": 2, "more": 3, "slower": 4, "unknown": 5,
              "faster": 6, "same": 7}


def work_check(a: RunView, b: RunView) -> pd.DataFrame:
    """Do both windows run the same kernels per step? (see DiffResult.work)"""
    ka = a.kernels.set_index("name")
    kb = b.kernels.set_index("name")
    names = sorted(set(ka.index) | set(kb.index))
    vis_a = len(a.steps) - a.hidden_steps
    vis_b = len(b.steps) - b.hidden_steps
    rows = []
    for name in names:
        ia = int(ka.at[name, "instances"]) if name in ka.index else 0
        ib = int(kb.at[name, "instances"]) if name in kb.index else 0
        pa = ia / vis_a if vis_a else None
        pb = ib / vis_b if vis_b else None
        avg_a = float(ka.at[name, "avg_ns"]) if ia else None
        avg_b = float(kb.at[name, "avg_ns"]) if ib else None
        ratio = avg_b / avg_a if avg_a and avg_b else None
        if pa is None or pb is None:
            status = "unknown"  # a window whose every step hides its replayed kernels
        elif not np.isclose(pa, pb, rtol=0, atol=1e-9):
            if (pb < pa and b.hidden_steps > 0) or (pa < pb and a.hidden_steps > 0):
                status = "unknown"  # the side with fewer may hold them in hidden replays
            elif ib == 0:
                status = "missing"
            elif ia == 0:
                status = "extra"
            else:
                status = "fewer" if pb < pa else "more"
        elif ratio is not None and ratio > SLOWER_RATIO:
            status = "slower"
        elif ratio is not None and ratio < 1.0 / SLOWER_RATIO:
            status = "faster"
        else:
            status = "same"
        rows.append({
            "name": name, "base_instances": ia, "cand_instances": ib,
            "base_per_step": pa, "cand_per_step": pb, "base_avg_ns": avg_a,
            "cand_avg_ns": avg_b, "avg_ratio": ratio, "status": status,
            "base_total_ns": int(ka.at[name, "total_ns"]) if ia else 0,
            "_gpu": (int(ka.at[name, "total_ns"]) if ia else 0)
            + (int(kb.at[name, "total_ns"]) if ib else 0),
        })
    cols = ["name", "base_instances", "cand_instances", "base_per_step", "cand_per_step",
            "base_avg_ns", "cand_avg_ns", "avg_ratio", "status", "base_total_ns"]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    df = pd.DataFrame(rows)
    df["_order"] = df["status"].map(WORK_ORDER)
    df = df.sort_values(["_order", "_gpu", "name"], ascending=[True, False, True],
                        kind="stable")
    df = df[cols].reset_index(drop=True)
    for c in ("base_per_step", "cand_per_step", "base_avg_ns", "cand_avg_ns", "avg_ratio"):
        df[c] = df[c].astype("Float64")
    return df


class _CallableModule(types.ModuleType):
    """Keeps ``cgprof.diff(...)`` working after this module is imported.

    ``cgprof/__init__.py`` defines a function ``diff`` that imports this module, and importing
    a submodule makes Python set the package attribute ``cgprof.diff`` to the module, replacing
    that function. Calling the module calls :func:`diff`, so both spellings keep working.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> DiffResult:
        return diff(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
