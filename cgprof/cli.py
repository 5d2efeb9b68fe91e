"""The `cgprof` command line: a click group whose commands are thin skins over the library.

Each command validates its arguments, makes one library call and maps `CgprofError` to a
one-line `click.ClickException`. Nothing here imports torch: `cgprof --help` and
`cgprof analyze` stay light (the runners import torch lazily, inside `cgprof run`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cgprof import __version__
from cgprof.errors import CgprofError

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Turn `CgprofError` (and a few OS errors) raised by a command into one clean line."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CgprofError as exc:
            raise click.ClickException(str(exc)) from None
        except BrokenPipeError:  # `cgprof analyze x | head`
            return None

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cgprof")
def main() -> None:
    """Do CUDA Graphs help your PyTorch step? Record, analyze and diff Nsight Systems traces."""


def _register() -> None:
    from cgprof.commands import analyze, cache, check, diff, record, run

    for module in (analyze, record, diff, run, check, cache):
        main.add_command(module.command)
    main.add_command(check.history_command)


_register()
