"""Results of `cgprof run`: dataclasses, their JSON form and the text table (no torch here).

JSON layout (``schema_version`` 1), keys sorted::

    {"schema_version": 1, "kind": "cgprof.run", "task": "train", "model": "mlp",
     "batch": 32, ..., "modes": {"eager": {...}, "graph": {...}},
     "speedup": 8.1, "speedup_mean": 8.1, "speedup_p50": 8.3, "loss_max_rel_diff": 2e-07}

Per mode (:class:`ModeResult`): ``mean_ms``/``p50_ms``/``p99_ms``/``min_ms``/``max_ms`` are
host wall times per measured step (train) or per request (infer) in milliseconds;
``throughput_per_s`` is samples per second; graph counters are 0 for eager runs; ``losses``
(train) holds the loss of every step, warm-up included, in step order.
``speedup`` is eager over graph of the mean step time (train) or of the p50 request latency
(infer); it and ``loss_max_rel_diff`` (the largest relative difference between the two loss
curves) are present only when both modes ran.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class ModeResult:
    """One mode's measurements. Times in milliseconds, throughput in samples per second."""

    mode: str
    steps: int
    warmup: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    throughput_per_s: float
    captures: int = 0
    replays: int = 0
    recaptures: int = 0
    fallbacks: int = 0
    evictions: int = 0
    capture_ms: float = 0.0
    fallback_reason: str | None = None
    losses: list[float] | None = None


@dataclass
class RunResult:
    """Everything one `cgprof run` measured, with the setup that produced it.

    ``fused_optimizer``, ``cudnn_benchmark`` and ``channels_last`` say which of
    :class:`~cgprof.runners.config.RunConfig`'s settings of the same names took effect
    (each applies on CUDA only, to both modes alike).
    """

    task: str
    model: str
    batch: int
    steps: int
    warmup: int
    device: str
    device_name: str
    torch_version: str
    seed: int
    size: str
    optimizer: str | None
    variable: bool
    capturable_eager: bool = False
    fused_optimizer: bool = False
    cudnn_benchmark: bool = False
    channels_last: bool = False
    modes: dict[str, ModeResult] = field(default_factory=dict)

    @property
    def speedup_mean(self) -> float | None:
        """Eager mean step time over graphed mean step time; None unless both ran."""
        if "eager" not in self.modes or "graph" not in self.modes:
            return None
        return self.modes["eager"].mean_ms / self.modes["graph"].mean_ms

    @property
    def speedup_p50(self) -> float | None:
        """Eager p50 over graphed p50 (step time or request latency); None unless both ran."""
        if "eager" not in self.modes or "graph" not in self.modes:
            return None
        return self.modes["eager"].p50_ms / self.modes["graph"].p50_ms

    @property
    def speedup(self) -> float | None:
        """The headline ratio: mean step time for training, p50 latency for inference."""
        return self.speedup_mean if self.task == "train" else self.speedup_p50

    @property
    def loss_max_rel_diff(self) -> float | None:
        """Largest |eager - graph| / |eager| over the loss curves; None unless both trained."""
        eager = self.modes.get("eager")
        graph = self.modes.get("graph")
        if eager is None or graph is None or eager.losses is None or graph.losses is None:
            return None
        return max_rel_diff(eager.losses, graph.losses)

    def to_dict(self) -> dict[str, Any]:
        """The JSON payload (see the module docstring for its layout)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "modes"}
        out["modes"] = {name: dataclasses.asdict(m) for name, m in self.modes.items()}
        out["schema_version"] = SCHEMA_VERSION
        out["kind"] = "cgprof.run"
        out["speedup"] = self.speedup
        out["speedup_mean"] = self.speedup_mean
        out["speedup_p50"] = self.speedup_p50
        out["loss_max_rel_diff"] = self.loss_max_rel_diff
        return out

    def to_json(self) -> str:
        """Deterministic JSON text (sorted keys, two-space indent, trailing newline)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"


def max_rel_diff(reference: list[float], other: list[float]) -> float:
    """Largest ``|other - reference| / |reference|`` over two equally long sequences."""
    if len(reference) != len(other):
        raise ValueError(f"loss curves differ in length: {len(reference)} vs {len(other)}")
    worst = 0.0
    for a, b in zip(reference, other, strict=True):
        if a != a or b != b:  # NaN on either side: no agreement to speak of
            return float("nan")
        worst = max(worst, abs(b - a) / max(abs(a), 1e-12))
    return worst


def format_table(result: RunResult) -> str:
    """The text `cgprof run` prints: a header line, one row per mode, a verdict line."""
    what = "step" if result.task == "train" else "request"
    batch = f"batch 1..{result.batch}" if result.variable else f"batch {result.batch}"
    extra = f", {result.optimizer}" if result.optimizer else ""
    lines = [
        f"cgprof run: {result.task} {result.model} ({result.size}{extra}), {batch}, "
        f"{result.steps} {what}s after {result.warmup} warm-up, "
        f"{result.device} ({result.device_name}), torch {result.torch_version}, "
        f"seed {result.seed}",
        "",
    ]
    header = (
        f"{'mode':<6} {'mean_ms':>9} {'p50_ms':>9} {'p99_ms':>9} {'samples/s':>11} "
        f"{'captures':>8} {'replays':>8} {'fallbacks':>9}"
    )
    lines.append(header)
    for name, m in result.modes.items():
        graph = name == "graph"
        counts = (
            f"{m.captures:>8d} {m.replays:>8d} {m.fallbacks:>9d}"
            if graph
            else f"{'-':>8} {'-':>8} {'-':>9}"
        )
        lines.append(
            f"{name:<6} {m.mean_ms:>9.3f} {m.p50_ms:>9.3f} {m.p99_ms:>9.3f} "
            f"{m.throughput_per_s:>11.1f} {counts}"
        )
    lines.append("")
    if result.speedup is not None:
        basis = "mean step time" if result.task == "train" else "p50 request latency"
        verdict = f"graph speedup over eager: {result.speedup:.2f}x ({basis})"
        diff = result.loss_max_rel_diff
        if diff is not None:
            verdict += f"; loss curves agree within {diff:.1e} relative"
        lines.append(verdict)
    graph_run = result.modes.get("graph")
    if graph_run is not None and graph_run.fallback_reason:
        lines.append(f"graph mode fell back to eager: {graph_run.fallback_reason}")
    return "\n".join(lines).rstrip("\n") + "\n"
