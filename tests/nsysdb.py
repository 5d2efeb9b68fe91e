"""Build small nsys-shaped SQLite files from hand-checkable nanosecond integers.

    from nsysdb import K, N, R, make_nsys_db

    db = make_nsys_db(
        tmp_path / "t.sqlite",
        kernels=[K(1000, 2000, "gemm", corr=1), K(2500, 3000, "relu", corr=2, graph_node=11)],
        runtime=[R(100, 900, "cudaLaunchKernel_v7000", corr=1),
                 R(950, 990, "cudaGraphLaunch_v10000", corr=2)],
        nvtx=[N(50, 3500, "step", domain="cgprof")],
        graph_trace_mode="node",
    )

The file follows the real export's rules (shared/NSYS_SQLITE.md sections 1-4):

- Each table has the exact `CREATE TABLE` text and column order of the chosen `variant`
  (`tests/nsys_ddl.py`; default "2025" = the 2025.3 sample files). Columns a row does not
  set are NULL or the value real files hold (e.g. `greenContextId` 0 on kernels).
- Tables are created lazily: only when rows are given or the table is named in `empty=`;
  `StringIds` always exists. No indexes, as nsys.
- Names go through `StringIds` (kernel demangled/short/mangled names, API names, thread
  names, registered NVTX strings), ids from 0 in order of first use.
- `globalTid = 1<<48 | pid<<24 | tid` (VM id 1); GPU-side rows (kernel, memcpy, memset,
  sync, graph trace) carry `globalPid = 1<<48 | pid<<24`.
- NVTX domains: each distinct (pid, domain) gets an eventType-75 (NvtxDomainCreate) row with
  `domainId` 1, 2, ... per process, `text` = the domain name, a negative `start` and the
  globalTid of its first range; ranges in that domain carry its `domainId`; no domain = 0.

Helpers at the bottom write broken inputs for error tests.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsys_ddl import VARIANT_INFO, VARIANTS, create_table, enum_rows, schema

__all__ = [
    "GE",
    "GN",
    "VARIANT_DEFAULT",
    "G",
    "K",
    "M",
    "N",
    "R",
    "S",
    "Y",
    "global_pid",
    "global_tid",
    "make_nsys_db",
    "write_empty_file",
    "write_not_sqlite",
    "write_plain_sqlite",
    "write_truncated_copy",
]

VM_ID = 1
PID = 100  # default process id of every row
UINT32_MAX = 4294967295  # streamId/eventId "not applicable" in SYNCHRONIZATION rows
DOMAIN_CREATE_START = -1_000_000_000  # domain n is created at DOMAIN_CREATE_START * n


def global_pid(pid: int) -> int:
    """nsys's serialized process id: `<HW:8><VM:8><PID:24><TID:24>` with VM 1 and TID 0."""
    return (VM_ID << 48) | (pid << 24)


def global_tid(pid: int, tid: int | None = None) -> int:
    """nsys's serialized thread id; `tid` defaults to `pid` (the main thread)."""
    return global_pid(pid) | (pid if tid is None else tid)


# --- rows -----------------------------------------------------------------------------------
# All times are integer nanoseconds on the trace's timeline.


@dataclass(frozen=True)
class K:
    """A kernel execution (CUPTI_ACTIVITY_KIND_KERNEL)."""

    start: int
    end: int
    name: str  # demangledName
    short_name: str | None = None  # shortName; None: same as `name`
    device: int = 0
    context: int = 1
    stream: int = 7
    corr: int = 0
    pid: int = PID
    graph_node: int | None = None  # graphNodeId: set on kernels replayed from a CUDA graph
    graph_id: int | None = None  # graphId: only variant "2026" has the column
    mangled_name: str | None = None
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    registers: int = 32
    launch_type: int = 1  # 1 = Regular


