"""Plotly figures built from analysis results: the views of the HTML reports, for notebooks too.

Every function here is pure: it reads :class:`~cgprof.diff.RunView` windows (which hold the
analysis results and the loaded trace) and returns a ``plotly.graph_objects.Figure``. No metric
is recomputed; the timeline only selects the raw events of ``result.trace`` that fall in the
drawn steps.

    import cgprof
    from cgprof.report import figures
    d = cgprof.diff(cgprof.analyze("eager.sqlite"), cgprof.analyze("graph.sqlite"))
    figs = figures.diff_figures(d)          # {div id: Figure}
    figs["cgprof-timeline-0"].show()

Timelines are drawn as one horizontal ``go.Bar`` trace per event category (``base`` = start,
``x`` = duration), never one layout shape per event, and at most ``max_events`` events per run
are drawn (DrawWindow says which steps, and its note says how to choose others). The time
axis is microseconds since the host start of the run's first window step; the HTML report
keeps the two runs' timelines aligned on the same step while zooming.

Every string that comes from a trace (kernel names full of ``<...>``, NVTX text, thread names)
or from the user (labels, paths) is HTML-escaped before it reaches plotly, which would
otherwise read ``<...>`` as markup in hover labels and titles.
"""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from cgprof import schema as S
from cgprof.diff import DiffResult, RunView, cached_api_calls, seed_api_calls, window_totals
from cgprof.io.trace import column
from cgprof.metrics.intervals import arrays_sorted, starts_before
from cgprof.metrics.launches import api_calls
from cgprof.metrics.summaries import nvtx_ranges
from cgprof.metrics.windows import TIMELINE_MAX_CELLS, TimelineCut

__all__ = [
    "DEFAULT_MAX_EVENTS", "DrawWindow", "draw_window", "timeline", "step_times",
    "gap_histogram", "launch_families", "replay_compactness", "diff_figures", "single_figures",
    "EVENT_COLORS", "RUN_COLORS",
]

#: Events drawn per run timeline at most (bars of all categories together).
DEFAULT_MAX_EVENTS = 20_000
MAX_NVTX_LANES = 6
MAX_HOST_ROWS = 6
NAME_CHARS = 120  # longest name shown in a hover label
MAX_MARKERS = 400  # line charts with more points draw no markers (SVG stays light)
#: A leading step longer than this many times the window's median is a warm-up outlier: the
#: timelines open after it, the step chart switches to a log axis, the report says --skip.
OUTLIER_FACTOR = 5.0
#: The timelines open on this many steps (past leading warm-up outliers).
INITIAL_STEPS = 40

#: Baseline, candidate.
RUN_COLORS = ("#e65100", "#1565c0")

#: Timeline categories, in legend order, and their colors.
EVENT_COLORS = {
    "step": "#b0bec5",
    "NVTX range": "#26a69a",
    "kernel launch call": "#fb8c00",
    "graph launch call": "#d81b60",
    "sync call": "#8e24aa",
    "copy/memset call": "#43a047",
    "other API call": "#cfd8dc",
    "kernel": "#1e88e5",
    "kernel in graph replay": "#5e35b1",
    "graph replay": "#d81b60",
    "memcpy": "#43a047",
    "memset": "#9ccc65",
    "idle gap": "rgba(229,57,53,0.35)",
}

_FAMILY_CAT = {"kernel_launch": "kernel launch call", "graph_launch": "graph launch call",
               "sync": "sync call", "memcpy": "copy/memset call", "memset": "copy/memset call"}

_FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=12)


def esc(value: Any) -> str:
    """Escape a string for plotly's text rendering (it reads ``<...>`` as markup)."""
    return html.escape(str(value), quote=False)


def _short(value: Any, limit: int = NAME_CHARS) -> str:
    s = str(value)
    return esc(s if len(s) <= limit else s[: limit - 1] + "\u2026")


def _us(ns: Any) -> np.ndarray:
    return np.round(np.asarray(ns, dtype=np.float64) / 1000.0, 3)


