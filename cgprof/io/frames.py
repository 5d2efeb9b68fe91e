"""nsys's tables as the :class:`~cgprof.io.trace.Trace` frames: Arrow columns -> numpy -> pandas.

Each ``_load_*`` function reads one table's columns from a source
(:class:`cgprof.io.sources.Source`, only those that exist: they vary with the nsys version and
with what was traced) and builds its frame: names resolved through ``StringIds`` as
categoricals (one lookup per distinct id), ``globalTid``/``globalPid`` split into
``pid``/``tid``, every time an integer nanosecond, rows sorted by (start, end); never a
Python object per row on the big tables. :func:`_rebuild` makes the columns the cache leaves
out of a stored frame by the same expressions. A value no nsys export holds raises
:class:`cgprof.io.validate.DamagedColumn` or :class:`cgprof.errors.TraceError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.errors import TraceError
from cgprof.io import validate as V
from cgprof.io.arrow import int64_values_and_mask
from cgprof.io.memory import release_memory
from cgprof.io.trace import map_categories, share_constants

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.sources import Source


def _read_meta(src: Source) -> dict[str, str]:
    out: dict[str, str] = {}
    for table in (S.META_EXPORT_OLD, S.META_EXPORT, S.META_CAPTURE):
        want = S.INFO_COLUMNS[table]  # name, value
        if set(want) <= set(src.tables.get(table, [])):
            tbl = src.read(table, want)
            for name, value in zip(tbl.column("name").to_pylist(),
                                   tbl.column("value").to_pylist(), strict=True):
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
# reading tables: Arrow columns -> numpy -> pandas, no Python object per row on big tables

#: Column kinds in a read spec: "int" (NULL or a missing column -> 0) or "null" (nullable
#: Int64: NULL or a missing column -> <NA>), or an int default for a missing column.
Spec = S.Spec


def _arrow_ints(col: Any, path: Path, table: str, name: str) -> tuple[np.ndarray, Any]:
    """An Arrow integer column as (int64 values, 0 where NULL; null mask or None), zero-copy
    when it can."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_null(t):
        return np.zeros(len(col), dtype=np.int64), np.ones(len(col), dtype=bool)
    if not (pa.types.is_integer(t) or pa.types.is_boolean(t)):
        try:
            col = pc.cast(col, pa.int64(), safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise TraceError(
                f"{path}: table {table} column {name} holds {t} values where nsys writes "
                f"integers; is the file corrupt or not written by nsys?"
            ) from None
    elif t != pa.int64():
        # nsys's uint64 ids are SQLite's signed int64 bit for bit.
        col = pc.cast(col, pa.int64(), safe=False)
    if col.null_count:
        return int64_values_and_mask(col)
    return col.to_numpy(), None


def _present(src: Source, table: str, spec: Spec) -> list[str]:
    """The columns of ``spec`` that ``table`` has and a load reads
    (:meth:`cgprof.io.sources.Source.readable`; none when the table is missing)."""
    cols = src.readable(table)
    return [c for c, _, _ in spec if c in cols]


def _int_frame(src: Source, table: str, spec: Spec,
               required: tuple[str, ...] = ("start", "end")) -> pd.DataFrame:
    """Read integer columns of ``table``: ``spec`` is (nsys column, alias, "int"|"null").

    ``required``: columns nsys declares NOT NULL: a NULL there means a damaged file (nullable
    ones, such as correlationId, read as 0 like a missing column)."""
    have = _present(src, table, spec)
    tbl = src.read(table, have) if have else None
    n = tbl.num_rows if tbl is not None else 0
    arrays = {c: tbl.column(c) for c in have} if tbl is not None else {}
    del tbl
    data: dict[str, object] = {}
    for column, alias, kind in spec:
        if column in arrays:
            values, mask = _arrow_ints(arrays.pop(column), src.path, table, column)
            if mask is not None and column in required and mask.any():
                raise V.DamagedColumn(table, column, f"is NULL in {int(mask.sum())} rows")
        else:
            values, mask = np.zeros(n, dtype=np.int64), (np.ones(n, dtype=bool)
                                                         if kind == "null" else None)
        if kind == "null":  # values are 0 where NULL (see _arrow_ints)
            data[alias] = pd.arrays.IntegerArray(
                values, np.zeros(n, dtype=bool) if mask is None else mask)
        else:
            data[alias] = values
    return pd.DataFrame(data, copy=False)


def start_end_order(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The stable order by (start, end) (``np.lexsort((end, start))``), or None when the rows
    are in that order already.

    Rows already in start order whose only disorder is between rows of equal start (nsys's
    runtime table: 38 of 2M calls) are not sorted again: only the runs of equal start that
    hold a decreasing end are, in one lexsort over their rows. Sorting the subset by (start,
    end) puts each run back into its own slots, since the runs are contiguous and in order.
    """
    if len(start) < 2:
        return None
    d = start[1:] - start[:-1]
    if not (d >= 0).all():
        return np.lexsort((end, start))
    bad = (d == 0) & (end[1:] < end[:-1])
    if not bad.any():
        return None
    run = np.concatenate(([0], np.cumsum(d != 0)))  # run number of each row
    unsorted = np.zeros(run[-1] + 1, dtype=bool)
    unsorted[run[1:][bad]] = True
    rows = np.flatnonzero(unsorted[run])
    order = np.arange(len(start))
    order[rows] = rows[np.lexsort((end[rows], start[rows]))]
    return order


def _sort(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Stable sort by ``keys``; skipped (same result) when the rows are in order already.

    Plain integer keys: one order (:func:`start_end_order` for (start_ns, end_ns)) and a take
    per column, each column dropped from ``df`` (which the caller gives up) as its sorted copy
    is made, so a 10M-row table never exists twice (``sort_values`` copies every column at
    once, and is slower)."""
    if len(df) > 1:
        # A one-value column is the same in any order: shared first (share_constants), it is
        # kept, not taken (10M kernels read from SQLite: device, pid and the graph ids, 0.3
        # GB of copies fewer at the load's peak).
        df = share_constants(df)
        arrs = [df[k].to_numpy() for k in keys]
        if all(isinstance(x, np.ndarray) and x.dtype.kind in "iu" for x in arrs):
            if len(keys) == 2:
                order = start_end_order(*arrs)
            elif len(keys) == 1 and (arrs[0][1:] >= arrs[0][:-1]).all():
                order = None
            else:
                order = np.lexsort(arrs[::-1])
            del arrs
            if order is None:
                return df.reset_index(drop=True)
            out = {}
            for c in list(df.columns):
                col = df.pop(c)
                if _order_free(col):
                    out[c] = col.array if not isinstance(col.dtype, np.dtype) else (
                        col.to_numpy())
                    continue
                out[c] = (col.to_numpy()[order] if isinstance(col.dtype, np.dtype)
                          else col.array.take(order))
                del col
                if len(order) >= 1_000_000:
                    _release_arrow(len(order))  # the old column's pages, if Arrow held them
            return pd.DataFrame(out, copy=False)
    return df.sort_values(keys, kind="stable").reset_index(drop=True)


def _order_free(col: pd.Series) -> bool:
    """A column :func:`share_constants` made one value: any order of its rows is itself."""
    if isinstance(col.dtype, np.dtype):
        return col.dtype.kind in "iu" and col.to_numpy().strides == (0,)
    return isinstance(col.dtype, pd.Int64Dtype) and len(col) > 1 and not col.count()


def _int(df: pd.DataFrame, cols: list[str]) -> None:
    """Columns that must be present in every row: plain int64."""
    for c in cols:
        df[c] = df[c].fillna(0).astype("int64")


def _nullable(df: pd.DataFrame, cols: list[str]) -> None:
    for c in cols:
        df[c] = df[c].astype("Int64")


def _durations(df: pd.DataFrame) -> None:
    df["dur_ns"] = df["end_ns"] - df["start_ns"]


def _names(ids: np.ndarray, strings: pd.Series, index: pd.Index,
           owned: bool = False) -> pd.Series:
    """Resolve StringIds ids (-1: none) as a categorical, sorted categories.

    One dictionary lookup per distinct id, then integer codes: never a Python object per row.
    StringIds ids are small and dense, so the distinct ids come from a table over their range
    (a scatter and a cumsum) rather than from ``pd.factorize``'s hash table (3x slower); the
    categories are sorted by text either way, so the result is the same. ``owned``: ``ids``
    is the caller's to give up (it may be used as scratch space)."""
    if len(ids) == 0:
        return pd.Series([], dtype="object", index=index)
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo < 4 * len(ids) + 65536:
        seen = np.zeros(hi - lo + 1, dtype=bool)
        at = ids if owned else ids - lo
        if owned and lo:
            at -= lo  # in place
        seen[at] = True
        uniq = np.flatnonzero(seen) + lo
        cat = _categories(uniq, strings)
        # each id's code through one small table over the id range (position in uniq, then
        # its category's code): one gather of the rows, into the codes' own narrow dtype
        # (10M kernels: no int64 position per row, 80 MB fewer at the load's peak)
        lut = cat.codes[np.maximum(np.cumsum(seen) - 1, 0)]
        return pd.Series(pd.Categorical.from_codes(lut[at], dtype=cat.dtype), index=index,
                         copy=False)
    codes, uniq = pd.factorize(ids, sort=False)
    cat = _categories(uniq, strings)
    return pd.Series(pd.Categorical.from_codes(cat.codes[codes], dtype=cat.dtype), index=index,
                     copy=False)


def _categories(uniq: np.ndarray, strings: pd.Series) -> pd.Categorical:
    """The names of StringIds ids ``uniq`` (in that order) as a categorical, "<unknown
    string N>" where none: each distinct id's string in one lookup of the index
    (``strings.get`` per id cost ~25 us each: ~10 ms of a first ResNet-18 load)."""
    at = strings.index.get_indexer(uniq) if len(strings) else np.full(len(uniq), -1)
    found = strings.to_numpy(dtype=object)[np.maximum(at, 0)] if len(strings) else at
    return pd.Categorical([found[k] if at[k] >= 0 else f"<unknown string {int(i)}>"
                           for k, i in enumerate(uniq)])


def _load_strings(src: Source) -> pd.Series:
    if S.STRING_IDS not in src.tables:
        return pd.Series(dtype="object")
    cols = src.tables[S.STRING_IDS]
    want = S.READ_COLUMNS[S.STRING_IDS]  # ["id", "value"], as read ahead
    if not set(want) <= set(cols):
        return pd.Series(dtype="object")
    tbl = src.read(S.STRING_IDS, want)
    ids = tbl.column("id").to_pylist()
    values = tbl.column("value").to_pylist()
    return pd.Series(dict(zip(ids, values, strict=True)), dtype="object")


def _pid_from_global(series: pd.Series) -> pd.Series:
    values = series.to_numpy(dtype=np.int64)
    pid = np.right_shift(values, S.PID_SHIFT)  # masked in place: one new array, not two
    np.bitwise_and(pid, S.ID_MASK, out=pid)
    return pd.Series(pid, index=series.index, dtype="int64", copy=False)


def _tid_from_global(series: pd.Series) -> pd.Series:
    values = series.to_numpy(dtype=np.int64)
    return pd.Series(values & S.ID_MASK, index=series.index, dtype="int64", copy=False)


_KERNEL = S.KERNEL_SPEC


def _ids(ids: pd.arrays.IntegerArray) -> tuple[np.ndarray, bool]:
    """A nullable StringIds id column as int64 ids, -1 where NULL, and whether that array is
    the caller's own (not a view of the column's buffer, which may be Arrow's, read-only)."""
    out = ids.to_numpy(dtype=np.int64, na_value=-1)
    return out, bool(out.flags.writeable and not np.may_share_memory(out, ids._data))


def _load_kernels(src: Source, strings: pd.Series) -> pd.DataFrame:
    df = _int_frame(src, S.KERNEL, _KERNEL, required=("start", "end", "deviceId", "streamId"))
    df["pid"] = _pid_from_global(df.pop("global_pid"))
    # The id columns given up as they are read, each id array made once and used as the
    # names' scratch space (10M kernels: ~0.3 GB fewer at the first load's peak).
    short, own_short = _ids(df.pop("short_id").array)
    name_id = df.pop("name_id").array
    missing = name_id.isna()
    name, own_name = _ids(name_id)
    del name_id
    if missing.any():
        if not own_name:
            name, own_name = name.copy(), True
        name[missing] = short[missing]
    del missing
    df["name"] = _names(name, strings, df.index, owned=own_name)
    del name
    df["short_name"] = _names(short, strings, df.index, owned=own_short)
    del short
    # dur_ns: made when first read (Trace.DERIVED), not sorted here (10M kernels: 80 MB and
    # its sorted copy fewer at the first load's peak)
    return _sort(df, ["start_ns", "end_ns"])


_RUNTIME = S.RUNTIME_SPEC


def _load_runtime(src: Source, strings: pd.Series) -> pd.DataFrame:
    df = _int_frame(src, S.RUNTIME, _RUNTIME, required=("start", "end", "eventClass"))
    df["pid"] = _pid_from_global(df["global_tid"])  # tid, dur_ns: made when first read
    ids, owned = _ids(df.pop("name_id").array)
    raw = _names(ids, strings, df.index, owned=owned)
    del ids
    df["name_raw"] = raw
    if len(df):
        df["name"] = map_categories(raw, S.strip_version_suffix)
        df["nsys_name"] = map_categories(raw, S.nsys_api_name)
    else:
        df["name"] = pd.Series([], dtype="object")
        df["nsys_name"] = pd.Series([], dtype="object")
    return _sort(df, ["start_ns", "end_ns"])


def _load_gpu_ops(src: Source, table: str) -> pd.DataFrame:
    """Memcpy / memset / sync / graph-trace rows: start, end, device, stream, pid, corr and
    the table's own columns (:data:`cgprof.schema.GPU_OP_SPECS`)."""
    df = _int_frame(src, table, S.GPU_OP_SPECS[table])
    df["pid"] = _pid_from_global(df["global_pid"])
    df = df.drop(columns=["global_pid"])
    _durations(df)
    return _sort(df, ["start_ns", "end_ns"])


def _column(values: list) -> object:
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    if any(isinstance(v, int) for v in values) and all(
        v is None or isinstance(v, int) for v in values
    ):
        return pd.array(values, dtype="Int64")
    return np.array(values, dtype=object)


def _nvtx_ints(col: Any) -> object:
    """What :func:`_column` makes of an Arrow integer column's values, without a Python int
    per row: int64 when no NULL, Int64 with some, None objects when all are NULL. None for
    any other column type (the per-value path checks and converts those)."""
    import pyarrow as pa

    if not pa.types.is_int64(col.type):
        return None
    if col.null_count == len(col):
        return np.array([None] * len(col), dtype=object)
    if col.null_count:
        return pd.arrays.IntegerArray(*int64_values_and_mask(col))
    return col.to_numpy()


_NVTX_COLS = S.NVTX_COLS


def _load_nvtx(src: Source, strings: pd.Series) -> pd.DataFrame:
    cols = src.tables.get(S.NVTX)
    if cols is None:
        df = pd.DataFrame({alias: pd.Series(dtype="int64") for _, alias, _ in _NVTX_COLS})
    else:
        have = [c for c, _, _ in _NVTX_COLS if c in cols]
        tbl = src.read(S.NVTX, have)
        n = tbl.num_rows
        data: dict[str, object] = {}
        for column, alias, default in _NVTX_COLS:
            if column in have and n:
                fast = _nvtx_ints(tbl.column(column))
                if fast is not None:
                    data[alias] = fast
                    continue
            values = tbl.column(column).to_pylist() if column in have else [default] * n
            if alias in ("start_ns", "end_ns", "event_type", "global_tid", "domain_id",
                         "range_id", "end_global_tid", "text_id"):
                for v in values:
                    if v is not None and not isinstance(v, int):
                        raise TraceError(
                            f"{src.path}: table {S.NVTX} column {column} holds "
                            f"{type(v).__name__} values where nsys writes integers; is the "
                            f"file corrupt or not written by nsys?")
            data[alias] = _column(values) if n else pd.Series(dtype="int64")
        df = pd.DataFrame(data, copy=False)
        n_null = int(pd.isna(df["start_ns"]).sum()) if n else 0
        if n_null:  # end is NULL for an unterminated range, start never
            raise V.DamagedColumn(S.NVTX, "start", f"is NULL in {n_null} rows")
    _int(df, ["start_ns", "event_type", "global_tid", "domain_id"])
    _nullable(df, ["end_ns", "end_global_tid", "range_id"])
    df["pid"] = _pid_from_global(df["global_tid"])
    df["tid"] = _tid_from_global(df["global_tid"])
    # The message is a registered string (textId) or inline text (S2: coalesce).
    if len(df):  # ids missing from StringIds read as "<unknown string N>", as for kernels
        ids = df["text_id"].astype("Int64")
        registered = _names(ids.fillna(-1).to_numpy(np.int64), strings, df.index).astype(object)
    else:
        registered = df["text_id"]
    df["text"] = registered.where(df["text_id"].notna(), df["text"]).astype("object")
    # Domain names: the text of the NvtxDomainCreate row with that domainId in the process.
    dom_rows = df[df["event_type"] == S.NVTX_DOMAIN_CREATE]
    domains = {(int(p), int(d)): t for p, d, t in
               zip(dom_rows["pid"], dom_rows["domain_id"], dom_rows["text"], strict=True)}
    keys = zip(df["pid"].tolist(), df["domain_id"].tolist(), strict=True)
    df["domain"] = pd.Series([domains.get(k, "") if k[1] != 0 else "" for k in keys],
                             index=df.index, dtype="object")
    # (object, not pandas 3's str dtype: 3.0 adds neither an object column to it nor it to
    # one, which an empty part of a trace, no NVTX row, came to)
    text = df["text"].astype("object").fillna("").astype(str).astype(object)
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


def _rows(src: Source, table: str, columns: list[str]) -> list[tuple]:
    tbl = src.read(table, columns)
    return list(zip(*[tbl.column(c).to_pylist() for c in columns], strict=True))


def _load_gpus(src: Source) -> pd.DataFrame:
    cols = src.tables.get(S.GPU_INFO, [])
    if "id" not in cols:
        return pd.DataFrame({"device_id": pd.Series(dtype="int64"),
                             "name": pd.Series(dtype="object")})
    if "name" in cols:
        rows = _rows(src, S.GPU_INFO, S.INFO_COLUMNS[S.GPU_INFO])  # id, name
    else:
        rows = [(i, "") for (i,) in _rows(src, S.GPU_INFO, ["id"])]
    # An info table: a row without a usable id (a damaged file) is left out, not fatal.
    rows = [r for r in rows if isinstance(r[0], int)]
    rows.sort(key=lambda r: (r[0] is None, r[0] if r[0] is not None else 0))
    df = pd.DataFrame(rows, columns=["device_id", "name"])
    if len({r[0] for r in rows}) == len(rows):  # one row per GPU: nothing to drop
        return df
    return df.drop_duplicates("device_id")


def _load_diagnostics(src: Source) -> tuple[tuple[int, int, str], ...]:
    """DIAGNOSTIC_EVENT's (timestamp, severity, text) rows, in timestamp order. An info
    table: a row without an integer timestamp or with no text is left out."""
    if not set(S.INFO_COLUMNS[S.DIAGNOSTIC]) <= set(src.tables.get(S.DIAGNOSTIC, [])):
        return ()
    rows = [(t, v if isinstance(v, int) else 0, str(x))
            for t, v, x in _rows(src, S.DIAGNOSTIC, S.INFO_COLUMNS[S.DIAGNOSTIC])
            if isinstance(t, int) and x is not None]
    return tuple(sorted(rows, key=lambda r: r[0]))


def _load_threads(src: Source, strings: pd.Series) -> pd.DataFrame:
    cols = src.tables.get(S.THREAD_NAMES, [])
    if not {"nameId", "globalTid"} <= set(cols):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in
                             ("global_tid", "pid", "tid")}).assign(name=pd.Series(dtype=object))
    # An info table: a row without a usable thread id (a damaged file) is left out.
    rows = [r for r in _rows(src, S.THREAD_NAMES, S.INFO_COLUMNS[S.THREAD_NAMES])
            if isinstance(r[0], int)]  # globalTid, nameId
    if rows and all(type(r[0]) is int and type(r[1]) is int for r in rows):
        # The usual table, a few dozen int rows: the frame the general path below makes,
        # built in one go (its frame operations cost ~2 ms, a small trace's analysis 0.5%).
        first: dict[int, int] = {}
        for tid, name_id in rows:
            first.setdefault(tid, name_id)  # drop_duplicates: the first row of each thread
        names = [strings.get(i) for i in first.values()]
        if all(isinstance(n, str) for n in names):  # (else: as pandas' map types them)
            gt = np.fromiter(first, dtype=np.int64, count=len(first))
            return pd.DataFrame({"global_tid": gt, "pid": (gt >> S.PID_SHIFT) & S.ID_MASK,
                                 "tid": gt & S.ID_MASK, "name": pd.Series(names)}, copy=False)
    df = pd.DataFrame(rows, columns=["global_tid", "name_id"]).drop_duplicates("global_tid")
    df["pid"] = _pid_from_global(df["global_tid"])
    df["tid"] = _tid_from_global(df["global_tid"])
    df["name"] = df["name_id"].map(strings)
    return df.drop(columns=["name_id"]).reset_index(drop=True)


