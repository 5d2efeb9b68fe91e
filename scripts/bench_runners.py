#!/usr/bin/env python3
"""Eager vs CUDA-graphed step times of the built-in workloads: one JSON line per workload.

    python3 scripts/bench_runners.py                 # all workloads, on the GPU
    python3 scripts/bench_runners.py --only mlp-train-b32 --steps 50
    python3 scripts/bench_runners.py --breakdown     # also: where the MLP step's time goes
    python3 scripts/bench_runners.py --repeat 3      # each workload 3 times (eager varies)
    python3 scripts/bench_runners.py --vs-hand       # runner's graphed step vs hand-written

Each workload runs eager then graphed in one process from the same seed (cgprof.runners,
``mode="both"``), ``--warmup`` untimed steps then ``--steps`` timed ones. Times are host
wall milliseconds per step (train) or per request (infer), each step ending with
``torch.cuda.synchronize()``. ``speedup`` is eager/graph of the mean step time (train) or
of the p50 latency (infer); ``target`` is the issue's floor for the H200 (null: none),
``met`` whether the speedup reached it and ``margin`` speedup/target. Both modes run with
the runners' settings (fused optimizer, ``cudnn.benchmark``, channels-last ResNet
inference; each
line says which took effect). PyTorch's default numerics are left alone (TF32 off for
matmuls, on for cuDNN convolutions). Progress goes to stderr, JSON lines to stdout.

``--repeat N`` runs each workload N times in turn (a fresh eager and graphed run each time,
all workloads once before any repeats) and adds ``"repeat": k``; host-bound eager step times
move from run to run more than graphed ones, so one line is a sample, not the answer.

``--breakdown`` adds diagnostic lines (``"workload": "breakdown"``, no targets): the
41-layer MLP's training step, graphed and eager, with the previous runner's choices
(foreach SGD, a loss copy after each step) and the current ones (fused SGD, loss logged
inside the graph), and with TF32 matmuls (not used by the runners: a numerics change);
``replay_gpu_ms`` is the GPU time of one replay (back-to-back replays between two CUDA
events), ``host_overhead_ms`` what the timed step adds to it (input copies, launch,
synchronize). One more line times ResNet-18 training with NHWC tensors.

``--vs-hand`` measures the runners' own overhead instead: for each fixed-shape workload, in
one process, the runner's graphed step (``cgprof run``'s loop: ``GraphedTrainStep`` /
``GraphedInference``, NVTX ranges, counters) against a minimal hand-written capture of the
same model, batches and optimizer (warm-up on a side stream, static buffers filled with
``copy_``, one ``torch.cuda.graph`` capture, ``replay()``), both timed by the same loop
(host wall time per step ending with ``torch.cuda.synchronize()``). The hand-written
training step logs its loss on the device inside the graph exactly as the runner does
(same two kernels), so both replay the same GPU work. ``--rounds`` (default 3) rounds run
the two alternately (runner first in odd rounds, hand-written first in even ones); one JSON
line per workload gives every round's times, ``ratio`` = the median over rounds of
hand/runner (mean step time for training, p50 for inference; 1.0: no overhead), and
``met`` = ratio >= ``target`` (0.98). The variable-batch workload has no hand-written
counterpart and is left out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

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


def bench(name: str, steps: int, warmup: int, seed: int, **settings: Any) -> dict[str, object]:
    """Run one workload eager and graphed; return its JSON line as a dict.

    ``settings`` override RunConfig fields (``channels_last=True``, ...).
    """
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
        **settings,
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
        "margin": None if target is None else round(speedup / target, 3),
        "fused_optimizer": result.fused_optimizer,
        "cudnn_benchmark": result.cudnn_benchmark,
        "channels_last": result.channels_last,
        "captures": graph.captures,
        "replays": graph.replays,
        "fallbacks": graph.fallbacks,
        "fallback_reason": graph.fallback_reason,
        "capture_ms": round(graph.capture_ms, 2),
        "loss_max_rel_diff": result.loss_max_rel_diff,
        "device_name": result.device_name,
        "torch_version": result.torch_version,
    }


def _mlp_mode(
    mode: str,
    *,
    fused: bool,
    loss_in_graph: bool,
    steps: int,
    seed: int,
    size: str = "full",
    device: str = "cuda",
    backend: Any = None,
) -> dict[str, float]:
    """Time the MLP training step (batch 32, SGD) in one mode; graph: also one replay's GPU time.

    ``size``, ``device`` and ``backend`` exist for a smoke test on the CPU.
    """
    import torch
    from torch import nn

    from cgprof.runners import graphs, models

    data = models.make_batches(models.spec("mlp", size), 32, 16, seed=seed, device=device)
    torch.manual_seed(seed)
    model = models.build_model("mlp", size, seed=seed).to(device)
    opt = models.make_optimizer("sgd", list(model.parameters()), capturable=True, fused=fused)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    # room for every call and for the raw replays below (they bypass the bounds check)
    log = torch.zeros(2 * steps + 20, device=device)
    kept: list[torch.Tensor] = []
    step: Any
    if mode == "graph":
        extra = {"backend": backend} if backend is not None else {}
        step = graphs.GraphedTrainStep(
            model, nn.CrossEntropyLoss(), opt, loss_log=log if loss_in_graph else None, **extra
        )
    else:
        step = graphs.EagerTrainStep(model, nn.CrossEntropyLoss(), opt)

    def one(i: int) -> None:
        loss = step(*data[i % len(data)])
        if not loss_in_graph:
            log[i].copy_(loss)  # the previous runner: one copy launch after each step
        elif mode == "eager":
            kept.append(loss)

    for i in range(10):  # graph: 3 warm-up steps, the capture, replays
        one(i)
    sync()
    times = []
    for i in range(10, 10 + steps):
        t0 = time.perf_counter_ns()
        one(i)
        sync()
        times.append(time.perf_counter_ns() - t0)
    out: dict[str, float] = {f"{mode}_step_mean_ms": sum(times) / len(times) / 1e6}
    if mode == "graph":
        (graph,) = step.graphs.values()
        if device == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                step.backend.replay(graph)
            end.record()
            end.synchronize()
            replay_ms = start.elapsed_time(end) / steps
        else:
            t0 = time.perf_counter_ns()
            for _ in range(steps):
                step.backend.replay(graph)
            replay_ms = (time.perf_counter_ns() - t0) / steps / 1e6
        out["replay_gpu_ms"] = replay_ms
        out["host_overhead_ms"] = out["graph_step_mean_ms"] - out["replay_gpu_ms"]
    return out


def _mlp_variant(
    variant: str, *, fused: bool, loss_in_graph: bool, tf32: bool, steps: int, seed: int
) -> dict[str, object]:
    """One breakdown line: the MLP training step graphed and eager under one set of choices."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        times: dict[str, float] = {}
        for mode in ("eager", "graph"):
            times.update(
                _mlp_mode(mode, fused=fused, loss_in_graph=loss_in_graph, steps=steps, seed=seed)
            )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    out: dict[str, object] = {"workload": "breakdown", "model": "mlp", "task": "train"}
    out.update(variant=variant, fused_sgd=fused, loss_in_graph=loss_in_graph, tf32=tf32)
    out.update({k: round(v, 4) for k, v in times.items()})
    out["speedup"] = round(times["eager_step_mean_ms"] / times["graph_step_mean_ms"], 3)
    return out


