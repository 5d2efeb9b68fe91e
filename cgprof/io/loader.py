"""Load an Nsight Systems export, read-only, into a :class:`~cgprof.io.trace.Trace`.

The export is an SQLite file, an ``.nsys-rep`` (exported to a temporary SQLite file by the
exporter :data:`cgprof.io.report_export` names), nsys's parquetdir/arrowdir, or cgprof's own
cached copy: :func:`open_source` opens it as a columnar source (:mod:`cgprof.io.sources`),
:mod:`cgprof.io.frames` builds the frames, :mod:`cgprof.io.validate` refuses a trace whose
tables contradict each other, and :mod:`cgprof.io.cache` keeps a columnar copy for the next
load. :func:`load` reads a whole trace, :func:`load_part` some processes' rows (a rank),
:func:`load_rows` a range of rows (a chunk of steps), each with the filter in the scan.

Every failure to read is a :class:`~cgprof.errors.TraceError` with a one-line message that
names the file.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pandas as pd

import cgprof.io
from cgprof import schema as S
from cgprof.errors import TraceError
from cgprof.io import cache as C
from cgprof.io import early as E
from cgprof.io import validate as V
from cgprof.io.dirsource import DirSource
from cgprof.io.filters import PidFilter, RowRange
from cgprof.io.frames import (
    _graph_mode_from_meta,
    _load_diagnostics,
    _load_gpu_ops,
    _load_gpus,
    _load_kernels,
    _load_nvtx,
    _load_runtime,
    _load_strings,
    _load_threads,
    _read_meta,
    _rebuild,
    _release_arrow,
)
from cgprof.io.sources import Source, connect_readonly, dir_kind, probe_sqlite
from cgprof.io.spill import Spill, TableSpill
from cgprof.io.sqlite import SqliteSource
from cgprof.io.trace import DERIVED, Trace, TraceMeta, share_constants, used_gpus
from cgprof.scratch import checkpoint

SQLITE_MAGIC = b"SQLite format 3\x00"

Progress = Callable[[str], None]


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not an nsys SQLite export")
    suffix = path.suffix.lower()
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


def open_source(path: Path) -> Source:
    """Check ``path`` and open it as a columnar :class:`cgprof.io.sources.Source`.

    SQLite exports and nsys's parquetdir/arrowdir directories (an ``.nsys-rep`` report is
    exported to SQLite first, by :func:`load`).
    """
    early = E.take_early(path)  # opened (and its big tables being read) by cgprof.io.prefetch
    if early is not None:
        return early
    kind = dir_kind(path) if path.is_dir() else None
    if kind is not None:
        src: Source = DirSource(path, kind)
        if not any(t in src.tables for t in S.NSYS_MARKER_TABLES):
            raise TraceError(f"{path}: holds no nsys tables ({kind} export expected)")
        return src
    _check_file(path)
    try:
        conn = connect_readonly(path)
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot open as SQLite ({V.one_line(exc)})") from None
    try:
        tables = probe_sqlite(conn)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        conn.close()
        raise TraceError(
            f"{path}: cannot read SQLite ({V.one_line(exc)}); is the file truncated or corrupt?"
        ) from None
    if not any(t in tables for t in S.NSYS_MARKER_TABLES):
        conn.close()
        shown = ", ".join(sorted(tables)[:5]) or "no tables"
        raise TraceError(
            f"{path}: is SQLite but not an Nsight Systems export ({shown}); "
            f"make one with `nsys export --type sqlite` or `cgprof record`"
        )
    return SqliteSource(path, conn, tables)


def _exported(report: Path) -> AbstractContextManager[Path]:
    """A temporary SQLite export of the ``.nsys-rep`` ``report``, removed afterwards: made by
    the exporter :data:`cgprof.io.report_export` names (the reading layer runs no nsys)."""
    export = cgprof.io.report_export
    if export is None:
        raise TraceError(f"{report}: is an Nsight Systems report and no exporter is set "
                         f"(cgprof.io.report_export); export it with "
                         f"`nsys export --type sqlite -o {report.with_suffix('.sqlite')} {report}`")
    return export(report)


def load(path: str | Path, progress: Progress | None = None, *,
         cache: bool | None = None) -> Trace:
    """Open an nsys export read-only and load the tables cgprof uses.

    ``path`` is an SQLite export, an ``.nsys-rep`` report (exported to a temporary SQLite
    file with the nsys cgprof finds), or nsys's ``parquetdir``/``arrowdir`` export.
    ``cache``: read from and write to cgprof's columnar cache (:mod:`cgprof.io.cache`); None
    (the default) means on unless ``CGPROF_NO_CACHE`` is set.

    Raises :class:`TraceError` with a one-line message for anything that is not a readable
    nsys export (missing file, not SQLite, corrupt, no nsys tables, no events at all).
    """
    path = Path(path)
    say = checkpoint(progress)
    use_cache = (C.enabled() if cache is None else cache) and path.is_file()
    trace, columns_only = _cached(path, None, say) if use_cache else (None, None)
    if trace is None:
        if path.suffix.lower() == ".nsys-rep" and path.is_file():
            say("exporting the report to SQLite with nsys")
            with _exported(path) as sqlite_path:
                trace = _load_source(sqlite_path, path, say, use_cache)
        else:
            trace = _load_source(path, path, say, use_cache)
    else:
        _checked(trace, path)
        if columns_only is not None:
            # an entry a run within the memory cap wrote, without frames: this whole load
            # built them, and stores them in it (a later load reads them as built)
            C.add_frames(columns_only, path, trace, _rebuild)
    _release_arrow(len(trace.stored("kernels")) + len(trace.stored("runtime")))
    return trace


def load_part(path: str | Path, pids: Any, keep: bool = True,
              progress: Progress | None = None, tables: Any = None,
              part: str | None = None, cache: bool | None = None,
              spill: Spill | None = None) -> Trace:
    """The rows of processes ``pids`` of the trace at ``path`` (``keep`` False: of every
    other process), read with the filter in the scan (:class:`cgprof.io.filters.PidFilter`), so
    that the other processes' rows are never held: the trace of one rank of a multi-rank
    trace is ``load_part(path, [pid])``, the same frames (values, order) as
    :func:`cgprof.ranks.sub_trace` cuts from the whole trace, the GPUs those the rank used.
    An SQLite export or nsys's parquetdir/arrowdir export. ``tables``: the nsys tables whose
    rows are read (None: all); the others' frames are empty, their tables not scanned.

    ``part``: the name of this part's own cache entry (:func:`cgprof.io.cache.entry_dir`), read
    when there is one and written after a read of an SQLite export (``cache``: None means on
    unless ``CGPROF_NO_CACHE``); without it no cache is used (an entry of the whole trace
    holds every process). ``spill``: the process tables of the SQLite export at ``path``
    already written apart (:class:`cgprof.io.spill.Spill`), read instead of the file."""
    path = Path(path)
    say = checkpoint(progress)
    use_cache = (part is not None and (C.enabled() if cache is None else cache)
                 and path.is_file())
    trace, _ = _cached(path, part, say) if use_cache else (None, None)
    if trace is not None:
        _checked_part(trace, path, keep)
    else:
        trace = _load_source(path, path, say, use_cache, pid_filter=PidFilter(pids, keep,
                                                                                tables),
                             part=part, spill=spill)
    if keep:
        trace.gpus = used_gpus(trace)
    _release_arrow(len(trace.stored("kernels")) + len(trace.stored("runtime")))
    return trace


def load_rows(path: str | Path, rows: RowRange, progress: Progress | None = None,
              spill: TableSpill | None = None) -> Trace:
    """The rows ``rows`` keeps of the trace at ``path`` (an SQLite export, nsys's
    parquetdir/arrowdir export), from its cache entry when there is one, else from
    ``spill`` (:func:`spill_tables` of it) or the file: a chunk of a one-process trace
    (cgprof.metrics.chunked), read with the filter in the scan. No cache entry is written;
    the frames are the whole trace's rows, in its order."""
    path = Path(path)
    say = checkpoint(progress)
    hit = C.lookup(path, None) if C.enabled() and path.is_file() else None
    if hit is not None:
        hit.pid_filter = rows
        try:
            trace = _load_tables(hit, path, say)
        finally:
            hit.close()
        trace.shed()
    else:
        trace = _load_source(path, path, say, False, pid_filter=rows, spill=spill)
    _release_arrow(len(trace.stored("kernels")) + len(trace.stored("runtime")))
    return trace


