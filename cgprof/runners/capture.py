"""How a graph is captured and replayed, and the buffers and shapes it is captured on.

- :class:`CaptureBackend`, the interface the graphed callables of cgprof.runners.graphs
  capture through, and :class:`CudaGraphBackend`, the real one: warm-up on a side stream,
  capture into one memory pool, replay, recovery after a failed capture (its generator
  offsets restored);
- :class:`GraphStats`, what a graphed callable did (calls, captures, replays, re-captures,
  fallbacks, evictions);
- shape buckets (:func:`default_buckets`, :func:`check_buckets`, :func:`bucket_for`) and
  :func:`static_buffer`, the static input a graph reads, in its caller's memory format;
- :func:`fp32_strict`, true fp32 numerics for comparing eager and graphed results.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

import torch

from cgprof.errors import RunnerError

log = logging.getLogger("cgprof.runners")

T = TypeVar("T")

@dataclass
class GraphStats:
    """What a graphed callable did. ``capture_ms`` is host wall time (warm-up + capture).

    Attributes:
        calls: calls made.
        warmup_calls: training calls served by eager warm-up iterations before a capture.
        captures: graphs captured.
        replays: graph replays.
        recaptures: captures after the first; each was forced by an input shape that the
            cache did not hold (a new shape, or one evicted earlier).
        fallbacks: calls run eagerly because capture failed or the shape is not graphed
            (a batch above the largest bucket).
        evictions: graphs dropped to stay within ``max_graphs``.
        capture_ms: milliseconds spent in pre-capture warm-up (inference) and capture.
        fallback_reason: why graphs were abandoned, if they were.
    """

    calls: int = 0
    warmup_calls: int = 0
    captures: int = 0
    replays: int = 0
    recaptures: int = 0
    fallbacks: int = 0
    evictions: int = 0
    capture_ms: float = 0.0
    fallback_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The counters as a plain dict (for JSON)."""
        return asdict(self)


