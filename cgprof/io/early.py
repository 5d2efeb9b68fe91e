"""Sources opened early, handed to the load once.

:func:`cgprof.io.prefetch.prefetch` opens the trace a command is about to analyse and starts
reading its big tables before the analysis (pandas, the metrics) is even imported, and keeps
the source here (:func:`keep_early`); the load takes it, reads under way (:func:`take_early`);
:func:`drop_early` closes those no load took.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.sources import Source


_early: dict[str, Source] = {}


def _early_key(path: Path) -> str:
    return str(Path(path).resolve())


def keep_early(path: Path, src: Source) -> None:
    """Hold ``src`` (opened for ``path``, reads under way) for :func:`take_early`."""
    key = _early_key(path)
    old = _early.pop(key, None)
    if old is not None:
        old.close()
    _early[key] = src


def take_early(path: Path, kind: type[Source] | None = None) -> Source | None:
    """The source opened early for ``path`` (when of class ``kind``), handed over once."""
    if not _early:
        return None
    key = _early_key(path)
    src = _early.get(key)
    if src is None or (kind is not None and not isinstance(src, kind)):
        return None
    return _early.pop(key)


def drop_early() -> None:
    """Close the sources opened early that no load took (waiting for their reads)."""
    while _early:
        _early.popitem()[1].close()
