#!/usr/bin/env python3
"""Hold cgprof's untraced figures to plain runs, on a GPU machine with nsys.

For each workload, eager and graphed: a plain run of the script with no cgprof hook at all
(its own clock: "mean step X ms"), then ``cgprof record --untraced`` of the same command and
``cgprof analyze --json``; then ``cgprof diff --json`` of the pair. Prints one table and
writes ``OUT/untraced_check.json`` and ``OUT/untraced_check.md``:

    plain        eager / graphed mean step of the plain runs (the reference ratio)
    untraced     cgprof diff's speedup without the profiler, and its error against plain
    traced       cgprof diff's speedup under the profiler (p50 headline)
    est.         the eager trace's estimate without the profiler, its error against plain,
                 and the estimate under the profiler
    hook         what timing the steps cost per step, % of the step (eager / graphed)
    inflation    the profiler's inflation of each run's steps (traced / untraced mean)

    python3 scripts/untraced_check.py --out runs/untraced [--only decode,train_sync]
                                      [--plain-runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "examples"
MODES = ("eager", "graph")
#: name -> (what it is, script, arguments for both modes)
WORKLOADS: dict[str, tuple[str, Path, list[str]]] = {
    "decode": ("launch-bound decode (12 x 768, batch 4, static KV cache, NVTX per token)",
               EXAMPLES / "decode_loop.py", ["--steps", "100"]),
    "train_launch": ("launch-bound training (Transformer 2 x 256, no NVTX)",
                     EXAMPLES / "plain_loop.py", ["--task", "train", "--steps", "50"]),
    "train_gpu": ("GPU-bound training (Transformer 4 x 1024, batch 64 x 256, no NVTX)",
                  EXAMPLES / "plain_loop.py", ["--task", "train", "--steps", "20", "--batch",
                                               "64", "--seq", "256", "--width", "1024",
                                               "--layers", "4"]),
    "train_sync": ("training with a host sync every step (loss read back, no NVTX)",
                   EXAMPLES / "plain_loop.py", ["--task", "train", "--steps", "50",
                                                "--log-every", "1"]),
}
_MEAN = re.compile(r"mean step ([0-9.]+) ms")


def _plain_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CGPROF_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if "bootstrap" not in p)
    return env


def plain_ms(script: Path, args: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        res = subprocess.run([sys.executable, str(script), *args], capture_output=True,
                             text=True, env=_plain_env(), check=True)
        out.append(float(_MEAN.search(res.stdout).group(1)))  # type: ignore[union-attr]
    return out


def cgprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cgprof", *args], capture_output=True,
                          text=True)


def _err(got: float | None, want: float) -> str:
    return "n/a" if got is None else f"{got:.2f}x ({100 * (got / want - 1):+.0f}%)"


def check(name: str, out: Path, runs: int) -> dict:
    what, script, args = WORKLOADS[name]
    row: dict = {"workload": name, "what": what}
    for mode in MODES:
        argv = [*args, "--mode", mode]
        row[f"plain_{mode}_ms"] = plain_ms(script, argv, runs)
        base = out / f"{name}_{mode}"
        rec = cgprof("record", "--untraced", "--force", "-o", str(base), str(script), *argv)
        if rec.returncode != 0:
            raise SystemExit(f"{name} {mode}: cgprof record failed: {rec.stderr[-2000:]}")
        doc = json.loads(cgprof("analyze", f"{base}.sqlite", "--json", "-").stdout)
        row[mode] = {"untraced": doc["untraced"], "steps": doc["steps"]["source"],
                     "verdict": {k: doc["verdict"].get(k) for k in (
                         "estimated_speedup", "estimated_untraced_speedup",
                         "eager_step_p50_ns", "graph_step_p50_ns")}}
    d = json.loads(cgprof("diff", f"{out / name}_eager.sqlite", f"{out / name}_graph.sqlite",
                          "--json", "-").stdout)
    row["diff"] = {"speedup": d["speedup"], "untraced_speedup": d["untraced_speedup"],
                   "lines": d["lines"][:2]}
    e, g = (min(row[f"plain_{m}_ms"]) for m in MODES)
    row["plain_ratio"] = e / g
    return row


def table(rows: list[dict]) -> str:
    head = ("| workload | plain eager -> graph (ms) | plain | untraced | traced | est. untraced |"
            " est. traced | hook eager / graph | inflation eager / graph |")
    out = [head, "|" + "---|" * 9]
    for r in rows:
        want = r["plain_ratio"]
        ue, ug = r["eager"]["untraced"] or {}, r["graph"]["untraced"] or {}
        v = r["eager"]["verdict"]
        out.append(
            f"| {r['workload']} | {min(r['plain_eager_ms']):.3f} -> "
            f"{min(r['plain_graph_ms']):.3f} | {want:.2f}x | "
            f"{_err(r['diff']['untraced_speedup'], want)} | {r['diff']['speedup'] or 0:.2f}x | "
            f"{_err(v['estimated_untraced_speedup'], want)} | "
            f"{v['estimated_speedup'] or 0:.2f}x | "
            f"{100 * (ue.get('hook_share') or 0):.2f}% / {100 * (ug.get('hook_share') or 0):.2f}%"
            f" | {ue.get('inflation') or 0:.2f} / {ug.get('inflation') or 0:.2f} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--plain-runs", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.only.split(","):
        rows.append(check(name, args.out, args.plain_runs))
        print(f"{name}: done", flush=True)
    text = table(rows)
    print(text)
    (args.out / "untraced_check.md").write_text(text + "\n")
    (args.out / "untraced_check.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
