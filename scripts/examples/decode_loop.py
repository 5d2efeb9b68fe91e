"""A GPT-style decode loop with a static KV cache, eager or one hand-captured graph per token.

No cgprof import: it marks each token with ``torch.cuda.nvtx.range("token")`` (``--no-nvtx``:
nothing) and times itself (``time.perf_counter`` around the timed tokens, one device
synchronize at each end) so that cgprof's untraced times and speedups can be checked against
a plain run's own clock.

    --mode eager   every layer's kernels launched one by one, per token
    --mode graph   one decode step captured into a torch.cuda.CUDAGraph after warm-up tokens on
                   a side stream (static token, position and cache tensors), then replayed per
                   token; the position advances inside the graph

Each token is read back to the host (``--sync-every 1``), as a streaming generation loop does
to print it. Defaults: 12 layers, width 768, 12 heads, batch 4, a 512-token cache.

    python scripts/examples/decode_loop.py --mode graph
    cgprof record --untraced -o decode_graph scripts/examples/decode_loop.py --mode graph

CUDA is required.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time

import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self, width: int, heads: int, batch: int, cache: int) -> None:
        super().__init__()
        self.heads, self.dim = heads, width // heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))
        shape = (batch, heads, cache, self.dim)
        self.register_buffer("k", torch.zeros(shape), persistent=False)
        self.register_buffer("v", torch.zeros(shape), persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(b, 1, 3, self.heads, self.dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (batch, heads, 1, dim)
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        scores = (q @ self.k.transpose(-1, -2)) / math.sqrt(self.dim)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ self.v
        x = x + self.out(attn.transpose(1, 2).reshape(b, 1, -1))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.emb = nn.Embedding(args.vocab, args.width)
        self.pos_emb = nn.Embedding(args.cache, args.width)
        self.layers = nn.ModuleList(Layer(args.width, args.heads, args.batch, args.cache)
                                    for _ in range(args.layers))
        self.ln, self.head = nn.LayerNorm(args.width), nn.Linear(args.width, args.vocab)
        self.register_buffer("slots", torch.arange(args.cache), persistent=False)

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One token per sequence -> the next token (greedy); ``pos`` advances by one."""
        x = self.emb(token) + self.pos_emb(pos)  # (batch, 1, width)
        mask = self.slots > pos  # attend to the filled slots only
        for layer in self.layers:
            x = layer(x, pos, mask)
        nxt = self.head(self.ln(x)).argmax(-1)
        pos.add_(1)
        return nxt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("eager", "graph"), default="eager")
    parser.add_argument("--steps", type=int, default=100, help="timed tokens")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--cache", type=int, default=512)
    parser.add_argument("--sync-every", type=int, default=1)
    parser.add_argument("--no-nvtx", action="store_true")
    parser.add_argument("--device", default="cuda", help="cpu: an eager smoke run")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("decode_loop.py needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.mode == "graph" and not cuda:
        print("--mode graph needs CUDA", file=sys.stderr)
        return 2
    if args.warmup + args.steps + 1 > args.cache:
        print("--warmup + --steps must fit in --cache", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model = Decoder(args).to(args.device).eval()
    token = torch.zeros(args.batch, 1, dtype=torch.long, device=args.device)
    pos = torch.zeros(1, dtype=torch.long, device=args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def mark() -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext() if args.no_nvtx else torch.cuda.nvtx.range("token")

    with torch.no_grad():
        run = model  # (token, pos) -> next token
        if args.mode == "graph":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(args.warmup):
                    token.copy_(model(token, pos))
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_next = model(token, pos)
            pos.fill_(args.warmup)

            def replay(token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
                graph.replay()
                return static_next

            run = replay
        else:
            for _ in range(args.warmup):
                token.copy_(model(token, pos))
        sync()
        t0 = time.perf_counter()
        for i in range(args.steps):
            with mark():
                token.copy_(run(token, pos))
                if args.sync_every and (i + 1) % args.sync_every == 0:
                    int(token[0, 0].item())
        sync()
    mean_ms = (time.perf_counter() - t0) * 1e3 / args.steps
    print(f"decode_loop.py: --mode {args.mode}: mean step {mean_ms:.3f} ms over "
          f"{args.steps} steps, last token {int(token[0, 0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
