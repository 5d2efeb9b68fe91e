"""Arrow columns and files as the sources read them: batch sizes, row groups, IPC files.

:data:`_DEFAULT_BATCH` is the most rows asked for in one Arrow batch, and
:data:`SPILL_ROW_GROUP` the rows of a spill's Parquet row group, which a chunk's read takes
at a time; :func:`int64_values_and_mask` turns a nullable int64 column into numpy values and a
NULL mask without a copy where it can; :func:`_gather` joins pieces read a row group at a time
into one array per column, each piece let go once copied; :func:`_groups_in` picks a Parquet
file's row groups by their statistics; :class:`_open_ipc` opens an Arrow IPC stream (or file)
memory-mapped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cgprof.io.memory import release_arrow_pool

#: DuckDB's own rows per Arrow batch, and the most cgprof asks for in one batch.
_DEFAULT_BATCH = 1_000_000


#: Rows per row group of a :class:`cgprof.io.spill.TableSpill` file: what a chunk reads at least.
SPILL_ROW_GROUP = 262_144


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


def _batches(reader: Any) -> Any:
    """The record batches of an IPC stream reader (or of a file read as one)."""
    if isinstance(reader, _FileAsStream):
        f = reader._f
        return (f.get_batch(i) for i in range(f.num_record_batches))
    return iter(reader)
