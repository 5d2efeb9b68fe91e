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


#: Each command's module under cgprof.commands and the click command in it: a command's
#: module (and what it imports) loads only when that command runs or help lists them all.
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("analyze", "command"),
    "cache": ("cache", "command"),
    "check": ("check", "command"),
    "diff": ("diff", "command"),
    "history": ("check", "history_command"),
    "record": ("record", "command"),
    "run": ("run", "command"),
}


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use (click's documented pattern):
    ``cgprof analyze`` loads cgprof.commands.analyze, not ``run``'s runner configuration or
    ``check``'s rules."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            module, attr = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(f"cgprof.commands.{module}"), attr),
                             cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cgprof")
def main() -> None:
    """Do CUDA Graphs help your PyTorch step? Record, analyze and diff Nsight Systems traces."""
