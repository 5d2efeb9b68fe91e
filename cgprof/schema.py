"""The parts of the Nsight Systems SQLite export that cgprof reads, and how they drift.

Facts here come from NVIDIA's "SQLite Schema Reference" and from real exports of nsys 2021.x
to 2026.x (see ``shared/NSYS_SQLITE.md`` in the project's notes):

* tables are created lazily: a missing table means "no such events were captured";
* columns were added over the years (``greenContextId``, ``graphId``, ``mangledName``...), so
  every optional column is probed with ``PRAGMA table_info`` and read as NULL when absent;
* ``CUDA_GRAPH_EVENTS`` held node-level rows (``graphNodeId``) up to 2023.2 and graph-level rows
  (``graphId``, ``graphExecId``) from 2024.5 on: check its columns, not only its name;
* metadata lives in ``EXPORT_META_DATA`` (<= 2023.2) or ``META_DATA_EXPORT`` (>= 2023.4).
"""

from __future__ import annotations

import re

STRING_IDS = "StringIds"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_EVENTS = "CUDA_GRAPH_EVENTS"
GRAPH_NODE_EVENTS = "CUDA_GRAPH_NODE_EVENTS"
NVTX = "NVTX_EVENTS"
GPU_INFO = "TARGET_INFO_GPU"
STREAM_INFO = "TARGET_INFO_CUDA_STREAM"
THREAD_NAMES = "ThreadNames"
META_EXPORT = "META_DATA_EXPORT"  # nsys >= 2023.4
META_EXPORT_OLD = "EXPORT_META_DATA"  # nsys <= 2023.2
META_CAPTURE = "META_DATA_CAPTURE"  # nsys >= 2023.4
DIAGNOSTIC = "DIAGNOSTIC_EVENT"  # nsys >= 2024.5: the session's own messages (drops, start)

#: Tables whose presence marks a file as an nsys export (any one is enough).
NSYS_MARKER_TABLES = (
    STRING_IDS,
    KERNEL,
    RUNTIME,
    NVTX,
    META_EXPORT,
    META_EXPORT_OLD,
)

#: The tables `cgprof record` asks `nsys export` for.
TABLES_READ = (
    STRING_IDS,
    KERNEL,
    RUNTIME,
    MEMCPY,
    MEMSET,
    SYNC,
    GRAPH_TRACE,
    GRAPH_EVENTS,
    GRAPH_NODE_EVENTS,
    NVTX,
    GPU_INFO,
    STREAM_INFO,
    THREAD_NAMES,
    META_EXPORT,
    META_EXPORT_OLD,
    META_CAPTURE,
    "PROCESSES",
    DIAGNOSTIC,
)

# ENUM_NSYS_EVENT_CLASS: only these RUNTIME rows are real API calls. Class 67 rows
# (TRACE_PROCESS_EVENT_CUDABACKTRACE) duplicate a real call's correlationId when the trace
# was recorded with --cudabacktrace.
EVENT_CLASS_RUNTIME = 0
EVENT_CLASS_DRIVER = 1
API_EVENT_CLASSES = (EVENT_CLASS_RUNTIME, EVENT_CLASS_DRIVER)

# ENUM_NSYS_EVENT_TYPE values for NVTX_EVENTS.eventType (hard-coded: 2022.1 and older
# exports ship no ENUM tables).
NVTX_MARK = 34
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTXT_PUSHPOP = 70
NVTXT_STARTEND = 71
NVTX_DOMAIN_CREATE = 75
NVTX_RANGE_TYPES = (NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND)
NVTX_STYLE = {
    NVTX_PUSHPOP: "PushPop",
    NVTXT_PUSHPOP: "PushPop",
    NVTX_STARTEND: "StartEnd",
    NVTXT_STARTEND: "StartEnd",
}

# ENUM_CUDA_MEMCPY_OPER
MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UtoU"}
MEMCPY_HTOD = 1

#: globalTid = <hw:8><vm:8><pid:24><tid:24>
PID_SHIFT = 24
ID_MASK = 0xFFFFFF

_VERSION_SUFFIX = re.compile(r"_v\d+$")


def strip_version_suffix(name: str) -> str:
    """``cudaGraphLaunch_v10000`` -> ``cudaGraphLaunch`` (CUPTI appends the API version)."""
    return _VERSION_SUFFIX.sub("", name)


def nsys_api_name(name: str) -> str:
    """The name nsys's own ``cuda_api_sum`` report shows for a raw RUNTIME name.

    nsys strips a suffix only when the 6th and 5th characters from the end are ``_v``
    (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``), so ``cudaGraphLaunch_v10000`` keeps
    its suffix there. cgprof reproduces this to compare with nsys exactly; its own grouping
    uses :func:`strip_version_suffix`.
    """
    if len(name) > 6 and name[-6:-4] == "_v":
        return name[:-6]
    return name