def breakdown(steps: int, warmup: int, seed: int) -> list[dict[str, object]]:
    """Diagnostic lines: where the graphed MLP step's time goes; ResNet-18 training in NHWC."""
    lines = [
        _mlp_variant(
            "previous runner: foreach SGD, loss copied after each step",
            fused=False,
            loss_in_graph=False,
            tf32=False,
            steps=steps,
            seed=seed,
        ),
        _mlp_variant(
            "current runner: fused SGD, loss logged inside the graph",
            fused=True,
            loss_in_graph=True,
            tf32=False,
            steps=steps,
            seed=seed,
        ),
        _mlp_variant(
            "current runner + TF32 matmuls (diagnostic only: changes numerics)",
            fused=True,
            loss_in_graph=True,
            tf32=True,
            steps=steps,
            seed=seed,
        ),
    ]
    nhwc = bench("resnet18-train-b16", steps, warmup, seed, channels_last=True)
    nhwc["workload"] = "breakdown"
    nhwc["variant"] = "resnet18-train-b16 with NHWC tensors (channels_last=True)"
    lines.append(nhwc)
    return lines


#: The runner's graphed step must reach this fraction of the hand-written step's speed.
VS_HAND_TARGET = 0.98
#: Eager warm-up iterations before the hand-written capture (the runners' defaults).
HAND_WARMUP_ITERS = {"train": 3, "infer": 2}


