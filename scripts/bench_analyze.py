#!/usr/bin/env python3
"""Benchmark `cgprof analyze` on a 1M-kernel, 1M-API-call synthetic trace.

    python3 scripts/bench_analyze.py                   # generate into a temp dir, measure, delete
    python3 scripts/bench_analyze.py --keep            # keep the trace (path printed)
    python3 scripts/bench_analyze.py --trace T.sqlite  # reuse a trace

Each measurement runs in a fresh Python process, so its peak RSS is its own:

  fetchall  bare baseline: the kernel, runtime and NVTX SELECTs below, `fetchall()` into tuples
  pandas    the same SELECTs through `pandas.read_sql_query`
  analyze   `cgprof.analyze(path)` (the public API)
  cli       `python3 -m cgprof analyze PATH --json OUT --quiet` (OUT is a fresh file in a temp
            dir: the command refuses /dev/null, which exists)

"work s" is timed inside the process around the work only (imports excluded); "process s"
is the whole process as the parent sees it (interpreter start and imports included; the only
time there is for the CLI). Peak RSS is that process's own high-water mark (`VmHWM`; for
`cli`, `ru_maxrss` of the CLI child of a small measuring process). The file is read once
before measuring, so every measurement sees a warm page cache.
The ratio divides analyze's work time by the fetchall baseline's (the cheapest way to get the
rows into Python at all). Targets: analyze < 15 s, peak RSS < 2 GB, ratio < 5. Prints a
table, PASS/FAIL per target and one JSON line; exits 1 if a target fails.
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parents[1]

BASELINE_SQL = (
    "SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName, graphNodeId"
    " FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "SELECT start, end, globalTid, correlationId, nameId, eventClass"
    " FROM CUPTI_ACTIVITY_KIND_RUNTIME",
    "SELECT * FROM NVTX_EVENTS",
)

TARGET_ANALYZE_S = 15.0
TARGET_RSS_MB = 2048.0
TARGET_RATIO = 5.0

MODES = ("fetchall", "pandas", "analyze", "cli")
LABELS = {
    "fetchall": "bare SELECT + fetchall (baseline)",
    "pandas": "bare SELECT -> pandas.read_sql_query",
    "analyze": "cgprof.analyze(path)",
    "cli": "python3 -m cgprof analyze --json",
}


def _rss_mb(who: int) -> float:
    """Peak RSS in MiB: this process image's VmHWM where Linux has it, else ru_maxrss.

    ru_maxrss of a freshly exec'd process is not its own: Linux carries the high-water mark
    of the image it replaced (here the forking parent, which may hold a generated trace)."""
    if who == resource.RUSAGE_SELF:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
    kb = resource.getrusage(who).ru_maxrss  # KiB on Linux (bytes on macOS)
    return kb / (1024 * 1024) if sys.platform == "darwin" else kb / 1024


# --- the measured side (a fresh process per measurement) ---------------------------------------


def child(mode: str, path: str, out: str) -> dict[str, Any]:
    """Run one measurement in this process and describe it; never raises."""
    res: dict[str, Any] = {"mode": mode}
    try:
        if mode == "fetchall":
            import sqlite3

            t0 = time.perf_counter()
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            rows = [conn.execute(sql).fetchall() for sql in BASELINE_SQL]
            conn.close()
            res["work_s"] = time.perf_counter() - t0
            res["rows"] = [len(r) for r in rows]
        elif mode == "pandas":
            import sqlite3

            import pandas as pd

            t0 = time.perf_counter()
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            frames = [pd.read_sql_query(sql, conn) for sql in BASELINE_SQL]
            conn.close()
            res["work_s"] = time.perf_counter() - t0
            res["rows"] = [len(f) for f in frames]
        elif mode == "analyze":
            # "not written yet" (reported, not failed): no cgprof.analyze, or it raises
            # ImportError (a module it imports lazily is missing) or NotImplementedError
            try:
                import cgprof

                analyze = cgprof.analyze
            except (ImportError, AttributeError) as exc:
                res["unavailable"] = f"{type(exc).__name__}: {exc}"
            else:
                try:
                    t0 = time.perf_counter()
                    analyze(path)
                    res["work_s"] = time.perf_counter() - t0
                except (ImportError, NotImplementedError) as exc:
                    res["unavailable"] = f"{type(exc).__name__}: {exc}"
        elif mode == "cli":
            argv = [sys.executable, "-m", "cgprof", "analyze", path, "--json", out, "--quiet"]
            t0 = time.perf_counter()
            proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            res["work_s"] = time.perf_counter() - t0
            res["returncode"] = proc.returncode
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
                res["error"] = f"exit {proc.returncode}: {last}"
            res["rss_mb"] = _rss_mb(resource.RUSAGE_CHILDREN)
        else:
            res["error"] = f"unknown mode {mode}"
    except Exception as exc:  # report, do not crash the benchmark
        res["error"] = f"{type(exc).__name__}: {exc}"
    res.setdefault("rss_mb", _rss_mb(resource.RUSAGE_SELF))
    return res


# --- the measuring side ---------------------------------------------------------------------------


def measure(mode: str, path: Path, workdir: Path) -> dict[str, Any]:
    out = workdir / f"cli-{time.monotonic_ns()}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path), str(out)],
        capture_output=True, text=True, env=env, cwd=REPO,
    )
    process_s = time.perf_counter() - t0
    out.unlink(missing_ok=True)
    try:
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        res = {"mode": mode, "error": f"measurement process failed: {tail}"}
    res["process_s"] = process_s
    return res


def _count_rows(path: Path) -> dict[str, int]:
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = {}
        for key, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"),
                           ("runtime", "CUPTI_ACTIVITY_KIND_RUNTIME")):
            try:
                out[key] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            except sqlite3.Error:
                pass
        return out
    finally:
        conn.close()


def _warm_cache(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Of repeated runs: the fastest one's times, the largest peak RSS."""
    ok = [r for r in runs if "work_s" in r and "error" not in r]
    best = dict(min(ok, key=lambda r: r["work_s"]) if ok else runs[-1])
    best["rss_mb"] = max(r.get("rss_mb", 0.0) for r in runs)
    best["runs"] = len(runs)
    return best


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def report(trace: dict[str, Any], results: dict[str, dict[str, Any]]) -> tuple[str, dict, bool]:
    base = results["fetchall"].get("work_s")
    ana = results["analyze"]
    cli = results["cli"]
    ratio = ana["work_s"] / base if base and "work_s" in ana and "error" not in ana else None

    lines = [
        f"trace: {trace['path']} ({trace['bytes'] / 1e6:.1f} MB; "
        f"{trace.get('kernels', '?'):,} kernels, {trace.get('runtime', '?'):,} API calls"
        + (f"; generated in {trace['total_s']:.1f} s)" if "total_s" in trace else ")"),
        "",
        f"{'measurement':<38} {'work s':>8} {'process s':>10} {'peak RSS MB':>12}  note",
    ]
    for mode in MODES:
        r = results[mode]
        note = r.get("unavailable") or r.get("error") or ""
        if "rows" in r:
            note = "rows " + " + ".join(f"{n:,}" for n in r["rows"])
        work, proc, rss = r.get("work_s"), r.get("process_s"), r.get("rss_mb")
        lines.append(
            f"{LABELS[mode]:<38} {_fmt(work, '8.2f')} {_fmt(proc, '10.2f')} {_fmt(rss, '12.0f')}"
            f"  {note}"
        )
    lines.append("")
    lines.append(
        "ratio analyze / bare SELECT: "
        + ("-" if ratio is None else f"{ratio:.2f}x")
        + " (cgprof.analyze work time over the fetchall baseline's)"
    )

    def verdict(value: float | None, limit: float, r: dict[str, Any]) -> str:
        if r.get("unavailable"):
            return "SKIP (not available yet)"
        if r.get("error") or value is None:
            return "FAIL (" + (r.get("error") or "no measurement") + ")"
        return "PASS" if value < limit else "FAIL"

    targets = {
        "analyze_s": (ana.get("work_s"), TARGET_ANALYZE_S, ana, "cgprof.analyze < 15 s"),
        "cli_s": (cli.get("work_s"), TARGET_ANALYZE_S, cli, "CLI analyze < 15 s"),
        "analyze_rss_mb": (ana.get("rss_mb"), TARGET_RSS_MB, ana, "cgprof.analyze peak RSS < 2 GB"),
        "cli_rss_mb": (cli.get("rss_mb"), TARGET_RSS_MB, cli, "CLI peak RSS < 2 GB"),
        "ratio": (ratio, TARGET_RATIO, ana, "analyze / bare SELECT < 5x"),
    }
    lines += ["", "targets"]
    verdicts = {}
    for key, (value, limit, r, label) in targets.items():
        v = verdict(value, limit, r)
        verdicts[key] = v.split(" ")[0]
        shown = "-" if value is None else (f"{value:.2f}x" if key == "ratio" else
                                            f"{value:.0f} MB" if key.endswith("mb") else
                                            f"{value:.2f} s")
        lines.append(f"  {label:<34} {v}  [{shown}]")
    payload = {
        "trace": trace,
        "baseline_fetchall": results["fetchall"],
        "baseline_pandas": results["pandas"],
        "analyze": ana,
        "cli": cli,
        "ratio_analyze_over_fetchall": ratio,
        "targets": {"analyze_s": TARGET_ANALYZE_S, "rss_mb": TARGET_RSS_MB, "ratio": TARGET_RATIO},
        "verdicts": verdicts,
    }
    failed = any(v == "FAIL" for v in verdicts.values())
    return "\n".join(lines), payload, failed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(child(*argv[1:4])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, help="measure this trace instead of generating one")
    ap.add_argument("--keep", action="store_true", help="keep the generated trace")
    ap.add_argument("--n-kernels", type=int, default=1_000_000)
    ap.add_argument("--n-runtime", type=int, default=1_000_000)
    ap.add_argument("--n-steps", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement (best time kept)")
    args = ap.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="cgprof-bench-"))
    try:
        if args.trace is not None:
            if not args.trace.is_file():
                print(f"bench_analyze: {args.trace}: no such file", file=sys.stderr)
                return 2
            path = args.trace.resolve()
            trace: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size}
            trace.update(_count_rows(path))
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from synth_trace import generate

            path = workdir / "synth.sqlite"
            trace = generate(path, args.n_kernels, args.n_runtime, args.n_steps, seed=args.seed)
            print(f"generated {path} in {trace['total_s']:.1f} s", flush=True)
        _warm_cache(path)
        results = {}
        for mode in MODES:
            results[mode] = _best([measure(mode, path, workdir) for _ in range(args.repeat)])
            print(f"  measured {mode}", file=sys.stderr, flush=True)
        text, payload, failed = report(trace, results)
        print(text)
        print(json.dumps(payload, sort_keys=True))
        if args.keep and args.trace is None:
            kept = Path(tempfile.gettempdir()) / f"cgprof-bench-{os.getpid()}.sqlite"
            shutil.move(str(path), kept)
            print(f"kept {kept}")
        return 1 if failed else 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
