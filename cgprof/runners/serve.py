"""The server loop of `cgprof run serve`: dynamic batching into graph buckets, under load.

The load generator (:mod:`cgprof.runners.loadgen`) runs in a process of its own; this
process is the server. Its single thread loops:

1. wait for a request; then gather more, until ``max_batch`` are waiting or ``max_wait_ms``
   has passed since the first of them arrived;
2. gather the requested input rows on the host and copy them to the device;
3. run the batch: eager (the batch as it is), or graph (:class:`GraphedInference` pads it
   with zero rows up to its bucket, copies it into that bucket's static input and replays
   the bucket's graph; every bucket is captured before the first level);
4. copy the output to the host (this waits for the GPU) and send each request its row.

NVTX (domain ``cgprof``, push/pop on the server thread; payload in brackets):

    eager | graph [max batch]      one per mode, before its first level
      warmup [batch sizes]         untimed batches of each size (graph: captures each bucket)
        step [index] ...
    level [clients or rate]        one per mode and load level
      eager | graph [max batch]    again, so that the mode is the range around each step
        step [batch index]         one per batch: the unit `cgprof analyze` cuts the trace in
          batch [rows]             the batch's real rows (requests)
            bucket [bucket rows]   graph mode: rows computed after padding
              copy_in / replay     (GraphedInference's own ranges)
            forward [index]        eager mode

The text of the step range stays exactly ``step`` (what `cgprof analyze` looks for by
default), so the batch size and bucket live in the payloads of the nested ``batch`` and
``bucket`` ranges rather than in the step's message. Request waits overlap one another
and cross threads and processes, so they are not NVTX ranges; their times are in the
results.

GPU busy time: CUDA events recorded before the batch's copy to the device and after its
forward or replay, read after the level (no extra sync per batch).

Ctrl-C (SIGINT) does not kill the server mid-batch: the first one asks the generator to
stop sending, every request in flight is still answered, the level ends as interrupted and
no later level runs; a second Ctrl-C raises KeyboardInterrupt at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from cgprof import mark
from cgprof.errors import RunnerError
from cgprof.runners import capture, loadgen
from cgprof.runners.serving import LevelResult, ServeConfig, ServeResult

try:
    import torch
except ImportError as exc:  # pragma: no cover - torch is an optional extra
    raise RunnerError(
        "the runners need PyTorch, which is not installed: pip install 'cgprof[runners]'"
    ) from exc

from cgprof.runners import graphs, models

#: Distinct input rows the requests pick from.
POOL_ROWS = 256

BackendFactory = Callable[[], capture.CaptureBackend]


@dataclass
class Batch:
    """One batch the server ran. Times are ``perf_counter_ns`` values.

    ``rids``/``samples``: the requests in it and their input rows, in row order;
    ``bucket``: rows computed (graph: the bucket; eager: ``len(rids)``).
    """

    index: int
    rids: list[int]
    samples: list[int]
    bucket: int
    start_ns: int
    issued_ns: int
    end_ns: int
    events: Any = None


@dataclass
class LevelRecord:
    """Everything behind one LevelResult (for tests and checks): the load and the batches."""

    mode: str
    level: float
    load: loadgen.LevelLoad
    batches: list[Batch] = field(default_factory=list)


class _StopFlag:
    """SIGINT handler for the serving loop: first Ctrl-C sets the flag, the second raises."""

    def __init__(self) -> None:
        self.set = False
        self._old: Any = None

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.set:
            raise KeyboardInterrupt
        self.set = True

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def run_serve(
    config: ServeConfig,
    *,
    backend_factory: BackendFactory | None = None,
    records: list[LevelRecord] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ServeResult:
    """Serve every level of ``config`` in each mode; return what was measured.

    ``backend_factory`` replaces the CUDA capture backend (tests run graph mode on the CPU
    with it); ``records`` collects each level's raw load and batches; ``progress`` gets a
    line per level (the CLI prints them on stderr).
    """
    cfg = config.resolved(
        cuda_available=torch.cuda.is_available(), allow_cpu_graphs=backend_factory is not None
    )
    assert cfg.device is not None
    device = torch.device(cfg.device)
    on_cuda = device.type == "cuda"
    spec = models.spec(cfg.model, cfg.size)
    channels_last = on_cuda and spec.convolutional
    result = ServeResult(
        model=cfg.model,
        size=cfg.size,
        device=cfg.device,
        device_name=torch.cuda.get_device_name(device) if on_cuda else "cpu",
        torch_version=torch.__version__,
        open_loop=cfg.open_loop,
        max_batch=cfg.max_batch,
        buckets=capture.default_buckets(cfg.max_batch),
        max_wait_ms=cfg.max_wait_ms,
        duration_s=cfg.duration_s,
        warmup_s=cfg.warmup_s,
        think_ms=cfg.think_ms,
        slo_ms=cfg.slo_ms,
        seed=cfg.seed,
    )
    pool = models.make_batches(spec, POOL_ROWS, 1, seed=cfg.seed, device="cpu")[0][0]
    if on_cuda:
        pool = pool.pin_memory()
    saved_benchmark = torch.backends.cudnn.benchmark
    with _StopFlag() as stop:
        proc, conn = _start_generator()
        try:
            if on_cuda:
                torch.backends.cudnn.benchmark = True
            for mode in cfg.modes:
                if stop.set:
                    break
                server = _Server(cfg, mode, device, pool, channels_last, backend_factory)
                with torch.no_grad():
                    with mark.region(mode, cfg.max_batch):
                        server.warm_up()
                    for level in cfg.levels:
                        if stop.set:
                            break
                        # the mode innermost: `cgprof analyze` labels each step with the
                        # range just around it
                        with mark.region("level", level), mark.region(mode, cfg.max_batch):
                            rec = server.run_level(conn, level, stop)
                        lv = level_result(rec, cfg, on_cuda)
                        result.levels.append(lv)
                        if records is not None:
                            records.append(rec)
                        if progress is not None:
                            progress(
                                f"{mode} at {level:g}: {lv.qps:.1f} QPS, p99 {lv.p99_ms:.2f} ms, "
                                f"mean batch {lv.mean_batch:.2f}"
                            )
                if isinstance(server.infer, graphs.GraphedInference):
                    result.graph_stats = server.infer.stats.as_dict()
        except BaseException:
            proc.kill()  # mid-level it would wait for answers that will not come
            raise
        finally:
            torch.backends.cudnn.benchmark = saved_benchmark
            with contextlib.suppress(OSError):
                conn.send(("quit",))
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck generator
                proc.kill()
                proc.wait(5)
            conn.close()
        result.interrupted = stop.set
    return result


def _start_generator() -> tuple[subprocess.Popen[bytes], Connection]:
    """Start the load generator as ``python -m cgprof.runners.loadgen FD``.

    A plain subprocess rather than ``multiprocessing``: spawn would re-import the caller's
    main module (a script without a ``__main__`` guard would start serving again), and fork
    would copy a process that holds torch's threads and maybe a CUDA context. The two ends
    of a socket pair carry pickled messages (:class:`multiprocessing.connection.Connection`).
    """
    ours, theirs = socket.socketpair()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the cgprof the server runs
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cgprof.runners.loadgen", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=env,
            # its own session (process group): a terminal's Ctrl-C goes to the server only,
            # which stops the generator itself after draining (it also ignores SIGINT)
            start_new_session=True,
        )
    finally:
        theirs.close()
    return proc, Connection(ours.detach())


_GONE = "serve: the load generator process exited unexpectedly (its error is above)"


def _recv(conn: Connection) -> Any:
    try:
        return conn.recv()
    except (EOFError, OSError):
        raise RunnerError(_GONE) from None


def _send(conn: Connection, msg: tuple[Any, ...]) -> None:
    try:
        conn.send(msg)
    except OSError:
        raise RunnerError(_GONE) from None


class _Server:
    """One mode's model and batch loop."""

    def __init__(
        self,
        cfg: ServeConfig,
        mode: str,
        device: torch.device,
        pool: torch.Tensor,
        channels_last: bool,
        backend_factory: BackendFactory | None,
    ) -> None:
        self.cfg = cfg
        self.mode = mode
        self.device = device
        self.pool = pool
        self.layout = torch.channels_last if channels_last else torch.contiguous_format
        model = models.build_model(cfg.model, cfg.size, seed=cfg.seed).to(device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model = model.eval()
        self.buckets = capture.default_buckets(cfg.max_batch)
        self.infer: graphs.EagerInference | graphs.GraphedInference
        if mode == "graph":
            kwargs: dict[str, Any] = (
                {"backend": backend_factory()} if backend_factory is not None else {}
            )
            self.infer = graphs.GraphedInference(
                self.model, buckets=self.buckets, max_graphs=max(16, len(self.buckets)), **kwargs
            )
        else:
            self.infer = graphs.EagerInference(self.model)
        self.on_cuda = device.type == "cuda"
        self.batch_index = 0
        self.staging = torch.empty((cfg.max_batch, *pool.shape[1:]), dtype=pool.dtype)
        if self.on_cuda:
            self.staging = self.staging.pin_memory()

    def _inputs(self, samples: list[int]) -> torch.Tensor:
        # gathered into one pinned staging buffer, then one host-to-device copy; the next
        # batch reuses the buffer only after this one's results came back (a full sync)
        rows = self.staging[: len(samples)]
        torch.index_select(self.pool, 0, torch.tensor(samples, dtype=torch.long), out=rows)
        x = rows.to(self.device, non_blocking=True)
        if self.layout == torch.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def warm_up(self) -> None:
        """Untimed batches of every size the levels can run (graph: captures every bucket)."""
        sizes = self.buckets if self.mode == "graph" else range(1, self.cfg.max_batch + 1)
        with mark.region("warmup", len(sizes)):
            for n in sizes:
                for _ in range(2):
                    self._run([(-1, i % len(self.pool), 0) for i in range(n)])
        if self.on_cuda:
            torch.cuda.synchronize(self.device)

    def _run(self, reqs: list[tuple[int, int, int]]) -> tuple[Batch, list[list[float]]]:
        """Run one batch of (rid, sample, arrival_ns) requests; return it and its rows."""
        n = len(reqs)
        idx = self.batch_index
        self.batch_index += 1
        bucket = n
        if isinstance(self.infer, graphs.GraphedInference):
            bucket = capture.bucket_for(n, self.buckets) or n
        events = None
        with mark.step(idx), mark.region("batch", n):
            start = time.perf_counter_ns()
            if self.on_cuda:
                events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(2))
                events[0].record()
            x = self._inputs([s for _, s, _ in reqs])
            if self.mode == "graph":
                with mark.region("bucket", bucket):
                    out = self.infer(x, idx)
            else:
                out = self.infer(x, idx)
            if events is not None:
                events[1].record()
            issued = time.perf_counter_ns()
            rows = out.float().cpu().tolist()  # waits for the GPU
        batch = Batch(
            index=idx,
            rids=[r for r, _, _ in reqs],
            samples=[s for _, s, _ in reqs],
            bucket=bucket,
            start_ns=start,
            issued_ns=issued,
            end_ns=0,
            events=events,
        )
        return batch, rows

    def run_level(self, conn: Connection, level: float, stop: _StopFlag) -> LevelRecord:
        cfg = self.cfg
        spec = loadgen.LevelSpec(
            clients=None if cfg.open_loop else int(level),
            rate_qps=float(level) if cfg.open_loop else None,
            duration_s=cfg.duration_s,
            warmup_s=cfg.warmup_s,
            think_ms=cfg.think_ms,
            pool=len(self.pool),
            seed=cfg.seed,
            keep_rows=cfg.keep_rows,
        )
        max_wait_ns = int(cfg.max_wait_ms * 1e6)
        pending: deque[tuple[int, int, int]] = deque()
        batches: list[Batch] = []
        done: list[loadgen.LevelLoad] = []
        stop_sent = False

        def handle(msg: tuple[Any, ...]) -> None:
            if msg[0] == "req":
                pending.append((msg[1], msg[2], time.perf_counter_ns()))
            elif msg[0] == "done":
                done.append(msg[1])
            else:
                raise RunnerError(f"serve: unexpected message {msg[0]!r} from the load generator")

        _send(conn, ("level", spec))
        while not done:
            if stop.set and not stop_sent:
                _send(conn, ("stop",))
                stop_sent = True
            if not pending:
                if conn.poll(0.05):
                    handle(_recv(conn))
                continue
            deadline = pending[0][2] + max_wait_ns
            while len(pending) < cfg.max_batch:
                wait = max((deadline - time.perf_counter_ns()) / 1e9, 0.0)
                if not conn.poll(wait):
                    break
                handle(_recv(conn))
            take = [pending.popleft() for _ in range(min(cfg.max_batch, len(pending)))]
            batch, rows = self._run(take)
            _send(conn, ("resp", list(zip(batch.rids, rows, strict=True))))
            batch.end_ns = time.perf_counter_ns()
            batches.append(batch)
        return LevelRecord(mode=self.mode, level=level, load=done[0], batches=batches)


