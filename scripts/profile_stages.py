#!/usr/bin/env python3
"""Where one `cgprof analyze` spends its time: wall and CPU seconds per stage, in one process.

    python3 scripts/profile_stages.py TRACE [--repeat N] [--cprofile 25]

Imports are timed first (pandas, the metrics, the JSON writer), then the analysis of TRACE runs
N times (the first may write the cache entry; later ones read it) and each stage's best wall
and CPU time is printed (a stage is named by the progress message that starts it), with the
JSON rendering as the last stage. ``--cprofile K`` also profiles the last run and prints the K
functions with the most time of their own. For the benchmark figures use bench_analyze.py
(whole processes); this script shows what a process is made of.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

T0 = time.perf_counter()
# As the CLI (cgprof.commands.heavy_imports): numpy's OpenBLAS on one thread, not one per core.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cprofile", type=int, default=0, metavar="K")
    args = ap.parse_args()
    c0 = time.process_time()
    import cgprof.metrics as M
    from cgprof.report.json_report import render_chunks

    wall, cpu = time.perf_counter() - T0, time.process_time() - c0
    print(f"{'imports':40s} wall {wall:6.3f}  cpu {cpu:6.3f}")
    best: dict[str, list[float]] = {}
    for i in range(args.repeat):
        profiler = None
        if args.cprofile and i == args.repeat - 1:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        last = [time.perf_counter(), time.process_time(), "start"]

        def say(message: str, last: list = last) -> None:
            now, cpu = time.perf_counter(), time.process_time()
            w, c = best.setdefault(last[2], [1e9, 1e9])
            best[last[2]] = [min(w, now - last[0]), min(c, cpu - last[1])]
            last[:] = [now, cpu, message]

        result = M.analyze(args.trace, progress=say)
        say("json")
        with open(os.devnull, "w") as fh:
            for chunk in render_chunks([result]):
                fh.write(chunk)
        say("end")
        if profiler is not None:
            import pstats

            profiler.disable()
            stats = pstats.Stats(profiler)
    total = [0.0, 0.0]
    for stage, (w, c) in best.items():
        if stage != "end":
            print(f"{stage:40s} wall {w:6.3f}  cpu {c:6.3f}")
            total = [total[0] + w, total[1] + c]
    print(f"{'stages (best of each)':40s} wall {total[0]:6.3f}  cpu {total[1]:6.3f}")
    if args.cprofile:
        stats.sort_stats("tottime").print_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