def _base_layout(title: str, height: int) -> dict[str, Any]:
    return dict(
        title=dict(text=title, x=0, xanchor="left", font=dict(size=15)),
        template="plotly_white", height=height, font=_FONT,
        margin=dict(l=70, r=20, t=60, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
    )


# ---------------------------------------------------------------------------------------
# timeline events


_EVENT_COLUMNS = ["row", "cat", "start_ns", "end_ns", "name", "detail"]


def _overlapping(df: pd.DataFrame, t0: int, t1: int) -> np.ndarray:
    """Which rows of ``df`` overlap [t0, t1): the events a timeline of that span draws."""
    s, e = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
    return (e > t0) & (s < t1)


def _host_threads(tid: np.ndarray) -> list[int]:
    """The MAX_HOST_ROWS threads with the most calls (ties: the lower thread id) whose rows
    a timeline draws."""
    threads, counts = np.unique(tid, return_counts=True)
    return _ranked(threads, counts)


def _ranked(threads: np.ndarray, counts: np.ndarray) -> list[int]:
    """The MAX_HOST_ROWS ``threads`` (ascending, distinct) with the highest ``counts``."""
    order = np.argsort(-counts, kind="stable")
    return [int(t) for t in threads[order[:MAX_HOST_ROWS]]]


def _tid_categories(calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """The thread id of each category of a categorical ``global_tid`` (a big trace's,
    cgprof.io.trace.COMPACT) and every call's code (-1: NULL); None when the calls hold
    ``tid`` or their ``global_tid`` is not such a categorical (read ``tid`` then)."""
    gtid = calls["global_tid"] if "tid" not in calls else None
    if gtid is None or not isinstance(gtid.dtype, pd.CategoricalDtype) or (
            gtid.cat.categories.dtype != np.int64):
        return None
    return (gtid.cat.categories.to_numpy(np.int64) & S.ID_MASK, gtid.cat.codes.to_numpy())


def _busiest_rows(calls: pd.DataFrame, hit: np.ndarray) -> np.ndarray:
    """Which calls are on one of :func:`_host_threads` of the ``hit`` calls' threads. A
    categorical ``global_tid`` is read through its few categories (:func:`_tid_categories`):
    no int64 thread id per call (10M calls: 0.16-0.24 GB less)."""
    cats = _tid_categories(calls)
    if cats is None or (cats[1][hit] < 0).any():  # the plain way (also for a NULL id)
        tid = column(calls, "tid").astype(np.int64, copy=False)
        return np.isin(tid, _host_threads(tid[hit]))
    cat_tid, codes = cats
    per_cat = np.bincount(codes[hit], minlength=len(cat_tid))
    tids, at = np.unique(cat_tid, return_inverse=True)  # categories of one thread id summed
    counts = np.bincount(at, weights=per_cat, minlength=len(tids)).astype(np.int64)
    seen = counts > 0
    on = np.append(np.isin(cat_tid, _ranked(tids[seen], counts[seen])), False)  # -1: none
    return on[codes]


def _nvtx_spans(tr: Any) -> pd.DataFrame:
    nv = nvtx_ranges(tr)
    return nv.assign(end_ns=nv["end_ns"].astype("int64"))


def _event_sources(v: RunView) -> dict[str, Any]:
    """The frames whose rows are a run's timeline events, in drawing order (each a frame or
    a function making it): steps, NVTX ranges, API calls, kernels, copies, memsets, graph
    replays, idle gaps. :func:`_events` draws their rows; :func:`_event_starts` counts.
    The kernels as stored (their few-valued columns may be categoricals, no dur_ns): what
    is drawn reads values of the rows in a span only, and ``trace.kernels`` would make
    every kernel's int64 copies (10M kernels: ~0.25 GB)."""
    tr = v.events_trace
    return {"steps": v.steps, "nvtx": lambda: _nvtx_spans(tr),
            "calls": lambda: cached_api_calls(tr), "kernels": tr.stored("kernels"),
            "memcpy": tr.memcpy,
            "memset": tr.memset, "graph_trace": tr.graph_trace, "gaps": v.events_gaps}


def _event_starts(v: RunView, t0: int, t1: int) -> list[np.ndarray]:
    """The start times of the events :func:`_events` gives for [t0, t1), one sorted array
    per source: what counting them needs, without a frame of every event (a 10M-kernel
    trace: ~30M events, 11 GB and ~100 s as one sorted frame)."""
    out = []
    for name, src in _event_sources(v).items():
        df = src() if callable(src) else src
        hit = _overlapping(df, t0, t1)
        if name == "calls" and hit.any():  # the busiest threads' rows only
            hit &= _busiest_rows(df, hit)
        starts = df["start_ns"].to_numpy(np.int64)[hit]
        out.append(starts if arrays_sorted([starts]) else np.sort(starts))
    return out



def _events(v: RunView, t0: int, t1: int) -> pd.DataFrame:
    """Every drawable event of the run overlapping [t0, t1), one frame (names not escaped).

    Columns: row, cat, start_ns, end_ns, name and detail (hover lines)."""
    tr = v.events_trace
    src = _event_sources(v)
    parts: list[dict[str, Any]] = []

    def clip(df: pd.DataFrame) -> pd.DataFrame:
        return df[_overlapping(df, t0, t1)]

    def add(row: Any, cat: Any, df: pd.DataFrame, name: Any, detail: Any) -> None:
        parts.append({"row": row, "cat": cat, "start_ns": df["start_ns"].to_numpy(np.int64),
                      "end_ns": df["end_ns"].to_numpy(np.int64), "name": name,
                      "detail": detail})

    # The host range: a graphed step's GPU work runs long after it, overlapping later steps.
    st = clip(src["steps"])
    add("steps", "step", st,
        [f"step {s} ({m}), window position {i}" for s, m, i in
         zip(st["step"], st["mode"], st["i"], strict=True)],
        [f"host range {d / 1000:.3f} us, effective {e / 1000:.3f} us"
         for d, e in zip(st["dur_ns"], st["effective_ns"], strict=True)])

    nv = clip(src["nvtx"]())
    if len(nv):
        nv = nv.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable")
        add(_lanes(nv["start_ns"].to_numpy(np.int64), nv["end_ns"].to_numpy(np.int64)),
            "NVTX range", nv, nv["name"].astype(str).to_numpy(),
            [f"thread {t}" for t in nv["tid"]])

    calls = clip(src["calls"]())
    if len(calls):
        calls = calls.assign(tid=column(calls, "tid")) if "tid" not in calls else calls
        keep = _host_threads(calls["tid"].to_numpy(np.int64))
        calls = calls[calls["tid"].isin(keep)]
        tnames = dict(zip(tr.threads["tid"], tr.threads["name"], strict=False)) if len(
            tr.threads) else {}
        rowname = {t: esc(f"CPU {tnames.get(t) or 'thread'} {t}") for t in keep}
        fam = calls["family"].astype(str)
        add(calls["tid"].map(rowname).to_numpy(),
            fam.map(_FAMILY_CAT).fillna("other API call").to_numpy(), calls,
            calls["name"].astype(str).to_numpy(),
            [f"corr {c}" + (" (during stream capture: launches nothing)" if cap else "")
             for c, cap in zip(calls["corr_id"], calls["in_capture"], strict=True)])

    def gpu(df: pd.DataFrame, cat: Any, names: Any) -> None:
        df = clip(df)
        if df.empty:
            return
        add([f"GPU {d} stream {s}" for d, s in zip(df["device_id"], df["stream_id"],
                                                   strict=True)],
            cat(df) if callable(cat) else cat, df, names(df),
            [f"stream {s}, corr {c}" for s, c in zip(df["stream_id"], df["corr_id"],
                                                     strict=True)])

    gpu(src["kernels"], lambda k: np.where(k["graph_node_id"].notna().to_numpy(dtype=bool),
                                           "kernel in graph replay", "kernel"),
        lambda k: k["name"].astype(str).to_numpy())
    gpu(src["memcpy"], "memcpy", lambda m: [f"memcpy {b} bytes" for b in m["bytes"]])
    gpu(src["memset"], "memset", lambda m: [f"memset {b} bytes" for b in m["bytes"]])
    gpu(src["graph_trace"], "graph replay",
        lambda g: [f"graph replay (graph {gi})" for gi in g["graph_id"].astype(object)])

    gaps = clip(src["gaps"])
    if len(gaps):
        add([f"GPU {d} idle" for d in gaps["device_id"]], "idle gap", gaps,
            [f"idle: {k}" for k in gaps["kind"].astype(str)],
            [f"next call {a}" if a else "" for a in gaps["next_api"].astype(str)])
    frames = [pd.DataFrame(p)[_EVENT_COLUMNS] for p in parts if len(p["start_ns"])]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c.endswith("_ns") else object)
                             for c in _EVENT_COLUMNS})
    ev = pd.concat(frames, ignore_index=True)
    return ev.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)


