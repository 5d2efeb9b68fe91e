"""DuckDB over an SQLite export: the connection, its spill folder, the scan's query.

:func:`_duckdb_sqlite` opens a DuckDB connection with the export attached read-only (the
SQLite scanner loaded from its wheel's own file: no network), under the active settings'
threads and memory cap; :func:`scan_sql` is the query a table is read with, in rowid order.
Where duckdb or its scanner cannot be imported, SQLite is read through ``sqlite3`` instead
and :func:`engine_fallback` says why.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from cgprof.io.memory import memory_limit
from cgprof.io.threads import threads

#: From this many engine threads a SQLite table is read ``ORDER BY rowid``
#: (:func:`scan_sql`).
SORTED_SCAN_THREADS = 4


def scan_sql(table: str, columns: list[str], rows: int | None, where: str = "") -> str:
    """The query of :meth:`cgprof.io.sqlite.SqliteSource._scan`: ``columns`` of the attached
    ``table``, in rowid order (sorted from :data:`SORTED_SCAN_THREADS` threads, when ``rows``
    is known)."""
    cols = ", ".join(f'"{c}"' for c in columns)
    order = " ORDER BY rowid" if rows is not None and threads() >= SORTED_SCAN_THREADS else ""
    cond = f" WHERE {where}" if where else ""
    return f'SELECT {cols} FROM s."{table}"{cond}{order}'


class ScannerMissing(RuntimeError):
    """The duckdb-extension-sqlite-scanner package holds no extension file."""


#: Why this process reads SQLite exports through sqlite3 instead of DuckDB's scanner (set
#: once, when duckdb or its SQLite scanner cannot be imported or found; empty: it could, or
#: it was not tried). The commands say so on stderr (:func:`engine_fallback`).
_FALLBACK: list[str] = []


def engine_fallback(clear: bool = False) -> str | None:
    """The reason SQLite was read through sqlite3, cgprof's slower fallback, because the
    engine is not installed (None when it was not); ``clear`` forgets it."""
    reason = _FALLBACK[0] if _FALLBACK else None
    if clear:
        _FALLBACK.clear()
    return reason


def _duckdb_sqlite(path: Path, temp: Path) -> Any:
    """A DuckDB connection with ``path`` attached read-only as schema ``s``, spilling into
    the folder ``temp`` (made by DuckDB when it spills)."""
    import duckdb
    import duckdb_extension_sqlite_scanner as scanner

    ext_dir = Path(scanner.__file__).parent / "extensions"
    exts = sorted(ext_dir.glob("*/sqlite_scanner.duckdb_extension"))
    if not exts:
        raise ScannerMissing(f"no sqlite_scanner extension file under {ext_dir}")
    con = duckdb.connect(config={
        "threads": threads(),
        "memory_limit": memory_limit(),
        # where a sort or join beyond the cap spills (DuckDB's own default, for a database
        # in memory: ".tmp" in the current folder, the user's)
        "temp_directory": str(temp),
        "allow_unsigned_extensions": "true",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
    })
    try:
        # DuckDB draws a progress bar on stdout for a query past 2 s (a 10M-row scan or
        # spill), and stdout holds only the report (``--json -``); its cursors inherit this
        con.execute("SET enable_progress_bar = false")
        con.execute(f"LOAD '{_sql_str(str(exts[-1]))}'")
        con.execute(f"ATTACH '{_sql_str(str(path.resolve()))}' AS s (TYPE sqlite, READ_ONLY)")
    except Exception:
        con.close()
        raise
    return con


def duckdb_temp() -> Path:
    """A new folder name for one DuckDB connection to spill into, in the system's temporary
    folder (made by DuckDB when it spills; removed when its source closes)."""
    from cgprof import scratch

    return scratch.name("cgprof-duckdb-", next(_TEMPS))


_TEMPS = itertools.count()


def _sql_str(text: str) -> str:
    return text.replace("'", "''")
