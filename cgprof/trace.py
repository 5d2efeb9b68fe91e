"""Load an Nsight Systems SQLite export, read-only, into pandas DataFrames.

`load(path)` probes which tables and columns exist (they vary with the nsys version and with
what was traced), reads only what cgprof needs, resolves names through ``StringIds``, splits
``globalTid``/``globalPid`` into ``pid``/``tid``, and keeps every time an integer nanosecond.

Column conventions of every DataFrame on :class:`Trace` (all times int64 ns on the session
timeline shared by CPU and GPU events; the timeline does not start at 0):

* ``start_ns``, ``end_ns``, ``dur_ns``;
* ``pid``, ``tid`` decoded from nsys's packed ids; ``global_tid`` kept for exact thread keys;
* ``corr_id``: CUPTI correlation id, unique only per process: join on (``pid``, ``corr_id``).
"""

from __future__ import annotations

import sqlite3
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof import validate as V
from cgprof.errors import TraceError

SQLITE_MAGIC = b"SQLite format 3\x00"

Progress = Callable[[str], None]


@dataclass
class TraceMeta:
    """Facts about the export itself."""

    path: Path
    nsys_version: str | None
    schema_version: str | None
    #: "node", "graph" or None when neither the metadata nor the rows tell.
    graph_trace_mode: str | None
    #: How graph_trace_mode was decided: "metadata", "inferred" or "unknown".
    graph_trace_mode_source: str
    tables: dict[str, list[str]] = field(repr=False)


@dataclass
class Trace:
    """The tables of one nsys export that cgprof uses, as DataFrames.

    kernels      start_ns end_ns dur_ns device_id stream_id pid corr_id name
                 short_name graph_node_id (Int64, <NA> outside graphs) graph_id (Int64)
    runtime      start_ns end_ns dur_ns pid tid global_tid corr_id event_class name_raw
                 name (version suffix stripped) nsys_name (as nsys cuda_api_sum shows it);
                 every row, including non-API event classes (see ``api_calls``)
    memcpy       start_ns end_ns dur_ns device_id stream_id pid corr_id bytes copy_kind
                 graph_node_id
    memset       start_ns end_ns dur_ns device_id stream_id pid corr_id bytes graph_node_id
    sync         start_ns end_ns dur_ns device_id stream_id pid corr_id sync_type
    graph_trace  start_ns end_ns dur_ns device_id stream_id pid corr_id graph_id graph_exec_id
                 (``--cuda-graph-trace=graph``: one row per replay of a whole graph)
    nvtx         start_ns end_ns (Int64, <NA> when unterminated) dur_ns (Int64) event_type
                 style text domain name (nsys's "domain:text", or text in the default domain)
                 pid tid global_tid end_global_tid (Int64) range_id payload (Int64)
    gpus         device_id name
    threads      global_tid pid tid name
    """

    meta: TraceMeta
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame
    sync: pd.DataFrame
    graph_trace: pd.DataFrame
    nvtx: pd.DataFrame
    gpus: pd.DataFrame
    threads: pd.DataFrame

    @property
    def path(self) -> Path:
        return self.meta.path

    @property
    def api_calls(self) -> pd.DataFrame:
        """Runtime rows that are real CUDA runtime/driver calls (eventClass 0 or 1)."""
        rt = self.runtime
        return rt[rt["event_class"].isin(S.API_EVENT_CLASSES)]


# ---------------------------------------------------------------------------------------
# opening and probing


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not an nsys SQLite export")
    suffix = path.suffix.lower()
    if suffix == ".nsys-rep":
        raise TraceError(
            f"{path}: is an Nsight Systems report, not SQLite; export it first with "
            f"`nsys export --type sqlite -o {path.with_suffix('.sqlite')} {path}`"
        )
    if suffix == ".qdstrm":
        raise TraceError(
            f"{path}: is a raw Nsight Systems stream, not SQLite; import it with "
            f"`QdstrmImporter -i {path}`, then `nsys export --type sqlite` the .nsys-rep "
            f"(or record with `cgprof record`, which does both)"
        )
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
    if not head:
        raise TraceError(f"{path}: is empty (0 bytes), not an nsys SQLite export")
    if head != SQLITE_MAGIC:
        raise TraceError(
            f"{path}: is not an SQLite file; cgprof reads `nsys export --type sqlite` output"
        )


