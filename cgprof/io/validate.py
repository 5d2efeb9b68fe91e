"""Semantic checks on an nsys export: refuse a trace whose tables contradict each other.

The loader (:mod:`cgprof.io.loader`) reads whatever tables exist; nsys creates a table only when
it captured such events, so a missing table normally means "none happened". A damaged or
cut-down export breaks that rule, and analysing it would print a meaningless result as if
it were one ("GPU busy 0%" when the kernel table is gone). These checks say so instead, in
one line that names the file:

* :func:`check_tables` (before reading): the names table ``StringIds`` is missing although
  the event tables refer to it;
* :func:`validate` (after reading, on the :class:`~cgprof.io.trace.Trace`):

  - GPU activity (kernels, copies, memsets, replays) but no CUDA API table: without the
    launch calls nothing can be said about launch overhead;
  - GPU rows of a process that made no CUDA API call (a NULL or mangled ``globalPid``):
    such a "process" would otherwise be analysed as a rank whose work nobody launched;
  - API calls, synchronisations and NVTX ranges that end before they start, or start before
    the session (negative times; the loader already refuses NULL start/end and text in
    number columns).

What a recording can lack without being damaged (kernel launch calls whose kernels never
appear, graph launches without replays, GPU rows with impossible times, records the export
says were dropped) is not refused here: the analysis reports the trace incomplete and shows
its host side (cgprof.metrics.completeness).

Tolerated, on purpose (and documented in docs/bad_input.md): exact duplicate rows are counted
like any other row, as ``nsys stats`` counts them (a union of busy intervals is unchanged by
them); unterminated NVTX ranges (NULL end) are kept, as nsys keeps them.

Only :mod:`cgprof.schema` and :mod:`cgprof.errors` are imported here: the checks run inside
``loader.load`` and must not depend on the metrics built on top of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.errors import TraceError

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.trace import Trace

#: Event tables whose name columns are ids into StringIds.
_NAMED_TABLES = (S.KERNEL, S.RUNTIME)


class DamagedColumn(Exception):
    """Raised by the loader for a value no nsys export holds; ``load`` adds the file name.

    Not a :class:`CgprofError`: it never leaves ``loader.load``.
    """

    def __init__(self, table: str, column: str, what: str) -> None:
        super().__init__(f"{table}.{column} {what}")
        self.table, self.column, self.what = table, column, what


def one_line(value: object, limit: int = 160) -> str:
    """``str(value)`` on one line (whitespace runs collapsed), cut to ``limit`` characters.

    Error messages quote SQLite and values from the file; a damaged file can put newlines
    (e.g. its schema's SQL text) into them, and the user gets one line, always."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def damaged(path: Path, detail: str) -> TraceError:
    """The one-line error for a file that is an nsys export but damaged or cut down."""
    return TraceError(f"{path}: {detail}; is the file damaged or cut down? "
                      "Re-export it with `nsys export --type sqlite`")


def check_tables(path: Path, tables: dict[str, list[str]]) -> None:
    """Checks that need only the table list (run before any table is read)."""
    if S.STRING_IDS not in tables:
        users = [t for t in _NAMED_TABLES if t in tables]
        nvtx_ids = "textId" in tables.get(S.NVTX, [])
        if users or nvtx_ids:
            shown = ", ".join(users + ([S.NVTX] if nvtx_ids else []))
            raise damaged(path, f"missing table StringIds, which holds the names used by {shown}")


def find_non_integer(conn, tables: dict[str, list[str]]) -> tuple[str, str, object] | None:
    """The first (table, column, value) where an INTEGER column of a table cgprof reads holds
    something else (text, a blob, a real number).

    Run only after reading failed, to say which cell is to blame (a scan per column).
    """
    for table in S.TABLES_READ:
        if table not in tables:
            continue
        for _, col, decl, *_rest in conn.execute(f'PRAGMA table_info("{table}")').fetchall():
            if "INT" not in str(decl).upper():
                continue
            row = conn.execute(
                f'SELECT "{col}" FROM "{table}" WHERE typeof("{col}") NOT IN '
                "('integer', 'null') LIMIT 1").fetchone()
            if row is not None:
                return table, col, row[0]
    return None


def distinct_pids(pid: pd.Series) -> Any:
    """``pd.unique(pid)``, min and max first for a plain int64 column: one process is the
    usual case, and two reductions cost less than a hash of a million rows."""
    if pid.dtype == np.int64 and len(pid):
        arr = pid.to_numpy()
        if arr.min() == arr.max():
            return arr[:1].copy()
    return pd.unique(pid)


def _check_gpu_processes(trace: Trace, part: bool = False) -> None:
    """GPU rows belong to processes that made CUDA API calls: a kernel, copy or memset is
    launched by a call of its own process. A row whose process made none (a NULL or mangled
    globalPid) would otherwise become a rank of its own with work nobody launched.
    ``part``: the trace is some processes' rows of a file (cgprof.io.loader.load_part), whose
    other processes may have made calls: GPU rows without a call of their own are refused
    there even when the part has no call at all."""
    rt = trace.runtime
    if not len(rt) and not part:
        return
    api_pids = distinct_pids(rt["pid"].dropna())
    known = set(api_pids.tolist())
    for table, df in ((S.KERNEL, trace.kernels), (S.MEMCPY, trace.memcpy),
                      (S.MEMSET, trace.memset), (S.GRAPH_TRACE, trace.graph_trace)):
        if not len(df):
            continue
        # The table's few distinct pids settle it (10M kernels, one process: two reductions,
        # not a sorted isin of every row); the rows are looked at only when one is unknown.
        present = distinct_pids(df["pid"])
        if not pd.isna(present).any() and known.issuperset(present.tolist()):
            continue
        orphan = ~df["pid"].isin(api_pids).to_numpy(dtype=bool, na_value=False)
        n = int(orphan.sum())
        if n:
            pid = df["pid"][orphan].iloc[0]
            who = "no process (NULL globalPid)" if pd.isna(pid) else f"process {int(pid)}"
            raise damaged(trace.meta.path, f"{n} of {len(df)} rows of {table} belong to {who}, "
                          "which made no CUDA API call, so nothing launched them")


def _negatives(values: pd.Series) -> int:
    """``int((values < 0).sum())`` (missing values are not negative): one minimum over a plain
    int64 column first, the count only when it is negative."""
    if values.dtype == np.int64:
        arr = values.to_numpy()
        return int(np.count_nonzero(arr < 0)) if len(arr) and arr.min() < 0 else 0
    return int((values < 0).sum())


def validate(trace: Trace, part: bool = False) -> None:
    """Raise :class:`TraceError` when the trace's tables contradict each other (see module).
    ``part``: the trace is some processes' rows of a file (see _check_gpu_processes)."""
    path, tables = trace.meta.path, trace.meta.tables
    # GPU tables' impossible times are the analysis's to report (metrics.completeness).
    for label, df, table in (("CUDA API calls", trace.runtime, S.RUNTIME),
                             ("synchronisations", trace.sync, S.SYNC),
                             ("NVTX events", trace.nvtx, S.NVTX)):
        if not len(df):
            continue
        # (NVTX is left out here: domain-registration rows carry no real time.)
        before = _negatives(df["start_ns"]) if table != S.NVTX else 0
        if before:
            raise damaged(path, f"{before} of {len(df)} {label} in {table} have a negative "
                                "start time")
        bad = _negatives(df["dur_ns"])
        if bad:
            raise damaged(path, f"{bad} of {len(df)} {label} in {table} end before they start")

    gpu_rows = {S.KERNEL: len(trace.kernels), S.MEMCPY: len(trace.memcpy),
                S.MEMSET: len(trace.memset), S.GRAPH_TRACE: len(trace.graph_trace)}
    busy = {t: n for t, n in gpu_rows.items() if n}
    if busy and S.RUNTIME not in tables:
        shown = ", ".join(f"{n} rows of {t}" for t, n in busy.items())
        raise damaged(path, f"GPU activity ({shown}) but no table {S.RUNTIME} of the CUDA API "
                            "calls that launched it, so launch overhead cannot be judged")

    _check_gpu_processes(trace, part)
