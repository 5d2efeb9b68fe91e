"""Cut a trace into steps (instances of one NVTX range) and measure each step.

Which range: ``--step NAME[@DOMAIN]``; by default cgprof's own ``step`` range in domain
``cgprof`` when present, else the best of the repeating ranges scored on evidence, or a fixed
cycle of top-level ranges, else the whole trace as one step (rules in
cgprof.metrics.stepchoice; said plainly in ``StepResult.source`` and ``rule``).

Attribution starts from what nsys's NVTX projection does: a CUDA API call belongs to a step
when it lies inside the range on the same thread. Unlike nsys, calls on threads that emit no
step ranges (PyTorch's autograd threads, which launch the whole backward pass) belong to the
step of their process that contains them in time; without this a training step would lose its
backward kernels. GPU work belongs to the step of the call that launched it (joined on pid +
correlationId), so a graph replay's kernels count for the step that called
``cudaGraphLaunch``. It is a sorted sweep, not an SQL range join.

Here: the choice of the step instances (:func:`step_instances`) and their measurement
(:func:`compute_steps`, :func:`measure_chunk`). The parts: the step table's contract
(:mod:`cgprof.metrics.step_result`), the attribution of calls and operations to steps
(:mod:`cgprof.metrics.step_attribution`), the per-step figures
(:mod:`cgprof.metrics.step_table`) and the launch wait per step
(:mod:`cgprof.metrics.step_launch_wait`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cgprof.errors import AnalysisError
from cgprof.io.trace import Trace
from cgprof.metrics.step_result import StepResult
from cgprof.metrics.step_table import _measure
from cgprof.metrics.stepchoice import (  # noqa: F401  (re-exported)
    DEFAULT_STEP,
    StepChoice,
    parse_step_option,
)
from cgprof.metrics.stepchoice import choose_step_ranges as _choose
from cgprof.metrics.summaries import nvtx_ranges


def choose_step_ranges(
    trace: Trace, step: str | None, calls: pd.DataFrame | None = None
) -> StepChoice:
    """The NVTX range instances that are the steps and how they were chosen
    (rules and scoring: cgprof.metrics.stepchoice)."""
    return _choose(trace, step, calls)


def compute_steps(
    trace: Trace,
    calls: pd.DataFrame,
    ops: pd.DataFrame,
    step: str | None = None,
    skip: int = 0,
) -> StepResult:
    """Measure every step; see the module doc for how work is attributed."""
    inst = step_instances(trace, calls, ops, step, skip)
    steps, call_steps, lookup = _measure(inst.ranges, inst.table, calls, ops,
                                         whole=inst.source == "whole-trace")
    return inst.result(steps, call_steps, lookup)


@dataclass
class StepInstances:
    """The chosen step instances, before they are measured: ``table`` (one row per step, in
    step order, after --skip; its ``index`` is the position among all instances), the NVTX
    ``ranges`` they were chosen from (cgprof.metrics.summaries.nvtx_ranges) and the choice."""

    table: pd.DataFrame
    ranges: pd.DataFrame
    choice: StepChoice
    skipped: int
    total: int

    @property
    def source(self) -> str:
        return self.choice.source

    def result(self, steps: pd.DataFrame, call_steps: pd.DataFrame,
               lookup: tuple | None) -> StepResult:
        """The :class:`StepResult` of these instances, measured."""
        c = self.choice
        return StepResult(steps=steps, name=c.name, source=c.source, skipped=self.skipped,
                          total_instances=self.total, call_steps=call_steps, rule=c.rule,
                          candidates=c.candidates, lookup=lookup)


def step_instances(trace: Trace, calls: pd.DataFrame, ops: pd.DataFrame | None,
                   step: str | None = None, skip: int = 0,
                   labels: Callable[[], pd.DataFrame] | None = None) -> StepInstances:
    """The step instances :func:`compute_steps` measures (``ops``: read only for a
    whole-trace step, None when the caller knows the steps come from NVTX ranges;
    ``labels``: what names each launch when the steps come from the launch stream, see
    cgprof.metrics.stepchoice)."""
    ranges = nvtx_ranges(trace)  # once, for the choice and the steps' groups
    choice = _choose(trace, step, calls, ranges, labels)
    sel, name, source = choice.ranges, choice.name, choice.source
    if source == "whole-trace":
        if ops is None:
            raise ValueError("a whole-trace step needs the GPU ops")
        inst = _whole_trace_step(trace, calls, ops)
    else:
        inst = sel.sort_values(["start_ns", "global_tid"], kind="stable").reset_index(drop=True)
        inst = inst.assign(end_ns=inst["end_ns"].astype("int64"))
    total = len(inst)
    if skip < 0:
        raise AnalysisError("--skip must be 0 or more")
    if skip and skip >= total:
        raise AnalysisError(
            f"{trace.path}: --skip {skip} leaves no steps ({total} instances of {name})")
    inst = inst.assign(index=np.arange(total, dtype=np.int64)).iloc[skip:].reset_index(drop=True)
    return StepInstances(table=inst, ranges=ranges, choice=choice, skipped=skip, total=total)


def measure_chunk(inst: StepInstances, s0: int, s1: int, calls: pd.DataFrame,
                  ops: pd.DataFrame, replayed_before: bool
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The step table rows of steps ``[s0, s1)`` (rows of ``inst.table``) and their
    call_steps, from the chunk's own API calls and GPU ops (cgprof.metrics.chunked's
    contract): what :func:`compute_steps` gives for those steps. ``replayed_before``: a step
    before ``s0`` launched a graph (what decides recapture and fallback)."""
    sub = inst.table.iloc[s0:s1].reset_index(drop=True)
    steps, call_steps, _ = _measure(inst.ranges, sub, calls, ops, whole=False, first_step=s0,
                                    replayed_before=replayed_before)
    if s0 and len(call_steps):
        call_steps = call_steps.assign(step=call_steps["step"].to_numpy() + s0)
    return steps, call_steps


def _whole_trace_step(trace: Trace, calls: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    starts = [df["start_ns"].min() for df in (calls, ops) if len(df)]
    ends = [df["end_ns"].max() for df in (calls, ops) if len(df)]
    start, end = (int(min(starts)), int(max(ends))) if starts else (0, 0)
    return pd.DataFrame({"start_ns": [start], "end_ns": [end], "global_tid": [-1], "pid": [-1],
                         "tid": [-1], "payload": pd.array([pd.NA], dtype="Int64"),
                         "text": [""], "domain": [""], "name": [""]})
