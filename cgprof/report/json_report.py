"""JSON rendering of analysis results: every table, integers kept exact, ``schema_version``."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from cgprof.metrics.gap_result import longest_gaps  # noqa: F401  (re-exported: the document's list)
from cgprof.records import frame_records
from cgprof.records import scalar as _scalar
from cgprof.untraced import node_tracing_note
from cgprof.version import JSON_SCHEMA_VERSION, __version__

#: Version of the JSON document written by ``cgprof analyze --json`` (bump on breaking change).
#: Gaps listed in ``gpu.gaps`` by default: the longest ones (``--all-gaps`` lists every gap).
#: A 10M-kernel trace has ~10M gaps (a 2 GB document); the summaries (per device, by kind,
#: histogram, per stream, per step) always cover every gap.
GAP_LIST_LIMIT = 1000


#: Records per piece of a big table's JSON. 10M kernels' 100,000-step table (37 columns)
#: in one piece held ~0.2-0.3 GB of encoder temporaries at the run's peak (1.86 GB); in
#: pieces of 10,000 the JSON stage adds ~10 MB, and writes faster (1M --all-gaps: 0.97 ->
#: 0.81 s, 10M: 0.62 -> 0.52 s, in one process).
PIECE_ROWS = 10_000


class _Table:
    """A DataFrame to be written as a JSON array of records by pandas' C encoder.

    Building millions of Python dicts for ``json.dumps`` costs seconds and gigabytes; the
    document is dumped with placeholders and each table's JSON is spliced in after. Small
    tables are handed to the encoder as Python records (:func:`_records`), big ones as the
    frame (or, integer and text ones, written by Arrow: :func:`_arrow_chunks`).
    """

    def __init__(self, df: pd.DataFrame) -> None:
        names = list(df.columns)
        cols = sorted(names)
        #: a small table's rows as dicts of Python values (:func:`_records`), else None
        self.records: list[dict[Any, Any]] | None = None
        if len(df) < _ARROW_MIN_ROWS and df.size <= _RECORDS_MAX_CELLS:
            self.records = _records(df, cols) if len(df) else []
        if self.records is not None:
            self.raw, self.df = None, df
            return
        if names != cols:  # take by position: ``df[cols]`` looks every name up, 4x slower
            where = {c: i for i, c in enumerate(names)}
            df = df.take([where[c] for c in cols], axis=1)
        # dtypes once: ``df[c]`` builds a new Series on every call (pandas 3 keeps no item
        # cache), and ~13 tables x 10-40 columns of them cost a small trace ~10 ms
        dtypes = dict(zip(cols, df.dtypes, strict=True))
        #: integer, boolean, float and string columns only, and big: written through Arrow
        self.raw = df if len(df) >= _ARROW_MIN_ROWS and _arrow_ok(df, dtypes) else None
        if self.raw is not None:
            self.df = df
            return
        changed = {}
        for c, dt in dtypes.items():
            if pd.api.types.is_float_dtype(dt):  # infinities are written "inf" / "-inf"
                if np.isinf(df[c].to_numpy(dtype=np.float64, na_value=np.nan)).any():
                    v = df[c].astype("float64")
                    changed[c] = v.astype(object).where(~np.isinf(v.fillna(0)), v.map(_scalar))
            elif isinstance(dt, pd.CategoricalDtype) or (isinstance(dt, np.dtype)
                                                         and dt.kind == "O"):
                changed[c] = df[c].astype(object)
        self.df = df.assign(**changed) if changed else df

    def to_json(self) -> str:
        return "".join(self.chunks())

    def chunks(self, rows: int = PIECE_ROWS) -> Iterator[str]:
        """The table's JSON in pieces of ``rows`` records (same bytes as one piece): a
        million-gap table never sits in memory as one 200 MB string."""
        if self.records is not None:
            yield from _records_chunks(self.records, rows)
            return
        if self.df.empty:
            yield "[]"
            return
        if self.raw is not None:
            yield from _arrow_chunks(self.raw, rows)
            return
        if len(self.df) <= rows:
            yield self.df.to_json(orient="records", double_precision=15, force_ascii=False)
            return
        yield "["
        for i in range(0, len(self.df), rows):
            piece = self.df.iloc[i:i + rows].to_json(orient="records", double_precision=15,
                                                     force_ascii=False)
            yield ("," if i else "") + piece[1:-1]
        yield "]"


#: Tables with at least this many rows are written by :func:`_arrow_chunks` when they can be.
_ARROW_MIN_ROWS = 5_000

#: Tables of at most this many cells are written from Python values (:func:`_records`):
#: pandas' ``to_json`` and the dtype work before it cost ~0.4 ms a table whatever its size
#: (the 13 tables of a small trace: ~6 ms), the records of a 50-row table ~0.15 ms; from
#: ~5000 cells on, pandas' encoder, column by column in C, is the faster.
_RECORDS_MAX_CELLS = 5_000


def _records(df: pd.DataFrame, cols: list[Any]) -> list[dict[Any, Any]] | None:
    """``df``'s rows as dicts of Python values, keys in the order ``cols``, which pandas'
    own encoder (``ujson_dumps``, what ``to_json`` runs) writes as the bytes
    ``df[cols].to_json(orient="records", double_precision=15, force_ascii=False)`` are,
    once infinite floats are the strings "inf" / "-inf" as :class:`_Table` writes them:
    ``Series.tolist`` gives Python ints, floats, bools, str, None, NaN and pd.NA (all three
    written null), categories' values. None (pandas' path then) for column names that are
    not distinct strings and for dtypes whose ``to_json`` text is not their values' (dates,
    32-bit floats, ...)."""
    if len(set(cols)) != len(cols) or not all(isinstance(c, str) for c in cols):
        return None
    columns = []
    for c in cols:
        col = df[c]
        dt = col.dtype
        if isinstance(dt, np.dtype):
            if dt.kind not in "iubfO" or (dt.kind == "f" and dt != np.float64):
                return None
        elif not (isinstance(dt, (pd.CategoricalDtype, pd.StringDtype))
                  or dt in (pd.Int64Dtype(), pd.Float64Dtype(), pd.BooleanDtype())):
            return None
        values = col.tolist()
        if dt.kind == "f" and np.isinf(col.to_numpy(dtype=np.float64, na_value=np.nan)).any():
            values = [_scalar(v) if type(v) is float and math.isinf(v) else v for v in values]
        columns.append(values)
    return [dict(zip(cols, row, strict=True)) for row in zip(*columns, strict=True)]


def _records_chunks(records: list[dict[Any, Any]], rows: int) -> Iterator[str]:
    """:func:`_records`' rows as JSON, ``rows`` records a piece (the same bytes as one)."""
    from pandas.io.json import ujson_dumps

    if len(records) <= rows:
        yield ujson_dumps(records, double_precision=15, ensure_ascii=False)
        return
    yield "["
    for i in range(0, len(records), rows):
        piece = ujson_dumps(records[i:i + rows], double_precision=15, ensure_ascii=False)
        yield ("," if i else "") + piece[1:-1]
    yield "]"


