"""Row filters applied within a source's scan, so that the rows they leave out are never held.

:class:`PidFilter` keeps the rows of some processes (a multi-rank trace read rank by rank);
:class:`RowRange` keeps a range of a one-process trace's activity rows (its analysis in chunks:
cgprof.metrics.chunked). A source asks a filter which column of a table it tests
(``column``), and applies it as SQL (``sql``: SQLite and DuckDB) or as a numpy mask over an
Arrow column (``mask``: Parquet and Arrow files, a spill).
"""

from __future__ import annotations

from typing import Any

from cgprof import schema as S


class PidFilter:
    """The rows of some processes only: ``keep`` True, the rows whose pid is in ``pids``;
    False, those whose pid is not. A :class:`~cgprof.io.sources.Source` with one applies it to
    every table that has a pid column (:data:`cgprof.schema.PID_COLUMN`) within its scan, so
    that the rows of the other processes are never held (a multi-rank trace read rank by
    rank)."""

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
    :class:`~cgprof.io.sources.Source` as a :class:`PidFilter` is, within the scan, so that the
    other rows are never held together; of an nsys table or of a cache entry's frame of it
    (``T.frame``)."""

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
