"""What one `cgprof run` asks for, checked before torch is imported.

:class:`RunConfig` holds the user's choices; :meth:`RunConfig.resolved` fills in the
per-model defaults (batch size, optimizer) and raises :class:`~cgprof.errors.RunnerError`
with a one-line message for anything that cannot run. The one check that needs torch
(is there a CUDA device?) is made in :mod:`cgprof.runners.workloads`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cgprof.errors import RunnerError

TASKS = ("train", "infer")
MODELS = ("mlp", "resnet18", "transformer")
MODES = ("eager", "graph", "both")
DEVICES = ("cuda", "cpu")
OPTIMIZERS = ("sgd", "adamw")
SIZES = ("full", "tiny")

#: Default batch sizes: the benchmark shapes of the issue (MLP 32, ResNet-18 CIFAR 16,
#: Transformer 8 x seq 128 for training; batch 1 for latency-bound inference).
DEFAULT_TRAIN_BATCH = {"mlp": 32, "resnet18": 16, "transformer": 8}
DEFAULT_INFER_BATCH = {"mlp": 1, "resnet18": 1, "transformer": 1}
#: Default optimizer per model: SGD with momentum for the MLP and ResNet, AdamW for the
#: Transformer (as people train them).
DEFAULT_OPTIMIZER = {"mlp": "sgd", "resnet18": "sgd", "transformer": "adamw"}


def _choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise RunnerError(f"unknown {what} {value!r} (choose from {', '.join(choices)})")


@dataclass(frozen=True)
class RunConfig:
    """One workload run.

    Attributes:
        task: ``train`` (whole training steps) or ``infer`` (forward-only requests).
        model: ``mlp``, ``resnet18`` or ``transformer``.
        mode: ``eager``, ``graph`` or ``both``; None: ``both`` on CUDA, ``eager`` on CPU.
        batch: samples per step (train) or largest request size (infer); None: per model.
        steps: measured steps (train) or requests (infer).
        warmup: steps run first and left out of the timing (still NVTX-marked).
        device: ``cuda`` or ``cpu``; None: ``cuda`` when torch sees a GPU, else ``cpu``.
        seed: seeds weights, data and dropout, so eager and graphed runs see the same numbers.
        optimizer: ``sgd`` or ``adamw`` (train only); None: per model.
        variable: infer only: request sizes drawn uniformly from 1..batch, served by graphs
            of power-of-two buckets (a request is padded up to its bucket).
        size: ``full`` (the benchmark models) or ``tiny`` (small widths, for smoke tests).
        graph_warmup_iters: eager iterations on a side stream before each capture.
        capturable_eager: train on CUDA: give the eager run the same ``capturable=True``
            optimizer as the graphed run, so the two differ only by capture. For comparing
            numerics: capturable AdamW computes its bias corrections on the device and
            rounds differently (~1e-7), which a chaotic model (the 41-layer MLP) amplifies
            to ~1e-2 in 20 steps. Off for timing: eager users don't pay for capturable.
            (With ``fused_optimizer`` the AdamW arithmetic is the same either way.)
        fused_optimizer: train on CUDA: both modes use PyTorch's fused optimizer kernel
            (``fused=True``) instead of the foreach default; off: foreach in both modes.
        cudnn_benchmark: on CUDA, both modes run with ``torch.backends.cudnn.benchmark``
            on (cuDNN times its convolution algorithms once per shape, in the warm-up, and
            keeps the fastest); the previous setting is restored afterwards. The choice is
            per process: two separate runs may pick different kernels.
        channels_last: conv models on CUDA: both modes keep weights and inputs channels-last
            (NHWC), the layout cuDNN's Hopper kernels compute in, instead of NCHW, which
            cuDNN converts to and from around convolutions (extra kernels). None (default):
            for inference only. In training, NHWC batch norm runs cuDNN's persistent kernels,
            each after a small memset that cuDNN issues; in a graph replay every such memset
            node costs ~4 us of dependency latency (ResNet-18: 48 memsets, replay compactness
            0.85 against 0.92 in NCHW), although the step is faster (see docs/runners.md).
    """

    task: str
    model: str
    mode: str | None = None
    batch: int | None = None
    steps: int = 100
    warmup: int = 20
    device: str | None = None
    seed: int = 0
    optimizer: str | None = None
    variable: bool = False
    size: str = "full"
    graph_warmup_iters: int = 3
    capturable_eager: bool = False
    fused_optimizer: bool = True
    cudnn_benchmark: bool = True
    channels_last: bool | None = None

    def resolved(
        self, cuda_available: bool | None = None, *, allow_cpu_graphs: bool = False
    ) -> RunConfig:
        """Check every field and fill in defaults; raise RunnerError on the first problem.

        ``cuda_available`` resolves ``device=None`` (and with it ``mode=None``); when it is
        None those fields stay unresolved so this can run without torch.
        ``allow_cpu_graphs`` is for a simulated capture backend (tests) only.
        """
        _choice("task", self.task, TASKS)
        _choice("model", self.model, MODELS)
        _choice("size", self.size, SIZES)
        if self.mode is not None:
            _choice("mode", self.mode, MODES)
        if self.device is not None:
            _choice("device", self.device, DEVICES)
        if self.optimizer is not None:
            _choice("optimizer", self.optimizer, OPTIMIZERS)
            if self.task != "train":
                raise RunnerError("an optimizer only applies to task 'train'")
        if self.batch is not None and self.batch < 1:
            raise RunnerError(f"batch size must be at least 1 (got {self.batch})")
        if self.steps < 1:
            raise RunnerError(f"steps must be at least 1 (got {self.steps})")
        if self.warmup < 0:
            raise RunnerError(f"warmup must be 0 or more (got {self.warmup})")
        if self.graph_warmup_iters < 1:
            raise RunnerError(
                f"graph_warmup_iters must be at least 1 (got {self.graph_warmup_iters}): "
                "optimizer state and lazily created buffers must exist before capture"
            )
        if self.variable and self.task != "infer":
            raise RunnerError("variable batch sizes apply to task 'infer' only")

        device = self.device
        if device is None and cuda_available is not None:
            device = "cuda" if cuda_available else "cpu"
        mode = self.mode
        if mode is None and device is not None:
            mode = "both" if device == "cuda" else "eager"
        if device == "cpu" and mode in ("graph", "both") and not allow_cpu_graphs:
            if self.device is None:
                raise RunnerError(
                    f"mode {mode!r} needs CUDA graphs, which need a CUDA GPU, and torch sees "
                    "none here (torch.cuda.is_available() is False): use mode 'eager'"
                )
            raise RunnerError(
                f"mode {mode!r} needs CUDA graphs, which need a CUDA GPU, and the device is "
                "'cpu': use mode 'eager' on the CPU, or device 'cuda' on a machine with a GPU"
            )
        if device == "cuda" and cuda_available is False:
            raise RunnerError(
                "device 'cuda' asked for, but torch sees no CUDA GPU here "
                "(torch.cuda.is_available() is False): use device 'cpu' with mode 'eager'"
            )

        batch = self.batch
        if batch is None:
            table = DEFAULT_TRAIN_BATCH if self.task == "train" else DEFAULT_INFER_BATCH
            batch = table[self.model]
        optimizer = self.optimizer
        if optimizer is None and self.task == "train":
            optimizer = DEFAULT_OPTIMIZER[self.model]
        channels_last = self.channels_last
        if channels_last is None:
            channels_last = self.task == "infer"
        return dataclasses.replace(
            self,
            mode=mode,
            device=device,
            batch=batch,
            optimizer=optimizer,
            channels_last=channels_last,
        )

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes to run, in order (eager first, so ``both`` reports graph against it)."""
        if self.mode is None:
            raise RunnerError("mode is not resolved yet; call resolved() first")
        return ("eager", "graph") if self.mode == "both" else (self.mode,)
