"""A training script compiled with ``torch.compile(mode="reduce-overhead")``, no cgprof import.

This is how many users meet CUDA graphs today: Inductor's CUDA graph trees capture and
replay the compiled regions, and whatever is not compiled still launches eagerly. Each
training step is a plain ``torch.cuda.nvtx.range_push("train_step")`` range, as in many code
bases; inside it, Inductor's and CUB's own NVTX ranges may repeat more often than the step.

    --compile model   the model is compiled, the AdamW step runs eagerly (a partial graph:
                      a few graph launches plus the optimizer's kernel launches per step)
    --compile step    the whole training step (forward, backward, optimizer) is one compiled
                      function
    --compile none    plain eager, for comparison

    cgprof record -o compile_model scripts/examples/compile_train.py --compile model
    cgprof analyze compile_model.sqlite

A small MLP on random data; CUDA (and Triton, for Inductor) are required.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", choices=("model", "step", "none"), default="model")
    parser.add_argument("--steps", type=int, default=30, help="NVTX-marked training steps")
    parser.add_argument("--warmup", type=int, default=5,
                        help="unmarked steps first (compilation and graph capture)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("compile_train.py needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2

    torch.manual_seed(0)
    device = torch.device("cuda")
    blocks: list[nn.Module] = []
    for _ in range(args.layers):
        blocks += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(args.width, 10)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    forward = torch.compile(model, mode="reduce-overhead") if args.compile == "model" else model

    def train_step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    step = torch.compile(train_step, mode="reduce-overhead") if args.compile == "step" \
        else train_step

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        torch.compiler.cudagraph_mark_step_begin()
        loss = step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(args.steps):
        torch.cuda.nvtx.range_push("train_step")
        torch.compiler.cudagraph_mark_step_begin()
        loss = step()
        torch.cuda.nvtx.range_pop()
    end.record()
    torch.cuda.synchronize()
    print(f"compile_train.py: --compile {args.compile}: warm-up {warm_s:.1f} s, "
          f"mean step {begin.elapsed_time(end) / args.steps:.3f} ms over {args.steps} steps, "
          f"final loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
