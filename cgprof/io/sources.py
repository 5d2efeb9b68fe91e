"""Columnar sources: read only the columns cgprof needs from a trace, straight into Arrow.

One interface, four kinds of input (see docs/engine.md for how the reader was chosen):

* ``sqlite``      an ``nsys export --type sqlite`` file, read through DuckDB's SQLite scanner
                  (:mod:`cgprof.io.sqlite`), with Python's ``sqlite3`` as the fallback when the
                  scanner cannot be loaded;
* ``parquetdir``  ``nsys export --type parquetdir``: one ``TABLE.parquet`` per nsys table,
                  same table and column names as the SQLite export (:mod:`cgprof.io.dirsource`);
* ``arrowdir``    ``nsys export --type arrowdir``: one ``TABLE.arrow`` (Arrow IPC stream) per
                  table;
* ``cache``       cgprof's own columnar copy (:mod:`cgprof.io.cache`): a parquetdir holding
                  only the columns cgprof reads, plus a manifest.

A :class:`Source` knows every table and its columns (``tables``) and returns the columns asked
for as a :class:`pyarrow.Table` (``read``). Only what exists is asked for: the loader
(:mod:`cgprof.io.loader`) intersects with ``tables`` first. Every read is handed to ``spool``
when one is set (the cache writes each table as soon as it is read, so a 10M-row table's
Arrow copy is not kept for a write at the end), else remembered in ``reads``. A row filter
(:mod:`cgprof.io.filters`) set as ``pid_filter`` is applied within every read.

This module also tells a folder nsys exported from any other (:func:`dir_kind`) and opens an
SQLite file read-only (:func:`connect_readonly`).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cgprof import schema as S
from cgprof.io.threads import InThread, _cap_arrow_threads

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.filters import PidFilter, RowRange
    from cgprof.io.forked import _ForkedRead


#: Name suffixes of the directories nsys writes with ``nsys export --type parquetdir|arrowdir``.
DIR_SUFFIXES = {".parquetdir": "parquetdir", ".arrowdir": "arrowdir"}
#: File suffix of one table in each directory kind.
TABLE_SUFFIX = {"parquetdir": ".parquet", "arrowdir": ".arrow"}


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