def _arrow_ok(df: pd.DataFrame, dtypes: dict[Any, Any] | None = None) -> bool:
    """True when every column is integer, boolean or finite float (nullable or not) or text
    (str, categorical of str, object of str): the columns :func:`_arrow_chunks` writes
    exactly as pandas would. ``dtypes``: each column's dtype, when the caller has them."""
    if dtypes is None:
        dtypes = dict(zip(df.columns, df.dtypes, strict=True))
    for c, dt in dtypes.items():
        if not isinstance(c, str):
            return False
        if pd.api.types.is_bool_dtype(dt):
            continue
        if pd.api.types.is_integer_dtype(dt):
            continue
        if pd.api.types.is_float_dtype(dt):
            if np.isinf(df[c].to_numpy(dtype=np.float64, na_value=np.nan)).any():
                return False  # written as "inf" strings by the records path
            continue
        if isinstance(dt, pd.CategoricalDtype):
            if not all(isinstance(v, str) for v in dt.categories):
                return False
            continue
        if pd.api.types.is_string_dtype(dt):
            if pd.api.types.infer_dtype(df[c], skipna=True) not in ("string", "empty"):
                return False
            continue
        return False
    return True


def _json_str(values: list[str]) -> list[str]:
    """Each string as pandas' encoder writes it, quotes included (it escapes "/" as "\\/")."""
    text = pd.Series(values, dtype=object).to_json(orient="values", force_ascii=False)
    # Split the encoded array back into its items: json.loads then re-encoding would lose
    # pandas' own escapes, so cut at the quotes that close each item instead.
    out, i = [], 1
    for _ in values:
        j = i + 1
        while text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        out.append(text[i:j + 1])
        i = j + 2
    return out


