"""Recompute the what-if estimate's machine-class constants from graphed node-level traces.

    python3 scripts/calibrate_estimate.py traces/*_graph.sqlite

For every graphed trace recorded with ``--cuda-graph-trace=node``: this host's eager launch
cost h (p50 host time of its kernel launch calls, from its warm-up steps), and per steady
graphed step the replay's nodes, launch-to-first-node latency, cudaGraphLaunch host time and
median node gap. Prints least-squares lines of latency / h and launch host time / h against
nodes, and the median node gap: the constants in cgprof/metrics/verdict.py
(LATENCY_*_H, GRAPH_LAUNCH_*_H, NODE_GAP_NS). Then checks the estimate against every
eager/graphed pair it was given (NAME_eager.sqlite next to NAME_graph.sqlite).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import cgprof
from cgprof.metrics.launches import api_calls
from cgprof.metrics.verdict import host_launch_ns


def main(paths: list[str]) -> int:
    rows = []
    for p in paths:
        r = cgprof.analyze(p)
        if r.info["graph_trace_mode"] != "node" or not len(r.replays.replays):
            continue
        calls = api_calls(r.trace)
        h, _ = host_launch_ns(calls, r.steps.call_steps, r.steps.steps["step"])
        rp = r.replays.replays
        rows.append((Path(p).stem, h, float(rp["nodes"].median()),
                     float(rp["latency_ns"].median()), float(rp["api_dur_ns"].median()),
                     float(rp["median_gap_ns"].median())))
        print(f"{rows[-1][0]}: h {h / 1000:.2f} us, nodes {rows[-1][2]:.0f}, latency "
              f"{rows[-1][3] / 1000:.1f} us, launch host {rows[-1][4] / 1000:.1f} us, node gap "
              f"{rows[-1][5]:.0f} ns")
    if len(rows) < 2:
        print("need two or more graphed node-level traces")
        return 1
    h = np.array([r[1] for r in rows])
    nodes = np.array([r[2] for r in rows])
    lat = np.array([r[3] for r in rows])
    api = np.array([r[4] for r in rows])
    per, fixed = np.polyfit(nodes, lat / h, 1)
    print(f"latency / h = {fixed:.3f} + {per:.4f} * nodes")
    per, fixed = np.polyfit(nodes, api / h, 1)
    print(f"graph launch host time / h = {fixed:.3f} + {per:.4f} * nodes "
          f"(median per node {np.median(api / h / nodes):.3f})")
    print(f"node gap median {np.median([r[5] for r in rows]):.0f} ns")
    for p in paths:
        if p.endswith("_graph.sqlite"):
            eager = p.replace("_graph.sqlite", "_eager.sqlite")
            if Path(eager).exists():
                e, g = cgprof.analyze(eager), cgprof.analyze(p)
                measured = e.verdict.eager_step_p50_ns / g.verdict.graph_step_p50_ns
                est = e.verdict.estimated_speedup or 0.0
                print(f"{Path(eager).stem}: estimate {est:.2f}x, measured {measured:.2f}x "
                      f"({100 * (est / measured - 1):+.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
