"""Columnar sources: read only the columns cgprof needs from a trace, straight into Arrow.

One interface, four kinds of input (see docs/engine.md for how the reader was chosen):

* ``sqlite``      an ``nsys export --type sqlite`` file, read through DuckDB's SQLite scanner
                  (the extension ships as a wheel, loaded from its own file: no network), with
                  Python's ``sqlite3`` as the fallback when the scanner cannot be loaded;
* ``parquetdir``  ``nsys export --type parquetdir``: one ``TABLE.parquet`` per nsys table,
                  same table and column names as the SQLite export;
* ``arrowdir``    ``nsys export --type arrowdir``: one ``TABLE.arrow`` (Arrow IPC stream) per
                  table;
* ``cache``       cgprof's own columnar copy (:mod:`cgprof.io.cache`): a parquetdir holding only
                  the columns cgprof reads, plus a manifest.

A :class:`Source` knows every table and its columns (``tables``) and returns the columns asked
for as a :class:`pyarrow.Table` (``read``). Only what exists is asked for: the loader in
:mod:`cgprof.io.loader` intersects with ``tables`` first. Every read is handed to ``spool``
when one is set (the cache writes each table as soon as it is read, so a 10M-row table's
Arrow copy is not kept for a write at the end), else remembered in ``reads``.

The threads DuckDB and Arrow may use and DuckDB's memory cap come from the active
:class:`cgprof.settings.Settings` (the ranks' worker processes use one thread).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from cgprof import schema as S
from cgprof.errors import TraceError
from cgprof.settings import current, in_context

#: Name suffixes of the directories nsys writes with ``nsys export --type parquetdir|arrowdir``.
DIR_SUFFIXES = {".parquetdir": "parquetdir", ".arrowdir": "arrowdir"}
#: File suffix of one table in each directory kind.
TABLE_SUFFIX = {"parquetdir": ".parquet", "arrowdir": ".arrow"}

def threads() -> int:
    """Threads the engine may use (:attr:`cgprof.settings.Settings.threads`: every core, at
    most 8, unless set)."""
    return current().thread_count


_capped: list[int] = []


def _cap_arrow_threads() -> None:
    """Arrow's own thread pool follows the settings' ``threads`` too, when set (once per
    value)."""
    n = current().threads
    if n is not None and _capped != [n]:
        import pyarrow as pa

        pa.set_cpu_count(n)
        pa.set_io_thread_count(n)
        _capped[:] = [n]


def memory_limit() -> str:
    """The engine's memory cap (:attr:`cgprof.settings.Settings.memory_limit`)."""
    return current().memory_limit


#: What a whole-trace analysis holds at its peak per kernel or CUDA API row, and besides
#: them (the imports, the small tables), fitted to the 10M-row trace's measured peak
#: (docs/engine.md). A trace whose estimate exceeds the memory cap is read rank by rank or in
#: chunks (:mod:`cgprof.plan`).
WHOLE_BYTES_PER_ROW = 95
WHOLE_BYTES_BASE = 200_000_000


def whole_analysis_bytes(rows: int) -> int:
    """The peak memory a whole-trace analysis of ``rows`` kernels + API calls is expected
    to hold (:data:`WHOLE_BYTES_PER_ROW`)."""
    return WHOLE_BYTES_BASE + WHOLE_BYTES_PER_ROW * rows


def activity_rows(path: Path) -> int | None:
    """Kernels + CUDA API calls of the export at ``path`` (SQLite, or nsys's parquetdir),
    read off the file without a scan and without pandas; None when it does not say (an
    arrowdir, a report, anything unreadable: the load says what is wrong)."""
    path = Path(path)
    tables = (S.KERNEL, S.RUNTIME)
    try:
        if path.is_dir():
            kind = dir_kind(path)
            if kind is None:
                return None
            src: Source = DirSource(path, kind)
            counts = [src.row_count(t) for t in tables]
            src.close()
        elif path.is_file() and path.suffix.lower() != ".nsys-rep":
            conn = connect_readonly(path)
            try:
                counts = []
                for t in tables:  # (no probe: a few ms on every first run)
                    try:
                        top = conn.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0]
                    except sqlite3.OperationalError as exc:
                        if "no such table" not in str(exc):
                            raise
                        top = None
                    counts.append(top if isinstance(top, int) else 0 if top is None else None)
            finally:
                conn.close()
        else:
            return None
    except Exception:
        return None
    # (ignore: no None is left after any() above; mypy cannot narrow the list's items)
    return None if any(c is None for c in counts) else sum(counts)  # type: ignore[arg-type]


def over_memory_cap(path: Path) -> bool:
    """Whether the whole analysis of the trace at ``path`` is expected to hold more than the
    memory cap (:func:`whole_analysis_bytes` of :func:`activity_rows`; False where the rows
    are not known up front). Cheap: no pandas, no scan."""
    rows = activity_rows(path)
    return rows is not None and whole_analysis_bytes(rows) > current().memory_limit_bytes


def apart_wanted(path: Path, over: bool | None = None) -> bool:
    """Whether a multi-rank trace at ``path`` is to be read rank by rank: its whole analysis
    is expected to hold more than the memory cap (:func:`over_memory_cap`, or ``over`` where
    the caller asked it already), or the settings' ``ranks_apart`` is True (for any trace
    whose rows are known up front, and any exported folder); never when it is False. Cheap
    (no pandas, no scan): asked before every analysis."""
    force = current().ranks_apart
    if force is False:
        return False
    if force:  # (an arrowdir's rows are not known up front)
        return activity_rows(path) is not None or dir_kind(path) is not None
    return over_memory_cap(path) if over is None else over


def dir_kind(path: Path) -> str | None:
    """``"parquetdir"``/``"arrowdir"`` when ``path`` is a directory nsys exported, else None.

    A directory is one trace when its name ends in ``.parquetdir``/``.arrowdir`` or when it
    holds nsys's tables (``StringIds`` and one of the marker tables) as ``.parquet``/``.arrow``
    files. Any other directory is not a trace (a folder of traces, for those who take one).
    """
    if not path.is_dir():
        return None
    kind = DIR_SUFFIXES.get(path.suffix.lower())
    if kind is not None:
        return kind
    for kind, suffix in TABLE_SUFFIX.items():
        if (path / f"{S.STRING_IDS}{suffix}").is_file() and any(
            (path / f"{t}{suffix}").is_file() for t in S.NSYS_MARKER_TABLES
        ):
            return kind
    return None


