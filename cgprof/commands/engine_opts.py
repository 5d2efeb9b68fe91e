"""`--no-cache` and `--memory-limit`, shared by the commands that read traces.

They become the environment settings the library reads (``CGPROF_NO_CACHE``,
``CGPROF_MEMORY_LIMIT``, see :mod:`cgprof.engine` and :mod:`cgprof.cache`) for the duration of
the command only, so worker processes started by the command inherit them too.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click


def _check_size(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from cgprof.engine import parse_size
    from cgprof.errors import CgprofError

    try:
        parse_size(value)
    except CgprofError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@contextmanager
def engine_settings(no_cache: bool, memory_limit: str | None) -> Iterator[None]:
    """Set the engine's environment for one command, then put it back."""
    wanted = {"CGPROF_NO_CACHE": "1" if no_cache else None,
              "CGPROF_MEMORY_LIMIT": memory_limit}
    old = {k: os.environ.get(k) for k, v in wanted.items() if v is not None}
    for k in old:
        os.environ[k] = wanted[k]  # type: ignore[assignment]
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def engine_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--no-cache`` and ``--memory-limit SIZE`` to a command."""

    @functools.wraps(func)
    def wrapper(*args: Any, no_cache: bool, memory_limit: str | None, **kwargs: Any) -> Any:
        with engine_settings(no_cache, memory_limit):
            return func(*args, **kwargs)

    wrapper = click.option(
        "--memory-limit", metavar="SIZE", callback=_check_size,
        help="Memory cap of the SQLite reader (DuckDB), e.g. 1GB (default 4GB, or "
             "$CGPROF_MEMORY_LIMIT); it spills to disk beyond it. The analysis after the "
             "read is not capped (10M kernels + 10M API calls: ~3.6 GB).")(wrapper)
    wrapper = click.option(
        "--no-cache", is_flag=True,
        help="Neither read nor write cgprof's columnar cache of the trace.")(wrapper)
    return wrapper