def has_cache_entry(path: str | Path) -> bool:
    """Whether the trace at ``path`` has a cache entry (what :func:`load` would read)."""
    path = Path(path)
    src = C.lookup(path, None) if C.enabled() and path.is_file() else None
    if src is None:
        return False
    src.close()
    return True


def spill_tables(path: str | Path, folder: Path, spool: Callable[[str, Any], None] | None = None
                 ) -> TableSpill | None:
    """The activity tables of the SQLite export at ``path`` written once into ``folder``
    (:class:`cgprof.io.spill.TableSpill`): one scan of the file for every chunk read after
    it. ``spool(table, arrow)`` is also given the small tables a load reads, as it reads
    them: with :meth:`cgprof.io.cache.Pending.write` and the entry's own folder, the spill is
    a cache entry of nsys columns (:meth:`cgprof.io.cache.Pending.commit_columns`), from which
    a later load builds the frames instead of reading SQLite. None for other inputs, or
    where DuckDB cannot."""
    src = open_source(Path(path))
    try:
        if not isinstance(src, SqliteSource):
            return None
        if spool is not None:
            src.keep_reads = False
            src.spool = spool
            strings = _load_strings(src)
            _read_meta(src)
            _load_gpus(src)
            _load_threads(src, strings)
            src.spool = None
        spill = TableSpill.write(src, folder)
        if spill is not None:
            spill.source_tables = src.tables
        return spill
    finally:
        src.close()