def connect_readonly(path: Path) -> sqlite3.Connection:
    """Open ``path`` with SQLite's read-only URI mode: cgprof never writes into a trace."""
    uri = "file:" + urllib.request.pathname2url(str(path.resolve())) + "?mode=ro"
    return sqlite3.connect(uri, uri=True)


def probe(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Map every table in the file to its column names."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in names}


def _read_meta(conn: sqlite3.Connection, tables: dict[str, list[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for table in (S.META_EXPORT_OLD, S.META_EXPORT, S.META_CAPTURE):
        cols = tables.get(table, [])
        if "name" in cols and "value" in cols:
            for name, value in conn.execute(f'SELECT name, value FROM "{table}"'):
                if isinstance(name, str):
                    out.setdefault(name, value)
    return out


def _graph_mode_from_meta(meta: dict[str, str]) -> str | None:
    # PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE (2023.4-2025.5) or
    # CUDA_GRAPH_TRACE_OPTIONS:MODE (2026.x); values "Graph" / "Node".
    for key, value in meta.items():
        if key.upper().endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE") and isinstance(value, str):
            v = value.strip().lower()
            if v in ("graph", "node"):
                return v
    return None


# ---------------------------------------------------------------------------------------
# reading tables


def _col(cols: list[str], name: str, alias: str, default: str = "NULL") -> str:
    return f'"{name}" AS {alias}' if name in cols else f"{default} AS {alias}"


#: Stands for NULL in integer-only queries (no nsys column holds it).
NULL_INT = -(2**63)


def _icol(cols: list[str], name: str, default: str = "NULL") -> str:
    """An integer column for :func:`_query_ints`: NULL (or a missing column) -> NULL_INT."""
    expr = f'"{name}"' if name in cols else default
    return f"coalesce({expr}, {NULL_INT})"


def _query_ints(conn: sqlite3.Connection, exprs: list[str], table: str,
                columns: list[str]) -> pd.DataFrame:
    """Integer-only SELECT straight into one int64 matrix (the fast path for big tables).

    Columns holding NULL_INT come back as nullable Int64 with <NA> there.
    """
    sql = f"SELECT {', '.join(exprs)} FROM \"{table}\""
    rows = conn.execute(sql).fetchall()
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})
    matrix = np.array(rows, dtype=np.int64)
    del rows
    data: dict[str, object] = {}
    for i, name in enumerate(columns):
        col = matrix[:, i].copy()
        null = col == NULL_INT
        data[name] = pd.arrays.IntegerArray(col, null) if null.any() else col
    return pd.DataFrame(data, copy=False)


def _query(conn: sqlite3.Connection, sql: str, columns: list[str]) -> pd.DataFrame:
    """Run ``sql`` and build the frame column by column.

    Much faster than ``DataFrame.from_records`` on millions of rows: each column goes through
    numpy once, as int64 when it holds no NULL, else as a nullable Int64, else as objects.
    """
    rows = conn.execute(sql).fetchall()
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})
    data: dict[str, object] = {}
    for name, values in zip(columns, zip(*rows, strict=True), strict=True):
        data[name] = _column(values)
    return pd.DataFrame(data, copy=False)


def _column(values: tuple) -> object:
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    if any(isinstance(v, int) for v in values) and all(
        v is None or isinstance(v, int) for v in values
    ):
        return pd.array(values, dtype="Int64")
    return np.array(values, dtype=object)


