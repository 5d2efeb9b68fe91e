"""The tables of one loaded nsys export: :class:`Trace`, its frames, and how they are held.

Column conventions of every DataFrame on :class:`Trace` (all times int64 ns on the session
timeline shared by CPU and GPU events; the timeline does not start at 0):

* ``start_ns``, ``end_ns``, ``dur_ns``;
* ``pid``, ``tid`` decoded from nsys's packed ids; ``global_tid`` kept for exact thread keys;
* ``corr_id``: CUPTI correlation id, unique only per process: join on (``pid``, ``corr_id``).

A loaded trace holds its big frames lean: the columns that follow from others
(:data:`DERIVED`) are made when first read, few-valued integer columns are kept as codes
(:data:`COMPACT`), one-value columns as constant views (:func:`constant_view`); the metrics
read :meth:`Trace.stored` and :func:`column`. The loader (:mod:`cgprof.io.loader`) builds
it; nothing here reads a file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.io.validate import distinct_pids


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
