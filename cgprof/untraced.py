"""Step times without the profiler: the untraced run's record, and what it says of a trace.

Nsight Systems slows what it watches (every eager launch; under node-level graph tracing every
replayed node), so step times read off a trace are the profiler's, not the user's.
``cgprof record --untraced`` runs the program once more without the profiler, its step marks
timed by the bootstrap's ``_cgprof_untraced`` (NVTX push/pop, ``cgprof.mark``, the optimizer
step marker, graph replays), and stores the result beside the export as
``NAME.untraced.json`` (:data:`SUFFIX`); nothing is written into the export. The record is
bound to the export it was made with: it holds the export's :func:`fingerprint` (its size
and the SHA-256 of its first and last :data:`PAGE_BYTES`), so a trace recorded again under
the same name never picks up stale times.

:func:`measure` matches the trace's steps to the untraced run's marks, the same rule on both
sides: a step chosen from NVTX ranges is the instance of that range with the same ordinal on
the thread that has most of them; a step found in the launch stream by its graph launches is
the replay with the same ordinal of the graph replayed most. A step's time is its period,
from its start to the next instance's start (a step without a next one is left out), measured
the same way on the trace (``traced_mean_ns``) so that their ratio is the profiler's inflation.
The untraced side sees the host only: where no window step waits for the GPU (no sync call in
the trace's steps), the host may run ahead of the GPU and the period understates the step
(``host_paced`` False, said on the report).

The sidecar document (``schema_version`` 1)::

    {"schema_version": 1, "kind": "cgprof untraced run",
     "exports": {"run.sqlite": FINGERPRINT, "run.nsys-rep": FINGERPRINT},
     "command": [...], "exit_code": 0, "untraced_run_s": 12.3, "traced_run_s": 20.1,
     "processes": [{"pid", "rank", "argv", "main_thread", "names", "ranges": [[name,
                    thread, start_ns, end_ns], ...], "replays": [[graph, thread, ns], ...],
                    "events", "event_cost_ns", "run_ns"}, ...]}
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cgprof.errors import OutputExistsError
from cgprof.io.cache import digest_ends

SUFFIX = ".untraced.json"
SCHEMA_VERSION = 1
KIND = "cgprof untraced run"
PAGE_BYTES = 1 << 20
_TRACE_SUFFIXES = (".sqlite", ".nsys-rep", ".sqlite3", ".db")


#: What node-level graph tracing adds to each replayed node, by GPU, as measured: a graph of
#: 20 / 200 / 1000 tiny kernels replayed 17.7 / 168 / 835 us untraced and +89 / +58 / +47%
#: under ``--cuda-graph-trace=node`` (H200, nsys 2025.3.1, driver 580.159).
NODE_TRACING_COST = {"NVIDIA H200": "+0.4 to +0.8 us per replayed node, measured on an H200 "
                                    "host with nsys 2025.3.1"}


def node_tracing_note(gpus: list[dict[str, Any]]) -> str:
    """What the node-level figures of a trace on ``gpus`` (trace info's) carry."""
    names = {str(g.get("name")) for g in gpus}
    known = [NODE_TRACING_COST[n] for n in sorted(names) if n in NODE_TRACING_COST]
    cost = known[0] if known else "not measured for this GPU"
    return ("measured under node-level tracing, which slows every replayed node: node gaps, "
            f"compactness and launch to first work carry it ({cost})")


def ms_text(ns: float | None) -> str:
    """A duration for a sentence, three digits: ``3.71 ms``, ``812 us``, ``n/a``."""
    if ns is None:
        return "n/a"
    return f"{ns / 1e6:.3g} ms" if ns >= 1e5 else f"{ns / 1e3:.3g} us"


def sidecar_for(trace_path: str | os.PathLike[str]) -> Path:
    """``run.sqlite`` / ``run.nsys-rep`` / ``run`` (a parquetdir) -> ``run.untraced.json``."""
    path = Path(trace_path)
    name = path.name
    for suffix in _TRACE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return path.with_name(name + SUFFIX)


def fingerprint(path: str | os.PathLike[str]) -> str:
    """The size and the SHA-256 of the first and last :data:`PAGE_BYTES` of a file."""
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.sha256(f"{size}:".encode())
    digest_ends(h, path, size, PAGE_BYTES)
    return h.hexdigest()


def read_processes(folder: Path) -> list[dict[str, Any]]:
    """The bootstrap's per-process files in ``folder`` (``untraced-PID.json``), by pid."""
    docs = []
    for item in sorted(folder.glob("untraced-*.json")):
        try:
            docs.append(json.loads(item.read_text()))
        except (OSError, ValueError):
            continue  # a process that died while writing: its file is not whole
    return sorted(docs, key=lambda d: d.get("pid", 0))


def write(sidecar: Path, exports: list[Path], processes: list[dict[str, Any]],
          facts: dict[str, Any], force: bool = False) -> Path:
    """Write the sidecar atomically (a temporary file renamed into place)."""
    if sidecar.exists() and not force:
        raise OutputExistsError(sidecar)
    doc = {"schema_version": SCHEMA_VERSION, "kind": KIND,
           "exports": {p.name: fingerprint(p) for p in exports if p.is_file()},
           **facts, "processes": processes}
    tmp = sidecar.with_name(f".{sidecar.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, sidecar)
    finally:
        tmp.unlink(missing_ok=True)
    return sidecar


@dataclass(frozen=True)
class UntracedTimes:
    """The window steps' times without the profiler (all durations in ns).

    available       False when a sidecar exists but cannot time these steps (``reason``)
    basis           what was matched: "NVTX range cgprof:step", "graph replays"
    steps           window steps timed on both sides
    mean_ns, p50_ns, p90_ns   their untraced periods
    traced_mean_ns  the same steps' periods in the trace
    inflation       traced_mean_ns / mean_ns: how much the profiler slowed them
    hook_ns_per_step, hook_share   what timing them cost per step, and its share of mean_ns
    host_paced      some window step waits for the GPU (a sync call in the trace), so host
                    periods measure the steps; False: the host may run ahead of the GPU
    untraced_run_s, traced_run_s   the two runs' wall times (the second run's cost)
    """

    sidecar: str
    available: bool
    reason: str | None = None
    basis: str | None = None
    steps: int = 0
    mean_ns: float | None = None
    p50_ns: float | None = None
    p90_ns: float | None = None
    traced_mean_ns: float | None = None
    inflation: float | None = None
    hook_ns_per_step: float | None = None
    hook_share: float | None = None
    host_paced: bool | None = None
    untraced_run_s: float | None = None
    traced_run_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unavailable(sidecar: Path, reason: str) -> UntracedTimes:
    return UntracedTimes(sidecar=str(sidecar), available=False, reason=reason)


def load(trace_path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(the sidecar document, None), (None, why it cannot be used), or (None, None): none."""
    trace = Path(trace_path)
    sidecar = sidecar_for(trace)
    if not sidecar.is_file():
        return None, None
    try:
        doc = json.loads(sidecar.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{sidecar} cannot be read ({exc})"
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return None, f"{sidecar} is not a cgprof untraced run"
    if doc.get("schema_version") != SCHEMA_VERSION:
        return None, f"{sidecar} has schema_version {doc.get('schema_version')}; " \
                     f"this cgprof reads {SCHEMA_VERSION}"
    bound = doc.get("exports") or {}
    if trace.is_file() and bound.get(trace.name) != fingerprint(trace):
        return None, f"{sidecar} was made with another recording of {trace.name}"
    return doc, None


def _periods(starts: np.ndarray, ordinals: np.ndarray) -> np.ndarray:
    """Start of instance k to the start of instance k + 1, for each k (all have a next)."""
    return (starts[ordinals + 1] - starts[ordinals]).astype(np.float64)


def _marks(proc: dict[str, Any], basis: str, name: str | None
           ) -> tuple[np.ndarray, np.ndarray] | None:
    """(starts, ends) of the process's instances of the basis, on its busiest thread (a
    replay's end is its start)."""
    if basis == "replays":
        rows = proc.get("replays") or []
        if not rows:
            return None
        graphs = np.array([r[0] for r in rows])
        counts = np.bincount(graphs)
        keep = graphs == int(np.argmax(counts))
        t = np.array([r[2] for r in rows], dtype=np.int64)[keep]
        return t, t
    names = proc.get("names") or []
    if name not in names:
        return None
    code = names.index(name)
    rows = [r for r in proc.get("ranges") or [] if r[0] == code]
    if not rows:
        return None
    threads = np.array([r[1] for r in rows])
    values, counts = np.unique(threads, return_counts=True)
    busiest = values[int(np.argmax(counts))]
    mine = sorted((r[2], r[3]) for r in rows if r[1] == busiest)
    arr = np.array(mine, dtype=np.int64)
    return arr[:, 0], arr[:, 1]


def _basis(steps: Any) -> tuple[str, str | None, str] | str:
    """(kind "ranges"/"replays", range name, phrase) of the steps, or why none applies."""
    if steps.source == "launches":
        if steps.name == "auto:graph":
            return "replays", None, "graph replays"
        return ("these steps were found in the launch stream by their kernel launches, "
                "which the untraced run does not see")
    if steps.name is None:
        return "the steps are the whole trace"
    return "ranges", steps.name, f"NVTX range {steps.name}"


def _traced(steps: Any, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(ordinals of the window steps, the start of every instance by ordinal: -1 where the
    step table has none) on the trace side."""
    st = steps.steps
    if kind == "replays":
        st = st[st["mode"].to_numpy() == "graph"]
        ordinal = np.arange(len(st))
    else:
        ordinal = st["index"].to_numpy(np.int64)
    full = np.full(int(ordinal.max()) + 1 if len(ordinal) else 0, -1, np.int64)
    full[ordinal] = st["start_ns"].to_numpy(np.int64)
    return ordinal[st["in_window"].to_numpy(bool)], full


def measure(trace_path: str | os.PathLike[str], steps: Any,
            rank: int | None = None) -> UntracedTimes | None:
    """The untraced times of ``steps`` (a :class:`~cgprof.metrics.steps.StepResult`), from
    the sidecar beside ``trace_path``; None when there is no sidecar."""
    doc, why = load(trace_path)
    sidecar = sidecar_for(trace_path)
    if doc is None:
        return None if why is None else _unavailable(sidecar, why)
    basis = _basis(steps)
    if isinstance(basis, str):
        return _unavailable(sidecar, basis)
    kind, name, phrase = basis
    procs = doc.get("processes") or []
    if rank is not None:
        procs = [p for p in procs if str(p.get("rank")) == str(rank)] or procs
    found = [(p, m) for p in procs if (m := _marks(p, kind, name)) is not None]
    if not found:
        return _unavailable(sidecar, f"the untraced run has no {phrase}")
    proc, (u_start, u_end) = max(found, key=lambda pm: len(pm[1][0]))
    ordinals, t_start = _traced(steps, kind)
    # a step's period needs the next instance's start, on both sides
    nxt = ordinals + 1
    ordinals = ordinals[(nxt < len(u_start)) & (nxt < len(t_start))]
    ordinals = ordinals[(t_start[ordinals] >= 0) & (t_start[ordinals + 1] >= 0)]
    if len(ordinals) < 2:
        return _unavailable(sidecar, f"the untraced run has too few {phrase} "
                                     f"({len(u_start)}) to match the trace's window steps")
    untraced = _periods(u_start, ordinals)
    traced = _periods(t_start, ordinals)
    lo, hi = int(u_start[ordinals.min()]), int(u_start[ordinals.max() + 1])
    events = 2 * sum(1 for r in proc.get("ranges") or [] if lo <= r[2] < hi) + \
        sum(1 for r in proc.get("replays") or [] if lo <= r[2] < hi)
    mean = float(untraced.mean())
    hook = events / len(ordinals) * float(proc.get("event_cost_ns") or 0.0)
    st = steps.steps
    sync = st["sync_calls"].to_numpy()[st["in_window"].to_numpy(bool)] if len(st) else []
    return UntracedTimes(
        sidecar=str(sidecar), available=True, basis=phrase, steps=int(len(ordinals)),
        mean_ns=mean, p50_ns=float(np.median(untraced)),
        p90_ns=float(np.quantile(untraced, 0.9)),
        traced_mean_ns=float(traced.mean()),
        inflation=float(traced.mean()) / mean if mean > 0 else None,
        hook_ns_per_step=hook, hook_share=hook / mean if mean > 0 else None,
        host_paced=bool(np.any(np.asarray(sync) > 0)),
        untraced_run_s=doc.get("untraced_run_s"), traced_run_s=doc.get("traced_run_s"),
    )
