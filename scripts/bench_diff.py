#!/usr/bin/env python3
"""Benchmark `cgprof diff` of a one-process trace whole and under a memory cap.

    python3 scripts/bench_diff.py --trace T.sqlite --memory-limit 1GB
    python3 scripts/bench_diff.py --n-kernels 10000000 --n-runtime 10000000 --n-steps 100000 \\
        --memory-limit 1GB                       # generate the 10M trace, measure, delete

The command is `cgprof diff T T --mode eager,graph --json OUT` (the two kinds of step of one
synthetic trace, scripts/synth_trace.py), each run in a fresh process (wall time and the
command's own peak RSS, `ru_maxrss`), in four ways: whole (the default cap) and with
``--memory-limit`` (a trace whose whole analysis would exceed it is analysed a chunk of steps
at a time), each first (an empty cache folder: reads SQLite, writes the cache) and cached.
The four JSON documents must be the same bytes: the benchmark fails (exit 1) where they are
not, where a run fails, or where a capped run was not read in chunks (its stderr says so).
No peer: nsys has no diff. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import _compile_cgprof, _count_rows, _warm_cache  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

#: (name, capped, cached) of each measurement, in the order run.
WAYS = (("whole, first", False, False), ("whole, cached", False, True),
        ("capped, first", True, False), ("capped, cached", True, True))
CHUNKED_NOTE = "chunk of steps at a time ("


def child(argv: list[str]) -> dict[str, Any]:
    """Run the command ``argv`` and describe it (in a process of its own: the RSS of its
    children is the command's alone)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    res: dict[str, Any] = {"work_s": time.perf_counter() - t0, "returncode": proc.returncode,
                           "rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                           / 1024, "chunked": CHUNKED_NOTE in proc.stderr}
    if proc.returncode != 0:
        res["error"] = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
    return res


def measure(path: Path, workdir: Path, capped: bool, cached: bool, limit: str) -> dict[str, Any]:
    cache = workdir / ("cache-capped" if capped else "cache-whole")
    if not cached:
        shutil.rmtree(cache, ignore_errors=True)
    out = workdir / f"diff-{time.monotonic_ns()}.json"
    argv = [sys.executable, "-m", "cgprof", "diff", str(path), str(path), "--mode",
            "eager,graph", "--json", str(out)]
    if capped:
        argv += ["--memory-limit", limit]
    env = dict(os.environ, CGPROF_CACHE=str(cache), PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("CGPROF_NO_CACHE", None)
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(argv)],
                          capture_output=True, text=True, env=env, cwd=REPO)
    try:
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        res = {"error": "measurement process failed: "
               + (proc.stderr.strip().splitlines() or ["(no output)"])[-1]}
    if out.is_file():
        res["json_md5"] = hashlib.md5(out.read_bytes()).hexdigest()
        out.unlink()
    return res


def report(trace: dict[str, Any], results: dict[str, dict[str, Any]],
           limit: str) -> tuple[str, dict[str, Any], bool]:
    lines = [f"trace: {trace['path']} ({trace['bytes'] / 1e6:.1f} MB; "
             f"{trace.get('kernels', '?'):,} kernels, {trace.get('runtime', '?'):,} API calls)",
             f"command: cgprof diff T T --mode eager,graph --json OUT [--memory-limit {limit}]",
             "", f"{'measurement':<16} {'wall s':>8} {'peak RSS MB':>12}  note"]
    failed = False
    for name, r in results.items():
        note = r.get("error") or ("read in chunks" if r.get("chunked") else "read whole")
        lines.append(f"{name:<16} {r.get('work_s', float('nan')):8.2f} "
                     f"{r.get('rss_mb', float('nan')):12.0f}  {note}")
        capped = name.startswith("capped")
        failed |= bool(r.get("error")) or r.get("chunked") is not capped
    same = len({r.get("json_md5") for r in results.values()}) == 1 and all(
        r.get("json_md5") for r in results.values())
    failed |= not same
    lines.append("")
    lines.append("the four JSON documents: " + ("the same bytes" if same else "DIFFER"))
    return "\n".join(lines), {"trace": trace, "memory_limit": limit, "results": results,
                              "same_json": same}, failed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(child(json.loads(argv[1]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, help="measure this trace instead of generating one")
    ap.add_argument("--n-kernels", type=int, default=1_000_000)
    ap.add_argument("--n-runtime", type=int, default=1_000_000)
    ap.add_argument("--n-steps", type=int, default=10_000)
    ap.add_argument("--memory-limit", default="1GB", help="the cap of the capped runs")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="cgprof-bench-diff-"))
    try:
        if args.trace is not None:
            if not args.trace.is_file():
                print(f"bench_diff: {args.trace}: no such file", file=sys.stderr)
                return 2
            path = args.trace.resolve()
        else:
            from synth_trace import generate

            path = workdir / "synth.sqlite"
            generate(path, args.n_kernels, args.n_runtime, args.n_steps)
        trace: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size}
        trace.update(_count_rows(path))
        _warm_cache(path)
        _compile_cgprof()
        results = {}
        for name, capped, cached in WAYS:
            results[name] = measure(path, workdir, capped, cached, args.memory_limit)
            print(f"  measured {name}", file=sys.stderr, flush=True)
        text, payload, failed = report(trace, results, args.memory_limit)
        print(text)
        print(json.dumps(payload, sort_keys=True))
        return 1 if failed else 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
