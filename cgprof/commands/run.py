"""`cgprof run` (being built; see the issue tracker)."""

from __future__ import annotations

import click


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args: tuple[str, ...]) -> None:
    """Not available yet in this build."""
    raise click.ClickException("cgprof run is not available yet in this build")