def is_trace_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is one trace exported by nsys as a parquetdir or arrowdir."""
    return dir_kind(Path(path)) is not None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class UnreadableTable(ValueError):
    """A table of an SQLite export whose values no nsys export holds (text in an INTEGER
    column, ...): :func:`cgprof.io.loader.load` turns it into one line naming the cell."""

    def __init__(self, table: str, reason: str) -> None:
        super().__init__(f"cannot read table {table} ({reason})")
        self.table = table


class PidFilter:
    """The rows of some processes only: ``keep`` True, the rows whose pid is in ``pids``;
    False, those whose pid is not. A :class:`Source` with one applies it to every table that
    has a pid column (:data:`cgprof.schema.PID_COLUMN`) within its scan, so that the rows of
    the other processes are never held (a multi-rank trace read rank by rank)."""

    def __init__(self, pids: Any, keep: bool = True, tables: Any = None) -> None:
        self.pids = tuple(sorted({int(p) for p in pids}))
        self.keep = keep
        #: the tables whose rows may be kept (None: all); the others read as empty, unscanned
        self.tables = None if tables is None else frozenset(tables)

    def none_of(self, table: str) -> bool:
        """True when no row of ``table`` is kept (not scanned at all)."""
        return self.tables is not None and table not in self.tables

    def only_columns(self, table: str) -> frozenset[str] | None:
        """The columns of ``table`` read (None: every one the loader reads)."""
        return None

    def column(self, table: str, columns: list[str]) -> str | None:
        """The column of ``table`` to filter on, when it is among ``columns``."""
        col = S.PID_COLUMN.get(table)
        return col if col is not None and col in columns else None

    def sql(self, col: str, table: str = "") -> str:
        """The condition on ``col`` (of ``table``: the same for every table), in SQL
        (SQLite and DuckDB both); a NULL id is process 0's, as the loader reads it (a NULL in
        a nullable integer column reads as 0)."""
        pid = pid_sql(col)
        if not self.pids:
            return "TRUE" if not self.keep else "FALSE"
        ids = ", ".join(str(p) for p in self.pids)
        return f"{pid} {'IN' if self.keep else 'NOT IN'} ({ids})"

    def mask(self, values: Any, col: str = "", table: str = "") -> Any:
        """The condition on an Arrow column of global ids (``col`` of ``table``: the same for
        every one), as a numpy bool array (a NULL id is process 0's, as in :meth:`sql`)."""
        import numpy as np

        hit = np.isin(_pids(values), np.asarray(self.pids, dtype=np.int64))
        return hit if self.keep else ~hit


class RowRange:
    """Some rows of a one-process trace, for its analysis in chunks (cgprof.metrics.chunked):
    of the activity tables in ``tables`` only (None: all but the NVTX events, which the
    chunks read once, whole), the API calls that start in ``start`` = [lo, hi) and the GPU
    rows whose correlation id is in ``corr`` = [lo, hi] (None: every row). Applied by a
    :class:`Source` as a :class:`PidFilter` is, within the scan, so that the other rows are
    never held together; of an nsys table or of a cache entry's frame of it (``T.frame``)."""

    keep = False  # (what load_part's checks read: the rows are not one process's)
    ACTIVITY = (S.KERNEL, S.RUNTIME, S.MEMCPY, S.MEMSET, S.SYNC, S.GRAPH_TRACE, S.NVTX)
    GPU = (S.KERNEL, S.MEMCPY, S.MEMSET, S.SYNC, S.GRAPH_TRACE)

    def __init__(self, start: tuple[int, int] | None = None,
                 corr: tuple[int, int] | None = None, tables: Any = None,
                 gpu_start: tuple[int, int] | None = None,
                 columns: dict[str, Any] | None = None) -> None:
        self.start = None if start is None else (int(start[0]), int(start[1]) - 1)
        self.corr = None if corr is None else (int(corr[0]), int(corr[1]))
        self.gpu_start = None if gpu_start is None else (int(gpu_start[0]),
                                                          int(gpu_start[1]) - 1)
        self.tables = (frozenset(t for t in self.ACTIVITY if t != S.NVTX) if tables is None
                       else frozenset(tables))
        #: nsys table -> the only columns read of it (the others read as missing: a
        #: summary's pass that needs few, cgprof.metrics.chunked)
        self.columns = {t: frozenset(c) for t, c in (columns or {}).items()}

    def only_columns(self, table: str) -> frozenset[str] | None:
        return self.columns.get(self._table(table))

    @staticmethod
    def _table(table: str) -> str:
        return table[: -len(".frame")] if table.endswith(".frame") else table

    def none_of(self, table: str) -> bool:
        t = self._table(table)
        return t in self.ACTIVITY and t not in self.tables

    def column(self, table: str, columns: list[str]) -> str | None:
        if self.none_of(table):
            return columns[0] if columns else None
        t = self._table(table)
        names: tuple[str, ...] = ()
        if t == S.RUNTIME and self.start is not None:
            names = ("start", "start_ns")
        elif t in self.GPU and self.gpu_start is not None:
            names = ("start", "start_ns")
        elif t in self.GPU and self.corr is not None:
            names = ("correlationId", "corr_id")
        return next((c for c in names if c in columns), None)

    def bounds(self, table: str, col: str) -> tuple[int, int]:
        """Inclusive bounds of ``col``'s values in ``table`` (empty: lo > hi)."""
        if col in ("start", "start_ns"):
            bounds = self.start if self._table(table) == S.RUNTIME else self.gpu_start
        else:
            bounds = self.corr
        assert bounds is not None  # column() names a bounded column only
        return bounds

    def sql(self, col: str, table: str = "") -> str:
        lo, hi = self.bounds(table, col)
        return f'("{col}" >= {lo} AND "{col}" <= {hi})' if lo <= hi else "FALSE"

    def mask(self, values: Any, col: str, table: str = "") -> Any:
        """The condition on the Arrow column ``col`` of ``table`` (its values), as a numpy
        bool array."""
        import numpy as np

        lo, hi = self.bounds(table, col)
        v = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
        return (v >= lo) & (v <= hi)


def pid_sql(col: str) -> str:
    """The process of a row, in SQL, from its global id column ``col`` (NULL: process 0)."""
    return f'((COALESCE("{col}", 0) >> {S.PID_SHIFT}) & {S.ID_MASK})'


def _pids(values: Any) -> Any:
    """The processes of an Arrow column of global ids, as int64 (NULL: process 0)."""
    import numpy as np
    import pyarrow.compute as pc

    ids = pc.fill_null(values, 0) if values.null_count else values
    return (np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.int64)
            >> S.PID_SHIFT) & S.ID_MASK