def _lanes(starts: np.ndarray, ends: np.ndarray) -> list[str]:
    """Greedy lanes for possibly nested ranges (sorted by start, longest first)."""
    lane_end: list[int] = []
    out = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        for k, le in enumerate(lane_end):
            if le <= s:
                lane_end[k] = e
                out.append(k)
                break
        else:
            lane_end.append(e)
            out.append(len(lane_end) - 1)
    return [f"NVTX {k + 1}" if k < MAX_NVTX_LANES else "" for k in out]


def _row_order(rows: list[str]) -> list[str]:
    def key(r: str) -> tuple[int, str, int]:
        if r == "steps":
            return (0, "", 0)
        if r.startswith("NVTX"):
            return (1, "", int(r.split()[1]))
        if r.startswith("CPU"):
            return (2, r, 0)
        parts = r.split()  # "GPU d stream s" / "GPU d idle"
        return (3 + int(parts[1]), parts[2], int(parts[3]) if parts[2] == "stream" else 0)

    return sorted(set(rows), key=lambda r: (key(r)[0], key(r)[1] == "idle", key(r)[1:]))


@dataclass
class DrawWindow:
    """Which steps the timelines draw: window positions ``first``..``stop`` (exclusive).

    total        steps in the shortest window (positions beyond it have no partner)
    lengths      steps in each run's window
    max_events   the cap per run
    drawn        events drawn per run
    available    events overlapping the whole window, per run
    truncated    True when even step ``first`` alone held more than max_events events, so
                 only its first max_events events (by start time) are drawn
    """

    first: int
    stop: int
    total: int
    lengths: list[int]
    max_events: int
    drawn: list[int]
    available: list[int]
    truncated: bool

    @property
    def complete(self) -> bool:
        return self.first == 0 and self.stop == max(self.lengths) and not self.truncated

    def note(self, views: list[RunView] | tuple[RunView, ...]) -> str:
        """One plain-text line saying what the timelines show and how to show something else."""
        parts = []
        for v, n, a in zip(views, self.drawn, self.available, strict=True):
            st = v.steps["step"].to_numpy()
            parts.append(f"{v.label} steps {int(st[self.first])}-{int(st[self.stop - 1])} "
                         f"({n:,} of {a:,} events)")
        shown = "; ".join(parts)
        if self.complete:
            return f"Timeline: every step of the window drawn: {shown}."
        if self.stop == self.total < max(self.lengths) and not self.truncated:
            return (f"Timeline: window positions {self.first}-{self.stop - 1} drawn, as many as "
                    f"the shorter window has ({shown}). The tables and charts below cover every "
                    f"step of both windows; give the runs windows of one length with --steps "
                    f"A:B,C:D.")
        why = (f"at most {self.max_events:,} events per run are drawn to keep the page "
               f"responsive")
        if self.truncated:
            why += "; one step alone exceeds that, so it is cut at the cap"
        return (f"Timeline: window positions {self.first}-{self.stop - 1} of "
                f"{self.total} drawn ({shown}); {why}. The tables and charts below cover every "
                f"step of the window. Choose other steps with --steps A:B (window positions, B "
                f"exclusive) or raise --max-events.")


