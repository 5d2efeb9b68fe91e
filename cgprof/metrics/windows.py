"""What a view of a window of steps (cgprof.diff.view) reads of an analysis's rows, as
totals: its kernels per name, its API calls per launch family, the replays its steps
launched and the histogram of its gaps. A whole analysis keeps its rows and the view sums
them (cgprof.diff); a chunked one (cgprof.metrics.chunked) keeps no rows, so it gathers
these totals as it reads its chunks, for the windows asked of it before its last passes
(:class:`WindowTotals`): ``cgprof diff`` of a trace over the memory cap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cgprof.metrics.intervals import counts_by_code, starts_before, sums_by_code
from cgprof.metrics.launches import FAMILIES

__all__ = ["WindowTotals", "TimelineCut", "TIMELINE_MAX_CELLS", "EventCounter", "name_totals",
           "timelines_gathered", "merge_name_totals", "family_codes", "StepFamilies", "extent_ends"]


@dataclass(frozen=True)
class WindowTotals:
    """One window of steps' totals, made by a chunked analysis (cgprof.metrics.chunked).

    steps      the window's step numbers (rows of the step table), in window order
    kernels    name, instances, total_ns of the kernels launched by the window's steps whose
               kernels are in the trace (a step whose replays hide them is left out), by name
    families   (family, calls, host_ns) of the calls of the window's steps (stream-capture
               calls left out), one per launch family present, in FAMILIES' order
    replays    the rows of the analysis's replays launched by the window's steps, in replay
               order, with ``step``
    gap_hist   bin_lo_us, bin_hi_us, count, total_ns: the gaps whose start lies in a window
               step's extent (window edges left out), binned on GAP_BIN_EDGES_US
    """

    steps: np.ndarray
    kernels: pd.DataFrame
    families: list[tuple[str, int, int]]
    replays: pd.DataFrame
    gap_hist: pd.DataFrame
    #: what a timeline of the window draws, when asked (:class:`TimelineCut`); None: not
    timeline: TimelineCut | None = None


#: Host threads x window steps above which a timeline's API calls are not counted per
#: thread (cgprof.report.figures; a chunked analysis then gathers no timeline).
TIMELINE_MAX_CELLS = 20_000_000


def timelines_gathered(totals: tuple[WindowTotals, ...]) -> bool:
    """Whether a chunked analysis asked for timelines gathered each one its non-empty
    windows need (False: a window's calls were on too many threads to count apart, and the
    page needs the whole analysis)."""
    return all(t.timeline is not None and t.timeline.trace is not None
               for t in totals if len(t.steps))


@dataclass(frozen=True)
class TimelineCut:
    """What a timeline of a window of steps draws, gathered by a chunked analysis for a
    report's page (cgprof.report.figures.timeline_apart makes the same of a whole one):
    the window's events counted per step and the trace cut to the span the timeline can
    draw.

    t0, ends    the window's first host start and its steps' extent ends (running max)
    other       per window step: the events that overlap ``[t0, ends[-1])`` and start
                before the step's end, of every kind but the API calls (steps, NVTX ranges,
                GPU work, gaps)
    threads     the host threads of the API calls that overlap the window (ascending)
    per_thread  (threads, steps): each thread's calls counted as ``other``
    t1          the end of the cut: the last leading step's end whose ``other`` fits the cap
    trace       a cgprof.io.trace.Trace of the rows that overlap ``[t0, t1)`` (its NVTX ranges
                whole), None: the window's threads x steps were too many to count apart
    capture     the correlation ids of the trace's calls made during stream capture (as the
                whole trace's calls mark them)
    gaps        the listed GPU gaps that overlap ``[t0, t1)`` (device_id, start_ns, end_ns,
                gap_ns, kind, next_api), in the gap table's order
    """

    t0: int
    ends: np.ndarray
    other: np.ndarray
    threads: np.ndarray
    per_thread: np.ndarray
    t1: int
    trace: Any
    capture: np.ndarray
    gaps: pd.DataFrame


class EventCounter:
    """:class:`TimelineCut`'s counts of a window, taken a batch of rows at a time: each
    batch's rows that overlap ``[t0, ends[-1])``, counted per step by start (``other``),
    API calls per host thread."""

    def __init__(self, t0: int, ends: np.ndarray) -> None:
        self.t0, self.ends = int(t0), np.asarray(ends, dtype=np.int64)
        self.other = np.zeros(len(self.ends), dtype=np.int64)
        self.threads: dict[int, np.ndarray] = {}

    def hit(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Which rows overlap the window."""
        return (end > self.t0) & (start < self.ends[-1])

    def add(self, start: np.ndarray, end: np.ndarray) -> None:
        """Rows of an event table that is not API calls."""
        start = np.asarray(start, dtype=np.int64)
        hit = self.hit(start, np.asarray(end, dtype=np.int64))
        self.other += starts_before(start[hit], self.ends)

    def add_calls(self, start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> None:
        """API calls, with their host threads."""
        start = np.asarray(start, dtype=np.int64)
        rows = self.hit(start, np.asarray(end, dtype=np.int64))
        if not rows.any():
            return
        s, t = start[rows], np.asarray(tid, dtype=np.int64)[rows]
        for tid_ in np.unique(t).tolist():
            mine = starts_before(s[t == tid_], self.ends)
            have = self.threads.get(tid_)
            self.threads[tid_] = mine if have is None else have + mine

    def per_thread(self) -> tuple[np.ndarray, np.ndarray]:
        """(threads ascending, their counts: threads x steps)."""
        threads = np.array(sorted(self.threads), dtype=np.int64)
        table = (np.stack([self.threads[t] for t in threads.tolist()]) if len(threads)
                 else np.zeros((0, len(self.ends)), dtype=np.int64))
        return threads, table


def name_totals(names: pd.Series, dur: pd.Series, rows: np.ndarray) -> pd.DataFrame:
    """name, instances, total_ns per name of the rows marked (``rows``: a bool mask), by
    name. Categorical names are summed through their codes: no frame of the rows (10M
    kernels: a GB, seconds); a row without a name is in no group."""
    if not rows.any():
        return _no_names()
    if isinstance(names.dtype, pd.CategoricalDtype) and dur.dtype == np.int64:
        codes = names.cat.codes.to_numpy()[rows]
        values = dur.to_numpy()[rows]
        known = codes >= 0
        if not known.all():
            codes, values = codes[known], values[known]
        n = len(names.cat.categories)
        count = counts_by_code(codes, n)
        used = np.flatnonzero(count)
        kt = pd.DataFrame({"name": names.cat.categories[used],
                           "instances": count[used].astype(np.int64),
                           "total_ns": sums_by_code(codes, values, n)[used]})
    else:
        g = pd.DataFrame({"name": names[rows], "dur_ns": dur[rows]}).groupby(
            "name", sort=False, observed=True)["dur_ns"]
        kt = g.agg(["size", "sum"]).reset_index()
        kt.columns = ["name", "instances", "total_ns"]
    return merge_name_totals([kt])


def _no_names() -> pd.DataFrame:
    """:func:`name_totals` of no rows."""
    return pd.DataFrame({"name": pd.Series(dtype=object), "instances": pd.Series(dtype="int64"),
                         "total_ns": pd.Series(dtype="int64")})


def merge_name_totals(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """:func:`name_totals`' tables (of chunks, or with a name more than once: categories may
    repeat) summed per name, by name (none: the empty table)."""
    if not parts:
        return _no_names()
    kt = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].copy()
    kt["name"] = kt["name"].astype(str)
    kt = kt.groupby("name", sort=True, as_index=False)[["instances", "total_ns"]].sum()
    return kt.astype({"instances": np.int64, "total_ns": np.int64})


def extent_ends(steps: pd.DataFrame) -> np.ndarray:
    """Each step's extent end (int64 ns): the later of its host end and its last GPU work
    (``gpu_end_ns``; <NA>: none), for rows of a step table (cgprof.metrics.steps)."""
    gpu_end = steps["gpu_end_ns"].astype("Float64").fillna(0).to_numpy(np.float64).astype(
        np.int64)
    return np.maximum(steps["end_ns"].to_numpy(np.int64), gpu_end)


def family_codes(family: pd.Series) -> np.ndarray:
    """Each call's launch family as its position in FAMILIES (-1: none of them)."""
    if isinstance(family.dtype, pd.CategoricalDtype):
        lut = np.array([FAMILIES.index(str(c)) if str(c) in FAMILIES else -1
                        for c in family.cat.categories] + [-1], dtype=np.int64)
        return lut[family.cat.codes.to_numpy()]
    where = {f: i for i, f in enumerate(FAMILIES)}
    return np.array([where.get(str(f), -1) for f in family.to_numpy()], dtype=np.int64)


class StepFamilies:
    """Calls and host time per (step, launch family) of a trace's calls, taken in a chunk
    of calls at a time (:meth:`add`): 16 bytes per step and family, not a row per call."""

    def __init__(self, n_steps: int) -> None:
        self.calls = np.zeros((n_steps, len(FAMILIES)), dtype=np.int64)
        self.host_ns = np.zeros((n_steps, len(FAMILIES)), dtype=np.int64)

    def add(self, step: np.ndarray, family: np.ndarray, dur: np.ndarray, keep: np.ndarray,
            s0: int, s1: int) -> None:
        """Calls whose ``step`` (-1: none; otherwise in [s0, s1)) and ``family``
        (:func:`family_codes`) are known, among those ``keep`` marks; ``dur``: their host
        time (int64)."""
        keep = keep & (step >= 0) & (family >= 0)
        if not keep.any():
            return
        nf = len(FAMILIES)
        code = (step[keep] - s0) * nf + family[keep]
        n = (s1 - s0) * nf
        self.calls[s0:s1] += counts_by_code(code, n).reshape(s1 - s0, nf)
        self.host_ns[s0:s1] += sums_by_code(code, dur[keep].astype(np.int64), n).reshape(
            s1 - s0, nf)

    def of(self, steps: np.ndarray) -> list[tuple[str, int, int]]:
        """(family, calls, host_ns) of the calls of ``steps``, one per family present."""
        calls = self.calls[steps].sum(axis=0)
        host = self.host_ns[steps].sum(axis=0)
        return [(f, int(calls[i]), int(host[i])) for i, f in enumerate(FAMILIES) if calls[i]]
