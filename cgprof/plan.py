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
API calls holds about :func:`cgprof.engine.whole_analysis_bytes` (``n``), read off the file
without a scan (:func:`cgprof.engine.activity_rows`); the settings' ``ranks_apart`` can force
rank by rank (True) or forbid it (False) whatever the size.

What a caller cannot take is an argument, the same for every command: ``chunks=False`` where
the output needs what a chunked analysis does not keep (``analyze --all-gaps`` lists every GPU
gap; an analysis of one named rank keeps that rank's trace for its page and step table).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Plan", "plan_input", "FOLDER", "WHOLE", "RANK_BY_RANK", "CHUNKS"]

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
    from cgprof.engine import dir_kind

    return path.is_dir() and dir_kind(path) is None


def plan_input(path: str | Path, chunks: bool = True) -> Plan:
    """The :class:`Plan` of the input at ``path`` under the active settings.

    chunks: whether the caller can take a chunked analysis of a one-process trace over the
    memory cap (False: it is read whole, ``over_cap`` still set)."""
    from cgprof.engine import apart_wanted

    path = Path(path)
    if is_folder_of_traces(path):
        return Plan(path, FOLDER)
    if not apart_wanted(path):
        return Plan(path, WHOLE)
    from cgprof.ranks import file_rank_heads

    heads = file_rank_heads(path)
    if heads:
        return Plan(path, RANK_BY_RANK, True, tuple(heads))
    return Plan(path, CHUNKS if chunks else WHOLE, True)
