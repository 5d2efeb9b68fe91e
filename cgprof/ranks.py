"""Ranks: each process of a multi-process trace (a `torchrun` launch) analysed on its own.

A rank is one process with GPU work and its sub-trace: every table of the trace filtered to
that process id (NVTX too), analysed by the unchanged :func:`cgprof.metrics.analyze`. The
same per-rank result comes out whether the ranks share one nsys report or each has its own
file (:mod:`cgprof.parallel`), so both paths meet in :func:`cross_rank`.

Rank ids, first rule that gives every rank a distinct id:

1. ``marker``: the runner's NVTX rank marker, an event in domain ``cgprof`` whose text starts
   with ``rank `` and whose payload is the rank (``cgprof.mark.rank(rank, world_size)``);
2. ``device``: the one GPU each process ran kernels on (its ``device_id``);
3. ``order``: position in process order (pid for one trace; file, then pid for many files).

Processes with no GPU rows (kernels, copies, memsets, graph replays) are not ranks: launchers
such as torchrun launch no work. What they did call (torchrun's CUDA initialisation makes one
``cuModuleGetLoadingMode`` call) is kept apart as :class:`OtherProcesses`, so that the ranks'
whole-trace API and NVTX summaries plus theirs add up to the file's, as ``nsys stats`` counts;
:func:`file_summaries` is that sum, per file (``RanksResult.files``).

Cross-rank figures (:class:`CrossRank`): steps are aligned by step index (step ``i`` after
``--skip`` on every rank). A collective is an NCCL kernel (name contains ``nccl``, any case)
launched by an analysed step; the n-th one on each rank is taken to be the same collective.
NCCL kernels spin until every rank has arrived, so waiting shows up as kernel time, not as
an idle gap: a rank's *wait* for a collective is the last rank's start minus its own start.
Across files this assumes the files share one clock (ranks of one machine do).

All durations are integer nanoseconds (``*_ns``); shares are percentages (``*_pct``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cgprof.errors import AnalysisError
from cgprof.io import cache as C
from cgprof.io.cache import finish_writes
from cgprof.io.trace import DERIVED, Trace, device_ids, gpu_pids, used_gpus
from cgprof.plan import (
    RANK_MARKER_DOMAIN,
    RANK_MARKER_PREFIX,
    RankHead,
    apart_heads,
    assign_rank_ids,
    missing_rank,
    note_heads,
    rank_heads,
    rank_marker,
)
from cgprof.scratch import prefixed

if TYPE_CHECKING:
    from cgprof.metrics.summaries import FileSummaries

__all__ = [
    "Rank", "RankHead", "RankResult", "RanksResult", "CrossRank", "OtherProcesses",
    "file_summaries", "split_ranks", "gpu_pids", "other_processes",
    "missing_rank", "rank_heads", "rank_of",
    "sub_trace", "rank_marker", "assign_rank_ids", "analyze_rank", "analyze_ranks",
    "cross_rank", "reduce_ranks", "apart_heads", "analyze_ranks_apart", "apart_results",
    "rank_part", "RANK_MARKER_DOMAIN", "RANK_MARKER_PREFIX", "COLLECTIVE_TEXT",
]

#: A kernel is a collective when its name contains this (case-insensitive): NCCL's kernels
#: are ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)``, ``ncclKernel_...`` and the like.
COLLECTIVE_TEXT = "nccl"

_PID_TABLES = ("kernels", "runtime", "memcpy", "memset", "sync", "graph_trace", "nvtx",
               "threads")


@dataclass
class Rank:
    """One process of a trace and its own sub-trace."""

    rank_id: int
    pid: int
    device_ids: tuple[int, ...]
    trace: Trace
    #: How rank_id was decided: "marker", "device" or "order".
    source: str = "order"
    marker: int | None = None


@dataclass
class OtherProcesses:
    """The processes of one file that are not ranks (no GPU work), e.g. torchrun's launcher:
    their API calls and NVTX ranges, summarised as the ranks' are (whole trace)."""

    path: str
    pids: list[int]
    api_summary: pd.DataFrame
    nvtx_summary: pd.DataFrame

    @property
    def api_calls(self) -> int:
        return int(self.api_summary["calls"].sum())

    @property
    def nvtx_ranges(self) -> int:
        return int(self.nvtx_summary["instances"].sum())