def _required(df: pd.DataFrame, table: str, cols: tuple[str, ...] = ("start_ns", "end_ns")
              ) -> None:
    """Columns nsys declares NOT NULL: a NULL there means a damaged file (nullable ones, such
    as correlationId, read as 0 like a missing column)."""
    for c in cols:
        n = int(df[c].isna().sum())
        if n:
            raise V.DamagedColumn(table, _NSYS_NAME.get(c, c), f"is NULL in {n} rows")


_NSYS_NAME = {"start_ns": "start", "end_ns": "end", "device_id": "deviceId",
              "stream_id": "streamId", "event_class": "eventClass"}


def _int(df: pd.DataFrame, cols: list[str]) -> None:
    """Columns that must be present in every row: plain int64."""
    for c in cols:
        df[c] = df[c].fillna(0).astype("int64")


def _nullable(df: pd.DataFrame, cols: list[str]) -> None:
    for c in cols:
        df[c] = df[c].astype("Int64")


def _durations(df: pd.DataFrame) -> None:
    df["dur_ns"] = df["end_ns"] - df["start_ns"]


def _names(ids: pd.Series, strings: pd.Series) -> pd.Series:
    """Resolve StringIds ids as a categorical (kernel names repeat a lot)."""
    if ids.empty:
        return pd.Series([], dtype="object", index=ids.index)
    codes = ids.fillna(-1).astype("int64")
    uniq = pd.unique(codes)
    lookup = {i: strings.get(i, f"<unknown string {i}>") for i in uniq}
    return codes.map(lookup).astype("category")


def _load_strings(conn: sqlite3.Connection, tables: dict[str, list[str]]) -> pd.Series:
    if S.STRING_IDS not in tables:
        return pd.Series(dtype="object")
    rows = conn.execute(f"SELECT id, value FROM {S.STRING_IDS}").fetchall()
    return pd.Series({i: v for i, v in rows}, dtype="object")


def _pid_from_global(series: pd.Series) -> pd.Series:
    values = series.to_numpy(dtype=np.int64)
    return pd.Series((values >> S.PID_SHIFT) & S.ID_MASK, index=series.index, dtype="int64")


def _tid_from_global(series: pd.Series) -> pd.Series:
    values = series.to_numpy(dtype=np.int64)
    return pd.Series(values & S.ID_MASK, index=series.index, dtype="int64")


def _load_kernels(conn, tables, strings) -> pd.DataFrame:
    cols = tables.get(S.KERNEL)
    names = ["start_ns", "end_ns", "device_id", "stream_id", "corr_id",
             "global_pid", "name_id", "short_id", "graph_node_id", "graph_id"]
    if cols is None:
        df = _query(conn, "SELECT 1 WHERE 0", names)
    else:
        df = _query_ints(conn, [
            _icol(cols, "start"), _icol(cols, "end"), _icol(cols, "deviceId", "0"),
            _icol(cols, "streamId", "0"), _icol(cols, "correlationId", "0"),
            _icol(cols, "globalPid", "0"), _icol(cols, "demangledName"),
            _icol(cols, "shortName"), _icol(cols, "graphNodeId"), _icol(cols, "graphId")],
            S.KERNEL, names)
        _required(df, S.KERNEL, ("start_ns", "end_ns", "device_id", "stream_id"))
    _int(df, ["start_ns", "end_ns", "device_id", "stream_id", "corr_id", "global_pid"])
    _nullable(df, ["graph_node_id", "graph_id"])
    df["pid"] = _pid_from_global(df["global_pid"])
    name_ids = df["name_id"].where(df["name_id"].notna(), df["short_id"])
    df["name"] = _names(name_ids, strings)
    df["short_name"] = _names(df["short_id"], strings)
    df = df.drop(columns=["name_id", "short_id", "global_pid"])
    _durations(df)
    return df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)


