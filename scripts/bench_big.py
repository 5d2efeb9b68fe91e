#!/usr/bin/env python3
"""Time and peak memory of whole `cgprof analyze` processes on big traces: JSON and HTML,
first run and cached, one process or several ranks in one trace.

    python3 scripts/bench_big.py                          # 10M kernels + 10M API calls
    python3 scripts/bench_big.py --scale 0.1 --repeat 2   # 1M, twice each
    python3 scripts/bench_big.py --workdir /tmp/big       # keep (and reuse) the traces

Traces come from scripts/synth_trace.py (not timed; reused when --workdir already holds
them): ``one.sqlite``, one process with N kernels and N API calls over N/100 steps, and
``ranks4.sqlite``, four ranks of N/4 each (``--n-ranks 4``: a torchrun launch recorded into
one report). Every measurement is a fresh ``python3 -m cgprof analyze`` process (outputs
overwritten with --force), its wall time and its own peak RSS (``os.wait4``):

  json_first    --json, on an empty cache (SQLite read, cache written)
  json_cached   --json again, from the cache
  html_cached   --html, from the cache (the report a reviewer opens; rank 0 of ranks4)
  json_capped   --json --no-cache --memory-limit CAP (default 1GB): ranks4 is read rank by
                rank (each rank's rows alone), one.sqlite a chunk of steps at a time
                (cgprof.metrics.chunked; SQLite's tables written once to Parquet first)
  capped_cached the same with the cache entry json_first wrote (one.sqlite: the chunks read
                from it)
  capped_first  the same on an empty cache of its own: one.sqlite's tables written once as
                a cache entry of nsys columns (round eleven), ranks4's ranks as entries
  capped_again  the same again, reading that entry instead of SQLite
                every capped document must be the uncapped one's bytes

and, on one.sqlite and a second name of it (``one_b.sqlite``, a hard link: two runs to
report on, one cache entry), from the cache:

  two_json      ``cgprof analyze one.sqlite one_b.sqlite --json``
  diff_json     ``cgprof diff one.sqlite one_b.sqlite --json``
  diff_html     ``cgprof diff one.sqlite one_b.sqlite -o``

Targets (issue 10, the one-process trace at the full scale): json_first <= 30 s and <= 4 GB;
every capped mode's peak RSS near the cap: <= 1.1 x CAP (any scale), with the same JSON as
json_first.
Prints a table and one JSON line; exits 1 when a target fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
TARGETS = {"json_first_s": 30.0, "json_first_rss_mb": 4096.0}  # one process, scale 1
CAPPED = ("json_capped", "capped_cached", "capped_first", "capped_again")
MODES = ("json_first", "json_cached", "html_cached", *CAPPED)
#: How far above the cap a capped run's peak RSS may go and still count as near it.
CAP_SLACK = 1.1
PAIR_MODES = ("two_json", "diff_json", "diff_html")  # one.sqlite only


def make_traces(workdir: Path, n: int) -> dict[str, Path]:
    """one.sqlite and ranks4.sqlite in ``workdir`` (made when missing). Each is written by a
    synth_trace.py process of its own: this one stays small, for a forked child's peak RSS
    counts the pages it shares with its parent before it runs cgprof."""
    out = {"one": workdir / "one.sqlite", "ranks4": workdir / "ranks4.sqlite"}
    jobs = {"one": [str(n), str(n), str(max(n // 100, 10)), "1"],
            "ranks4": [str(n // 4), str(n // 4), str(max(n // 400, 10)), "4"]}
    for name, (kernels, runtime, steps, ranks) in jobs.items():
        if out[name].exists():
            continue
        part = workdir / f"{name}.tmp.sqlite"
        subprocess.run([sys.executable, str(SCRIPTS / "synth_trace.py"), str(part), "--force",
                        "--n-kernels", kernels, "--n-runtime", runtime, "--n-steps", steps,
                        "--n-ranks", ranks], check=True, stdout=subprocess.DEVNULL)
        part.rename(out[name])
    return out


def run(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One process: wall seconds, its peak RSS (MB) and exit status."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"s": round(wall, 3), "rss_mb": round(usage.ru_maxrss / 1024, 1),
            "rc": proc.returncode, **({"stderr": err.strip()[-300:]} if proc.returncode else {})}


def measure(trace: Path, workdir: Path, repeat: int, cap: str) -> dict[str, Any]:
    """Each mode ``repeat`` times, in rounds; the best run of each (and every run's time)."""
    pair = trace.stem == "one"
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES + (PAIR_MODES if pair
                                                                      else ())}
    twin = workdir / f"{trace.stem}_b.sqlite"
    if pair and not twin.exists():
        os.link(trace, twin)
    for _ in range(repeat):
        cache = workdir / f"cache-{trace.stem}"
        shutil.rmtree(cache, ignore_errors=True)
        env = {**os.environ, "CGPROF_CACHE": str(cache)}
        base = [sys.executable, "-m", "cgprof", "analyze", str(trace), "--quiet", "--force"]
        json_out = ["--json", str(workdir / f"{trace.stem}.json")]
        runs["json_first"].append(run(base + json_out, env))
        runs["json_cached"].append(run(base + json_out, env))
        # the whole analysis's document, before two_json writes both traces' into that file
        whole = (workdir / f"{trace.stem}.json").read_bytes()
        rank = ["--rank", "0"] if trace.stem == "ranks4" else []  # the rank drawn
        runs["html_cached"].append(run(base + ["--html", str(workdir / f"{trace.stem}.html")]
                                       + rank, env))
        if pair:
            both = [str(trace), str(twin)]
            cli = [sys.executable, "-m", "cgprof"]
            runs["two_json"].append(run(cli + ["analyze", *both, "--quiet", "--force"]
                                        + json_out, env))
            runs["diff_json"].append(run(cli + ["diff", *both, "--force", "--json",
                                                str(workdir / "diff.json")], env))
            runs["diff_html"].append(run(cli + ["diff", *both, "--force", "-o",
                                                str(workdir / "diff.html")], env))
        capped_out = ["--json", str(workdir / f"{trace.stem}.capped.json")]
        own = {**env, "CGPROF_CACHE": str(workdir / f"cache-{trace.stem}-capped")}
        shutil.rmtree(own["CGPROF_CACHE"], ignore_errors=True)
        for mode, extra, e in (("json_capped", ["--no-cache"], env), ("capped_cached", [], env),
                               ("capped_first", [], own), ("capped_again", [], own)):
            r = run(base + capped_out + extra + ["--memory-limit", cap], e)
            same = (workdir / f"{trace.stem}.capped.json").read_bytes() == whole
            runs[mode].append({**r, "same_json": same} if same or r["rc"] else {
                **r, "rc": -1, "stderr": "not the uncapped JSON document"})
    out = {}
    for mode, rs in runs.items():
        ok = [r for r in rs if r["rc"] == 0]
        best = min(ok, key=lambda r: r["s"]) if ok else rs[0]
        out[mode] = {**best, "runs_s": [r["s"] for r in rs],
                     "rss_mb_max": max(r["rss_mb"] for r in rs)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0,
                    help="kernels and API calls, in units of 10M [default: 1]")
    ap.add_argument("--repeat", type=int, default=1, help="rounds (best run kept)")
    ap.add_argument("--workdir", type=Path, help="where the traces are made and kept")
    ap.add_argument("--cap", default="1GB", help="--memory-limit of json_capped [1GB]")
    args = ap.parse_args(argv)
    n = int(10_000_000 * args.scale)
    if n < 4000 or args.repeat < 1:
        print("bench_big: --scale too small (>= 0.0004) or --repeat < 1", file=sys.stderr)
        return 2
    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cgprof-big-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        traces = make_traces(workdir, n)
        print(f"traces ready in {time.perf_counter() - t0:.1f} s: {n:,} kernels + {n:,} API "
              f"calls, one process and 4 ranks", flush=True)
        results = {name: measure(path, workdir, args.repeat, args.cap)
                   for name, path in traces.items()}
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{'trace':<8} {'mode':<12} {'best s':>8} {'peak RSS MB':>12}  runs")
    for name, modes in results.items():
        for mode, r in modes.items():
            note = " ".join(f"{s:.2f}" for s in r["runs_s"]) + (
                f"  FAILED rc {r['rc']}: {r.get('stderr', '')}" if r["rc"] else "")
            print(f"{name:<8} {mode:<12} {r['s']:>8.2f} {r['rss_mb_max']:>12.0f}  {note}")
    from cgprof.settings import parse_size

    cap_mb = parse_size(args.cap) / 2**20
    verdicts = {}
    for name in results:
        for mode in CAPPED:
            key = f"{name}_{mode}_rss_mb"
            verdicts[key] = results[name][mode]["rss_mb_max"] <= CAP_SLACK * cap_mb
            print(f"target {name} {mode} peak RSS <= {CAP_SLACK:g} x {args.cap} "
                  f"({CAP_SLACK * cap_mb:.0f} MB): {'PASS' if verdicts[key] else 'FAIL'}")
    if args.scale == 1.0:
        one = results["one"]["json_first"]
        for key, ok in {"json_first_s": one["s"] <= TARGETS["json_first_s"],
                        "json_first_rss_mb": one["rss_mb_max"] <= TARGETS["json_first_rss_mb"]
                        }.items():
            verdicts[key] = ok
            print(f"target {key} <= {TARGETS[key]:g}: {'PASS' if ok else 'FAIL'}")
    failed = any(r["rc"] for modes in results.values() for r in modes.values()) or not all(
        verdicts.values())
    print(json.dumps({"n": n, "repeat": args.repeat, "results": results,
                      "verdicts": verdicts}, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
