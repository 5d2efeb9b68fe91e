# ruff: noqa: E501
# (The CREATE TABLE texts below are verbatim copies of nsys's; their long lines are nsys's.)
"""The Nsight Systems SQLite export schema that cgprof's test inputs are written in.

One place for the table layouts, so that the unit-test builder (`tests/nsysdb.py`) and the
synthetic benchmark trace (`scripts/synth_trace.py`) cannot drift apart.

`schema(variant)` gives every table the builder can write, as `Table` objects whose `ddl()` is
the exact `CREATE TABLE` text nsys writes into `sqlite_master.sql`. Variants (see
shared/NSYS_SQLITE.md sections 3 and 6 for the evidence):

- ``"2025"`` (default): copied verbatim from ``sqlite_master`` of the real exports
  ``shared/nsys-samples/mlp8_node.sqlite`` and ``mlp8_graph.sqlite`` (Nsight Systems
  2025.3.2.0, export schema 3.20.3). Exception: ``CUPTI_ACTIVITY_KIND_MEMSET``, absent from
  those files, is the text of NVIDIA's SQLite schema reference (identical in its 2024.x and
  2026.4 editions).
- ``"2026"``: the 2025 tables plus what the 2026.4 schema reference (3.28.1) adds to
  ``CUPTI_ACTIVITY_KIND_KERNEL`` (``qmd*``, ``graphId``, ``cluster*``,
  ``sharedMemoryRequestedPercentage``, ``tensorSizeMinusOneElements TEXT NOT NULL``) and to
  ``TARGET_INFO_GPU`` (``numaNodeId``). Other tables are left as in 2025.
- ``"2022"``: *reconstructed*, no real 2022 export is at hand. The 2025 layout minus what
  arrived later (``greenContextId``; MEMCPY ``copyCount``; SYNCHRONIZATION
  ``deprecatedSyncType``, ``eventSyncId``; NVTX ``binaryData``), with the old node-level
  ``CUDA_GRAPH_EVENTS(..., graphNodeId NOT NULL, originalGraphNodeId)`` in place of
  ``CUDA_GRAPH_NODE_EVENTS`` (no graph-level graph table), kernel comments pointing at
  ``CUDA_GRAPH_EVENTS(graphNodeId)`` and at the misspelled ``ENUM_CUDA_KRENEL_LAUNCH_TYPE``,
  and ``EXPORT_META_DATA`` in place of ``META_DATA_EXPORT`` + ``META_DATA_CAPTURE``.
  Modelled on 2022.4.2 (schema 3.0.0, the first with ``ENUM_*`` tables).
- ``"2021"``: the 2022 column sets without ``CUPTI_ACTIVITY_KIND_KERNEL.mangledName``, as bare
  ``CREATE TABLE`` text without comments; no metadata, ``ENUM_*`` or ``PROCESSES`` table.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, replace
from functools import cache

VARIANTS = ("2021", "2022", "2025", "2026")


@dataclass(frozen=True)
class VariantInfo:
    """What a variant's metadata looks like; `None` where that era wrote nothing."""

    nsys_version: str | None
    schema_version: str | None
    export_meta_table: str | None  # META_DATA_EXPORT, EXPORT_META_DATA or None
    graph_mode_key: str | None  # META_DATA_CAPTURE key of --cuda-graph-trace; None: no table
    has_enums: bool


VARIANT_INFO: dict[str, VariantInfo] = {
    "2021": VariantInfo(None, None, None, None, False),
    "2022": VariantInfo("2022.4.2.1", "3.0.0", "EXPORT_META_DATA", None, True),
    "2025": VariantInfo(
        "2025.3.2.0", "3.20.3", "META_DATA_EXPORT", "PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE", True
    ),
    # nominal product version: the schema reference names the release (2026.4), not a build
    "2026": VariantInfo(
        "2026.4.0.0", "3.28.1", "META_DATA_EXPORT", "CUDA_GRAPH_TRACE_OPTIONS:MODE", True
    ),
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # INTEGER, TEXT or REAL
    not_null: bool = False
    primary_key: bool = False
    comment: str | None = None


@dataclass(frozen=True)
class Table:
    """One table: its columns in order, nsys's header comment, and how to print it."""

    name: str
    columns: tuple[Column, ...]
    header: str | None = None
    commented: bool = True  # False: bare one-line text, as 2021-era exports wrote it

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def ddl(self) -> str:
        """The `CREATE TABLE` text, laid out exactly as nsys lays it out."""
        if not self.commented:
            cols = ", ".join(
                c.name
                + " "
                + c.type
                + (" NOT NULL" if c.not_null else "")
                + (" PRIMARY KEY" if c.primary_key else "")
                for c in self.columns
            )
            return f"CREATE TABLE {self.name} ({cols})"
        lines = [f"CREATE TABLE {self.name} ("]
        if self.header is not None:
            lines += [f"    -- {self.header}", ""]
        for i, c in enumerate(self.columns):
            decl = c.type
            if c.not_null:
                decl = f"{c.type:<10}NOT NULL"
            if c.primary_key:
                decl += "   PRIMARY KEY"
            if i < len(self.columns) - 1:
                decl += ","
            line = f"    {c.name:<27} {decl}"
            if c.comment is not None:
                line = f"    {c.name:<27} {decl:<38} -- {c.comment}"
            lines.append(line)
        lines.append(")")
        return "\n".join(lines)

    def drop(self, *names: str) -> Table:
        missing = set(names) - set(self.column_names)
        if missing:
            raise KeyError(f"{self.name} has no column(s) {sorted(missing)}")
        return replace(self, columns=tuple(c for c in self.columns if c.name not in names))

    def recomment(self, name: str, comment: str) -> Table:
        self.column(name)  # KeyError if absent
        cols = tuple(replace(c, comment=comment) if c.name == name else c for c in self.columns)
        return replace(self, columns=cols)

    def add_after(self, after: str, *new: Column) -> Table:
        i = self.column_names.index(after) + 1
        return replace(self, columns=self.columns[:i] + tuple(new) + self.columns[i:])

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name}")


