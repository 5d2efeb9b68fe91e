"""What a whole analysis of a trace is expected to hold, read off the file before it is read.

:func:`activity_rows` counts a trace's kernels and CUDA API calls without a scan (SQLite's
largest rowid, a Parquet file's metadata); :func:`whole_analysis_bytes` turns them into the
peak memory a whole-trace analysis holds; :func:`over_memory_cap` and :func:`apart_wanted`
compare it with the active settings' memory cap, for the plan (:mod:`cgprof.plan`) to choose
how the trace is read. Cheap: no pandas, no scan, nothing kept open.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cgprof import schema as S
from cgprof.io.dirsource import DirSource
from cgprof.io.sources import Source, connect_readonly, dir_kind
from cgprof.settings import current

#: What a whole-trace analysis holds at its peak per kernel or CUDA API row, and besides
#: them (the imports, the small tables), fitted to the 10M-row trace's measured peak
#: (docs/engine.md). A trace whose estimate exceeds the memory cap is read rank by rank or in
#: chunks (:mod:`cgprof.plan`).
WHOLE_BYTES_PER_ROW = 95
WHOLE_BYTES_BASE = 200_000_000


def whole_analysis_bytes(rows: int) -> int:
    """The peak memory a whole-trace analysis of ``rows`` kernels + API calls is expected
    to hold (:data:`WHOLE_BYTES_PER_ROW`)."""
    return WHOLE_BYTES_BASE + WHOLE_BYTES_PER_ROW * rows


def activity_rows(path: Path) -> int | None:
    """Kernels + CUDA API calls of the export at ``path`` (SQLite, or nsys's parquetdir),
    read off the file without a scan and without pandas; None when it does not say (an
    arrowdir, a report, anything unreadable: the load says what is wrong)."""
    path = Path(path)
    tables = (S.KERNEL, S.RUNTIME)
    try:
        if path.is_dir():
            kind = dir_kind(path)
            if kind is None:
                return None
            src: Source = DirSource(path, kind)
            counts = [src.row_count(t) for t in tables]
            src.close()
        elif path.is_file() and path.suffix.lower() != ".nsys-rep":
            conn = connect_readonly(path)
            try:
                counts = []
                for t in tables:  # (no probe: a few ms on every first run)
                    try:
                        top = conn.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0]
                    except sqlite3.OperationalError as exc:
                        if "no such table" not in str(exc):
                            raise
                        top = None
                    counts.append(top if isinstance(top, int) else 0 if top is None else None)
            finally:
                conn.close()
        else:
            return None
    except Exception:
        return None
    # (ignore: no None is left after any() above; mypy cannot narrow the list's items)
    return None if any(c is None for c in counts) else sum(counts)  # type: ignore[arg-type]


def over_memory_cap(path: Path) -> bool:
    """Whether the whole analysis of the trace at ``path`` is expected to hold more than the
    memory cap (:func:`whole_analysis_bytes` of :func:`activity_rows`; False where the rows
    are not known up front). Cheap: no pandas, no scan."""
    rows = activity_rows(path)
    return rows is not None and whole_analysis_bytes(rows) > current().memory_limit_bytes


def apart_wanted(path: Path, over: bool | None = None) -> bool:
    """Whether a multi-rank trace at ``path`` is to be read rank by rank: its whole analysis
    is expected to hold more than the memory cap (:func:`over_memory_cap`, or ``over`` where
    the caller asked it already), or the settings' ``ranks_apart`` is True (for any trace
    whose rows are known up front, and any exported folder); never when it is False. Cheap
    (no pandas, no scan): asked before every analysis."""
    force = current().ranks_apart
    if force is False:
        return False
    if force:  # (an arrowdir's rows are not known up front)
        return activity_rows(path) is not None or dir_kind(path) is not None
    return over_memory_cap(path) if over is None else over