def draw_window(
    views: list[RunView] | tuple[RunView, ...],
    max_events: int = DEFAULT_MAX_EVENTS,
) -> DrawWindow:
    """The longest run of leading window steps whose events fit max_events in every run."""
    total = min(len(v.steps) for v in views)
    stops, available, per_step = [], [], []
    for v in views:
        # each window step's count of the events that start before its extent ends
        counts = (v.timeline.counts.of(total) if v.timeline is not None else
                  _step_counts(v, total))
        per_step.append(counts)
        available.append(int(counts[-1]))  # the events overlapping the whole window
        fit = int(np.searchsorted(counts, max_events, "right"))  # steps [0, fit) fit
        stops.append(fit)
    stop = min(stops)
    truncated = stop == 0
    stop = max(stop, 1)
    drawn = [min(int(counts[stop - 1]), max_events) for counts in per_step]
    return DrawWindow(first=0, stop=stop, total=total, lengths=[len(v.steps) for v in views],
                      max_events=max_events, drawn=drawn, available=available,
                      truncated=truncated)


def _window_ends(v: RunView, total: int) -> tuple[int, np.ndarray]:
    """The host start of the view's first step, and each of its first ``total`` steps'
    extent end as the window goes (a running max)."""
    st = v.steps.iloc[:total]
    return (int(st["start_ns"].iloc[0]),
            np.maximum.accumulate(st["extent_end_ns"].to_numpy(np.int64)))


def _step_counts(v: RunView, total: int) -> np.ndarray:
    """Per window step of the first ``total``: the events overlapping the window that start
    before the step's extent end (the last one: every event overlapping the window)."""
    t0, ends = _window_ends(v, total)
    parts = _event_starts(v, t0, int(ends[-1]))
    return sum((np.searchsorted(p, ends, "left") for p in parts),
               np.zeros(len(ends), dtype=np.int64))


@dataclass(frozen=True, eq=False)
class EventCounts:
    """:func:`_step_counts` of a view for any ``total``, counted once over its whole window:
    the API calls a timeline draws are those of the busiest host threads in the span drawn,
    so they are counted per thread, the other events together."""

    other: np.ndarray  # per step: events that are not API calls
    threads: np.ndarray  # thread ids of the calls overlapping the window, ascending
    per_thread: np.ndarray  # (threads, steps): each one's calls

    def of(self, total: int) -> np.ndarray:
        at = self.per_thread[:, total - 1]  # each thread's calls in the first total steps
        seen = at > 0
        drawn = np.isin(self.threads, _ranked(self.threads[seen], at[seen]))
        return self.other[:total] + self.per_thread[drawn, :total].sum(axis=0, dtype=np.int64)


#: Threads x window steps above which a view's events are not counted apart (their table).
_APART_MAX_CELLS = TIMELINE_MAX_CELLS


