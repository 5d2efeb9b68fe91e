"""Writing report files safely: never overwrite without --force, never leave half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from cgprof import scratch
from cgprof.errors import CgprofError, OutputExistsError


def _special(path: Path) -> bool:
    """/dev/null, /dev/stdout, a named pipe: written in place, never replaced."""
    return path.exists() and not path.is_file() and not path.is_dir()


def check_writable(path: Path, force: bool) -> None:
    """Refuse before any work is done if ``path`` exists (without force) or cannot be made."""
    if _special(path):
        return
    if path.exists() and not force:
        raise OutputExistsError(path)
    if path.is_dir():
        raise CgprofError(f"{path}: is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CgprofError(f"{path}: folder {parent} does not exist")
    # Ask the file system, not os.access: root passes access() on a read-only mount, and
    # the whole analysis should not run only to fail at the end.
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        raise CgprofError(f"{path}: cannot write into folder {parent} "
                          f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def write_atomic(path: Path, text: str | Iterable[str], force: bool) -> None:
    """Write to a temporary file beside ``path`` and rename it into place.

    ``text`` is the whole text or its pieces in order (a big JSON document).
    """
    check_writable(path, force)
    try:
        _write(path, text)
    except OSError as exc:  # disk full, folder made read-only meanwhile, ...
        reason = exc.strerror or str(exc)
        raise CgprofError(f"{path}: cannot write ({reason}); nothing was written") from None


def _write(path: Path, text: str | Iterable[str]) -> None:
    pieces = [text] if isinstance(text, str) else text
    if _special(path):
        with path.open("w", encoding="utf-8") as fh:
            for piece in pieces:
                fh.write(piece)
        return
    parent = path.parent if str(path.parent) else Path(".")
    fd, tmp = scratch.file(f".{path.name}.", ".tmp", parent)  # (a killed run's: swept)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for piece in pieces:
                fh.write(piece)
        # mkstemp makes the file 0600; give it the mode a plain open() would (umask applied).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        scratch.raise_if_stopped()  # no output appears after a stop (a signal's)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
