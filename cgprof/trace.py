"""Load an Nsight Systems export, read-only, into pandas DataFrames.

The export is an SQLite file, an ``.nsys-rep``, nsys's parquetdir/arrowdir, or cgprof's own
cached Parquet copy: :mod:`cgprof.engine` reads the columns into Arrow, this module builds the
frames (see docs/engine.md). `load(path)` probes which tables and columns exist (they vary
with the nsys version and with what was traced), reads only what cgprof needs, resolves names
through ``StringIds`` (as categoricals, one lookup per distinct id), splits
``globalTid``/``globalPid`` into ``pid``/``tid``, and keeps every time an integer nanosecond.

Column conventions of every DataFrame on :class:`Trace` (all times int64 ns on the session
timeline shared by CPU and GPU events; the timeline does not start at 0):

* ``start_ns``, ``end_ns``, ``dur_ns``;
* ``pid``, ``tid`` decoded from nsys's packed ids; ``global_tid`` kept for exact thread keys;
* ``corr_id``: CUPTI correlation id, unique only per process: join on (``pid``, ``corr_id``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cgprof import engine as E
from cgprof import schema as S
from cgprof.errors import TraceError
from cgprof.io import validate as V
from cgprof.io.validate import distinct_pids
from cgprof.scratch import checkpoint

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
    #: DIAGNOSTIC_EVENT (nsys >= 2024.5), the session's own messages: (timestamp_ns,
    #: severity, text) per row, in timestamp order; empty when the export has no such table.
    diagnostics: tuple[tuple[int, int, str], ...] = field(default=(), repr=False)


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

    A loaded trace holds the kernel and API-call frames without the columns that follow from
    others (:data:`DERIVED`) and, from :data:`COMPACT_MIN_ROWS` rows, its few-valued integer
    columns as codes (:data:`COMPACT`): ``trace.kernels`` and ``trace.runtime`` make them as
    above on first read, once; the metrics read :meth:`stored` and :func:`column`.
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
        return api_rows(self.runtime)

    def stored(self, name: str) -> pd.DataFrame:
        """The frame ``name`` as this trace holds it: without the :data:`DERIVED` columns
        that :meth:`shed` left out (read them with :func:`column`). The metrics read this,
        so that an analysis never makes them again; ``trace.kernels`` makes them."""
        return self.__dict__[name]

    def restore(self, name: str, df: pd.DataFrame) -> None:
        """Put back the frame ``name`` (its stored columns) without changing which derived
        columns are left out of it (``trace.NAME = df`` takes ``df`` as the whole frame)."""
        self.__dict__[name] = df

    def shed(self) -> None:
        """Leave the :data:`DERIVED` columns out of the kernel and API-call frames; they are
        made again, in their places, when the frame is next read as ``trace.kernels`` /
        ``trace.runtime``. Only for frames whose derived columns the load made by those very
        expressions (:func:`load` calls it): 10M kernels + 10M API calls hold 240 MB less."""
        if not len(self.__dict__["kernels"]) + len(self.__dict__["runtime"]):
            return
        shed = self.__dict__.setdefault("_shed", {})
        compact = self.__dict__.setdefault("_compact", {})
        for name, cols in DERIVED.items():
            df = self.__dict__[name]
            drop = [c for c in cols if c in df.columns and df[c].dtype == np.int64
                    and all(df[s].dtype == np.int64 for s in _DERIVED_FROM[c])]
            if drop and len(df):
                shed[name] = shed.get(name) or list(df.columns)
                df = df.drop(columns=drop)
            if len(df) >= COMPACT_MIN_ROWS and name in shed:
                small = {c: _compacted(df[c]) for c, dtype in COMPACT[name].items()
                         if c in df.columns and str(df[c].dtype) == dtype}
                small = {c: v for c, v in small.items() if v is not None}
                if small:
                    compact[name] = compact.get(name, set()) | set(small)
                    df = df.assign(**small)
            self.__dict__[name] = df

    def check_whole(self, check: Callable[[Trace], None]) -> None:
        """``check(self)`` on the whole frames, then hold them as before (a frame stored
        without its derived or with compacted columns is not compacted again), then
        :meth:`shed`."""
        saved = {n: self.__dict__[n] for n in DERIVED}
        shed = dict(self.__dict__.get("_shed", {}))
        compact = dict(self.__dict__.get("_compact", {}))
        check(self)
        for n, df in saved.items():
            if n in shed:  # was stored without its derived columns: stored so again
                self.__dict__[n] = df
        self.__dict__["_shed"] = {**self.__dict__.get("_shed", {}), **shed}
        self.__dict__["_compact"] = {**self.__dict__.get("_compact", {}), **compact}
        self.shed()

    def hold_compacted(self) -> None:
        """Take the :data:`COMPACT` columns that the stored frames hold as categoricals of
        int64 values (the cache stores them so) as compacted: read back as their dtype."""
        for name, cols in COMPACT.items():
            df = self.__dict__[name]
            held = {c for c in cols if c in df.columns and int_categorical(df[c])}
            if held and name in self.__dict__.get("_shed", {}):
                compact = self.__dict__.setdefault("_compact", {})
                compact[name] = compact.get(name, set()) | held

    def derive_later(self, name: str) -> None:
        """Make the :data:`DERIVED` columns that the frame ``name`` lacks when it is next read
        as ``trace.NAME``, in the places the load from nsys's tables gives them (kernels:
        dur_ns last; API calls: tid after pid, dur_ns last)."""
        cols = list(self.__dict__[name].columns)
        if set(DERIVED[name]) <= set(cols):
            return
        if name == "runtime" and "tid" not in cols:
            cols.insert(cols.index("pid") + 1, "tid")
        if "dur_ns" not in cols:
            cols.append("dur_ns")
        self.__dict__.setdefault("_shed", {})[name] = cols

    def hold_like(self, other: Trace) -> None:
        """Hold the kernel and API-call frames as ``other`` holds its own, when they were
        cut from ``other.stored(...)`` (a rank's sub-trace): the columns ``other`` left out
        are made when read, its compacted columns read back as they were."""
        for key in ("_shed", "_compact"):
            held = other.__dict__.get(key, {})
            mine = self.__dict__.setdefault(key, {})
            for name in DERIVED:
                if name in held:
                    mine[name] = type(held[name])(held[name])  # a copy: list or set

    def cut(self, t0: int, t1: int, names: tuple[str, ...]) -> Trace:
        """This trace with the tables ``names`` holding only their rows that overlap
        ``[t0, t1)`` (end after t0, start before t1), the others whole: the span a timeline
        draws (cgprof.report.figures)."""
        parts = {}
        for name in names:
            df = self.stored(name) if name in DERIVED else getattr(self, name)
            s, e = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
            parts[name] = df[(e > t0) & (s < t1)].reset_index(drop=True)
        out = dataclasses.replace(self, **parts)
        out.hold_like(self)
        return out



#: Columns that follow from others of the same frame, by the expressions the load makes
#: them with (``dur_ns = end_ns - start_ns``, ``tid = global_tid & ID_MASK``):
#: :meth:`Trace.shed` leaves them out of what a loaded trace holds.
DERIVED = {"kernels": ("dur_ns",), "runtime": ("tid", "dur_ns")}
_DERIVED_FROM = {"dur_ns": ("start_ns", "end_ns"), "tid": ("global_tid",)}


def column(df: pd.DataFrame, name: str, rows: np.ndarray | None = None) -> np.ndarray:
    """Column ``name`` of ``df`` as a numpy array (``rows``: those rows only, positions or a
    mask); a :data:`DERIVED` column that ``df`` lacks (a stored kernel or API-call frame, or
    a frame of its columns) is made from the columns it follows from, at those rows only."""
    def get(c: str) -> np.ndarray:
        a = df[c].to_numpy()
        return a if rows is None else a[rows]

    if name in df.columns or name not in _DERIVED_FROM:
        return get(name)
    if name == "dur_ns":
        out = get("end_ns")
        return out - get("start_ns") if rows is None else np.subtract(
            out, get("start_ns"), out=out)  # a gathered copy: in place
    return get("global_tid") & S.ID_MASK


#: Integer columns of the stored kernel and API-call frames that hold a few distinct values
#: (streams, graph node ids, the two event classes, a few threads): from this many rows on,
#: :meth:`Trace.shed` keeps them as categoricals of those values (int8 codes; read as the
#: int64 / Int64 column they were). 10M kernels + 10M API calls: 4 x ~80 MB -> 4 x 10 MB.
#: The analysis reads them as masks (isna, isin) or one temporary int64 array
#: (``to_numpy()``: the capture and step-thread sweeps, the GPU ops' stream ids).
COMPACT = {"kernels": {"stream_id": "int64", "graph_node_id": "Int64"},
           "runtime": {"event_class": "int64", "global_tid": "int64"}}
COMPACT_MIN_ROWS = 2_000_000
_COMPACT_MAX = 127  # distinct values: int8 codes


def _compacted(col: pd.Series) -> pd.Categorical | None:
    """A plain int64 column or a nullable Int64 one (not a constant view) as a categorical
    of its distinct values, None when it holds more than _COMPACT_MAX of them."""
    if isinstance(col.dtype, np.dtype):
        if col.dtype != np.int64 or col.to_numpy().strides == (0,):
            return None
        codes, uniq = pd.factorize(col.to_numpy(), sort=False)
    elif isinstance(col.dtype, pd.Int64Dtype) and col.array._data.strides != (0,):
        codes, uniq = pd.factorize(col.array, sort=False)  # <NA>: code -1
        uniq = np.asarray(uniq, dtype=np.int64)
    else:
        return None
    if len(uniq) > _COMPACT_MAX:
        return None
    return pd.Categorical.from_codes(codes.astype(np.int8), categories=pd.Index(uniq))


def int_categorical(col: pd.Series) -> bool:
    """A categorical of int64 values: how a :data:`COMPACT` column is held."""
    return isinstance(col.dtype, pd.CategoricalDtype) and col.cat.categories.dtype == np.int64


def _expanded(col: pd.Series, dtype: str) -> Any:
    """The int64 (``dtype`` "int64") or Int64 column a :func:`_compacted` one was (Int64:
    0 under <NA>, as the load leaves it)."""
    codes = col.cat.codes.to_numpy()
    values = col.cat.categories.to_numpy(np.int64)
    if dtype == "int64":
        return values[codes]
    missing = codes < 0
    out = values[np.maximum(codes, 0)] if len(values) else np.zeros(len(codes), np.int64)
    out[missing] = 0
    return pd.arrays.IntegerArray(out, missing)


def _with_derived(df: pd.DataFrame, order: list[str], name: str,
                  compact: set[str] | None = None) -> pd.DataFrame:
    """``df`` (the stored frame ``name``) with the derived columns it lacks and its
    ``compact`` columns as they were, columns in ``order``."""
    compact = compact or set()

    def whole(c: str) -> Any:
        if c not in df.columns:
            return pd.Series(column(df, c), index=df.index, copy=False)
        if c in compact:
            return pd.Series(_expanded(df[c], COMPACT[name][c]), index=df.index, copy=False)
        return df[c]

    return pd.DataFrame({c: whole(c) for c in order}, copy=False)


def _frame_property(name: str) -> property:
    def get(self: Trace) -> pd.DataFrame:
        order = self.__dict__.get("_shed", {}).pop(name, None)
        compact = self.__dict__.get("_compact", {}).pop(name, None)
        if order is not None:  # made once, then held as any frame
            self.__dict__[name] = _with_derived(self.__dict__[name], order, name, compact)
        return self.__dict__[name]

    def put(self: Trace, df: pd.DataFrame) -> None:
        self.__dict__[name] = df
        self.__dict__.get("_shed", {}).pop(name, None)
        self.__dict__.get("_compact", {}).pop(name, None)

    return property(get, put, doc=f"The {name} frame, every column (see Trace).")


# The kernel and API-call frames read through a property (the dataclass's __init__,
# __eq__ and __repr__ included), which makes the columns Trace.shed left out.
Trace.kernels = _frame_property("kernels")
Trace.runtime = _frame_property("runtime")


def api_rows(rt: pd.DataFrame) -> pd.DataFrame:
    """The rows of a runtime frame that are real CUDA runtime/driver calls (eventClass 0 or
    1): ``rt`` itself when every row is one (no full-size copy)."""
    ec = rt["event_class"]
    if ec.dtype == np.int64 and len(ec):
        # Every class between the least and the greatest is an API call's: every row is
        # one (two reductions, not an isin of every row: ResNet-18, 212k calls, ~1 ms)
        lo, hi = int(ec.to_numpy().min()), int(ec.to_numpy().max())
        if all(c in S.API_EVENT_CLASSES for c in range(lo, hi + 1)):
            return rt
    real = ec.isin(S.API_EVENT_CLASSES).to_numpy(dtype=bool)
    return rt if real.all() else rt[real]


#: The tables whose rows ran on a GPU.
GPU_TABLES = ("kernels", "memcpy", "memset", "graph_trace")


def constant_value(a: np.ndarray) -> Any:
    """The one value every element of the 1-D integer array ``a`` holds (a numpy scalar of
    its dtype), else None (also for an empty array). The first and last elements are
    compared first, so a column that varies (times, ids) costs nothing more."""
    if a.ndim != 1 or not len(a) or a.dtype.kind not in "iu" or a[0] != a[-1]:
        return None
    if a.strides == (0,):  # a constant_view already (a cached trace's): no pass over it
        return a[0]
    return a[0] if a.min() == a.max() else None


def constant_view(a: np.ndarray) -> np.ndarray:
    """``a``, or when it holds one value, a read-only view of that value repeated (stride 0):
    the same dtype, length and values in 8 bytes, not 8 per row. One process on one GPU (a
    rank of a multi-process trace is analysed alone) makes the pid and device columns
    constant: the synthetic 10M kernels + 10M API calls hold three such int64 columns
    (240 MB) in the trace, and the GPU ops, call_steps and gap tables one or two each.
    Readers that gather, compare or reduce see an ordinary array; a write into it raises,
    as one into a loaded trace's columns (numpy views of Arrow buffers) always did."""
    v = constant_value(a)
    if v is None or a.strides == (0,):
        return a
    return np.broadcast_to(np.array(v, dtype=a.dtype), a.shape)


def take_rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``a[rows]`` (positions or a boolean mask); a :func:`constant_view` stays one instead
    of becoming a full array of its one value."""
    if a.ndim == 1 and len(a) and a.strides == (0,):
        n = int(np.count_nonzero(rows)) if rows.dtype == bool else len(rows)
        return np.broadcast_to(a[:1], (n,))
    return a[rows]


def share_constants(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each plain integer column that holds one value as a :func:`constant_view`,
    and each nullable Int64 column that is all <NA> as one over constant values and mask (an
    eager trace's kernel graph ids: 90 MB per 10M kernels); same dtypes, values and index,
    columns replaced, rows not copied."""
    if len(df) < 2:
        return df
    for c in df.columns:
        col = df[c]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iu":
            arr = col.to_numpy()
            view = constant_view(arr)
            if view is not arr:
                df[c] = pd.Series(view, index=df.index, copy=False)
        elif isinstance(col.dtype, pd.Int64Dtype) and not col.count():
            none = pd.arrays.IntegerArray(
                np.broadcast_to(np.zeros(1, dtype=np.int64), (len(df),)),
                np.broadcast_to(np.ones(1, dtype=bool), (len(df),)))
            df[c] = pd.Series(none, index=df.index, copy=False)
    return df


def device_ids(trace: Trace, pid: int | None = None) -> tuple[int, ...]:
    """GPUs the process ran work on (all processes when pid is None), ascending."""
    devs: set[int] = set()
    for name in GPU_TABLES:
        df = trace.stored(name) if name in DERIVED else getattr(trace, name)
        if pid is not None:
            df = df[df["pid"] == pid]
        if len(df):
            devs.update(int(d) for d in pd.unique(df["device_id"]))
    return tuple(sorted(devs))


def used_gpus(trace: Trace, pid: int | None = None) -> pd.DataFrame:
    """``trace.gpus`` cut to the GPUs the process (every process when pid is None) ran
    work on; all of them when none of those is listed (a rank's trace: cgprof.ranks)."""
    used = device_ids(trace, pid)
    gpus = trace.gpus
    if used and gpus["device_id"].isin(used).any():
        gpus = gpus[gpus["device_id"].isin(used)].reset_index(drop=True)
    return gpus


def gpu_pids(trace: Trace) -> list[int]:
    """Process ids that have GPU rows (kernels, copies, memsets, graph replays), ascending:
    more than one, and ``cgprof analyze`` reads the trace rank by rank (cgprof.ranks)."""
    pids: set[int] = set()
    for name in GPU_TABLES:
        df = trace.stored(name) if name in DERIVED else getattr(trace, name)
        if len(df):
            pids.update(int(p) for p in distinct_pids(df["pid"]))
    return sorted(pids)


# ---------------------------------------------------------------------------------------
# opening and probing


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


def _read_meta(src: E.Source) -> dict[str, str]:
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
        return E.int64_values_and_mask(col)
    return col.to_numpy(), None


def _present(src: E.Source, table: str, spec: Spec) -> list[str]:
    """The columns of ``spec`` that ``table`` has and a load reads
    (:meth:`cgprof.engine.Source.readable`; none when the table is missing)."""
    cols = src.readable(table)
    return [c for c, _, _ in spec if c in cols]


def _int_frame(src: E.Source, table: str, spec: Spec,
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


def map_categories(names: pd.Series, func: Callable[[Any], Any]) -> pd.Series:
    """``names.map({c: func(c) for c in categories}).astype("category")`` for a categorical
    ``names``, through the category codes: the same categorical without a value per row in
    between (a mapping that sends two categories to one value makes pandas build one;
    10M calls: ~250 MB and seconds)."""
    cats = names.cat.categories
    mapping = {c: func(c) for c in cats}
    small = pd.Series(cats).map(mapping)  # one value per category
    if small.is_unique:  # pandas then maps the categories themselves: cheap, keep its result
        return names.map(mapping).astype("category")
    codes = names.cat.codes.to_numpy()
    seen = np.zeros(len(cats) + 1, dtype=bool)
    seen[codes] = True  # code -1 (no name) marks the spare last slot
    dtype = small[seen[:-1]].astype("category").dtype  # categories: the values present
    lut = np.append(dtype.categories.get_indexer(small), -1)
    return pd.Series(pd.Categorical.from_codes(lut[codes], dtype=dtype), index=names.index,
                     copy=False)


def _load_strings(src: E.Source) -> pd.Series:
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


def _load_kernels(src: E.Source, strings: pd.Series) -> pd.DataFrame:
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


def _load_runtime(src: E.Source, strings: pd.Series) -> pd.DataFrame:
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


def _load_gpu_ops(src: E.Source, table: str) -> pd.DataFrame:
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
        return pd.arrays.IntegerArray(*E.int64_values_and_mask(col))
    return col.to_numpy()


_NVTX_COLS = S.NVTX_COLS


def _load_nvtx(src: E.Source, strings: pd.Series) -> pd.DataFrame:
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


def _rows(src: E.Source, table: str, columns: list[str]) -> list[tuple]:
    tbl = src.read(table, columns)
    return list(zip(*[tbl.column(c).to_pylist() for c in columns], strict=True))


def _load_gpus(src: E.Source) -> pd.DataFrame:
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


def _load_diagnostics(src: E.Source) -> tuple[tuple[int, int, str], ...]:
    """DIAGNOSTIC_EVENT's (timestamp, severity, text) rows, in timestamp order. An info
    table: a row without an integer timestamp or with no text is left out."""
    if not set(S.INFO_COLUMNS[S.DIAGNOSTIC]) <= set(src.tables.get(S.DIAGNOSTIC, [])):
        return ()
    rows = [(t, v if isinstance(v, int) else 0, str(x))
            for t, v, x in _rows(src, S.DIAGNOSTIC, S.INFO_COLUMNS[S.DIAGNOSTIC])
            if isinstance(t, int) and x is not None]
    return tuple(sorted(rows, key=lambda r: r[0]))


def _load_threads(src: E.Source, strings: pd.Series) -> pd.DataFrame:
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


def open_source(path: Path) -> E.Source:
    """Check ``path`` and open it as a columnar :class:`cgprof.engine.Source`.

    SQLite exports and nsys's parquetdir/arrowdir directories; ``.nsys-rep`` reports are
    exported to SQLite first (:func:`cgprof.nsys.exported`).
    """
    early = E.take_early(path)  # opened (and its big tables being read) by E.prefetch
    if early is not None:
        return early
    kind = E.dir_kind(path) if path.is_dir() else None
    if kind is not None:
        src: E.Source = E.DirSource(path, kind)
        if not any(t in src.tables for t in S.NSYS_MARKER_TABLES):
            raise TraceError(f"{path}: holds no nsys tables ({kind} export expected)")
        return src
    _check_file(path)
    try:
        conn = E.connect_readonly(path)
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot open as SQLite ({V.one_line(exc)})") from None
    try:
        tables = E.probe_sqlite(conn)
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
    return E.SqliteSource(path, conn, tables)


def load(path: str | Path, progress: Progress | None = None, *,
         cache: bool | None = None) -> Trace:
    """Open an nsys export read-only and load the tables cgprof uses.

    ``path`` is an SQLite export, an ``.nsys-rep`` report (exported to a temporary SQLite
    file with the nsys cgprof finds), or nsys's ``parquetdir``/``arrowdir`` export.
    ``cache``: read from and write to cgprof's columnar cache (:mod:`cgprof.cache`); None
    (the default) means on unless ``CGPROF_NO_CACHE`` is set.

    Raises :class:`TraceError` with a one-line message for anything that is not a readable
    nsys export (missing file, not SQLite, corrupt, no nsys tables, no events at all).
    """
    from cgprof import cache as C

    path = Path(path)
    say = checkpoint(progress)
    use_cache = (C.enabled() if cache is None else cache) and path.is_file()
    trace, columns_only = _cached(path, None, say) if use_cache else (None, None)
    if trace is None:
        if path.suffix.lower() == ".nsys-rep" and path.is_file():
            say("exporting the report to SQLite with nsys")
            from cgprof.nsys import exported

            with exported(path) as sqlite_path:
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
              spill: E.Spill | None = None) -> Trace:
    """The rows of processes ``pids`` of the trace at ``path`` (``keep`` False: of every
    other process), read with the filter in the scan (:class:`cgprof.engine.PidFilter`), so
    that the other processes' rows are never held: the trace of one rank of a multi-rank
    trace is ``load_part(path, [pid])``, the same frames (values, order) as
    :func:`cgprof.ranks.sub_trace` cuts from the whole trace, the GPUs those the rank used.
    An SQLite export or nsys's parquetdir/arrowdir export. ``tables``: the nsys tables whose
    rows are read (None: all); the others' frames are empty, their tables not scanned.

    ``part``: the name of this part's own cache entry (:func:`cgprof.cache.entry_dir`), read
    when there is one and written after a read of an SQLite export (``cache``: None means on
    unless ``CGPROF_NO_CACHE``); without it no cache is used (an entry of the whole trace
    holds every process). ``spill``: the process tables of the SQLite export at ``path``
    already written apart (:class:`cgprof.engine.Spill`), read instead of the file."""
    from cgprof import cache as C

    path = Path(path)
    say = checkpoint(progress)
    use_cache = (part is not None and (C.enabled() if cache is None else cache)
                 and path.is_file())
    trace, _ = _cached(path, part, say) if use_cache else (None, None)
    if trace is not None:
        _checked_part(trace, path, keep)
    else:
        trace = _load_source(path, path, say, use_cache, pid_filter=E.PidFilter(pids, keep,
                                                                                tables),
                             part=part, spill=spill)
    if keep:
        trace.gpus = used_gpus(trace)
    _release_arrow(len(trace.stored("kernels")) + len(trace.stored("runtime")))
    return trace


def load_rows(path: str | Path, rows: E.RowRange, progress: Progress | None = None,
              spill: E.TableSpill | None = None) -> Trace:
    """The rows ``rows`` keeps of the trace at ``path`` (an SQLite export, nsys's
    parquetdir/arrowdir export), from its cache entry when there is one, else from
    ``spill`` (:func:`spill_tables` of it) or the file: a chunk of a one-process trace
    (cgprof.metrics.chunked), read with the filter in the scan. No cache entry is written;
    the frames are the whole trace's rows, in its order."""
    from cgprof import cache as C

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
    from cgprof import cache as C

    path = Path(path)
    src = C.lookup(path, None) if C.enabled() and path.is_file() else None
    if src is None:
        return False
    src.close()
    return True


def spill_tables(path: str | Path, folder: Path, spool: Callable[[str, Any], None] | None = None
                 ) -> E.TableSpill | None:
    """The activity tables of the SQLite export at ``path`` written once into ``folder``
    (:class:`cgprof.engine.TableSpill`): one scan of the file for every chunk read after
    it. ``spool(table, arrow)`` is also given the small tables a load reads, as it reads
    them: with :meth:`cgprof.cache.Pending.write` and the entry's own folder, the spill is
    a cache entry of nsys columns (:meth:`cgprof.cache.Pending.commit_columns`), from which
    a later load builds the frames instead of reading SQLite. None for other inputs, or
    where DuckDB cannot."""
    src = open_source(Path(path))
    try:
        if not isinstance(src, E.SqliteSource):
            return None
        if spool is not None:
            src.keep_reads = False
            src.spool = spool
            strings = _load_strings(src)
            _read_meta(src)
            _load_gpus(src)
            _load_threads(src, strings)
            src.spool = None
        spill = E.TableSpill.write(src, folder)
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
    from cgprof import cache as C

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
    (cgprof.validate), the other processes' only shed."""
    if keep:
        _checked(trace, path, part=True)
    else:
        trace.shed()


def spill_processes(path: str | Path, folder: Path) -> E.Spill | None:
    """The process tables of the SQLite export at ``path`` written apart into ``folder``
    (:class:`cgprof.engine.Spill`): one scan of the file for every rank read after it.
    None for other inputs, or where DuckDB cannot."""
    src = open_source(Path(path))
    try:
        return E.Spill.write(src, folder) if isinstance(src, E.SqliteSource) else None
    finally:
        src.close()


def warm(path: Path) -> Path:
    """Read ``path`` once so that its columnar copy is in the cache; returns the entry.

    What ``cgprof record --columnar`` does after the export: the first ``cgprof analyze``
    then skips SQLite. Raises :class:`TraceError` when the trace cannot be read, or when the
    cache cannot be written.
    """
    from cgprof import cache as C

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
    other (cgprof.validate), then :meth:`Trace.shed` its derived columns. ``part``: some
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
def _named_damage(src: E.Source, path: Path) -> Iterator[None]:
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
        if isinstance(src, E.SqliteSource):
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
                 pid_filter: E.PidFilter | E.RowRange | None = None, part: str | None = None,
                 spill: E.Spill | E.TableSpill | None = None) -> Trace:
    """Read ``src_path`` (``pid_filter``: some processes' rows only, then cached as entry
    ``part`` of ``path``, or not at all without one; ``spill``: see :func:`load_part`)."""
    from cgprof import cache as C

    src = open_source(src_path)
    src.pid_filter = pid_filter
    if spill is not None and isinstance(src, E.SqliteSource):
        src.spill = spill
    if pid_filter is not None and part is None:
        use_cache = False  # an entry without a part holds the whole trace
    # A small export's forked reader (cgprof.cache.prefetch) writes its entry as it reads;
    # else the entry is written table by table as the tables are read (src.spool), so the
    # Arrow copy of each is freed once its columns are numpy, not kept for a write at the end.
    forked = (src if use_cache and isinstance(src, E.SqliteSource) and src.writes_entry()
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


def _release_arrow(rows: int | None = None) -> None:
    """Give the OS back what Arrow's memory pool holds but no longer uses: its allocator
    (mimalloc/jemalloc) keeps freed pages for reuse, and after a table's columns become numpy
    arrays that is the size of the table again (1.6 GB of RSS after a 10M-kernel load); and
    the C heap's free chunks (cgprof.engine.release_memory; ``rows``: the activity rows read so
    far, a small trace keeps its pages for the next stage)."""
    E.release_memory(rows)


def _stored(src: E.Source, table: str, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """The frame of ``table`` as the cache stored it (already sorted and decoded), else built
    from the nsys columns."""
    df = src.frame(table, lambda d: _rebuild(table, d))
    return build() if df is None else df


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
    (:meth:`cgprof.cache.Pending.write_frame` checks that each comes out the same)."""
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


def _load_tables(src: E.Source, path: Path, say: Progress) -> Trace:
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


# Kept for callers of the old names.
connect_readonly = E.connect_readonly
probe = E.probe_sqlite
#: ``is_trace_dir(path) -> bool``: a directory nsys exported as one trace (parquetdir/arrowdir).
is_trace_dir = E.is_trace_dir
