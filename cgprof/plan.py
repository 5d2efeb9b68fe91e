"""What is read how: one decision per input, made before anything is analysed.

    from cgprof.plan import plan_input
    plan = plan_input("run.sqlite")            # under the active Settings (cgprof.settings)
    plan.shape                                 # "whole", "rank by rank", "chunks" or "folder"

Every command that analyses traces (``analyze``, ``diff``, ``check``), the folder and
``--jobs``/``--dask`` runs (:mod:`cgprof.parallel`) and the public :func:`cgprof.analyze`
start from :func:`plan_input`, so one input is read the same way whoever reads it:

=================  ==============================================================================
shape              when, and how the input is read
=================  ==============================================================================
``folder``         a folder that is not one trace: each trace in it a rank (or ranks) of one
                   run, analysed a file at a time (:func:`cgprof.parallel.analyze_files`)
``rank by rank``   a trace of several processes with GPU work (ranks) whose whole analysis is
                   expected to exceed the memory cap: each rank's rows read alone
                   (:func:`cgprof.ranks.analyze_ranks_apart`); :attr:`Plan.heads` are the ranks
``chunks``         a one-process trace over the cap: a chunk of steps at a time
                   (:func:`cgprof.metrics.chunked.analyze_capped`), when the caller can take
                   a chunked analysis; a trace the chunked analysis cannot split (no steps to
                   cut at, a ``.nsys-rep`` report) is then read whole, the cap noted
``whole``          everything else: read whole, its ranks (if several) cut from the loaded trace
=================  ==============================================================================

"Expected to exceed the memory cap": the whole analysis of a trace of ``n`` kernels and CUDA
API calls holds about :func:`cgprof.io.estimate.whole_analysis_bytes` (``n``), read off the file
without a scan (:func:`cgprof.io.estimate.activity_rows`); the settings' ``ranks_apart`` can force
rank by rank (True: a trace of one rank is then still read whole within the cap) or forbid
it (False: a trace over the cap is then read whole) whatever the size.

What a caller cannot take is an argument, the same for every command: ``chunks=False`` where
the output needs what a chunked analysis does not keep (``analyze --all-gaps`` lists every GPU
gap; an analysis of one named rank keeps that rank's trace for its page and step table).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.trace import Trace

__all__ = ["Plan", "plan_input", "FOLDER", "WHOLE", "RANK_BY_RANK", "CHUNKS", "RankHead",
           "rank_heads", "file_rank_heads", "apart_heads", "missing_rank", "rank_marker",
           "assign_rank_ids", "RANK_MARKER_DOMAIN", "RANK_MARKER_PREFIX"]

FOLDER = "folder"
WHOLE = "whole"
RANK_BY_RANK = "rank by rank"
CHUNKS = "chunks"


@dataclass(frozen=True)
class Plan:
    """How one input is read. ``over_cap``: its whole analysis is expected to exceed the
    memory cap (a ``whole`` plan can be over it: the caller could not take chunks, or nothing
    says how big it is). ``heads``: the ranks (:class:`cgprof.ranks.RankHead`), for
    ``rank by rank`` only."""

    path: Path
    shape: str
    over_cap: bool = False
    heads: tuple[Any, ...] = ()

    @property
    def rank_ids(self) -> list[int]:
        """The rank ids of a ``rank by rank`` plan, in rank order."""
        return [h.rank_id for h in self.heads]


def is_folder_of_traces(path: Path) -> bool:
    """A folder that is not one trace (nsys's parquetdir/arrowdir export is one)."""
    from cgprof.io.sources import dir_kind

    return path.is_dir() and dir_kind(path) is None


def plan_input(path: str | Path, chunks: bool = True) -> Plan:
    """The :class:`Plan` of the input at ``path`` under the active settings.

    chunks: whether the caller can take a chunked analysis of a one-process trace over the
    memory cap (False: it is read whole, ``over_cap`` still set)."""
    from cgprof.io.estimate import apart_wanted, over_memory_cap

    path = Path(path)
    if is_folder_of_traces(path):
        return Plan(path, FOLDER)
    over = over_memory_cap(path)
    if not apart_wanted(path, over):  # (neither over the cap nor forced rank by rank)
        return Plan(path, WHOLE)
    heads = file_rank_heads(path)
    if heads:
        return Plan(path, RANK_BY_RANK, over, tuple(heads))
    return Plan(path, CHUNKS if chunks and over else WHOLE, over)


# ---------------------------------------------------------------------------------------
# which processes are ranks, and their ids (the rules: cgprof.ranks)

RANK_MARKER_DOMAIN = "cgprof"
RANK_MARKER_PREFIX = "rank "


def missing_rank(path: Any, rank: int, ids: Sequence[int]) -> str | None:
    """The one-line error for asking rank ``rank`` of the run at ``path`` whose rank ids are
    ``ids`` (a single-process run is rank 0 alone); None when it holds that rank."""
    if rank in ids:
        return None
    if list(ids) == [0]:
        return f"{path}: holds 1 rank (rank 0); no rank {rank}"
    return f"{path}: no rank {rank} (ranks: {', '.join(str(i) for i in ids)})"


def rank_marker(trace: Trace, pid: int | None = None) -> int | None:
    """The payload of the first NVTX rank marker (of process ``pid``), or None."""
    nv = trace.nvtx
    if nv.empty:
        return None
    sel = nv[(nv["domain"] == RANK_MARKER_DOMAIN)
             & nv["text"].astype(str).str.startswith(RANK_MARKER_PREFIX)
             & nv["payload"].notna()]
    if pid is not None:
        sel = sel[sel["pid"] == pid]
    return int(sel["payload"].iloc[0]) if len(sel) else None


def assign_rank_ids(markers: Sequence[int | None],
                    devices: Sequence[tuple[int, ...]]) -> tuple[list[int], str]:
    """Rank ids for processes given in order: markers, else devices, else order."""
    n = len(markers)
    if n and all(m is not None for m in markers) and len(set(markers)) == n:
        return [int(m) for m in markers if m is not None], "marker"
    if n and all(len(d) == 1 for d in devices) and len({d[0] for d in devices}) == n:
        return [d[0] for d in devices], "device"
    return list(range(n)), "order"


@dataclass
class RankHead:
    """A rank's identity, before its sub-trace is cut (:func:`rank_heads`)."""

    rank_id: int
    pid: int
    device_ids: tuple[int, ...]
    source: str
    marker: int | None
    #: the trace's only rank: its trace is the whole trace (so its analysis is the file's)
    alone: bool = False


def rank_heads(trace: Trace) -> list[RankHead]:
    """Each process with GPU work, its rank id and GPUs, ordered by rank id: what
    :func:`cgprof.ranks.split_ranks` gives, without cutting any sub-trace."""
    from cgprof.io.trace import device_ids, gpu_pids

    pids = gpu_pids(trace)
    markers = [rank_marker(trace, p) for p in pids]
    devs = [device_ids(trace, p) for p in pids]
    ids, source = assign_rank_ids(markers, devs)
    heads = [RankHead(rank_id=i, pid=p, device_ids=d, source=source, marker=m,
                      alone=len(pids) == 1)
             for i, p, d, m in zip(ids, pids, devs, markers, strict=True)]
    return sorted(heads, key=lambda h: h.rank_id)


def apart_heads(path: Any) -> list[RankHead] | None:
    """The ranks of the trace at ``path`` when it is to be read rank by rank
    (:func:`cgprof.ranks.analyze_ranks_apart`), else None: it holds more than one process
    with GPU work, and its whole analysis is expected to exceed the memory cap
    (:func:`cgprof.io.estimate.apart_wanted`)."""
    from cgprof.io.estimate import apart_wanted

    if not apart_wanted(Path(path)):
        return None
    return file_rank_heads(path)


def file_rank_heads(path: Any) -> list[RankHead] | None:
    """The ranks of the trace at ``path`` read off the file (or noted in the cache by an
    earlier rank-by-rank run) without its activity rows; None unless it holds more than one
    process with GPU work."""
    heads = _noted_heads(Path(path))
    if heads is None:
        from cgprof.io.loader import process_heads

        heads = rank_heads(process_heads(path))
    return heads if len(heads) > 1 else None


#: The cache part that notes a trace's ranks once every rank's own entry is written.
RANKS_PART = "ranks"


def _noted_heads(path: Any) -> list[RankHead] | None:
    """The ranks noted in the cache by an earlier rank-by-rank run of ``path`` (None: none,
    or the cache is off)."""
    from cgprof.io import cache as C

    if not C.enabled() or not path.is_file():
        return None
    note = C.read_note(path, RANKS_PART)
    try:
        return [RankHead(rank_id=int(h["rank_id"]), pid=int(h["pid"]),
                         device_ids=tuple(int(d) for d in h["device_ids"]),
                         source=str(h["source"]),
                         marker=None if h["marker"] is None else int(h["marker"]),
                         alone=bool(h["alone"]))
                for h in note["heads"]] if note is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def note_heads(path: Any, heads: Sequence[RankHead]) -> None:
    """Note ``heads`` in the cache (after every rank's entry is written: a later run that
    finds the note reads no SQLite)."""
    from cgprof.io import cache as C

    if C.enabled() and Path(path).is_file() and _noted_heads(Path(path)) is None:
        C.store_note(Path(path), RANKS_PART, {"heads": [dataclasses.asdict(h) for h in heads]})