def other_processes(trace: Trace, path: str,
                    ranks: Sequence[int] | None = None) -> OtherProcesses | None:
    """What the processes without GPU work recorded (API calls, NVTX ranges); None when no
    such process called the CUDA API or opened a range. ``ranks``: the pids of the ranks
    (default: :func:`gpu_pids`)."""
    from cgprof.metrics.summaries import api_summary, nvtx_summary

    if ranks is None:
        ranks = gpu_pids(trace)
    rt, nv = trace.runtime, trace.nvtx
    rt = rt[~rt["pid"].isin(ranks)]
    nv = nv[~nv["pid"].isin(ranks)]
    if not len(rt) and not len(nv):
        return None
    pids = sorted({int(p) for p in pd.unique(rt["pid"])} | {int(p) for p in pd.unique(nv["pid"])})
    sub = dataclasses.replace(trace, runtime=rt.reset_index(drop=True),
                              nvtx=nv.reset_index(drop=True))
    out = OtherProcesses(path=path, pids=pids, api_summary=api_summary(sub),
                         nvtx_summary=nvtx_summary(sub))
    return out if out.api_calls or out.nvtx_ranges else None


def sub_trace(trace: Trace, pid: int) -> Trace:
    """The trace of one process: every table filtered to ``pid``; GPUs to those it used.

    Cut from the frames as the trace holds them (:meth:`Trace.stored`) and held the same way:
    cutting a rank never makes the whole trace's left-out columns (10M rows: 0.4 GB)."""
    parts: dict[str, Any] = {}
    for name in _PID_TABLES:
        df = _held(trace, name)
        parts[name] = df[(df["pid"] == pid).to_numpy(dtype=bool)].reset_index(drop=True)
    sub = dataclasses.replace(trace, gpus=used_gpus(trace, pid), **parts)
    sub.hold_like(trace)
    return sub


def _held(trace: Trace, name: str) -> pd.DataFrame:
    """The frame ``name`` as ``trace`` holds it (the pid and device columns are there)."""
    return trace.stored(name) if name in DERIVED else getattr(trace, name)


def rank_of(trace: Trace, head: RankHead) -> Rank:
    """The :class:`Rank` of ``head``: its sub-trace cut from ``trace`` (the whole trace when
    it is the trace's only rank)."""
    return Rank(rank_id=head.rank_id, pid=head.pid, device_ids=head.device_ids,
                trace=trace if head.alone else sub_trace(trace, head.pid),
                source=head.source, marker=head.marker)


def split_ranks(trace: Trace) -> list[Rank]:
    """One :class:`Rank` per process with GPU work, ordered by rank id.

    A trace with one such process gives one rank whose trace is the whole trace (so its
    analysis is exactly that of the file). Every sub-trace is cut at once: to analyse the
    ranks one after the other, :func:`analyze_ranks` cuts each as it comes."""
    return [rank_of(trace, h) for h in rank_heads(trace)]


# ---------------------------------------------------------------------------------------
# per-rank results

COLLECTIVE_COLUMNS = ["seq", "step", "start_ns", "end_ns", "dur_ns", "name"]


@dataclass
class RankResult:
    """One rank's analysis, compact enough to send between processes.

    result       the rank's :class:`~cgprof.metrics.AnalysisResult` (``compact()`` drops the
                 trace, the gap list and the call-to-step map; every summary stays)
    collectives  the rank's NCCL kernels launched by analysed steps, in start order:
                 seq (0-based), step, start_ns, end_ns, dur_ns, name
    """

    rank_id: int
    pid: int
    device_ids: tuple[int, ...]
    path: str
    marker: int | None
    result: Any
    collectives: pd.DataFrame
    source: str = "order"
    #: The file's processes that are not ranks; carried by the file's first rank only.
    others: OtherProcesses | None = None

    def light(self, gap_limit: int | None = None) -> RankResult:
        """The same result without the rank's sub-trace, its call-to-step map and its gaps
        over every step (``step_gaps``): what a report of the rank prints stays, its gap
        list cut to the ``gap_limit`` longest gaps (None: every gap; the JSON document's
        ``gaps_total`` still counts them all)."""
        if self.result.trace is None:
            return self
        return dataclasses.replace(self, result=self.result.light(gap_limit))

    def compact(self) -> RankResult:
        """The same result without the loaded trace and the per-gap/per-call tables."""
        lit = self.light()
        r = lit.result
        if not len(r.gaps.gaps):
            return lit
        gaps = dataclasses.replace(r.gaps, gaps=r.gaps.gaps.iloc[0:0].copy())
        return dataclasses.replace(lit, result=dataclasses.replace(r, gaps=gaps))