def _load_runtime(conn, tables, strings) -> pd.DataFrame:
    cols = tables.get(S.RUNTIME)
    names = ["start_ns", "end_ns", "event_class", "global_tid", "corr_id", "name_id"]
    if cols is None:
        df = _query(conn, "SELECT 1 WHERE 0", names)
    else:
        df = _query_ints(conn, [
            _icol(cols, "start"), _icol(cols, "end"), _icol(cols, "eventClass", "0"),
            _icol(cols, "globalTid", "0"), _icol(cols, "correlationId", "0"),
            _icol(cols, "nameId")], S.RUNTIME, names)
        _required(df, S.RUNTIME, ("start_ns", "end_ns", "event_class"))
    _int(df, ["start_ns", "end_ns", "event_class", "global_tid", "corr_id"])
    df["pid"] = _pid_from_global(df["global_tid"])
    df["tid"] = _tid_from_global(df["global_tid"])
    raw = _names(df["name_id"], strings)
    df["name_raw"] = raw
    if len(df):
        cats = raw.cat.categories
        df["name"] = raw.map({c: S.strip_version_suffix(c) for c in cats}).astype("category")
        df["nsys_name"] = raw.map({c: S.nsys_api_name(c) for c in cats}).astype("category")
    else:
        df["name"] = pd.Series([], dtype="object")
        df["nsys_name"] = pd.Series([], dtype="object")
    df = df.drop(columns=["name_id"])
    _durations(df)
    return df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)


def _load_gpu_ops(conn, tables, table: str, extra: list[tuple[str, str, str]]) -> pd.DataFrame:
    """Memcpy / memset / sync / graph-trace rows: start, end, device, stream, pid, corr + extra."""
    cols = tables.get(table)
    base = ["start_ns", "end_ns", "device_id", "stream_id", "corr_id", "global_pid"]
    names = base + [alias for _, alias, _ in extra]
    if cols is None:
        df = _query(conn, "SELECT 1 WHERE 0", names)
    else:
        parts = [_icol(cols, "start"), _icol(cols, "end"), _icol(cols, "deviceId", "0"),
                 _icol(cols, "streamId", "0"), _icol(cols, "correlationId", "0"),
                 _icol(cols, "globalPid", "0")]
        parts += [_icol(cols, src, default) for src, _, default in extra]
        df = _query_ints(conn, parts, table, names)
        _required(df, table)
    _int(df, base)
    df["pid"] = _pid_from_global(df["global_pid"])
    df = df.drop(columns=["global_pid"])
    _durations(df)
    return df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)


def _load_nvtx(conn, tables, strings) -> pd.DataFrame:
    cols = tables.get(S.NVTX)
    names = ["start_ns", "end_ns", "event_type", "range_id", "text", "text_id", "global_tid",
             "end_global_tid", "domain_id", "i64", "u64", "i32", "u32"]
    if cols is None:
        df = _query(conn, "SELECT 1 WHERE 0", names)
    else:
        sql = ('SELECT start, "end", ' + ", ".join([
            _col(cols, "eventType", "e", "0"), _col(cols, "rangeId", "r"),
            _col(cols, "text", "t"), _col(cols, "textId", "ti"),
            _col(cols, "globalTid", "g", "0"), _col(cols, "endGlobalTid", "eg"),
            _col(cols, "domainId", "di", "0"), _col(cols, "int64Value", "a"),
            _col(cols, "uint64Value", "b"), _col(cols, "int32Value", "c"),
            _col(cols, "uint32Value", "d")]) + f" FROM {S.NVTX}")
        df = _query(conn, sql, names)
        _required(df, S.NVTX, ("start_ns",))  # end is NULL for an unterminated range
    _int(df, ["start_ns", "event_type", "global_tid", "domain_id"])
    _nullable(df, ["end_ns", "end_global_tid", "range_id"])
    df["pid"] = _pid_from_global(df["global_tid"])
    df["tid"] = _tid_from_global(df["global_tid"])
    # The message is a registered string (textId) or inline text (S2: coalesce).
    registered = _names(df["text_id"], strings).astype("object") if len(df) else df["text_id"]
    df["text"] = registered.where(df["text_id"].notna(), df["text"]).astype("object")
    # Domain names: the text of the NvtxDomainCreate row with that domainId in the process.
    dom_rows = df[df["event_type"] == S.NVTX_DOMAIN_CREATE]
    domains = {(int(p), int(d)): t for p, d, t in
               zip(dom_rows["pid"], dom_rows["domain_id"], dom_rows["text"], strict=True)}
    keys = zip(df["pid"].tolist(), df["domain_id"].tolist(), strict=True)
    df["domain"] = pd.Series([domains.get(k, "") if k[1] != 0 else "" for k in keys],
                             index=df.index, dtype="object")
    text = df["text"].astype("object").fillna("").astype(str)
    df["name"] = pd.Series(np.where(df["domain"] != "", df["domain"] + ":" + text, text),
                           index=df.index, dtype="object")
    df["style"] = df["event_type"].map(S.NVTX_STYLE).fillna("")
    payload = df["i64"].astype("Int64")
    for other in ("u64", "i32", "u32"):
        payload = payload.fillna(df[other].astype("Int64"))
    df["payload"] = payload
    df["dur_ns"] = (df["end_ns"] - df["start_ns"]).astype("Int64")
    df = df.drop(columns=["text_id", "i64", "u64", "i32", "u32"])
    return df.sort_values(["start_ns"], kind="stable").reset_index(drop=True)


