"""Tables of an SQLite export written once as Parquet, read instead of the file.

SQLite has no index on a row's process, start time or correlation id, so a trace read a part
at a time would scan the whole file for each part. A spill scans it once: :class:`Spill`
writes the process tables one file set per process (a multi-rank trace read rank by rank),
:class:`TableSpill` the activity tables in row groups of :data:`cgprof.io.arrow.SPILL_ROW_GROUP`
rows (a trace read a chunk of steps at a time); a source with a spill
(:attr:`cgprof.io.sqlite.SqliteSource.spill`) reads each part's rows from it, in the order a
scan of the file gives them. Written through DuckDB (``COPY``, within the memory cap).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cgprof import schema as S
from cgprof.io import arrow as A
from cgprof.io.arrow import _gather, _groups_in
from cgprof.io.duck import _sql_str
from cgprof.io.filters import RowRange, pid_sql
from cgprof.io.memory import release_arrow_pool
from cgprof.io.sources import UnreadableTable
from cgprof.io.threads import threads

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.sqlite import SqliteSource


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
    file each in row groups of :data:`~cgprof.io.arrow.SPILL_ROW_GROUP` rows: a trace read a
    chunk at a time (:class:`RowRange`, cgprof.metrics.chunked) then scans SQLite once, not
    once per chunk (SQLite has no index on start times or correlation ids), and each chunk
    reads the row groups whose statistics meet its range. Rows read back in row-id order,
    the order a scan of the file gives them.

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
                        f"ROW_GROUP_SIZE {A.SPILL_ROW_GROUP})")
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
