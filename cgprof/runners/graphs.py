"""CUDA Graph capture and replay done the way it should be, for your own training and serving code.

Training, one graph per input shape holding the *whole* step::

    step = GraphedTrainStep(model, nn.CrossEntropyLoss(), optimizer)   # AdamW(capturable=True)
    for i, (x, y) in enumerate(loader):
        with mark.step(i):
            loss = step(x, y, step_index=i)      # eager warm-up, then capture, then replay

Inference, one graph per (bucketed) batch shape::

    serve = GraphedInference(model, buckets=[1, 2, 4, 8, 16])
    out = serve(x)          # x padded up to its bucket; ``out`` is a view of the static output

What the classes do, and why:

- **Warm-up before capture.** ``warmup_iters`` eager iterations run on a side stream before a
  shape is captured (cuBLAS/cuDNN handles, workspaces, optimizer state and lazily created
  buffers must exist before capture: anything first allocated inside a capture is allocated
  but never *initialised*, because capture records kernels without running them). For
  training these warm-up iterations are real steps on the caller's data.
- **Static buffers.** Each graph reads its inputs from tensors allocated once; every call
  copies the caller's data in with ``copy_`` (NVTX range ``copy_in``), never rebinding them,
  because the graph baked in their addresses.
- **Whole step in one graph.** ``zero_grad(set_to_none=True)``, forward, loss, backward and
  ``optimizer.step()`` are all captured: setting grads to None inside the capture makes
  backward allocate them from the graph's pool, so every replay writes the same gradient
  buffers. The loss is the graph's static output tensor: read it (``.item()``, ``copy_``)
  before the next call overwrites it.
- **One memory pool per model.** Every graph of one instance is captured into one pool
  (``torch.cuda.graph_pool_handle()``); graphs of one model run one after another on one
  stream, so they can share it. Pass ``pool=`` to share it with another instance.
- **Random numbers.** PyTorch registers the default CUDA generator with each capture and
  advances its offset on every replay by what the captured kernels consume, so dropout in a
  replayed step draws exactly what the same eager step would have drawn.
- **Fallback.** If a capture fails (an op that cannot be captured, a host sync such as
  ``.item()`` or ``torch.cuda.synchronize()`` inside the region, out of memory), the reason
  is logged once (logger ``cgprof.runners``), the failed graph is dropped, gradients are
  reset to None (nothing captured ever ran), and that call and every later one run eagerly.
  A capture records work but does not execute it, so the model and optimizer are exactly as
  they were before the failed attempt.
- **Counters.** :class:`GraphStats` counts calls, captures, replays, re-captures (captures
  after the first: each one was forced by a shape the cache did not hold), fallbacks and
  evictions; a warning is logged once when captures come so often that they cannot pay for
  themselves (see ``min_calls_per_capture``).

``docs/runners.md`` lists what can and cannot be captured (data-dependent control flow,
``.item()``, host-device copies, learning-rate schedules, DDP).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from cgprof import mark
from cgprof.errors import RunnerError
from cgprof.runners.capture import (
    CaptureBackend,
    CudaGraphBackend,
    GraphStats,
    _first_line,
    bucket_for,
    check_buckets,
    static_buffer,
)

log = logging.getLogger("cgprof.runners")

#: Calls after which the re-capture rate is judged (earlier captures are ordinary warm-up).
THRASH_MIN_CALLS = 50

def _check_capturable(optimizer: torch.optim.Optimizer) -> None:
    for group in optimizer.param_groups:
        if group.get("capturable") is False:
            raise RunnerError(
                f"{type(optimizer).__name__} keeps its step count on the host, which capture "
                "would freeze: create it with capturable=True"
            )


class EagerTrainStep:
    """A plain eager training step with NVTX ranges ``forward``, ``backward``, ``optimizer``.

    ``forward`` covers the model and the loss; ``optimizer`` covers ``optimizer.step()`` and
    ``zero_grad(set_to_none=True)`` (no kernels: gradients are dropped, not zeroed). Each
    range carries the step index as its payload. Returns the detached loss.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        loss_log: torch.Tensor | None = None,
    ) -> None:
        self.model = model.train()
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self._calls = 0
        # The same two kernels GraphedTrainStep replays to log its loss, so that an eager
        # and a graphed run of one workload execute the same GPU work per step.
        self.loss_log = loss_log
        self._slot = (
            torch.zeros(1, dtype=torch.long, device=loss_log.device)
            if loss_log is not None else None
        )

    def __call__(
        self, inputs: torch.Tensor, targets: torch.Tensor, step_index: int | None = None
    ) -> torch.Tensor:
        idx = self._calls if step_index is None else step_index
        self._calls += 1
        with mark.region("forward", idx):
            loss = self.loss_fn(self.model(inputs), targets)
        with mark.region("backward", idx):
            loss.backward()
        with mark.region("optimizer", idx):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        if self.loss_log is not None and self._slot is not None:
            if self._calls > len(self.loss_log):
                raise RunnerError(f"loss_log is full ({len(self.loss_log)} slots, one per call)")
            _log_loss(self.loss_log, self._slot, loss.detach())
        return loss.detach()


