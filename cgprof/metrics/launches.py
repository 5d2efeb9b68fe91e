"""Host-side CUDA API calls grouped into launch families.

A *family* is what a performance engineer counts: eager kernel launches vs graph launches,
copies, memsets, synchronisations, graph setup (capture/instantiate) and everything else.
Calls made while a stream was being captured (between ``cudaStreamBeginCapture`` and
``cudaStreamEndCapture`` on the same thread) are real CPU calls that launch nothing on the GPU;
they are flagged ``in_capture`` and counted apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cgprof.io.trace import Trace, api_rows, column, map_categories

KERNEL_LAUNCH = "kernel_launch"
GRAPH_LAUNCH = "graph_launch"
MEMCPY = "memcpy"
MEMSET = "memset"
SYNC = "sync"
GRAPH_SETUP = "graph_setup"
OTHER = "other"
FAMILIES = (KERNEL_LAUNCH, GRAPH_LAUNCH, MEMCPY, MEMSET, SYNC, GRAPH_SETUP, OTHER)

_RULES: list[tuple[str, re.Pattern[str]]] = [
    (GRAPH_LAUNCH, re.compile(r"^(cudaGraphLaunch|cuGraphLaunch)")),
    # cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel(MultiDevice),
    # cuLaunchKernel(Ex), cuLaunchCooperativeKernel, cuLaunchGrid*; not cudaLaunchHostFunc.
    (KERNEL_LAUNCH, re.compile(
        r"^(cudaLaunchKernel|cudaLaunchCooperativeKernel|cuLaunchKernel|cuLaunchCooperativeKernel"
        r"|cuLaunchGrid|cudaLaunch$|cudaLaunch_ptsz)")),
    (GRAPH_SETUP, re.compile(
        r"^(cudaStreamBeginCapture|cudaStreamEndCapture|cuStreamBeginCapture|cuStreamEndCapture"
        r"|cudaGraphInstantiate|cuGraphInstantiate|cudaGraphUpload|cuGraphUpload"
        r"|cudaGraphExecUpdate|cuGraphExecUpdate|cudaGraphExecDestroy|cuGraphExecDestroy"
        r"|cudaGraphDestroy|cuGraphDestroy)")),
    (MEMCPY, re.compile(r"^(cudaMemcpy|cuMemcpy)")),
    (MEMSET, re.compile(r"^(cudaMemset|cuMemset|cuMemsetD)")),
    (SYNC, re.compile(r"Synchronize")),
]


def family_of(name: str) -> str:
    """Launch family of a CUDA API name (version suffix already stripped or not)."""
    for family, pattern in _RULES:
        if pattern.search(name):
            return family
    return OTHER


def api_calls(trace: Trace, derived: bool = True) -> pd.DataFrame:
    """Real API calls (eventClass runtime/driver) with ``family`` and ``in_capture`` added.

    Columns: start_ns end_ns dur_ns pid tid global_tid corr_id name_raw name nsys_name
    family in_capture (bool). Sorted by start_ns. ``derived=False``: without the columns a
    loaded trace derives on demand (``tid``, ``dur_ns``: cgprof.io.trace.DERIVED; read them
    with :func:`cgprof.io.trace.column`), as ``analyze`` reads them: 10M calls, 160 MB less.
    """
    # a filtered frame already: no second full copy
    calls = trace.api_calls if derived else api_rows(trace.stored("runtime"))
    if calls.empty:
        return calls.assign(family=pd.Series(dtype="object"), in_capture=pd.Series(dtype="bool"))
    return calls.assign(family=_families(calls["name"]), in_capture=_in_capture(calls))


def _families(names: pd.Series) -> pd.Series:
    """``names.map(family_of per category).astype("category")``, through the codes."""
    return map_categories(names, family_of)


def name_contains(names: pd.Series, text: str) -> np.ndarray:
    """``names.str.contains(text)`` for a categorical column, computed once per category."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return names.astype(str).str.contains(text, regex=False).to_numpy(dtype=bool)
    per_cat = np.asarray([text in str(c) for c in names.cat.categories] + [False], dtype=bool)
    return per_cat[names.cat.codes.to_numpy()]  # code -1 (missing) picks the final False