@dataclass(frozen=True)
class R:
    """A CUDA runtime or driver API call (CUPTI_ACTIVITY_KIND_RUNTIME)."""

    start: int
    end: int
    name: str  # with nsys's version suffix, e.g. "cudaLaunchKernel_v7000"
    corr: int = 0
    pid: int = PID
    tid: int | None = None  # None: same as pid
    event_class: int = 0  # 0 runtime, 1 driver, 67 CUDA backtrace duplicate
    return_value: int = 0


@dataclass(frozen=True)
class N:
    """An NVTX event (NVTX_EVENTS): a range, or a mark when `event_type=34`."""

    start: int
    end: int | None = None
    text: str | None = None
    domain: str | None = None  # None: the default domain (domainId 0)
    event_type: int = 59  # 59 push/pop, 60 start/end, 34 mark
    pid: int = PID
    tid: int | None = None
    end_tid: int | None = None  # endGlobalTid: the thread that ended a start/end range
    registered: bool = False  # True: text goes to StringIds via textId, `text` stays NULL
    payload: int | float | None = None  # int -> int64Value, float -> doubleValue
    color: int | None = None
    category: int | None = None
    range_id: int | None = None


@dataclass(frozen=True)
class M:
    """A memory copy (CUPTI_ACTIVITY_KIND_MEMCPY)."""

    start: int
    end: int
    bytes: int
    copy_kind: int = 1  # 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP
    device: int = 0
    context: int = 1
    stream: int = 7
    corr: int = 0
    pid: int = PID
    graph_node: int | None = None
    src_kind: int | None = None  # None: from copy_kind (0 pageable, 2 device)
    dst_kind: int | None = None


@dataclass(frozen=True)
class S:
    """A memset (CUPTI_ACTIVITY_KIND_MEMSET)."""

    start: int
    end: int
    bytes: int
    value: int = 0
    device: int = 0
    context: int = 1
    stream: int = 7
    corr: int = 0
    pid: int = PID
    graph_node: int | None = None
    mem_kind: int = 2  # device


@dataclass(frozen=True)
class Y:
    """A GPU-side synchronization record (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION).

    `sync_type` follows ENUM_CUPTI_SYNC_TYPE (3 = "Stream sync"), but real files disagree
    with the labels (2025.3 writes 2 for cudaStreamSynchronize): set it explicitly when a
    test depends on it."""

    start: int
    end: int
    corr: int = 0
    sync_type: int = 3
    device: int = 0
    context: int = 1
    stream: int = 7
    pid: int = PID
    event_id: int = UINT32_MAX


@dataclass(frozen=True)
class G:
    """A whole-graph execution (CUPTI_ACTIVITY_KIND_GRAPH_TRACE, `--cuda-graph-trace=graph`)."""

    start: int
    end: int
    corr: int = 0  # the cudaGraphLaunch's correlationId
    graph_id: int = 1
    graph_exec_id: int = 2
    device: int = 0
    context: int = 1
    stream: int = 7
    pid: int = PID


@dataclass(frozen=True)
class GN:
    """A CPU-side graph-node event (CUDA_GRAPH_NODE_EVENTS; CUDA_GRAPH_EVENTS in "2021"/"2022").

    Real files hold instant "Graph Node Creation" rows (start == end, eventClass 77); nodes
    cloned at instantiation point at the captured node through `original`."""

    start: int
    graph_node: int
    original: int | None = None  # originalGraphNodeId
    end: int | None = None  # None: same as start
    name: str = "Graph Node Creation"
    event_class: int = 77
    pid: int = PID
    tid: int | None = None


@dataclass(frozen=True)
class GE:
    """A CPU-side graph-level event (CUDA_GRAPH_EVENTS, layout of 2024.5 and later).

    Without `graph_exec_id`: "Graph Creation" (eventClass 95); with it: "GraphExec Creation"
    (eventClass 94), as in the graph-mode sample."""

    start: int
    graph_id: int
    graph_exec_id: int | None = None
    original_graph_id: int | None = None
    end: int | None = None  # None: same as start
    name: str | None = None
    event_class: int | None = None
    pid: int = PID
    tid: int | None = None