def _load_gpus(conn, tables) -> pd.DataFrame:
    cols = tables.get(S.GPU_INFO, [])
    if "id" not in cols:
        return pd.DataFrame({"device_id": pd.Series(dtype="int64"),
                             "name": pd.Series(dtype="object")})
    name = '"name"' if "name" in cols else "''"
    # An info table: a row without a usable id (a damaged file) is left out, not fatal.
    rows = conn.execute(f"SELECT id, {name} FROM {S.GPU_INFO} WHERE typeof(id) = 'integer' "
                        "ORDER BY id").fetchall()
    return pd.DataFrame(rows, columns=["device_id", "name"]).drop_duplicates("device_id")


def _load_threads(conn, tables, strings) -> pd.DataFrame:
    cols = tables.get(S.THREAD_NAMES, [])
    if not {"nameId", "globalTid"} <= set(cols):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in
                             ("global_tid", "pid", "tid")}).assign(name=pd.Series(dtype=object))
    # An info table: a row without a usable thread id (a damaged file) is left out.
    rows = conn.execute(f"SELECT globalTid, nameId FROM {S.THREAD_NAMES} "
                        "WHERE typeof(globalTid) = 'integer'").fetchall()
    df = pd.DataFrame(rows, columns=["global_tid", "name_id"]).drop_duplicates("global_tid")
    df["pid"] = _pid_from_global(df["global_tid"])
    df["tid"] = _tid_from_global(df["global_tid"])
    df["name"] = df["name_id"].map(strings)
    return df.drop(columns=["name_id"]).reset_index(drop=True)