class Source:
    """Columns of one trace, read on demand into Arrow."""

    kind = "?"

    def __init__(self, path: Path, tables: dict[str, list[str]]) -> None:
        self.path = path
        self.tables = tables
        #: table -> Arrow table, every read so far when no ``spool`` takes them and
        #: ``keep_reads`` (off for nsys's and cgprof's own columnar folders: never stored).
        self.reads: dict[str, Any] = {}
        self.keep_reads = True
        #: called with (table, Arrow table) after each read instead of keeping it in ``reads``
        self.spool: Any = None
        #: reads asked for early (:meth:`read_ahead`): table -> (columns, the read)
        self._ahead: dict[str, tuple[list[str], InThread | _ForkedRead]] = {}
        #: tables read so far (not read ahead again)
        self._read_tables: set[str] = set()
        #: when set, every read keeps these processes' rows only (:class:`PidFilter`)
        self.pid_filter: PidFilter | RowRange | None = None

    def readable(self, table: str) -> list[str]:
        """The columns of ``table`` that a load reads: every one it has, but those a row
        filter leaves out (:meth:`RowRange.only_columns`)."""
        have = self.tables.get(table, [])
        only = self.pid_filter.only_columns(table) if self.pid_filter is not None else None
        return list(have) if only is None else [c for c in have if c in only]

    def read(self, table: str, columns: list[str]) -> Any:
        """The named columns of ``table`` (all of them must exist) as a pyarrow.Table."""
        _cap_arrow_threads()
        self._read_tables.add(table)
        tbl = self._take_ahead(table, columns)
        if tbl is None:
            tbl = self._read(table, columns)
        if self.spool is not None:
            self.spool(table, tbl)
        elif self.keep_reads:
            self.reads[table] = tbl
        return tbl

    def _read(self, table: str, columns: list[str]) -> Any:  # pragma: no cover
        raise NotImplementedError

    def row_count(self, table: str) -> int | None:
        """Rows of ``table``, when the source knows them without a scan (else None)."""
        return None

    def pid_devices(self, table: str) -> Any:
        """The distinct (pid, device_id) pairs of a GPU table, as a pandas frame sorted by
        both: the processes a multi-rank trace holds, without its rows."""
        import numpy as np
        import pandas as pd

        have = self.tables.get(table, [])
        if "globalPid" not in have or "deviceId" not in have:
            pairs = np.zeros((0, 2), dtype=np.int64)
        else:
            pairs = self._pid_devices(table)
        return pd.DataFrame({"pid": pairs[:, 0].astype(np.int64),
                             "device_id": pairs[:, 1].astype(np.int64)})

    def _pid_devices(self, table: str) -> Any:  # pragma: no cover
        """(n, 2) int64 array of the distinct (pid, deviceId) pairs, sorted."""
        raise NotImplementedError

    def _where(self, table: str, columns: list[str]) -> str:
        """The SQL condition of :attr:`pid_filter` on ``table`` ("" when none applies)."""
        f = self.pid_filter
        col = f.column(table, columns) if f is not None else None
        if col is None or f is None:
            return ""
        return "FALSE" if f.none_of(table) else f.sql(col, table)

    def read_ahead(self, table: str, columns: list[str]) -> None:
        """Start reading ``table``'s columns now, in a thread; the later :meth:`read` of the
        same columns takes the result (or its error). Arrow and DuckDB read without the GIL,
        so the table is read while the caller builds others, or imports the analysis. A
        source that cannot read in the background (sqlite3 without DuckDB) reads when asked.
        """
        if table in self._ahead or table in self._read_tables:
            return
        job = self._ahead_job(table, list(columns))
        if job is None:
            return
        self._ahead[table] = (list(columns), InThread(job, name=f"cgprof-read-{table}"))

    def load_reads(self, info: bool = False) -> list[tuple[str, list[str]]]:
        """(table, columns) a load reads: those of :data:`cgprof.schema.READ_COLUMNS` the
        source has (:meth:`readable`); ``info``: also the small tables it reads on the way
        (:data:`cgprof.schema.INFO_COLUMNS`: metadata, GPUs, threads), each where it has all
        those columns, as the load asks for them."""
        out = []
        for table, columns in S.READ_COLUMNS.items():
            readable = self.readable(table)
            have = [c for c in columns if c in readable]
            if have:
                out.append((table, have))
        if info:
            out += [(table, columns) for table, columns in S.INFO_COLUMNS.items()
                    if set(columns) <= set(self.tables.get(table, ()))]
        return out

    def read_ahead_activity(self) -> None:
        """:meth:`read_ahead` the columns the loader reads (:data:`cgprof.schema.READ_COLUMNS`,
        those present): the kernel and CUDA API tables side by side, and the small tables
        beside them, each in its own thread."""
        for table, columns in self.load_reads():
            self.read_ahead(table, columns)

    def _ahead_job(self, table: str, columns: list[str]) -> Any:
        """A function of no argument that reads ``table`` in another thread, or None."""
        return None

    def _take_ahead(self, table: str, columns: list[str]) -> Any:
        """The table :meth:`read_ahead` read for these columns (None when none was asked)."""
        ahead = self._ahead.pop(table, None)
        if ahead is None:
            return None
        asked, read = ahead
        read.wait()
        if asked != list(columns):
            return None
        return read.result()

    def _join_ahead(self) -> None:
        for _, read in self._ahead.values():
            read.wait()
        self._ahead.clear()

    def frame(self, table: str, rebuild: Any = None) -> Any:
        """The finished Trace frame of ``table`` when the source stores one (cgprof's cache:
        :meth:`cgprof.io.cache.CachedSource.frame`), else None: build it from the columns."""
        return None

    def close(self) -> None:
        self._join_ahead()


class InThread:
    """``fn(*args)`` run in a daemon thread from now on; :meth:`result` waits for it and
    returns its value or raises its exception, in the caller's thread. For the reads ahead
    (:meth:`Source.read_ahead`) and the metrics that run beside others
    (:func:`cgprof.metrics.analyze`)."""

    def __init__(self, fn: Any, *args: Any, name: str) -> None:
        import threading

        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=in_context(self._run), args=(fn, args),
                                        name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Any, args: tuple[Any, ...]) -> None:
        try:
            self._box["value"] = fn(*args)
        except BaseException as exc:  # raised again by result(), in the caller's thread
            self._box["error"] = exc

    def alive(self) -> bool:
        return self._thread.is_alive()

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self.wait()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


#: The largest SQLite export whose reads ahead run in a forked process
#: (:meth:`SqliteSource.read_ahead_early`): where the interpreter's start and imports are
#: much of a run. A larger one is read ahead in threads of the process itself (its tables
#: would otherwise pass through a file, and its analysis takes seconds anyway).
FORK_READ_MAX_BYTES = 64 * 2**20


def fork_reads_ok(src: SqliteSource) -> bool:
    """Whether ``src`` may be read ahead in a forked process: Linux, a process of one thread
    (a fork copies the calling thread only: a lock another one held would stay held in the
    child; the CLI prefetches before it starts any), a file of at most
    :data:`FORK_READ_MAX_BYTES`, the whole file (no row filter, no spill), DuckDB
    installed, and the settings' reader is not ``thread`` nor their engine ``sqlite3``."""
    import importlib.util

    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return False
    except OSError:
        return False
    if current().reader == "thread" or src._duck_failed:
        return False
    if src.pid_filter is not None or src.spill is not None or src._duck is not None:
        return False
    try:
        if src.path.stat().st_size > FORK_READ_MAX_BYTES:
            return False
    except OSError:
        return False
    return importlib.util.find_spec("duckdb") is not None


class ForkedReads:
    """Tables of an SQLite export read by one forked process through DuckDB (each in a thread
    of its own there, as :meth:`SqliteSource.read_ahead` would, copied into DuckDB first while
    pyarrow is imported: :meth:`_child`), each handed back as an Arrow IPC stream file in a
    temporary folder and memory-mapped by :meth:`table`.

    The child only reads: the parent's sqlite3 connection is not used there (each table's
    batch size is taken before the fork), its standard streams go to /dev/null, and it leaves
    with ``os._exit``. When it fails (a damaged file, no scanner), every table is read again
    by the parent when asked, which says what is wrong."""

    def __init__(self, src: SqliteSource, jobs: list[tuple[str, list[str]]],
                 into: Path | None = None) -> None:
        from cgprof import scratch

        self.jobs = jobs
        rows = [src._batch_rows(table) for table, _ in jobs]
        #: ``into``: an empty folder that becomes the trace's cache entry (the files are
        #: then LZ4-compressed: ResNet-18's 18.7 MB of columns take 5.1 MB), else a
        #: temporary folder of the system's
        self.folder = into or scratch.folder("cgprof-reads-")
        self.into = into
        self.handed = False  # the folder given to the caller (:meth:`hand_over`)
        self.status: int | None = None
        try:
            pid = os.fork()
        except BaseException:  # no fork (OSError), or Ctrl-C's KeyboardInterrupt during it
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        if pid:
            self.pid = pid
            return
        code = 1
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            code = self._child(src.path, rows)
        except BaseException:  # noqa: BLE001 - the child never returns into the caller
            code = 1
        finally:
            os._exit(code)

    def _child(self, path: Path, rows: list[int | None]) -> int:
        con = _duckdb_sqlite(path, duckdb_temp())
        # Each table is first copied into a table of DuckDB's own, in memory, by threads
        # that do not hold the GIL while they run, and this thread imports pyarrow (numpy
        # with it) meanwhile: that import no longer comes before the reads. The copy is
        # then turned into Arrow in its order (a scan of DuckDB's own table keeps its
        # insertion order, in parallel). H200 host, ResNet-18's 11 tables, the child alone:
        # 364-412 ms -> 264-276 ms.
        staged = [InThread(self._stage, con, i, table, columns, rows[i],
                           name=f"cgprof-stage-{table}")
                  for i, (table, columns) in enumerate(self.jobs)]
        import pyarrow as pa

        for stage in staged:
            stage.result()
        options = pa.ipc.IpcWriteOptions(compression="lz4" if self.into else None)

        def one(i: int, table: str) -> None:
            cur = con.cursor()
            try:
                tbl = cur.execute(f"SELECT * FROM {_staged(i)}").to_arrow_table(
                    batch_size=rows[i] or _DEFAULT_BATCH)
                cur.execute(f"DROP TABLE {_staged(i)}")
            finally:
                cur.close()
            with pa.OSFile(str(self.file(i)), "wb") as sink, \
                    pa.ipc.new_stream(sink, tbl.schema, options=options) as writer:
                writer.write_table(tbl)  # a stream, as nsys's arrowdir (what _open_ipc reads)

        reads = [InThread(one, i, table, name=f"cgprof-read-{table}")
                 for i, (table, _) in enumerate(self.jobs)]
        for read in reads:
            read.result()
        con.close()
        return 0

    @staticmethod
    def _stage(con: Any, i: int, table: str, columns: list[str], rows: int | None) -> None:
        """Copy ``columns`` of ``table`` into DuckDB's own table :func:`_staged` ``(i)``, in
        rowid order (sorted where :meth:`SqliteSource._scan` sorts: there a sort turns the
        scan into Arrow faster, here it is what lets the copy run in parallel; H200 host,
        500k kernels + 500k calls, the child alone: 401-430 ms scanning straight into Arrow,
        505-560 ms through an unsorted copy, 310-373 ms through a sorted one)."""
        cur = con.cursor()
        try:
            query = SqliteSource._select(table, columns, rows)
            cur.execute(f"CREATE TABLE {_staged(i)} AS {query}")
        finally:
            cur.close()

    def wait(self) -> bool:
        """Wait for the child; whether it read every table."""
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.status = -1
        return self.status == 0

    def file(self, i: int) -> Path:
        """The file of the ``i``-th job's table: ``TABLE.arrow``, as a cache entry of Arrow
        files names it (cgprof.io.cache)."""
        return self.folder / f"{self.jobs[i][0]}.arrow"

    def table(self, i: int) -> Any:
        """The ``i``-th job's table (memory-mapped), or None when the child failed."""
        if not self.wait():
            return None
        import pyarrow as pa

        try:
            with _open_ipc(self.file(i)) as reader:
                return reader.read_all()
        except (OSError, pa.ArrowException):
            return None

    def hand_over(self) -> Path | None:
        """The folder ``into`` when the child read every table into it, now the caller's
        (:meth:`close` no longer removes it); else None."""
        if self.into is None or not self.wait() or self.handed:
            return None
        if not all(self.file(i).is_file() for i in range(len(self.jobs))):
            return None
        self.handed = True
        return self.into

    def close(self) -> None:
        """Stop the child if it is still reading; remove the folder unless it was handed
        over (a table already taken keeps its mapping)."""
        import shutil
        import signal

        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait()
        if not self.handed:
            shutil.rmtree(self.folder, ignore_errors=True)


