"""`cgprof run serve`: a built-in model served under load, eager against graph buckets.

A thin skin over :func:`cgprof.runners.serve.run_serve`; torch is imported only when the
command runs. It is reached as ``cgprof run serve ...``: :class:`RunCommand` (the class of
`cgprof run`) hands the arguments after ``serve`` to :data:`command`, so ``cgprof run train``
and ``cgprof run infer`` keep their options and ``serve`` gets its own (``cgprof run serve
--help``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from cgprof.errors import CgprofError, RunnerError
from cgprof.runners.config import DEVICES, MODELS, MODES, SIZES


def _numbers(text: str, kind: type, what: str) -> tuple[Any, ...]:
    try:
        return tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise RunnerError(
            f"{what} must be a comma-separated list of numbers (got {text!r})"
        ) from None


class RunCommand(click.Command):
    """`cgprof run`: ``serve`` as the first argument switches to the serve command."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        if args and args[0] == "serve":
            return command.make_context(f"{info_name} serve", args[1:], parent=parent, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)


@click.command("serve")
@click.option("--model", type=click.Choice(MODELS), required=True, help="Built-in model.")
@click.option(
    "--clients", default="1,4,16,64", show_default=True,
    help="Closed loop: comma-separated numbers of concurrent clients, one level each.",
)
@click.option(
    "--rate", default=None, metavar="QPS[,QPS...]",
    help="Open loop instead: Poisson arrivals at these rates (requests/s), one level each.",
)
@click.option("--max-batch", type=int, default=32, show_default=True,
              help="Most requests per batch; graph buckets are 1,2,4,... up to it.")
@click.option("--max-wait-ms", type=float, default=1.0, show_default=True,
              help="How long a batch waits for more requests after its first.")
@click.option("--duration", type=float, default=3.0, show_default=True,
              help="Measured seconds per level.")
@click.option("--warmup", type=float, default=1.0, show_default=True,
              help="Unmeasured seconds of load before each level's measurement.")
@click.option("--think-ms", type=float, default=0.0, show_default=True,
              help="Closed loop: a client's pause between an answer and its next request.")
@click.option("--slo-ms", type=float, default=50.0, show_default=True,
              help="p99 latency budget: the graph gain compares the highest QPS within it.")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="eager, graph (CUDA Graphs) or both.  [default: both on CUDA, eager on CPU]")
@click.option("--device", type=click.Choice(DEVICES), default=None,
              help="Where to run.  [default: cuda when a GPU is visible, else cpu]")
@click.option("--seed", type=int, default=0, show_default=True, help="Weights and inputs.")
@click.option("--size", type=click.Choice(SIZES), default="full", show_default=True,
              help="tiny: the same architectures, much smaller (smoke tests).")
@click.option("--json", "json_out", metavar="PATH|-", default=None,
              help="Also write the results as JSON to PATH ('-': stdout, the table on stderr).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write a single-file HTML report: p99 latency against QPS.")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
def command(
    model: str, clients: str, rate: str | None, max_batch: int, max_wait_ms: float,
    duration: float, warmup: float, think_ms: float, slo_ms: float, mode: str | None,
    device: str | None, seed: int, size: str, json_out: str | None, html_out: Path | None,
    force: bool,
) -> None:
    """Serve a built-in model to concurrent clients with dynamic batching; QPS against p99.

    A load generator in its own process drives the server (closed-loop clients, or Poisson
    arrivals with --rate); the server batches waiting requests (up to --max-batch, waiting
    at most --max-wait-ms), runs each batch eagerly or as the graph of its bucket, and
    answers each request with its row. Prints per level and mode: QPS, latency
    p50/p90/p99 (queueing included), mean batch, GPU busy share, host time per batch; and
    the graph gain within --slo-ms. Each batch is an NVTX range `step` in domain `cgprof`
    (`cgprof record -- cgprof run serve ...`). Ctrl-C: in-flight requests are answered,
    the results so far are printed, nothing is written, exit status 130.
    """
    from cgprof.report.output import check_writable, write_atomic
    from cgprof.runners.serving import ServeConfig, format_serve_table

    to_stdout = json_out == "-"
    say = click.get_text_stream("stderr")
    try:
        config = ServeConfig(
            model=model,
            clients=_numbers(clients, int, "--clients"),
            rates_qps=_numbers(rate, float, "--rate") if rate is not None else None,
            mode=mode,
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
            duration_s=duration,
            warmup_s=warmup,
            think_ms=think_ms,
            slo_ms=slo_ms,
            device=device,
            seed=seed,
            size=size,
        )
        config.resolved()  # every check that needs no torch, before torch is imported
        outputs = [p for p in (None if json_out in (None, "-") else Path(json_out), html_out)
                   if p is not None]
        for p in outputs:
            check_writable(p, force)
        from cgprof.runners.serve import run_serve

        def progress(line: str) -> None:
            say.write(f"cgprof: {line}\n")
            say.flush()

        result = run_serve(config, progress=progress)
        table = format_serve_table(result)
        if result.interrupted:
            click.echo(table, nl=False, err=True)
            click.echo("cgprof run serve: interrupted; no files written", err=True)
            sys.exit(130)
        click.echo(table, nl=False, err=to_stdout)
        if to_stdout:
            click.echo(result.to_json(), nl=False)
        elif json_out is not None:
            write_atomic(Path(json_out), result.to_json(), force)
            click.echo(f"wrote {json_out}")
        if html_out is not None:
            from cgprof.report.serve_html import render_serve

            write_atomic(html_out, render_serve(result), force)
            click.echo(f"wrote {html_out}", err=to_stdout)
    except CgprofError as exc:
        raise click.ClickException(str(exc)) from None
