"""Many per-rank files analysed in parallel: local worker processes or a Dask cluster.

    from cgprof.parallel import analyze_files, expand_inputs
    runs = analyze_files(expand_inputs(["run/"]), jobs=2)      # a RanksResult

Each file is read and analysed by one worker (:func:`analyze_file`), which sends back only
the compact per-rank results (:meth:`cgprof.ranks.RankResult.compact`: summaries and the step
and collective tables, never the loaded trace). The reduction (rank ids, step alignment,
arrival skew) runs locally in :func:`cgprof.ranks.reduce_ranks`, so a local run and a Dask run
give identical results.

Workers hold their trace engine to one thread (``Settings.threads=1``): parallelism comes
from the files. Local workers run under the caller's settings otherwise; a Dask worker under
its own environment's (its cache folder and memory cap are the worker machine's). Local
workers fork from a ``forkserver`` that imported the analysis once (:mod:`cgprof._worker`;
``spawn`` where there is no forkserver, each worker then importing once) and analyse many
files each.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cgprof.errors import CgprofError, TraceError
from cgprof.ranks import (
    RankResult,
    RanksResult,
    analyze_rank,
    rank_heads,
    rank_of,
    reduce_ranks,
    with_others,
)
from cgprof.scratch import checkpoint
from cgprof.settings import Settings, current, using

__all__ = ["analyze_file", "analyze_files", "expand_inputs", "default_jobs", "is_trace_dir",
           "DASK_ENV"]

Progress = Callable[[str], None]

#: Environment variable naming a Dask scheduler (``tcp://host:8786``) when --dask is not given.
DASK_ENV = "CGPROF_DASK_SCHEDULER"
#: Seconds to wait for the Dask scheduler to answer.
DASK_CONNECT_TIMEOUT_S = 20


def is_trace_dir(path: Path) -> bool:
    """A folder that is one trace (nsys's parquetdir/arrowdir export), not a folder of traces."""
    from cgprof.io.sources import is_trace_dir as engine_is_trace_dir

    return bool(engine_is_trace_dir(path))


def _natural_key(p: Path) -> list[Any]:
    """rank2 before rank10."""
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def expand_inputs(inputs: Sequence[str | Path]) -> list[Path]:
    """Folders of traces -> their traces (``*.sqlite``, nsys's parquetdir/arrowdir folders, and
    ``*.nsys-rep`` reports that have no ``.sqlite`` beside them; natural order); files and
    trace folders are kept as given. A folder with no trace is an error."""
    out: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir() and not is_trace_dir(p):
            found = [c for c in p.iterdir()
                     if (c.is_file() and c.suffix.lower() == ".sqlite") or is_trace_dir(c)
                     or (c.is_file() and c.suffix.lower() == ".nsys-rep"
                         and not c.with_suffix(".sqlite").exists())]
            if not found:
                raise TraceError(f"{p}: is a directory with no nsys exports (*.sqlite, "
                                 "*.nsys-rep, *.parquetdir)")
            out.extend(sorted(found, key=_natural_key))
        else:
            out.append(p)
    return out


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def memory_jobs(paths: Sequence[str | Path], jobs: int) -> int:
    """``jobs``, fewer when that many workers would together hold more than the memory cap
    (``--memory-limit``/``CGPROF_MEMORY_LIMIT``, default 4GB): each worker is expected to
    hold the largest file's whole analysis (:func:`cgprof.io.estimate.whole_analysis_bytes`),
    at most the cap (a file above it is read rank by rank). At least one; files whose rows
    are not known up front count as none."""
    from cgprof.io.estimate import activity_rows, whole_analysis_bytes

    cap = current().memory_limit_bytes
    rows = [activity_rows(Path(p)) for p in paths]
    need = max((min(whole_analysis_bytes(r), cap) for r in rows if r is not None),
               default=0)
    if need <= 0:
        return jobs
    return max(1, min(jobs, cap // need))


def _worker_setup() -> None:
    """Once per worker: cgprof's analysis imported."""
    import cgprof.metrics  # noqa: F401
    import cgprof.ranks  # noqa: F401


def analyze_file(path: str, step: str | None = None, skip: int = 0,
                 min_gap_us: float = 0.0, name: str | None = None,
                 settings: Settings | None = None) -> list[RankResult]:
    """Load one file and analyse each of its ranks; compact results, in pid order.

    ``name``: the path the results and errors give for the file (default: ``path``). A Dask
    worker opens the absolute path, but the report names the file as the user gave it, as
    a local run does. settings: those to run under (None: the active ones, else this
    process's environment's). A :class:`CgprofError` names the file; any other failure is
    turned into one too."""
    shown = str(path) if name is None else name
    try:
        with using(settings):
            return [_named(r, shown) for r in _analyze_file(path, step, skip, min_gap_us)]
    except CgprofError as exc:
        msg = str(exc)
        if shown != str(path) and msg.startswith(str(path) + ":"):
            raise CgprofError(shown + msg[len(str(path)):]) from None
        raise
    except Exception as exc:  # a bug or an unreadable file: still one line naming the file
        raise CgprofError(f"{shown}: analysis failed ({type(exc).__name__}: {exc})") from None


def _analyze_file(path: str, step: str | None, skip: int,
                  min_gap_us: float) -> list[RankResult]:
    """:func:`analyze_file`'s work, every result naming the file ``path``."""
    from cgprof.io.loader import load
    from cgprof.plan import RANK_BY_RANK, plan_input
    from cgprof.ranks import apart_results

    plan = plan_input(path, chunks=False)  # (a file is a rank or ranks: read whole)
    if plan.shape == RANK_BY_RANK:  # one rank's rows at a time
        return apart_results(path, list(plan.heads), step=step, skip=skip,
                             min_gap_us=min_gap_us, shape=RankResult.compact)
    trace = load(path)
    heads = rank_heads(trace)
    if not heads:
        raise TraceError(f"{path}: no process with GPU work, so no rank")
    # one rank's sub-trace at a time (each result compact before the next is cut)
    out = [analyze_rank(rank_of(trace, h), str(path), step=step, skip=skip,
                        min_gap_us=min_gap_us).compact() for h in heads]
    return with_others(out, trace, str(path))


def _named(r: RankResult, name: str) -> RankResult:
    """``r`` with every place that names its file saying ``name``: the rank's path, its
    analysis's ``info["path"]`` (the document's ``trace.path``) and its other processes'."""
    if r.path == name:
        return r
    result = dataclasses.replace(r.result, info={**r.result.info, "path": name})
    others = None if r.others is None else dataclasses.replace(r.others, path=name)
    return dataclasses.replace(r, path=name, result=result, others=others)


def _pool_context() -> Any:
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["cgprof._worker"])
    return ctx


def _run_local(paths: list[str], kwargs: dict[str, Any], jobs: int,
               say: Progress) -> list[list[RankResult]]:
    n = len(paths)
    if jobs <= 1 or n <= 1:
        out = []
        for i, p in enumerate(paths):
            say(f"analysing file {i + 1} of {n}")
            out.append(analyze_file(p, **kwargs))
        return out
    from concurrent.futures import ProcessPoolExecutor

    workers = min(jobs, n)
    with ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context(),
                             initializer=_worker_setup) as pool:
        futures = [pool.submit(analyze_file, p, **kwargs,
                               settings=current().replace(threads=1)) for p in paths]
        results = []
        try:
            for i, f in enumerate(futures):  # in file order: the first bad file is reported
                say(f"analysed {i} of {n} files ({workers} workers)")
                results.append(f.result())
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return results


def _run_dask(paths: list[str], names: list[str], kwargs: dict[str, Any], address: str,
              say: Progress) -> list[list[RankResult]]:
    """Each file of ``paths`` analysed on the cluster at ``address``, its results and errors
    naming it as ``names`` does."""
    try:
        from distributed import Client
    except ImportError:
        raise CgprofError("--dask needs dask.distributed: pip install 'cgprof[dask]'") from None
    try:
        client = Client(address, timeout=f"{DASK_CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise CgprofError(f"cannot reach the Dask scheduler at {address} ({exc})") from None
    try:
        client.run(_worker_setup)
        futures = client.map(_dask_task, paths, names, pure=False, **kwargs)
        results = []
        try:
            for i, f in enumerate(futures):
                say(f"analysed {i} of {len(paths)} files on {address}")
                results.append(f.result())
        finally:
            client.cancel(futures)
        return results
    finally:
        client.close()


def _dask_task(path: str, name: str, **kwargs: Any) -> list[RankResult]:
    """:func:`analyze_file` of ``path`` on a Dask worker, naming it ``name`` (what
    ``Client.map`` calls with the two lists): under that worker's environment's settings,
    with one engine thread."""
    return analyze_file(path, name=name, **kwargs,
                        settings=Settings.from_env().replace(threads=1))


def analyze_files(paths: Sequence[str | Path], step: str | None = None, skip: int = 0,
                  min_gap_us: float = 0.0, jobs: int | None = None, dask: str | None = None,
                  rank: int | None = None, progress: Progress | None = None) -> RanksResult:
    """Analyse many trace files (one or more ranks each) and reduce them to one run.

    jobs: local worker processes (default: :func:`default_jobs`; 1 runs in this process).
    dask: scheduler address; the workers must see the files at the same paths (absolute
    paths are sent; the results name the files as given). Output is identical whichever
    runs it, byte for byte."""
    if not paths:
        raise CgprofError("no trace files to analyse")
    given = [str(p) for p in paths]
    kwargs = {"step": step, "skip": skip, "min_gap_us": min_gap_us}
    say = checkpoint(progress)
    if dask:  # the workers open the absolute paths; the results name the files as given
        per_file = _run_dask([str(Path(p).resolve()) for p in paths], given, kwargs, dask,
                             say)
    else:
        per_file = _run_local(given, kwargs, memory_jobs(given, jobs or default_jobs()), say)
    return reduce_ranks(given, per_file, rank=rank)
