"""Data-parallel training (DistributedDataParallel), eager and with one CUDA graph per rank.

Run under ``torchrun``, one process per GPU::

    torchrun --nproc-per-node 2 -m cgprof run train --ddp --model resnet18

Each process reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (torchrun sets them, with
``MASTER_ADDR``/``MASTER_PORT``), joins the process group (NCCL on CUDA, gloo on the CPU),
uses GPU ``LOCAL_RANK``, and trains the built-in model wrapped in
``DistributedDataParallel`` in each mode. Every rank starts from the same weights (built
from ``seed``) and draws its own data shard (synthetic batches from ``seed + rank``), so
the ranks' losses differ while DDP's gradient all-reduce keeps their parameters equal.

Capturing DDP (PyTorch's rules, and what trials on the H200s showed):

- ``TORCH_NCCL_ASYNC_ERROR_HANDLING=0`` before the process group starts: NCCL's watchdog
  must not poll the work of a stream that is capturing. Set here (for both modes, so they
  run with the same settings) when this module starts the process group.
- ``DistributedDataParallel`` is constructed under the capture backend's side stream
  (``with torch.cuda.stream(side)``), the stream its warm-up iterations run on. Constructed
  on the default stream, the capture fails inside ``loss.backward()`` with
  ``cudaErrorStreamCaptureImplicit`` ("operation would make the legacy stream depend on a
  capturing blocking stream"), at world size 1 and 2, whatever the DDP options.
- At least :data:`DDP_WARMUP_ITERS` (11) DDP-enabled eager iterations on that side stream
  before the capture: DDP rebuilds its gradient buckets once, after the first iteration,
  and sets up its communication in the first ones; after the warm-up the bucket layout is
  static, and the captured all-reduces read and write fixed bucket memory.
- ``find_unused_parameters=False`` (every parameter gets a gradient every step) and
  ``broadcast_buffers=False``: no buffer broadcast at the start of each forward (a
  collective DDP would otherwise issue in every step; every rank's BatchNorm statistics
  start equal and track its own shard, which affects evaluation only).
- One graph per rank, every rank capturing and replaying the same step in the same order
  (the captured all-reduces must match up across ranks).

NVTX: each process marks its rank once (:func:`cgprof.mark.rank`: ``rank R/W``, payload
R), then the steps as a single-process run does (``step`` in domain ``cgprof``, payload =
step index), so `cgprof analyze` can tell the ranks of one trace apart and line up
their steps.

Results: every rank measures its own step times and losses; they are gathered to every
rank (:func:`torch.distributed.all_gather_object`) into a :class:`DDPResult`, which rank 0
prints. After each mode the ranks compare their parameters with rank 0's (broadcast) to
show that DDP kept them in sync.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cgprof import mark
from cgprof.errors import RunnerError
from cgprof.runners.config import RunConfig
from cgprof.runners.results import SCHEMA_VERSION, ModeResult, RunResult

try:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
except ImportError as exc:  # pragma: no cover - torch is an optional extra
    raise RunnerError(
        "the runners need PyTorch, which is not installed: pip install 'cgprof[runners]'"
    ) from exc

from cgprof.runners import capture, graphs, models, workloads

#: DDP-enabled eager iterations before a capture (PyTorch's advice for DDP: 11).
DDP_WARMUP_ITERS = 11
#: Environment torchrun sets for each process.
ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job: ``rank`` of ``world_size``, GPU ``local_rank``."""

    rank: int
    world_size: int
    local_rank: int