def _staged(i: int) -> str:
    """The name of the DuckDB table a :class:`ForkedReads` child copies its ``i``-th job's
    table into."""
    return f"cgprof_staged_{i}"


class _ForkedRead:
    """One table of a :class:`ForkedReads`, with :class:`InThread`'s interface (its result
    None when the child failed: :meth:`Source.read` then reads it)."""

    def __init__(self, reads: ForkedReads, i: int) -> None:
        self.reads, self.i = reads, i

    def alive(self) -> bool:
        return self.reads.status is None

    def wait(self) -> None:
        self.reads.wait()

    def result(self) -> Any:
        return self.reads.table(self.i)


class SqliteSource(Source):
    """An nsys SQLite export, opened read-only: probed with sqlite3, read through DuckDB."""

    kind = "sqlite"

    def __init__(self, path: Path, conn: sqlite3.Connection,
                 tables: dict[str, list[str]]) -> None:
        super().__init__(path, tables)
        self.conn = conn
        self._duck: Any = None
        self.duck_temp: Path | None = None  # where its DuckDB connection spills
        self._duck_failed = current().engine == "sqlite3"
        self._cursors: dict[str, Any] = {}  # the DuckDB cursor of each read ahead
        self._forked: ForkedReads | None = None  # the reads ahead of read_ahead_early's process
        #: the process tables written apart once (:class:`Spill`), read instead of the file
        #: by a read of one process's rows; or the activity tables written once
        #: (:class:`TableSpill`), read instead of the file by every read
        self.spill: Spill | TableSpill | None = None

    def _spilled(self, table: str, columns: list[str]) -> Any:
        """A function reading ``table``'s rows of the one process :attr:`pid_filter` keeps
        from :attr:`spill`, or None when the spill does not hold them."""
        f = self.pid_filter
        if isinstance(self.spill, TableSpill):
            return self.spill.reader(table, columns, f)
        if (self.spill is None or not isinstance(f, PidFilter) or not f.keep or len(f.pids) != 1
                or f.column(table, columns) is None or f.none_of(table)
                or not self.spill.holds(table, columns)):
            return None
        return lambda: self.spill.read(table, f.pids[0], columns)

    def _duckdb(self) -> Any:
        if self._duck is None and not self._duck_failed:
            try:
                self.duck_temp = duckdb_temp()
                self._duck = _duckdb_sqlite(self.path, self.duck_temp)
            except (ImportError, ScannerMissing) as exc:  # an install without the engine
                self._duck_failed = True
                if not _FALLBACK:
                    _FALLBACK.append(_one_line(exc))
            except Exception:  # a file the scanner cannot attach: sqlite3 still works
                self._duck_failed = True
        return self._duck

    def read_ahead_early(self, into: Path | None = None) -> bool:
        """:meth:`read_ahead_activity` before the caller imports the analysis
        (:func:`cgprof.io.prefetch.prefetch`): in a forked process where :func:`fork_reads_ok`,
        with the small tables the load reads in its own thread (metadata, GPUs, threads).
        Importing duckdb and attaching the file (~55 ms on the H200 host, holding the GIL)
        then happen beside the caller's imports, not before them.

        ``into``: an empty folder the forked process writes its tables into, as the
        trace's cache entry (:meth:`forked_entry`). Whether the reads were forked (when not,
        ``into`` is left as it was)."""
        if not fork_reads_ok(self):
            self.read_ahead_activity()
            return False
        jobs = self.load_reads(info=True)
        try:
            self._forked = ForkedReads(self, jobs, into)
        except OSError:  # no fork (a process limit): read ahead in threads
            self.read_ahead_activity()
            return False
        for i, (table, columns) in enumerate(jobs):
            self._ahead[table] = (columns, _ForkedRead(self._forked, i))
        return True

    def writes_entry(self) -> bool:
        """Whether a forked process is reading this export into a cache entry's folder
        (:meth:`read_ahead_early` ``into``)."""
        return self._forked is not None and self._forked.into is not None

    def forked_entry(self) -> Path | None:
        """The folder the forked process wrote every table the load reads into
        (:meth:`read_ahead_early` ``into``), now the caller's; None when there is none."""
        return None if self._forked is None else self._forked.hand_over()

    def _ahead_job(self, table: str, columns: list[str]) -> Any:
        """A scan on its own DuckDB cursor (10M kernels + 10M API calls: the two tables are
        scanned side by side, and while the kernels' frame is built). The connection is
        opened here, in the caller's thread: importing duckdb is most of it (~0.08 s), and
        holds the GIL wherever it runs."""
        if self._spilled(table, columns) is not None:
            # read when asked, one table after the other: side by side, two tables' reads
            # and sorts sat beside the kernels' frame being built (4 ranks of 2.5M: peak
            # 1.08 -> 1.0 GB, and the load is not what takes the time)
            return None
        if self._duckdb() is None:
            return None
        cur = self._duck.cursor()
        self._cursors[table] = cur
        where = self._where(table, columns)
        rows = None if where else self._batch_rows(table)  # sqlite3: in its own thread only

        def job() -> Any:
            try:
                return self._scan(cur, table, columns, rows, where)
            finally:
                cur.close()

        return job

    def _read(self, table: str, columns: list[str]) -> Any:
        import pyarrow as pa

        spilled = self._spilled(table, columns)
        if spilled is not None:
            return spilled()
        con = self._duckdb()
        where = self._where(table, columns)
        if con is not None:
            return self._scan(con, table, columns, None if where else self._batch_rows(table),
                              where)
        cols = ", ".join(f'"{c}"' for c in columns)
        cond = f" WHERE {where}" if where else ""
        try:
            rows = self.conn.execute(f'SELECT {cols} FROM "{table}"{cond}').fetchall()
        except sqlite3.DatabaseError as exc:
            raise TraceError(
                f"{self.path}: cannot read SQLite ({exc}); is the file truncated or corrupt?"
            ) from None
        data = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
        try:
            arrays = [pa.array(list(v)) for v in data]
        except (pa.ArrowException, OverflowError) as exc:
            raise UnreadableTable(table, _one_line(exc)) from None
        return pa.Table.from_arrays(arrays, names=columns)

    @staticmethod
    def _scan(con: Any, table: str, columns: list[str], rows: int | None,
              where: str = "") -> Any:
        """``SELECT columns FROM table [WHERE where]`` through DuckDB, as one Arrow batch of
        ``rows`` (the table's largest rowid; None: not known, or a filtered read, whose
        batches DuckDB sizes: one of ``rows`` is allocated whole, up front).

        One record batch: DuckDB's default (1M rows each) makes every column of a 10M-row
        table 10 chunks, and each later ``to_numpy`` a concatenating copy (10M kernels:
        2.0 s -> 0.5 s from Arrow to numpy, 1.6 -> 0.95 GB peak).

        In rowid order, as the plain scan gives them; from :data:`SORTED_SCAN_THREADS`
        threads written ``ORDER BY rowid``. DuckDB scans SQLite in parallel slices, but a
        result whose order must be kept is turned into Arrow by one thread when it comes
        straight from the scan (which has no batch order to merge by); from a sort it is
        turned into Arrow by every thread, in order. H200 host, 8 threads, 1M rows: kernels
        0.67 -> 0.17 s, API calls 0.44 -> 0.12 s, the same table in one chunk. On 2 threads
        the sort costs more than it saves (kernels 0.47 -> 0.58 s)."""
        import duckdb

        try:
            return con.execute(SqliteSource._select(table, columns, rows, where)).to_arrow_table(
                batch_size=rows or _DEFAULT_BATCH)
        except duckdb.Error as exc:
            # e.g. text in an INTEGER column; trace.load names the cell to blame.
            raise UnreadableTable(table, _one_line(exc)) from None

    @staticmethod
    def _select(table: str, columns: list[str], rows: int | None, where: str = "") -> str:
        """The query of :meth:`_scan`: ``columns`` of the attached ``table``, in rowid order
        (sorted from :data:`SORTED_SCAN_THREADS` threads, when ``rows`` is known)."""
        cols = ", ".join(f'"{c}"' for c in columns)
        order = " ORDER BY rowid" if rows is not None and threads() >= SORTED_SCAN_THREADS else ""
        cond = f" WHERE {where}" if where else ""
        return f'SELECT {cols} FROM s."{table}"{cond}{order}'

    def _pid_devices(self, table: str) -> Any:
        import numpy as np

        # (a NULL device is device 0, as the loader reads a copy's or memset's; a kernel's
        # NULL device is damage its rank's load names)
        sql = (f'SELECT DISTINCT {pid_sql("globalPid")}, COALESCE("deviceId", 0) '
               f'FROM {{}}"{table}"')
        con = self._duckdb()
        try:
            rows = (con.execute(sql.format("s.")).fetchall() if con is not None
                    else self.conn.execute(sql.format("")).fetchall())
        except Exception as exc:
            raise UnreadableTable(table, _one_line(exc)) from None
        return np.array(sorted(rows), dtype=np.int64).reshape(-1, 2)

    def _batch_rows(self, table: str) -> int | None:
        """Rows per Arrow batch for ``table``: all of them (DuckDB allocates the batch up
        front, so the size is the table's largest rowid, which SQLite reads off its B-tree
        without a scan; rowids are 1..n in nsys's exports); None when unknown (DuckDB's
        default batches, no ORDER BY rowid)."""
        try:
            top = self.conn.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
        except sqlite3.DatabaseError:
            top = None
        if not isinstance(top, int) or not 0 < top <= _MAX_BATCH:
            return None
        return top

    def close(self) -> None:
        if self._forked is not None:
            self._forked.close()  # stopped if still reading: what it read is not wanted
        # Reads ahead nobody took (the command failed first): stop them rather than wait for
        # a 10M-row scan to finish.
        for table, (_, read) in self._ahead.items():
            cur = self._cursors.get(table)
            if read.alive() and cur is not None:
                with contextlib.suppress(Exception):
                    cur.interrupt()
        self._join_ahead()
        self._cursors.clear()
        if self._duck is not None:
            self._duck.close()
            self._duck = None
        if self.duck_temp is not None:
            import shutil

            shutil.rmtree(self.duck_temp, ignore_errors=True)  # what a spill left there
        self.conn.close()