def pid_of(global_id: int) -> int:
    """Process id packed into a globalTid/globalPid."""
    return (global_id >> PID_SHIFT) & ID_MASK


def tid_of(global_tid: int) -> int:
    """Thread id packed into a globalTid."""
    return global_tid & ID_MASK


#: How the loader (:mod:`cgprof.io.frames`) reads a table column by column: (nsys column, Trace
#: frame column, "int": NOT NULL in nsys, a NULL is damage | "null": nullable, read as
#: missing). Here, without pandas, so that the columns can be read ahead before the loader
#: is imported (:func:`cgprof.io.prefetch.prefetch`).
Spec = list[tuple[str, str, str]]

BASE_SPEC: Spec = [("start", "start_ns", "int"), ("end", "end_ns", "int"),
                   ("deviceId", "device_id", "int"), ("streamId", "stream_id", "int"),
                   ("correlationId", "corr_id", "int"), ("globalPid", "global_pid", "int")]
KERNEL_SPEC: Spec = BASE_SPEC + [
    ("demangledName", "name_id", "null"), ("shortName", "short_id", "null"),
    ("graphNodeId", "graph_node_id", "null"), ("graphId", "graph_id", "null")]
RUNTIME_SPEC: Spec = [("start", "start_ns", "int"), ("end", "end_ns", "int"),
                      ("eventClass", "event_class", "int"), ("globalTid", "global_tid", "int"),
                      ("correlationId", "corr_id", "int"), ("nameId", "name_id", "null")]
#: The GPU-side tables besides the kernels: memory copies, memsets, syncs, graph replays.
GPU_OP_SPECS: dict[str, Spec] = {
    MEMCPY: BASE_SPEC + [("bytes", "bytes", "int"), ("copyKind", "copy_kind", "int"),
                         ("graphNodeId", "graph_node_id", "null")],
    MEMSET: BASE_SPEC + [("bytes", "bytes", "int"), ("graphNodeId", "graph_node_id", "null")],
    SYNC: BASE_SPEC + [("syncType", "sync_type", "null")],
    GRAPH_TRACE: BASE_SPEC + [("graphId", "graph_id", "null"),
                              ("graphExecId", "graph_exec_id", "null")],
}
#: NVTX_EVENTS: (nsys column, frame column, value when the column is missing).
NVTX_COLS: list[tuple[str, str, object]] = [
    ("start", "start_ns", None), ("end", "end_ns", None), ("eventType", "event_type", 0),
    ("rangeId", "range_id", None), ("text", "text", None), ("textId", "text_id", None),
    ("globalTid", "global_tid", 0), ("endGlobalTid", "end_global_tid", None),
    ("domainId", "domain_id", 0), ("int64Value", "i64", None), ("uint64Value", "u64", None),
    ("int32Value", "i32", None), ("uint32Value", "u32", None)]

#: The column of each table that says which process a row belongs to (its pid is
#: ``(value >> PID_SHIFT) & ID_MASK``): what a read of one process's rows filters on
#: (:class:`cgprof.io.filters.PidFilter`, a multi-rank trace read rank by rank).
PID_COLUMN: dict[str, str] = {
    KERNEL: "globalPid", RUNTIME: "globalTid", MEMCPY: "globalPid", MEMSET: "globalPid",
    SYNC: "globalPid", GRAPH_TRACE: "globalPid", NVTX: "globalTid", THREAD_NAMES: "globalTid"}

#: The small info tables the loader reads whole, and their columns (GPU names are optional:
#: without them the loader reads ``id`` alone).
INFO_COLUMNS: dict[str, list[str]] = {
    META_EXPORT_OLD: ["name", "value"], META_EXPORT: ["name", "value"],
    META_CAPTURE: ["name", "value"], GPU_INFO: ["id", "name"],
    THREAD_NAMES: ["globalTid", "nameId"], DIAGNOSTIC: ["timestamp", "severity", "text"]}

#: The nsys columns the loader reads of each table (those present, in this order), read
#: ahead by :meth:`cgprof.io.sources.Source.read_ahead_activity`: the two big tables first, then
#: the small ones, each in its own thread, so that the loader's reads take them finished.
READ_COLUMNS: dict[str, list[str]] = {
    KERNEL: [c for c, _, _ in KERNEL_SPEC],
    RUNTIME: [c for c, _, _ in RUNTIME_SPEC],
    STRING_IDS: ["id", "value"],
    **{table: [c for c, _, _ in spec] for table, spec in GPU_OP_SPECS.items()},
    NVTX: [c for c, _, _ in NVTX_COLS],
}