def hand_graphed(name: str, steps: int, warmup: int, seed: int) -> float:
    """Minimal hand-written capture of workload ``name``; its step time in ms.

    Mean step time (train) or p50 latency (infer) over ``steps`` timed replays after
    ``warmup`` untimed ones, with the runners' settings (fused optimizer, cudnn.benchmark,
    channels-last for conv inference) and the same model, data and seed.
    """
    import torch
    from torch import nn

    from cgprof.runners import models
    from cgprof.runners.config import DEFAULT_OPTIMIZER
    from cgprof.runners.timing import summarize

    task, model_name, batch, variable, _ = WORKLOADS[name]
    assert not variable
    spec = models.spec(model_name)
    layout = (
        torch.channels_last if task == "infer" and spec.convolutional else torch.contiguous_format
    )
    total = warmup + steps
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        model = models.build_model(model_name, seed=seed).cuda()
        if layout == torch.channels_last:
            model = model.to(memory_format=layout)  # type: ignore[call-overload]
        data = models.make_batches(
            spec, batch, min(total, 16), seed=seed, device="cuda", memory_format=layout
        )
        sx = torch.empty_like(data[0][0])  # keeps the batch's memory format
        sy = torch.empty_like(data[0][1])
        torch.manual_seed(seed)
        side = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        if task == "train":
            opt = models.make_optimizer(
                DEFAULT_OPTIMIZER[model_name], list(model.parameters()), capturable=True, fused=True
            )
            loss_fn = nn.CrossEntropyLoss()
            log = torch.zeros(HAND_WARMUP_ITERS[task] + total, device="cuda")
            slot = torch.zeros(1, dtype=torch.long, device="cuda")

            def work() -> None:
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(sx), sy)
                loss.backward()
                opt.step()
                log.index_copy_(0, slot, loss.detach().reshape(1))
                slot.add_(1)

            model.train()
        else:
            model.eval()

            def work() -> None:
                with torch.no_grad():
                    model(sx)

        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(HAND_WARMUP_ITERS[task]):
                sx.copy_(data[i % len(data)][0])
                sy.copy_(data[i % len(data)][1])
                work()
        torch.cuda.current_stream().wait_stream(side)
        if task == "train":
            opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            work()
        torch.cuda.synchronize()
        times = []
        for i in range(total):
            x, y = data[i % len(data)]
            t0 = time.perf_counter_ns()
            sx.copy_(x)
            if task == "train":
                sy.copy_(y)
            graph.replay()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter_ns() - t0)
        stats = summarize(times)
        return stats.mean_ms if task == "train" else stats.p50_ms
    finally:
        torch.backends.cudnn.benchmark = saved


def runner_graphed(name: str, steps: int, warmup: int, seed: int) -> float:
    """The runner's graphed step time of workload ``name`` in ms (mean: train, p50: infer)."""
    task, model, batch, variable, _ = WORKLOADS[name]
    cfg = RunConfig(
        task, model, mode="graph", batch=batch, steps=steps, warmup=warmup, device="cuda",
        seed=seed, variable=variable,
    )
    graph = run_workload(cfg).modes["graph"]
    if graph.fallbacks or graph.captures != 1:
        raise RuntimeError(f"{name}: the runner did not replay one graph ({graph.fallback_reason})")
    return graph.mean_ms if task == "train" else graph.p50_ms