class _SpilledTables:
    """Tables of an SQLite export written once as Parquet in ``folder`` (each with its row
    ids, :data:`ROWID`), read instead of the file: what :class:`Spill` and
    :class:`TableSpill` share."""

    ROWID = "__rowid"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.columns: dict[str, list[str]] = {}  # table -> the nsys columns written
        #: the source's tables and columns (what a cache entry of the spill lists)
        self.source_tables: dict[str, list[str]] = {}

    def holds(self, table: str, columns: list[str]) -> bool:
        return set(columns) <= set(self.columns.get(table, ()))

    @classmethod
    def _write(cls, src: SqliteSource, folder: Path, tables: Any, copy: Any) -> Any:
        """A spill of ``src`` into ``folder``: for each (table, its extra columns) of
        ``tables``, the columns the loader reads of it that ``src`` has (with the extras)
        written by ``copy(con, table, columns)``, which says whether it wrote any row. None
        when DuckDB cannot (the folder is then removed)."""
        con = src._duckdb()
        if con is None:
            return None
        spill = cls(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for table, extra in tables:
                have = src.tables.get(table, [])
                cols = [c for c in S.READ_COLUMNS.get(table, []) if c in have]
                if not cols:
                    continue
                cols += [c for c in extra if c not in cols]
                if copy(con, table, cols):
                    spill.columns[table] = cols
        except Exception:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            return None
        return spill


class Spill(_SpilledTables):
    """The process tables of an SQLite export, written once as Parquet in ``folder``, one
    file set per process (DuckDB ``COPY ... PARTITION_BY``, within the memory cap): a
    multi-rank trace read rank by rank then scans SQLite once, not once per rank (SQLite
    has no index on the process). Each process's rows read back in rowid order, the order
    a scan of the file gives them (:meth:`read`)."""

    PID = "__pid"

    @classmethod
    def write(cls, src: SqliteSource, folder: Path) -> Spill | None:
        """Every process table of ``src`` (the columns the loader reads) into ``folder``;
        None when DuckDB cannot (the reads then filter the file, rank by rank)."""
        def copy(con: Any, table: str, cols: list[str]) -> bool:
            col = S.PID_COLUMN[table]
            out = folder / table
            sel = ", ".join(f'"{c}"' for c in cols)
            con.execute(
                f'COPY (SELECT {sel}, rowid AS {cls.ROWID}, {pid_sql(col)} AS {cls.PID} '
                f'FROM s."{table}") '
                f"TO '{_sql_str(str(out))}' (FORMAT parquet, PARTITION_BY ({cls.PID}), "
                f"WRITE_PARTITION_COLUMNS false)")
            return next(out.glob("*/*.parquet"), None) is not None  # (else: no row at all)

        tables = [(t, [col]) for t, col in S.PID_COLUMN.items()
                  if t != S.THREAD_NAMES and col in src.tables.get(t, [])]
        return cls._write(src, folder, tables, copy)

    def read(self, table: str, pid: int, columns: list[str]) -> Any:
        """Process ``pid``'s rows of ``table``, ``columns`` only, in rowid order."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        files = [pq.ParquetFile(f) for f in
                 sorted((self.folder / table / f"{self.PID}={pid}").glob("*.parquet"))]
        if not files:  # no row of this process: the table's columns, empty
            any_file = next((self.folder / table).glob("*/*.parquet"), None)
            if any_file is None:
                raise UnreadableTable(table, "spilled table without files")
            schema = pq.read_schema(any_file)
            return pa.schema([schema.field(c) for c in columns]).empty_table()

        def chunks(c: str) -> Any:
            return pa.chunked_array([ch for f in files for ch in f.read(columns=[c]).column(0)
                                     .chunks], type=files[0].schema_arrow.field(c).type)

        # DuckDB writes a partition from its threads, not in rowid order: the order is
        # taken from the row ids, then each column is read and put in it alone (a table
        # sorted whole costs three copies of it at once)
        rowid = np.asarray(chunks(self.ROWID).to_numpy(), dtype=np.int64)
        order = None if len(rowid) < 2 or bool((rowid[1:] > rowid[:-1]).all()) else (
            pa.array(np.argsort(rowid, kind="stable")))
        del rowid
        cols = []
        for c in columns:
            col = chunks(c)
            cols.append(col if order is None else pc.take(col, order))
            del col
            release_arrow_pool()  # the column as read (kept by Arrow's pool until then)
        return pa.Table.from_arrays(cols, names=columns)


class TableSpill(_SpilledTables):
    """The activity tables of an SQLite export (the columns the loader reads, and the row
    id), written once as Parquet in ``folder`` (DuckDB ``COPY``, within the memory cap), one
    file each in row groups of :data:`SPILL_ROW_GROUP` rows: a trace read a chunk at a time
    (:class:`RowRange`, cgprof.metrics.chunked) then scans SQLite once, not once per chunk
    (SQLite has no index on start times or correlation ids), and each chunk reads the row
    groups whose statistics meet its range. Rows read back in row-id order, the order a
    scan of the file gives them.

    (Written in the loader's order instead, by start, end and row id, each table read whole
    would need no sort; on the 10M trace under a 1GB cap DuckDB's sorts took 13 s more and
    the run's peak RSS was the same, 0.95 GB: the loader's sort takes one column at a
    time.)"""

    @classmethod
    def write(cls, src: SqliteSource, folder: Path) -> TableSpill | None:
        """Every activity table of ``src`` into ``folder``; None when DuckDB cannot (the
        reads then filter the file, chunk by chunk)."""
        def copy(con: Any, table: str, cols: list[str]) -> bool:
            sel = ", ".join(f'"{c}"' for c in cols)
            out = folder / f"{table}.parquet"
            con.execute(f'COPY (SELECT {sel}, rowid AS {cls.ROWID} FROM s."{table}") '
                        f"TO '{_sql_str(str(out))}' (FORMAT parquet, "
                        f"ROW_GROUP_SIZE {SPILL_ROW_GROUP})")
            return True

        tables: list[tuple[str, list[str]]] = [(t, []) for t in RowRange.ACTIVITY]
        return cls._write(src, folder, tables, copy)

    def reader(self, table: str, columns: list[str], rows: Any) -> Any:
        """A function reading ``table``'s ``columns`` (the rows ``rows``, a
        :class:`RowRange` or None, keeps) from the spill, or None when it does not hold
        them."""
        if not self.holds(table, columns):
            return None
        if rows is not None and not isinstance(rows, RowRange):
            return None
        return lambda: self._read(table, columns, rows)

    def _read(self, table: str, columns: list[str], rows: RowRange | None) -> Any:
        """The rows ``rows`` keeps, read a row group at a time into one array per column
        (an integer column's values in one numpy buffer that the Arrow array shares, so
        that cgprof.io.frames reads it without a copy): a whole table is held once, not as
        Arrow's chunks and then their copy."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        with pq.ParquetFile(self.folder / f"{table}.parquet") as pf:
            if rows is not None and rows.none_of(table):
                return pa.schema([pf.schema_arrow.field(c) for c in columns]).empty_table()
            col = rows.column(table, columns) if rows is not None else None
            groups = None
            if rows is not None and col is not None:
                groups = _groups_in(pf, col, rows.bounds(table, col))
            if groups is None:
                groups = list(range(pf.metadata.num_row_groups))
            want = [*columns, self.ROWID]
            schema = pa.schema([pf.schema_arrow.field(c) for c in want])

            def pieces() -> Any:
                for g in groups:
                    tbl = pf.read_row_group(g, columns=want, use_threads=threads() > 1)
                    if rows is not None and col is not None:
                        tbl = tbl.filter(pa.array(rows.mask(tbl.column(col), col, table)))
                    yield tbl

            most = sum(pf.metadata.row_group(g).num_rows for g in groups)
            got = _gather(pieces(), schema, most)
        joined = {c: got.column(c) for c in want}
        # rows back in row-id order (DuckDB's COPY keeps it: a check, not a sort)
        rowid = joined.pop(self.ROWID).to_numpy(zero_copy_only=False)
        if len(rowid) > 1 and not bool((rowid[1:] > rowid[:-1]).all()):
            order = pa.array(np.argsort(rowid, kind="stable"))
            joined = {c: a.take(order) for c, a in joined.items()}
        return pa.Table.from_arrays([joined[c] for c in columns], names=columns)


