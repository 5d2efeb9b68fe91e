"""nsys's folder exports and cgprof's cache entries: one file per table, read into Arrow.

A :class:`DirSource` reads ``TABLE.parquet`` (nsys's ``parquetdir``, a cache entry) or
``TABLE.arrow`` files (``arrowdir``: Arrow IPC streams, memory-mapped), the columns asked for
only. With a row filter (:mod:`cgprof.io.filters`) a table is read a batch at a time and
filtered as it goes, so that the rows left out are never held together; a :class:`RowRange`
reads only the Parquet row groups whose statistics meet its range.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from cgprof.errors import TraceError
from cgprof.io import arrow as A
from cgprof.io.arrow import _DEFAULT_BATCH, _batches, _gather, _groups_in, _open_ipc
from cgprof.io.filters import RowRange, _pids
from cgprof.io.sources import TABLE_SUFFIX, Source, _one_line
from cgprof.io.threads import threads


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
            batch = A.SPILL_ROW_GROUP if isinstance(rr, RowRange) else _DEFAULT_BATCH
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


def _batch_pairs(batch: Any) -> Any:
    import numpy as np
    import pyarrow.compute as pc

    device = pc.fill_null(batch.column(1), 0)  # (as pid_devices reads SQLite)
    pid = _pids(batch.column(0))
    if not len(pid):
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(np.stack([pid, np.asarray(device.to_numpy(zero_copy_only=False),
                                               dtype=np.int64)], axis=1), axis=0)
