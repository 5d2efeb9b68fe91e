"""A trace's reads started before the analysis is imported, for the load to take.

:func:`prefetch` is what a command calls first with the trace it is about to analyse: the
cache entry, or else the SQLite export, is opened and its tables start being read (in
threads, or by a forked process: :mod:`cgprof.io.forked`) while pandas and the metrics are
imported; the source is kept in :mod:`cgprof.io.early` for the load. It never raises: a file
that is not a readable trace is left for the load to report.
"""

from __future__ import annotations

import os
from pathlib import Path

from cgprof import schema as S
from cgprof.io.cache import Pending, begin, enabled, lookup
from cgprof.io.early import keep_early
from cgprof.io.framestore import has_categories, stored_columns
from cgprof.io.sources import Source
from cgprof.io.sqlite import SqliteSource, open_sqlite_early


def prefetch(path: str | os.PathLike[str]) -> None:
    """Open the trace at ``path`` and start reading its two big tables (kernels, CUDA API
    calls) in threads, before the caller imports the analysis: pandas and the metrics take
    ~0.3 s to import, while DuckDB and Arrow read without the GIL. From the cache entry
    when there is one, else from the SQLite export (a small one on Linux: every table the
    load reads, by a forked process, :meth:`cgprof.io.sqlite.SqliteSource.read_ahead_early`,
    so that importing DuckDB is not done here either). The load takes the source
    (:func:`cgprof.io.early.take_early`); :func:`cgprof.io.early.drop_early` closes one no load
    took. Never raises: a file that is not a readable trace is left for the load to report.
    """
    try:
        path = Path(path)
        if not path.is_file():
            return
        cached = lookup(path) if enabled() else None
        src: Source | None = cached
        if cached is not None:
            for table in (S.KERNEL, S.RUNTIME):
                layout = cached.frames.get(table)
                if layout:
                    cached.read_ahead(f"{table}.frame", stored_columns(layout))
            # and every other file the load reads (one each): the reads leave the load, whose
            # file reads took ~10 ms after the imports (ResNet-18: 11 small Parquet files)
            for table, layout in cached.frames.items():
                if has_categories(layout):  # as read_frame reads it
                    cached.read_ahead(f"{table}.categories", ["column", "value"])
                cached.read_ahead(f"{table}.frame", stored_columns(layout))
            for table, columns in cached.load_reads(info=True):  # as the load asks
                cached.read_ahead(table, columns)
        elif path.suffix.lower() != ".nsys-rep":
            sqlite = open_sqlite_early(path)
            if sqlite is not None:
                _read_ahead_early(path, sqlite)
            return
        if src is not None:
            keep_early(path, src)
    except Exception:  # the load reads it again, and says what is wrong
        return


def _read_ahead_early(path: Path, src: SqliteSource) -> None:
    """:func:`prefetch` of an SQLite export: its reads started (into a new cache entry when
    the cache is on: the forked reader's files are the entry,
    :func:`cgprof.io.cache.commit_forked`) and the source kept for the load. Raising (Ctrl-C's
    KeyboardInterrupt, a failure), it leaves neither the source nor the entry's folder."""
    pending: Pending | None = None
    try:
        pending = begin(path) if enabled() else None
        if not src.read_ahead_early(None if pending is None else pending.tmp) and (
                pending is not None):
            pending.abort()
        keep_early(path, src)
    except BaseException:
        src.close()
        if pending is not None:
            pending.abort()
        raise
