"""Is the GPU side of a trace all there? Checked before any busy, idle, compactness or
coverage figure is trusted.

Under continuous replay CUPTI can drop records (its buffers overflow, the recording stops
before they are flushed), and an export may be cut down. A missing GPU record then reads as
an idle GPU ("GPU busy 0%") or a tight replay ("compactness 1.000"). What is checked:

- **graph launches without a GPU record**: graph-granularity traces
  (``--cuda-graph-trace=graph``): a live ``cudaGraphLaunch`` with no
  CUPTI_ACTIVITY_KIND_GRAPH_TRACE row of its (pid, correlationId); node-granularity traces: a
  launch with no replayed kernel or memset at all, or fewer than its graph's usual replay
  (the most common count over the replays of that graph, ties to the larger; not the
  capture-time node-creation rows, which count nodes that replays do not run). A graph is
  the set of replays whose graph node ids overlap (each instantiated graph's nodes have ids
  of their own); a trace whose export does not say how graphs were traced, and holds no
  replay rows, is not judged on its graph launches;
- **kernel launch calls whose kernels never appear**: a live ``cudaLaunchKernel`` (or driver
  ``cuLaunchKernel``, ...) with no kernel row of its (pid, correlationId); a trace with
  launch calls and no kernel table counts every launch. Launches made while a stream
  capture is open in their process launch nothing and are not counted: PyTorch's backward
  thread launches into a stream that the main thread captures, so a launch's own thread
  does not tell (:func:`open_capture`);
- **timestamps that cannot be**, in the kernel, copy, memset and graph-replay rows that a
  call of the trace launched: an end before the start, a start at or below zero, a start
  before the start of the call that launched it, or a row outside the recording
  (DIAGNOSTIC_EVENT's "Profiling has started." to "Profiling has stopped.", when the export
  has them);
- **what the export records as dropped**: DIAGNOSTIC_EVENT messages (nsys 2024.5 and later)
  of severity warning or error that say records were dropped, lost or discarded or a buffer
  was full (nsys does not document the messages: matched on their words).

Shape (docs/chunked.md): :func:`completeness_partial` of a chunk's calls and the GPU rows
they launched, :func:`merge_completeness` of the partials; a trace read whole is one chunk
(:func:`completeness`). Counts add; the node-level replays are kept as one row per replay
(pid, lowest and highest node id, nodes) so that each graph's usual replay is the mode over
all of its replays, whichever chunk they fell in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.io.trace import column
from cgprof.metrics import launches as L
from cgprof.metrics.coverage import family_mask

#: The GPU tables whose rows' times are checked, with the words the report uses.
TIME_TABLES = (S.KERNEL, S.MEMCPY, S.MEMSET, S.GRAPH_TRACE)
#: The kinds of impossible time counted per table (columns of ``impossible_times``).
TIME_KINDS = ("end_before_start", "start_not_positive", "before_launch", "outside_recording")
_KIND_WORDS = {"end_before_start": "end before they start",
               "start_not_positive": "start at or before time 0",
               "before_launch": "start before the call that launched them",
               "outside_recording": "lie outside the recording"}
_TABLE_WORDS = {S.KERNEL: "kernels", S.MEMCPY: "memory copies", S.MEMSET: "memsets",
                S.GRAPH_TRACE: "graph replays"}

#: What GPU figures an incomplete trace reports in their place.
UNAVAILABLE = "unavailable: not recorded"

#: DIAGNOSTIC_EVENT severities (ENUM_DIAGNOSTIC_SEVERITY_LEVEL): 2 Warning, 3 Error.
_WARNING = 2
#: Words of a DIAGNOSTIC_EVENT message that reports records the session did not keep.
_DROPPED = re.compile(
    r"\b(drop(ped|s|ping)?|lost|los(e|ing)|discard(ed|ing)?|overflow(ed|s)?|overrun)\b"
    r"|buffers? (is |are |was |were )?full|not (been )?(recorded|collected|saved)",
    re.IGNORECASE)
_STARTED = "Profiling has started"
_STOPPED = "Profiling has stopped"


@dataclass
class CompletenessPartial:
    """What :func:`merge_completeness` reads of one chunk of calls and the GPU rows they
    launched (or of a whole trace). Counts are ints; the arrays are int64.

    kernel_launches / kernel_launches_unrecorded
        live kernel launch calls, and those with no kernel row
    graph_launches / graph_launches_unrecorded
        live graph launch calls, and those with no GPU record at all (no GRAPH_TRACE row;
        node level: no replayed kernel or memset)
    unrecorded_pids, unrecorded_counts
        node level: the processes of the unrecorded graph launches and how many each
    replay_pid, replay_lo, replay_hi, replay_nodes
        node level: per recorded replay, its process, its lowest and highest graph node id
        and its kernels + memsets
    times
        table -> int64 counts in :data:`TIME_KINDS` order, then the rows checked
    """

    kernel_launches: int = 0
    kernel_launches_unrecorded: int = 0
    graph_launches: int = 0
    graph_launches_unrecorded: int = 0
    unrecorded_pids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unrecorded_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    replay_pid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    replay_lo: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    replay_hi: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    replay_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    times: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class CompletenessResult:
    """Whether the trace's GPU side is all there, and what is missing.

    complete        True when nothing below is missing or impossible
    missing         one line per finding, what and how much (the report's first lines)
    reason          None when complete, else why the GPU figures are unavailable (one line)
    kernel_launches, kernel_launches_unrecorded
                    live kernel launch calls; those whose kernels never appear
    graph_check     how graph launches were judged: "graph" (GRAPH_TRACE rows), "node"
                    (replayed kernels and memsets), or None (the export does not say)
    graph_launches, graph_launches_unrecorded
                    live graph launch calls; those with no GPU record at all
    replays_short   node level: recorded replays with fewer kernels + memsets than their
                    graph's usual replay
    replay_nodes_missing
                    node level: kernels + memsets those replays lack, plus the usual replay
                    of each unrecorded launch of a process with one graph (None when no
                    graph launch was judged at node level)
    graphs          node level, one row per graph: pid, node_id_lo, node_id_hi,
                    usual_nodes (the most common replay's kernels + memsets), replays,
                    short_replays
    impossible_times  one row per GPU table with rows checked: table, rows, and a count per
                    kind of :data:`TIME_KINDS`
    recording       (start_ns, stop_ns) of the recording from DIAGNOSTIC_EVENT, or None
    dropped         DIAGNOSTIC_EVENT messages that say records were dropped:
                    [{"timestamp_ns", "severity", "text"}]
    """

    complete: bool
    missing: list[str]
    reason: str | None
    kernel_launches: int
    kernel_launches_unrecorded: int
    graph_check: str | None
    graph_launches: int
    graph_launches_unrecorded: int
    replays_short: int
    replay_nodes_missing: int | None
    graphs: pd.DataFrame
    impossible_times: pd.DataFrame
    recording: tuple[int, int] | None
    dropped: list[dict[str, Any]]


def graph_check_mode(graph_trace_mode: str | None, mode_source: str,
                     graph_trace_rows: int) -> str | None:
    """How a trace's graph launches are judged: "graph" where replays are GRAPH_TRACE rows
    (the export says so, or it holds such rows), "node" where the export names node
    granularity or it was inferred from replayed kernels, None where nothing tells."""
    if graph_trace_rows or graph_trace_mode == "graph":
        return "graph" if mode_source != "unknown" or graph_trace_rows else None
    if graph_trace_mode == "node" and mode_source in ("metadata", "inferred"):
        return "node"
    return None


def recording_span(diagnostics: tuple[tuple[int, int, str], ...]) -> tuple[int, int] | None:
    """[first "Profiling has started.", last "Profiling has stopped."] from DIAGNOSTIC_EVENT,
    on the events' timeline; None without both."""
    starts = [t for t, _, text in diagnostics if text.startswith(_STARTED)]
    stops = [t for t, _, text in diagnostics if text.startswith(_STOPPED)]
    if not starts or not stops or max(stops) < min(starts):
        return None
    return min(starts), max(stops)


def dropped_messages(diagnostics: tuple[tuple[int, int, str], ...]) -> list[dict[str, Any]]:
    """DIAGNOSTIC_EVENT warnings and errors that say records were not kept."""
    return [{"timestamp_ns": int(t), "severity": int(sev), "text": text}
            for t, sev, text in diagnostics if sev >= _WARNING and _DROPPED.search(text)]


class _CallIndex:
    """The row of ``calls`` of each (pid, corr_id): a table by correlation id for the usual
    one-process trace with dense ids, else a sorted search over (pid, corr_id) keys."""

    def __init__(self, pid: np.ndarray, corr: np.ndarray) -> None:
        self.n = len(corr)
        self.table: np.ndarray | None = None
        self.one_pid: int | None = None
        if self.n and pid.min() == pid.max():
            lo, hi = int(corr.min()), int(corr.max())
            if lo >= 0 and hi - lo < 4 * self.n + (1 << 20):
                self.one_pid, self.lo = int(pid[0]), lo
                self.table = np.full(hi - lo + 1, -1, dtype=np.int64)
                self.table[corr - lo] = np.arange(self.n, dtype=np.int64)
                return
        keys = _keys(pid, corr)
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]

    def rows(self, pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """The call row of each (pid, corr_id), -1 where no call has it."""
        out = np.full(len(corr), -1, dtype=np.int64)
        if not self.n or not len(corr):
            return out
        if self.table is not None:
            at = corr - self.lo
            ok = (pid == self.one_pid) & (at >= 0) & (at < len(self.table))
            out[ok] = self.table[at[ok]]
            return out
        keys = _keys(pid, corr)
        i = np.searchsorted(self.keys, keys)
        i_ok = i < len(self.keys)
        hit = np.zeros(len(keys), dtype=bool)
        hit[i_ok] = self.keys[i[i_ok]] == keys[i_ok]
        out[hit] = self.order[i[hit]]
        return out


def _keys(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """(pid, corr_id) as one uint64: a pid holds 24 bits (cgprof.schema.ID_MASK), a
    correlation id fewer than 40 in every export seen."""
    return (pid.astype(np.uint64) << np.uint64(40)) | (corr.astype(np.uint64)
                                                       & np.uint64((1 << 40) - 1))


def _ints(df: pd.DataFrame, name: str) -> np.ndarray:
    return np.asarray(column(df, name), dtype=np.int64)


def _node_ids(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(in a replay, graph node id as int64) of each row of a kernel or memset frame; the
    column may be nullable Int64 or a categorical of its values (cgprof.io.trace.COMPACT)."""
    if "graph_node_id" not in df.columns or not len(df):
        return np.zeros(len(df), dtype=bool), np.zeros(len(df), dtype=np.int64)
    col = df["graph_node_id"]
    mask = col.notna().to_numpy(dtype=bool)
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        cats = col.cat.categories.to_numpy(np.int64)
        values = cats[np.maximum(codes, 0)] if len(cats) else np.zeros(len(col), np.int64)
    else:
        values = col.to_numpy(dtype=np.float64, na_value=0).astype(np.int64) if not isinstance(
            col.dtype, pd.Int64Dtype) else col.array._data.astype(np.int64, copy=False)
    return mask, values


def open_capture(calls: pd.DataFrame) -> np.ndarray:
    """True for each call made while a stream capture was open in its process, on any of
    its threads: after a StreamBeginCapture call started and before the matching
    StreamEndCapture call started (the begin and end calls themselves are not)."""
    out = np.zeros(len(calls), dtype=bool)
    if not len(calls):
        return out
    marks = L._capture_marks(calls["name"])
    if not (marks > 0).any():
        return out
    pid, start = _ints(calls, "pid"), _ints(calls, "start_ns")
    for p in np.unique(pid[marks != 0]):
        mine = pid == p
        begins = np.sort(start[mine & (marks > 0)])
        ends = np.sort(start[mine & (marks < 0)])
        s = start[mine]
        out[mine] = (np.searchsorted(begins, s, "left") - np.searchsorted(ends, s, "right")) > 0
    return out


def completeness_partial(calls: pd.DataFrame, kernels: pd.DataFrame, memcpy: pd.DataFrame,
                         memset: pd.DataFrame, graph_trace: pd.DataFrame,
                         graph_check: str | None, recording: tuple[int, int] | None,
                         captured: np.ndarray | None = None) -> CompletenessPartial:
    """The :class:`CompletenessPartial` of ``calls`` (:func:`cgprof.metrics.launches.api_calls`
    rows: a chunk's, or every call) and the GPU frames holding at least the rows those calls
    launched (rows of other calls are left out by their (pid, corr_id)). ``captured``: the
    calls' :func:`open_capture` (computed over every call of the trace by a caller that
    measures chunks; None: computed here)."""
    out = CompletenessPartial()
    if not len(calls):
        return out
    pid, corr = _ints(calls, "pid"), _ints(calls, "corr_id")
    index = _CallIndex(pid, corr)
    call_start = _ints(calls, "start_ns")

    def launched(df: pd.DataFrame) -> np.ndarray:
        return index.rows(_ints(df, "pid"), _ints(df, "corr_id")) if len(df) else np.zeros(
            0, np.int64)

    k_rows = launched(kernels)
    has_kernel = np.zeros(len(calls), dtype=bool)
    has_kernel[k_rows[k_rows >= 0]] = True
    k_launch = family_mask(calls, L.KERNEL_LAUNCH)
    k_launch &= ~(open_capture(calls) if captured is None else captured)
    out.kernel_launches = int(k_launch.sum())
    out.kernel_launches_unrecorded = int((k_launch & ~has_kernel).sum())

    g_launch = family_mask(calls, L.GRAPH_LAUNCH)
    out.graph_launches = int(g_launch.sum())
    if graph_check == "graph":
        g_rows = launched(graph_trace)
        has_row = np.zeros(len(calls), dtype=bool)
        has_row[g_rows[g_rows >= 0]] = True
        out.graph_launches_unrecorded = int((g_launch & ~has_row).sum())
    elif graph_check == "node" and out.graph_launches:
        _node_replays(out, calls, index, kernels, memset, k_rows, g_launch, pid)

    for table, df, rows in ((S.KERNEL, kernels, k_rows), (S.MEMCPY, memcpy, None),
                            (S.MEMSET, memset, None), (S.GRAPH_TRACE, graph_trace, None)):
        if not len(df):
            continue
        rows = launched(df) if rows is None else rows
        mine = rows >= 0
        if not mine.any():
            continue
        start, end = _ints(df, "start_ns")[mine], _ints(df, "end_ns")[mine]
        counts = [int((end < start).sum()), int((start <= 0).sum()),
                  int((start < call_start[rows[mine]]).sum()),
                  0 if recording is None else int(
                      ((start < recording[0]) | (end > recording[1])).sum()),
                  int(mine.sum())]
        out.times[table] = np.asarray(counts, dtype=np.int64)
    return out


def _node_replays(out: CompletenessPartial, calls: pd.DataFrame, index: _CallIndex,
                  kernels: pd.DataFrame, memset: pd.DataFrame, k_rows: np.ndarray,
                  g_launch: np.ndarray, pid: np.ndarray) -> None:
    """Fill ``out``'s node-level replay rows: per live graph launch, its replayed kernels +
    memsets (rows with a graph node id, keyed by the launch's (pid, corr_id))."""
    call_rows, node_ids = [], []
    for df, rows in ((kernels, k_rows), (memset, None)):
        if not len(df):
            continue
        in_graph, ids = _node_ids(df)
        if not in_graph.any():
            continue
        rows = index.rows(_ints(df, "pid"), _ints(df, "corr_id")) if rows is None else rows
        keep = in_graph & (rows >= 0)
        call_rows.append(rows[keep])
        node_ids.append(ids[keep])
    r = np.concatenate(call_rows) if call_rows else np.zeros(0, np.int64)
    ids = np.concatenate(node_ids) if node_ids else np.zeros(0, np.int64)
    keep = g_launch[r] if len(r) else np.zeros(0, bool)
    r, ids = r[keep], ids[keep]
    n = len(calls)
    nodes = np.bincount(r, minlength=n)
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, r, ids)
    np.maximum.at(hi, r, ids)
    recorded = g_launch & (nodes > 0)
    unrecorded = g_launch & (nodes == 0)
    out.graph_launches_unrecorded = int(unrecorded.sum())
    out.unrecorded_pids, counts = np.unique(pid[unrecorded], return_counts=True)
    out.unrecorded_counts = counts.astype(np.int64)
    out.replay_pid = pid[recorded]
    out.replay_lo, out.replay_hi = lo[recorded], hi[recorded]
    out.replay_nodes = nodes[recorded].astype(np.int64)


def _graphs(pid: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            nodes: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The graphs of the recorded replays (per process, replays whose node id ranges
    overlap), and each replay's graph's usual node count."""
    order = np.lexsort((lo, pid))
    p, a, b, n = pid[order], lo[order], hi[order], nodes[order]
    new = np.ones(len(p), dtype=bool)
    reach = np.iinfo(np.int64).min
    for i in range(len(p)):  # one pass over the replays (a few per step)
        if i and p[i] == p[i - 1] and a[i] <= reach:
            new[i] = False
            reach = max(reach, int(b[i]))
        else:
            reach = int(b[i])
    group = np.cumsum(new) - 1
    usual_of = np.zeros(len(p), dtype=np.int64)
    rows = []
    for g in range(int(group[-1]) + 1 if len(group) else 0):
        mine = group == g
        values, counts = np.unique(n[mine], return_counts=True)
        best = counts.max()
        most = int(values[counts == best].max())
        usual_of[mine] = most
        rows.append({"pid": int(p[mine][0]), "node_id_lo": int(a[mine].min()),
                     "node_id_hi": int(b[mine].max()), "usual_nodes": most,
                     "replays": int(mine.sum()), "short_replays": int((n[mine] < most).sum())})
    usual = np.empty(len(p), dtype=np.int64)
    usual[order] = usual_of
    cols = ["pid", "node_id_lo", "node_id_hi", "usual_nodes", "replays", "short_replays"]
    return pd.DataFrame(rows, columns=cols).astype("int64"), usual


def merge_completeness(parts: list[CompletenessPartial], graph_check: str | None,
                       diagnostics: tuple[tuple[int, int, str], ...] = ()
                       ) -> CompletenessResult:
    """The :class:`CompletenessResult` of the partials of every chunk (in any order)."""
    k = sum(p.kernel_launches for p in parts)
    k_miss = sum(p.kernel_launches_unrecorded for p in parts)
    g = sum(p.graph_launches for p in parts)
    g_miss = sum(p.graph_launches_unrecorded for p in parts)

    def cat(name: str) -> np.ndarray:
        arrays = [getattr(p, name) for p in parts]
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

    nodes = cat("replay_nodes")
    graphs, usual = _graphs(cat("replay_pid"), cat("replay_lo"), cat("replay_hi"), nodes)
    short = nodes < usual
    replays_short = int(short.sum())
    nodes_missing: int | None = None
    if graph_check == "node" and g:
        nodes_missing = int((usual - nodes)[short].sum())
        u_pid, u_n = cat("unrecorded_pids"), cat("unrecorded_counts")
        for p in np.unique(u_pid):
            mine = graphs[graphs["pid"] == p]
            if len(mine) == 1:  # one graph in the process: each unrecorded launch is its
                nodes_missing += int(mine["usual_nodes"].iloc[0]) * int(u_n[u_pid == p].sum())
    times_rows: list[dict[str, Any]] = []
    for table in TIME_TABLES:
        got = [p.times[table] for p in parts if table in p.times]
        if got:
            c = np.sum(got, axis=0)
            times_rows.append({"table": table, "rows": int(c[-1]),
                               **{kind: int(v) for kind, v in zip(TIME_KINDS, c[:-1],
                                                                  strict=True)}})
    times = pd.DataFrame(times_rows, columns=["table", "rows", *TIME_KINDS])
    for c in ("rows", *TIME_KINDS):
        times[c] = times[c].astype("int64")
    recording = recording_span(diagnostics)
    dropped = dropped_messages(diagnostics)

    missing = []
    if g_miss or replays_short:
        where = ("no CUPTI_ACTIVITY_KIND_GRAPH_TRACE row (--cuda-graph-trace=graph)"
                 if graph_check == "graph" else
                 "no replayed kernel or memset (--cuda-graph-trace=node)")
        if g_miss:
            missing.append(f"{g_miss} of {g} graph launches (cudaGraphLaunch) have {where}")
        if replays_short:
            recorded = len(nodes)
            missing.append(
                f"{replays_short} of {recorded} recorded graph replays have fewer kernels + "
                f"memsets than their graph's usual replay")
        if nodes_missing:
            missing.append(f"about {nodes_missing} replayed kernels + memsets are missing")
    if k_miss:
        table_words = "no kernel rows at all" if not any(
            p.times.get(S.KERNEL) is not None for p in parts) else "no kernel row"
        missing.append(f"{k_miss} of {k} kernel launch calls (cudaLaunchKernel...) have "
                       f"{table_words}")
    for r in times_rows:
        for kind in TIME_KINDS:
            if r[kind]:
                missing.append(f"{r[kind]} of {r['rows']} {_TABLE_WORDS[r['table']]} in "
                               f"{r['table']} {_KIND_WORDS[kind]}")
    if dropped:
        missing.append(f"the export records {len(dropped)} message"
                       f"{'' if len(dropped) == 1 else 's'} of dropped records "
                       f"(DIAGNOSTIC_EVENT): {dropped[0]['text']!r}"
                       + (" ..." if len(dropped) > 1 else ""))
    complete = not missing
    reason = None if complete else (
        f"{UNAVAILABLE}: the trace is incomplete ({missing[0]}"
        + (f"; {len(missing) - 1} more finding{'' if len(missing) == 2 else 's'})"
           if len(missing) > 1 else ")"))
    return CompletenessResult(
        complete=complete, missing=missing, reason=reason, kernel_launches=k,
        kernel_launches_unrecorded=k_miss, graph_check=graph_check, graph_launches=g,
        graph_launches_unrecorded=g_miss, replays_short=replays_short,
        replay_nodes_missing=nodes_missing, graphs=graphs, impossible_times=times,
        recording=recording, dropped=dropped)


def completeness(calls: pd.DataFrame, kernels: pd.DataFrame, memcpy: pd.DataFrame,
                 memset: pd.DataFrame, graph_trace: pd.DataFrame, graph_check: str | None,
                 diagnostics: tuple[tuple[int, int, str], ...] = ()) -> CompletenessResult:
    """:func:`merge_completeness` of one partial over the whole trace."""
    part = completeness_partial(calls, kernels, memcpy, memset, graph_trace, graph_check,
                                recording_span(diagnostics))
    return merge_completeness([part], graph_check, diagnostics)