def _count_apart(v: RunView) -> EventCounts | None:
    """:class:`EventCounts` of a view, None when its threads x steps table is too big."""
    t0, ends = _window_ends(v, len(v.steps))
    t1 = int(ends[-1])
    other = np.zeros(len(ends), dtype=np.int64)
    threads = np.zeros(0, dtype=np.int64)
    per_thread = np.zeros((0, len(ends)), dtype=np.int64)
    for name, src in _event_sources(v).items():
        df = src() if callable(src) else src
        hit = _overlapping(df, t0, t1)
        starts = df["start_ns"].to_numpy(np.int64)[hit]
        if name != "calls":
            other += starts_before(starts, ends)
            continue
        threads, codes, of_code = _thread_index(df, hit)
        if len(threads) * len(ends) > _APART_MAX_CELLS:
            return None
        per_thread = np.zeros((len(threads), len(ends)), dtype=np.int64)
        if len(threads) <= _MASKED_THREADS:  # each thread's calls by a mask: no sort
            for j in range(len(threads)):
                mine = starts[(of_code == j)[codes]]
                per_thread[j] = starts_before(mine, ends)
        else:
            at = of_code[codes]
            order = np.lexsort((starts, at))
            bounds = np.searchsorted(at[order], np.arange(len(threads) + 1))
            s = starts[order]
            for j, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
                per_thread[j] = np.searchsorted(s[a:b], ends, "left")
    return EventCounts(other, threads, per_thread)


#: Up to this many host threads, each one's calls are picked by a mask, not sorted apart.
_MASKED_THREADS = 64


def _thread_index(calls: pd.DataFrame,
                  hit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct thread ids (ascending) of the ``hit`` calls, each hit call's code and
    each code's position among those ids (a call's thread: ``threads[of_code[codes]]``).
    Through a categorical ``global_tid``'s categories when it is one (small codes, no int64
    thread id per call; :func:`_tid_categories`), as :func:`_busiest_rows` reads them."""
    cats = _tid_categories(calls)
    if cats is not None:
        cat_tid, codes = cats[0], cats[1][hit]
        if not len(codes) or codes.min() >= 0:
            used = np.zeros(len(cat_tid), dtype=bool)
            used[codes] = True
            threads, inv = np.unique(cat_tid[used], return_inverse=True)
            of_code = np.zeros(len(cat_tid), dtype=np.int64)
            of_code[used] = inv
            return threads, codes, of_code
    tid = column(calls, "tid", hit).astype(np.int64, copy=False)
    threads, inv = np.unique(tid, return_inverse=True)
    return threads, inv, np.arange(len(threads))


@dataclass(frozen=True, eq=False)
class EventsApart:
    """The events a view's timeline can draw, kept apart from its analysis (RunView.timeline):
    a cut of the trace and of its GPU gaps, and the counts :func:`draw_window` reads."""

    trace: Any
    gaps: pd.DataFrame
    counts: EventCounts


#: The tables whose rows a cut keeps only where they overlap its span (the NVTX ranges,
#: few, stay whole: their lanes are laid out from every range a span overlaps).
_CUT_TABLES = ("kernels", "runtime", "memcpy", "memset", "sync", "graph_trace")


def timeline_apart(v: RunView, max_events: int = DEFAULT_MAX_EVENTS) -> RunView:
    """``v`` keeping of its analysis only what a report reads: its facts and steps
    (RunView.without_events) and the events its timeline can draw, those overlapping the
    leading window steps whose events other than API calls fit ``max_events`` (what any
    :func:`draw_window` of it beside another view draws is within those steps). A report of
    two big runs then holds one analysis at a time (``cgprof diff -o``: 10M kernels each,
    ~1.7 GB less) and draws the same page. ``v`` itself when its threads x steps table of
    call counts would be too big (:data:`_APART_MAX_CELLS`)."""
    counts = _count_apart(v)
    if counts is None:
        return v
    t0, ends = _window_ends(v, len(v.steps))
    t1 = int(ends[max(int(np.searchsorted(counts.other, max_events, "right")), 1) - 1])
    tr = v.events_trace
    cut = tr.cut(t0, t1, _CUT_TABLES)
    calls = cached_api_calls(tr)  # their launch family and capture flag as the whole trace's
    seed_api_calls(cut, calls[_overlapping(calls, t0, t1)])
    gaps = v.events_gaps
    apart = EventsApart(cut, gaps[_overlapping(gaps, t0, t1)], counts)
    return dataclasses.replace(v.without_events(), timeline=apart)


def timeline_cut(v: RunView, cut: TimelineCut) -> RunView | None:
    """:func:`timeline_apart` of a view of a chunked analysis, which keeps no trace: the
    events its timeline can draw and their counts, as the analysis gathered them for the
    view's window (``cut``: cgprof.metrics.chunked.analyze_path's ``timelines``). None where
    the window's threads x steps were too many to count its calls apart (the page then
    needs the whole analysis, as :func:`timeline_apart` keeps the view whole)."""
    if cut.trace is None:
        return None
    if not np.array_equal(cut.ends, _window_ends(v, len(v.steps))[1]):
        raise AssertionError("cgprof: a timeline gathered for another window of steps")
    calls = api_calls(cut.trace, derived=False)
    # stream capture as the whole trace's calls mark it (a capture begun before the cut)
    calls["in_capture"] = np.isin(calls["corr_id"].to_numpy(), cut.capture)
    seed_api_calls(cut.trace, calls)
    apart = EventsApart(cut.trace, cut.gaps, EventCounts(cut.other, cut.threads,
                                                         cut.per_thread))
    return dataclasses.replace(v.without_events(), timeline=apart)


def chunked_timeline(result: Any, v: RunView) -> RunView:
    """:func:`timeline_cut` of the view ``v`` of a chunked analysis ``result`` (no trace),
    with the cut it gathered for ``v``'s window (its ``windows``: cgprof.diff.window_totals)."""
    cut = window_totals(result, v.label, v.steps["step"].to_numpy(np.int64)).timeline
    got = timeline_cut(v, cut) if cut is not None else None
    if got is None:
        raise AssertionError("cgprof: a chunked view without its timeline")
    return got