# --- the builder ------------------------------------------------------------------------------


class _VariantDefault:
    def __repr__(self) -> str:
        return "VARIANT_DEFAULT"


VARIANT_DEFAULT: Any = _VariantDefault()
"""Default of `nsys_version`/`schema_version`: the variant's own (2025.3.2.0, 3.20.3 in 2025)."""

# Columns the builder fills with what real files hold; dropped silently in layouts without them.
_SOFT = {"greenContextId", "copyCount", "eventSyncId", "tensorSizeMinusOneElements"}

_GRAPH_MODES = {"node": "Node", "graph": "Graph"}


class _Strings:
    """StringIds: one id per distinct string, from 0 in order of first use."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str | None) -> int | None:
        if value is None:
            return None
        if value not in self.ids:
            self.ids[value] = len(self.ids)
        return self.ids[value]


def make_nsys_db(
    path: str | Path,
    *,
    kernels: Iterable[K] = (),
    runtime: Iterable[R] = (),
    nvtx: Iterable[N] = (),
    memcpy: Iterable[M] = (),
    memset: Iterable[S] = (),
    sync: Iterable[Y] = (),
    graph_trace: Iterable[G] = (),
    graph_node_events: Iterable[GN] = (),
    graph_events: Iterable[GE] = (),
    gpus: Iterable[tuple[int, str]] = (),
    threads: Iterable[tuple[int, int, str]] = (),
    processes: Iterable[tuple[int, str]] = (),
    graph_trace_mode: str | None = None,
    capture_meta: Iterable[tuple[str, str]] = (),
    nsys_version: str | None = VARIANT_DEFAULT,
    schema_version: str | None = VARIANT_DEFAULT,
    legacy_metadata: bool | None = None,
    enums: bool | None = None,
    empty: Iterable[str] = (),
    variant: str = "2025",
) -> Path:
    """Write an nsys-shaped SQLite export to `path` (which must not exist) and return it.

    Row tables: `kernels` (K), `runtime` (R), `nvtx` (N), `memcpy` (M), `memset` (S),
    `sync` (Y), `graph_trace` (G), `graph_node_events` (GN), `graph_events` (GE).
    Info tables: `gpus` [(id, name)] -> TARGET_INFO_GPU, `threads` [(pid, tid, name)] ->
    ThreadNames, `processes` [(pid, name)] -> PROCESSES.

    Metadata:
    - `graph_trace_mode` "node"/"graph" (or any literal, e.g. "Node") writes the
      `--cuda-graph-trace` key into META_DATA_CAPTURE (key without `PROCESS_0:` in "2026");
      `capture_meta` adds (name, value) rows there. No META_DATA_CAPTURE without either.
    - `nsys_version`/`schema_version` go to META_DATA_EXPORT (EXPORT_PRODUCT_VERSION,
      EXPORT_SCHEMA_VERSION[_MAJOR/_MINOR/_MICRO], ...); both None: no export-metadata table.
    - `legacy_metadata=True` writes them to EXPORT_META_DATA (the <= 2023.2 table) instead.
      None: the variant's own (True for "2022").
    - `enums`: write the ENUM_* tables (default: as the variant does; never in "2021").

    `empty`: table names to create even without rows (e.g. ["CUPTI_ACTIVITY_KIND_KERNEL"]).
    `variant`: "2025" (default), "2026", "2022" or "2021" (see tests/nsys_ddl.py).
    A value for a column the variant lacks (e.g. `K(graph_id=1)` outside "2026") raises
    ValueError rather than vanishing.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    info = VARIANT_INFO[variant]
    tables = schema(variant)
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; make_nsys_db writes new files only")
    empty = list(empty)
    unknown = [n for n in empty if n not in tables]
    if unknown:
        raise ValueError(f"variant {variant!r} has no table(s) {unknown}")
    if nsys_version is VARIANT_DEFAULT:
        nsys_version = info.nsys_version
    if schema_version is VARIANT_DEFAULT:
        schema_version = info.schema_version
    if legacy_metadata is None:
        legacy_metadata = info.export_meta_table == "EXPORT_META_DATA"
    if enums is None:
        enums = info.has_enums
    if variant == "2021" and (nsys_version or schema_version or legacy_metadata or enums):
        raise ValueError("variant '2021' has no metadata or ENUM tables")
    capture_rows = list(capture_meta)
    if graph_trace_mode is not None:
        if info.graph_mode_key is None or legacy_metadata:
            raise ValueError(
                "graph_trace_mode needs META_DATA_CAPTURE, which EXPORT_META_DATA-era files lack"
            )
        mode = _GRAPH_MODES.get(graph_trace_mode, graph_trace_mode)
        capture_rows.insert(0, (info.graph_mode_key, mode))
    if capture_rows and (info.graph_mode_key is None or legacy_metadata):
        raise ValueError("capture_meta needs META_DATA_CAPTURE, which this layout lacks")

    s = _Strings()
    # before 2024.5 the node events lived in CUDA_GRAPH_EVENTS (see nsys_ddl)
    node_table = "CUDA_GRAPH_NODE_EVENTS"
    if node_table not in tables:
        node_table = "CUDA_GRAPH_EVENTS"
    graph_events = list(graph_events)
    if graph_events and node_table == "CUDA_GRAPH_EVENTS":
        raise ValueError(f"variant {variant!r} has no graph-level CUDA_GRAPH_EVENTS (GE rows)")
    rows: dict[str, list[dict[str, Any]]] = {
        "CUPTI_ACTIVITY_KIND_RUNTIME": [_runtime_row(r, s) for r in runtime],
        "CUPTI_ACTIVITY_KIND_MEMCPY": [_memcpy_row(m) for m in memcpy],
        "CUPTI_ACTIVITY_KIND_MEMSET": [_memset_row(m) for m in memset],
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [_sync_row(y) for y in sync],
        "CUPTI_ACTIVITY_KIND_KERNEL": [_kernel_row(k, i + 1, s) for i, k in enumerate(kernels)],
        "NVTX_EVENTS": _nvtx_rows(list(nvtx), s),
        node_table: [_graph_node_row(e, s) for e in graph_node_events],
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": [_graph_trace_row(g) for g in graph_trace],
        "PROCESSES": [
            {"globalPid": global_pid(pid), "pid": pid, "name": name} for pid, name in processes
        ],
        "ThreadNames": [
            {"nameId": s(name), "priority": 20, "globalTid": global_tid(pid, tid)}
            for pid, tid, name in threads
        ],
        "TARGET_INFO_GPU": [
            {"vmId": VM_ID << 48, "id": gid, "name": name, "cuDevice": gid} for gid, name in gpus
        ],
    }
    if graph_events:
        # graph-level events share CUDA_GRAPH_EVENTS with nothing else in >= 2024.5 layouts
        rows["CUDA_GRAPH_EVENTS"] = [_graph_event_row(e, s) for e in graph_events]
    if rows["PROCESSES"] and "PROCESSES" not in tables:
        raise ValueError(f"variant {variant!r} has no PROCESSES table")

    conn = sqlite3.connect(path)
    try:
        create_table(conn, "StringIds", variant)
        for name in tables:
            table_rows = rows.get(name, [])
            if table_rows or name in empty:
                _insert(conn, variant, name, table_rows)
        if enums:
            for name in tables:
                if name.startswith("ENUM_"):
                    _insert(conn, variant, name, [
                        {"id": i, "name": n, "label": lab} for i, n, lab in enum_rows(name)
                    ])
        if capture_rows:
            _insert(conn, variant, "META_DATA_CAPTURE", [
                {"name": k, "value": v} for k, v in capture_rows
            ])
        if nsys_version is not None or schema_version is not None:
            table = "EXPORT_META_DATA" if legacy_metadata else "META_DATA_EXPORT"
            if table not in tables:  # legacy_metadata=True on a 2025/2026 layout
                conn.execute(schema("2022")["EXPORT_META_DATA"].ddl())
                conn.executemany(
                    "INSERT INTO EXPORT_META_DATA (name, value) VALUES (?, ?)",
                    _export_meta(nsys_version, schema_version, legacy=True),
                )
            else:
                _insert(conn, variant, table, [
                    {"name": k, "value": v}
                    for k, v in _export_meta(nsys_version, schema_version, legacy_metadata)
                ])
        conn.executemany(
            "INSERT INTO StringIds (id, value) VALUES (?, ?)",
            sorted((i, v) for v, i in s.ids.items()),
        )
        conn.commit()
    finally:
        conn.close()
    return path


