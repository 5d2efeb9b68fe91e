"""How cgprof reads and analyses traces: one :class:`Settings` object, made once at the edge.

    from cgprof.settings import Settings
    result = cgprof.analyze("big.sqlite", settings=Settings(memory_limit="1GB"))

A command makes its settings from its flags and the environment once
(:meth:`Settings.from_env`), and the one library call it makes runs under them
(:func:`using`); the reading layer below asks :func:`current` for the active settings (its
thread count, the cache folder, the memory cap) instead of every function taking them as an
argument. Threads the library starts carry the caller's settings along
(:func:`in_context`); worker processes are handed theirs explicitly
(:mod:`cgprof.parallel`). Nothing outside this module, :mod:`cgprof.record` (the recorded
program's environment), :mod:`cgprof.nsys` (``CGPROF_NSYS`` and ``PATH``, where nsys is
looked for) and :mod:`cgprof.runners` reads ``os.environ``.

The environment variables, each the default of a flag or a field:

=========================  =================  =============================================
variable                   field              meaning
=========================  =================  =============================================
``CGPROF_MEMORY_LIMIT``    ``memory_limit``   memory cap, e.g. ``1GB`` (``--memory-limit``)
``CGPROF_NO_CACHE``        ``cache``          set (not 0): no columnar cache (``--no-cache``)
``CGPROF_CACHE``           ``cache_dir``      the cache folder (else the user cache folder)
``CGPROF_THREADS``         ``threads``        threads DuckDB and Arrow may use
``CGPROF_READER``          ``reader``         ``thread``: never read ahead in a forked process
``CGPROF_ENGINE``          ``engine``         ``sqlite3``: read SQLite without DuckDB
=========================  =================  =============================================

``chunk_steps`` (steps per chunk of an analysis over the memory cap) and ``ranks_apart``
(read a multi-rank trace rank by rank whatever its size, or never) are fields only: they
choose a plan's shape for tests and benchmarks, not figures.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from cgprof.errors import TraceError

__all__ = ["Settings", "active", "current", "using", "in_context", "parse_size",
           "DEFAULT_MEMORY_LIMIT", "memory_limit_in_env"]

DEFAULT_MEMORY_LIMIT = "4GB"
#: The most threads the reading layer uses by default (every core, at most this many).
DEFAULT_MAX_THREADS = 8

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}

READERS = ("auto", "thread")
ENGINES = ("duckdb", "sqlite3")


def parse_size(text: str) -> int:
    """``"1GB"`` -> 1_000_000_000 bytes (KB/MB/GB/TB are powers of 10, KiB/MiB/GiB of 2)."""
    m = _SIZE.match(text or "")
    if not m:
        raise TraceError(f"memory limit {text!r}: expected a size such as 1GB or 512MiB")
    unit = (m.group(2) or "").upper()
    return int(float(m.group(1)) * _UNITS[unit])


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """The platform's user cache folder + ``cgprof``."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "cgprof"
    if os.name == "nt":
        base = env.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "cgprof" / "Cache"
    base = env.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "cgprof"


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a run of cgprof may use. Every field has the default a user gets with no flag and
    no environment variable set, except ``cache_dir``, whose default is the platform's user
    cache folder (:meth:`from_env` fills it in).

    memory_limit: the memory cap (``"4GB"``): a trace whose whole analysis is expected to
        hold more is read rank by rank or a chunk of steps at a time; it caps DuckDB too.
    cache: read and write the columnar cache of each trace (:mod:`cgprof.io.cache`).
    cache_dir: the cache folder; None: the platform's user cache folder.
    threads: threads the reading layer (DuckDB, Arrow) may use; None: every core, at most 8.
    reader: ``"auto"`` (a small SQLite export is read ahead in a forked process) or
        ``"thread"`` (always in threads of this process).
    engine: ``"duckdb"`` (DuckDB's SQLite scanner, ``sqlite3`` where it cannot load) or
        ``"sqlite3"`` (always Python's sqlite3).
    chunk_steps: steps per chunk when an analysis is read in chunks; None: as many as the
        memory cap allows.
    ranks_apart: True reads a multi-rank trace rank by rank, False never, None when its whole
        analysis would exceed the memory cap.
    nsys: the nsys that exports a ``.nsys-rep`` input (a file, or a folder holding ``nsys``);
        None: the one :func:`cgprof.nsys.find_nsys` finds (``CGPROF_NSYS``, ``PATH``, the
        usual install folders).
    """

    memory_limit: str = DEFAULT_MEMORY_LIMIT
    cache: bool = True
    cache_dir: Path | None = None
    threads: int | None = None
    reader: str = "auto"
    engine: str = "duckdb"
    chunk_steps: int | None = None
    ranks_apart: bool | None = None
    nsys: str | None = None

    def __post_init__(self) -> None:
        parse_size(self.memory_limit)
        if self.threads is not None and self.threads < 1:
            raise TraceError(f"threads={self.threads}: must be at least 1")
        if self.reader not in READERS:
            raise TraceError(f"reader {self.reader!r}: one of {', '.join(READERS)}")
        if self.engine not in ENGINES:
            raise TraceError(f"engine {self.engine!r}: one of {', '.join(ENGINES)}")
        if self.chunk_steps is not None and self.chunk_steps < 1:
            raise TraceError(f"chunk_steps={self.chunk_steps}: must be at least 1")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, /, **flags: Any) -> Settings:
        """Settings from the environment (``os.environ`` unless ``env``), then ``flags``
        (fields given on the command line; a None flag keeps the environment's value)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        limit = env.get("CGPROF_MEMORY_LIMIT", "").strip()
        if limit:
            values["memory_limit"] = limit
        values["cache"] = env.get("CGPROF_NO_CACHE", "").strip() in ("", "0")
        folder = env.get("CGPROF_CACHE", "").strip()
        values["cache_dir"] = Path(folder).expanduser() if folder else default_cache_dir(env)
        threads = env.get("CGPROF_THREADS", "").strip()
        if threads:
            try:
                values["threads"] = int(threads)
            except ValueError:
                raise TraceError(f"CGPROF_THREADS={threads!r}: not a whole number") from None
            if values["threads"] < 1:
                raise TraceError(f"CGPROF_THREADS={threads!r}: must be at least 1")
        if env.get("CGPROF_READER", "").strip().lower() == "thread":
            values["reader"] = "thread"
        if env.get("CGPROF_ENGINE", "").strip().lower() == "sqlite3":
            values["engine"] = "sqlite3"
        return cls(**values).with_flags(**flags)

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def with_flags(self, **flags: Any) -> Settings:
        """A copy with the flags given on a command line: a None flag was not given, and
        keeps this value."""
        given = {k: v for k, v in flags.items() if v is not None}
        return self.replace(**given) if given else self

    @property
    def memory_limit_bytes(self) -> int:
        """:attr:`memory_limit` in bytes."""
        return parse_size(self.memory_limit)

    @property
    def thread_count(self) -> int:
        """:attr:`threads`, else every core this machine has (at most 8)."""
        if self.threads is not None:
            return self.threads
        return max(1, min(DEFAULT_MAX_THREADS, os.cpu_count() or 1))

    @property
    def cache_folder(self) -> Path:
        """:attr:`cache_dir`, else the platform's user cache folder."""
        return self.cache_dir if self.cache_dir is not None else default_cache_dir(os.environ)


def memory_limit_in_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment sets ``CGPROF_MEMORY_LIMIT``."""
    return bool((os.environ if env is None else env).get("CGPROF_MEMORY_LIMIT", "").strip())


_active: contextvars.ContextVar[Settings | None] = contextvars.ContextVar(
    "cgprof_settings", default=None)


def active() -> Settings | None:
    """The settings of the call under way, or None outside one (:func:`using`)."""
    return _active.get()


def current() -> Settings:
    """The settings of the call under way (:func:`using`); outside one, the environment's
    (:meth:`Settings.from_env`), as a library user who passed none gets."""
    active = _active.get()
    return active if active is not None else Settings.from_env()


@contextlib.contextmanager
def using(settings: Settings | None) -> Iterator[Settings]:
    """Run the block under ``settings`` (None: the active ones, else the environment's)."""
    chosen = current() if settings is None else settings
    token = _active.set(chosen)
    try:
        yield chosen
    finally:
        _active.reset(token)


T = TypeVar("T")


def in_context(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` bound to the caller's settings, for a thread to run: a new thread starts with
    no settings of its own and would read the environment's."""
    ctx = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> T:
        return ctx.run(fn, *args, **kwargs)

    return run
