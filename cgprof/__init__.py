"""cgprof: do CUDA Graphs help your PyTorch training or inference? Prove it from nsys traces.

The public API follows the data flow record -> trace -> metrics -> diff -> report:

    trace = cgprof.load("run.sqlite")          # read-only, tables as pandas DataFrames
    result = cgprof.analyze(trace)             # every table `cgprof analyze` prints
    d = cgprof.diff(result_eager, result_graph)

Importing cgprof is light: pandas and numpy only, never torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.metrics import AnalysisResult
    from cgprof.trace import Trace

__all__ = ["__version__", "load", "analyze", "diff"]


def load(path: Any, **kwargs: Any) -> Trace:
    """Open an nsys SQLite export read-only and load the tables cgprof uses."""
    from cgprof.trace import load as _load

    return _load(path, **kwargs)


def analyze(trace_or_path: Any, **kwargs: Any) -> AnalysisResult:
    """Compute launches, GPU gaps, graph replays, steps, kernel summary and verdict."""
    from cgprof.metrics import analyze as _analyze

    return _analyze(trace_or_path, **kwargs)


def diff(baseline: Any, candidate: Any, **kwargs: Any) -> Any:
    """Compare two analysis results step by step (see `cgprof.diff.diff`)."""
    from cgprof.diff import diff as _diff

    return _diff(baseline, candidate, **kwargs)
