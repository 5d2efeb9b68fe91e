"""One row per CUDA graph launch: how fast the host launched it and how tight it ran.

In node-granularity traces the replay's nodes are the kernel/copy/memset rows that carry the
``correlationId`` of the ``cudaGraphLaunch`` call (every node of one launch shares it, so a
runtime-to-kernel join fans out; ids repeat across processes, so the key is pid + corr_id).
In graph-granularity traces only the whole replay is visible (one GRAPH_TRACE row): node count,
busy time and inter-node gaps are unknown there and reported as <NA>, never as 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from cgprof.io.trace import column
from cgprof.metrics import launches as L
from cgprof.metrics.intervals import (
    busy_from_gaps,
    gap_sweep,
    group_gaps,
    group_order,
    match_pairs,
    quantile_ns,
    segment_busy,
    sort_stable,
)

REPLAY_COLUMNS = [
    "replay", "pid", "tid", "corr_id", "api", "api_start_ns", "api_dur_ns", "device_id",
    "stream_id", "first_start_ns", "last_end_ns", "latency_ns", "span_ns", "busy_ns",
    "compactness", "nodes", "gaps_ns", "max_gap_ns", "median_gap_ns", "mean_node_ns",
    "longest_gap_after",
]


@dataclass
class ReplayResult:
    """Graph replays and their summary.

    replays  one row per graph launch call (REPLAY_COLUMNS): replay (0-based order), launch call
             (api, api_start_ns, api_dur_ns = host time of the call), latency_ns (call start to
             first GPU work), span_ns (first start to last end on the GPU), busy_ns (union of
             the replay's work), compactness (busy / span), nodes (GPU operations seen),
             gaps_ns / max_gap_ns / median_gap_ns (between consecutive nodes), mean_node_ns
             (busy / nodes), longest_gap_after (kind of the node the GPU finished last before
             the longest gap: kernel, memcpy or memset; the node after a memset node waits
             microseconds in a replay). Launches whose work is not in the trace keep their
             row with <NA> GPU figures.
    summary  metric -> {p50, p99, mean, min, max} over replays with data
    node_level  True when node figures are known (node-granularity trace)
    cost_model  cudaGraphLaunch host time vs node count: {fixed_ns, per_node_ns, n} from a
                least-squares line, or None with fewer than two distinct node counts
    """

    replays: pd.DataFrame
    summary: dict[str, dict[str, float | None]]
    node_level: bool
    cost_model: dict[str, float] | None


def graph_replays(ops: pd.DataFrame, calls: pd.DataFrame, node_level: bool) -> ReplayResult:
    """Join graph launch calls to the GPU work they replayed (see module doc)."""
    fam = calls["family"]
    if isinstance(fam.dtype, pd.CategoricalDtype) and L.GRAPH_LAUNCH not in fam.cat.categories:
        # An eager trace launches no graph: the empty table straight away, not the joins and
        # casts of _replays_of over empty frames (ResNet-18 eager, 300 steps: 10 -> 0.3 ms).
        return _no_replays(node_level)
    return _replays_of(ops, calls[(fam == L.GRAPH_LAUNCH) & ~calls["in_capture"]], node_level)


def _replays_of(ops: pd.DataFrame, launches: pd.DataFrame, node_level: bool) -> ReplayResult:
    """:func:`graph_replays` of the graph launch calls ``launches``."""
    launches = launches.sort_values("start_ns", kind="stable").reset_index(drop=True)
    base = pd.DataFrame({
        "replay": np.arange(len(launches), dtype=np.int64),
        "pid": launches["pid"].to_numpy(dtype=np.int64),
        "tid": column(launches, "tid").astype(np.int64, copy=False),
        "corr_id": launches["corr_id"].to_numpy(dtype=np.int64),
        "api": launches["name"].astype(str).to_numpy(),
        "api_start_ns": launches["start_ns"].to_numpy(dtype=np.int64),
        "api_dur_ns": column(launches, "dur_ns").astype(np.int64, copy=False),
    })
    base = _with_stats(base, ops)
    for c in ("device_id", "stream_id", "first_start_ns", "last_end_ns", "span_ns", "busy_ns",
              "ops", "gaps_ns", "max_gap_ns"):
        base[c] = base[c].astype("Int64")
    base["median_gap_ns"] = base["median_gap_ns"].astype("Float64")
    base["longest_gap_after"] = base["longest_gap_after"].astype("string")
    base["latency_ns"] = base["first_start_ns"] - base["api_start_ns"]
    span = base["span_ns"].astype("Float64")
    base["compactness"] = (base["busy_ns"].astype("Float64") / span.where(span > 0)).astype(
        "Float64")
    base["nodes"] = base["ops"]
    busy = base["busy_ns"].astype("Float64")
    nodes = base["nodes"].astype("Float64")
    base["mean_node_ns"] = (busy / nodes.where(nodes > 0)).astype("Float64")
    if not node_level:
        # Whole-graph rows only: the inside of a replay is not visible.
        for c in ("busy_ns", "nodes", "gaps_ns", "max_gap_ns"):
            base[c] = pd.Series([pd.NA] * len(base), dtype="Int64")
        base["compactness"] = pd.Series([pd.NA] * len(base), dtype="Float64")
        for c in ("median_gap_ns", "mean_node_ns"):
            base[c] = pd.Series([pd.NA] * len(base), dtype="Float64")
        base["longest_gap_after"] = pd.Series([pd.NA] * len(base), dtype="string")
    replays = base[REPLAY_COLUMNS]
    return ReplayResult(replays=replays, summary=_summary(replays), node_level=node_level,
                        cost_model=_cost_model(replays))


def merge_replays(parts: list[ReplayResult], node_level: bool) -> ReplayResult:
    """:func:`graph_replays` of a whole trace from the results of its chunks
    (docs/chunked.md): each part is ``graph_replays(ops_c, replay_calls_c, node_level)`` of a
    chunk's graph-launch calls (a run of consecutive rows of the trace's calls) and the GPU
    ops with their correlation ids, the parts in the order of their calls.

    A replay's row depends only on its launch call and the ops of its (pid, corr_id), all in
    the call's chunk, so the rows are the chunks' rows. The whole run stable-sorts the calls,
    in ``calls`` row order, by start; each part is that order of its calls, so the parts
    joined in call order and stable-sorted by start are the whole run's order (ties across
    parts keep the earlier part's rows first), then numbered again. The summary (a mean in
    row order, quantiles) and the cost model (np.polyfit) are computed from the merged
    table, as the whole run computes them: neither merges from the parts' figures."""
    tables = [p.replays for p in parts if len(p.replays)]
    if not tables:
        return _no_replays(node_level)  # what graph_replays gives with no replay, tested
    merged = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
    order = np.argsort(merged["api_start_ns"].to_numpy(), kind="stable")
    replays = merged.take(order).reset_index(drop=True)
    replays["replay"] = np.arange(len(replays), dtype=np.int64)
    return ReplayResult(replays=replays, summary=_summary(replays), node_level=node_level,
                        cost_model=_cost_model(replays))


