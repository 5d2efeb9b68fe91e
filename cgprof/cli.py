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

from cgprof.errors import CgprofError
from cgprof.version import __version__

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


#: Each command: its module under cgprof.commands, the click command in it, and the first
#: paragraph of its help (what ``cgprof --help`` lists; tests/test_cli_basics.py checks it is
#: the command's own). A command's module, and what it imports, loads only when it runs.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "analyze": ("analyze", "command",
                "Analyse nsys traces: SQLite exports, .nsys-rep reports, parquetdir/arrowdir "
                "exports."),
    "cache": ("cache", "command",
              "Show or clear cgprof's columnar cache ($CGPROF_CACHE, else the user cache "
              "folder)."),
    "check": ("check", "command",
              "Check TRACE's CUDA Graph health against rules; exit 0 pass, 1 fail, 2 bad input."),
    "diff": ("diff", "command",
             "Compare CANDIDATE against BASELINE (nsys SQLite exports), step i against step i."),
    "history": ("check", "history_command",
                "Trend per figure over the runs that `cgprof check --history DATABASE` "
                "recorded."),
    "record": ("record", "command",
               "Record SCRIPT (run with this Python) or, after --, any COMMAND under nsys."),
    "run": ("run", "command",
            "Run a built-in TASK (train or infer) eager and graphed; compare step times."),
}


#: The commands that stop at a checkpoint on SIGTERM and SIGHUP (cgprof.scratch); the others
#: (`run`, `record`, which forwards them to nsys itself) keep the default.
STOPPABLE = frozenset({"analyze", "cache", "check", "diff", "history"})


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use (click's documented pattern):
    ``cgprof analyze`` loads cgprof.commands.analyze, not ``run``'s runner configuration or
    ``check``'s rules; ``cgprof --help`` lists them from COMMANDS without importing any."""

    #: whether :meth:`__call__` runs the process's own command line
    own_argv = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The process's entry point (the console script, ``python -m cgprof``; click's test
        runner calls :meth:`main` instead): one command, then the process exits, so the
        command may freeze its imports (:func:`cgprof.commands.heavy_imports`). Run on the
        process's own command line (no ``args``), it ends the process without the
        interpreter's teardown (:func:`cgprof.commands.exit_now`), with the exit status of
        a signal that stopped it (cgprof.scratch.stop_status); a caller that passes ``args``
        gets click's SystemExit, as before."""
        import cgprof.commands

        # standalone_mode=False returns to the caller instead of exiting
        cgprof.commands.ONE_SHOT = kwargs.get("standalone_mode", True) is not False
        self.own_argv = not args and kwargs.get("args") is None
        from cgprof.scratch import stop_status

        code: Any
        try:
            done = super().__call__(*args, **kwargs)
        except SystemExit as exc:
            if not self.own_argv:
                raise
            code = stop_status() or exc.code  # (a stop an except clause took for an error)
        else:
            if not self.own_argv or stop_status() is None:
                return done
            code = stop_status()  # stopped after its last checkpoint
        if code is None or type(code) is int:
            cgprof.commands.exit_now(code or 0)
        raise SystemExit(code)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """click's, and an analysing command of the process's own command line stops at its
        next checkpoint on SIGTERM or SIGHUP (cgprof.scratch.stop_on_signals)."""
        name, cmd, rest = super().resolve_command(ctx, args)
        if self.own_argv and name in STOPPABLE:
            from cgprof.scratch import stop_on_signals

            stop_on_signals()
        return name, cmd, rest

    def invoke(self, ctx: click.Context) -> Any:
        """The command, whose error is the stop where a signal stopped it first (an error on
        the way out of a stop is not the command's failure)."""
        try:
            return super().invoke(ctx)
        except Exception:
            from cgprof.scratch import raise_if_stopped

            raise_if_stopped()
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            module, attr, _ = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(f"cgprof.commands.{module}"), attr),
                             cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing, with the short help of a command not loaded yet made from its
        COMMANDS summary the way click makes it from the full help."""
        from click.utils import make_default_short_help

        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name)
            if cmd is None:
                rows.append((name, make_default_short_help(COMMANDS[name][2], limit).strip()))
            elif not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cgprof")
def main() -> None:
    """Do CUDA Graphs help your PyTorch step? Record, analyze and diff Nsight Systems traces."""