def _cached(path: Path, part: str | None, say: Progress) -> tuple[Trace | None,
                                                                   Path | None]:
    """The trace at ``path`` (or its ``part``) read from its cache entry, not yet checked;
    None when there is none, or it cannot be read (a broken entry costs a re-read, never the
    analysis: it is discarded); and the entry, when it holds nsys columns only (spill_tables':
    a whole load stores the frames it built in it)."""
    hit = C.lookup(path, part)
    if hit is None:
        return None, None
    say("reading the columnar cache")
    try:
        trace = _load_tables(hit, path, say)
    except Exception:
        C.discard(hit.entry)
        return None, None
    return trace, (hit.entry if hit.wants_frames() else None)


def _checked_part(trace: Trace, path: Path, keep: bool) -> None:
    """What :func:`_checked` does for a whole trace, for a part: a rank's trace is checked
    (cgprof.io.validate), the other processes' only shed."""
    if keep:
        _checked(trace, path, part=True)
    else:
        trace.shed()


def spill_processes(path: str | Path, folder: Path) -> Spill | None:
    """The process tables of the SQLite export at ``path`` written apart into ``folder``
    (:class:`cgprof.io.spill.Spill`): one scan of the file for every rank read after it.
    None for other inputs, or where DuckDB cannot."""
    src = open_source(Path(path))
    try:
        return Spill.write(src, folder) if isinstance(src, SqliteSource) else None
    finally:
        src.close()


