"""All GPU activity of a trace as one table of operations.

In ``--cuda-graph-trace=node`` traces the replayed kernels are ordinary kernel rows (with a
``graphNodeId`` and the ``correlationId`` of the ``cudaGraphLaunch`` that replayed them). In
``graph`` traces they are *not* in the kernel table at all: each replay is one row of
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``, so busy time must come from those rows or a graphed GPU
looks idle.
"""

from __future__ import annotations

import pandas as pd

from cgprof import schema as S
from cgprof.trace import Trace

KIND_KERNEL = "kernel"
KIND_MEMCPY = "memcpy"
KIND_MEMSET = "memset"
KIND_GRAPH = "graph"  # a whole-graph replay row (graph-granularity traces)

OP_COLUMNS = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id", "kind",
              "in_graph", "is_input_copy"]


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """Kernels, copies, memsets and graph-replay rows: one row per GPU operation.

    Columns: start_ns end_ns device_id stream_id pid corr_id kind (kernel|memcpy|memset|graph)
    in_graph (run as part of a graph replay) is_input_copy (a host-to-device copy). Sorted by
    (start_ns, end_ns); the index is a stable op id.
    """
    parts = []
    k = trace.kernels
    parts.append(pd.DataFrame({
        "start_ns": k["start_ns"], "end_ns": k["end_ns"], "device_id": k["device_id"],
        "stream_id": k["stream_id"], "pid": k["pid"], "corr_id": k["corr_id"],
        "kind": KIND_KERNEL, "in_graph": k["graph_node_id"].notna().to_numpy(dtype=bool),
        "is_input_copy": False}))
    m = trace.memcpy
    parts.append(pd.DataFrame({
        "start_ns": m["start_ns"], "end_ns": m["end_ns"], "device_id": m["device_id"],
        "stream_id": m["stream_id"], "pid": m["pid"], "corr_id": m["corr_id"],
        "kind": KIND_MEMCPY, "in_graph": m["graph_node_id"].notna().to_numpy(dtype=bool),
        "is_input_copy": (m["copy_kind"] == S.MEMCPY_HTOD).to_numpy(dtype=bool)}))
    s = trace.memset
    parts.append(pd.DataFrame({
        "start_ns": s["start_ns"], "end_ns": s["end_ns"], "device_id": s["device_id"],
        "stream_id": s["stream_id"], "pid": s["pid"], "corr_id": s["corr_id"],
        "kind": KIND_MEMSET, "in_graph": s["graph_node_id"].notna().to_numpy(dtype=bool),
        "is_input_copy": False}))
    g = trace.graph_trace
    parts.append(pd.DataFrame({
        "start_ns": g["start_ns"], "end_ns": g["end_ns"], "device_id": g["device_id"],
        "stream_id": g["stream_id"], "pid": g["pid"], "corr_id": g["corr_id"],
        "kind": KIND_GRAPH, "in_graph": True, "is_input_copy": False}))
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="bool" if c in ("in_graph", "is_input_copy")
                                          else "object" if c == "kind" else "int64")
                             for c in OP_COLUMNS})
    ops = pd.concat(parts, ignore_index=True)
    ops["kind"] = ops["kind"].astype("category")
    ops = ops.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    return ops[OP_COLUMNS]