def _insert(conn: sqlite3.Connection, variant: str, name: str, rows: list[dict[str, Any]]) -> None:
    """Create `name` and insert `rows`; columns a row leaves out are NULL."""
    table = create_table(conn, name, variant)
    cols = set(table.column_names)
    for row in rows:
        for key in list(row):
            if key in cols:
                continue
            if row[key] is None or key in _SOFT:
                del row[key]
            else:
                raise ValueError(
                    f"{name} has no column {key} in variant {variant!r} "
                    f"(got {key}={row[key]!r})"
                )
    for keys, group in _group_by_keys(rows):
        quoted = ", ".join(f'"{k}"' for k in keys)
        marks = ", ".join("?" for _ in keys)
        conn.executemany(
            f"INSERT INTO {name} ({quoted}) VALUES ({marks})",
            [tuple(r[k] for k in keys) for r in group],
        )


Rows = list[dict[str, Any]]


def _group_by_keys(rows: Rows) -> list[tuple[tuple[str, ...], Rows]]:
    groups: dict[tuple[str, ...], Rows] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    return list(groups.items())


def _export_meta(
    nsys_version: str | None, schema_version: str | None, legacy: bool
) -> list[tuple[str, str]]:
    """The version rows of META_DATA_EXPORT (or, legacy, EXPORT_META_DATA) as nsys writes them."""
    out = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems")]
    if nsys_version is not None:
        out.append(("EXPORT_PRODUCT_VERSION", nsys_version))
        out.append(("EXPORT_PRODUCT_DATE", ".".join(nsys_version.split(".")[:2])))
    if schema_version is not None:
        out.append(("EXPORT_SCHEMA_VERSION", schema_version))
        parts = schema_version.split(".")
        for part, value in zip(("MAJOR", "MINOR", "MICRO"), parts[:3], strict=False):
            out.append((f"EXPORT_SCHEMA_VERSION_{part}", value))
    if legacy:  # the <= 2023.2 keys, misspelling included
        out += [("EXPORT_INPUT_FILE", "report1.nsys-rep"), ("EXPORT_OUTUPT_FILE", "report1.sqlite")]
    else:
        out += [
            ("EXPORT_PARAM_INPUT_FILE", "report1.nsys-rep"),
            ("EXPORT_PARAM_OUTPUT_FILE", "report1.sqlite"),
            ("EXPORT_PARAM_LAZY", "true"),
            ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
            ("EXPORT_PARAM_TIME_SHIFT", "0"),
        ]
    return out