def _capture_marks(names: pd.Series) -> np.ndarray:
    """Per call: +1 for a StreamBeginCapture, -1 for a StreamEndCapture, else 0 (int8); one
    lookup per category, then one gather of the codes (for a categorical ``names``)."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return (name_contains(names, "StreamBeginCapture").astype(np.int8)
                - name_contains(names, "StreamEndCapture"))
    per_cat = [1 if "StreamBeginCapture" in str(c) else -1 if "StreamEndCapture" in str(c)
               else 0 for c in names.cat.categories]
    return np.asarray(per_cat + [0], dtype=np.int8)[names.cat.codes.to_numpy()]


#: Capture spans (begin to end on one thread) beyond which :func:`_in_capture` sweeps every
#: row of the capturing threads instead of marking each span.
_SPANS_MARKED = 1000


def _in_capture(calls: pd.DataFrame) -> np.ndarray:
    """True for calls on a thread between its BeginCapture and EndCapture calls.

    Per thread in time order, a call's depth is the begins minus the ends before it, and
    it is inside a capture when that is positive (the begin and end calls themselves are
    not). The depth changes only at those few calls: in a table in start order (Trace
    tables are), a thread's time order is its row order, so each stretch of rows between
    two of a thread's begin/end calls where the depth is positive is marked in place, on
    that thread's rows only; the millions of calls outside a capture are never looked at.
    A table out of start order, or a trace of very many captures, takes the sweep over
    every row of the capturing threads (:func:`_in_capture_sweep`)."""
    names = calls["name"]
    if isinstance(names.dtype, pd.CategoricalDtype) and not any(
            "StreamBeginCapture" in str(c) for c in names.cat.categories):
        return np.zeros(len(calls), dtype=bool)  # no capture begins: no row to look at
    marks = _capture_marks(names)
    out = np.zeros(len(calls), dtype=bool)
    events = np.flatnonzero(marks)
    if not (marks[events] > 0).any():
        return out
    start = calls["start_ns"].to_numpy()
    tids = calls["global_tid"].to_numpy()
    ev_tid = tids[events]
    capturing = np.unique(ev_tid[marks[events] > 0])
    spans: list[tuple[Any, Any, Any]] = []  # (lo, hi, tid): numpy ints
    for tid in capturing:
        mine = events[ev_tid == tid]
        depth = np.cumsum(marks[mine].astype(np.int64))
        inside = depth > 0
        spans += zip(mine[inside] + 1, np.append(mine[1:], len(calls))[inside],
                     [tid] * int(inside.sum()), strict=True)
    if len(spans) > _SPANS_MARKED or not (start[1:] >= start[:-1]).all():
        return _in_capture_sweep(calls, marks > 0, marks < 0)
    for lo, hi, tid in spans:
        out[lo:hi] |= tids[lo:hi] == tid
    return out


def _in_capture_sweep(calls: pd.DataFrame, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`_in_capture` over every row of the capturing threads: per thread in time
    order, depth = begins so far - ends before this call; on a call that is neither, that is
    the running sum of (begin - end). Only the threads that began a capture are looked at
    (one or two of a trace's threads), in one stable sort by a small thread number: rows in
    start order keep each thread's calls in time order, ties in frame order, as
    ``lexsort((start, tid))`` would; other rows take that lexsort."""
    out = np.zeros(len(calls), dtype=bool)
    if not begin.any():
        return out
    tids = calls["global_tid"].to_numpy()
    capturing = np.unique(tids[begin])
    if len(capturing) <= 8:  # np.isin sorts; a few compares are cheaper
        mine = tids == capturing[0]
        for tid in capturing[1:]:
            mine |= tids == tid
        rows = np.flatnonzero(mine)
    else:
        rows = np.flatnonzero(np.isin(tids, capturing))
    thread = np.searchsorted(capturing, tids[rows]) if len(capturing) > 1 else np.zeros(
        len(rows), dtype=np.intp)
    start = calls["start_ns"].to_numpy()[rows]
    if not (start[1:] >= start[:-1]).all():
        order = np.lexsort((start, thread))
    elif len(capturing) > 1:
        order = np.argsort(thread.astype(np.min_scalar_type(len(capturing))), kind="stable")
    else:
        order = None  # one thread, in time order already
    if order is not None:
        rows, thread = rows[order], thread[order]
    b, e = begin[rows], end[rows]
    depth = np.cumsum(b.astype(np.int64) - e)
    counts = np.bincount(thread, minlength=len(capturing))  # rows per thread, in order
    depth -= np.repeat(np.concatenate(([0], depth[np.cumsum(counts)[:-1] - 1])), counts)
    out[rows] = (depth > 0) & ~b & ~e
    return out


_SUMMARY_COLUMNS = ["family", "calls", "captured_calls", "host_ns", "avg_ns", "names"]


@dataclass
class LaunchCells:
    """What :func:`launch_summary` counts, before the table: one entry per (family, name,
    captured) cell that holds a counted call, with its call count and exact int64 host time.
    The partial of a chunk of calls (docs/chunked.md): cells of several chunks are merged by
    :func:`launch_table`, as counts and int64 sums add exactly. Family and name are strings,
    not codes: a chunk's categories need not be another's.

    family, name  str (object arrays); a call without a name is named ``str(value)``
                  ("nan"), as the table's ``names`` writes it
    captured      bool: recorded during stream capture
    calls         int64, > 0
    host_ns       int64: the cell's summed ``dur_ns``
    """

    family: np.ndarray
    name: np.ndarray
    captured: np.ndarray
    calls: np.ndarray
    host_ns: np.ndarray