def load(path: str | Path, progress: Progress | None = None) -> Trace:
    """Open an nsys SQLite export read-only and load the tables cgprof uses.

    Raises :class:`TraceError` with a one-line message for anything that is not a readable
    nsys export (missing file, directory, not SQLite, corrupt, an .nsys-rep given instead of
    its SQLite export, no nsys tables, no events at all).
    """
    path = Path(path)
    _check_file(path)
    say = progress or (lambda _msg: None)
    try:
        conn = connect_readonly(path)
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot open as SQLite ({V.one_line(exc)})") from None
    try:
        try:
            tables = probe(conn)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise TraceError(
                f"{path}: cannot read SQLite ({V.one_line(exc)}); is the file truncated or "
                "corrupt?"
            ) from None
        if not any(t in tables for t in S.NSYS_MARKER_TABLES):
            shown = ", ".join(sorted(tables)[:5]) or "no tables"
            raise TraceError(
                f"{path}: is SQLite but not an Nsight Systems export ({shown}); "
                f"make one with `nsys export --type sqlite` or `cgprof record`"
            )
        V.check_tables(path, tables)
        try:
            trace = _load_tables(conn, path, tables, say)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise TraceError(
                f"{path}: cannot read SQLite ({V.one_line(exc)}); is the file truncated or "
                "corrupt?"
            ) from None
        except V.DamagedColumn as exc:
            raise V.damaged(path, str(exc)) from None
        except (ValueError, TypeError, OverflowError) as exc:
            # A value no nsys export holds (text in a number column, ...): name the cell.
            try:
                cell = V.find_non_integer(conn, tables)
            except sqlite3.DatabaseError:
                cell = None
            if cell is None:
                raise V.damaged(path, f"cannot read its tables ({V.one_line(exc)})") from None
            table, col, value = cell
            raise V.damaged(path, f"{table}.{col} holds {V.one_line(value, 40)!r} where nsys "
                                  "writes an integer") from None
    finally:
        conn.close()
    if trace.kernels.empty and trace.runtime.empty and trace.graph_trace.empty and (
        trace.nvtx.empty or (trace.nvtx["event_type"] == S.NVTX_DOMAIN_CREATE).all()
    ):
        raise TraceError(
            f"{path}: contains no CUDA or NVTX events; was it recorded with "
            f"`nsys profile --trace=cuda,nvtx` (or `cgprof record`)?"
        )
    V.validate(trace)
    return trace


def _load_tables(conn, path: Path, tables, say: Progress) -> Trace:
    meta_kv = _read_meta(conn, tables)
    say("reading strings")
    strings = _load_strings(conn, tables)
    say("reading kernels")
    kernels = _load_kernels(conn, tables, strings)
    say("reading CUDA API calls")
    runtime = _load_runtime(conn, tables, strings)
    say("reading memory copies, syncs, graph replays")
    memcpy = _load_gpu_ops(conn, tables, S.MEMCPY, [
        ("bytes", "bytes", "0"), ("copyKind", "copy_kind", "0"), ("graphNodeId", "graph_node_id",
                                                                   "NULL")])
    _int(memcpy, ["bytes", "copy_kind"])
    _nullable(memcpy, ["graph_node_id"])
    memset = _load_gpu_ops(conn, tables, S.MEMSET, [
        ("bytes", "bytes", "0"), ("graphNodeId", "graph_node_id", "NULL")])
    _int(memset, ["bytes"])
    _nullable(memset, ["graph_node_id"])
    sync = _load_gpu_ops(conn, tables, S.SYNC, [("syncType", "sync_type", "NULL")])
    _nullable(sync, ["sync_type"])
    graph_trace = _load_gpu_ops(conn, tables, S.GRAPH_TRACE, [
        ("graphId", "graph_id", "NULL"), ("graphExecId", "graph_exec_id", "NULL")])
    _nullable(graph_trace, ["graph_id", "graph_exec_id"])
    say("reading NVTX ranges")
    nvtx = _load_nvtx(conn, tables, strings)
    gpus = _load_gpus(conn, tables)
    threads = _load_threads(conn, tables, strings)

    mode = _graph_mode_from_meta(meta_kv)
    source = "metadata"
    if mode is None:
        source = "inferred"
        if not graph_trace.empty:
            mode = "graph"
        elif kernels["graph_node_id"].notna().any():
            mode = "node"
        else:
            source = "unknown"
    meta = TraceMeta(
        path=path,
        nsys_version=meta_kv.get("EXPORT_PRODUCT_VERSION"),
        schema_version=meta_kv.get("EXPORT_SCHEMA_VERSION"),
        graph_trace_mode=mode,
        graph_trace_mode_source=source,
        tables=tables,
    )
    return Trace(meta=meta, kernels=kernels, runtime=runtime, memcpy=memcpy, memset=memset,
                 sync=sync, graph_trace=graph_trace, nvtx=nvtx, gpus=gpus, threads=threads)
