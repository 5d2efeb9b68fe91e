"""An nsys SQLite export as a source: probed with ``sqlite3``, read through DuckDB.

:class:`SqliteSource` reads each table in one Arrow batch, in rowid order, through DuckDB's
SQLite scanner (:mod:`cgprof.io.duck`), each table read ahead on a cursor of its own; through
``sqlite3`` where DuckDB cannot be loaded. A small export may be read ahead by a forked
process (:mod:`cgprof.io.forked`); one read a part at a time may read its parts from a spill
(:mod:`cgprof.io.spill`) instead of the file. The file is only ever opened read-only.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from cgprof import schema as S
from cgprof.errors import TraceError
from cgprof.io import duck as D
from cgprof.io.arrow import _DEFAULT_BATCH
from cgprof.io.filters import PidFilter, pid_sql
from cgprof.io.forked import ForkedReads, _ForkedRead, fork_reads_ok
from cgprof.io.sources import Source, UnreadableTable, _one_line, connect_readonly, probe_sqlite
from cgprof.io.spill import Spill, TableSpill
from cgprof.settings import current


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
                self.duck_temp = D.duckdb_temp()
                self._duck = D._duckdb_sqlite(self.path, self.duck_temp)
            except (ImportError, D.ScannerMissing) as exc:  # an install without the engine
                self._duck_failed = True
                if not D._FALLBACK:
                    D._FALLBACK.append(_one_line(exc))
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
            return con.execute(D.scan_sql(table, columns, rows, where)).to_arrow_table(
                batch_size=rows or _DEFAULT_BATCH)
        except duckdb.Error as exc:
            # e.g. text in an INTEGER column; loader.load names the cell to blame.
            raise UnreadableTable(table, _one_line(exc)) from None

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


_MAX_BATCH = 2**31 - 1


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