def _kernel_row(k: K, grid_id: int, s: _Strings) -> dict[str, Any]:
    return {
        "start": k.start,
        "end": k.end,
        "deviceId": k.device,
        "contextId": k.context,
        "greenContextId": 0,  # real kernels carry 0, not NULL
        "streamId": k.stream,
        "correlationId": k.corr,
        "globalPid": global_pid(k.pid),
        "demangledName": s(k.name),
        "shortName": s(k.name if k.short_name is None else k.short_name),
        "mangledName": s(k.mangled_name),
        "launchType": k.launch_type,
        "cacheConfig": 0,
        "registersPerThread": k.registers,
        "gridX": k.grid[0],
        "gridY": k.grid[1],
        "gridZ": k.grid[2],
        "blockX": k.block[0],
        "blockY": k.block[1],
        "blockZ": k.block[2],
        "staticSharedMemory": 0,
        "dynamicSharedMemory": 0,
        "localMemoryPerThread": 0,
        "localMemoryTotal": 0,
        "gridId": grid_id,
        "sharedMemoryExecuted": 0,
        "graphNodeId": k.graph_node,
        "sharedMemoryLimitConfig": 0,
        "graphId": k.graph_id,
        "tensorSizeMinusOneElements": "",  # NOT NULL in 2026.1.3 and later
    }