def leading_outliers(v: RunView) -> int:
    """Leading window steps that took more than OUTLIER_FACTOR x the median (warm-up)."""
    eff = v.steps["effective_ns"].to_numpy(np.float64)
    med = float(np.median(eff)) if len(eff) else 0.0
    k = 0
    while k < len(eff) - 1 and med > 0 and eff[k] > OUTLIER_FACTOR * med:
        k += 1
    return k


def initial_step(views: list[RunView] | tuple[RunView, ...], w: DrawWindow) -> int:
    """The window position the timelines open at: past leading warm-up outliers."""
    return min(max(leading_outliers(v) for v in views), w.stop - 1) if w.stop > w.first else 0


def step_marks(v: RunView, w: DrawWindow) -> list[dict[str, float | int]]:
    """Per drawn step: i, step, x0 (start), x1 (extent end), in timeline microseconds."""
    st = v.steps.iloc[w.first:w.stop]
    x0 = _us(st["start_ns"].to_numpy(np.int64) - v.start_ns)
    x1 = _us(st["extent_end_ns"].to_numpy(np.int64) - v.start_ns)
    return [{"i": int(i), "step": int(s), "x0": float(a), "x1": float(b)}
            for i, s, a, b in zip(st["i"], st["step"], x0, x1, strict=True)]


def timeline(
    v: RunView,
    window: DrawWindow | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
    x_width_us: float | None = None,
    color: str | None = None,
    start_pos: int | None = None,
) -> go.Figure:
    """Host API calls, NVTX ranges, each GPU stream's work and the GPU's idle gaps over time.

    x: microseconds since the host start of the window's first step. ``window`` chooses the
    drawn steps (default: :func:`draw_window` on this run alone). The initial view starts at
    window position ``start_pos`` (default: the first drawn step) and is ``x_width_us`` wide
    (default: to the end of the drawn steps).
    """
    w = window if window is not None else draw_window([v], max_events)
    st = v.steps.iloc[w.first:w.stop]
    t0 = int(st["start_ns"].iloc[0])
    t1 = int(st["extent_end_ns"].max())
    ev = _events(v, t0, t1)
    ev = ev[ev["row"] != ""]  # NVTX nested deeper than MAX_NVTX_LANES
    if len(ev) > w.max_events:
        ev = ev.iloc[: w.max_events]
    rows = _row_order(ev["row"].tolist())
    fig = go.Figure()
    for cat, colour in EVENT_COLORS.items():
        e = ev[ev["cat"] == cat]
        if e.empty:
            continue
        start = _us(e["start_ns"].to_numpy(np.int64) - v.start_ns)
        dur = _us(e["end_ns"].to_numpy(np.int64) - e["start_ns"].to_numpy(np.int64))
        hover = np.array([f"{_short(n)}<br>{esc(d)}" if d else _short(n)
                          for n, d in zip(e["name"], e["detail"], strict=True)], dtype=object)
        bar: dict[str, Any] = dict(
            name=cat, orientation="h", y=e["row"].to_numpy(dtype=object), x=dur, base=start,
            marker=dict(color=colour, line=dict(width=0)),
            width=0.9 if cat in ("idle gap", "step") else 0.7, hovertext=hover,
            hovertemplate=("%{hovertext}<br>start %{base:.3f} us, duration %{x:.3f} us"
                           "<extra>" + esc(cat) + "</extra>"),
        )
        if cat == "step":
            steps = v.steps.set_index("start_ns")["step"]
            bar["text"] = np.array([str(x) for x in steps.reindex(
                e["start_ns"].to_numpy()).tolist()], dtype=object)
            bar["textposition"] = "inside"
            bar["insidetextanchor"] = "start"
            bar["textangle"] = 0
            bar["showlegend"] = False
        fig.add_trace(go.Bar(**bar))
    first = w.first if start_pos is None else min(max(start_pos, w.first), w.stop - 1)
    x0 = float(_us(int(v.steps["start_ns"].iloc[first]) - v.start_ns))
    width = x_width_us if x_width_us is not None else float(_us(t1 - t0)) or 1.0
    pad = width * 0.01
    title = (f"<b>{esc(v.label)}</b>: {esc(v.path)} \u2014 {esc(v.describe())}")
    lay = _base_layout(title, height=110 + 24 * max(len(rows), 1))
    # Room for a legend that wraps onto a second line under the title.
    lay["margin"] = dict(l=190, r=20, t=70 if len(fig.data) <= 7 else 92, b=45)
    lay["legend"] = dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0,
                         font=dict(size=11))
    fig.update_layout(
        **lay, barmode="overlay", bargap=0.1, uniformtext=dict(minsize=8, mode="hide"),
        hovermode="closest", dragmode="zoom",
        xaxis=dict(title=dict(text="us since the start of this run's first window step"),
                   range=[x0 - pad, x0 + width + pad], zeroline=False, showspikes=False),
        yaxis=dict(categoryorder="array", categoryarray=rows, autorange="reversed",
                   fixedrange=True, automargin=True, tickfont=dict(size=11)),
    )
    if color:
        fig.update_layout(title_font_color=color)
    return fig