_COLUMN_RE = re.compile(
    r"^    (?P<name>\w+)\s+(?P<type>INTEGER|TEXT|REAL)(?P<nn>\s+NOT NULL)?(?P<pk>\s+PRIMARY KEY)?"
    r",?\s*(?:-- (?P<comment>.*))?$"
)


def parse_ddl(text: str) -> Table:
    """Parse nsys's commented `CREATE TABLE` layout back into a `Table` (inverse of `ddl()`)."""
    lines = text.split("\n")
    m = re.fullmatch(r"CREATE TABLE (\w+) \(", lines[0])
    if m is None or lines[-1] != ")":
        raise ValueError(f"not an nsys CREATE TABLE text: {lines[0]!r}")
    header = None
    columns: list[Column] = []
    for line in lines[1:-1]:
        if not line:
            continue
        if line.startswith("    -- ") and not columns:
            header = line[len("    -- ") :]
            continue
        cm = _COLUMN_RE.match(line)
        if cm is None:
            raise ValueError(f"cannot parse column line {line!r}")
        columns.append(
            Column(
                cm["name"],
                cm["type"],
                not_null=cm["nn"] is not None,
                primary_key=cm["pk"] is not None,
                comment=cm["comment"],
            )
        )
    return Table(m[1], tuple(columns), header)


_SAMPLE_DDL: dict[str, str] = {
    "StringIds": """\
CREATE TABLE StringIds (
    -- Consolidation of repetitive string values.

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- ID reference value.
    value                       TEXT      NOT NULL                     -- String value.
)""",
    "CUPTI_ACTIVITY_KIND_RUNTIME": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    correlationId               INTEGER,                               -- ID used to identify events that this function call has triggered.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    returnValue                 INTEGER   NOT NULL,                    -- Return value of the function call.
    callchainId                 INTEGER                                -- REFERENCES CUDA_CALLCHAINS(id)
)""",
    "CUPTI_ACTIVITY_KIND_MEMCPY": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes transferred (B).
    copyKind                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUDA_MEMCPY_OPER(id)
    deprecatedSrcId             INTEGER,                               -- Deprecated, use srcDeviceId instead.
    srcKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    dstKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    srcDeviceId                 INTEGER,                               -- Source device ID.
    srcContextId                INTEGER,                               -- Source context ID.
    dstDeviceId                 INTEGER,                               -- Destination device ID.
    dstContextId                INTEGER,                               -- Destination context ID.
    migrationCause              INTEGER,                               -- REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    virtualAddress              INTEGER,                               -- Virtual base address of the page/s being transferred.
    copyCount                   INTEGER                                -- The total number of memcopy operations traced in this record. In CUDA MemcpyBatchAsync APIs, multiple memcpy operations may be batched together for optimization purposes based on certain heuristics.
)""",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- Correlation ID of the synchronization API to which this result is associated.
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    deprecatedSyncType          INTEGER,                               -- Deprecated, use syncType instead. For older report, REFERENCES ENUM_CUPTI_SYNC_TYPE(id)
    syncType                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUPTI_SYNC_TYPE(id)
    eventId                     INTEGER   NOT NULL,                    -- Event ID for which the synchronization API is called.
    eventSyncId                 INTEGER                                -- CUDA Event Sync ID to link the synchronization API to associated event record API.
)""",
    "CUPTI_ACTIVITY_KIND_KERNEL": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    demangledName               INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Kernel function name w/ templates
    shortName                   INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Base kernel function name
    mangledName                 INTEGER,                               -- REFERENCES StringIds(id) -- Raw C++ mangled kernel function name
    launchType                  INTEGER,                               -- REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)
    cacheConfig                 INTEGER,                               -- REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)
    registersPerThread          INTEGER   NOT NULL,                    -- Number of registers required for each thread executing the kernel.
    gridX                       INTEGER   NOT NULL,                    -- X-dimension grid size.
    gridY                       INTEGER   NOT NULL,                    -- Y-dimension grid size.
    gridZ                       INTEGER   NOT NULL,                    -- Z-dimension grid size.
    blockX                      INTEGER   NOT NULL,                    -- X-dimension block size.
    blockY                      INTEGER   NOT NULL,                    -- Y-dimension block size.
    blockZ                      INTEGER   NOT NULL,                    -- Z-dimension block size.
    staticSharedMemory          INTEGER   NOT NULL,                    -- Static shared memory allocated for the kernel (B).
    dynamicSharedMemory         INTEGER   NOT NULL,                    -- Dynamic shared memory reserved for the kernel (B).
    localMemoryPerThread        INTEGER   NOT NULL,                    -- Amount of local memory reserved for each thread (B).
    localMemoryTotal            INTEGER   NOT NULL,                    -- Total amount of local memory reserved for the kernel (B).
    gridId                      INTEGER   NOT NULL,                    -- Unique grid ID of the kernel assigned at runtime.
    sharedMemoryExecuted        INTEGER,                               -- Shared memory size set by the driver.
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    sharedMemoryLimitConfig     INTEGER                                -- REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)
)""",
    "NVTX_EVENTS": """\
CREATE TABLE NVTX_EVENTS (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER,                               -- Event end timestamp (ns).
    eventType                   INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_TYPE(id)
    rangeId                     INTEGER,                               -- Correlation ID returned from a nvtxRangeStart call.
    category                    INTEGER,                               -- User-controlled ID that can be used to group events.
    color                       INTEGER,                               -- Encoded ARGB color value.
    text                        TEXT,                                  -- Explicit name/text (non-registered string)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    endGlobalTid                INTEGER,                               -- Serialized GlobalId.
    textId                      INTEGER,                               -- REFERENCES StringIds(id) -- Registered NVTX domain/string
    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    uint64Value                 INTEGER,                               -- One of possible payload value union members.
    int64Value                  INTEGER,                               -- One of possible payload value union members.
    doubleValue                 REAL,                                  -- One of possible payload value union members.
    uint32Value                 INTEGER,                               -- One of possible payload value union members.
    int32Value                  INTEGER,                               -- One of possible payload value union members.
    floatValue                  REAL,                                  -- One of possible payload value union members.
    jsonTextId                  INTEGER,                               -- One of possible payload value union members.
    jsonText                    TEXT,                                  -- One of possible payload value union members.
    binaryData                  TEXT                                   -- Binary payload. See docs for format.
)""",
    "CUDA_GRAPH_NODE_EVENTS": """\
CREATE TABLE CUDA_GRAPH_NODE_EVENTS (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    graphNodeId                 INTEGER   NOT NULL,                    -- Graph node ID.
    originalGraphNodeId         INTEGER                                -- Reference to the original graph node ID, if cloned node.
)""",
    "CUDA_GRAPH_EVENTS": """\
CREATE TABLE CUDA_GRAPH_EVENTS (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    graphId                     INTEGER,                               -- Graph ID.
    originalGraphId             INTEGER,                               -- Reference to the original graph ID, if cloned.
    graphExecId                 INTEGER                                -- Executable graph ID.
)""",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    graphId                     INTEGER   NOT NULL,                    -- REFERENCES CUDA_GRAPH_EVENTS(graphId)
    graphExecId                 INTEGER   NOT NULL                     -- REFERENCES CUDA_GRAPH_EVENTS(graphExecId)
)""",
    "PROCESSES": """\
