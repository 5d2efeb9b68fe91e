"""Scratch files and folders a run makes (the forked reader's tables, DuckDB's spill, a
report's export, a cache entry being written, an output before its rename), named so that
what a killed run left behind can be told apart and removed by a later one.

A run stopped by Ctrl-C (KeyboardInterrupt), or by SIGTERM or SIGHUP
(:func:`stop_on_signals`), removes its own scratch on the way out. One that is killed
outright (SIGKILL, the kernel's out-of-memory killer: big traces are where it strikes)
cannot, so every name carries the host and the process id that made it
(``PREFIX<host>.<pid>-...``), and the first time a run makes scratch in a folder it removes
the entries of that prefix there that a process of this host made, that is gone, and that
nothing has touched for :data:`STALE_AFTER_S` seconds (a process of another host, or of
another pid namespace on this one, is left alone unless its entry is that old: by then a
forked reader has long finished writing).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: How long a dead process's scratch is left alone (seconds since it last changed).
STALE_AFTER_S = 60.0

_SWEPT: set[tuple[str, str]] = set()  # (folder, prefix) swept by this process


@functools.lru_cache(maxsize=1)
def _host() -> str:
    import socket

    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"


def tag() -> str:
    """``<host>.<pid>``: who made a scratch entry."""
    return f"{_host()}.{os.getpid()}"


def folder(prefix: str, parent: Path | None = None, label: str = "") -> Path:
    """A new folder ``PREFIX<host>.<pid>-LABELXXXX`` in ``parent`` (the system's temporary
    folder when None), after :func:`sweep` of that prefix there; :func:`_made`."""
    where = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    sweep(where, prefix)
    return _made(Path(tempfile.mkdtemp(prefix=f"{prefix}{tag()}-{label}", dir=where)))


def file(prefix: str, suffix: str, parent: Path) -> tuple[int, str]:
    """``tempfile.mkstemp`` of a file ``PREFIX<host>.<pid>-XXXX SUFFIX`` in ``parent``, after
    :func:`sweep` of that prefix there; :func:`_made`."""
    sweep(parent, prefix)
    fd, path = tempfile.mkstemp(prefix=f"{prefix}{tag()}-", suffix=suffix, dir=parent)
    _made(Path(path))
    return fd, path


def name(prefix: str, n: int) -> Path:
    """``PREFIX<host>.<pid>-N`` in the system's temporary folder, not made (DuckDB makes its
    spill folder when it spills), after :func:`sweep` of that prefix there; :func:`_made`."""
    where = Path(tempfile.gettempdir())
    sweep(where, prefix)
    return _made(where / f"{prefix}{tag()}-{n}")


#: (pid, path) of the scratch this process made (:func:`_made`)
_MADE: list[tuple[int, Path]] = []


def _made(path: Path) -> Path:
    """Note ``path`` as this process's scratch: whatever of it is still there when the
    process exits is removed then (:func:`remove_left`). Each owner removes its scratch or
    renames it into place (an entry's commit, an output's rename) when done; this is the
    net under a way out that misses it (an exception between a scratch's making and its
    owner holding it)."""
    import atexit

    if not _MADE:
        atexit.register(remove_left)
    _MADE.append((os.getpid(), path))
    return path


def remove_left() -> list[Path]:
    """Remove the scratch this process made that is still there (:func:`_made`); the paths
    removed. Run at exit (atexit: after the threads that are not daemons are done)."""
    pid, gone = os.getpid(), []
    for owner, path in _MADE:
        if owner != pid or not os.path.lexists(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        gone.append(path)
    _MADE[:] = [(o, p) for o, p in _MADE if o != pid]
    return gone


def sweep(where: Path, prefix: str, now: float | None = None) -> list[Path]:
    """Remove what a process of this host that is gone left in ``where`` under ``prefix``
    (see the module doc), once per process and (folder, prefix); the paths removed. Never
    fatal: what cannot be listed or removed is left."""
    key = (str(where), prefix)
    if key in _SWEPT:
        return []
    _SWEPT.add(key)
    return _sweep(where, prefix, time.time() if now is None else now)


def _sweep(where: Path, prefix: str, now: float) -> list[Path]:
    host = _host()
    pattern = re.compile(re.escape(prefix) + r"(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)-")
    gone: list[Path] = []
    try:
        listing = list(os.scandir(where))
    except OSError:
        return gone
    for entry in listing:
        m = pattern.match(entry.name)
        if m is None or m["host"] != host or _alive(int(m["pid"])):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < STALE_AFTER_S:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            continue
        gone.append(Path(entry.path))
    return gone


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one of another user counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's; anything else: leave it be
        return True
    return True


#: the signal :func:`stop_on_signals` stopped this process for (empty: none)
_STOPPED: list[int] = []


def stop_status() -> int | None:
    """The exit status of a process a signal stopped (128 + its number), else None."""
    return 128 + _STOPPED[0] if _STOPPED else None


def raise_if_stopped() -> None:
    """SystemExit with :func:`stop_status` when a signal stopped this process: the
    checkpoint of :func:`stop_on_signals`."""
    status = stop_status()
    if status is not None:
        raise SystemExit(status)


def stop_on_signals() -> None:
    """Make SIGTERM and SIGHUP stop this process's command the way a failure does, at the
    next :func:`checkpoint` (each stage of a load or an analysis, the report's rendering,
    an output's rename): SystemExit with the shell's status for the signal (128 + its
    number) unwinds the command from a point of its own, so its scratch is removed, a
    cache entry being written is finished or dropped, no output appears; one line on stderr
    says why. The handler itself only notes the signal: an exception raised wherever a
    signal lands can break what it lands in (an import's module lock, seen to hang every
    thread of a run; a DuckDB query, which turns it into an error of its own). A second
    signal of either kind ends the process at once (the handlers are reset first); an
    ignored SIGHUP (nohup) stays ignored. For the analysing commands of the process's own
    command line only (:class:`cgprof.cli.LazyGroup`): `run` (`run serve` included) and
    `record` (which forwards signals itself) keep the default."""
    import signal
    import sys

    kinds = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
             if s is not None]

    def stop(signum: int, _frame: object) -> None:
        _STOPPED.append(signum)
        for s in kinds:
            signal.signal(s, signal.SIG_DFL)
        try:
            sys.stderr.write(f"cgprof: stopped by {signal.Signals(signum).name}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    for s in kinds:
        try:
            if signal.getsignal(s) is signal.SIG_DFL:
                signal.signal(s, stop)
        except (OSError, ValueError):  # not the main thread
            return


class Detail(str):
    """A progress message within the stage under way (a chunk of a chunked pass, say): a
    progress bar shows it without counting a stage (cgprof.commands.progress)."""

    __slots__ = ()


def prefixed(progress: Callable[[str], None] | None, prefix: str
             ) -> Callable[[str], None] | None:
    """``progress`` (None: None) with ``prefix`` before each message (which rank or trace
    it is about); a :class:`Detail` stays one."""
    if progress is None:
        return None
    return lambda msg: progress(type(msg)(prefix + msg))


def checkpoint(progress: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """``progress`` (None: nothing) behind :func:`raise_if_stopped`: what a load or an
    analysis calls at each of its stages, where a stop (:func:`stop_on_signals`) is
    raised."""
    def say(message: str) -> None:
        raise_if_stopped()
        if progress is not None:
            progress(message)

    return say
