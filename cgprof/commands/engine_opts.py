"""`--no-cache`, `--memory-limit` and `--nsys`, shared by the commands that read traces.

With the environment they make the command's :class:`cgprof.settings.Settings`, once, and the
command runs under them (:func:`cgprof.settings.using`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click


def _check_size(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from cgprof.errors import CgprofError
    from cgprof.settings import parse_size

    try:
        parse_size(value)
    except CgprofError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def peak_rss() -> int | None:
    """The most memory this process, or any process it waited for (the --ranks workers),
    held at once: bytes, or None where the platform does not say."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    import sys

    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return unit * max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def _note(text: str) -> None:
    """``cgprof: note: text`` on a line of its own on stderr: a progress bar being drawn
    there (cgprof.commands.progress) is wiped first, and redrawn at its next stage."""
    import sys

    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[2K")
    click.echo(f"cgprof: note: {text}", err=True)


def _note_over_cap(cap: str, source: str) -> None:
    """One line on stderr when the command held more memory than the cap the user set: the cap
    bounds the SQLite read and how much of a trace is read at once (a rank; for `analyze`, a
    chunk of steps), not everything an analysis keeps, and a user who asked for 1GB should
    not believe the run kept to it (stdout stays the report's, or the JSON's)."""
    from cgprof.settings import parse_size

    peak = peak_rss()
    if peak is None or peak <= parse_size(cap):
        return
    _note(f"this run held {peak / 1e9:.2f} GB at its peak, above "
          f"{source} {cap}, which caps the SQLite read and how much of a trace is read "
          f"at once (a multi-rank trace one rank at a time; for `analyze`, `check` and "
          f"`diff`, a one-process trace a chunk of steps at a time): what an analysis "
          f"keeps beside, and an HTML page's drawing, are not capped (docs/engine.md)")


def note_apart(path: Any, ranks: int) -> None:
    """One line on stderr: the trace is read rank by rank because of the memory cap."""
    from cgprof.io import cache as C
    from cgprof.io.estimate import activity_rows, whole_analysis_bytes
    from cgprof.io.memory import memory_limit
    from cgprof.settings import current

    if current().ranks_apart:
        return  # asked for: nothing to explain
    need = whole_analysis_bytes(activity_rows(path) or 0)
    cached = "; each rank is cached apart" if C.enabled() else ""
    _note(f"{path}: read rank by rank ({ranks} ranks, one at a time): "
          f"its whole analysis would hold ~{need / 1e9:.1f} GB, above the memory cap "
          f"{memory_limit()}{cached}")


def note_chunked(path: Any, chunks: int) -> None:
    """One line on stderr: the one-process trace is read a chunk of steps at a time because
    of the memory cap."""
    from cgprof.io.estimate import activity_rows, whole_analysis_bytes
    from cgprof.io.memory import memory_limit

    need = whole_analysis_bytes(activity_rows(path) or 0)
    _note(f"{path}: read a chunk of steps at a time ({chunks} "
          f"chunk{'' if chunks == 1 else 's'}): its whole analysis would hold "
          f"~{need / 1e9:.1f} GB, above the memory cap {memory_limit()}")


def note_drawn_whole(path: Any) -> None:
    """One line on stderr: a one-process trace over the memory cap, read in chunks, is read
    whole again for the HTML page (analyze --html, diff -o): its window's API calls were on
    too many host threads to count a chunk at a time for the timeline."""
    from cgprof.io.estimate import activity_rows, whole_analysis_bytes
    from cgprof.io.memory import memory_limit

    need = whole_analysis_bytes(activity_rows(path) or 0)
    _note(f"{path}: read whole for the HTML page: its window's host threads x steps "
          f"are too many to count its timeline a chunk at a time; its analysis may hold "
          f"~{need / 1e9:.1f} GB, above the memory cap {memory_limit()}")


def _note_fallback(reason: str | None) -> None:
    """One line on stderr when SQLite was read through sqlite3 because DuckDB or its SQLite
    scanner is not installed: the same figures, several times slower (a 1M-kernel trace:
    ~6 s instead of ~1.4 s on the H200 host), so a user learns why and what to install."""
    if reason is None:
        return
    _note(f"SQLite was read through sqlite3, several times slower than "
          f"DuckDB's SQLite scanner, which is not installed ({reason}); install cgprof's "
          f"pinned duckdb and duckdb-extension-sqlite-scanner (pip install cgprof "
          f"installs them)")


def engine_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--no-cache``, ``--memory-limit SIZE`` and ``--nsys PATH`` to a command."""

    @functools.wraps(func)
    def wrapper(*args: Any, no_cache: bool, memory_limit: str | None, nsys: str | None,
                **kwargs: Any) -> Any:
        from cgprof.errors import CgprofError
        from cgprof.io.duck import engine_fallback
        from cgprof.settings import Settings, active, memory_limit_in_env, using

        flags = {"memory_limit": memory_limit, "cache": False if no_cache else None,
                 "nsys": nsys}
        try:  # (run from Python under settings of the caller's: those, with the flags)
            base = active()
            settings = (Settings.from_env() if base is None else base).with_flags(**flags)
        except CgprofError as exc:
            raise click.ClickException(str(exc)) from None
        engine_fallback(clear=True)
        try:
            with using(settings):
                out = func(*args, **kwargs)
        finally:
            _note_fallback(engine_fallback(clear=True))
        if memory_limit or memory_limit_in_env():  # (a cap the user set, not the default)
            _note_over_cap(settings.memory_limit,
                           "--memory-limit" if memory_limit else "CGPROF_MEMORY_LIMIT")
        return out

    wrapper = click.option(
        "--memory-limit", metavar="SIZE", callback=_check_size,
        help="Memory cap, e.g. 1GB (default 4GB, or $CGPROF_MEMORY_LIMIT). A trace whose "
             "whole analysis would exceed it is read rank by rank (several processes) or, "
             "by `analyze` (without --all-gaps), `check` and `diff`, a chunk of steps at a "
             "time (one process: the same report and HTML page). It also caps the SQLite "
             "reader (DuckDB), which spills to disk beyond it.")(wrapper)
    wrapper = click.option(
        "--no-cache", is_flag=True,
        help="Neither read nor write cgprof's columnar cache of the trace.")(wrapper)
    wrapper = click.option(
        "--nsys", metavar="PATH",
        help="The nsys that exports a .nsys-rep input [default: $CGPROF_NSYS, PATH, usual "
             "install places].")(wrapper)
    return wrapper
