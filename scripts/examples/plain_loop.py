"""A plain PyTorch loop with no NVTX ranges and no cgprof import: most users' scripts.

Nothing marks the steps, so cgprof must find the iterations from the launch stream itself.
The script times its own steps (``time.perf_counter`` around the timed loop, one device
synchronize at each end) and prints the mean, so cgprof's steps and speedups can be checked
against the script's own clock, with and without the profiler.

    --task train      a Transformer encoder trained with AdamW (forward, backward, step)
    --task infer      the same encoder's forward pass on a fixed batch (no autograd)
    --mode eager      plain eager
    --mode graph      by hand, as the CUDA Graphs guides describe: warm-up iterations on a
                      side stream, one iteration captured into a torch.cuda.CUDAGraph over
                      static inputs, then per iteration ``copy_`` of the batch + replay()
    --mode compile    the model compiled with torch.compile(mode="reduce-overhead")
                      (Inductor's CUDA graph trees); the optimizer runs eagerly

Every ``--log-every`` iterations the loop reads the loss (or an output) back to the host,
as training loops do to print it: a device-to-host copy and a sync.

    cgprof record -o plain scripts/examples/plain_loop.py --task train --mode graph
    cgprof analyze plain.sqlite

CUDA is required (and Triton for ``--mode compile``).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("train", "infer"), default="train")
    parser.add_argument("--mode", choices=("eager", "graph", "compile"), default="eager")
    parser.add_argument("--steps", type=int, default=20, help="timed iterations")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed iterations first (side-stream warm-up or compilation)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("plain_loop.py needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda")
    layer = nn.TransformerEncoderLayer(args.width, nhead=4, dim_feedforward=4 * args.width,
                                       dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False),
                          nn.Linear(args.width, 10)).to(device)
    x = torch.randn(args.batch, args.seq, args.width, device=device)
    y = torch.randint(0, 10, (args.batch, args.seq), device=device)
    train = args.task == "train"
    forward = torch.compile(model, mode="reduce-overhead") if args.mode == "compile" else model
    if train:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
        loss_fn = nn.CrossEntropyLoss()
    else:
        model.eval()

    def iteration() -> torch.Tensor:
        if train:
            # A captured graph must keep its gradient buffers; elsewhere they are freed.
            optimizer.zero_grad(set_to_none=args.mode != "graph")
            loss = loss_fn(forward(x).flatten(0, 1), y.flatten())
            loss.backward()
            optimizer.step()
            return loss.detach()
        with torch.no_grad():
            return forward(x).sum()

    run = iteration
    warmup = args.warmup
    if args.mode == "graph":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                iteration()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = iteration()
        batch_x, batch_y = x.clone(), y.clone()

        def replay() -> torch.Tensor:
            x.copy_(batch_x)
            y.copy_(batch_y)
            graph.replay()
            return static_out

        run, warmup = replay, 0
    elif args.mode == "compile":
        def compiled_step() -> torch.Tensor:
            torch.compiler.cudagraph_mark_step_begin()
            return iteration().clone()

        run = compiled_step

    t0 = time.perf_counter()
    for _ in range(warmup):
        out = run()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(args.steps):
        out = run()
        if args.log_every and (i + 1) % args.log_every == 0:
            value = out.item()
    torch.cuda.synchronize()
    mean_ms = (time.perf_counter() - t0) * 1e3 / args.steps
    value = out.item()
    print(f"plain_loop.py: --task {args.task} --mode {args.mode}: warm-up {warm_s:.2f} s, "
          f"mean step {mean_ms:.3f} ms over {args.steps} steps, last value {value:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