CREATE TABLE PROCESSES (
    -- Names and identifiers of processes captured in the report.

    globalPid                   INTEGER,                               -- Serialized GlobalId.
    pid                         INTEGER,                               -- The process ID.
    name                        TEXT                                   -- The process name.
)""",
    "ThreadNames": """\
CREATE TABLE ThreadNames (
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Thread name
    priority                    INTEGER,                               -- Priority of the thread.
    globalTid                   INTEGER                                -- Serialized GlobalId.
)""",
    "TARGET_INFO_GPU": """\
CREATE TABLE TARGET_INFO_GPU (
    vmId                        INTEGER   NOT NULL,                    -- Serialized GlobalId.
    id                          INTEGER   NOT NULL,                    -- Device ID.
    name                        TEXT,                                  -- Device name.
    busLocation                 TEXT,                                  -- PCI bus location.
    isDiscrete                  INTEGER,                               -- True if discrete, false if integrated.
    l2CacheSize                 INTEGER,                               -- Size of L2 cache (B).
    totalMemory                 INTEGER,                               -- Total amount of memory on the device (B).
    memoryBandwidth             INTEGER,                               -- Amount of memory transferred (B).
    clockRate                   INTEGER,                               -- Clock frequency (Hz).
    smCount                     INTEGER,                               -- Number of multiprocessors on the device.
    pwGpuId                     INTEGER,                               -- PerfWorks GPU ID.
    uuid                        TEXT,                                  -- Device UUID.
    luid                        INTEGER,                               -- Device LUID.
    chipName                    TEXT,                                  -- Chip name.
    cuDevice                    INTEGER,                               -- CUDA device ID.
    ctxswDevPath                TEXT,                                  -- GPU context switch device node path.
    ctrlDevPath                 TEXT,                                  -- GPU control device node path.
    revision                    INTEGER,                               -- Revision number.
    nodeMask                    INTEGER,                               -- Device node mask.
    constantMemory              INTEGER,                               -- Memory available on device for __constant__ variables (B).
    maxIPC                      INTEGER,                               -- Maximum instructions per count.
    maxRegistersPerBlock        INTEGER,                               -- Maximum number of 32-bit registers available per block.
    maxShmemPerBlock            INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerBlockOptin       INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerSm               INTEGER,                               -- Maximum shared memory available per multiprocessor (B).
    maxRegistersPerSm           INTEGER,                               -- Maximum number of 32-bit registers available per multiprocessor.
    threadsPerWarp              INTEGER,                               -- Warp size in threads.
    asyncEngines                INTEGER,                               -- Number of asynchronous engines.
    maxWarpsPerSm               INTEGER,                               -- Maximum number of warps per multiprocessor.
    maxBlocksPerSm              INTEGER,                               -- Maximum number of blocks per multiprocessor.
    maxThreadsPerBlock          INTEGER,                               -- Maximum number of threads per block.
    maxBlockDimX                INTEGER,                               -- Maximum X-dimension of a block.
    maxBlockDimY                INTEGER,                               -- Maximum Y-dimension of a block.
    maxBlockDimZ                INTEGER,                               -- Maximum Z-dimension of a block.
    maxGridDimX                 INTEGER,                               -- Maximum X-dimension of a grid.
    maxGridDimY                 INTEGER,                               -- Maximum Y-dimension of a grid.
    maxGridDimZ                 INTEGER,                               -- Maximum Z-dimension of a grid.
    computeMajor                INTEGER,                               -- Major compute capability version number.
    computeMinor                INTEGER,                               -- Minor compute capability version number.
    smMajor                     INTEGER,                               -- Major multiprocessor version number.
    smMinor                     INTEGER                                -- Minor multiprocessor version number.
)""",
    "ENUM_NSYS_EVENT_TYPE": """\
CREATE TABLE ENUM_NSYS_EVENT_TYPE (
    -- Nsys event type labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)""",
    "META_DATA_CAPTURE": """\
CREATE TABLE META_DATA_CAPTURE (
    -- information about nsys capture parameters

    name                        TEXT      NOT NULL,                    -- Name of meta-data record
    value                       TEXT                                   -- Value of meta-data record
)""",
    "META_DATA_EXPORT": """\
