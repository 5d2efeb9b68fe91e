#!/usr/bin/env python3
"""One whole `cgprof analyze` process, as the console script runs it, with the time of each
stage printed on stderr as it starts: wall seconds since this process started and CPU seconds.

    python3 scripts/cli_stages.py TRACE [cgprof analyze options]   # e.g. --json out.json
    python3 scripts/cli_stages.py --engine TRACE ...   # also when each table read starts/ends
    (a small SQLite export is read ahead by a forked process, whose reads are not stamped:
    CGPROF_READER=thread keeps them in this process)

Unlike profile_stages.py (best of N runs in one process, imports timed once), this is the
first and only analysis of its process, so it shows what a user's run pays: imports, page
faults of fresh memory, the cache write joined at exit. The last line is the exit.
"""

from __future__ import annotations

import atexit
import sys
import time

T0 = time.perf_counter()


def _stamp(what: str) -> None:
    sys.stderr.write(f"{time.perf_counter() - T0:7.3f} s wall {time.process_time():7.3f} s cpu  "
                     f"{what}\n")


def _watch_engine() -> None:
    """Stamp the start and end of every table read (SQLite through DuckDB, Parquet/Arrow) and
    of DuckDB's connection set-up, from whichever thread runs them."""
    import threading

    from cgprof.io import duck
    from cgprof.io.dirsource import DirSource
    from cgprof.io.sqlite import SqliteSource

    def wrap(owner: object, name: str, label) -> None:
        import inspect

        real = getattr(owner, name)
        static = isinstance(inspect.getattr_static(owner, name), staticmethod)

        def watched(*args, **kwargs):
            what = f"{label(args)} [{threading.current_thread().name}]"
            _stamp(f"  start {what}")
            try:
                return real(*args, **kwargs)
            finally:
                _stamp(f"  end   {what}")

        setattr(owner, name, staticmethod(watched) if static else watched)

    wrap(duck, "_duckdb_sqlite", lambda a: "DuckDB connection + ATTACH")
    wrap(SqliteSource, "_scan", lambda a: f"SQLite scan {a[1]}")
    wrap(DirSource, "_read", lambda a: f"file read {a[1]}")


def main() -> None:
    _stamp("python started")
    if sys.argv[1:2] == ["--engine"]:
        del sys.argv[1]
        _watch_engine()
    import cgprof.commands.analyze as analyze_cmd
    from cgprof.cli import main as cli_main

    _stamp("cli imported")

    def progress(quiet: bool):
        return _stamp

    analyze_cmd._progress = progress
    atexit.register(_stamp, "exit")
    sys.argv = ["cgprof", "analyze", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
