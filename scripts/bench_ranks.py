#!/usr/bin/env python3
"""Benchmark many per-rank files: `cgprof analyze DIR --jobs N` and `--dask` against one file.

    python3 scripts/bench_ranks.py                       # 64 files x 100k kernels, --jobs 2
    python3 scripts/bench_ranks.py --files 8 --kernels 20000 --keep
    python3 scripts/bench_ranks.py --dir /tmp/ranks64    # reuse files made by an earlier --keep

Files come from scripts/synth_trace.py (not timed): one 100k-kernel trace copied to every rank
(each analysis costs the same as a distinct file; --distinct generates each with its own
seed). Every measurement is a fresh `python3 -m cgprof analyze ... -q` process timed by
wall clock, with its output discarded and `CGPROF_THREADS=1` (each job's engine on one
thread):

  one     one file, the whole process (interpreter start, imports, first analysis), median
          of --repeat runs before and --repeat after the folder run
  jobs    the folder with --jobs N (N worker processes)
  dask    the folder with --dask on a LocalCluster(n_workers=N, threads_per_worker=1) started
          before timing (an existing cluster, as users have)

Targets: jobs <= 1.2 x one x files / N; dask <= 1.5 x jobs. Prints a table, PASS/FAIL and
one JSON line; exits 1 when a target fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

TARGET_JOBS = 1.2
TARGET_DASK = 1.5


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGPROF_THREADS"] = "1"
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    return env


def _time(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cgprof", "analyze", *args, "-q"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"cgprof analyze {' '.join(args)} failed: {proc.stderr.strip()}")
    return dt


def make_files(folder: Path, files: int, kernels: int, distinct: bool) -> None:
    from synth_trace import generate

    folder.mkdir(parents=True, exist_ok=True)
    steps = max(10, kernels // 100)
    first = folder / "rank0.sqlite"
    if not first.exists():
        generate(first, n_kernels=kernels, n_runtime=kernels, n_steps=steps, seed=0)
    for i in range(1, files):
        p = folder / f"rank{i}.sqlite"
        if p.exists():
            continue
        if distinct:
            generate(p, n_kernels=kernels, n_runtime=kernels, n_steps=steps, seed=i)
        else:
            shutil.copyfile(first, p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=100_000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="runs of the one-file baseline")
    ap.add_argument("--dir", type=Path, help="folder of rank*.sqlite (made if missing)")
    ap.add_argument("--distinct", action="store_true", help="a distinct seed per file")
    ap.add_argument("--keep", action="store_true", help="keep the generated folder")
    ap.add_argument("--no-dask", action="store_true")
    args = ap.parse_args(argv)

    tmp = None
    folder = args.dir
    if folder is None:
        tmp = Path(tempfile.mkdtemp(prefix="cgprof-bench-ranks-"))
        folder = tmp / "run"
    try:
        t0 = time.perf_counter()
        make_files(folder, args.files, args.kernels, args.distinct)
        files = sorted(folder.glob("rank*.sqlite"))[: args.files]
        if len(files) != args.files:
            raise SystemExit(f"{folder}: {len(files)} rank*.sqlite files, need {args.files}")
        if len(list(folder.glob("*.sqlite"))) != args.files:
            raise SystemExit(f"{folder}: holds other *.sqlite files than rank0..{args.files - 1}")
        print(f"files: {args.files} x {args.kernels} kernels in {folder} "
              f"(made in {time.perf_counter() - t0:.1f} s, not timed)")
        for f in files:  # warm page cache
            f.read_bytes()
        env = _env()
        # The baseline is measured before and after the folder run (the machine's load
        # changes); its median is used.
        ones = [_time([str(files[0])], env) for _ in range(args.repeat)]
        jobs = _time([str(folder), "--jobs", str(args.jobs)], env)
        ones += [_time([str(files[0])], env) for _ in range(args.repeat)]
        one = statistics.median(ones)
        budget_jobs = TARGET_JOBS * one * args.files / args.jobs
        rows = [("one file, whole process (median)", one, None),
                (f"{args.files} files, --jobs {args.jobs}", jobs, budget_jobs)]
        out = {"files": args.files, "kernels": args.kernels, "jobs": args.jobs,
               "one_s": round(one, 3), "jobs_s": round(jobs, 3),
               "jobs_budget_s": round(budget_jobs, 3),
               "one_runs_s": [round(x, 3) for x in ones],
               "load_avg_1m": round(os.getloadavg()[0], 2)}
        ok = jobs <= budget_jobs
        if not args.no_dask:
            from distributed import LocalCluster

            with LocalCluster(n_workers=args.jobs, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster:
                dask = _time([str(folder), "--dask", cluster.scheduler_address], env)
            budget_dask = TARGET_DASK * jobs
            rows.append((f"{args.files} files, --dask LocalCluster({args.jobs} workers)", dask,
                         budget_dask))
            out.update(dask_s=round(dask, 3), dask_budget_s=round(budget_dask, 3))
            ok = ok and dask <= budget_dask
        print(f"{'measurement':<48} {'wall s':>8} {'target s':>9}")
        for label, value, budget in rows:
            verdict = "" if budget is None else ("PASS" if value <= budget else "FAIL")
            target = "" if budget is None else f"{budget:.2f}"
            print(f"{label:<48} {value:8.2f} {target:>9} {verdict}")
        print(f"(load average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores: wall "
              f"times on a shared machine vary)")
        out["pass"] = ok
        print(json.dumps(out, sort_keys=True))
        return 0 if ok else 1
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            print(f"kept {folder}")


if __name__ == "__main__":
    sys.exit(main())