# ---------------------------------------------------------------------------------------
# charts over the whole window


def step_times(views: list[RunView] | tuple[RunView, ...]) -> go.Figure:
    """Effective step time per window position, one line per run (us)."""
    fig = go.Figure()
    for n, v in enumerate(views):
        st = v.steps
        hover = np.array([
            f"{esc(v.label)} step {s} ({esc(m)})<br>launch calls {lc}, kernels "
            f"{'-' if pd.isna(k) else int(k)}<br>GPU busy {b / 1000:.1f} us, idle "
            f"{'-' if pd.isna(ip) else f'{ip:.1f}'}%"
            for s, m, lc, k, b, ip in zip(st["step"], st["mode"], st["launch_calls"],
                                          st["kernels"], st["gpu_busy_ns"], st["idle_pct"],
                                          strict=True)], dtype=object)
        fig.add_trace(go.Scatter(
            name=esc(v.label), x=st["i"].to_numpy(np.int64), y=_us(st["effective_ns"]),
            mode="lines+markers" if len(st) <= MAX_MARKERS else "lines",
            line=dict(color=RUN_COLORS[n % 2], width=2), marker=dict(size=5), hovertext=hover,
            hovertemplate="%{hovertext}<br>step time %{y:.1f} us<extra></extra>",
        ))
    fig.update_layout(**_base_layout(
        "Step time per step (effective: the longer of host range and GPU span)", 340))
    outliers = any(leading_outliers(v) for v in views)
    fig.update_layout(hovermode="x unified",
                      xaxis=dict(title=dict(text="step position in window"), rangemode="tozero"),
                      yaxis=dict(title=dict(text="us (log scale)" if outliers else "us"),
                                 type="log" if outliers else "linear",
                                 rangemode="normal" if outliers else "tozero"))
    return fig


def gap_histogram(views: list[RunView] | tuple[RunView, ...]) -> go.Figure:
    """GPU idle-gap lengths of each run's window on one log-scale microsecond axis."""
    fig = go.Figure()
    for n, v in enumerate(views):
        h = v.gap_hist
        x = h["bin_lo_us"].tolist() + [float(h["bin_hi_us"].iloc[-1])]
        y = h["count"].tolist() + [int(h["count"].iloc[-1])]
        custom = [f"{lo:.3g}-{hi:.3g} us" for lo, hi in zip(h["bin_lo_us"], h["bin_hi_us"],
                                                              strict=True)]
        custom.append(custom[-1])
        fig.add_trace(go.Scatter(
            name=esc(v.label), x=x, y=y, mode="lines", line=dict(shape="hv", width=2,
                                                                 color=RUN_COLORS[n % 2]),
            fill="tozeroy", opacity=0.6, customdata=custom,
            hovertemplate=esc(v.label) + ": %{y} gaps of %{customdata}<extra></extra>",
        ))
    fig.update_layout(**_base_layout("GPU idle gaps by length (window edges excluded)", 340))
    fig.update_layout(xaxis=dict(type="log", title=dict(text="gap length, us (log scale)")),
                      yaxis=dict(title=dict(text="gaps"), rangemode="tozero"))
    return fig


