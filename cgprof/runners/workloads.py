"""The built-in workloads, run eager and graphed, timed per step and NVTX-marked.

NVTX contract (domain ``cgprof``; push/pop ranges on the Python thread; payload in brackets):

    eager | graph [batch]          one per mode run: which mode the steps inside belong to
      warmup [warm-up steps]       the run's warm-up steps, left out of the timing
        step [index] ...
      step [index]                 one per iteration, every iteration, eager and graphed;
                                   index counts from 0 at the first warm-up step
        forward [index]            eager steps (and eager warm-up / fallback iterations of
        backward [index]           graph mode): model + loss, loss.backward(),
        optimizer [index]          optimizer.step() + zero_grad (inference: forward only)
        copy_in [index]            graph mode: copies into the static input buffers
        warmup [index]             graph mode: eager iterations on a side stream before a
                                   capture (training: one per step; inference: inside the
                                   step that captures); contains forward/backward/optimizer
        capture [capture number]   graph mode: the capture (1 = first graph of this run)
        replay [index]             graph mode: graph.replay()

A step is warm-up (not timed) if it lies inside a ``warmup`` range or contains one. Each
``step`` range ends after ``torch.cuda.synchronize()``, so it covers the GPU work it queued.

Timing: host wall time of each measured step (``time.perf_counter_ns`` around the ``step``
range, which ends with the synchronize), warm-up excluded. Training reports the step time;
inference the per-request latency and samples per second.

Both modes run with the same PyTorch settings (see :class:`RunConfig`): on CUDA the fused
optimizer kernel, ``cudnn.benchmark`` and, for conv models in inference, channels-last
tensors. Each step's loss is kept without a sync: both modes write it into a device-side log
with the same two small kernels (inside the captured graph for graphed steps), so the two modes
execute the same GPU work per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cgprof import mark
from cgprof.errors import RunnerError
from cgprof.runners.config import RunConfig
from cgprof.runners.results import ModeResult, RunResult
from cgprof.runners.timing import summarize, throughput_per_s

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - torch is an optional extra
    raise RunnerError(
        "the runners need PyTorch, which is not installed: pip install 'cgprof[runners]'"
    ) from exc

from cgprof.runners import capture, graphs, models

#: Distinct synthetic batches cycled through (enough to make the data vary; small enough
#: to stay cheap on the device even for the Transformer).
DATA_POOL = 16

BackendFactory = Callable[[], capture.CaptureBackend]


def run_workload(config: RunConfig, *, backend_factory: BackendFactory | None = None) -> RunResult:
    """Run ``config`` in each of its modes and return what was measured.

    Every mode starts from the same seed: identical weights (built on the CPU), identical
    data and an identical dropout stream, so eager and graphed loss curves are comparable
    step by step. ``backend_factory`` replaces the CUDA capture backend (tests use it to
    run graph mode's bookkeeping on the CPU); with it, graph mode is allowed on the CPU.
    """
    cfg = config.resolved(
        cuda_available=torch.cuda.is_available(), allow_cpu_graphs=backend_factory is not None
    )
    assert cfg.device is not None and cfg.batch is not None
    device = torch.device(cfg.device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result = RunResult(
        task=cfg.task,
        model=cfg.model,
        batch=cfg.batch,
        steps=cfg.steps,
        warmup=cfg.warmup,
        device=cfg.device,
        device_name=device_name,
        torch_version=torch.__version__,
        seed=cfg.seed,
        size=cfg.size,
        optimizer=cfg.optimizer,
        variable=cfg.variable,
        capturable_eager=cfg.capturable_eager,
    )
    on_cuda = device.type == "cuda"
    result.fused_optimizer = on_cuda and cfg.task == "train" and cfg.fused_optimizer
    result.cudnn_benchmark = on_cuda and cfg.cudnn_benchmark
    result.channels_last = (
        on_cuda and bool(cfg.channels_last) and models.spec(cfg.model).convolutional
    )
    run_mode = _run_train if cfg.task == "train" else _run_infer
    saved_benchmark = torch.backends.cudnn.benchmark
    if on_cuda:
        torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
    try:
        for mode in cfg.modes:
            result.modes[mode] = run_mode(cfg, result, mode, device, backend_factory)
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark
    return result


def _layout(result: RunResult) -> torch.memory_format:
    return torch.channels_last if result.channels_last else torch.contiguous_format


def _place(model: nn.Module, device: torch.device, layout: torch.memory_format) -> nn.Module:
    model = model.to(device)
    if layout == torch.channels_last:
        # 4-D conv weights become NHWC; the stubs of Module.to lack memory_format
        model = model.to(memory_format=layout)  # type: ignore[call-overload]
    return model


def _sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        if device.index is None or device.index == torch.cuda.current_device():
            # the current device: skip synchronize(device)'s switch to the device and back
            # (Python work in every timed step that a hand-written loop does not do)
            return torch.cuda.synchronize
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _seed(seed: int) -> None:
    torch.manual_seed(seed)  # seeds the CPU and every CUDA generator (dropout)


def _graph_kwargs(backend_factory: BackendFactory | None) -> dict[str, Any]:
    return {"backend": backend_factory()} if backend_factory is not None else {}


def _run_train(
    cfg: RunConfig,
    result: RunResult,
    mode: str,
    device: torch.device,
    backend_factory: BackendFactory | None,
) -> ModeResult:
    assert cfg.batch is not None and cfg.optimizer is not None
    spec = models.spec(cfg.model, cfg.size)
    layout = _layout(result)
    model = _place(models.build_model(cfg.model, cfg.size, seed=cfg.seed), device, layout)
    graphed = mode == "graph"
    capturable = device.type == "cuda" and (graphed or cfg.capturable_eager)
    optimizer = models.make_optimizer(
        cfg.optimizer,
        list(model.parameters()),
        capturable=capturable,
        fused=result.fused_optimizer,
    )
    loss_fn = nn.CrossEntropyLoss()
    total = cfg.warmup + cfg.steps
    data = models.make_batches(
        spec, cfg.batch, min(total, DATA_POOL), seed=cfg.seed, device=device, memory_format=layout
    )
    step: graphs.EagerTrainStep | graphs.GraphedTrainStep
    # Every step's loss is kept without a sync: both modes write it into loss_log with the
    # same two small kernels (the graph replays them as part of the step), so an eager and a
    # graphed run execute the same GPU work per step.
    loss_log = torch.zeros(total, device=device)
    if graphed:
        step = graphs.GraphedTrainStep(
            model,
            loss_fn,
            optimizer,
            warmup_iters=cfg.graph_warmup_iters,
            loss_log=loss_log,
            **_graph_kwargs(backend_factory),
        )
    else:
        step = graphs.EagerTrainStep(model, loss_fn, optimizer, loss_log=loss_log)
    sync = _sync(device)
    _seed(cfg.seed)
    sync()

    def one(i: int) -> None:
        x, y = data[i % len(data)]
        # mark.step(i) as bare push/pop: less Python per timed step (see mark.region)
        mark.push(mark.STEP, i)
        try:
            step(x, y, i)
            sync()
        finally:
            mark.pop()

    durations_ns = _loop(mode, cfg, one)
    losses = loss_log
    out = _mode_result(mode, cfg, durations_ns, cfg.batch * cfg.steps)
    out.losses = [float(v) for v in losses.tolist()]
    if isinstance(step, graphs.GraphedTrainStep):
        _copy_stats(out, step.stats)
    return out


def request_sizes(cfg: RunConfig, count: int) -> list[int]:
    """Batch size of each inference request: all ``batch``, or uniform in 1..batch (seeded)."""
    assert cfg.batch is not None
    if not cfg.variable:
        return [cfg.batch] * count
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    return [int(v) for v in torch.randint(1, cfg.batch + 1, (count,), generator=gen).tolist()]


def _run_infer(
    cfg: RunConfig,
    result: RunResult,
    mode: str,
    device: torch.device,
    backend_factory: BackendFactory | None,
) -> ModeResult:
    assert cfg.batch is not None
    spec = models.spec(cfg.model, cfg.size)
    layout = _layout(result)
    model = _place(models.build_model(cfg.model, cfg.size, seed=cfg.seed), device, layout)
    model.eval()
    total = cfg.warmup + cfg.steps
    batches = models.make_batches(
        spec,
        cfg.batch,
        min(total, DATA_POOL),
        seed=cfg.seed,
        device=device,
        memory_format=layout,
    )
    pool = [x for x, _ in batches]
    sizes = request_sizes(cfg, total)
    # slicing the first rows of a contiguous (or channels-last) batch keeps its layout: no
    # copy kernel
    requests = [pool[i % len(pool)][: sizes[i]] for i in range(total)]
    serve: graphs.EagerInference | graphs.GraphedInference
    if mode == "graph":
        buckets = capture.default_buckets(cfg.batch) if cfg.variable else None
        serve = graphs.GraphedInference(
            model,
            buckets=buckets,
            max_graphs=max(16, len(buckets or [])),
            **_graph_kwargs(backend_factory),
        )
    else:
        serve = graphs.EagerInference(model)
    sync = _sync(device)
    _seed(cfg.seed)
    sync()

    def one(i: int) -> None:
        mark.push(mark.STEP, i)  # mark.step(i), as bare push/pop (see _run_train)
        try:
            serve(requests[i], i)
            sync()
        finally:
            mark.pop()

    with torch.no_grad():
        durations_ns = _loop(mode, cfg, one)
    out = _mode_result(mode, cfg, durations_ns, sum(sizes[cfg.warmup :]))
    if isinstance(serve, graphs.GraphedInference):
        _copy_stats(out, serve.stats)
    return out


def _loop(mode: str, cfg: RunConfig, one: Callable[[int], None]) -> list[int]:
    """Run warm-up then measured steps inside the mode's range; return measured step ns."""
    assert cfg.batch is not None
    durations_ns: list[int] = []
    with mark.region(mode, cfg.batch):
        if cfg.warmup:
            with mark.region("warmup", cfg.warmup):
                for i in range(cfg.warmup):
                    one(i)
        for i in range(cfg.warmup, cfg.warmup + cfg.steps):
            t0 = time.perf_counter_ns()
            one(i)
            durations_ns.append(time.perf_counter_ns() - t0)
    return durations_ns


def _mode_result(mode: str, cfg: RunConfig, durations_ns: list[int], samples: int) -> ModeResult:
    """Step-time statistics of one mode's measured steps (warm-up excluded)."""
    stats = summarize(durations_ns)
    return ModeResult(
        mode=mode,
        steps=cfg.steps,
        warmup=cfg.warmup,
        mean_ms=stats.mean_ms,
        p50_ms=stats.p50_ms,
        p99_ms=stats.p99_ms,
        min_ms=stats.min_ms,
        max_ms=stats.max_ms,
        throughput_per_s=throughput_per_s(samples, stats.total_ms),
    )


def _copy_stats(out: ModeResult, stats: capture.GraphStats) -> None:
    out.captures = stats.captures
    out.replays = stats.replays
    out.recaptures = stats.recaptures
    out.fallbacks = stats.fallbacks
    out.evictions = stats.evictions
    out.capture_ms = stats.capture_ms
    out.fallback_reason = stats.fallback_reason