def level_result(rec: LevelRecord, cfg: ServeConfig, on_cuda: bool) -> LevelResult:
    """Summarise one level's measured window (see :mod:`cgprof.runners.serving`)."""
    load = rec.load
    w0 = load.start_ns + int(cfg.warmup_s * 1e9)
    w1 = w0 + int(cfg.duration_s * 1e9)
    if load.stopped:
        w1 = min(w1, max(load.end_ns, w0 + 1))
    due = np.asarray(load.due_ns, dtype=np.int64)
    recv = np.asarray(load.recv_ns, dtype=np.int64)
    answered = recv > 0
    in_window = answered & (due >= w0) & (due < w1)
    lat_ms = (recv[in_window] - due[in_window]) / 1e6
    window_s = (w1 - w0) / 1e9
    qps = float(np.count_nonzero(answered & (recv >= w0) & (recv < w1))) / window_s
    if lat_ms.size == 0:
        # nothing was sent inside the window (a very short or interrupted level): use all
        lat_ms = (recv[answered] - due[answered]) / 1e6
    p50, p90, p99 = (
        (float(np.percentile(lat_ms, q)) for q in (50, 90, 99))
        if lat_ms.size
        else (float("nan"),) * 3
    )
    measured = [b for b in rec.batches if w0 <= b.start_ns < w1] or rec.batches
    gpu_busy: float | None = None
    if on_cuda and measured:
        busy_ms = sum(b.events[0].elapsed_time(b.events[1]) for b in measured)
        gpu_busy = 100.0 * busy_ms / (window_s * 1e3)
    n = len(measured)
    return LevelResult(
        mode=rec.mode,
        level=rec.level,
        requests=int(np.count_nonzero(in_window)),
        batches=n,
        qps=qps,
        p50_ms=p50,
        p90_ms=p90,
        p99_ms=p99,
        mean_batch=sum(len(b.rids) for b in measured) / n if n else 0.0,
        mean_bucket=sum(b.bucket for b in measured) / n if n else 0.0,
        gpu_busy_pct=gpu_busy,
        host_ms_per_batch=sum(b.issued_ns - b.start_ns for b in measured) / n / 1e6 if n else 0.0,
        batch_ms=sum(b.end_ns - b.start_ns for b in measured) / n / 1e6 if n else 0.0,
        loadgen_cpu_pct=load.cpu_pct,
        loadgen_lag_ms=load.lag_ms_mean,
        shed=load.shed,
        lost=load.lost,
        duplicates=load.duplicates,
        interrupted=load.stopped,
    )
