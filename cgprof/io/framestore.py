"""A Trace frame as an Arrow table and a layout, and back, exactly: how the cache stores frames.

:func:`frame_to_arrow` turns a :class:`~cgprof.io.trace.Trace` frame into an Arrow table (one
column per stored column), a layout (each column's kind: its pandas dtype, or that it is
rebuilt from others, or one value in every row) and a table of categories;
:func:`arrow_to_frame` makes the same frame again from them (same columns, dtypes, values,
RangeIndex), integer columns as views of Arrow's buffers where they can be. A column of any
other kind raises :class:`FrameLayoutError`: a frame is stored exactly or not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cgprof.io.arrow import int64_values_and_mask

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.dirsource import DirSource


class FrameLayoutError(ValueError):
    """A frame column of a kind :func:`frame_to_arrow` does not store."""


def frame_to_arrow(df: Any, rebuilt: Any = ()) -> tuple[Any, list[list[Any]], Any]:
    """``df`` as (Arrow table, layout, categories table); the columns in ``rebuilt`` are left
    out (kind ``rebuilt``: made again from the others when read).

    layout: one ``[column, kind]`` per column, in order; kind is ``int64`` / ``bool``
    (numpy), ``Int64`` (pandas nullable: Arrow nulls), ``object`` / ``object-nan`` (str
    values, missing ones None / float NaN), ``str`` (pandas' string dtype, no missing
    value), ``category-int64`` (the codes of a categorical of int64 values, its categories
    written as text in the categories table), ``category:DTYPE`` (the integer codes; the
    categories, of pandas dtype DTYPE,
    are rows of the categories table: ``column``, ``value``), or ``constant:int64:VALUE`` /
    ``constant:Int64:null`` (one value in every row, not in the file: an int64 column that
    is a :func:`cgprof.io.trace.constant_view`, an Int64 column all <NA>; read back as one;
    10M kernels: two 80 MB columns neither copied into Arrow nor decoded). Raises
    :class:`FrameLayoutError` for anything else, so that a frame is stored exactly or not at
    all."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    if not df.index.equals(pd.RangeIndex(len(df))):
        raise FrameLayoutError("index is not 0..n-1")
    constant = {c: _constant_kind(df[c]) for c in df.columns if c not in rebuilt}
    constant = {c: k for c, k in constant.items() if k is not None}
    if len(constant) + len(rebuilt) >= len(df.columns):  # the file keeps the row count
        constant = {}
    arrays, layout, cat_cols, cat_values = [], [], [], []
    for c in df.columns:
        col = df[c]
        dtype = col.dtype
        if c in rebuilt:
            layout.append([c, "rebuilt"])
        elif c in constant:
            layout.append([c, constant[c]])
        elif isinstance(dtype, pd.CategoricalDtype) and dtype.categories.dtype == np.int64 and (
                not dtype.ordered):  # a Trace's compacted column (cgprof.io.trace.COMPACT)
            arrays.append(pa.array(col.cat.codes.to_numpy()))
            layout.append([c, "category-int64"])
            cat_cols += [c] * len(dtype.categories)
            cat_values += [str(int(v)) for v in dtype.categories]
        elif isinstance(dtype, pd.CategoricalDtype):
            cats = dtype.categories
            if dtype.ordered or not all(isinstance(v, str) for v in cats) or (
                    pd.api.types.pandas_dtype(str(cats.dtype)) != cats.dtype):
                raise FrameLayoutError(f"{c}: categories other than unordered strings")
            arrays.append(pa.array(col.cat.codes.to_numpy()))
            layout.append([c, f"category:{cats.dtype}"])
            cat_cols += [c] * len(cats)
            cat_values += list(cats)
        elif dtype == np.int64 or dtype == np.bool_:
            arrays.append(pa.array(col.to_numpy()))
            layout.append([c, str(dtype)])
        elif isinstance(dtype, pd.Int64Dtype):
            arr = col.array
            arrays.append(pa.array(arr.to_numpy(dtype=np.int64, na_value=0),
                                   mask=arr.isna()))
            layout.append([c, "Int64"])
        elif dtype == np.dtype(object) and _object_kind(col) is not None:
            arrays.append(pa.array([v if isinstance(v, str) else None for v in col],
                                   type=pa.string()))
            layout.append([c, _object_kind(col)])
        elif isinstance(dtype, pd.StringDtype) and dtype == pd.api.types.pandas_dtype(
                str(dtype)) and not col.isna().any():
            arrays.append(pa.array(list(col), type=pa.string()))
            layout.append([c, str(dtype)])
        else:
            raise FrameLayoutError(f"{c}: dtype {dtype} is not stored")
    cats_tbl = pa.table({"column": pa.array(cat_cols, type=pa.string()),
                         "value": pa.array(cat_values, type=pa.string())})
    names = stored_columns(layout)
    return pa.Table.from_arrays(arrays, names=names), layout, cats_tbl


def _constant_kind(col: Any) -> str | None:
    """The ``constant:`` layout kind of a column that holds one value as a constant view (an
    int64 stride-0 column, or an Int64 column of two or more rows, all <NA>), else None."""
    import numpy as np
    import pandas as pd

    if len(col) < 2:
        return None
    if col.dtype == np.int64:
        a = col.to_numpy()
        return f"constant:int64:{int(a[0])}" if a.strides == (0,) else None
    if isinstance(col.dtype, pd.Int64Dtype) and not col.count():
        return "constant:Int64:null"
    return None