class CaptureBackend(Protocol):
    """How graphs are captured and replayed. :class:`CudaGraphBackend` is the real one.

    ``capture_runs_work`` says whether :meth:`capture` also executes the work (a CUDA
    capture does not, so the caller replays once after capturing).
    """

    capture_runs_work: bool

    def run_on_side_stream(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` eagerly on the warm-up stream; its outputs are safe on the caller's."""
        ...

    def capture(self, fn: Callable[[], T]) -> tuple[Any, T]:
        """Capture ``fn`` into a graph; return the graph and ``fn``'s (static) outputs."""
        ...

    def replay(self, graph: Any) -> None:
        """Launch ``graph`` once."""
        ...

    def recover(self) -> None:
        """Leave the device usable for eager work after a failed capture."""
        ...


class CudaGraphBackend:
    """``torch.cuda.CUDAGraph`` capture into one shared memory pool, warm-up on a side stream."""

    capture_runs_work = False

    def __init__(self, device: torch.device | str | None = None, pool: Any = None) -> None:
        if not torch.cuda.is_available():
            raise RunnerError(
                "CUDA graphs need a CUDA GPU, and torch sees none here "
                "(torch.cuda.is_available() is False): run the model eagerly instead"
            )
        self.device = torch.device(device if device is not None else "cuda")
        if self.device.type != "cuda":
            raise RunnerError(
                f"CUDA graphs need a CUDA device, and the model is on {self.device}: "
                "move it to 'cuda' or run it eagerly"
            )
        with torch.cuda.device(self.device):
            self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
            self._side = torch.cuda.Stream(self.device)

    @property
    def side_stream(self) -> torch.cuda.Stream:
        """The stream warm-up iterations run on (DDP must be constructed under it)."""
        return self._side

    def run_on_side_stream(self, fn: Callable[[], T]) -> T:
        # Warm-up on a side stream, as PyTorch's capture recipe does: work queued on the
        # side stream waits for what the caller queued before it, and the caller's stream
        # waits for the warm-up before going on.
        current = torch.cuda.current_stream(self.device)
        self._side.wait_stream(current)
        try:
            with torch.cuda.stream(self._side):
                out = fn()
        finally:
            current.wait_stream(self._side)
        if isinstance(out, torch.Tensor):
            # allocated on the side stream, used on the caller's: keep the allocator from
            # handing the block out again before the caller's stream is done with it
            out.record_stream(current)
        return out

    def capture(self, fn: Callable[[], T]) -> tuple[Any, T]:
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph ends the capture in __exit__ even when fn raises, so a failure
        # never leaves the stream capturing; the half-built graph is simply dropped.
        with torch.cuda.device(self.device), torch.cuda.graph(graph, pool=self.pool):
            out = fn()
        return graph, out

    def replay(self, graph: Any) -> None:
        graph.replay()

    def recover(self) -> None:
        # The failed CUDAGraph may still be referenced from the exception's traceback;
        # collect it so its destructor releases the capture's pool routing and RNG state.
        gc.collect()
        if torch.cuda.is_current_stream_capturing():
            raise RunnerError(
                "a failed CUDA graph capture left the stream capturing; cannot continue"
            )
        # A capture registers the default CUDA generator and marks it "capturing"; when the
        # capture fails, PyTorch may never unmark it, and the next eager random op (dropout)
        # then fails with "Offset increment outside graph capture encountered
        # unexpectedly". Probe with one random draw and, if it fails, give the generator a
        # fresh copy of its state (same seed and offset, not capturing). The probe's offset
        # is put back, so the eager random stream continues exactly where it was.
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        gen = torch.cuda.default_generators[index]
        offset = gen.get_offset()
        try:
            torch.empty(1, device=self.device).uniform_()
        except RuntimeError:
            try:
                gen.graphsafe_set_state(gen.clone_state())
                log.debug("cgprof: reset the CUDA generator left capturing by a failed capture")
            except RuntimeError as exc:
                log.warning(
                    "cgprof: could not reset the CUDA generator after a failed capture (%s); "
                    "random ops such as dropout may fail",
                    _first_line(exc),
                )
        finally:
            with contextlib.suppress(RuntimeError):
                gen.set_offset(offset)


def default_buckets(max_batch: int) -> list[int]:
    """Powers of two below ``max_batch``, then ``max_batch`` itself: 12 -> [1, 2, 4, 8, 12]."""
    if max_batch < 1:
        raise RunnerError(f"largest bucket must be at least 1 (got {max_batch})")
    buckets = []
    b = 1
    while b < max_batch:
        buckets.append(b)
        b *= 2
    buckets.append(max_batch)
    return buckets


def check_buckets(buckets: Sequence[int]) -> list[int]:
    """Return ``buckets`` sorted; raise RunnerError unless they are distinct positive ints."""
    out = sorted(int(b) for b in buckets)
    if not out or out[0] < 1 or len(set(out)) != len(out):
        raise RunnerError(f"buckets must be distinct positive batch sizes (got {list(buckets)})")
    return out


def bucket_for(batch: int, buckets: Sequence[int]) -> int | None:
    """The smallest bucket that holds ``batch`` rows (``buckets`` sorted); None if none does."""
    i = bisect.bisect_left(buckets, batch)
    return buckets[i] if i < len(buckets) else None


def static_buffer(like: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """A zeroed tensor shaped like ``like`` (with ``rows`` rows if given), in its memory format.

    A channels-last (NHWC) caller keeps its layout: ``copy_in`` is then one plain
    device-to-device memcpy (same strides on both sides) and the graph is captured on the
    layout eager runs see. A contiguous (NCHW) buffer would turn the copy into a
    transposing kernel and make cuDNN convert the layout back inside every replay.
    """
    shape = (int(like.shape[0]) if rows is None else rows, *like.shape[1:])
    fmt = torch.contiguous_format
    if (
        like.dim() == 4
        and not like.is_contiguous()
        and like.is_contiguous(memory_format=torch.channels_last)
    ):
        fmt = torch.channels_last
    return torch.empty(shape, dtype=like.dtype, device=like.device, memory_format=fmt).zero_()


@contextlib.contextmanager
def fp32_strict() -> Iterator[None]:
    """Within the block: no TF32 in matmuls or convolutions, deterministic cuDNN algorithms.

    For comparing eager and graphed numerics in true fp32 (what the GPU tests do); timing
    runs leave PyTorch's defaults alone.
    """
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        ) = saved


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