def launch_summary(calls: pd.DataFrame, selected: np.ndarray | None = None) -> pd.DataFrame:
    """Calls and host time per family.

    Columns: family, calls (outside stream capture), captured_calls (recorded during stream
    capture: they launch nothing), host_ns (host time of the uncaptured calls), avg_ns,
    names (the distinct suffix-stripped API names in the family, sorted, ';'-joined).
    ``selected``: a bool per call, the calls to count (e.g. the window steps'); None: all.

    The table of the calls' cells (:func:`launch_cells`, :func:`launch_table`): a chunked
    analysis merges the cells of its chunks the same way.
    """
    return launch_table([launch_cells(calls, selected)])


def launch_cells(calls: pd.DataFrame, selected: np.ndarray | None = None) -> LaunchCells:
    """The (family, name, captured) cells of the calls (``selected``: a bool per call, the
    calls to count; None: all), for :func:`launch_table`.

    Over the family and name codes, with no filtered frame (nor row gather) per family: one
    code per call, ``(family * names + name) * 2 + captured`` (the last code: not counted),
    gives the counts and the exact host sums in one pass each.
    """
    from cgprof.metrics.intervals import sums_by_code
    from cgprof.metrics.summaries import category_codes

    fam, fam_of = category_codes(calls["family"])
    names = calls["name"]
    name, name_of = category_codes(names)
    counted = fam >= 0
    if selected is not None:
        counted &= selected
    if ((name < 0) & counted).any():
        # A call without a name: named as str() of the value pandas' unique() gives it (the
        # rule of the frame path, _launch_summary_frames), through a code per written name.
        name, name_of = category_codes(names.astype(object).map(str))
    k, width = len(fam_of), len(name_of)
    cap = calls["in_capture"].to_numpy(dtype=bool)
    n = 2 * k * width
    code = fam.astype(np.intp)  # built in place: one intp array
    code *= width
    code += name
    code *= 2
    code += cap
    code[~counted] = n  # not counted: the last code
    per_code = np.bincount(code, minlength=n + 1)[:n]
    host = sums_by_code(code, column(calls, "dur_ns").astype(np.int64, copy=False), n + 1)[:n]
    del code
    at = np.flatnonzero(per_code)  # the cells present
    fam_name = at // 2  # family * width + name (width > 0 wherever a cell is present)
    return LaunchCells(
        family=np.asarray([str(v) for v in fam_of[fam_name // max(width, 1)]], dtype=object),
        name=np.asarray([str(v) for v in name_of[fam_name % max(width, 1)]], dtype=object),
        captured=(at % 2).astype(bool), calls=per_code[at].astype(np.int64, copy=False),
        host_ns=host[at])


def launch_table(parts: list[LaunchCells]) -> pd.DataFrame:
    """:func:`launch_summary`'s table of the cells of one or more parts (the chunks of a
    chunked analysis, in any order): per family in FAMILIES order, the int64 sums of the
    cells' counts and host times, and the sorted union of their names."""
    family = np.concatenate([p.family for p in parts]) if parts else np.empty(0, object)
    name = np.concatenate([p.name for p in parts]) if parts else np.empty(0, object)
    captured = np.concatenate([p.captured for p in parts]) if parts else np.empty(0, bool)
    count = np.concatenate([p.calls for p in parts]) if parts else np.empty(0, np.int64)
    host = np.concatenate([p.host_ns for p in parts]) if parts else np.empty(0, np.int64)
    out = []
    for fam in FAMILIES:
        mine = family == fam
        if not mine.any():
            continue
        live = mine & ~captured
        n_live = int(count[live].sum())
        h = int(host[live].sum())
        out.append({
            "family": fam,
            "calls": n_live,
            "captured_calls": int(count[mine & captured].sum()),
            "host_ns": h,
            "avg_ns": float(h / n_live) if n_live else None,
            "names": ";".join(sorted(set(name[mine]))),
        })
    return pd.DataFrame(out, columns=_SUMMARY_COLUMNS)


def _launch_summary_frames(calls: pd.DataFrame) -> pd.DataFrame:
    """:func:`launch_summary` by filtering the frame per family: the reference the tests
    hold the cells to (a call without a name included)."""
    out = []
    for family in FAMILIES:
        fam = calls[calls["family"] == family]
        live = fam[~fam["in_capture"]]
        if fam.empty:
            continue
        host = int(column(live, "dur_ns").sum())
        out.append({
            "family": family,
            "calls": int(len(live)),
            "captured_calls": int(len(fam) - len(live)),
            "host_ns": host,
            "avg_ns": float(host / len(live)) if len(live) else None,
            "names": ";".join(sorted({str(n) for n in fam["name"].unique()})),
        })
    return pd.DataFrame(out, columns=_SUMMARY_COLUMNS)