def stored_columns(layout: list[list[Any]]) -> list[str]:
    """The columns of a frame layout that are in its Parquet file."""
    return [c for c, kind in layout if kind != "rebuilt" and not kind.startswith("constant:")]


def arrow_to_frame(tbl: Any, layout: list[list[Any]], cats_tbl: Any,
                   rebuild: Any = None) -> Any:
    """The frame :func:`frame_to_arrow` stored: same columns, dtypes, values, RangeIndex.

    Integer columns are numpy views of Arrow's buffers where they can be (no copy). Columns
    of kind ``rebuilt`` come from ``rebuild(frame of the stored columns)`` (a dict)."""
    import numpy as np
    import pandas as pd

    cats: dict[str, list[str]] = {}
    if cats_tbl is not None and cats_tbl.num_rows:
        for c, v in zip(cats_tbl.column("column").to_pylist(),
                        cats_tbl.column("value").to_pylist(), strict=True):
            cats.setdefault(c, []).append(v)
    data: dict[str, Any] = {}
    for c, kind in layout:
        if kind == "rebuilt":
            continue
        if kind.startswith("constant:"):
            data[c] = _constant_column(kind, tbl.num_rows)
            continue
        col = tbl.column(c)
        if kind in ("object", "object-nan"):
            values = np.array(col.to_pylist(), dtype=object)
            if kind == "object-nan":
                values[pd.isna(values)] = np.nan
            data[c] = pd.Series(values, dtype=object)
        elif kind in ("str", "string"):
            data[c] = pd.Series(col.to_pylist(), dtype=kind)
        elif kind == "Int64":
            data[c] = pd.arrays.IntegerArray(*int64_values_and_mask(col))
        elif kind.startswith("category:"):
            dtype = pd.CategoricalDtype(pd.Index(cats.get(c, []), dtype=kind[9:]))
            data[c] = pd.Categorical.from_codes(col.to_numpy(), dtype=dtype)
        elif kind == "category-int64":
            dtype = pd.CategoricalDtype(pd.Index([int(v) for v in cats.get(c, [])],
                                                 dtype=np.int64))
            data[c] = pd.Categorical.from_codes(col.to_numpy(), dtype=dtype)
        else:
            data[c] = col.to_numpy()
            if data[c].dtype != np.dtype(kind):
                raise FrameLayoutError(f"{c}: {data[c].dtype} stored, {kind} expected")
    df = pd.DataFrame(data, copy=False)
    if len(data) == len(layout):
        return df
    if rebuild is None:
        raise FrameLayoutError("columns to rebuild, and no way to")
    made = rebuild(df)
    return pd.DataFrame({c: df[c] if c in data else made[c] for c, _ in layout}, copy=False)


def _constant_column(kind: str, n: int) -> Any:
    """The column of a ``constant:`` layout kind, ``n`` rows, as a constant view."""
    import numpy as np
    import pandas as pd

    _, dtype, value = kind.split(":", 2)
    if dtype == "int64":
        return np.broadcast_to(np.array(int(value), dtype=np.int64), (n,))
    if dtype == "Int64" and value == "null":
        return pd.arrays.IntegerArray(np.broadcast_to(np.zeros(1, dtype=np.int64), (n,)),
                                      np.broadcast_to(np.ones(1, dtype=bool), (n,)))
    raise FrameLayoutError(f"unknown layout kind {kind}")


def _same_column(a: Any, b: Any) -> bool:
    """Two Series hold the same values with the same dtype (categories in the same order)."""
    import pandas as pd

    b = b if isinstance(b, pd.Series) else pd.Series(b)
    if a.dtype != b.dtype or len(a) != len(b):
        return False
    if isinstance(a.dtype, pd.CategoricalDtype):
        return bool(a.cat.categories.equals(b.cat.categories)
                    and (a.cat.codes.to_numpy() == b.cat.codes.to_numpy()).all())
    return bool(a.reset_index(drop=True).equals(b.reset_index(drop=True)))


def _object_kind(col: Any) -> str | None:
    """``object`` (str or None values), ``object-nan`` (str or NaN), else None."""
    missing = {type(v) for v in col if not isinstance(v, str)}
    if not missing or missing == {type(None)}:
        return "object"
    if missing == {float} and all(v != v for v in col if not isinstance(v, str)):
        return "object-nan"
    return None


def has_categories(layout: list[list[Any]]) -> bool:
    """Whether a frame layout has a categories table (``category:DTYPE`` or
    ``category-int64`` columns)."""
    return any(kind.startswith("category") for _, kind in layout)


def read_frame(src: DirSource, table: str, layout: list[list[Any]],
               rebuild: Any = None) -> Any:
    """The stored frame of ``table`` in the entry ``src`` reads."""
    tbl = src.read(f"{table}.frame", stored_columns(layout))
    cats_tbl = None
    if has_categories(layout):
        cats_tbl = src.read(f"{table}.categories", ["column", "value"])
    return arrow_to_frame(tbl, layout, cats_tbl, rebuild)
