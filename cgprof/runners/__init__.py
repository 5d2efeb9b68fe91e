"""Instrumented eager and CUDA-graphed workloads, and a small capture/replay library.

Two halves, both importable from Python and driven by `cgprof run`:

- :mod:`cgprof.runners.graphs` -- whole-step capture for training
  (:class:`~cgprof.runners.graphs.GraphedTrainStep`), inference capture
  (:class:`~cgprof.runners.graphs.GraphedInference`) with a shape-keyed graph cache, optional
  batch buckets, eager fallback and capture/replay counters.
- :mod:`cgprof.runners.workloads` -- built-in models (MLP, CIFAR ResNet-18, Transformer
  encoder) run eager and graphed, timed per step, NVTX-marked in domain ``cgprof``.

Importing this package does not import torch (``cgprof --help`` stays light): only the
configuration, result and timing modules are loaded here, and :func:`run_workload` imports
torch when called.
"""

from __future__ import annotations

from typing import Any

from cgprof.runners.config import DEVICES, MODELS, MODES, OPTIMIZERS, SIZES, TASKS, RunConfig
from cgprof.runners.results import SCHEMA_VERSION, ModeResult, RunResult, format_table

__all__ = [
    "DEVICES",
    "MODELS",
    "MODES",
    "OPTIMIZERS",
    "SCHEMA_VERSION",
    "SIZES",
    "TASKS",
    "ModeResult",
    "RunConfig",
    "RunResult",
    "format_table",
    "run_workload",
]


def run_workload(config: RunConfig, **kwargs: Any) -> RunResult:
    """Run one built-in workload as ``config`` says; imports torch (see `workloads`)."""
    from cgprof.runners.workloads import run_workload as _run

    return _run(config, **kwargs)
