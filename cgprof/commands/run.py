"""`cgprof run`: run a built-in workload eager and/or graphed, print a table, write JSON.

A thin skin over :func:`cgprof.runners.run_workload`; torch is imported only when the
command runs, never when the CLI loads.
"""

from __future__ import annotations

from pathlib import Path

import click

from cgprof.commands.serve import RunCommand
from cgprof.errors import CgprofError
from cgprof.report.output import check_writable, write_atomic
from cgprof.runners.config import DEVICES, MODELS, MODES, OPTIMIZERS, SIZES, TASKS, RunConfig


@click.command("run", cls=RunCommand)
@click.argument("task", type=click.Choice(TASKS))
@click.option("--model", type=click.Choice(MODELS), required=True, help="Built-in model.")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=None,
    help="eager, graph (CUDA Graphs) or both.  [default: both on CUDA, eager on CPU]",
)
@click.option(
    "--batch",
    type=int,
    default=None,
    help="Samples per step (train) or largest request (infer).  "
    "[default: mlp 32, resnet18 16, transformer 8 for train; 1 for infer]",
)
@click.option("--steps", type=int, default=100, show_default=True, help="Measured steps.")
@click.option("--warmup", type=int, default=20, show_default=True, help="Untimed steps run first.")
@click.option(
    "--device",
    type=click.Choice(DEVICES),
    default=None,
    help="Where to run.  [default: cuda when a GPU is visible, else cpu]",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Weights, data, dropout.")
@click.option(
    "--optimizer",
    type=click.Choice(OPTIMIZERS),
    default=None,
    help="Training optimizer.  [default: sgd for mlp/resnet18, adamw for transformer]",
)
@click.option(
    "--variable",
    is_flag=True,
    help="infer: request sizes uniform in 1..batch, graphed with power-of-two buckets.",
)
@click.option(
    "--size",
    type=click.Choice(SIZES),
    default="full",
    show_default=True,
    help="tiny: the same architectures, much smaller (smoke tests).",
)
@click.option(
    "--fused-optimizer/--foreach-optimizer",
    default=True,
    show_default=True,
    help="train on CUDA: PyTorch's fused optimizer kernel, or its foreach default (both modes).",
)
@click.option(
    "--cudnn-benchmark/--no-cudnn-benchmark",
    default=True,
    show_default=True,
    help="On CUDA: let cuDNN time and pick its convolution algorithms (both modes).",
)
@click.option(
    "--channels-last/--no-channels-last",
    default=None,
    help="resnet18 on CUDA: NHWC weights and inputs (both modes).  [default: for infer only]",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the results as JSON here.",
)
@click.option("--force", is_flag=True, help="Overwrite the --json file if it exists.")
@click.option(
    "--ddp",
    is_flag=True,
    help="train under torchrun: DistributedDataParallel, one graph per rank; rank 0 prints "
    "every rank's results (docs/runners.md).",
)
def command(
    task: str,
    model: str,
    mode: str | None,
    batch: int | None,
    steps: int,
    warmup: int,
    device: str | None,
    seed: int,
    optimizer: str | None,
    variable: bool,
    size: str,
    fused_optimizer: bool,
    cudnn_benchmark: bool,
    channels_last: bool | None,
    json_path: Path | None,
    force: bool,
    ddp: bool,
) -> None:
    """Run a built-in TASK (train or infer) eager and graphed; compare step times.

    Prints one row per mode (step time mean/p50/p99 in ms, samples/s, graph captures,
    replays and fallbacks) and the graph-over-eager speedup. Every step is an NVTX range
    `step` in domain `cgprof`, so the run can be the target of `nsys profile` or
    `cgprof record`.

    `cgprof run serve --model M ...` serves the model under load instead (concurrent
    clients, dynamic batching into graph buckets; see `cgprof run serve --help`).
    """
    try:
        config = RunConfig(
            task=task,
            model=model,
            mode=mode,
            batch=batch,
            steps=steps,
            warmup=warmup,
            device=device,
            seed=seed,
            optimizer=optimizer,
            variable=variable,
            size=size,
            fused_optimizer=fused_optimizer,
            cudnn_benchmark=cudnn_benchmark,
            channels_last=channels_last,
        )
        config.resolved()  # every check that needs no torch, before torch is imported
        if json_path is not None:
            check_writable(json_path, force)
        if ddp:
            _run_ddp(config, json_path, force)
            return
        from cgprof.runners import format_table, run_workload

        result = run_workload(config)
        click.echo(format_table(result), nl=False)
        if json_path is not None:
            write_atomic(json_path, result.to_json(), force)
            click.echo(f"wrote {json_path}")
    except CgprofError as exc:
        raise click.ClickException(str(exc)) from None


def _run_ddp(config: RunConfig, json_path: Path | None, force: bool) -> None:
    """`--ddp`: every rank runs; rank 0 alone prints and writes the gathered results."""
    from cgprof.runners.ddp import check_config, dist_env, format_ddp_table, run_ddp

    check_config(config)
    env = dist_env()
    result = run_ddp(config)
    if env.rank != 0:
        return
    click.echo(format_ddp_table(result), nl=False)
    if json_path is not None:
        write_atomic(json_path, result.to_json(), force)
        click.echo(f"wrote {json_path}")