def _log_loss(log: torch.Tensor, slot: torch.Tensor, loss: torch.Tensor) -> None:
    """Write ``loss`` at ``log[slot]`` and advance ``slot``, all on the GPU (no sync)."""
    log.index_copy_(0, slot, loss.reshape(1).to(log.dtype))
    slot.add_(1)


class EagerInference:
    """Eager inference under ``eval()`` and ``torch.no_grad()``, NVTX range ``forward``."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model.eval()
        self._calls = 0

    def __call__(self, inputs: torch.Tensor, step_index: int | None = None) -> torch.Tensor:
        idx = self._calls if step_index is None else step_index
        self._calls += 1
        with torch.no_grad(), mark.region("forward", idx):
            return self.model(inputs)


@dataclass
class _Entry:
    """One cached graph: its static buffers, static outputs and what must outlive it."""

    static_inputs: torch.Tensor
    static_targets: torch.Tensor | None = None
    graph: Any = None
    static_out: torch.Tensor | None = None
    warmups_done: int = 0
    keepalive: list[Any] = field(default_factory=list)


class _GraphCache:
    """Shape-keyed graph cache with LRU eviction, counters, fallback and the thrash warning."""

    def __init__(
        self,
        backend: CaptureBackend | None,
        device: torch.device,
        *,
        max_graphs: int,
        min_calls_per_capture: int,
        pool: Any,
    ) -> None:
        if max_graphs < 1:
            raise RunnerError(f"max_graphs must be at least 1 (got {max_graphs})")
        self.backend: CaptureBackend = (
            backend if backend is not None else CudaGraphBackend(device, pool)
        )
        self.max_graphs = max_graphs
        self.min_calls_per_capture = min_calls_per_capture
        self.stats = GraphStats()
        self._entries: OrderedDict[Any, _Entry] = OrderedDict()
        # The replay fast path: the input signature of the last call that replayed (shapes
        # as torch.Size, dtypes) and its entry, which is already the most recently used.
        # A call with the same signature skips the cache lookup and the checks that only a
        # new shape, a capture or a fallback needs; anything else takes the full path.
        self._hot_key: Any = None
        self._hot_entry: _Entry | None = None
        self._warned_thrash = False
        self._logged: set[str] = set()

    @property
    def graphs(self) -> dict[Any, Any]:
        """The captured graphs by shape key (a snapshot; entries not yet captured are left out)."""
        return {k: e.graph for k, e in self._entries.items() if e.graph is not None}

    def _entry(self, key: Any, make: Callable[[], _Entry]) -> _Entry:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        while len(self._entries) >= self.max_graphs:
            _, evicted = self._entries.popitem(last=False)
            if evicted is self._hot_entry:
                self._hot_key = self._hot_entry = None
            self.stats.evictions += 1
        entry = make()
        self._entries[key] = entry
        return entry

    def _log_once(self, message: str) -> None:
        if message not in self._logged:
            self._logged.add(message)
            log.warning("cgprof: %s", message)

    def _abandon(self, exc: BaseException, key: Any) -> None:
        """A capture failed: drop every graph, remember why, say so once."""
        reason = _first_line(exc)
        self.stats.fallback_reason = f"capture failed for input shape {key[0]}: {reason}"
        self._entries.clear()
        self._hot_key = self._hot_entry = None
        self._log_once(f"CUDA graph {self.stats.fallback_reason}; running eagerly from now on")

    def _captured(self, started_ns: int) -> None:
        self.stats.capture_ms += (time.perf_counter_ns() - started_ns) / 1e6
        self.stats.captures += 1
        if self.stats.captures > 1:
            self.stats.recaptures += 1
        calls = self.stats.calls
        if (
            not self._warned_thrash
            and self.stats.recaptures > 0
            and calls >= THRASH_MIN_CALLS
            and self.stats.captures * self.min_calls_per_capture > calls
        ):
            self._warned_thrash = True
            per = self.stats.capture_ms / self.stats.captures
            log.warning(
                "cgprof: %d CUDA graph captures in %d calls (input shapes keep changing; "
                "%.1f ms per capture): re-capturing this often cancels what replay saves; "
                "pad inputs to a few bucket sizes or keep shapes fixed",
                self.stats.captures,
                calls,
                per,
            )


class GraphedTrainStep(_GraphCache):
    """A whole training step (forward, loss, backward, optimizer) captured once per input shape.

    Call it like a training step: ``loss = step(inputs, targets, step_index=i)``. For each new
    (inputs, targets) shape the first ``warmup_iters`` calls are eager steps on a side stream
    (NVTX ``warmup`` around each), the next call captures the step (NVTX ``capture``) and
    replays it, and later calls copy the batch into the static buffers (``copy_in``) and
    replay (``replay``). The returned loss is the graph's static loss tensor: it is
    overwritten by the next call.

    Args:
        model, loss_fn, optimizer: the usual trio; the optimizer must not keep host-side
            step state (AdamW/Adam: ``capturable=True``; SGD is fine as it is).
        warmup_iters: eager steps per new shape before capture (at least 1; 3 is
            PyTorch's usual advice, 11 under DDP).
        max_graphs: graphs kept at once; the least recently used is evicted beyond that.
        min_calls_per_capture: warn once when, after ``THRASH_MIN_CALLS`` calls, there are
            fewer calls than this per capture.
        backend: how to capture; default :class:`CudaGraphBackend` on the model's device.
        pool: a ``torch.cuda.graph_pool_handle()`` to share with other graphs of this model.
        loss_log: optional 1-D float tensor on the model's device; call ``k`` (counting
            from 0, warm-up and fallback calls included) writes its loss into
            ``loss_log[k]``. The write and the advance of a device-side slot counter are
            part of the captured step, so a replayed step logs its loss with no extra
            launch and no host sync, and nothing but the input copies runs between
            replays; read the curve once at the end (``loss_log.tolist()``). A call past
            the last slot raises :class:`~cgprof.errors.RunnerError` before doing
            anything; :meth:`rewind_loss_log` starts again at slot 0.

    Shapes are matched exactly: padding a training batch would change the loss, so there
    is no bucketing here. The learning rate, if a Python float, is baked into the graph.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        *,
        warmup_iters: int = 3,
        max_graphs: int = 4,
        min_calls_per_capture: int = 20,
        backend: CaptureBackend | None = None,
        pool: Any = None,
        loss_log: torch.Tensor | None = None,
    ) -> None:
        if warmup_iters < 1:
            raise RunnerError(
                f"warmup_iters must be at least 1 (got {warmup_iters}): optimizer state and "
                "lazily created buffers must exist before capture"
            )
        device = next(model.parameters()).device
        if loss_log is not None and (
            loss_log.dim() != 1 or not loss_log.is_floating_point() or loss_log.device != device
        ):
            raise RunnerError(
                f"loss_log must be a 1-D floating-point tensor on the model's device ({device}); "
                f"got {tuple(loss_log.shape)} {loss_log.dtype} on {loss_log.device}"
            )
        if device.type == "cuda":
            _check_capturable(optimizer)
        super().__init__(
            backend,
            device,
            max_graphs=max_graphs,
            min_calls_per_capture=min_calls_per_capture,
            pool=pool,
        )
        self.model = model.train()
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.warmup_iters = warmup_iters
        self._eager = EagerTrainStep(model, loss_fn, optimizer)
        self.loss_log = loss_log
        # the next slot of loss_log, on the device so that a replay advances it; the host
        # counts the same calls to refuse one past the end (an out-of-range index_copy_
        # would be a device-side assert, fatal to the CUDA context)
        self._slot = (
            torch.zeros(1, dtype=torch.long, device=device) if loss_log is not None else None
        )
        self._slots_used = 0

    def rewind_loss_log(self) -> None:
        """Make the next call write ``loss_log[0]`` again (one small kernel, outside graphs)."""
        if self._slot is not None:
            self._slot.zero_()
            self._slots_used = 0

    def _record(self, loss: torch.Tensor) -> None:
        # captured with the step: each replay writes its loss and advances the slot
        if self.loss_log is not None and self._slot is not None:
            _log_loss(self.loss_log, self._slot, loss)

    def __call__(
        self, inputs: torch.Tensor, targets: torch.Tensor, step_index: int | None = None
    ) -> torch.Tensor:
        if self.loss_log is not None:
            if self._slots_used >= len(self.loss_log):
                raise RunnerError(
                    f"loss_log is full ({len(self.loss_log)} slots, one per call): pass a "
                    "longer one, or call rewind_loss_log() after reading it"
                )
            self._slots_used += 1
        stats = self.stats
        idx = stats.calls if step_index is None else step_index
        stats.calls += 1
        signature = (inputs.shape, inputs.dtype, targets.shape, targets.dtype)
        if signature == self._hot_key:
            # the shape replayed last time: copy in and replay, nothing else (see _GraphCache)
            entry = self._hot_entry
            assert entry is not None and entry.static_targets is not None
            # bare push/pop instead of `with mark.region`: a third of the cost per range
            mark.push("copy_in", idx)
            try:
                entry.static_inputs.copy_(inputs)
                entry.static_targets.copy_(targets)
            finally:
                mark.pop()
            mark.push("replay", idx)
            try:
                self.backend.replay(entry.graph)
            finally:
                mark.pop()
            stats.replays += 1
            return entry.static_out  # type: ignore[return-value]
        if self.stats.fallback_reason is not None:
            self.stats.fallbacks += 1
            return self._eager_step(inputs, targets, idx)
        key = (tuple(inputs.shape), inputs.dtype, tuple(targets.shape), targets.dtype)
        entry = self._entry(
            key,
            lambda: _Entry(
                static_inputs=static_buffer(inputs), static_targets=static_buffer(targets)
            ),
        )
        assert entry.static_targets is not None
        with mark.region("copy_in", idx):
            entry.static_inputs.copy_(inputs)
            entry.static_targets.copy_(targets)
        if entry.graph is None:
            if entry.warmups_done < self.warmup_iters:
                entry.warmups_done += 1
                self.stats.warmup_calls += 1
                sx, sy = entry.static_inputs, entry.static_targets
                with mark.region("warmup", idx):
                    return self.backend.run_on_side_stream(lambda: self._eager_step(sx, sy, idx))
            if not self._capture(key, entry, idx):
                self.stats.fallbacks += 1
                return self._eager_step(inputs, targets, idx)
            self._hot_key, self._hot_entry = signature, entry
            if self.backend.capture_runs_work:
                assert entry.static_out is not None
                return entry.static_out
        self._hot_key, self._hot_entry = signature, entry
        with mark.region("replay", idx):
            self.backend.replay(entry.graph)
        self.stats.replays += 1
        assert entry.static_out is not None
        return entry.static_out

    def _eager_step(self, inputs: torch.Tensor, targets: torch.Tensor, idx: int) -> torch.Tensor:
        # After a capture the parameters' .grad are that graph's static gradient buffers;
        # an eager backward would accumulate into them, so drop them first (no kernels).
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._eager(inputs, targets, idx)
        self._record(loss)
        return loss

    def _capture(self, key: Any, entry: _Entry, idx: int) -> bool:
        sx, sy = entry.static_inputs, entry.static_targets
        assert sy is not None

        def whole_step() -> torch.Tensor:
            # set_to_none inside the capture: backward then allocates the gradients from
            # the graph's pool, and every replay writes the same gradient buffers
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.loss_fn(self.model(sx), sy)
            loss.backward()
            self.optimizer.step()
            self._record(loss.detach())
            return loss.detach()

        started = time.perf_counter_ns()
        try:
            with mark.region("capture", self.stats.captures + 1):
                graph, static_loss = self.backend.capture(whole_step)
        except Exception as exc:  # unsupported op, sync in the region, OOM: see _abandon
            self._abandon(exc, key)
        if self.stats.fallback_reason is not None:
            # outside the except block, so the traceback (and the failed graph) is gone
            self.optimizer.zero_grad(set_to_none=True)
            self.backend.recover()
            return False
        entry.graph = graph
        entry.static_out = static_loss
        # the gradients live in the graph's pool and are rewritten by every replay; keep
        # them referenced so the pool never hands their memory to another graph
        entry.keepalive = [p.grad for p in self.model.parameters() if p.grad is not None]
        self._captured(started)
        return True