def _gather(pieces: Any, schema: Any, most: int) -> Any:
    """Arrow tables or record batches of ``schema``'s columns (``most`` rows at most in
    all) as one table of one array per column, each piece given up once copied: an integer
    column's values in one numpy buffer that the Arrow array shares (read by numpy without
    a copy), so that a table read a row group at a time is held once, not as Arrow's chunks
    and then their copy (10M kernels from a spill: 1.50 -> 1.09 GB at the read's peak)."""
    import pyarrow as pa

    out = {f.name: _ColumnFill(f.type, most) for f in schema}
    for piece in pieces:
        for c, fill in out.items():
            col = piece.column(c)
            fill.add(col.chunks if isinstance(col, pa.ChunkedArray) else [col])
        piece = col = None
        release_arrow_pool()  # the piece as read (kept by Arrow's pool until then)
    return pa.Table.from_arrays([fill.array() for fill in out.values()], schema=schema)


class _ColumnFill:
    """One column read a piece at a time (:func:`_gather`): an integer column's
    values (and NULL mask, made at the first NULL) written into numpy buffers of ``most``
    rows, any other column's Arrow chunks kept and joined at the end."""

    def __init__(self, type_: Any, most: int) -> None:
        import numpy as np
        import pyarrow as pa

        self.type, self.n = type_, 0
        self.values = (np.empty(most, dtype=type_.to_pandas_dtype())
                       if pa.types.is_integer(type_) else None)
        self.mask: Any = None
        self.chunks: list[Any] = []

    def add(self, chunks: list[Any]) -> None:
        """Append the Arrow arrays ``chunks``."""
        import numpy as np

        if self.values is None:
            self.chunks.extend(chunks)
            return
        for a in chunks:
            k = len(a)
            if a.null_count:
                if self.mask is None:
                    self.mask = np.zeros(len(self.values), dtype=bool)
                self.mask[self.n:self.n + k] = a.is_null().to_numpy(zero_copy_only=False)
                a = a.fill_null(0)
            self.values[self.n:self.n + k] = a.to_numpy()
            self.n += k

    def array(self) -> Any:
        import pyarrow as pa

        if self.values is None:
            return pa.concat_arrays(self.chunks) if self.chunks else pa.array([], self.type)
        n = self.n
        return pa.array(self.values[:n], mask=None if self.mask is None else self.mask[:n])


#: Rows per row group of a :class:`TableSpill` file: what a chunk reads at least.
SPILL_ROW_GROUP = 262_144


#: DuckDB's own rows per Arrow batch, and the most cgprof asks for in one batch.
_DEFAULT_BATCH = 1_000_000
#: From this many engine threads a SQLite table is read ``ORDER BY rowid``
#: (:meth:`SqliteSource._scan`).
SORTED_SCAN_THREADS = 4
_MAX_BATCH = 2**31 - 1


# ---------------------------------------------------------------------------------------
# Sources opened early: :func:`cgprof.io.prefetch.prefetch` opens the trace a command is about to
# analyse and starts reading its big tables before the analysis (pandas, the metrics: ~0.3 s)
# is even imported; the load then takes the source, reads under way.

