"""`cgprof run serve`: what is asked (ServeConfig), what was measured (ServeResult), no torch.

One *level* is one load: a number of closed-loop clients, or an open-loop arrival rate.
Each mode (eager, graph) is run at every level. Per level and mode, :class:`LevelResult`
holds (the unit is in each name):

- ``qps``: requests answered per second in the measured window (warm-up left out);
- ``p50_ms``, ``p90_ms``, ``p99_ms``: request latency, from when the request was due to when
  its answer reached the client, so queueing and batching waits are included (numpy
  linear-interpolation percentiles over requests sent in the measured window);
- ``mean_batch``: rows per batch the server ran; ``mean_bucket``: rows actually computed
  (graph mode pads each batch up to its bucket; eager runs the batch as it is);
- ``gpu_busy_pct``: sum over batches of the CUDA-event time around each batch's GPU work,
  over the window's wall time (None on the CPU, where there are no CUDA events);
- ``host_ms_per_batch``: host time to gather, copy in and *issue* a batch (until the
  forward or replay call returns, before waiting for its results); ``batch_ms``: the whole
  batch, until its answers are sent;
- ``loadgen_cpu_pct``, ``loadgen_lag_ms``: the load generator's own overhead;
- ``shed``, ``lost``, ``duplicates``: open-loop arrivals dropped, requests never answered,
  answers given twice (the last two must be 0).

The graph gain is the highest ``qps`` each mode sustains with ``p99_ms`` within
``slo_ms``, graph over eager.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from cgprof.errors import RunnerError
from cgprof.runners.config import DEVICES, MODELS, MODES, SIZES

SCHEMA_VERSION = 1
KIND = "cgprof.serve"


def _choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise RunnerError(f"unknown {what} {value!r} (choose from {', '.join(choices)})")


@dataclass(frozen=True)
class ServeConfig:
    """One `cgprof run serve`.

    Attributes:
        model, size, device, seed: as for :class:`~cgprof.runners.config.RunConfig`.
        mode: ``eager``, ``graph`` or ``both``; None: ``both`` on CUDA, ``eager`` on CPU.
        clients: closed-loop levels (number of concurrent clients each).
        rates_qps: open-loop levels (Poisson arrival rates); when given, ``clients`` is unused.
        max_batch: most requests per batch; graph buckets are the powers of two below it
            and it (:func:`~cgprof.runners.capture.default_buckets`).
        max_wait_ms: how long the server waits, after the first request of a batch, for more.
        duration_s, warmup_s: measured and unmeasured seconds of load per level.
        think_ms: closed loop: a client's pause between an answer and its next request.
        slo_ms: latency budget for the graph gain (p99 within it).
        keep_rows: keep every answer and batch (tests check each client got its own rows).
    """

    model: str
    clients: tuple[int, ...] = (1, 4, 16, 64)
    rates_qps: tuple[float, ...] | None = None
    mode: str | None = None
    max_batch: int = 32
    max_wait_ms: float = 1.0
    duration_s: float = 3.0
    warmup_s: float = 1.0
    think_ms: float = 0.0
    slo_ms: float = 50.0
    device: str | None = None
    seed: int = 0
    size: str = "full"
    keep_rows: bool = False

    def resolved(
        self, cuda_available: bool | None = None, *, allow_cpu_graphs: bool = False
    ) -> ServeConfig:
        """Check every field and fill in defaults; raise RunnerError on the first problem."""
        _choice("model", self.model, MODELS)
        _choice("size", self.size, SIZES)
        if self.mode is not None:
            _choice("mode", self.mode, MODES)
        if self.device is not None:
            _choice("device", self.device, DEVICES)
        if self.rates_qps is not None:
            if not self.rates_qps or any(not (r > 0) for r in self.rates_qps):
                raise RunnerError(f"rates must be positive requests/s (got {list(self.rates_qps)})")
        elif not self.clients or any(c < 1 for c in self.clients):
            raise RunnerError(f"client counts must be at least 1 (got {list(self.clients)})")
        if self.max_batch < 1:
            raise RunnerError(f"max batch must be at least 1 (got {self.max_batch})")
        for name, value in (("duration", self.duration_s), ("slo", self.slo_ms)):
            if not value > 0:
                raise RunnerError(f"{name} must be positive (got {value})")
        for name, value in (
            ("warmup", self.warmup_s),
            ("think time", self.think_ms),
            ("max wait", self.max_wait_ms),
        ):
            if value < 0:
                raise RunnerError(f"{name} must be 0 or more (got {value})")
        device = self.device
        if device is None and cuda_available is not None:
            device = "cuda" if cuda_available else "cpu"
        mode = self.mode
        if mode is None and device is not None:
            mode = "both" if device == "cuda" else "eager"
        if device == "cpu" and mode in ("graph", "both") and not allow_cpu_graphs:
            raise RunnerError(
                f"mode {mode!r} needs CUDA graphs, which need a CUDA GPU, and the device is "
                "'cpu': use mode 'eager' on the CPU, or device 'cuda' on a machine with a GPU"
            )
        if device == "cuda" and cuda_available is False:
            raise RunnerError(
                "device 'cuda' asked for, but torch sees no CUDA GPU here "
                "(torch.cuda.is_available() is False): use device 'cpu' with mode 'eager'"
            )
        return dataclasses.replace(self, mode=mode, device=device)

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes to run, eager first."""
        if self.mode is None:
            raise RunnerError("mode is not resolved yet; call resolved() first")
        return ("eager", "graph") if self.mode == "both" else (self.mode,)

    @property
    def open_loop(self) -> bool:
        return self.rates_qps is not None

    @property
    def levels(self) -> tuple[float, ...]:
        """Client counts (closed loop) or arrival rates (open loop), in the order given."""
        return tuple(self.rates_qps) if self.rates_qps is not None else tuple(self.clients)