class GraphedInference(_GraphCache):
    """Inference through CUDA graphs, one per (bucketed) input shape, under ``eval()`` + no_grad.

    ``out = serve(x, step_index=i)``: ``x`` is copied into the static input of its shape's
    graph (``copy_in``), padded with zero rows up to its bucket when ``buckets`` is given, the
    graph is replayed (``replay``) and the first ``len(x)`` rows of the static output are
    returned -- a view that the next call overwrites (clone it to keep it). The first call of
    a shape runs ``warmup_iters`` eager forwards on a side stream (``warmup``), then captures
    (``capture``) and replays.

    Args:
        model: the model (put in ``eval()`` mode); it must return one tensor whose first
            dimension is the batch, and treat samples independently (padding rows must not
            change the other rows' results: no batch statistics).
        buckets: batch sizes to capture; a request is padded up to the smallest bucket that
            holds it, and one larger than every bucket runs eagerly (counted as a fallback).
            None: one graph per exact shape.
        warmup_iters, max_graphs, min_calls_per_capture, backend, pool: as for
            :class:`GraphedTrainStep`.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        buckets: Sequence[int] | None = None,
        warmup_iters: int = 2,
        max_graphs: int = 16,
        min_calls_per_capture: int = 20,
        backend: CaptureBackend | None = None,
        pool: Any = None,
    ) -> None:
        if warmup_iters < 1:
            raise RunnerError(f"warmup_iters must be at least 1 (got {warmup_iters})")
        device = next(model.parameters()).device
        self.buckets = check_buckets(buckets) if buckets is not None else None
        if self.buckets is not None and len(self.buckets) > max_graphs:
            raise RunnerError(
                f"{len(self.buckets)} buckets but max_graphs={max_graphs}: graphs would be "
                "evicted and re-captured in turn; raise max_graphs or use fewer buckets"
            )
        super().__init__(
            backend,
            device,
            max_graphs=max_graphs,
            min_calls_per_capture=min_calls_per_capture,
            pool=pool,
        )
        self.model = model.eval()
        self.warmup_iters = warmup_iters
        self._eager = EagerInference(model)

    def __call__(self, inputs: torch.Tensor, step_index: int | None = None) -> torch.Tensor:
        stats = self.stats
        idx = stats.calls if step_index is None else step_index
        stats.calls += 1
        signature = (inputs.shape, inputs.dtype)
        if signature == self._hot_key:
            # the request shape replayed last time, unpadded: copy in and replay, nothing else
            entry = self._hot_entry
            assert entry is not None
            mark.push("copy_in", idx)
            try:
                entry.static_inputs.copy_(inputs)
            finally:
                mark.pop()
            mark.push("replay", idx)
            try:
                self.backend.replay(entry.graph)
            finally:
                mark.pop()
            stats.replays += 1
            return entry.static_out  # type: ignore[return-value]
        if self.stats.fallback_reason is not None:
            self.stats.fallbacks += 1
            return self._eager(inputs, idx)
        n = int(inputs.shape[0])
        rows: int | None = n
        if self.buckets is not None:
            rows = bucket_for(n, self.buckets)
            if rows is None:
                self._log_once(
                    f"batch {n} is larger than the largest bucket ({self.buckets[-1]}); "
                    "such batches run eagerly"
                )
                self.stats.fallbacks += 1
                return self._eager(inputs, idx)
        shape = (rows, *inputs.shape[1:])
        key = (shape, inputs.dtype)
        entry = self._entry(
            key,
            lambda: _Entry(static_inputs=static_buffer(inputs, rows)),
        )
        with mark.region("copy_in", idx):
            if n == rows:
                entry.static_inputs.copy_(inputs)
            else:
                entry.static_inputs[:n].copy_(inputs)
                entry.static_inputs[n:].zero_()
        if entry.graph is None:
            if not self._capture(key, entry, idx):
                self.stats.fallbacks += 1
                return self._eager(inputs, idx)
            if self.backend.capture_runs_work:
                self._remember(signature, entry, n, rows)
                return self._rows(entry, n, rows)
        self._remember(signature, entry, n, rows)
        with mark.region("replay", idx):
            self.backend.replay(entry.graph)
        self.stats.replays += 1
        return self._rows(entry, n, rows)

    def _remember(self, signature: Any, entry: _Entry, n: int, rows: int | None) -> None:
        # only exact-bucket requests take the fast path: a padded one also zeroes the
        # padding rows and returns a slice
        if n == rows:
            self._hot_key, self._hot_entry = signature, entry
        else:
            self._hot_key = self._hot_entry = None

    @staticmethod
    def _rows(entry: _Entry, n: int, rows: int | None) -> torch.Tensor:
        assert entry.static_out is not None
        return entry.static_out if n == rows else entry.static_out[:n]

    def _capture(self, key: Any, entry: _Entry, idx: int) -> bool:
        sx = entry.static_inputs

        def forward() -> torch.Tensor:
            with torch.no_grad():
                return self.model(sx)

        def warm() -> None:
            for _ in range(self.warmup_iters):
                self._eager(sx, idx)

        started = time.perf_counter_ns()
        try:
            with mark.region("warmup", idx):
                self.backend.run_on_side_stream(warm)
            with mark.region("capture", self.stats.captures + 1):
                graph, out = self.backend.capture(forward)
        except Exception as exc:  # unsupported op, sync in the region, OOM: see _abandon
            self._abandon(exc, key)
        if self.stats.fallback_reason is not None:
            self.backend.recover()
            return False
        if not isinstance(out, torch.Tensor):
            raise RunnerError(
                f"GraphedInference needs a model that returns one tensor, got {type(out).__name__}"
            )
        entry.graph = graph
        entry.static_out = out
        self._captured(started)
        return True
