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

from cgprof.metrics import launches as L
from cgprof.metrics.intervals import busy_from_gaps, group_gaps, quantile_ns, sort_stable

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
    launches = calls[(calls["family"] == L.GRAPH_LAUNCH) & ~calls["in_capture"]]
    launches = launches.sort_values("start_ns", kind="stable").reset_index(drop=True)
    in_graph = ops["in_graph"].to_numpy(dtype=bool)
    # the columns used below only (ops is a 10M-row table on big traces)
    work = ops[["pid", "corr_id", "start_ns", "end_ns", "kind", "device_id", "stream_id"]]
    work = work if in_graph.all() else work[in_graph]
    keys = ["pid", "corr_id"]
    gaps = group_gaps(work[keys + ["start_ns", "end_ns"]], keys) if len(work) else None
    base = pd.DataFrame({
        "replay": np.arange(len(launches), dtype=np.int64),
        "pid": launches["pid"].to_numpy(dtype=np.int64),
        "tid": launches["tid"].to_numpy(dtype=np.int64),
        "corr_id": launches["corr_id"].to_numpy(dtype=np.int64),
        "api": launches["name"].astype(str).to_numpy(),
        "api_start_ns": launches["start_ns"].to_numpy(dtype=np.int64),
        "api_dur_ns": launches["dur_ns"].to_numpy(dtype=np.int64),
    })
    if gaps is not None and len(base):
        stats = busy_from_gaps(gaps, keys)
        where = sort_stable(work[["pid", "corr_id", "device_id", "stream_id", "start_ns"]],
                            ["start_ns"]).drop_duplicates(["pid", "corr_id"])
        where = where[["pid", "corr_id", "device_id", "stream_id"]]
        stats = stats.merge(where, on=["pid", "corr_id"], how="left")
        stats = stats.merge(_node_gaps(gaps, work["kind"]), on=keys, how="left")
        base = base.merge(stats, on=["pid", "corr_id"], how="left")
    else:
        for c in ("device_id", "stream_id", "first_start_ns", "last_end_ns", "span_ns",
                  "busy_ns", "ops", "gaps_ns", "max_gap_ns", "median_gap_ns",
                  "longest_gap_after"):
            base[c] = pd.Series([pd.NA] * len(base), dtype="Int64")
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
