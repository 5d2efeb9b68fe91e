"""A user's own training script that knows nothing of cgprof.

It marks each training step the way many PyTorch code bases already do, with plain
``torch.cuda.nvtx.range_push("step")`` / ``range_pop()`` (default NVTX domain), and does
not import cgprof. It shows that ``cgprof record`` + ``cgprof analyze`` work end to end on
such a script:

    cgprof record -o user_train scripts/examples/user_train.py
    cgprof analyze user_train.sqlite

A small MLP on random data, 20 steps, on the GPU (CUDA is required).

``--graph`` runs the same steps the way the CUDA Graphs guides describe, still without
cgprof: warm-up iterations on a side stream, the whole step (forward, backward, optimizer)
captured once into a ``torch.cuda.CUDAGraph`` over static input buffers, then each step
``copy_`` of the batch into the static buffers and one ``graph.replay()``. Both modes print
their mean step time (CUDA-event timed, after a few untimed steps), so the speedup that
``cgprof analyze`` estimates from the eager trace can be checked against a measured one.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--graph", action="store_true",
                        help="capture the whole step into one CUDA graph and replay it")
    parser.add_argument("--timed-steps", type=int, default=0,
                        help="after --steps, time this many more steps with CUDA events "
                             "and print their mean (0: none)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("user_train.py needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2

    torch.manual_seed(0)
    device = torch.device("cuda")
    blocks: list[nn.Module] = []
    for _ in range(args.layers):
        blocks += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(args.width, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    def one_step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    run = one_step
    if args.graph:
        # Warm-up on a side stream (autograd and the optimizer allocate their state there),
        # then capture one whole step; gradients stay allocated (set_to_none=False) so the
        # graph's gradient buffers are the ones the optimizer reads.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                one_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = one_step()
        batch_x, batch_y = x.clone(), y.clone()

        def replay() -> torch.Tensor:
            x.copy_(batch_x)  # a real loop copies each new batch into the static inputs
            y.copy_(batch_y)
            graph.replay()
            return static_loss

        run = replay

    for _ in range(args.steps):
        torch.cuda.nvtx.range_push("step")
        loss = run()
        torch.cuda.nvtx.range_pop()
    if args.timed_steps:
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(args.timed_steps):
            loss = run()
        end.record()
        torch.cuda.synchronize()
        mean_ms = begin.elapsed_time(end) / args.timed_steps
        print(f"user_train.py: {'graph' if args.graph else 'eager'} mean step "
              f"{mean_ms:.3f} ms over {args.timed_steps} steps")
    torch.cuda.synchronize()
    print(f"user_train.py: {args.steps} steps, final loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
