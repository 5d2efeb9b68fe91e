"""All GPU activity of a trace as one table of operations.

In ``--cuda-graph-trace=node`` traces the replayed kernels are ordinary kernel rows (with a
``graphNodeId`` and the ``correlationId`` of the ``cudaGraphLaunch`` that replayed them). In
``graph`` traces they are *not* in the kernel table at all: each replay is one row of
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``, so busy time must come from those rows or a graphed GPU
looks idle.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.io.frames import start_end_order
from cgprof.io.trace import Trace, constant_value, int_categorical
from cgprof.metrics.intervals import arrays_sorted, sort_stable

KIND_KERNEL = "kernel"
KIND_MEMCPY = "memcpy"
KIND_MEMSET = "memset"
KIND_GRAPH = "graph"  # a whole-graph replay row (graph-granularity traces)

OP_COLUMNS = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id", "kind",
              "in_graph", "is_input_copy"]


def _int_codes(col: pd.Series) -> bool:
    """A categorical of int64 values without a missing one (a stored kernel frame's stream
    ids: cgprof.io.trace.COMPACT), which reads as the int64 column it was."""
    return int_categorical(col) and not (col.cat.codes.to_numpy() < 0).any()


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """Kernels, copies, memsets and graph-replay rows: one row per GPU operation.

    Columns: start_ns end_ns device_id stream_id pid corr_id kind (kernel|memcpy|memset|graph)
    in_graph (run as part of a graph replay) is_input_copy (a host-to-device copy). Sorted by
    (start_ns, end_ns); the index is a stable op id.
    """
    k, m, s, g = trace.stored("kernels"), trace.memcpy, trace.memset, trace.graph_trace
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
    if not all(df[c].dtype == np.int64 or _int_codes(df[c]) for df, *_ in sources
               for c in ints):
        return _gpu_ops_concat(sources)
    # Column by column in numpy: a concat of frames would make a string per op for ``kind``
    # and copy every column twice more (concat, then sort); 10M kernels are GBs.
    kinds = sorted({kind for _, kind, _, _ in sources})
    dtype = pd.Series(kinds).astype("category").dtype  # as astype("category") makes it
    parts = {c: [df[c].to_numpy() if df[c].dtype == np.int64 else np.asarray(df[c], np.int64)
                 for df, *_ in sources] for c in ints}
    parts["kind"] = [np.full(len(df), kinds.index(kind), dtype=np.int8)
                     for df, kind, _, _ in sources]
    for c, at in (("in_graph", 2), ("is_input_copy", 3)):
        parts[c] = [np.full(len(src[0]), src[at], dtype=bool) if isinstance(src[at], bool)
                    else np.asarray(src[at], dtype=bool) for src in sources]
    n = sum(len(df) for df, *_ in sources)
    cols: dict[str, np.ndarray] = {}
    for c in ("device_id", "stream_id", "pid"):
        # One value in every source (one GPU, one process): the same value in any order, a
        # trace.constant_view and not a merged copy (10M kernels: 80 MB a column).
        same = {constant_value(part) for part in parts[c]}
        if len(same) == 1 and None not in same:
            del parts[c]
            cols[c] = np.broadcast_to(np.array(same.pop(), dtype=np.int64), (n,))
    masks = _merge_masks(parts["start_ns"], parts["end_ns"])
    if masks is not None:  # each column written once, in merged order
        for c in list(parts):
            out = np.empty(n, dtype=parts[c][0].dtype)
            for mask, part in zip(masks, parts.pop(c), strict=True):
                if mask is None:
                    out[:] = part
                else:
                    out[mask] = part
            cols[c] = out
    else:
        merged = {c: np.concatenate(parts.pop(c)) for c in list(parts)}
        order = start_end_order(merged["start_ns"], merged["end_ns"])  # stable, None: in order
        if order is not None:
            for c in list(merged):
                merged[c] = merged.pop(c)[order]
        cols.update(merged)
        del merged
        del order
    cols["kind"] = pd.Categorical.from_codes(cols["kind"], dtype=dtype)
    return pd.DataFrame({c: cols.pop(c) for c in OP_COLUMNS}, copy=False)


#: Rows tied on start with a row of another source that :func:`_merge_masks` places one by
#: one; more go through the sort.
_MAX_TIES = 4096


def _merge_masks(starts: list[np.ndarray], ends: list[np.ndarray]) -> list | None:
    """Where each source's rows go in the stable (start, end) order of their concatenation,
    as one boolean mask per source over that order (None for a lone source: every row), when
    every source is in (start, end) order already (as the trace's tables are). None: sort.

    The trick: a stable merge of sorted sources puts row x of source j after the rows of
    each earlier source that are <= x and of each later source that are < x (in (start,
    end) order), so its position is its index plus those counts: a ``searchsorted`` of the
    smaller sources' starts into the others (ties on start settled by end, one by one). The
    largest source fills the slots left, in order. Where a concatenation and a lexsort of
    10M kernels and 0.1M copies cost ~1 s, this writes each column once."""
    if len(starts) == 1 or not all(arrays_sorted([s, e]) for s, e in zip(starts, ends,
                                                                           strict=True)):
        return [None] if len(starts) == 1 and arrays_sorted([starts[0], ends[0]]) else None
    big = int(np.argmax([len(s) for s in starts]))
    n = sum(len(s) for s in starts)
    which = np.full(n, big, dtype=np.int8)
    ties = 0
    for j, (sj, ej) in enumerate(zip(starts, ends, strict=True)):
        if j == big:
            continue
        pos = np.arange(len(sj), dtype=np.int64)
        for i, (si, ei) in enumerate(zip(starts, ends, strict=True)):
            if i == j:
                continue
            lo = np.searchsorted(si, sj, "left")
            hi = np.searchsorted(si, sj, "right")
            tied = np.flatnonzero(hi > lo)
            ties += len(tied)
            if ties > _MAX_TIES:
                return None
            # an earlier source's equal rows go first
            side: Literal["left", "right"] = "right" if i < j else "left"
            for t in tied.tolist():
                lo[t] += np.searchsorted(ei[lo[t]:hi[t]], ej[t], side)
            pos += lo
        which[pos] = j
    masks = [which == j for j in range(len(starts))]
    if any(np.count_nonzero(m) != len(s) for m, s in zip(masks, starts, strict=True)):
        return None  # not a merge (cannot happen for sorted sources): sort
    return masks


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