def _release_arrow(rows: int | None = None) -> None:
    """Give the OS back what Arrow's memory pool holds but no longer uses: its allocator
    (mimalloc/jemalloc) keeps freed pages for reuse, and after a table's columns become numpy
    arrays that is the size of the table again (1.6 GB of RSS after a 10M-kernel load); and
    the C heap's free chunks (cgprof.io.memory.release_memory; ``rows``: the activity rows read so
    far, a small trace keeps its pages for the next stage)."""
    release_memory(rows)


class _Made(Mapping):
    """Column name -> values, each made when looked up (and not kept): the cache writer
    checks one rebuilt column at a time (10M API calls: one 80 MB temporary, not four)."""

    def __init__(self, makers: dict[str, Callable[[], Any]]) -> None:
        self._makers = makers

    def __getitem__(self, name: str) -> Any:
        return self._makers[name]()

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


def _rebuild(table: str, df: pd.DataFrame) -> Mapping[str, Any]:
    """The columns of ``table``'s frame that follow from others of ``df``, by the expressions
    the load from nsys's columns uses: the cache stores the others only
    (:meth:`cgprof.io.cache.Pending.write_frame` checks that each comes out the same)."""
    out: dict[str, Callable[[], Any]] = {}
    if "start_ns" in df and "dur_ns" in df and table != S.NVTX:
        out["end_ns"] = lambda: df["start_ns"].to_numpy() + df["dur_ns"].to_numpy()
    if table == S.RUNTIME:
        out["pid"] = lambda: _pid_from_global(df["global_tid"])
        out["tid"] = lambda: _tid_from_global(df["global_tid"])
        if isinstance(df["name_raw"].dtype, pd.CategoricalDtype):
            out["name"] = lambda: map_categories(df["name_raw"], S.strip_version_suffix)
            out["nsys_name"] = lambda: map_categories(df["name_raw"], S.nsys_api_name)
    return _Made(out)
