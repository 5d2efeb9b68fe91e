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
from cgprof.trace import Trace, start_end_order

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
    sources = [src for src in sources if len(src[0])]
    if not sources:
        return pd.DataFrame({c: pd.Series(dtype="bool" if c in ("in_graph", "is_input_copy")
                                          else "object" if c == "kind" else "int64")
                             for c in OP_COLUMNS})
    ints = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id"]
    if not all(df[c].dtype == np.int64 for df, *_ in sources for c in ints):
        return _gpu_ops_concat(sources)
    # Column by column in numpy: a concat of frames would make a string per op for ``kind``
    # and copy every column twice more (concat, then sort); 10M kernels are GBs.
    kinds = sorted({kind for _, kind, _, _ in sources})
    dtype = pd.Series(kinds).astype("category").dtype  # as astype("category") makes it
    cols: dict[str, np.ndarray] = {c: np.concatenate([df[c].to_numpy() for df, *_ in sources])
                                   for c in ints}
    cols["kind"] = np.concatenate([np.full(len(df), kinds.index(kind), dtype=np.int8)
                                   for df, kind, _, _ in sources])
    for c, at in (("in_graph", 2), ("is_input_copy", 3)):
        cols[c] = np.concatenate([np.full(len(src[0]), src[at], dtype=bool)
                                  if isinstance(src[at], bool)
                                  else np.asarray(src[at], dtype=bool) for src in sources])
    order = start_end_order(cols["start_ns"], cols["end_ns"])  # stable, None: in order
    if order is not None:
        for c in list(cols):
            cols[c] = cols.pop(c)[order]
    del order
    cols["kind"] = pd.Categorical.from_codes(cols["kind"], dtype=dtype)
    return pd.DataFrame({c: cols.pop(c) for c in OP_COLUMNS}, copy=False)


def _gpu_ops_concat(sources: list) -> pd.DataFrame:
    """:func:`gpu_ops` through pandas (columns that are not plain int64)."""
    parts = []
    for df, kind, in_graph, input_copy in sources:
        part = df[["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id"]].assign(
            kind=kind,
            in_graph=np.asarray(in_graph, dtype=bool) if not isinstance(
                in_graph, bool) else in_graph,
            is_input_copy=np.asarray(input_copy, dtype=bool) if not isinstance(
                input_copy, bool) else input_copy)
        parts.append(part)
    ops = pd.concat(parts, ignore_index=True)
    ops["kind"] = ops["kind"].astype("category")
    ops = sort_stable(ops, ["start_ns", "end_ns"]).reset_index(drop=True)
    return ops[OP_COLUMNS]