def _arrow_column(series: pd.Series) -> Any:
    """One column as Arrow strings holding each cell's JSON text ("null" for NA)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dt = series.dtype
    if pd.api.types.is_bool_dtype(dt):
        arr = pa.array(series.array if isinstance(series.array, pd.arrays.BooleanArray)
                       else series.to_numpy(), from_pandas=True)
        return pc.fill_null(pc.cast(arr, pa.string()), "null")
    if pd.api.types.is_float_dtype(dt):
        # pandas' own float text (its precision and exponent rules), one C call per column;
        # Arrow only cuts it at the commas (a number never holds one)
        text = series.to_json(orient="values", double_precision=15, force_ascii=False)
        return pc.list_flatten(pc.split_pattern(pa.array([text[1:-1]]), ","))
    if isinstance(dt, pd.CategoricalDtype):
        cats = _json_str([str(v) for v in dt.categories]) + ["null"]
        codes = series.cat.codes.to_numpy()
        codes = np.where(codes < 0, len(cats) - 1, codes)
        return pa.array(cats, type=pa.string()).take(pa.array(codes))
    if pd.api.types.is_integer_dtype(dt):
        arr = pa.array(series.array if isinstance(series.array, pd.arrays.IntegerArray)
                       else series.to_numpy(), from_pandas=True)
        return pc.fill_null(pc.cast(arr, pa.string()), "null")
    enc = pc.dictionary_encode(pa.array(series.to_numpy(dtype=object), type=pa.string(),
                                        from_pandas=True))
    words = _json_str(enc.dictionary.to_pylist()) + ["null"]
    idx = pc.fill_null(enc.indices, len(words) - 1)
    return pa.array(words, type=pa.string()).take(idx)


def _arrow_chunks(df: pd.DataFrame, rows: int) -> Iterator[str]:
    """The records JSON of an integer/text table, built column-wise by Arrow: the same bytes
    as ``df.to_json(orient="records")``, a few times faster than pandas' encoder."""
    import pyarrow.compute as pc

    names = [json.dumps(c) for c in df.columns]
    yield "["
    for i in range(0, len(df), rows):
        part = df.iloc[i:i + rows]
        cells = _int64_cells(part)
        pieces: list[Any] = []
        for j, c in enumerate(df.columns):
            pieces.append(("{" if j == 0 else ",") + names[j] + ":")
            pieces.append(cells[c] if c in cells else _arrow_column(part[c]))
        pieces.append("},")
        text = pc.binary_join_element_wise(*pieces, "")
        yield ("," if i else "") + _concat(text)[:-1]
    yield "]"


