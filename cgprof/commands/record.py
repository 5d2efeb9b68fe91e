"""`cgprof record`: run a script or command under Nsight Systems and export NAME.sqlite.

A thin skin over :func:`cgprof.record.record`: parse, resolve the command, make the one
library call, turn `CgprofError` into one line, pass the program's exit code on.
"""

from __future__ import annotations

import click

from cgprof.errors import CgprofError


@click.command(
    "record",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("-o", "--output", metavar="NAME",
              help="Output base name: writes NAME.nsys-rep and NAME.sqlite "
                   "[default: the script's name].")
@click.option("--force", is_flag=True, help="Overwrite existing outputs.")
@click.option("--graph-trace", type=click.Choice(["node", "graph"]), default=None,
              help="nsys --cuda-graph-trace granularity [default: node].")
@click.option("--nsys", "nsys_path", metavar="PATH",
              help="The nsys executable [default: $CGPROF_NSYS, PATH, usual install places].")
@click.option("--nsys-arg", "nsys_args", metavar="ARG", multiple=True,
              help="Extra flag for nsys profile, passed through (repeatable), "
                   "e.g. --nsys-arg=--duration=30.")
@click.option("--all-tables", is_flag=True,
              help="Export every nsys table, not only the ones cgprof reads.")
@click.option("--columnar", is_flag=True,
              help="Also write the Parquet copy cgprof analyze reads (its cache), so that the "
                   "first analysis skips SQLite.")
@click.option("--no-mark-steps", is_flag=True,
              help="Do not load cgprof's step marker into a Python program (it marks each "
                   "optimizer step as an NVTX range, cgprof.record: step).")
@click.option("--untraced/--no-untraced", default=None,
              help="Run the command once more without the profiler and store the times of "
                   "its steps beside the trace (NAME.untraced.json), so that reports give "
                   "step times without the profiler's cost [default: on for cgprof run, "
                   "off for other commands, whose side effects it would repeat].")
@click.argument("command_words", metavar="SCRIPT [ARGS]...", nargs=-1, required=True,
                type=click.UNPROCESSED)
@click.pass_context
def command(
    ctx: click.Context,
    output: str | None,
    force: bool,
    graph_trace: str | None,
    nsys_path: str | None,
    nsys_args: tuple[str, ...],
    all_tables: bool,
    columnar: bool,
    no_mark_steps: bool,
    untraced: bool | None,
    command_words: tuple[str, ...],
) -> None:
    """Record SCRIPT (run with this Python) or, after --, any COMMAND under nsys.

    \b
      cgprof record train.py --epochs 1
      cgprof record -o runs/eager -- python -m mypkg.train
      cgprof record -- torchrun --nproc-per-node 2 train.py

    Adds --trace=cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none unless
    you pass those flags with --nsys-arg. A Python program gets a small start-up hook that
    marks each optimizer step (--no-mark-steps: none). With --untraced the command runs a
    second time without the profiler, to time the same steps as the user sees them. The
    command's exit code is passed on; a crashed or interrupted (Ctrl-C) run still has its
    partial trace exported.
    """
    # Imported here: cgprof.cli imports this module while it builds the group.
    from cgprof.record import RecordOptions, record, resolve_command

    if command_words[0].startswith("-") and command_words[0] != "-":
        raise click.UsageError(
            f"unknown option {command_words[0]}; "
            "pass nsys flags with --nsys-arg, and put -- before a command"
        )
    try:
        options = RecordOptions(
            command=resolve_command(command_words),
            output=output,
            force=force,
            graph_trace=graph_trace,
            nsys=nsys_path,
            nsys_args=nsys_args,
            all_tables=all_tables,
            mark_steps=not no_mark_steps,
            untraced=untraced,
        )
        result = record(options)
    except CgprofError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"cgprof: wrote {result.sqlite_path} and {result.report_path}")
    if result.untraced_path is not None:
        click.echo(f"cgprof: wrote the untraced run's step times to {result.untraced_path}")
    if columnar:
        from cgprof.io.loader import warm

        try:
            click.echo(f"cgprof: wrote its columnar copy to {warm(result.sqlite_path)}")
        except CgprofError as exc:  # the recording itself succeeded
            click.echo(f"cgprof: warning: no columnar copy: {exc}", err=True)
    click.echo(f"next: {result.next_command}")
    if result.exit_code != 0:
        ctx.exit(result.exit_code)
