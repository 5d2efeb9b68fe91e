"""All GPU activity of a trace as one table of operations.

In ``--cuda-graph-trace=node`` traces the replayed kernels are ordinary kernel rows (with a
``graphNodeId`` and the ``correlationId`` of the ``cudaGraphLaunch`` that replayed them). In
``graph`` traces they are *not* in the kernel table at all: each replay is one row of
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``, so busy time must come from those rows or a graphed GPU
looks idle.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.metrics.intervals import sort_stable
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
    k, m, s, g = trace.kernels, trace.memcpy, trace.memset, trace.graph_trace
    sources = [
        (k, KIND_KERNEL, k["graph_node_id"].notna(), False),
        (m, KIND_MEMCPY, m["graph_node_id"].notna(), m["copy_kind"] == S.MEMCPY_HTOD),
        (s, KIND_MEMSET, s["graph_node_id"].notna(), False),
        (g, KIND_GRAPH, True, False),  # a whole replay
    ]
    parts = []
    for df, kind, in_graph, input_copy in sources:
        # No .copy(): the concat below copies once.
        part = df[["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id"]].assign(
            kind=kind,
            in_graph=np.asarray(in_graph, dtype=bool) if not isinstance(
                in_graph, bool) else in_graph,
            is_input_copy=np.asarray(input_copy, dtype=bool) if not isinstance(
                input_copy, bool) else input_copy)
        parts.append(part)
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="bool" if c in ("in_graph", "is_input_copy")
                                          else "object" if c == "kind" else "int64")
                             for c in OP_COLUMNS})
    ops = pd.concat(parts, ignore_index=True)
    ops["kind"] = ops["kind"].astype("category")
    ops = sort_stable(ops, ["start_ns", "end_ns"]).reset_index(drop=True)
    return ops[OP_COLUMNS]
