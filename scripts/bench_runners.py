#!/usr/bin/env python3
"""Eager vs CUDA-graphed step times of the built-in workloads: one JSON line per workload.

    python3 scripts/bench_runners.py                 # all workloads, on the GPU
    python3 scripts/bench_runners.py --only mlp-train-b32 --steps 50

Each workload runs eager then graphed in one process from the same seed (cgprof.runners,
``mode="both"``), ``--warmup`` untimed steps then ``--steps`` timed ones. Times are host
wall milliseconds per step (train) or per request (infer), each step ending with
``torch.cuda.synchronize()``. ``speedup`` is eager/graph of the mean step time (train) or
of the p50 latency (infer); ``target`` is the issue's floor for the H200 (null: none) and
``met`` whether the speedup reached it. PyTorch's default numerics are left alone (TF32 off
for matmuls, on for cuDNN convolutions). Progress goes to stderr, JSON lines to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from cgprof.runners import RunConfig, run_workload

# name -> (task, model, batch, variable, target speedup or None)
WORKLOADS: dict[str, tuple[str, str, int, bool, float | None]] = {
    "mlp-train-b32": ("train", "mlp", 32, False, 6.0),
    "resnet18-train-b16": ("train", "resnet18", 16, False, 4.0),
    "transformer-train-b8": ("train", "transformer", 8, False, 2.5),
    "resnet18-infer-b1": ("infer", "resnet18", 1, False, 5.0),
    "mlp-infer-b1": ("infer", "mlp", 1, False, None),
    "transformer-infer-b1": ("infer", "transformer", 1, False, None),
    "resnet18-infer-var16": ("infer", "resnet18", 16, True, None),
}


def bench(name: str, steps: int, warmup: int, seed: int) -> dict[str, object]:
    """Run one workload eager and graphed; return its JSON line as a dict."""
    task, model, batch, variable, target = WORKLOADS[name]
    cfg = RunConfig(
        task,
        model,
        mode="both",
        batch=batch,
        steps=steps,
        warmup=warmup,
        device="cuda",
        seed=seed,
        variable=variable,
    )
    result = run_workload(cfg)
    eager, graph = result.modes["eager"], result.modes["graph"]
    speedup = result.speedup
    assert speedup is not None
    return {
        "workload": name,
        "task": task,
        "model": model,
        "batch": batch,
        "variable": variable,
        "optimizer": result.optimizer,
        "steps": steps,
        "warmup": warmup,
        "eager_mean_ms": round(eager.mean_ms, 4),
        "eager_p50_ms": round(eager.p50_ms, 4),
        "eager_p99_ms": round(eager.p99_ms, 4),
        "graph_mean_ms": round(graph.mean_ms, 4),
        "graph_p50_ms": round(graph.p50_ms, 4),
        "graph_p99_ms": round(graph.p99_ms, 4),
        "eager_per_s": round(eager.throughput_per_s, 1),
        "graph_per_s": round(graph.throughput_per_s, 1),
        "speedup": round(speedup, 3),
        "speedup_basis": "mean step time" if task == "train" else "p50 latency",
        "target": target,
        "met": None if target is None else speedup >= target,
        "captures": graph.captures,
        "replays": graph.replays,
        "fallbacks": graph.fallbacks,
        "fallback_reason": graph.fallback_reason,
        "capture_ms": round(graph.capture_ms, 2),
        "loss_max_rel_diff": result.loss_max_rel_diff,
        "device_name": result.device_name,
        "torch_version": result.torch_version,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps per mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(WORKLOADS),
        help="run only this workload (repeatable)",
    )
    args = parser.parse_args(argv)
    failed = False
    for name in args.only or list(WORKLOADS):
        t0 = time.perf_counter()
        try:
            line = bench(name, args.steps, args.warmup, args.seed)
        except Exception as exc:  # one broken workload must not hide the others' numbers
            failed = True
            line = {"workload": name, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(line), flush=True)
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
