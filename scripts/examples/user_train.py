"""A user's own training script that knows nothing of cgprof.

It marks each training step the way many PyTorch code bases already do, with plain
``torch.cuda.nvtx.range_push("step")`` / ``range_pop()`` (default NVTX domain), and does
not import cgprof. It shows that ``cgprof record`` + ``cgprof analyze`` work end to end on
such a script:

    cgprof record -o user_train scripts/examples/user_train.py
    cgprof analyze user_train.sqlite

A small MLP on random data, 20 steps, on the GPU (CUDA is required).
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

    for _ in range(args.steps):
        torch.cuda.nvtx.range_push("step")
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"user_train.py: {args.steps} steps, final loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
