#!/usr/bin/env python3
"""One whole `cgprof analyze` process, as the console script runs it, with the time of each
stage printed on stderr as it starts: wall seconds since this process started and CPU seconds.

    python3 scripts/cli_stages.py TRACE [cgprof analyze options]   # e.g. --json out.json

Unlike profile_stages.py (best of N runs in one process, imports timed once), this is the
first and only analysis of its process, so it shows what a user's run pays: imports, page
faults of fresh memory, the cache write joined at exit. The last line is the exit.
"""

from __future__ import annotations

import atexit
import sys
import time

T0 = time.perf_counter()


def _stamp(what: str) -> None:
    sys.stderr.write(f"{time.perf_counter() - T0:7.3f} s wall {time.process_time():7.3f} s cpu  "
                     f"{what}\n")


def main() -> None:
    _stamp("python started")
    import cgprof.commands.analyze as analyze_cmd
    from cgprof.cli import main as cli_main

    _stamp("cli imported")

    def progress(quiet: bool):
        return _stamp

    analyze_cmd._progress = progress
    atexit.register(_stamp, "exit")
    sys.argv = ["cgprof", "analyze", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
