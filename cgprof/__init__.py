"""cgprof: do CUDA Graphs help your PyTorch training or inference? Prove it from nsys traces.

The public API follows the data flow record -> trace -> metrics -> diff -> report:

    trace = cgprof.load("run.sqlite")          # read-only, tables as pandas DataFrames
    result = cgprof.analyze(trace)             # every table `cgprof analyze` prints
    d = cgprof.diff(result_eager, result_graph)

    from cgprof import Settings                # memory cap, cache, threads (cgprof.settings)
    result = cgprof.analyze("big.sqlite", settings=Settings(memory_limit="1GB"))

Importing cgprof is light: pandas and numpy only, never torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cgprof import io as _io
from cgprof.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from contextlib import AbstractContextManager
    from pathlib import Path

    from cgprof.io.trace import Trace
    from cgprof.metrics import AnalysisResult
    from cgprof.settings import Settings

__all__ = ["__version__", "load", "analyze", "diff", "Settings"]


def load(path: Any, settings: Settings | None = None, **kwargs: Any) -> Trace:
    """Open an nsys SQLite export read-only and load the tables cgprof uses.

    settings: how to read it (None: from the environment, :meth:`Settings.from_env`)."""
    from cgprof.io.loader import load as _load
    from cgprof.settings import using

    with using(settings):
        return _load(path, **kwargs)


def analyze(trace_or_path: Any, settings: Settings | None = None,
            **kwargs: Any) -> AnalysisResult:
    """Compute launches, GPU gaps, graph replays, steps, kernel summary and verdict.

    settings: how to read and analyse it (None: from the environment). A path is read as
    its plan says (:mod:`cgprof.plan`): a one-process trace whose whole analysis would
    exceed the memory cap a chunk of steps at a time, as ``cgprof analyze`` reads it (the
    same figures; the result then holds no trace, and lists the longest GPU gaps only)."""
    from cgprof.io.trace import Trace as _Trace
    from cgprof.metrics import analyze as _analyze
    from cgprof.settings import using

    with using(settings):
        if not isinstance(trace_or_path, _Trace):
            from cgprof.plan import CHUNKS, plan_input

            if plan_input(trace_or_path).shape == CHUNKS:
                from cgprof.metrics.chunked import analyze_capped

                chunked = analyze_capped(trace_or_path, **kwargs)
                if chunked is not None:
                    return chunked
        return _analyze(trace_or_path, **kwargs)


def diff(baseline: Any, candidate: Any, **kwargs: Any) -> Any:
    """Compare two analysis results step by step (see `cgprof.diff.diff`)."""
    from cgprof.diff import diff as _diff

    return _diff(baseline, candidate, **kwargs)


def _export_report(report: Path) -> AbstractContextManager[Path]:
    """A temporary SQLite export of the ``.nsys-rep`` ``report`` by nsys
    (:func:`cgprof.nsys.exported`): how the reading layer, which runs no nsys itself, has a
    report exported (:data:`cgprof.io.report_export`)."""
    from cgprof.nsys import exported

    return exported(report)


_io.report_export = _export_report


def __getattr__(name: str) -> Any:
    if name == "Settings":  # (imported on first use: `cgprof --help` stays light)
        from cgprof.settings import Settings

        return Settings
    raise AttributeError(f"module 'cgprof' has no attribute {name!r}")
