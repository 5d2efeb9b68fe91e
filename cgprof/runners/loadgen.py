"""The load generator of `cgprof run serve`: closed-loop clients or Poisson arrivals.

It runs in its own process (``python -m cgprof.runners.loadgen FD``, so it never holds the
server's GIL and never inherits CUDA state) as one event loop, and talks to the server over
one socket pair (:class:`multiprocessing.connection.Connection`). Nothing here imports torch.

Protocol (tuples, pickled by the pipe):

    server -> generator  ("level", LevelSpec)       run one load level
                         ("resp", [(rid, row), ...]) the rows of one batch, one per request
                         ("stop",)                   Ctrl-C: send nothing new, drain, report
                         ("quit",)                   exit the process
    generator -> server  ("req", rid, sample)        one request of one input row
                         ("done", LevelLoad)         every request of the level is answered

Closed loop: ``clients`` clients; each sends its next request when the last one returns
(after ``think_ms``). Open loop: arrivals at ``rate_qps`` with exponential gaps (Poisson),
whatever the server's state; at most ``MAX_OUTSTANDING`` requests are in flight, and an
arrival beyond that is *shed* (counted, never sent) so that neither side's pipe buffer can
fill up and block both processes. An open-loop request's latency runs from its scheduled
arrival, not from when the loop got round to sending it (no coordinated omission).

When the level's time is up (or on ``stop``) the clients stop sending and the generator
waits for every request in flight: a level ends only when each request sent has had
exactly one answer, which it checks (``LevelLoad.lost``, ``LevelLoad.duplicates``).

The generator's own overhead is measured: ``cpu_pct`` is its process CPU time over the
level's wall time (near 100: the generator, not the server, limits the load), ``lag_ms_mean``
the mean delay between when a request was due and when it was sent.
"""

from __future__ import annotations

import heapq
import random
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

#: Open loop: requests in flight at most; later arrivals are shed.
MAX_OUTSTANDING = 1024


@dataclass(frozen=True)
class LevelSpec:
    """One load level. Exactly one of ``clients`` (closed loop) and ``rate_qps`` (open loop).

    ``warmup_s`` + ``duration_s`` of sending; ``pool`` input rows to pick samples from
    (request ``rid`` asks for sample ``rid % pool``); ``keep_rows``: return every answer
    (tests check them); ``drain_s``: once sending has stopped, answers that have not come
    for this long are given up as lost.
    """

    clients: int | None
    rate_qps: float | None
    duration_s: float
    warmup_s: float
    think_ms: float = 0.0
    pool: int = 64
    seed: int = 0
    keep_rows: bool = False
    drain_s: float = 30.0


@dataclass
class LevelLoad:
    """What the generator saw in one level. Times are ``time.perf_counter_ns()`` values,
    which on Linux (CLOCK_MONOTONIC) agree between the generator and server processes.

    Attributes:
        start_ns: when the level began sending; the measured window starts ``warmup_s`` later.
        client: per request id, the client that sent it (0 in open loop).
        sample: per request id, the input row it asked for.
        due_ns, sent_ns, recv_ns: per request id, when it was due (open loop: scheduled
            arrival; closed loop: when the client became ready), sent, and answered.
        rows: per request id, the row it got back (only with ``keep_rows``).
        shed: open-loop arrivals not sent because MAX_OUTSTANDING were in flight.
        lost: requests sent but never answered (must be 0).
        duplicates: answers for a request already answered or never sent (must be 0).
        stopped: the level was cut short by a ``stop`` message.
        cpu_pct, lag_ms_mean: the generator's own overhead (see the module docstring).
    """

    start_ns: int
    client: list[int] = field(default_factory=list)
    sample: list[int] = field(default_factory=list)
    due_ns: list[int] = field(default_factory=list)
    sent_ns: list[int] = field(default_factory=list)
    recv_ns: list[int] = field(default_factory=list)
    rows: dict[int, Any] = field(default_factory=dict)
    shed: int = 0
    lost: int = 0
    duplicates: int = 0
    stopped: bool = False
    end_ns: int = 0
    cpu_pct: float = 0.0
    lag_ms_mean: float = 0.0