#: The dtypes of REPLAY_COLUMNS as :func:`graph_replays` makes them.
_REPLAY_DTYPES = {
    "replay": np.int64, "pid": np.int64, "tid": np.int64, "corr_id": np.int64, "api": object,
    "api_start_ns": np.int64, "api_dur_ns": np.int64, "device_id": "Int64",
    "stream_id": "Int64", "first_start_ns": "Int64", "last_end_ns": "Int64",
    "latency_ns": "Int64", "span_ns": "Int64", "busy_ns": "Int64", "compactness": "Float64",
    "nodes": "Int64", "gaps_ns": "Int64", "max_gap_ns": "Int64", "median_gap_ns": "Float64",
    "mean_node_ns": "Float64", "longest_gap_after": "string",
}


def _no_replays(node_level: bool) -> ReplayResult:
    """What :func:`graph_replays` gives for calls with no graph launch (the same empty table,
    dtypes and all; tests/test_fastpaths.py compares them)."""
    empty = pd.DataFrame({c: pd.Series(dtype=_REPLAY_DTYPES[c]) for c in REPLAY_COLUMNS})
    none: dict[str, float | None] = {"count": 0.0, "p50": None, "p99": None, "mean": None,
                                     "min": None, "max": None}
    return ReplayResult(replays=empty, summary={m: dict(none) for m in SUMMARY_METRICS},
                        node_level=node_level, cost_model=None)