def launch_families(views: list[RunView] | tuple[RunView, ...]) -> go.Figure:
    """CUDA API calls per step by launch family, the runs side by side."""
    fams = [f for f in ("kernel_launch", "graph_launch", "memcpy", "memset", "sync",
                        "graph_setup", "other")
            if any(f in set(v.families["family"]) for v in views)]
    fig = go.Figure()
    for n, v in enumerate(views):
        per = dict(zip(v.families["family"], v.families["calls_per_step"], strict=True))
        y = [round(float(per.get(f, 0.0)), 2) for f in fams]
        fig.add_trace(go.Bar(
            name=esc(v.label), x=fams, y=y, marker=dict(color=RUN_COLORS[n % 2]),
            text=[f"{val:g}" for val in y], textposition="outside",
            hovertemplate=esc(v.label) + " %{x}: %{y} calls per step<extra></extra>",
        ))
    fig.update_layout(**_base_layout("CUDA API calls per step by family", 340))
    fig.update_layout(barmode="group", xaxis=dict(title=dict(text="launch family")),
                      yaxis=dict(title=dict(text="calls per step"), rangemode="tozero"))
    return fig


def replay_compactness(views: list[RunView] | tuple[RunView, ...]) -> go.Figure:
    """Per graph replay: GPU busy / replay span, in replay order, one line per run."""
    fig = go.Figure()
    notes = []
    for n, v in enumerate(views):
        r = v.replays
        comp = r["compactness"].astype("Float64") if len(r) else pd.Series([], dtype="Float64")
        known = r[comp.notna().to_numpy(dtype=bool)] if len(r) else r
        if len(r) == 0:
            notes.append(f"{esc(v.label)}: no graph replays in its window")
            continue
        if known.empty:
            notes.append(f"{esc(v.label)}: {len(r)} replays, inside not visible "
                         f"(graph-granularity trace; record with --cuda-graph-trace=node)")
            continue
        custom = [[int(s), round(sp / 1000, 3), "-" if pd.isna(nd) else int(nd)]
                  for s, sp, nd in zip(known["step"], known["span_ns"], known["nodes"],
                                       strict=True)]
        fig.add_trace(go.Scatter(
            name=esc(v.label), x=list(range(len(known))),
            y=[round(float(c), 4) for c in known["compactness"]], mode="lines+markers",
            line=dict(color=RUN_COLORS[n % 2], width=2), marker=dict(size=5),
            customdata=custom,
            hovertemplate=(esc(v.label) + " replay %{x} (step %{customdata[0]})<br>compactness "
                           "%{y:.3f}, span %{customdata[1]:.1f} us, %{customdata[2]} nodes"
                           "<extra></extra>"),
        ))
    fig.update_layout(**_base_layout(
        "Graph replay compactness (GPU busy / replay span; 1 = no gaps inside)", 340))
    fig.update_layout(xaxis=dict(title=dict(text="replay (in window order)"),
                                 rangemode="tozero"),
                      yaxis=dict(title=dict(text="compactness"), range=[0, 1.05]))
    for k, text in enumerate(notes):
        fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=0.5 - 0.12 * k,
                           showarrow=False, font=dict(size=13, color="#555"))
    return fig


# ---------------------------------------------------------------------------------------
# the figure sets of the two reports (fixed ids: the HTML page refers to them)


TIMELINE_IDS = ("cgprof-timeline-0", "cgprof-timeline-1")


def _figure_set(
    views: tuple[RunView, ...],
    max_events: int,
    chart_views: tuple[RunView, ...] | None = None,
) -> tuple[dict[str, go.Figure], DrawWindow]:
    """Timelines of ``views`` (aligned), charts of ``chart_views`` (default: the same)."""
    charts = chart_views or views
    w = draw_window(views, max_events)
    k = initial_step(views, w)
    # Same width (same us per pixel) in every run: wide enough for INITIAL_STEPS steps from
    # window position k in the slower run.
    last = min(k + INITIAL_STEPS, w.stop)
    width = max(float(_us(int(v.steps["extent_end_ns"].iloc[k:last].max())
                          - int(v.steps["start_ns"].iloc[k]))) for v in views)
    figs: dict[str, go.Figure] = {}
    for n, v in enumerate(views):
        figs[TIMELINE_IDS[n]] = timeline(v, w, max_events, x_width_us=width,
                                         color=RUN_COLORS[n % 2] if len(views) > 1 else None,
                                         start_pos=k)
    figs["cgprof-steps"] = step_times(views)
    figs["cgprof-gaps"] = gap_histogram(charts)
    figs["cgprof-families"] = launch_families(charts)
    figs["cgprof-compactness"] = replay_compactness(charts)
    return figs, w


def diff_figures(d: DiffResult, max_events: int = DEFAULT_MAX_EVENTS) -> dict[str, go.Figure]:
    """The figures of ``cgprof diff``'s report, by div id."""
    return _figure_set(d.views, max_events)[0]


def single_figures(
    v: RunView,
    max_events: int = DEFAULT_MAX_EVENTS,
    parts: tuple[RunView, ...] | None = None,
) -> dict[str, go.Figure]:
    """The figures of ``cgprof analyze --html``'s report, by div id.

    ``parts``: views to compare in the gap, launch-family and compactness charts (the report
    passes the eager and the graphed steps of a trace that holds both); default ``v``."""
    return _figure_set((v,), max_events, parts)[0]