def dist_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Read ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``; RunnerError naming what is missing or bad."""
    env = os.environ if environ is None else environ
    missing = [name for name in ENV_VARS if name not in env]
    if missing:
        raise RunnerError(
            f"--ddp needs {', '.join(missing)} in the environment, which torchrun sets: "
            "run it as torchrun --nproc-per-node N -m cgprof run train --ddp ..."
        )
    try:
        rank, world, local = (int(env[name]) for name in ENV_VARS)
    except ValueError:
        values = ", ".join(f"{name}={env[name]!r}" for name in ENV_VARS)
        raise RunnerError(f"--ddp: {values}: each must be an integer") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise RunnerError(f"--ddp: RANK={rank} LOCAL_RANK={local} invalid for WORLD_SIZE={world}")
    return DistEnv(rank, world, local)


def check_config(config: RunConfig) -> None:
    """What `--ddp` cannot do, checked before torch starts anything."""
    if config.task != "train":
        raise RunnerError("--ddp applies to task 'train' only (data-parallel training)")
    if config.variable:
        raise RunnerError("--ddp does not take --variable (that is for inference)")


@dataclass
class DDPResult:
    """What every rank measured, gathered; identical on every rank after :func:`run_ddp`.

    ``ranks[r]`` is rank r's :class:`RunResult` (its step times, losses and graph
    counters per mode). ``param_checksum[r][mode]`` is the float64 sum of rank r's
    parameters after that mode's run; ``param_max_abs_diff[r][mode]`` the largest
    |rank r - rank 0| over all parameter elements then (0 when DDP kept them equal).
    """

    world_size: int
    backend: str
    graph_warmup_iters: int
    ranks: list[RunResult] = field(default_factory=list)
    param_checksum: list[dict[str, float]] = field(default_factory=list)
    param_max_abs_diff: list[dict[str, float]] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        """Slowest rank's eager mean step time over slowest rank's graphed one (None unless
        both modes ran): a data-parallel step is as slow as its slowest rank."""
        if not self.ranks or any(
            "eager" not in r.modes or "graph" not in r.modes for r in self.ranks
        ):
            return None
        eager = max(r.modes["eager"].mean_ms for r in self.ranks)
        graph = max(r.modes["graph"].mean_ms for r in self.ranks)
        return eager / graph

    @property
    def loss_max_rel_diff(self) -> float | None:
        """Largest eager-vs-graph loss difference over all ranks (None unless both ran)."""
        diffs = [r.loss_max_rel_diff for r in self.ranks]
        if not diffs or any(d is None for d in diffs):
            return None
        return max(d for d in diffs if d is not None)

    @property
    def params_max_abs_diff(self) -> float:
        """Largest |rank r - rank 0| parameter difference over ranks and modes."""
        return max((v for d in self.param_max_abs_diff for v in d.values()), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON payload: the run's setup (rank 0's), the ranks, and the cross-rank figures."""
        first = self.ranks[0]
        common = {
            k: v
            for k, v in dataclasses.asdict(first).items()
            if k not in ("modes", "device_name")
        }
        ranks = []
        for r, run in enumerate(self.ranks):
            ranks.append(
                {
                    "rank": r,
                    "device_name": run.device_name,
                    "modes": {name: dataclasses.asdict(m) for name, m in run.modes.items()},
                    "speedup": run.speedup,
                    "speedup_mean": run.speedup_mean,
                    "speedup_p50": run.speedup_p50,
                    "loss_max_rel_diff": run.loss_max_rel_diff,
                    "param_checksum": self.param_checksum[r],
                    "param_max_abs_diff": self.param_max_abs_diff[r],
                }
            )
        return {
            **common,
            "schema_version": SCHEMA_VERSION,
            "kind": "cgprof.run.ddp",
            "ddp": True,
            "world_size": self.world_size,
            "backend": self.backend,
            "graph_warmup_iters": self.graph_warmup_iters,
            "ranks": ranks,
            "speedup": self.speedup,
            "loss_max_rel_diff": self.loss_max_rel_diff,
            "param_max_abs_diff": self.params_max_abs_diff,
        }

    def to_json(self) -> str:
        """Deterministic JSON text (sorted keys, two-space indent, trailing newline)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"


def format_ddp_table(result: DDPResult) -> str:
    """The text rank 0 prints: a header, one row per (mode, rank), the cross-rank verdict."""
    first = result.ranks[0]
    extra = f", {first.optimizer}" if first.optimizer else ""
    lines = [
        f"cgprof run: train {first.model} ({first.size}{extra}), DDP over "
        f"{result.world_size} rank{'s' if result.world_size != 1 else ''} ({result.backend}), "
        f"batch {first.batch} per rank, {first.steps} steps after {first.warmup} warm-up, "
        f"{first.device} ({first.device_name}), torch {first.torch_version}, seed {first.seed}",
        "",
        f"{'rank':>4} {'mode':<6} {'mean_ms':>9} {'p50_ms':>9} {'p99_ms':>9} "
        f"{'samples/s':>11} {'captures':>8} {'replays':>8} {'fallbacks':>9}",
    ]
    for mode in first.modes:
        for r, run in enumerate(result.ranks):
            m = run.modes[mode]
            counts = (
                f"{m.captures:>8d} {m.replays:>8d} {m.fallbacks:>9d}"
                if mode == "graph"
                else f"{'-':>8} {'-':>8} {'-':>9}"
            )
            lines.append(
                f"{r:>4d} {mode:<6} {m.mean_ms:>9.3f} {m.p50_ms:>9.3f} {m.p99_ms:>9.3f} "
                f"{m.throughput_per_s:>11.1f} {counts}"
            )
    lines.append("")
    if result.speedup is not None:
        per_rank = ", ".join(f"{r.speedup:.2f}x" for r in result.ranks if r.speedup is not None)
        lines.append(
            f"graph speedup over eager: {result.speedup:.2f}x (mean step time of the slowest "
            f"rank; per rank {per_rank})"
        )
        diff = result.loss_max_rel_diff
        if diff is not None:
            lines.append(
                f"loss curves eager vs graph agree within {diff:.1e} relative on every rank"
            )
    modes = list(first.modes)
    spread = ", ".join(
        f"{max(d[mode] for d in result.param_max_abs_diff):.1e} ({mode})" for mode in modes
    )
    lines.append(f"parameters across ranks: max |rank r - rank 0| {spread}")
    for r, run in enumerate(result.ranks):
        g = run.modes.get("graph")
        if g is not None and g.fallback_reason:
            lines.append(f"rank {r}: graph mode fell back to eager: {g.fallback_reason}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# running


def run_ddp(
    config: RunConfig,
    *,
    environ: Mapping[str, str] | None = None,
    backend_factory: workloads.BackendFactory | None = None,
) -> DDPResult:
    """Train ``config`` data-parallel in each of its modes; every rank gets the gathered result.

    Joins the default process group from the environment (``env://``) unless one is
    already initialised (then it is used and left open; its NCCL settings are the
    caller's). ``backend_factory`` replaces the CUDA capture backend (CPU tests).
    """
    check_config(config)
    env = dist_env(environ)
    cfg = config.resolved(
        cuda_available=torch.cuda.is_available(), allow_cpu_graphs=backend_factory is not None
    )
    assert cfg.device is not None and cfg.batch is not None
    if cfg.device == "cuda":
        if env.local_rank >= torch.cuda.device_count():
            raise RunnerError(
                f"rank {env.rank}: LOCAL_RANK={env.local_rank} but torch sees "
                f"{torch.cuda.device_count()} GPU(s): start at most that many processes per node"
            )
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    cfg = dataclasses.replace(
        cfg, graph_warmup_iters=max(cfg.graph_warmup_iters, DDP_WARMUP_ITERS)
    )
    started_group = False
    saved_handling = os.environ.get(ASYNC_ERROR_HANDLING)
    if not dist.is_initialized():
        # before the process group (and its NCCL watchdog) starts: see the module docstring
        os.environ[ASYNC_ERROR_HANDLING] = "0"
        kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(
            backend, init_method="env://", rank=env.rank, world_size=env.world_size, **kwargs
        )
        started_group = True
    elif (dist.get_rank(), dist.get_world_size()) != (env.rank, env.world_size):
        raise RunnerError(
            f"the process group is rank {dist.get_rank()} of {dist.get_world_size()}, "
            f"the environment says {env.rank} of {env.world_size}"
        )
    try:
        mark.rank(env.rank, env.world_size)
        mine = _run_rank(cfg, env, device, backend_factory)
        gathered: list[Any] = [None] * env.world_size
        dist.all_gather_object(gathered, mine)
    finally:
        if started_group:
            dist.destroy_process_group()
            if saved_handling is None:
                os.environ.pop(ASYNC_ERROR_HANDLING, None)
            else:
                os.environ[ASYNC_ERROR_HANDLING] = saved_handling
    out = DDPResult(env.world_size, backend, cfg.graph_warmup_iters)
    for run, checksum, diff in gathered:
        out.ranks.append(run)
        out.param_checksum.append(checksum)
        out.param_max_abs_diff.append(diff)
    return out


def _run_rank(
    cfg: RunConfig,
    env: DistEnv,
    device: torch.device,
    backend_factory: workloads.BackendFactory | None,
) -> tuple[RunResult, dict[str, float], dict[str, float]]:
    assert cfg.batch is not None and cfg.device is not None
    on_cuda = device.type == "cuda"
    result = RunResult(
        task=cfg.task,
        model=cfg.model,
        batch=cfg.batch,
        steps=cfg.steps,
        warmup=cfg.warmup,
        device=cfg.device,
        device_name=torch.cuda.get_device_name(device) if on_cuda else "cpu",
        torch_version=torch.__version__,
        seed=cfg.seed,
        size=cfg.size,
        optimizer=cfg.optimizer,
        variable=False,
        capturable_eager=cfg.capturable_eager,
    )
    result.fused_optimizer = on_cuda and cfg.fused_optimizer
    result.cudnn_benchmark = on_cuda and cfg.cudnn_benchmark
    result.channels_last = (
        on_cuda and bool(cfg.channels_last) and models.spec(cfg.model).convolutional
    )
    checksum: dict[str, float] = {}
    diff: dict[str, float] = {}
    saved_benchmark = torch.backends.cudnn.benchmark
    if on_cuda:
        torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
    try:
        for mode in cfg.modes:
            out, params = _train(cfg, result, mode, env, device, backend_factory)
            result.modes[mode] = out
            checksum[mode], diff[mode] = _compare_params(params)
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark
    return result, checksum, diff


def _no_buffer_sync() -> dict[str, Any]:
    """No buffer broadcast in each forward, in the spelling this torch takes.

    ``broadcast_buffers=False`` (torch 2.11); newer releases split it into
    ``forward_sync_buffers`` (per forward, set False here) and the sync at construction,
    which they keep (the ranks' buffers are equal then anyway: same seed).
    """
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def _compare_params(params: list[nn.Parameter]) -> tuple[float, float]:
    """(float64 sum of this rank's parameters, max |this rank - rank 0| over all elements)."""
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        reference = flat.clone()
        dist.broadcast(reference, src=0)
        checksum = float(flat.double().sum().item())
        return checksum, float((flat - reference).abs().max().item())


def _train(
    cfg: RunConfig,
    result: RunResult,
    mode: str,
    env: DistEnv,
    device: torch.device,
    backend_factory: workloads.BackendFactory | None,
) -> tuple[ModeResult, list[nn.Parameter]]:
    """One mode on this rank: DDP model, per-rank data, the runners' timing loop."""
    assert cfg.batch is not None and cfg.optimizer is not None
    spec = models.spec(cfg.model, cfg.size)
    layout = workloads._layout(result)
    model = workloads._place(
        models.build_model(cfg.model, cfg.size, seed=cfg.seed), device, layout
    )
    graphed = mode == "graph"
    backend: capture.CaptureBackend | None = None
    side: Any = None
    if graphed:
        backend = (
            backend_factory() if backend_factory is not None else capture.CudaGraphBackend(device)
        )
        side = getattr(backend, "side_stream", None)
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=False,
            **_no_buffer_sync(),
        )
    if side is not None:
        torch.cuda.current_stream(device).wait_stream(side)
    capturable = device.type == "cuda" and (graphed or cfg.capturable_eager)
    params = list(model.parameters())
    optimizer = models.make_optimizer(
        cfg.optimizer, params, capturable=capturable, fused=result.fused_optimizer
    )
    loss_fn = nn.CrossEntropyLoss()
    total = cfg.warmup + cfg.steps
    # each rank its own shard: rank r draws from seed + r (rank 0 sees a single run's data)
    data = models.make_batches(
        spec,
        cfg.batch,
        min(total, workloads.DATA_POOL),
        seed=cfg.seed + env.rank,
        device=device,
        memory_format=layout,
    )
    loss_log = torch.zeros(total, device=device)
    step: graphs.EagerTrainStep | graphs.GraphedTrainStep
    if graphed:
        step = graphs.GraphedTrainStep(
            ddp,
            loss_fn,
            optimizer,
            warmup_iters=cfg.graph_warmup_iters,
            loss_log=loss_log,
            backend=backend,
        )
    else:
        step = graphs.EagerTrainStep(ddp, loss_fn, optimizer, loss_log=loss_log)
    sync = workloads._sync(device)
    workloads._seed(cfg.seed + env.rank)  # dropout: each rank its own stream
    sync()
    dist.barrier()  # the ranks start their timed loops together

    def one(i: int) -> None:
        x, y = data[i % len(data)]
        mark.push(mark.STEP, i)  # mark.step(i), as bare push/pop (see workloads)
        try:
            step(x, y, i)
            sync()
        finally:
            mark.pop()

    durations_ns = workloads._loop(mode, cfg, one)
    out = workloads._mode_result(mode, cfg, durations_ns, cfg.batch * cfg.steps)
    out.losses = [float(v) for v in loss_log.tolist()]
    if isinstance(step, graphs.GraphedTrainStep):
        workloads._copy_stats(out, step.stats)
    return out, params


__all__ = [
    "DDP_WARMUP_ITERS",
    "DDPResult",
    "DistEnv",
    "check_config",
    "dist_env",
    "format_ddp_table",
    "run_ddp",
]