def _runtime_row(r: R, s: _Strings) -> dict[str, Any]:
    return {
        "start": r.start,
        "end": r.end,
        "eventClass": r.event_class,
        "globalTid": global_tid(r.pid, r.tid),
        "correlationId": r.corr,
        "nameId": s(r.name),
        "returnValue": r.return_value,
    }


_MEM_KINDS = {1: (0, 2), 2: (2, 0), 8: (2, 2), 10: (2, 2)}  # copyKind -> (srcKind, dstKind)


def _memcpy_row(m: M) -> dict[str, Any]:
    src, dst = _MEM_KINDS.get(m.copy_kind, (None, None))
    return {
        "start": m.start,
        "end": m.end,
        "deviceId": m.device,
        "contextId": m.context,
        "greenContextId": 0,
        "streamId": m.stream,
        "correlationId": m.corr,
        "globalPid": global_pid(m.pid),
        "bytes": m.bytes,
        "copyKind": m.copy_kind,
        "srcKind": src if m.src_kind is None else m.src_kind,
        "dstKind": dst if m.dst_kind is None else m.dst_kind,
        "graphNodeId": m.graph_node,
        "copyCount": 1,
    }


def _memset_row(m: S) -> dict[str, Any]:
    return {
        "start": m.start,
        "end": m.end,
        "deviceId": m.device,
        "contextId": m.context,
        "greenContextId": 0,
        "streamId": m.stream,
        "correlationId": m.corr,
        "globalPid": global_pid(m.pid),
        "value": m.value,
        "bytes": m.bytes,
        "graphNodeId": m.graph_node,
        "memKind": m.mem_kind,
    }


def _sync_row(y: Y) -> dict[str, Any]:
    return {
        "start": y.start,
        "end": y.end,
        "deviceId": y.device,
        "contextId": y.context,
        "streamId": y.stream,
        "correlationId": y.corr,
        "globalPid": global_pid(y.pid),
        "syncType": y.sync_type,
        "eventId": y.event_id,
        "eventSyncId": UINT32_MAX if y.event_id == UINT32_MAX else None,
    }


def _graph_trace_row(g: G) -> dict[str, Any]:
    return {
        "start": g.start,
        "end": g.end,
        "deviceId": g.device,
        "contextId": g.context,
        "greenContextId": 0,
        "streamId": g.stream,
        "correlationId": g.corr,
        "globalPid": global_pid(g.pid),
        "graphId": g.graph_id,
        "graphExecId": g.graph_exec_id,
    }


def _graph_node_row(e: GN, s: _Strings) -> dict[str, Any]:
    return {
        "start": e.start,
        "end": e.start if e.end is None else e.end,
        "eventClass": e.event_class,
        "globalTid": global_tid(e.pid, e.tid),
        "nameId": s(e.name),
        "graphNodeId": e.graph_node,
        "originalGraphNodeId": e.original,
    }