_early: dict[str, Source] = {}


def _early_key(path: Path) -> str:
    return str(Path(path).resolve())


def keep_early(path: Path, src: Source) -> None:
    """Hold ``src`` (opened for ``path``, reads under way) for :func:`take_early`."""
    key = _early_key(path)
    old = _early.pop(key, None)
    if old is not None:
        old.close()
    _early[key] = src


def take_early(path: Path, kind: type[Source] | None = None) -> Source | None:
    """The source opened early for ``path`` (when of class ``kind``), handed over once."""
    if not _early:
        return None
    key = _early_key(path)
    src = _early.get(key)
    if src is None or (kind is not None and not isinstance(src, kind)):
        return None
    return _early.pop(key)


def drop_early() -> None:
    """Close the sources opened early that no load took (waiting for their reads)."""
    while _early:
        _early.popitem()[1].close()


def open_sqlite_early(path: Path) -> SqliteSource | None:
    """``path`` as an :class:`SqliteSource` when it is an nsys SQLite export, else None:
    the load's own checks then say what is wrong with it."""
    try:
        conn = connect_readonly(path)
    except sqlite3.Error:
        return None
    try:
        tables = probe_sqlite(conn)
    except Exception:
        conn.close()
        return None
    if not any(t in tables for t in S.NSYS_MARKER_TABLES):
        conn.close()
        return None
    return SqliteSource(path, conn, tables)


class ScannerMissing(RuntimeError):
    """The duckdb-extension-sqlite-scanner package holds no extension file."""


#: Why this process reads SQLite exports through sqlite3 instead of DuckDB's scanner (set
#: once, when duckdb or its SQLite scanner cannot be imported or found; empty: it could, or
#: it was not tried). The commands say so on stderr (:func:`engine_fallback`).
_FALLBACK: list[str] = []


def engine_fallback(clear: bool = False) -> str | None:
    """The reason SQLite was read through sqlite3, cgprof's slower fallback, because the
    engine is not installed (None when it was not); ``clear`` forgets it."""
    reason = _FALLBACK[0] if _FALLBACK else None
    if clear:
        _FALLBACK.clear()
    return reason


def _duckdb_sqlite(path: Path, temp: Path) -> Any:
    """A DuckDB connection with ``path`` attached read-only as schema ``s``, spilling into
    the folder ``temp`` (made by DuckDB when it spills)."""
    import duckdb
    import duckdb_extension_sqlite_scanner as scanner

    ext_dir = Path(scanner.__file__).parent / "extensions"
    exts = sorted(ext_dir.glob("*/sqlite_scanner.duckdb_extension"))
    if not exts:
        raise ScannerMissing(f"no sqlite_scanner extension file under {ext_dir}")
    con = duckdb.connect(config={
        "threads": threads(),
        "memory_limit": memory_limit(),
        # where a sort or join beyond the cap spills (DuckDB's own default, for a database
        # in memory: ".tmp" in the current folder, the user's)
        "temp_directory": str(temp),
        "allow_unsigned_extensions": "true",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
    })
    try:
        # DuckDB draws a progress bar on stdout for a query past 2 s (a 10M-row scan or
        # spill), and stdout holds only the report (``--json -``); its cursors inherit this
        con.execute("SET enable_progress_bar = false")
        con.execute(f"LOAD '{_sql_str(str(exts[-1]))}'")
        con.execute(f"ATTACH '{_sql_str(str(path.resolve()))}' AS s (TYPE sqlite, READ_ONLY)")
    except Exception:
        con.close()
        raise
    return con


def duckdb_temp() -> Path:
    """A new folder name for one DuckDB connection to spill into, in the system's temporary
    folder (made by DuckDB when it spills; removed when its source closes)."""
    from cgprof import scratch

    return scratch.name("cgprof-duckdb-", next(_TEMPS))


_TEMPS = itertools.count()


def _sql_str(text: str) -> str:
    return text.replace("'", "''")


class DirSource(Source):
    """nsys's ``parquetdir``/``arrowdir`` export, or cgprof's cache entry (a parquetdir)."""

    def __init__(self, path: Path, kind: str, tables: dict[str, list[str]] | None = None):
        self.kind = kind
        self.suffix = TABLE_SUFFIX.get(kind, ".parquet")
        if tables is None:
            tables = self._probe(path)
        super().__init__(path, tables)
        self.keep_reads = False

    def _file(self, path: Path, table: str) -> Path:
        return path / f"{table}{self.suffix}"

    def _ahead_job(self, table: str, columns: list[str]) -> Any:
        if self.suffix == ".parquet":
            import pyarrow.parquet  # noqa: F401  (imported here, not in the thread)
        else:
            import pyarrow.ipc  # noqa: F401
        return lambda: self._read(table, columns)

    def _probe(self, path: Path) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f in sorted(path.glob(f"*{self.suffix}")):
            try:
                out[f.name[: -len(self.suffix)]] = self._schema(f).names
            except Exception as exc:
                raise TraceError(
                    f"{f}: cannot read as {self.kind} table ({_one_line(exc)})"
                ) from None
        return out

    def _schema(self, f: Path) -> Any:
        if self.suffix == ".arrow":

            with _open_ipc(f) as reader:
                return reader.schema
        import pyarrow.parquet as pq

        return pq.read_schema(f)

    def _read(self, table: str, columns: list[str]) -> Any:
        import pyarrow as pa

        f = self._file(self.path, table)
        col = self.pid_filter.column(table, columns) if self.pid_filter is not None else None
        try:
            if col is not None:
                return self._read_filtered(f, columns, col)
            if self.suffix == ".arrow":
                with _open_ipc(f) as reader:
                    return reader.read_all().select(columns)
            import pyarrow.parquet as pq

            # ParquetFile, not pq.read_table: the same columns, without importing and
            # setting up pyarrow.dataset for each file (~10 ms over a cache entry's files).
            with pq.ParquetFile(f) as pf:
                meta = pf.metadata
                if meta.num_row_groups < 2:
                    return pf.read(columns=columns, use_threads=threads() > 1)
                # a row group at a time, into one array per column (_gather)
                schema = pa.schema([pf.schema_arrow.field(c) for c in columns])
                return _gather((pf.read_row_group(g, columns=columns,
                                                  use_threads=threads() > 1)
                                for g in range(meta.num_row_groups)), schema, meta.num_rows)
        except OSError as exc:
            raise TraceError(f"{f}: cannot read ({_one_line(exc)})") from None
        except Exception as exc:
            raise TraceError(
                f"{f}: cannot read as {self.kind} table ({_one_line(exc)})"
            ) from None


    def row_count(self, table: str) -> int | None:
        if table not in self.tables:
            return 0
        if self.suffix != ".parquet":
            return None
        import pyarrow.parquet as pq

        try:
            with pq.ParquetFile(self._file(self.path, table)) as pf:
                return int(pf.metadata.num_rows)
        except Exception:
            return None

    def _pid_devices(self, table: str) -> Any:
        """A batch at a time: the pairs of each batch, then of them all."""
        import numpy as np

        f = self._file(self.path, table)
        seen = [np.zeros((0, 2), dtype=np.int64)]
        try:
            with self._batches(f, ["globalPid", "deviceId"]) as (_, batches):
                seen.extend(_batch_pairs(b) for b in batches)
        except Exception as exc:
            raise TraceError(f"{f}: cannot read as {self.kind} table ({_one_line(exc)})") from None
        return np.unique(np.concatenate(seen), axis=0)

    def _read_filtered(self, f: Path, columns: list[str], col: str) -> Any:
        """The rows :attr:`pid_filter` keeps, a batch at a time: the other processes' rows
        are never held together."""
        import pyarrow as pa

        assert self.pid_filter is not None
        table = f.name[: -len(self.suffix)]
        if self.pid_filter.none_of(table):
            with self._batches(f, columns, col) as (schema, _):
                return schema.empty_table()
        flt = self.pid_filter
        with self._batches(f, columns, col) as (schema, batches):
            kept = (b.filter(pa.array(flt.mask(b.column(col), col, table))) for b in batches)
            if self.suffix != ".parquet":  # (Arrow IPC: mapped, the batches are views)
                return pa.Table.from_batches(list(kept), schema=schema)
            # into one array per column (_gather), the other rows never held together
            return _gather(kept, schema, batches.rows)

    @contextlib.contextmanager
    def _batches(self, f: Path, columns: list[str], col: str | None = None) -> Any:
        """(schema of ``columns``, their record batches) of the table file ``f``, read a
        batch at a time (Arrow IPC: as written; Parquet: :data:`_DEFAULT_BATCH` rows, a
        :class:`RowRange`'s read :data:`SPILL_ROW_GROUP`).
        ``col``: the column a :class:`RowRange` filters on; a Parquet file's row groups whose
        statistics of it lie outside the range are not read (a chunk of a sorted table
        reads its few row groups, not the file)."""
        import pyarrow as pa

        if self.suffix == ".arrow":
            with _open_ipc(f) as reader:
                schema = pa.schema([reader.schema.field(c) for c in columns])
                yield schema, (b.select(columns) for b in _batches(reader))
            return
        import pyarrow.parquet as pq

        with pq.ParquetFile(f) as pf:
            schema = pa.schema([pf.schema_arrow.field(c) for c in columns])
            groups = None
            rr = self.pid_filter
            if col is not None and isinstance(rr, RowRange) and not rr.none_of(
                    f.name[: -len(self.suffix)]):
                groups = _groups_in(pf, col, rr.bounds(f.name[: -len(self.suffix)], col))
            # a chunk's rows a row group at a time (the spill's and a columns entry's are
            # SPILL_ROW_GROUP rows: 10M trace under a 1GB cap, batches of 1M rows peaked
            # 0.2 GB higher)
            batch = SPILL_ROW_GROUP if isinstance(rr, RowRange) else _DEFAULT_BATCH
            yield schema, _Batches(pf.iter_batches(
                batch_size=batch, columns=columns, row_groups=groups,
                use_threads=threads() > 1), pf.metadata.num_rows if groups is None else sum(
                    pf.metadata.row_group(g).num_rows for g in groups))


