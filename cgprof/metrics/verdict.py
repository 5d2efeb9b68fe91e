"""The answer a user came for: is the step launch-bound, and what would graphs buy?

For traces with eager steps the what-if estimate of a graphed step is

    graphed_ns = max(GPU busy + nodes * NODE_GAP_NS,               # the GPU side
                     GRAPH_LAUNCH_FIXED_NS + nodes * GRAPH_LAUNCH_PER_NODE_NS)   # the host side

per step (``nodes`` = GPU operations of the step), i.e. the same work replayed back to back
with the inter-node gap measured on an H200 (about 0.3 us) and the host cost of one
``cudaGraphLaunch`` (about 10-15 us plus 0.5-1 us per node on bare metal). When the trace also
holds graph launches, their measured median host time replaces the fixed launch cost. It is an
estimate of the GPU-bound limit, not a promise: host work other than launches (Python, data
loading, input copies) is assumed to overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

NODE_GAP_NS = 300
GRAPH_LAUNCH_FIXED_NS = 12_500
GRAPH_LAUNCH_PER_NODE_NS = 750


@dataclass
class Verdict:
    """Numbers behind the headline, and the headline itself (``lines``)."""

    kind: str  # "launch-bound", "not launch-bound", "graphed", "no steps"
    eager_steps: int = 0
    graph_steps: int = 0
    launch_bound_steps: int = 0
    eager_step_p50_ns: float | None = None
    graph_step_p50_ns: float | None = None
    measured_speedup: float | None = None
    eager_launches_per_step: float | None = None
    graph_launches_per_step: float | None = None
    eager_busy_pct_p50: float | None = None
    graph_busy_pct_p50: float | None = None
    replay_compactness_p50: float | None = None
    estimated_graph_step_ns: float | None = None
    estimated_speedup: float | None = None
    assumptions: dict[str, float] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def _p50(s: pd.Series) -> float | None:
    s = s.dropna()
    return float(np.median(s.to_numpy(dtype=np.float64))) if len(s) else None


def _us(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1000:.1f} us"


def _calls(n: float | None) -> str:
    n = n or 0
    return f"{n:.0f} launch call{'' if round(n) == 1 else 's'}"


def verdict(
    steps: pd.DataFrame,
    graph_launch_p50_ns: float | None,
    replay_compactness_p50: float | None = None,
) -> Verdict:
    """Summarise per-step results into a verdict (see module doc for the estimate)."""
    if steps.empty:
        return Verdict(kind="no steps", lines=["no steps to judge"])
    eager = steps[steps["mode"] == "eager"]
    graph = steps[steps["mode"] == "graph"]
    v = Verdict(kind="", eager_steps=len(eager), graph_steps=len(graph))
    v.launch_bound_steps = int(eager["launch_bound"].sum())
    # effective_ns: a graphed step's host range ends long before its replay does.
    v.eager_step_p50_ns = _p50(eager["effective_ns"])
    v.graph_step_p50_ns = _p50(graph["effective_ns"])
    launches = steps["kernel_launches"] + steps["graph_launches"]
    v.eager_launches_per_step = _p50(launches[eager.index])
    v.graph_launches_per_step = _p50(launches[graph.index])
    v.eager_busy_pct_p50 = _p50(eager["busy_pct"].astype("float64"))
    v.graph_busy_pct_p50 = _p50(graph["busy_pct"].astype("float64"))
    v.replay_compactness_p50 = replay_compactness_p50
    if v.eager_step_p50_ns and v.graph_step_p50_ns:
        v.measured_speedup = v.eager_step_p50_ns / v.graph_step_p50_ns

    fixed = graph_launch_p50_ns if graph_launch_p50_ns is not None else GRAPH_LAUNCH_FIXED_NS
    v.assumptions = {"node_gap_ns": NODE_GAP_NS, "graph_launch_fixed_ns": float(fixed),
                     "graph_launch_per_node_ns": GRAPH_LAUNCH_PER_NODE_NS}
    if len(eager):
        nodes = eager["gpu_ops"].to_numpy(np.float64)
        gpu_side = eager["gpu_busy_ns"].to_numpy(np.float64) + nodes * NODE_GAP_NS
        host_side = fixed + nodes * GRAPH_LAUNCH_PER_NODE_NS
        est = np.maximum(gpu_side, host_side)
        v.estimated_graph_step_ns = float(np.median(est))
        if v.eager_step_p50_ns:
            v.estimated_speedup = v.eager_step_p50_ns / v.estimated_graph_step_ns

    lines = []
    if len(eager):
        lb = v.launch_bound_steps
        v.kind = "launch-bound" if lb * 2 > len(eager) else "not launch-bound"
        lines.append(
            f"eager steps: {v.kind} ({lb} of {len(eager)} steps): step p50 "
            f"{_us(v.eager_step_p50_ns)}, GPU busy {v.eager_busy_pct_p50 or 0:.0f}% of it, "
            f"{_calls(v.eager_launches_per_step)} per step")
        lines.append(
            f"if graphed (estimate): ~{_us(v.estimated_graph_step_ns)} per step, "
            f"~{v.estimated_speedup or 0:.1f}x")
    if len(graph):
        if not len(eager):
            v.kind = "graphed"
        compact = ("" if replay_compactness_p50 is None
                   else f", replay compactness {replay_compactness_p50:.3f}")
        lines.append(
            f"graphed steps: {len(graph)}: step p50 {_us(v.graph_step_p50_ns)}, GPU busy "
            f"{v.graph_busy_pct_p50 or 0:.0f}% of it, {_calls(v.graph_launches_per_step)} "
            f"per step{compact}")
    if v.measured_speedup is not None:
        lines.append(
            f"measured: eager {_us(v.eager_step_p50_ns)} -> graphed {_us(v.graph_step_p50_ns)} "
            f"per step ({v.measured_speedup:.1f}x), launch calls per step "
            f"{v.eager_launches_per_step:.0f} -> {v.graph_launches_per_step:.0f}")
    if not lines:
        v.kind = "no steps"
        lines.append("only warm-up and capture steps: nothing steady to judge (see --skip)")
    v.lines = lines
    return v
