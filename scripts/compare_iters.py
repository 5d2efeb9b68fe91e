"""Iterations found without NVTX: cgprof's launch-stream steps beside nsys-ai's ``iters``.

    python3 scripts/compare_iters.py TRACE.sqlite ...        # traces without NVTX ranges

Per trace: cgprof's steps (all, and in the analysis window) and, when the ``nsys_ai``
package is importable, the iterations its ``detect_iterations`` finds (nsys-ai 0.3.0: gaps
over 2 ms between kernels on the primary thread's GPU work, when no NVTX marker matches).
Run nsys-ai in its own environment if it is not installed beside cgprof, e.g.
``python -m venv --system-site-packages /tmp/v && /tmp/v/bin/pip install nsys-ai`` and run
this script with ``/tmp/v/bin/python`` and ``PYTHONPATH`` set to the repository. nsys-ai
leaves a ``NAME.nsys-cache.build.lock`` beside each trace it opens: give it copies.
"""

from __future__ import annotations

import contextlib
import io
import sys


def nsys_ai_iterations(path: str) -> int | None:
    try:
        from nsys_ai import profile
        from nsys_ai.overlap import detect_iterations
    except ImportError:
        return None
    with contextlib.redirect_stderr(io.StringIO()), profile.open(path) as prof:
        device = prof.meta.devices[0] if prof.meta.devices else 0
        return len(detect_iterations(prof, device))


def cgprof_steps(path: str) -> tuple[int, int, str]:
    import cgprof

    steps = cgprof.analyze(path).steps
    return len(steps.steps), int(steps.steps["in_window"].sum()), str(steps.name)


def main(paths: list[str]) -> int:
    print(f"{'trace':34s} {'cgprof steps':>12s} {'in window':>9s} {'rule':12s} {'nsys-ai':>7s}")
    for path in paths:
        n, window, rule = cgprof_steps(path)
        other = nsys_ai_iterations(path)
        print(f"{path.rsplit('/', 1)[-1]:34s} {n:12d} {window:9d} {rule:12s} "
              f"{'-' if other is None else other:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
