"""Step-time statistics: nanosecond host wall times in, milliseconds out (no torch here).

Each measured step is timed on the host with :func:`time.perf_counter_ns` around the whole
step, which ends with ``torch.cuda.synchronize()``, so a step's time covers its host work
and the GPU work it queued. Warm-up steps are never passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepStats:
    """Summary of measured step (or request) times; every field is in milliseconds.

    ``p50_ms`` and ``p99_ms`` are numpy's linear-interpolation percentiles.
    """

    count: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    total_ms: float


def summarize(durations_ns: Sequence[int]) -> StepStats:
    """Summarise per-step host wall times given in nanoseconds."""
    if len(durations_ns) == 0:
        raise ValueError("no measured steps to summarise")
    ms = np.asarray(durations_ns, dtype=np.float64) / 1e6
    return StepStats(
        count=int(ms.size),
        mean_ms=float(ms.mean()),
        p50_ms=float(np.percentile(ms, 50)),
        p99_ms=float(np.percentile(ms, 99)),
        min_ms=float(ms.min()),
        max_ms=float(ms.max()),
        total_ms=float(ms.sum()),
    )


def throughput_per_s(samples: int, total_ms: float) -> float:
    """Samples per second over ``total_ms`` milliseconds of measured steps."""
    return samples / (total_ms / 1e3) if total_ms > 0 else float("inf")