def _int64_cells(part: pd.DataFrame) -> dict[str, Any]:
    """The JSON text of every int64 column of ``part``, plain or nullable (name -> Arrow
    strings, "null" for NA), from one cast of the columns laid end to end: a cast per column
    costs more in calls than in digits (a 10000-step table has 29 such columns)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = [c for c, dt in zip(part.columns, part.dtypes, strict=True)
            if dt == np.int64 or isinstance(dt, pd.Int64Dtype)]
    if len(cols) < 2:
        return {}
    n = len(part)
    values, missing = [], []
    for c in cols:
        arr = part[c].array
        if isinstance(arr, pd.arrays.IntegerArray):
            values.append(arr.to_numpy(dtype=np.int64, na_value=0))
            missing.append(arr.isna())
        else:
            values.append(part[c].to_numpy())
            missing.append(np.zeros(n, dtype=bool))
    mask = np.concatenate(missing)
    text = pa.array(np.concatenate(values), mask=mask if mask.any() else None).cast(pa.string())
    if mask.any():
        text = pc.fill_null(text, "null")
    return {c: text.slice(k * n, n) for k, c in enumerate(cols)}


def _concat(arr: Any) -> str:
    """All strings of an Arrow string array, back to back (one decode of its data buffer,
    read in place)."""
    import pyarrow as pa

    wide = arr.type == pa.large_string()
    if not wide and arr.type != pa.string():
        arr, wide = arr.cast(pa.large_string()), True
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[arr.offset:arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    if data is None:  # no characters at all
        return ""
    return str(memoryview(data)[int(offsets[0]):int(offsets[-1])], "utf-8")


def result_to_dict(result: Any, _lazy: bool = False, all_gaps: bool = False) -> dict[str, Any]:
    """The document ``cgprof analyze --json`` writes for one trace, as plain Python objects.

    ``gpu.gaps`` lists the GAP_LIST_LIMIT longest gaps (in time order), ``all_gaps`` every
    one; ``gpu.gaps_total`` counts them all and ``gpu.gaps_limit`` says which (null: all).
    (``_lazy``: tables stay ``_Table`` objects for :func:`render`'s fast path.)
    """
    table: Any = _Table if _lazy else frame_records
    limit = None if all_gaps else GAP_LIST_LIMIT

    g, r, s = result.gaps, result.replays, result.steps
    c = getattr(result, "completeness", None)
    gone = None if c is None or c.complete else c.reason
    doc = {
        "schema_version": JSON_SCHEMA_VERSION,
        "cgprof_version": __version__,
        "completeness": completeness_dict(c, table),
        "untraced": (result.untraced.to_dict()
                     if getattr(result, "untraced", None) is not None else None),
        "trace": {k: _scalar(v) if not isinstance(v, (list, dict)) else v
                  for k, v in result.info.items()},
        "verdict": {k: _scalar(v) if not isinstance(v, (list, dict)) else v
                    for k, v in dataclasses.asdict(result.verdict).items()},
        "coverage": {
            "summary": {k: _scalar(v) for k, v in result.coverage.summary.items()},
            "eager_top": table(result.coverage.eager_top),
            "eager_per_step": {k: _scalar(v) for k, v in result.coverage.eager_per_step.items()},
            "recapture_steps": list(result.coverage.recapture_steps),
            "fallback_steps": list(result.coverage.fallback_steps),
        },
        "summaries_scope": "whole trace, as nsys stats",
        "launches": table(result.launches),
        "api_summary": table(result.api_summary),
        "kernel_summary": table(result.kernel_summary),
        "nvtx_summary": table(result.nvtx_summary),
        "gpu": {
            "devices": table(g.devices),
            "gaps_by_kind": table(g.by_kind),
            "gap_histogram": table(g.histogram),
            "streams": table(g.streams),
            "min_gap_ns": g.min_gap_ns,
            "gaps": table(g.longest(limit).gaps),
            "gaps_total": g.listed_total,
            "gaps_limit": limit,
        },
        "replays": {
            "node_level": r.node_level,
            "node_tracing": (node_tracing_note(result.info["gpus"])
                             if r.node_level and len(r.replays) else None),
            "summary": r.summary,
            "cost_model": r.cost_model,
            "replays": table(r.replays),
        },
        "steps": {
            "range": s.name,
            "source": s.source,
            "skipped": s.skipped,
            "total_instances": s.total_instances,
            "rule": s.rule,
            "candidates": table(s.candidates),
            "steps": table(s.steps if gone is None else _without_gpu(s.steps)),
        },
    }
    if gone is not None:
        # an incomplete trace's GPU figures: null, and why (docs/reports.md)
        doc["gpu"] = None
        doc["replays"]["summary"] = doc["replays"]["cost_model"] = None
        for k in ("graph_kernel_share", "graph_gpu_share"):
            doc["coverage"]["summary"][k] = None
        doc["unavailable"] = {key: gone for key in UNAVAILABLE_KEYS}
    return doc


#: Where an incomplete trace's document holds null for a GPU figure it cannot support (the
#: keys of its ``unavailable``, each with the reason): dotted paths, ``[]`` for a column of
#: every row of a table.
UNAVAILABLE_KEYS = (
    "gpu", "replays.summary", "replays.cost_model", "coverage.summary.graph_kernel_share",
    "coverage.summary.graph_gpu_share", "verdict.launch_bound_steps",
    "verdict.eager_busy_pct_p50", "verdict.graph_busy_pct_p50",
    "verdict.replay_compactness_p50", "verdict.estimated_graph_step_ns",
    "verdict.estimated_speedup",
    *(f"steps.steps[].{c}" for c in (
        "gpu_busy_ns", "gpu_idle_ns", "compactness", "busy_pct", "launch_wait_ns",
        "launch_bound", "graph_gpu_ns", "eager_gpu_ns")))


def _without_gpu(steps: pd.DataFrame) -> pd.DataFrame:
    """The step table with the GPU figures an incomplete trace cannot support set to null."""
    cols = [k.rsplit(".", 1)[1] for k in UNAVAILABLE_KEYS if k.startswith("steps.steps[].")]
    return steps.assign(**{c: pd.Series([None] * len(steps), dtype=object, index=steps.index)
                           for c in cols if c in steps.columns})


def completeness_dict(c: Any, table: Any = frame_records) -> dict[str, Any] | None:
    """The document's ``completeness`` (cgprof.metrics.completeness.CompletenessResult);
    None for a result made without one."""
    if c is None:
        return None
    return {
        "complete": bool(c.complete), "missing": list(c.missing), "reason": c.reason,
        "kernel_launches": c.kernel_launches,
        "kernel_launches_unrecorded": c.kernel_launches_unrecorded,
        "graph_check": c.graph_check, "graph_launches": c.graph_launches,
        "graph_launches_unrecorded": c.graph_launches_unrecorded,
        "replays_short": c.replays_short, "replay_nodes_missing": c.replay_nodes_missing,
        "graphs": table(c.graphs), "impossible_times": table(c.impossible_times),
        "recording": None if c.recording is None else {"start_ns": c.recording[0],
                                                       "stop_ns": c.recording[1]},
        "dropped": list(c.dropped),
    }


def render(results: list[Any], all_gaps: bool = False) -> str:
    """One trace -> its document; several -> {"schema_version", "traces": [...]}.

    ``all_gaps``: list every GPU gap, not only the GAP_LIST_LIMIT longest."""
    return "".join(render_chunks(results, all_gaps=all_gaps))


def render_chunks(results: list[Any], all_gaps: bool = False) -> Iterator[str]:
    """:func:`render`'s text in pieces, for writing a big document without holding it."""

    def one(r: Any) -> dict[str, Any]:  # a multi-rank run (RanksResult) has its own layout
        return ranks_to_dict(r, _lazy=True, all_gaps=all_gaps) if hasattr(
            r, "cross") else result_to_dict(r, _lazy=True, all_gaps=all_gaps)

    if len(results) == 1:
        doc: Any = one(results[0])
    else:
        doc = {"schema_version": JSON_SCHEMA_VERSION, "traces": [one(r) for r in results]}
    return _dump(doc)


#: Lists of plain ints/strings at least this long are written by one join, not json's
#: pure-Python indenting encoder (``indent`` turns its C encoder off): a 10000-step window's
#: ``window_steps`` costs ~25 ms there.
_LONG_LIST = 1000


class _Items:
    """A long list of ints and strings, spliced into the document like a _Table."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def text(self, indent: str) -> str:
        """The list as ``json.dumps(..., indent=1)`` writes it on a line indented ``indent``."""
        pad = ",\n" + indent + " "
        return "[\n" + indent + " " + pad.join(
            str(x) if type(x) is int else json.dumps(x) for x in self.items) + "\n" + indent + "]"


def _long_lists(obj: Any) -> Any:
    """``obj`` with every long list of plain ints/strings wrapped in _Items (new containers:
    the result's own dicts and lists are left as they are)."""
    if isinstance(obj, dict):
        return {k: _long_lists(v) for k, v in obj.items()}
    if isinstance(obj, list):
        if len(obj) >= _LONG_LIST and all(type(x) is int or type(x) is str for x in obj):
            return _Items(obj)
        return [_long_lists(v) for v in obj]
    return obj


def _dump(doc: Any) -> Iterator[str]:
    """json.dumps with every _Table (as pandas writes it) and _Items spliced in, in pieces."""
    tables: list[Any] = []

    def placeholder(obj: Any) -> Any:
        if isinstance(obj, (_Table, _Items)):
            tables.append(obj)
            return f"\x00table{len(tables) - 1}\x00"
        raise TypeError(f"not JSON serialisable: {type(obj).__name__}")

    first = doc.get("completeness") if isinstance(doc, dict) else None
    if first is not None:
        # whether the trace is complete comes first in the document (then the keys sorted)
        lead = json.dumps({"completeness": _long_lists(first)}, sort_keys=True, indent=1,
                          allow_nan=False, default=placeholder)
        rest = json.dumps(_long_lists({k: v for k, v in doc.items() if k != "completeness"}),
                          sort_keys=True, indent=1, allow_nan=False, default=placeholder)
        text = lead[:-2] + ",\n" + rest[2:]
    else:
        text = json.dumps(_long_lists(doc), sort_keys=True, indent=1, allow_nan=False,
                          default=placeholder)
    parts = text.split('"\\u0000table')
    before = parts[0]
    yield before
    for part in parts[1:]:
        num, rest = part.split("\\u0000\"", 1)
        obj = tables[int(num)]
        if isinstance(obj, _Items):  # indented as the line it starts on
            line = before[before.rfind("\n") + 1:]
            yield obj.text(line[:len(line) - len(line.lstrip(" "))])
        else:
            yield from obj.chunks()
        yield rest
        before = rest
    yield "\n"


#: ``ranks.files[].summaries_scope``: what a file's whole tables cover, and what they lack.
FILE_SCOPE = "whole file, every process, as nsys stats; no med_ns, std_ns"


def ranks_to_dict(rr: Any, _lazy: bool = False, all_gaps: bool = False) -> dict[str, Any]:
    """The document for a multi-rank run (cgprof.ranks.RanksResult): the cross-rank tables
    under ``ranks`` and each shown rank's usual document under ``traces`` (with its ``rank``).
    Per-rank documents from many files carry no gap list (``gpu.gaps`` is empty).

    ``ranks.files``: per file of the run (the order of ``ranks.paths``), its path, its
    processes (``pids``) and its whole per-name summaries (``kernel_summary``,
    ``api_summary``, ``nvtx_summary``: keys, count, total_ns, avg_ns, min_ns, max_ns; every
    process of the file, ranks and others, equal to ``nsys stats`` of it; no median or
    standard deviation: cgprof.ranks.FileSummaries)."""
    table: Any = _Table if _lazy else frame_records
    cr = rr.cross
    traces = []
    for r in rr.shown():
        doc = result_to_dict(r.result, _lazy=_lazy, all_gaps=all_gaps)
        doc["rank"] = {"rank": r.rank_id, "pid": r.pid, "devices": list(r.device_ids),
                       "path": r.path, "marker": r.marker, "collectives": table(r.collectives)}
        traces.append(doc)
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "cgprof_version": __version__,
        "ranks": {
            "paths": list(rr.paths),
            "source": rr.source,
            "selected": rr.selected,
            "per_rank": table(cr.per_rank),
            "steps": table(cr.steps),
            "step_ranks": table(cr.step_ranks),
            "waits": table(cr.waits),
            "notes": list(cr.notes),
            # processes that are not ranks (no GPU work): with the ranks' summaries they add
            # up to each file's, as nsys stats counts
            "other_processes": [{"path": o.path, "pids": list(o.pids),
                                 "api_calls": o.api_calls, "nvtx_ranges": o.nvtx_ranges,
                                 "api_summary": table(o.api_summary),
                                 "nvtx_summary": table(o.nvtx_summary)} for o in rr.others],
            # each file whole, every process: what nsys stats prints for it
            "files": [{"path": f.path, "pids": list(f.pids), "summaries_scope": FILE_SCOPE,
                       "kernel_summary": table(f.kernel_summary),
                       "api_summary": table(f.api_summary),
                       "nvtx_summary": table(f.nvtx_summary)} for f in rr.files],
        },
        "traces": traces,
    }