def warm(path: Path) -> Path:
    """Read ``path`` once so that its columnar copy is in the cache; returns the entry.

    What ``cgprof record --columnar`` does after the export: the first ``cgprof analyze``
    then skips SQLite. Raises :class:`TraceError` when the trace cannot be read, or when the
    cache cannot be written.
    """
    load(path, cache=True)
    entry = C.entry_dir(path)
    if not (entry / C.MANIFEST).is_file():
        raise TraceError(f"{path}: cannot write its columnar copy into {C.cache_dir()}")
    return entry


def process_heads(path: str | Path, progress: Progress | None = None) -> Trace:
    """What :func:`cgprof.ranks.rank_heads` reads of the trace at ``path``, without its
    activity rows: the GPU tables as their distinct (pid, device_id) pairs, the NVTX events
    whole (the rank markers), the GPUs. Its kernel and API-call counts are not the trace's."""
    path = Path(path)
    say = checkpoint(progress)
    src = open_source(path)
    try:
        say("reading the processes")
        V.check_tables(path, src.tables)
        with _named_damage(src, path):
            meta_kv = _read_meta(src)
            frames = {}
            for table, name in ((S.KERNEL, "kernels"), (S.MEMCPY, "memcpy"),
                                (S.MEMSET, "memset"), (S.SYNC, "sync"),
                                (S.GRAPH_TRACE, "graph_trace")):
                frames[name] = src.pid_devices(table)
            strings = _load_strings(src)
            nvtx = _load_nvtx(src, strings)
            gpus = _load_gpus(src)
            threads = _load_threads(src, strings)
    finally:
        src.close()
    empty = pd.DataFrame({"pid": pd.Series(dtype="int64")})
    meta = TraceMeta(path=path, nsys_version=meta_kv.get("EXPORT_PRODUCT_VERSION"),
                     schema_version=meta_kv.get("EXPORT_SCHEMA_VERSION"),
                     graph_trace_mode=None, graph_trace_mode_source="unknown",
                     tables=src.tables)
    return Trace(meta=meta, runtime=empty, nvtx=nvtx, gpus=gpus, threads=threads, **frames)


def _checked(trace: Trace, path: Path, part: bool = False) -> None:
    """Raise :class:`TraceError` for a trace without events or whose tables contradict each
    other (cgprof.io.validate), then :meth:`Trace.shed` its derived columns. ``part``: some
    processes' rows of ``path`` (:func:`load_part`)."""
    if part:
        trace.check_whole(lambda t: V.validate(t, part=True))
        return
    if trace.stored("kernels").empty and trace.stored("runtime").empty and (
        trace.graph_trace.empty) and (
        trace.nvtx.empty or (trace.nvtx["event_type"] == S.NVTX_DOMAIN_CREATE).all()
    ):
        raise TraceError(
            f"{path}: contains no CUDA or NVTX events; was it recorded with "
            f"`nsys profile --trace=cuda,nvtx` (or `cgprof record`)?"
        )
    trace.check_whole(V.validate)


@contextlib.contextmanager
def _named_damage(src: Source, path: Path) -> Iterator[None]:
    """A failed read of ``src`` as one :class:`TraceError` line naming ``path`` (and the
    cell, for a value no nsys export holds there)."""
    try:
        yield
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise TraceError(
            f"{path}: cannot read SQLite ({V.one_line(exc)}); is the file truncated or "
            "corrupt?"
        ) from None
    except V.DamagedColumn as exc:
        raise V.damaged(path, str(exc)) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # A value no nsys export holds (text in a number column, ...): name the cell.
        cell = None
        if isinstance(src, SqliteSource):
            try:
                cell = V.find_non_integer(src.conn, src.tables)
            except sqlite3.DatabaseError:
                cell = None
        if cell is None:
            raise V.damaged(path, f"cannot read its tables ({V.one_line(exc)})") from None
        table, col, value = cell
        raise V.damaged(path, f"{table}.{col} holds {V.one_line(value, 40)!r} where nsys "
                              "writes an integer") from None