class _Batches:
    """Record batches of a Parquet file's row groups, and how many rows those hold (what a
    filtered read of them keeps at most: the size of :func:`_gather`'s buffers)."""

    def __init__(self, batches: Any, rows: int) -> None:
        self.batches, self.rows = batches, rows

    def __iter__(self) -> Any:
        return iter(self.batches)


def _groups_in(pf: Any, col: str, bounds: tuple[int, int]) -> list[int] | None:
    """The row groups of the Parquet file ``pf`` whose min/max statistics of ``col`` meet
    the inclusive ``bounds`` (None: every group, where a group has no statistics)."""
    lo, hi = bounds
    meta = pf.metadata
    at = pf.schema_arrow.get_field_index(col)
    out = []
    for g in range(meta.num_row_groups):
        st = meta.row_group(g).column(at).statistics
        if st is None or not st.has_min_max:
            return None
        if int(st.max) >= lo and int(st.min) <= hi:
            out.append(g)
    return out


def _batch_pairs(batch: Any) -> Any:
    import numpy as np
    import pyarrow.compute as pc

    device = pc.fill_null(batch.column(1), 0)  # (as pid_devices reads SQLite)
    pid = _pids(batch.column(0))
    if not len(pid):
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(np.stack([pid, np.asarray(device.to_numpy(zero_copy_only=False),
                                               dtype=np.int64)], axis=1), axis=0)


def _batches(reader: Any) -> Any:
    """The record batches of an IPC stream reader (or of a file read as one)."""
    if isinstance(reader, _FileAsStream):
        f = reader._f
        return (f.get_batch(i) for i in range(f.num_record_batches))
    return iter(reader)


class _open_ipc:
    """Arrow IPC: nsys writes streams; accept the file format too."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: Any = None

    def __enter__(self) -> Any:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self.fh = pa.memory_map(str(self.path), "r")
        try:
            return ipc.open_stream(self.fh)
        except pa.ArrowInvalid:
            self.fh.seek(0)
            f = ipc.open_file(self.fh)
            return _FileAsStream(f)

    def __exit__(self, *exc: object) -> None:
        self.fh.close()


class _FileAsStream:
    def __init__(self, f: Any) -> None:
        self._f = f
        self.schema = f.schema

    def read_all(self) -> Any:
        return self._f.read_all()


def int64_values_and_mask(col: Any) -> tuple[Any, Any]:
    """A nullable Arrow int64 column as (int64 values, 0 where NULL; NULL mask).

    Straight from the Arrow buffers: ``fill_null`` + ``is_null`` cost 12 ms per 1M rows, the
    validity bitmap unpacked with numpy a fraction of that, and an all-NULL column (nsys's
    graph ids outside graphs) nothing."""
    import numpy as np

    n = len(col)
    if col.null_count == 0:
        return col.to_numpy(), np.zeros(n, dtype=bool)
    if col.null_count == n:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    arr = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    validity, data = arr.buffers()[:2]
    off = arr.offset
    mask = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=off + n,
                         bitorder="little")[off:] == 0
    return np.where(mask, 0, np.frombuffer(data, dtype=np.int64)[off:off + n]), mask


def connect_readonly(path: Path) -> sqlite3.Connection:
    """Open ``path`` with SQLite's read-only URI mode: cgprof never writes into a trace."""
    if os.name == "nt":  # drive letters and backslashes
        import urllib.request  # 10-25 ms of imports (http.client, email, ssl)

        url = urllib.request.pathname2url(str(path.resolve()))
    else:  # what pathname2url does on POSIX, without urllib.request's imports
        import urllib.parse

        url = urllib.parse.quote(str(path.resolve()))
    uri = "file:" + url + "?mode=ro"
    return sqlite3.connect(uri, uri=True)


def probe_sqlite(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Map every table in the file to its column names."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in names}


_LIBC: list[Any] = []


def glibc() -> Any:
    """The C library as a ``ctypes.CDLL`` on Linux (loaded once), else None: for
    ``malloc_trim`` (:func:`release_memory`) and ``mallopt``
    (:func:`cgprof.commands.heavy_imports`); callers check that the function is there (musl
    has neither)."""
    if not _LIBC:
        import sys

        lib = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                lib = ctypes.CDLL("libc.so.6")
            except OSError:
                lib = None
        _LIBC.append(lib)
    return _LIBC[0]


#: Below this many activity rows (kernels + CUDA API calls) :func:`release_memory` keeps what
#: was freed: the next stage reuses those pages instead of faulting fresh ones in (1M-kernel
#: trace, cached: 85k -> 56k page faults, peak RSS 521 -> 549 MB, docs/engine.md).
RELEASE_MIN_ROWS = 4_000_000


def release_arrow_pool() -> None:
    """Give the OS back the pages Arrow's memory pool keeps after its buffers are freed (the
    columns of a loaded trace are numpy views of Arrow buffers: dropping one frees nothing
    until then); unlike :func:`release_memory`, the C heap is left as it is."""
    import sys

    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()


def release_memory(rows: int | None = None) -> None:
    """Give the OS back the memory freed since the last call: what Arrow's pool holds but no
    longer uses (:func:`release_arrow_pool`) and, with glibc, the free chunks of the C heap
    (``malloc_trim``: freed medium-sized arrays otherwise stay in the process).
    Called between the stages of a load and an analysis so that the peak RSS of a 10M-row
    trace is what is alive, not what was. A few ms; a no-op where neither applies, and when
    ``rows`` (the trace's activity rows) is below :data:`RELEASE_MIN_ROWS`."""
    if rows is not None and rows < RELEASE_MIN_ROWS:
        return
    release_arrow_pool()
    trim = getattr(glibc(), "malloc_trim", None)
    if trim is not None:
        trim(0)