def _with_stats(base: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """``base`` (the launch calls) joined on (pid, corr_id) to the figures of the GPU work they
    replayed: busy table columns, device_id/stream_id (of the replay's first op), median_gap_ns
    and longest_gap_after (:func:`_node_gaps`); all <NA> where a launch has no work."""
    in_graph = ops["in_graph"].to_numpy(dtype=bool)
    fast = _replay_stats(ops, in_graph) if len(base) else None
    if fast is not None:
        return _join_stats(base, fast)
    # the columns used below only (ops is a 10M-row table on big traces)
    work = ops[["pid", "corr_id", "start_ns", "end_ns", "kind", "device_id", "stream_id"]]
    work = work if in_graph.all() else work[in_graph]
    keys = ["pid", "corr_id"]
    gaps = group_gaps(work[keys + ["start_ns", "end_ns"]], keys) if len(work) else None
    if gaps is not None and len(base):
        stats = busy_from_gaps(gaps, keys)
        where = sort_stable(work[["pid", "corr_id", "device_id", "stream_id", "start_ns"]],
                            ["start_ns"]).drop_duplicates(["pid", "corr_id"])
        where = where[["pid", "corr_id", "device_id", "stream_id"]]
        stats = stats.merge(where, on=["pid", "corr_id"], how="left")
        stats = stats.merge(_node_gaps(gaps, work["kind"]), on=keys, how="left")
        return base.merge(stats, on=["pid", "corr_id"], how="left")
    for c in ("device_id", "stream_id", "first_start_ns", "last_end_ns", "span_ns",
              "busy_ns", "ops", "gaps_ns", "max_gap_ns", "median_gap_ns",
              "longest_gap_after"):
        base[c] = pd.Series([pd.NA] * len(base), dtype="Int64")
    return base


_WORK_INTS = ("pid", "corr_id", "start_ns", "end_ns", "device_id", "stream_id")


class _Identity:
    """``np.arange(n)`` as an index map, without the array: ``_Identity()[x]`` is ``x``."""

    def __getitem__(self, x):
        return x


def _replay_stats(ops: pd.DataFrame, in_graph: np.ndarray) -> dict[str, np.ndarray] | None:
    """What :func:`_with_stats`' frame path computes per replay, in numpy over the in-graph ops
    (sorted by (pid, corr_id, start, end) through :func:`group_order`, no frame copies): one
    entry per replay, replays in (pid, corr_id) order. None (take the frame path) when there is
    no in-graph op or a column is not plain int64."""
    if not in_graph.any() or any(ops[c].dtype != np.int64 for c in _WORK_INTS):
        return None
    idx = None if in_graph.all() else np.flatnonzero(in_graph)  # positions in ops

    def col(c: str) -> np.ndarray:
        a = ops[c].to_numpy()
        return a if idx is None else a[idx]

    all_pid = ops["pid"].to_numpy()
    one_pid = int(all_pid.min()) == int(all_pid.max())  # one process: no pid column to take
    corr, start, end = col("corr_id"), col("start_ns"), col("end_ns")
    pid = np.broadcast_to(all_pid[:1], corr.shape) if one_pid else col("pid")
    order = group_order([corr] if one_pid else [pid, corr], start, end)
    pos = _Identity() if order is None else order  # sorted row -> work row
    if order is not None:
        corr, start, end = corr[order], start[order], end[order]
        pid = pid if one_pid else pid[order]
    first = np.empty(len(corr), dtype=bool)
    first[0] = True
    np.not_equal(corr[1:], corr[:-1], out=first[1:])
    if not one_pid:
        first[1:] |= pid[1:] != pid[:-1]
    gap, _, prev_pos = gap_sweep(start, end, first, want_prev_end=False)
    busy = segment_busy(["pid", "corr_id"], [pid, corr], start, end, gap, first)
    stats = {c: busy[c].to_numpy() for c in busy.columns}
    at = np.flatnonzero(first)
    n_rep = len(at)
    size = stats["ops"]

    # Device and stream of the replay's first op as a stable sort by start finds it: among the
    # rows with the replay's first start, the earliest in ops order. Rows are sorted by start
    # in each replay, so when no replay's second row ties its first, that is the first row.
    two = size > 1
    if (start[at[two] + 1] == start[at[two]]).any():
        tied = start == np.repeat(start[at], size)
        every = np.arange(len(corr)) if order is None else order
        where = np.minimum.reduceat(np.where(tied, every, len(every)), at)
    else:
        where = pos[at]
    where = where if idx is None else idx[where]
    for c in ("device_id", "stream_id"):
        stats[c] = ops[c].to_numpy()[where]

    # _node_gaps over the rows after each replay's first (nodes 2..n), replays of 2+ nodes:
    # "inner" arrays hold those rows in order, replay by replay (``ri``: the replay's index
    # among those replays; inner row j is sorted row j + 1 + the index of its replay among
    # all, each replay's first row coming before its inner rows).
    n_in = size[two] - 1
    at_in = np.cumsum(n_in) - n_in
    del pid, corr, start, end, busy  # the in-graph rows' columns: not read past here
    np.logical_not(first, out=first)
    gap_in = gap[first]  # the rows after each replay's first
    del gap, first
    median = np.full(n_rep, np.nan)
    after = np.full(n_rep, None, dtype=object)
    if len(gap_in):
        lo, hi, at_max = _inner_gap_stats(gap_in, n_in, at_in)
        median[two] = (lo + hi) / 2
        # the kind of the op before each replay's first longest gap (at_max: one per replay)
        before = pos[prev_pos[at_max + np.flatnonzero(two) + 1]]
        before = before if idx is None else idx[before]
        after[two] = ops["kind"].iloc[before].astype(str).to_numpy()
    stats["median_gap_ns"] = median
    stats["longest_gap_after"] = after
    return stats


#: Inner gaps per block of :func:`_inner_gap_stats` (whole replays per block).
_BLOCK = 1 << 20


def _inner_gap_stats(gap_in: np.ndarray, n_in: np.ndarray, at_in: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per replay (its ``n_in`` inner gaps from ``at_in`` on in ``gap_in``): the two middle
    gaps of its sorted gaps as float64 (equal for an odd count; their mean is the median as
    pandas' group median computes it) and the position of its first longest gap (idxmax).
    Replay by replay in blocks of about _BLOCK gaps: the replay-number, lift and sort arrays
    are a block long, not 40 MB fresh arrays each at 5M in-graph ops."""
    lo = np.empty(len(n_in), dtype=np.float64)
    hi = np.empty(len(n_in), dtype=np.float64)
    at_max = np.empty(len(n_in), dtype=np.int64)
    width = int(gap_in.max()) + 1
    ends = at_in + n_in
    r0 = 0
    while r0 < len(n_in):
        r1 = max(r0 + 1, int(np.searchsorted(ends, at_in[r0] + _BLOCK, "right")))
        a, b = int(at_in[r0]), int(ends[r1 - 1])
        g, cnt, loc = gap_in[a:b], n_in[r0:r1], at_in[r0:r1] - a
        ri = np.repeat(np.arange(r1 - r0, dtype=np.int64), cnt)
        # sort the gaps within each replay: one sort of replay * width + gap
        if (r1 - r0) * width < 2**62:
            lift = ri * width
            v = g + lift
            v.sort()
            v -= lift
            del lift
        else:
            v = g[np.lexsort((g, ri))]
        lo[r0:r1] = v[loc + (cnt - 1) // 2]
        hi[r0:r1] = v[loc + cnt // 2]
        del v
        longest = np.maximum.reduceat(g, loc)
        hits = np.flatnonzero(g == np.repeat(longest, cnt))
        hit_ri = ri[hits]
        keep = np.empty(len(hits), dtype=bool)
        keep[0] = True
        np.not_equal(hit_ri[1:], hit_ri[:-1], out=keep[1:])
        at_max[r0:r1] = hits[keep] + a  # one per replay, in replay order
        r0 = r1
    return lo, hi, at_max


def _join_stats(base: pd.DataFrame, stats: dict[str, np.ndarray]) -> pd.DataFrame:
    """``base.merge(stats, on=["pid", "corr_id"], how="left")`` for the one-row-per-replay
    ``stats`` of :func:`_replay_stats`: a key lookup, the figures <NA> where a launch has no
    work (Int64 / NaN / None, as the merge and the casts after it give them)."""
    right = pd.DataFrame({"pid": stats["pid"], "corr_id": stats["corr_id"]}, copy=False)
    row = match_pairs(base, right)
    if row is None:
        return base.merge(pd.DataFrame(stats), on=["pid", "corr_id"], how="left")
    miss = row < 0
    take = np.where(miss, 0, row)
    out = base.copy()
    for c in ("ops", "first_start_ns", "last_end_ns", "span_ns", "busy_ns", "gaps_ns",
              "max_gap_ns", "gap_count", "device_id", "stream_id"):
        out[c] = pd.arrays.IntegerArray(stats[c][take].astype(np.int64), miss.copy())
    out["median_gap_ns"] = np.where(miss, np.nan, stats["median_gap_ns"][take])
    after = stats["longest_gap_after"][take]
    after[miss] = None
    out["longest_gap_after"] = after
    return out


def _node_gaps(gaps: pd.DataFrame, kinds: pd.Series) -> pd.DataFrame:
    """Per replay (pid, corr_id), from its :func:`group_gaps` rows: the median gap between
    nodes, and the kind (from ``kinds``, by op label) of the node the GPU finished last before
    the longest gap (the first such gap on ties). A replay of one node has no row."""
    # every node but each replay's first; only the columns used (a 5M-row copy otherwise)
    inner = gaps[["pid", "corr_id", "gap_ns", "prev_idx"]][gaps["prev_end_ns"].notna()]
    by = inner.groupby(["pid", "corr_id"], sort=True)
    out = by["gap_ns"].median().astype(np.float64).rename("median_gap_ns").reset_index()
    longest = inner.loc[by["gap_ns"].idxmax().to_numpy(), ["pid", "corr_id", "prev_idx"]]
    before = kinds.loc[longest["prev_idx"].to_numpy(dtype=np.int64)].astype(str).to_numpy()
    longest = longest.drop(columns="prev_idx").assign(longest_gap_after=before)
    return out.merge(longest, on=["pid", "corr_id"], how="left")


SUMMARY_METRICS = ("api_dur_ns", "latency_ns", "span_ns", "busy_ns", "compactness", "nodes",
                   "max_gap_ns", "median_gap_ns", "mean_node_ns")


def _summary(replays: pd.DataFrame) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for m in SUMMARY_METRICS:
        v = replays[m].dropna().to_numpy(dtype=np.float64)
        out[m] = {
            "count": float(len(v)),
            "p50": quantile_ns(v, 0.5), "p99": quantile_ns(v, 0.99),
            "mean": float(v.mean()) if len(v) else None,
            "min": float(v.min()) if len(v) else None,
            "max": float(v.max()) if len(v) else None,
        }
    return out


def _cost_model(replays: pd.DataFrame) -> dict[str, float] | None:
    d = replays.dropna(subset=["nodes"])
    if d["nodes"].nunique() < 2:
        return None
    x = d["nodes"].to_numpy(dtype=np.float64)
    y = d["api_dur_ns"].to_numpy(dtype=np.float64)
    per_node, fixed = np.polyfit(x, y, 1)
    return {"fixed_ns": float(fixed), "per_node_ns": float(per_node), "n": float(len(d))}