def collectives(trace: Trace, result: Any) -> pd.DataFrame:
    """NCCL kernels launched by the analysed steps (see the module doc), in start order."""
    k = trace.kernels
    names = k["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):  # test each distinct name once
        cats = names.cat.categories
        hit = cats[cats.astype(str).str.contains(COLLECTIVE_TEXT, case=False, regex=False)]
        k = k[names.isin(hit).to_numpy()]
    else:
        k = k[names.astype(str).str.contains(COLLECTIVE_TEXT, case=False, regex=False)]
    st = result.steps
    if st.source == "whole-trace":
        k = k.assign(step=0)
    else:
        k = k.merge(st.call_steps[["pid", "corr_id", "step"]], on=["pid", "corr_id"],
                    how="inner")
    k = k.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    return pd.DataFrame({
        "seq": np.arange(len(k), dtype=np.int64),
        "step": k["step"].to_numpy(np.int64),
        "start_ns": k["start_ns"].to_numpy(np.int64),
        "end_ns": k["end_ns"].to_numpy(np.int64),
        "dur_ns": k["dur_ns"].to_numpy(np.int64),
        "name": k["name"].astype(str).to_numpy(object),
    })[COLLECTIVE_COLUMNS]


def analyze_rank(rank: Rank, path: str, step: str | None = None, skip: int = 0,
                 min_gap_us: float = 0.0, progress: Any = None) -> RankResult:
    """Analyse one rank's sub-trace with :func:`cgprof.metrics.analyze` (``progress``: its
    stage messages)."""
    from cgprof.metrics import analyze

    res = analyze(rank.trace, step=step, skip=skip, min_gap_us=min_gap_us, progress=progress,
                  rank=rank.rank_id)
    return RankResult(rank_id=rank.rank_id, pid=rank.pid, device_ids=rank.device_ids,
                      path=path, marker=rank.marker, result=res,
                      collectives=collectives(rank.trace, res), source=rank.source)


# ---------------------------------------------------------------------------------------
# across ranks

PER_RANK_COLUMNS = ["rank", "pid", "devices", "path", "steps", "step_p50_ns", "step_max_ns",
                    "slowest_steps", "kernels", "api_calls", "collectives", "collective_ns",
                    "collective_pct", "wait_ns", "wait_p50_ns", "verdict"]
STEP_COLUMNS = ["step", "ranks", "min_ns", "max_ns", "spread_ns", "slowest_rank",
                "fastest_rank", "max_wait_ns"]
STEP_RANK_COLUMNS = ["step", "rank", "effective_ns", "dur_ns", "collective_ns", "wait_ns"]
WAIT_COLUMNS = ["seq", "rank", "step", "start_ns", "dur_ns", "wait_ns", "last_rank"]


@dataclass
class CrossRank:
    """Figures across ranks.

    per_rank    PER_RANK_COLUMNS, over each rank's analysis window (its steady-state steps,
                as its verdict; warm-up and capture steps, with NCCL's first slow
                collectives, left out): window steps, p50/max step time (effective_ns), how
                many aligned window steps it was the slowest rank of, whole-trace kernels and
                API calls (they add up to the file's, as nsys stats counts them), collectives
                (NCCL kernels in window steps), their time (collective_ns, and as a share of
                those steps' effective time), total and median wait per collective
    steps       STEP_COLUMNS, one row per aligned step: step time (effective_ns) min/max over
                ranks, spread (max - min), slowest/fastest rank, longest wait of any rank
    step_ranks  STEP_RANK_COLUMNS, one row per (aligned step, rank)
    waits       WAIT_COLUMNS, one row per (collective, rank): its start on that rank, its
                kernel time, wait_ns = last rank's start - this start, and the last rank
    notes       what could not be aligned (different step or collective counts)
    """

    per_rank: pd.DataFrame
    steps: pd.DataFrame
    step_ranks: pd.DataFrame
    waits: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def _window_mask(steps: pd.DataFrame) -> np.ndarray:
    """Which rows of a step table are in its analysis window (all, for old results)."""
    if "in_window" not in steps.columns:
        return np.ones(len(steps), dtype=bool)
    return steps["in_window"].fillna(False).to_numpy(bool)


def _p50(values: Any) -> float | None:
    a = np.asarray(values, dtype=np.float64)
    return float(np.median(a)) if len(a) else None


def cross_rank(ranks: Sequence[RankResult]) -> CrossRank:
    """Align the ranks' steps and collectives (see the module doc)."""
    notes: list[str] = []
    ids = [r.rank_id for r in ranks]
    n_steps = [len(r.result.steps.steps) for r in ranks]
    n_common = min(n_steps) if n_steps else 0
    if len(set(n_steps)) > 1:
        counts = ", ".join(f"rank {i}: {n}" for i, n in zip(ids, n_steps, strict=True))
        notes.append(f"step counts differ ({counts}); aligned the first {n_common}")
    n_coll = [len(r.collectives) for r in ranks]
    c_common = min(n_coll) if n_coll else 0
    if len(set(n_coll)) > 1:
        counts = ", ".join(f"rank {i}: {n}" for i, n in zip(ids, n_coll, strict=True))
        notes.append(f"collective counts differ ({counts}); matched the first {c_common}")

    # arrival skew per collective
    wait_rows = []
    if c_common and len(ranks) > 1:
        starts = np.stack([r.collectives["start_ns"].to_numpy(np.int64)[:c_common]
                           for r in ranks])
        last = starts.max(axis=0)
        last_rank = np.asarray(ids)[starts.argmax(axis=0)]
        for j, r in enumerate(ranks):
            c = r.collectives.iloc[:c_common]
            wait_rows.append(pd.DataFrame({
                "seq": c["seq"].to_numpy(np.int64), "rank": r.rank_id,
                "step": c["step"].to_numpy(np.int64), "start_ns": starts[j],
                "dur_ns": c["dur_ns"].to_numpy(np.int64), "wait_ns": last - starts[j],
                "last_rank": last_rank}))
    waits = (pd.concat(wait_rows, ignore_index=True) if wait_rows else
             pd.DataFrame({c: pd.Series(dtype="int64") for c in WAIT_COLUMNS}))
    waits = waits.astype("int64")[WAIT_COLUMNS]

    # per (aligned step, rank)
    sr_rows = []
    for r in ranks:
        st = r.result.steps.steps.iloc[:n_common]
        idx = st["step"].to_numpy(np.int64)
        coll = r.collectives
        coll = coll[coll["step"] < n_common]
        cns = np.bincount(coll["step"].to_numpy(np.int64),
                          weights=coll["dur_ns"].to_numpy(np.float64), minlength=n_common)
        w = waits[(waits["rank"] == r.rank_id) & (waits["step"] < n_common)]
        wns = np.bincount(w["step"].to_numpy(np.int64),
                          weights=w["wait_ns"].to_numpy(np.float64), minlength=n_common)
        sr_rows.append(pd.DataFrame({
            "step": idx, "rank": r.rank_id,
            "effective_ns": st["effective_ns"].to_numpy(np.int64),
            "dur_ns": st["dur_ns"].to_numpy(np.int64),
            "collective_ns": cns[:n_common].astype(np.int64),
            "wait_ns": wns[:n_common].astype(np.int64)}))
    step_ranks = (pd.concat(sr_rows, ignore_index=True) if sr_rows else
                  pd.DataFrame({c: pd.Series(dtype="int64") for c in STEP_RANK_COLUMNS}))
    step_ranks = step_ranks.astype("int64")[STEP_RANK_COLUMNS]

    # per aligned step
    if n_common and ranks:
        eff = np.stack([step_ranks.loc[step_ranks["rank"] == i, "effective_ns"].to_numpy()
                        for i in ids])  # ranks x steps
        wt = np.stack([step_ranks.loc[step_ranks["rank"] == i, "wait_ns"].to_numpy()
                       for i in ids])
        idarr = np.asarray(ids, dtype=np.int64)
        steps = pd.DataFrame({
            "step": np.arange(n_common, dtype=np.int64),
            "ranks": np.full(n_common, len(ranks), dtype=np.int64),
            "min_ns": eff.min(axis=0), "max_ns": eff.max(axis=0),
            "spread_ns": eff.max(axis=0) - eff.min(axis=0),
            "slowest_rank": idarr[eff.argmax(axis=0)],
            "fastest_rank": idarr[eff.argmin(axis=0)],
            "max_wait_ns": wt.max(axis=0)})
        # aligned steps that are in every rank's analysis window
        inwin = np.stack([_window_mask(r.result.steps.steps)[:n_common] for r in ranks])
        both = inwin.all(axis=0)
        slowest = np.bincount(eff[:, both].argmax(axis=0), minlength=len(ranks)) \
            if both.any() else np.zeros(len(ranks), dtype=np.int64)
    else:
        steps = pd.DataFrame({c: pd.Series(dtype="int64") for c in STEP_COLUMNS})
        slowest = np.zeros(len(ranks), dtype=np.int64)

    rows = []
    for j, r in enumerate(ranks):
        st = r.result.steps.steps
        win = _window_mask(st)
        win_steps = st["step"].to_numpy(np.int64)[win]
        eff_all = st["effective_ns"].to_numpy(np.int64)[win]
        w = waits[(waits["rank"] == r.rank_id) & waits["step"].isin(win_steps)]["wait_ns"]
        coll = r.collectives[r.collectives["step"].isin(win_steps)]
        coll_ns = int(coll["dur_ns"].sum())
        total_eff = int(eff_all.sum())
        rows.append({
            "rank": r.rank_id, "pid": r.pid,
            "devices": ",".join(str(d) for d in r.device_ids), "path": r.path,
            "steps": int(win.sum()), "step_p50_ns": _p50(eff_all),
            "step_max_ns": int(eff_all.max()) if len(eff_all) else None,
            "slowest_steps": int(slowest[j]),
            "kernels": int(r.result.info["kernels"]), "api_calls": int(r.result.info["api_calls"]),
            "collectives": len(coll), "collective_ns": coll_ns,
            "collective_pct": 100.0 * coll_ns / total_eff if total_eff else None,
            "wait_ns": int(w.sum()) if len(w) else None,
            "wait_p50_ns": _p50(w) if len(w) else None,
            "verdict": r.result.verdict.lines[0] if r.result.verdict.lines else "",
        })
    per_rank = pd.DataFrame(rows, columns=PER_RANK_COLUMNS)
    return CrossRank(per_rank=per_rank, steps=steps, step_ranks=step_ranks, waits=waits,
                     notes=notes)


def file_summaries(path: str, ranks: Sequence[RankResult]) -> FileSummaries:
    """The whole summaries of the file at ``path`` whose ranks are ``ranks`` (one carrying
    the file's other processes): the ranks' own tables and the others' merged, so the same
    whether the file was read whole or rank by rank, here or in workers. A file of one rank:
    that rank's tables (its analysis is of the whole file, the other processes' calls
    included, so they are not added again)."""
    from cgprof.metrics.summaries import merge_file

    others = [r.others for r in ranks if r.others is not None]
    pids = [r.pid for r in ranks] + [p for o in others for p in o.pids]
    parts = [r.result for r in ranks] + ([] if len(ranks) == 1 else others)
    return merge_file(path, pids, parts)


@dataclass
class RanksResult:
    """Every rank of one run (one multi-process trace, or many per-rank files) and the
    figures across them. ``source`` says how rank ids were decided; ``selected`` is the
    ``--rank`` asked for (None: all). ``files``: each file's whole summaries, in the order
    of ``paths``."""

    paths: list[str]
    ranks: list[RankResult]
    source: str
    cross: CrossRank
    selected: int | None = None
    files: list[FileSummaries] = field(default_factory=list)

    @property
    def others(self) -> list[OtherProcesses]:
        """Per file, its processes that are not ranks (only files that have some)."""
        return [r.others for r in self.ranks if r.others is not None]

    def shown(self) -> list[RankResult]:
        """The ranks whose full report is shown (all, or the one ``--rank`` chose)."""
        if self.selected is None:
            return self.ranks
        return [r for r in self.ranks if r.rank_id == self.selected]


def reduce_ranks(paths: Sequence[str], per_file: Sequence[Sequence[RankResult]],
                 rank: int | None = None) -> RanksResult:
    """Give the ranks of many files their ids (marker, device, order: file then pid) and
    compute the cross-rank figures. ``per_file`` is each file's ranks in pid order."""
    flat = [r for rs in per_file for r in sorted(rs, key=lambda x: x.pid)]
    if len(per_file) == 1:
        ids = [r.rank_id for r in flat]
        source = flat[0].source if flat else "order"
    else:
        ids, source = assign_rank_ids([r.marker for r in flat], [r.device_ids for r in flat])
    flat = sorted((dataclasses.replace(r, rank_id=i, source=source)
                   for r, i in zip(flat, ids, strict=True)), key=lambda r: r.rank_id)
    if rank is not None and rank not in {r.rank_id for r in flat}:
        known = ", ".join(str(r.rank_id) for r in flat) or "none"
        raise AnalysisError(f"--rank {rank}: no such rank (ranks: {known})")
    files = [file_summaries(str(p), rs) for p, rs in zip(paths, per_file, strict=True)]
    return RanksResult(paths=list(paths), ranks=flat, source=source, cross=cross_rank(flat),
                       selected=rank, files=files)


def analyze_ranks(trace: Trace, step: str | None = None, skip: int = 0,
                  min_gap_us: float = 0.0, rank: int | None = None,
                  keep: bool | int = True, gap_limit: int | None = None,
                  progress: Any = None) -> RanksResult:
    """Split one trace into ranks, analyse each, and compute the cross-rank figures.

    The ranks are cut and analysed one at a time. ``keep``: which ranks' results stay whole
    (all: True, none: False, or the one of that rank id); the others are made
    :meth:`RankResult.light` (``gap_limit``: the gaps each lists) once analysed, so that
    one rank's sub-trace and temporaries exist at a time, not every rank's (a 4-rank trace
    of 10M kernels and 10M API calls: 3.97 -> ~2.5 x 10^6 KB peak; docs/engine.md).
    ``progress``: called with each stage message, prefixed ``rank ID (i/n):``."""
    heads = rank_heads(trace)
    if not heads:
        raise AnalysisError(f"{trace.path}: no process with GPU work, so no ranks")
    path = str(trace.path)
    results = []
    for i, h in enumerate(heads):
        say = prefixed(progress, f"rank {h.rank_id} ({i + 1}/{len(heads)}): ")
        r = analyze_rank(rank_of(trace, h), path, step=step, skip=skip,
                         min_gap_us=min_gap_us, progress=say)
        whole = keep if isinstance(keep, bool) else keep == h.rank_id
        results.append(r if whole else r.light(gap_limit))
        del r
    return reduce_ranks([path], [with_others(results, trace, path)], rank=rank)


def _part(pid: int) -> str:
    return f"pid {pid}"


def rank_part(path: Any, pid: int, progress: Any = None, spill: Any = None) -> Trace:
    """The trace of the rank of process ``pid`` of the trace at ``path``, its rows read
    alone (:func:`cgprof.io.loader.load_part`; its own cache entry; ``spill``: the file's
    process tables written apart): what :func:`rank_of` cuts."""
    from cgprof.io.loader import load_part

    return load_part(path, [pid], progress=progress, part=_part(pid), spill=spill)


@contextlib.contextmanager
def _spilled(path: Any, pids: Sequence[int], progress: Any) -> Any:
    """The process tables of the SQLite export at ``path`` written apart for the ranks of
    ``pids`` to read (one scan of the file instead of one per rank), in a temporary folder
    of the cache (of the system without one) removed at the end; None when fewer than two
    ranks are to be read from the file (the others' cache entries are read), or the file
    cannot be spilled."""
    from pathlib import Path

    from cgprof.io.loader import spill_processes

    use = C.enabled()
    todo = [p for p in pids if not (use and C.lookup(Path(path), _part(p)) is not None)]
    if len(todo) < 2 or not Path(path).is_file():
        yield None
        return
    with C.temp_folder("spill-") as folder:
        if progress is not None:
            progress("writing each process's rows apart")
        yield spill_processes(path, folder)


def analyze_ranks_apart(path: Any, heads: Sequence[RankHead], step: str | None = None,
                        skip: int = 0, min_gap_us: float = 0.0, rank: int | None = None,
                        keep: bool | int = True, gap_limit: int | None = None,
                        progress: Any = None) -> RanksResult:
    """:func:`analyze_ranks` of the trace at ``path`` without loading it whole: each rank's
    rows are read alone (:func:`apart_results`), analysed and made light (but ``keep``'s)
    before the next rank's are read; then the other processes' API calls and NVTX ranges.
    ``heads``: the plan's (:func:`cgprof.plan.plan_input`). The same result as
    :func:`analyze_ranks` on the loaded trace, holding about one rank's share of the memory
    the whole analysis holds (docs/engine.md)."""

    def shape(r: RankResult) -> RankResult:
        whole = keep if isinstance(keep, bool) else keep == r.rank_id
        return r if whole else r.light(gap_limit)

    results = apart_results(path, heads, step=step, skip=skip, min_gap_us=min_gap_us,
                            shape=shape, progress=progress)
    return reduce_ranks([str(path)], [results], rank=rank)


def apart_results(path: Any, heads: Sequence[RankHead], step: str | None = None,
                  skip: int = 0, min_gap_us: float = 0.0, shape: Any = None,
                  only: int | None = None, progress: Any = None) -> list[RankResult]:
    """Each rank of ``heads`` (``only``: that rank id alone) analysed from its own rows
    (:func:`cgprof.io.loader.load_part`, the pid filter in the scan) and given to ``shape``
    (default: :meth:`RankResult.light`) before the next rank's rows are read: the file's
    ranks in pid order, the first carrying the other processes (read last, and only when
    every rank is analysed). Each rank's trace is a cache entry of its own (the whole
    trace's entry is not read), and once all are written the ranks are noted too
    (:func:`apart_heads` reads them): a later run reads no SQLite."""
    from cgprof import schema as S
    from cgprof.io.loader import load_part

    shape = shape or (lambda r: r.light())
    path_s = str(path)
    chosen = [h for h in heads if only is None or h.rank_id == only]
    with _spilled(path, [h.pid for h in chosen], progress) as spill:
        results = _rank_results(path, chosen, spill, shape, step, skip, min_gap_us, progress)
    if only is not None:
        return results
    if progress is not None:
        progress("reading the other processes")
    pids = [h.pid for h in heads]
    # processes without GPU work have no GPU rows: their CUDA API calls and NVTX events only
    others = other_processes(load_part(path, pids, keep=False, tables=(S.RUNTIME, S.NVTX,
                                                                       S.THREAD_NAMES),
                                       part="others"), path_s, pids)
    finish_writes()
    note_heads(path, heads)
    return _first_carries(results, others)


def _rank_results(path: Any, chosen: Sequence[RankHead], spill: Any, shape: Any,
                  step: str | None, skip: int, min_gap_us: float,
                  progress: Any) -> list[RankResult]:
    """:func:`apart_results`' loop: each rank read, analysed and shaped in turn."""
    from cgprof.io.memory import release_memory

    path_s = str(path)
    results = []
    for i, h in enumerate(chosen):
        say = prefixed(progress, f"rank {h.rank_id} ({i + 1}/{len(chosen)}): ")
        sub = rank_part(path, h.pid, progress=say, spill=spill)
        rk = Rank(rank_id=h.rank_id, pid=h.pid, device_ids=h.device_ids, trace=sub,
                  source=h.source, marker=h.marker)
        del sub
        r = analyze_rank(rk, path_s, step=step, skip=skip, min_gap_us=min_gap_us,
                         progress=say)
        del rk
        rows = len(r.result.trace.stored("kernels")) + len(r.result.trace.stored("runtime"))
        results.append(shape(r))
        del r
        finish_writes()  # its cache entry (written beside the analysis) before the next rank
        release_memory(rows)
    return results


def with_others(results: Sequence[RankResult], trace: Trace, path: str) -> list[RankResult]:
    """One file's ranks in pid order, the first carrying the file's other processes."""
    return _first_carries(results, other_processes(trace, path, [r.pid for r in results]))


def _first_carries(results: Sequence[RankResult],
                   others: OtherProcesses | None) -> list[RankResult]:
    """One file's ranks in pid order, the first carrying ``others``."""
    out = sorted(results, key=lambda x: x.pid)
    if out:
        out[0] = dataclasses.replace(out[0], others=others)
    return out


# ---------------------------------------------------------------------------------------
# two multi-rank runs

STEADY_MODES = ("eager", "graph")
RANK_DIFF_COLUMNS = ["rank", "base_steps", "cand_steps", "base_step_p50_ns", "cand_step_p50_ns",
                     "speedup", "base_launch_calls_per_step", "cand_launch_calls_per_step",
                     "base_collective_ns", "cand_collective_ns", "base_wait_ns", "cand_wait_ns"]


@dataclass
class RanksDiff:
    """Two multi-rank runs compared rank by rank (rank id against rank id) and overall.

    labels     (baseline label, candidate label)
    per_rank   RANK_DIFF_COLUMNS, outer join on rank id (<NA> for a rank one run lacks):
               steps = steady-state (eager/graph) steps; step p50 of their effective_ns;
               speedup = base p50 / cand p50; launch calls (kernel + graph) per steady step;
               collective (NCCL) kernel time and total arrival wait over all analysed steps
    overall    {"base"/"cand": {"ranks", "steps", "step_p50_ns" (p50 over aligned steady
               steps of the slowest rank's step time: the job's step), "spread_p50_ns",
               "wait_ns"}, "speedup"}
    lines      the comparison in words, first line the headline
    """

    labels: tuple[str, str]
    base: RanksResult
    cand: RanksResult
    per_rank: pd.DataFrame
    overall: dict[str, Any]
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from cgprof.records import frame_records
        from cgprof.version import DIFF_SCHEMA_VERSION, __version__

        return {"schema_version": DIFF_SCHEMA_VERSION, "cgprof_version": __version__,
                "kind": "cgprof.diff.ranks", "labels": list(self.labels),
                "baseline": {"paths": self.base.paths, "source": self.base.source},
                "candidate": {"paths": self.cand.paths, "source": self.cand.source},
                "overall": self.overall, "lines": list(self.lines),
                "per_rank": frame_records(self.per_rank)}


def _steady(r: RankResult) -> pd.DataFrame:
    st = r.result.steps.steps
    return st[st["mode"].isin(STEADY_MODES)]


def _run_overall(rr: RanksResult) -> dict[str, Any]:
    """The job's step: per aligned step index that is steady on every rank, the slowest
    rank's effective time."""
    cr = rr.cross
    steady = None
    for r in rr.ranks:
        idx = set(int(i) for i in _steady(r)["step"])
        steady = idx if steady is None else steady & idx
    st = cr.steps[cr.steps["step"].isin(sorted(steady or ()))]
    waits = cr.per_rank["wait_ns"].dropna()
    return {"ranks": len(rr.ranks), "steps": len(st),
            "step_p50_ns": _p50(st["max_ns"]) if len(st) else None,
            "spread_p50_ns": _p50(st["spread_ns"]) if len(st) else None,
            "wait_ns": int(waits.sum()) if len(waits) else None}


def diff_ranks(base: RanksResult, cand: RanksResult,
               labels: tuple[str, str] = ("baseline", "candidate")) -> RanksDiff:
    """Compare ``cand`` against ``base`` rank by rank and overall (see :class:`RanksDiff`)."""

    def side(rr: RanksResult, p: str) -> pd.DataFrame:
        rows = []
        pr = rr.cross.per_rank.set_index("rank")
        for r in rr.ranks:
            st = _steady(r)
            launches = st["kernel_launches"] + st["graph_launches"]
            rows.append({"rank": r.rank_id, f"{p}steps": len(st),
                         f"{p}step_p50_ns": _p50(st["effective_ns"]) if len(st) else None,
                         f"{p}launch_calls_per_step": float(launches.mean()) if len(st) else None,
                         f"{p}collective_ns": int(r.collectives["dur_ns"].sum()),
                         f"{p}wait_ns": pr.loc[r.rank_id, "wait_ns"]})
        return pd.DataFrame(rows)

    a, b = side(base, "base_"), side(cand, "cand_")
    out = a.merge(b, on="rank", how="outer").sort_values("rank").reset_index(drop=True)
    for c in ("base_steps", "cand_steps", "base_collective_ns", "cand_collective_ns",
              "base_wait_ns", "cand_wait_ns"):
        out[c] = pd.array(out[c], dtype="Float64").astype("Int64")
    for c in ("base_step_p50_ns", "cand_step_p50_ns", "base_launch_calls_per_step",
              "cand_launch_calls_per_step"):
        out[c] = pd.array(out[c], dtype="Float64")
    cand_p50 = out["cand_step_p50_ns"]
    out["speedup"] = out["base_step_p50_ns"] / cand_p50.where(cand_p50 > 0)
    out = out[RANK_DIFF_COLUMNS]
    oa, ob = _run_overall(base), _run_overall(cand)
    speedup = (oa["step_p50_ns"] / ob["step_p50_ns"]
               if oa["step_p50_ns"] and ob["step_p50_ns"] else None)
    overall = {"base": oa, "cand": ob, "speedup": speedup}
    la, lb = labels
    lines = []
    if speedup is None:
        lines.append(f"{lb} vs {la}: no steady-state steps to compare")
    else:
        word = f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
        lines.append(f"{lb} is {word} than {la} per step (slowest rank's step time, p50 over "
                     f"{min(oa['steps'], ob['steps'])} aligned steps)")
    only_a = set(a["rank"]) - set(b["rank"])
    only_b = set(b["rank"]) - set(a["rank"])
    if only_a:
        lines.append(f"ranks only in {la}: {', '.join(str(i) for i in sorted(only_a))}")
    if only_b:
        lines.append(f"ranks only in {lb}: {', '.join(str(i) for i in sorted(only_b))}")
    sp = out["speedup"].dropna()
    if len(sp) > 1:
        worst = out.loc[out["speedup"].astype("float64").idxmin()]
        lines.append(f"least improved: rank {int(worst['rank'])} ({float(worst['speedup']):.2f}x)")
    return RanksDiff(labels=(la, lb), base=base, cand=cand, per_rank=out, overall=overall,
                     lines=lines)


def as_ranks(result: Any) -> RanksResult:
    """A single-process AnalysisResult as a one-rank run (for comparing with a multi-rank one)."""
    if isinstance(result, RanksResult):
        return result
    trace = result.trace
    pid = gpu_pids(trace)
    r = RankResult(rank_id=0, pid=pid[0] if pid else -1, device_ids=device_ids(trace),
                   path=str(trace.path), marker=rank_marker(trace), result=result,
                   collectives=collectives(trace, result))
    return reduce_ranks([str(trace.path)], [[r]])