def main(conn: Connection) -> None:
    """Entry point of the generator process: run levels until ``quit``."""
    # Ctrl-C reaches the whole process group; the server decides how to stop (it sends
    # "stop"), so the generator ignores SIGINT instead of dying with requests in flight.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "level":
            conn.send(("done", run_level(conn, msg[1])))
        elif msg[0] == "quit":
            return


def run_level(conn: Connection, spec: LevelSpec) -> LevelLoad:
    """Send load as ``spec`` says until its time is up, then drain; return what was seen."""
    closed = spec.clients is not None
    rng = random.Random(spec.seed)
    clock = time.perf_counter_ns
    cpu0 = time.process_time()
    start = clock()
    load = LevelLoad(start_ns=start)
    end = start + int((spec.warmup_s + spec.duration_s) * 1e9)
    think_ns = int(spec.think_ms * 1e6)
    # (due_ns, client): who sends next and when
    due: list[tuple[int, int]] = []
    if closed:
        assert spec.clients is not None
        due = [(start, c) for c in range(spec.clients)]
    else:
        assert spec.rate_qps is not None and spec.rate_qps > 0
        due = [(start + int(rng.expovariate(spec.rate_qps) * 1e9), 0)]
    heapq.heapify(due)
    answered: set[int] = set()
    outstanding = 0
    lag_ns = 0
    stopping = False

    last_msg = start

    def on_message(msg: tuple[Any, ...]) -> None:
        nonlocal outstanding, stopping, last_msg
        now = clock()
        last_msg = now
        if msg[0] == "stop":
            stopping = True
            load.stopped = True
            return
        if msg[0] != "resp":
            raise RuntimeError(f"load generator: unexpected message {msg[0]!r}")
        for rid, row in msg[1]:
            if rid in answered or rid >= len(load.sent_ns):
                load.duplicates += 1
                continue
            answered.add(rid)
            outstanding -= 1
            load.recv_ns[rid] = now
            if spec.keep_rows:
                load.rows[rid] = row
            if closed:
                heapq.heappush(due, (now + think_ns, load.client[rid]))

    while True:
        now = clock()
        sending = not stopping and now < end
        if not sending and (outstanding == 0 or now - last_msg > spec.drain_s * 1e9):
            break
        while sending and due and due[0][0] <= now:
            when, client = heapq.heappop(due)
            if not closed:
                heapq.heappush(due, (when + int(rng.expovariate(spec.rate_qps or 1.0) * 1e9), 0))
                if outstanding >= MAX_OUTSTANDING:
                    load.shed += 1
                    continue
            rid = len(load.sent_ns)
            sample = rid % spec.pool
            load.client.append(client)
            load.sample.append(sample)
            load.due_ns.append(when)
            sent = clock()
            load.sent_ns.append(sent)
            load.recv_ns.append(0)
            lag_ns += sent - when
            conn.send(("req", rid, sample))
            outstanding += 1
            last_msg = max(last_msg, sent)
            now = clock()
        # wait for an answer until the next request is due (or the level's end)
        wake = min(due[0][0], end) if (sending and due) else end if sending else now + 50_000_000
        timeout = max(0.0, (wake - clock()) / 1e9)
        if conn.poll(timeout):
            on_message(conn.recv())
            while conn.poll(0):
                on_message(conn.recv())
    load.end_ns = clock()
    load.lost = sum(1 for t in load.recv_ns if t == 0)
    wall_s = (load.end_ns - start) / 1e9
    load.cpu_pct = 100.0 * (time.process_time() - cpu0) / wall_s if wall_s > 0 else 0.0
    load.lag_ms_mean = lag_ns / 1e6 / len(load.sent_ns) if load.sent_ns else 0.0
    return load


if __name__ == "__main__":  # python -m cgprof.runners.loadgen FD (started by the server)
    import sys

    # through the module's real name: what it pickles must be cgprof.runners.loadgen's
    # classes, not __main__'s
    from cgprof.runners import loadgen

    loadgen.main(Connection(int(sys.argv[1])))