def _graph_event_row(e: GE, s: _Strings) -> dict[str, Any]:
    is_exec = e.graph_exec_id is not None
    name = e.name or ("GraphExec Creation" if is_exec else "Graph Creation")
    event_class = e.event_class if e.event_class is not None else (94 if is_exec else 95)
    return {
        "start": e.start,
        "end": e.start if e.end is None else e.end,
        "eventClass": event_class,
        "globalTid": global_tid(e.pid, e.tid),
        "nameId": s(name),
        "graphId": e.graph_id,
        "originalGraphId": e.original_graph_id,
        "graphExecId": e.graph_exec_id,
    }


def _nvtx_rows(events: Sequence[N], s: _Strings) -> list[dict[str, Any]]:
    domains: dict[tuple[int, str], int] = {}
    created: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for n in events:
        domain_id = 0
        if n.domain is not None:
            key = (n.pid, n.domain)
            if key not in domains:
                domains[key] = sum(1 for pid, _ in domains if pid == n.pid) + 1
                created.append({
                    "start": DOMAIN_CREATE_START * domains[key],
                    "eventType": 75,  # NvtxDomainCreate
                    "text": n.domain,
                    "globalTid": global_tid(n.pid, n.tid),
                    "domainId": domains[key],
                })
            domain_id = domains[key]
        row: dict[str, Any] = {
            "start": n.start,
            "end": n.end,
            "eventType": n.event_type,
            "rangeId": n.range_id,
            "category": n.category,
            "color": n.color,
            "text": None if n.registered else n.text,
            "globalTid": global_tid(n.pid, n.tid),
            "endGlobalTid": None if n.end_tid is None else global_tid(n.pid, n.end_tid),
            "textId": s(n.text) if n.registered else None,
            "domainId": domain_id,
        }
        if isinstance(n.payload, int):
            row["int64Value"] = n.payload
        elif n.payload is not None:
            row["doubleValue"] = float(n.payload)
        rows.append(row)
    return created + rows


# --- broken inputs for error tests -----------------------------------------------------------


def write_not_sqlite(path: str | Path) -> Path:
    """A text file with a .sqlite name: `sqlite3.connect` succeeds, the first query raises
    `sqlite3.DatabaseError: file is not a database`."""
    path = Path(path)
    path.write_bytes(b"this is not an SQLite database, it only has the name of one\n" * 64)
    return path


def write_changed_copy(src: str | Path, dst: str | Path, *sql: str) -> Path:
    """A writable copy of an export changed by ``sql`` statements (``src`` is untouched)."""
    dst = Path(dst)
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    with sqlite3.connect(dst) as conn:
        for stmt in sql:
            conn.execute(stmt)
    conn.close()
    return dst


def write_truncated_copy(src: str | Path, dst: str | Path, fraction: float = 0.5) -> Path:
    """Copy an export and cut it at `fraction` of its size (rounded down to a 4 KiB page).

    Like an export interrupted mid-write or a partial download. `sqlite3.connect` succeeds;
    the first query, even `SELECT ... FROM sqlite_master`, raises
    `sqlite3.DatabaseError: database disk image is malformed` (checked in test_nsysdb.py on
    the real samples, where sqlite_master spans several pages). The copy is writable even
    when `src` is read-only."""
    dst = Path(dst)
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    size = dst.stat().st_size
    keep = max(4096, int(size * fraction) // 4096 * 4096)
    if keep >= size:
        raise ValueError(f"{src} is too small ({size} B) to truncate at {fraction}")
    with open(dst, "r+b") as f:
        f.truncate(keep)
    return dst


def write_plain_sqlite(path: str | Path) -> Path:
    """A valid SQLite database that is not an nsys export (one unrelated table, one row)."""
    path = Path(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        conn.execute("INSERT INTO notes (body) VALUES ('not a trace')")
        conn.commit()
    finally:
        conn.close()
    return path


def write_empty_file(path: str | Path) -> Path:
    """A zero-byte file (a failed export): SQLite reads it as a database with no tables."""
    path = Path(path)
    path.write_bytes(b"")
    return path