def _load_source(src_path: Path, path: Path, say: Progress, use_cache: bool,
                 pid_filter: PidFilter | RowRange | None = None, part: str | None = None,
                 spill: Spill | TableSpill | None = None) -> Trace:
    """Read ``src_path`` (``pid_filter``: some processes' rows only, then cached as entry
    ``part`` of ``path``, or not at all without one; ``spill``: see :func:`load_part`)."""
    src = open_source(src_path)
    src.pid_filter = pid_filter
    if spill is not None and isinstance(src, SqliteSource):
        src.spill = spill
    if pid_filter is not None and part is None:
        use_cache = False  # an entry without a part holds the whole trace
    # A small export's forked reader (cgprof.io.prefetch) writes its entry as it reads;
    # else the entry is written table by table as the tables are read (src.spool), so the
    # Arrow copy of each is freed once its columns are numpy, not kept for a write at the end.
    forked = (src if use_cache and isinstance(src, SqliteSource) and src.writes_entry()
              and part is None and pid_filter is None else None)
    pending = (C.begin(path, part) if use_cache and src.kind == "sqlite" and forked is None
               else None)
    src.keep_reads = False
    if pending is not None:
        src.spool = pending.write
        pending.defer = C.in_background()  # the writer thread writes them, beside the analysis
    try:
        V.check_tables(path, src.tables)
        with _named_damage(src, path):
            trace = _load_tables(src, path, say)
        # Checked (and shed) before the cache entry is written: a trace cgprof refuses gets
        # no entry, and the writer is handed the frames the analysis keeps.
        if pid_filter is None:
            _checked(trace, path)
        else:
            _checked_part(trace, path, pid_filter.keep)
        if forked is not None:
            C.commit_forked(path, forked)
        if pending is not None:
            done, pending = pending, None
            C.write_frames(done, trace, _rebuild, src.tables, say)
    finally:
        if pending is not None:
            pending.abort()
        src.close()
    return trace


def _stored(src: Source, table: str, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """The frame of ``table`` as the cache stored it (already sorted and decoded), else built
    from the nsys columns."""
    df = src.frame(table, lambda d: _rebuild(table, d))
    return build() if df is None else df


def _load_tables(src: Source, path: Path, say: Progress) -> Trace:
    src.read_ahead_activity()  # every table cgprof reads, each in a thread (none twice)
    meta_kv = _read_meta(src)
    say("reading strings")
    strings = _load_strings(src)
    say("reading kernels")
    kernels = _stored(src, S.KERNEL, lambda: _load_kernels(src, strings))
    _release_arrow(len(kernels))
    say("reading CUDA API calls")
    runtime = _stored(src, S.RUNTIME, lambda: _load_runtime(src, strings))
    _release_arrow(len(kernels) + len(runtime))
    say("reading memory copies, syncs, graph replays")
    memcpy, memset, sync, graph_trace = (
        _stored(src, table, functools.partial(_load_gpu_ops, src, table))
        for table in (S.MEMCPY, S.MEMSET, S.SYNC, S.GRAPH_TRACE))
    say("reading NVTX ranges")
    nvtx = _stored(src, S.NVTX, lambda: _load_nvtx(src, strings))
    gpus = _load_gpus(src)
    threads = _load_threads(src, strings)
    diagnostics = _load_diagnostics(src)
    kernels, runtime, memcpy, memset, sync, graph_trace = (share_constants(df) for df in (
        kernels, runtime, memcpy, memset, sync, graph_trace))
    _release_arrow(len(kernels) + len(runtime))

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
        tables=src.tables,
        diagnostics=diagnostics,
    )
    trace = Trace(meta=meta, kernels=kernels, runtime=runtime, memcpy=memcpy, memset=memset,
                  sync=sync, graph_trace=graph_trace, nvtx=nvtx, gpus=gpus, threads=threads)
    for name in DERIVED:  # made when first read (validate reads them)
        trace.derive_later(name)
    trace.hold_compacted()  # a cache entry's few-valued columns
    return trace