@dataclass
class LevelResult:
    """One mode at one level; the fields are described in the module docstring."""

    mode: str
    level: float
    requests: int
    batches: int
    qps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_batch: float
    mean_bucket: float
    gpu_busy_pct: float | None
    host_ms_per_batch: float
    batch_ms: float
    loadgen_cpu_pct: float
    loadgen_lag_ms: float
    shed: int = 0
    lost: int = 0
    duplicates: int = 0
    interrupted: bool = False


@dataclass
class ServeResult:
    """A whole `cgprof run serve`: the setup and every (mode, level) measured."""

    model: str
    size: str
    device: str
    device_name: str
    torch_version: str
    open_loop: bool
    max_batch: int
    buckets: list[int]
    max_wait_ms: float
    duration_s: float
    warmup_s: float
    think_ms: float
    slo_ms: float
    seed: int
    levels: list[LevelResult] = field(default_factory=list)
    graph_stats: dict[str, Any] | None = None
    interrupted: bool = False

    def by_mode(self) -> dict[str, list[LevelResult]]:
        out: dict[str, list[LevelResult]] = {}
        for lv in self.levels:
            out.setdefault(lv.mode, []).append(lv)
        return out

    def best_qps(self, mode: str) -> float | None:
        """Highest QPS of ``mode`` at a level whose p99 latency is within the SLO."""
        ok = [lv.qps for lv in self.by_mode().get(mode, []) if lv.p99_ms <= self.slo_ms]
        return max(ok) if ok else None

    @property
    def graph_gain(self) -> float | None:
        """Graph over eager in the highest QPS sustained within the SLO; None if not both."""
        eager, graph = self.best_qps("eager"), self.best_qps("graph")
        if eager is None or graph is None or eager <= 0:
            return None
        return graph / eager

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN (a level that answered nothing) becomes None."""
        payload = asdict(self)
        for lv in payload["levels"]:
            for k, v in lv.items():
                if isinstance(v, float) and math.isnan(v):
                    lv[k] = None
        payload["schema_version"] = SCHEMA_VERSION
        payload["kind"] = KIND
        payload["best_qps"] = {m: self.best_qps(m) for m in self.by_mode()}
        payload["graph_gain"] = self.graph_gain
        return payload

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"


def _level_label(result: ServeResult, level: float) -> str:
    return f"{level:g}/s" if result.open_loop else f"{int(level)}"


def format_serve_table(result: ServeResult) -> str:
    """The text report: one row per (level, mode), eager and graph side by side per level."""
    kind = "open loop (Poisson)" if result.open_loop else "closed loop"
    lines = [
        f"cgprof run serve: {result.model} ({result.size}), {kind}, max batch "
        f"{result.max_batch} (buckets {','.join(map(str, result.buckets))}), max wait "
        f"{result.max_wait_ms:g} ms, {result.duration_s:g} s per level after "
        f"{result.warmup_s:g} s warm-up, {result.device} ({result.device_name}), "
        f"torch {result.torch_version}, seed {result.seed}",
        "",
        f"{'rate' if result.open_loop else 'clients':>8} mode        qps   p50_ms   p90_ms"
        "   p99_ms  batch  bucket  gpu_busy  host_ms  batch_ms  gen_cpu",
    ]
    order = sorted({(lv.level, i) for i, lv in enumerate(result.levels)})
    for _, i in order:
        lv = result.levels[i]
        busy = "n/a" if lv.gpu_busy_pct is None else f"{lv.gpu_busy_pct:.1f}%"
        flag = " (interrupted)" if lv.interrupted else ""
        lines.append(
            f"{_level_label(result, lv.level):>8} {lv.mode:<5} {lv.qps:>10.1f} {lv.p50_ms:>8.3f}"
            f" {lv.p90_ms:>8.3f} {lv.p99_ms:>8.3f} {lv.mean_batch:>6.2f} {lv.mean_bucket:>7.2f}"
            f" {busy:>9} {lv.host_ms_per_batch:>8.3f} {lv.batch_ms:>9.3f}"
            f" {lv.loadgen_cpu_pct:>7.1f}%{flag}"
        )
    lines.append("")
    modes = list(result.by_mode())
    for m in modes:
        best = result.best_qps(m)
        text = f"{best:.1f} QPS" if best is not None else "none (no level met it)"
        lines.append(f"{m}: highest QPS with p99 <= {result.slo_ms:g} ms: {text}")
    if len(modes) == 2:
        gain = result.graph_gain
        lines.append(
            f"graph gain at p99 <= {result.slo_ms:g} ms: "
            + (f"{gain:.2f}x" if gain is not None else "n/a (a mode met the budget at no level)")
        )
    bad = [lv for lv in result.levels if lv.lost or lv.duplicates]
    for lv in bad:
        lines.append(
            f"WARNING: {lv.mode} at {_level_label(result, lv.level)}: {lv.lost} requests lost, "
            f"{lv.duplicates} answered twice"
        )
    shed = sum(lv.shed for lv in result.levels)
    if shed:
        lines.append(f"open loop: {shed} arrivals shed (more than 1024 requests in flight)")
    if result.interrupted:
        lines.append("interrupted (Ctrl-C): in-flight requests were answered; later levels not run")
    return "\n".join(lines) + "\n"