def vs_hand_line(name: str, runner_ms: list[float], hand_ms: list[float]) -> dict[str, object]:
    """One ``--vs-hand`` JSON line from every round's times (runner and hand, in ms)."""
    task = WORKLOADS[name][0]
    ratios = [h / r for h, r in zip(hand_ms, runner_ms, strict=True)]
    ratio = statistics.median(ratios)
    return {
        "workload": name,
        "vs_hand": True,
        "basis": "mean step time" if task == "train" else "p50 latency",
        "rounds": len(ratios),
        "runner_ms": [round(v, 4) for v in runner_ms],
        "hand_ms": [round(v, 4) for v in hand_ms],
        "ratios": [round(v, 4) for v in ratios],
        "runner_ms_median": round(statistics.median(runner_ms), 4),
        "hand_ms_median": round(statistics.median(hand_ms), 4),
        "ratio": round(ratio, 4),
        "target": VS_HAND_TARGET,
        "met": ratio >= VS_HAND_TARGET,
    }


def vs_hand(names: list[str], rounds: int, steps: int, warmup: int, seed: int) -> bool:
    """Print one ``--vs-hand`` line per workload; True if every workload ran."""
    import gc

    import torch

    times: dict[str, dict[str, list[float]]] = {n: {"runner": [], "hand": []} for n in names}
    errors: dict[str, str] = {}
    for k in range(rounds):
        for name in names:
            if name in errors:
                continue
            order = ("runner", "hand") if k % 2 == 0 else ("hand", "runner")
            t0 = time.perf_counter()
            try:
                for who in order:
                    fn = runner_graphed if who == "runner" else hand_graphed
                    times[name][who].append(fn(name, steps, warmup, seed))
                    gc.collect()
                    torch.cuda.empty_cache()
            except Exception as exc:  # one broken workload must not hide the others
                errors[name] = f"{type(exc).__name__}: {exc}"
            got = {who: v[k] for who, v in times[name].items() if len(v) > k}
            print(f"vs-hand {name} round {k + 1}: {got} ms, {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
    for name in names:
        if name in errors:
            line: dict[str, object] = {"workload": name, "vs_hand": True, "error": errors[name]}
        else:
            line = vs_hand_line(name, times[name]["runner"], times[name]["hand"])
        print(json.dumps(line), flush=True)
    return not errors


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
    parser.add_argument(
        "--repeat", type=int, default=1, help="run each workload this many times (default 1)"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also print diagnostic lines: where the graphed MLP step's time goes",
    )
    parser.add_argument(
        "--vs-hand",
        action="store_true",
        help="compare each runner's graphed step with a minimal hand-written capture "
        f"(target ratio >= {VS_HAND_TARGET})",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="--vs-hand: interleaved rounds (default 3)"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.vs_hand:
        fixed = [n for n in WORKLOADS if not WORKLOADS[n][3]]
        for name in args.only or []:
            if name not in fixed:
                parser.error(f"--vs-hand: {name} has variable batch sizes, no hand-written twin")
        ok = vs_hand(args.only or fixed, args.rounds, args.steps, args.warmup, args.seed)
        return 0 if ok else 1
    failed = False
    for k in range(args.repeat):
        for name in args.only or list(WORKLOADS):
            t0 = time.perf_counter()
            try:
                line = bench(name, args.steps, args.warmup, args.seed)
            except Exception as exc:  # one broken workload must not hide the others' numbers
                failed = True
                line = {"workload": name, "error": f"{type(exc).__name__}: {exc}"}
            if args.repeat > 1:
                line["repeat"] = k + 1
            print(json.dumps(line), flush=True)
            print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if args.breakdown:
        t0 = time.perf_counter()
        try:
            for extra in breakdown(min(args.steps, 100), args.warmup, args.seed):
                print(json.dumps(extra), flush=True)
        except Exception as exc:
            failed = True
            print(json.dumps({"workload": "breakdown", "error": f"{type(exc).__name__}: {exc}"}))
        print(f"breakdown: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