CREATE TABLE META_DATA_EXPORT (
    -- information about nsys export process

    name                        TEXT      NOT NULL,                    -- Name of meta-data record
    value                       TEXT                                   -- Value of meta-data record
)""",
}

# ENUM table name -> (header comment, rows (id, name, label)); rows copied from the samples.
_ENUMS: dict[str, tuple[str, list[tuple[int, str, str]]]] = {
    "ENUM_NSYS_EVENT_TYPE": (
        "Nsys event type labels",
        [
            (0, 'Unknown', 'Unknown'),
            (1, 'CpuCycles', 'CpuCycles'),
            (2, 'Instructions', 'Instructions'),
            (3, 'CacheReferences', 'CacheReferences'),
            (4, 'L1CacheDataWriteMisses', 'L1CacheDataWriteMisses'),
            (5, 'L1CacheDataReadMisses', 'L1CacheDataReadMisses'),
            (6, 'L1CacheInstructionMisses', 'L1CacheInstructionMisses'),
            (7, 'L2CacheDataWriteMisses', 'L2CacheDataWriteMisses'),
            (8, 'L2CacheDataReadMisses', 'L2CacheDataReadMisses'),
            (9, 'L2CacheInstructionMisses', 'L2CacheInstructionMisses'),
            (10, 'BranchInstructions', 'BranchInstructions'),
            (11, 'BranchMisses', 'BranchMisses'),
            (12, 'BusCycles', 'BusCycles'),
            (13, 'CpuClock', 'CpuClock'),
            (14, 'TaskClock', 'TaskClock'),
            (15, 'PageFault', 'PageFault'),
            (16, 'ContextSwitches', 'ContextSwitches'),
            (17, 'CpuMigrations', 'CpuMigrations'),
            (18, 'PageFaultsMin', 'PageFaultsMin'),
            (19, 'PageFaultsMax', 'PageFaultsMax'),
            (20, 'AlignmentFaults', 'AlignmentFaults'),
            (21, 'EmulationFaults', 'EmulationFaults'),
            (22, 'ThreadState', 'ThreadState'),
            (23, 'Frames', 'Frames'),
            (24, 'Annotations', 'Annotations'),
            (25, 'SchedSwitch', 'SchedSwitch'),
            (26, 'SchedWakeup', 'SchedWakeup'),
            (27, 'Command', 'Command'),
            (28, 'Mmap', 'Mmap'),
            (29, 'MemUsage', 'MemUsage'),
            (30, 'Emc', 'Emc'),
            (31, 'Composite', 'Composite'),
            (32, 'NvtxEvents', 'NvtxEvents'),
            (33, 'NvtxCategory', 'NvtxCategory'),
            (34, 'NvtxMark', 'NvtxMark'),
            (35, 'NvtxPushRange', 'NvtxPushRange'),
            (36, 'NvtxPopRange', 'NvtxPopRange'),
            (37, 'NvtxStartRange', 'NvtxStartRange'),
            (38, 'NvtxEndRange', 'NvtxEndRange'),
            (39, 'NvtxThread', 'NvtxThread'),
            (40, 'PowerRate', 'PowerRate'),
            (41, 'Sched', 'Sched'),
            (42, 'CpuCyclesSelf', 'CpuCyclesSelf'),
            (43, 'CpuCyclesTotal', 'CpuCyclesTotal'),
            (44, 'CpuCyclesSelfPlus', 'CpuCyclesSelfPlus'),
            (45, 'Cuda', 'Cuda'),
            (46, 'CudaDevice', 'CudaDevice'),
            (47, 'TraceProcess', 'TraceProcess'),
            (48, 'TraceFunctions', 'TraceFunctions'),
            (49, 'Diagnostic', 'Diagnostic'),
            (50, 'GlWorkload', 'GlWorkload'),
            (51, 'BandwidthUsage', 'BandwidthUsage'),
            (52, 'KhrDebugMark', 'KhrDebugMark'),
            (53, 'KhrDebugPushRange', 'KhrDebugPushRange'),
            (54, 'KhrDebugPopRange', 'KhrDebugPopRange'),
            (55, 'KhrDebugGpuMark', 'KhrDebugGpuMark'),
            (56, 'KhrDebugGpuPushRange', 'KhrDebugGpuPushRange'),
            (57, 'KhrDebugGpuPopRange', 'KhrDebugGpuPopRange'),
            (58, 'GpuCtxsw', 'GpuCtxsw'),
            (59, 'NvtxPushPopRange', 'NvtxPushPopRange'),
            (60, 'NvtxStartEndRange', 'NvtxStartEndRange'),
            (61, 'ProfTime', 'ProfTime'),
            (62, 'KhrDebugPushPopRange', 'KhrDebugPushPopRange'),
            (63, 'KhrDebugGpuPushPopRange', 'KhrDebugGpuPushPopRange'),
            (64, 'NvtxtCategory', 'NvtxtCategory'),
            (65, 'NvtxtMark', 'NvtxtMark'),
            (66, 'NvtxtPushRange', 'NvtxtPushRange'),
            (67, 'NvtxtPopRange', 'NvtxtPopRange'),
            (68, 'NvtxtStartRange', 'NvtxtStartRange'),
            (69, 'NvtxtEndRange', 'NvtxtEndRange'),
            (70, 'NvtxtPushPopRange', 'NvtxtPushPopRange'),
            (71, 'NvtxtStartEndRange', 'NvtxtStartEndRange'),
            (72, 'NvtxtMetaThread', 'NvtxtMetaThread'),
            (73, 'NvtxtMetaProcess', 'NvtxtMetaProcess'),
            (74, 'NvtxtMetaFileDisplay', 'NvtxtMetaFileDisplay'),
            (75, 'NvtxDomainCreate', 'NvtxDomainCreate'),
            (76, 'NvtxDomainDestroy', 'NvtxDomainDestroy'),
            (77, 'NvnGpuCmdBuf', 'NvnGpuCmdBuf'),
            (78, 'TraceVSync', 'TraceVSync'),
            (79, 'CudaDeviceKernel', 'CudaDeviceKernel'),
            (80, 'CudaDeviceMemory', 'CudaDeviceMemory'),
            (81, 'Pmu', 'Pmu'),
            (82, 'NvnGpuDraw', 'NvnGpuDraw'),
            (83, 'NvnGpuCompute', 'NvnGpuCompute'),
            (84, 'NvnGpuDebug', 'NvnGpuDebug'),
            (85, 'OS runtime libraries', 'OS runtime libraries'),
            (86, 'CuDNN', 'CuDNN'),
            (87, 'CuBLAS', 'CuBLAS'),
            (88, 'NvMedia', 'NvMedia'),
            (89, 'OpenACC', 'OpenACC'),
            (90, 'Correlation', 'Correlation'),
            (91, 'DX12', 'DX12'),
            (92, 'DX12Workload', 'DX12Workload'),
            (93, 'PmuRawEvent', 'PmuRawEvent'),
            (94, 'GraphicsFrame', 'GraphicsFrame'),
            (95, 'Vulkan', 'Vulkan'),
            (96, 'VulkanWorkload', 'VulkanWorkload'),
            (97, 'NvtxNameCudaDevice', 'NvtxNameCudaDevice'),
            (98, 'NvtxNameCudaContext', 'NvtxNameCudaContext'),
            (99, 'NvtxNameCudaStream', 'NvtxNameCudaStream'),
            (100, 'SystemEvent', 'SystemEvent'),
            (101, 'GpuMemoryEvent', 'GpuMemoryEvent'),
            (102, 'DX12CreateObject', 'DX12CreateObject'),
            (103, 'VulkanCreateObject', 'VulkanCreateObject'),
            (104, 'UnitTraceEvent', 'UnitTraceEvent'),
            (105, 'CustomETWEvent', 'CustomETWEvent'),
            (106, 'CudaSyncEvent', 'CudaSyncEvent'),
            (107, 'SLIEvent', 'SLIEvent'),
            (108, 'CudaBacktrace', 'CudaBacktrace'),
            (109, 'WddmEvent', 'WddmEvent'),
            (110, 'DX11', 'DX11'),
            (111, 'DX11CreateObject', 'DX11CreateObject'),
            (112, 'DXGI', 'DXGI'),
            (113, 'CudaGraphNodeCreation', 'CudaGraphNodeCreation'),
            (114, 'OpenMP', 'OpenMP'),
            (115, 'UncorePmuEvent', 'UncorePmuEvent'),
            (116, 'UncorePmuCarmel', 'UncorePmuCarmel'),
            (117, 'CudaDeviceMemoryUsage', 'CudaDeviceMemoryUsage'),
            (118, 'ETWDxgKrnlEvent', 'ETWDxgKrnlEvent'),
            (119, 'CudaUvmCpuPageFaultEvent', 'CudaUvmCpuPageFaultEvent'),
            (120, 'CudaUvmGpuPageFaultEvent', 'CudaUvmGpuPageFaultEvent'),
            (121, 'NICMetricsValuesEvent', 'NICMetricsValuesEvent'),
            (122, 'NICMetricsListEvent', 'NICMetricsListEvent'),
            (123, 'InterruptHandler', 'InterruptHandler'),
            (124, 'NVENC', 'NVENC'),
            (125, 'NVDEC', 'NVDEC'),
            (126, 'nvJPEG', 'nvJPEG'),
            (127, 'CudaEventRecord', 'CudaEventRecord'),
            (128, 'PerfEventCountEvent', 'PerfEventCountEvent'),
            (129, 'CudaDeviceMemoryPool', 'CudaDeviceMemoryPool'),
            (130, 'CudaDeviceGraph', 'CudaDeviceGraph'),
            (131, 'CudaGraphExecCreation', 'CudaGraphExecCreation'),
            (132, 'CudaGraphCreation', 'CudaGraphCreation'),
            (133, 'CudaGraphClone', 'CudaGraphClone'),
            (134, 'GpuMemoryTransferEvent', 'GpuMemoryTransferEvent'),
            (135, 'GlTrace', 'GlTrace'),
            (136, 'GpuVideoEngineWorkload', 'GpuVideoEngineWorkload'),
            (137, 'IBSwitchMetricsValuesEvent', 'IBSwitchMetricsValuesEvent'),
            (138, 'GenericEvent', 'GenericEvent'),
            (139, 'UncorePmuT23xScf', 'UncorePmuT23xScf'),
            (140, 'UncorePmuT23xDsu', 'UncorePmuT23xDsu'),
            (141, 'IBSwitchCongestionEvent', 'IBSwitchCongestionEvent'),
            (142, 'CudaDeviceMemcpy', 'CudaDeviceMemcpy'),
            (143, 'PerfMetricValueEvent', 'PerfMetricValueEvent'),
            (144, 'OpenXREvent', 'OpenXREvent'),
            (145, 'TegraInternalEvent', 'TegraInternalEvent'),
            (146, 'TraceStartFinish', 'TraceStartFinish'),
            (147, 'Syscall', 'Syscall'),
            (148, 'CudaConfidentialComputeKeyRotation', 'CudaConfidentialComputeKeyRotation'),
            (149, 'CudaGraphExecNodeSetParams', 'CudaGraphExecNodeSetParams'),
        ],
    ),
    "ENUM_NSYS_EVENT_CLASS": (
        "Nsys event class labels",
        [
            (0, 'TRACE_PROCESS_EVENT_CUDA_RUNTIME', 'CUDA runtime'),
            (1, 'TRACE_PROCESS_EVENT_CUDA_DRIVER', 'CUDA driver'),
            (2, 'TRACE_PROCESS_EVENT_GL', 'GL'),
            (3, 'TRACE_PROCESS_EVENT_TSP_OVERHEAD', 'TSP overhead'),
            (4, 'TRACE_PROCESS_EVENT_GL_DEBUG', 'GL debug'),
            (5, 'TRACE_PROCESS_EVENT_GL_WORKLOAD', 'GL workload'),
            (6, 'TRACE_PROCESS_EVENT_NVTX_START', 'NVTX start'),
            (7, 'TRACE_PROCESS_EVENT_NVTX_FINISH', 'NVTX finish'),
            (8, 'TRACE_PROCESS_EVENT_GL_START', 'GL start'),
            (9, 'TRACE_PROCESS_EVENT_GL_FINISH', 'GL finish'),
            (10, 'TRACE_PROCESS_EVENT_CUDA_START', 'CUDA start'),
            (11, 'TRACE_PROCESS_EVENT_CUDA_FINISH', 'CUDA finish'),
            (12, 'TRACE_PROCESS_EVENT_CUDA_INIT_ERROR', 'CUDA init error'),
            (13, 'TRACE_PROCESS_EVENT_CUDA_EGL_DRIVER', 'CUDA EGL driver'),
            (18, 'TRACE_PROCESS_EVENT_VSYNC', 'Vsync'),
            (26, 'TRACE_PROCESS_EVENT_CUDA_API', 'CUDA API'),
            (27, 'TRACE_PROCESS_EVENT_OS_RUNTIME', 'OSRT runtime'),
            (28, 'TRACE_PROCESS_EVENT_CUDNN', 'cuDNN'),
            (29, 'TRACE_PROCESS_EVENT_CUBLAS', 'cuBLAS'),
            (31, 'TRACE_PROCESS_EVENT_OS_RUNTIME_START', 'OSRT start'),
            (32, 'TRACE_PROCESS_EVENT_OS_RUNTIME_FINISH', 'OSRT finish'),
            (33, 'TRACE_PROCESS_EVENT_CUDNN_START', 'cuDNN start'),
            (34, 'TRACE_PROCESS_EVENT_CUDNN_FINISH', 'cuDNN finish'),
            (35, 'TRACE_PROCESS_EVENT_CUBLAS_START', 'cuBLAS start'),
            (36, 'TRACE_PROCESS_EVENT_CUBLAS_FINISH', 'cuBLAS finish'),
            (37, 'TRACE_PROCESS_EVENT_THREAD_BLOCK', 'Thread block'),
            (38, 'TRACE_PROCESS_EVENT_NVMEDIA', 'NVmedia'),
            (39, 'TRACE_PROCESS_EVENT_NVMEDIA_START', 'NVmedia start'),
            (40, 'TRACE_PROCESS_EVENT_NVMEDIA_FINISH', 'NVmedia finish'),
            (41, 'TRACE_PROCESS_EVENT_DX12_API', 'DX12 API'),
            (42, 'TRACE_PROCESS_EVENT_DX12_WORKLOAD', 'DX12 workload'),
            (43, 'TRACE_PROCESS_EVENT_DX12_START', 'DX12 start'),
            (44, 'TRACE_PROCESS_EVENT_DX12_FINISH', 'DX12 finish'),
            (45, 'TRACE_PROCESS_EVENT_OPENACC_START', 'OpenACC start'),
            (46, 'TRACE_PROCESS_EVENT_OPENACC_FINISH', 'OpenACC finish'),
            (47, 'TRACE_PROCESS_EVENT_OPENACC_INIT_ERROR', 'OpenACC init error'),
            (48, 'TRACE_PROCESS_EVENT_OPENACC', 'OpenACC'),
            (49, 'TRACE_PROCESS_EVENT_CPU_FPS', 'CPU FPS'),
            (50, 'TRACE_PROCESS_EVENT_GPU_FPS', 'GPU FPS'),
            (51, 'TRACE_PROCESS_EVENT_GL_MULTI_ERROR', 'GL multi-error'),
            (52, 'TRACE_PROCESS_EVENT_DX12_DISPLAY', 'DX12 display'),
            (53, 'TRACE_PROCESS_EVENT_VULKAN_API', 'Vulkan API'),
            (54, 'TRACE_PROCESS_EVENT_VULKAN_WORKLOAD', 'Vulkan workload'),
            (55, 'TRACE_PROCESS_EVENT_VULKAN_START', 'Vulkan start'),
            (56, 'TRACE_PROCESS_EVENT_VULKAN_FINISH', 'Vulkan finish'),
            (57, 'TRACE_PROCESS_EVENT_SYSTEM_EVENT', 'System event'),
            (58, 'TRACE_PROCESS_EVENT_GPU_MEMORY', 'GPU memory'),
            (59, 'TRACE_PROCESS_EVENT_DX12_CREATE_OBJECT', 'DX12 create object'),
            (60, 'TRACE_PROCESS_EVENT_VULKAN_CREATE_OBJECT', 'Vulkan create object'),
            (61, 'TRACE_PROCESS_EVENT_CUSTOM_ETW_TRACE', 'Custom ETW trace'),
            (62, 'TRACE_PROCESS_EVENT_SLI', 'SLI'),
            (63, 'TRACE_PROCESS_EVENT_SLI_START', 'SLI start'),
            (64, 'TRACE_PROCESS_EVENT_SLI_FINISH', 'SLI finish'),
            (65, 'TRACE_PROCESS_EVENT_DX12_DEBUG_API', 'DX12 debug API'),
            (66, 'TRACE_PROCESS_EVENT_VULKAN_DEBUG_API', 'Vulkan debug API'),
            (67, 'TRACE_PROCESS_EVENT_CUDABACKTRACE', 'CUDA backtrace'),
            (68, 'TRACE_PROCESS_EVENT_CUDABACKTRACE_START', 'CUDA backtrace start'),
            (69, 'TRACE_PROCESS_EVENT_CUDABACKTRACE_FINISH', 'CUDA backtrace finish'),
            (70, 'TRACE_PROCESS_EVENT_WDDM', 'WDDM'),
            (71, 'TRACE_PROCESS_EVENT_DX11_API', 'DX11 API'),
            (72, 'TRACE_PROCESS_EVENT_DX11_START', 'DX11 start'),
            (73, 'TRACE_PROCESS_EVENT_DX11_FINISH', 'DX11 finish'),
            (74, 'TRACE_PROCESS_EVENT_DX11_CREATE_OBJECT', 'DX11 create object'),
            (75, 'TRACE_PROCESS_EVENT_DX11_DEBUG_API', 'DX11 debug API'),
            (76, 'TRACE_PROCESS_EVENT_DXCOMMON_API', 'DX common API'),
            (77, 'TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION', 'CUDA graph node creation'),
            (78, 'TRACE_PROCESS_EVENT_OPENMP', 'OpenMP'),
            (79, 'TRACE_PROCESS_EVENT_OPENMP_START', 'OpenMP start'),
            (80, 'TRACE_PROCESS_EVENT_OPENMP_FINISH', 'OpenMP finish'),
            (81, 'TRACE_PROCESS_EVENT_NVAPI', 'NV API'),
            (82, 'TRACE_PROCESS_EVENT_ETWDXGKRNL', 'ETW DXG KRNL'),
            (83, 'TRACE_PROCESS_EVENT_NVENC', 'NVENC'),
            (84, 'TRACE_PROCESS_EVENT_NVENC_START', 'NVENC start'),
            (85, 'TRACE_PROCESS_EVENT_NVENC_FINISH', 'NVENC finish'),
            (86, 'TRACE_PROCESS_EVENT_NVDEC', 'NVDEC'),
            (87, 'TRACE_PROCESS_EVENT_NVDEC_START', 'NVDEC start'),
            (88, 'TRACE_PROCESS_EVENT_NVDEC_FINISH', 'NVDEC finish'),
            (89, 'TRACE_PROCESS_EVENT_NVJPEG', 'nvJPEG'),
            (90, 'TRACE_PROCESS_EVENT_NVJPEG_START', 'nvJPEG start'),
            (91, 'TRACE_PROCESS_EVENT_NVJPEG_FINISH', 'nvJPEG finish'),
            (92, 'TRACE_PROCESS_EVENT_DX12_BATCH_WORKLOAD', 'DX12 batch workload'),
            (93, 'TRACE_PROCESS_EVENT_VULKAN_BATCH_WORKLOAD', 'Vulkan batch workload'),
            (94, 'TRACE_PROCESS_EVENT_CUDA_GRAPHEXEC_CREATION', 'CUDA graph exec creation'),
            (95, 'TRACE_PROCESS_EVENT_CUDA_GRAPH_CREATION', 'CUDA graph creation'),
            (96, 'TRACE_PROCESS_EVENT_CUDA_GRAPH_CLONE', 'CUDA graph clone'),
            (107, 'TRACE_PROCESS_EVENT_SYSCALL', 'Syscall'),
            (108, 'TRACE_PROCESS_EVENT_TEGRA_INTERNAL', 'Tegra Internal API'),
            (109, 'TRACE_PROCESS_EVENT_TEGRA_INTERNAL_START', 'Tegra Internal API start'),
            (110, 'TRACE_PROCESS_EVENT_TEGRA_INTERNAL_FINISH', 'Tegra Internal API finish'),
        ],
    ),
    "ENUM_CUDA_MEMCPY_OPER": (
        "CUDA memcpy operation labels",
        [
            (0, 'CUDA_MEMCPY_KIND_UNKNOWN', 'Unknown'),
            (1, 'CUDA_MEMCPY_KIND_HTOD', 'Host-to-Device'),
            (2, 'CUDA_MEMCPY_KIND_DTOH', 'Device-to-Host'),
            (3, 'CUDA_MEMCPY_KIND_HTOA', 'Host-to-Array'),
            (4, 'CUDA_MEMCPY_KIND_ATOH', 'Array-to-Host'),
            (5, 'CUDA_MEMCPY_KIND_ATOA', 'Array-to-Array'),
            (6, 'CUDA_MEMCPY_KIND_ATOD', 'Array-to-Device'),
            (7, 'CUDA_MEMCPY_KIND_DTOA', 'Device-to-Array'),
            (8, 'CUDA_MEMCPY_KIND_DTOD', 'Device-to-Device'),
            (9, 'CUDA_MEMCPY_KIND_HTOH', 'Host-to-Host'),
            (10, 'CUDA_MEMCPY_KIND_PTOP', 'Peer-to-Peer'),
            (11, 'CUDA_MEMCPY_KIND_UVM_HTOD', 'Unified Host-to-Device'),
            (12, 'CUDA_MEMCPY_KIND_UVM_DTOH', 'Unified Device-to-Host'),
            (13, 'CUDA_MEMCPY_KIND_UVM_DTOD', 'Unified Device-to-Device'),
        ],
    ),
    "ENUM_CUDA_MEM_KIND": (
        "CUDA memory kind labels",
        [
            (0, 'CUDA_MEMOPR_MEMORY_KIND_PAGEABLE', 'Pageable'),
            (1, 'CUDA_MEMOPR_MEMORY_KIND_PINNED', 'Pinned'),
            (2, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE', 'Device'),
            (3, 'CUDA_MEMOPR_MEMORY_KIND_ARRAY', 'Array'),
            (4, 'CUDA_MEMOPR_MEMORY_KIND_MANAGED', 'Managed'),
            (5, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC', 'Device Static'),
            (6, 'CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC', 'Managed Static'),
            (7, 'CUDA_MEMOPR_MEMORY_KIND_UNKNOWN', 'Unknown'),
        ],
    ),
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": (
        "CUDA kernel launch type labels",
        [
            (0, 'CUDA_KERNEL_LAUNCH_TYPE_UNKNOWN', 'Unknown'),
            (1, 'CUDA_KERNEL_LAUNCH_TYPE_REGULAR', 'Regular'),
            (2, 'CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE', 'Coop Single Device'),
            (3, 'CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE', 'Coop Multi Device'),
        ],
    ),
    "ENUM_CUDA_FUNC_CACHE_CONFIG": (
        "CUDA function cache config labels",
        [
            (0, 'CU_FUNC_CACHE_PREFER_NONE', 'None'),
            (1, 'CU_FUNC_CACHE_PREFER_SHARED', 'Shared'),
            (2, 'CU_FUNC_CACHE_PREFER_L1', 'L1'),
            (3, 'CU_FUNC_CACHE_PREFER_EQUAL', 'Equal'),
        ],
    ),
    "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": (
        "CUDA shared memory limit config labels",
        [
            (0, 'CUDA_SHARED_MEM_LIMIT_DEFAULT', 'Default'),
            (1, 'CUDA_SHARED_MEM_LIMIT_OPTIN', 'Opt in'),
        ],
    ),
    "ENUM_CUPTI_STREAM_TYPE": (
        "CUPTI stream type labels",
        [
            (0, 'CUPTI_ACTIVITY_STREAM_CREATE_FLAG_UNKNOWN', 'Unknown stream type'),
            (1, 'CUPTI_ACTIVITY_STREAM_CREATE_FLAG_DEFAULT', 'Default stream'),
            (2, 'CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING', 'Non-blocking stream'),
            (3, 'CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NULL', 'Null stream'),
        ],
    ),
    "ENUM_CUPTI_SYNC_TYPE": (
        "CUPTI synchronization type labels",
        [
            (0, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN', 'Unknown'),
            (1, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE', 'Event sync'),
            (2, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT', 'Stream wait sync'),
            (3, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE', 'Stream sync'),
            (4, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE', 'Context sync'),
        ],
    ),
}


# CUPTI_ACTIVITY_KIND_MEMSET is not in the 2025.3 samples; NVIDIA's schema reference text
# (2024.x and 2026.4 editions agree).
_SAMPLE_DDL["CUPTI_ACTIVITY_KIND_MEMSET"] = """\
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    value                       INTEGER   NOT NULL,                    -- Value assigned to memory.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes set (B).
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    memKind                     INTEGER                                -- REFERENCES ENUM_CUDA_MEM_KIND(id)
)"""

# Tables whose text comes straight from the samples (the test suite compares them).
SAMPLE_TABLES = tuple(n for n in _SAMPLE_DDL if n != "CUPTI_ACTIVITY_KIND_MEMSET")

# Creation order: the order of sqlite_master in the 2025.3 samples (MEMSET guessed after MEMCPY).
TABLE_ORDER = (
    "StringIds",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "NVTX_EVENTS",
    "CUDA_GRAPH_NODE_EVENTS",
    "CUDA_GRAPH_EVENTS",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "PROCESSES",
    "ThreadNames",
    "TARGET_INFO_GPU",
)

_GREEN = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)


def _enum_tables(kernel_launch_enum: str) -> dict[str, Table]:
    template = parse_ddl(_SAMPLE_DDL["ENUM_NSYS_EVENT_TYPE"])
    out = {}
    for name, (header, _rows) in _ENUMS.items():
        if name == "ENUM_CUDA_KERNEL_LAUNCH_TYPE":
            name = kernel_launch_enum
        out[name] = replace(template, name=name, header=header)
    return out


def enum_rows(table: str) -> list[tuple[int, str, str]]:
    """The (id, name, label) rows of an ENUM table (either spelling of the launch-type one)."""
    if table == "ENUM_CUDA_KRENEL_LAUNCH_TYPE":
        table = "ENUM_CUDA_KERNEL_LAUNCH_TYPE"
    return list(_ENUMS[table][1])


@cache
def schema(variant: str = "2025") -> dict[str, Table]:
    """Every table the builder can write in `variant`: name -> Table, in creation order.

    Metadata and ENUM tables come last, as in real files."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    t = {n: parse_ddl(_SAMPLE_DDL[n]) for n in TABLE_ORDER}
    meta = {n: parse_ddl(_SAMPLE_DDL[n]) for n in ("META_DATA_CAPTURE", "META_DATA_EXPORT")}
    if variant == "2026":
        t["CUPTI_ACTIVITY_KIND_KERNEL"] = t["CUPTI_ACTIVITY_KIND_KERNEL"].add_after(
            "sharedMemoryLimitConfig",
            Column("qmdBulkReleaseDone", "INTEGER", comment="QMD bulk release done timestamp from CWD events."),
            Column("qmdPreexitDone", "INTEGER", comment="QMD pre-exit done timestamp from CWD events."),
            Column("qmdLastCtaDone", "INTEGER", comment="QMD last CTA done timestamp from CWD events."),
            Column("graphId", "INTEGER", comment="Kernel graph ID."),
            Column("clusterX", "INTEGER", comment="Cluster X dimension."),
            Column("clusterY", "INTEGER", comment="Cluster Y dimension."),
            Column("clusterZ", "INTEGER", comment="Cluster Z dimension."),
            Column("clusterSchedulingPolicy", "INTEGER", comment="Cluster scheduling policy."),
            Column("maxPotentialClusterSize", "INTEGER", comment="Maximum potential cluster size."),
            Column("maxActiveClusters", "INTEGER", comment="Maximum active clusters."),
            Column("sharedMemoryRequestedPercentage", "INTEGER", comment="Shared memory requested percentage."),
            Column("tensorSizeMinusOneElements", "TEXT", not_null=True, comment="TMA descriptor tensor size minus one elements array."),
        )
        t["TARGET_INFO_GPU"] = t["TARGET_INFO_GPU"].add_after(
            "smMinor", Column("numaNodeId", "INTEGER", comment="NUMA node ID.")
        )
        return {**t, **_enum_tables("ENUM_CUDA_KERNEL_LAUNCH_TYPE"), **meta}
    if variant == "2025":
        return {**t, **_enum_tables("ENUM_CUDA_KERNEL_LAUNCH_TYPE"), **meta}

    # 2022 and 2021: older layouts (reconstructed, see the module docstring)
    for name in _GREEN:
        t[name] = t[name].drop("greenContextId")
    old_ref = "REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)"
    for name in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        t[name] = t[name].recomment("graphNodeId", old_ref)
    t["CUPTI_ACTIVITY_KIND_KERNEL"] = t["CUPTI_ACTIVITY_KIND_KERNEL"].recomment(
        "launchType", "REFERENCES ENUM_CUDA_KRENEL_LAUNCH_TYPE(id)"
    )
    t["CUPTI_ACTIVITY_KIND_MEMCPY"] = t["CUPTI_ACTIVITY_KIND_MEMCPY"].drop("copyCount")
    t["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"] = t["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].drop(
        "deprecatedSyncType", "eventSyncId"
    )
    t["NVTX_EVENTS"] = t["NVTX_EVENTS"].drop("binaryData")
    # before 2024.5 CUDA_GRAPH_EVENTS held the node events; there was no graph-level table
    t["CUDA_GRAPH_EVENTS"] = replace(t.pop("CUDA_GRAPH_NODE_EVENTS"), name="CUDA_GRAPH_EVENTS")
    # (guess) the old metadata table is laid out like its successor
    legacy_meta = {"EXPORT_META_DATA": replace(meta["META_DATA_EXPORT"], name="EXPORT_META_DATA")}
    if variant == "2022":
        return {**t, **_enum_tables("ENUM_CUDA_KRENEL_LAUNCH_TYPE"), **legacy_meta}

    # 2021: no mangledName, no PROCESSES, no ENUM or metadata tables, bare CREATE TABLE text
    t["CUPTI_ACTIVITY_KIND_KERNEL"] = t["CUPTI_ACTIVITY_KIND_KERNEL"].drop("mangledName")
    del t["PROCESSES"]
    return {n: replace(tab, commented=False) for n, tab in t.items()}


def create_table(conn: sqlite3.Connection, name: str, variant: str = "2025") -> Table:
    """Create table `name` as nsys `variant` does (no indexes, as nsys); return its layout."""
    tables = schema(variant)
    if name not in tables:
        raise KeyError(f"variant {variant!r} has no table {name}")
    conn.execute(tables[name].ddl())
    return tables[name]
