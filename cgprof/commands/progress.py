"""The progress bar the commands that analyse traces draw on a terminal's stderr.

One line, redrawn in place: ``cgprof: reading kernels ... [###-------] 3/11 1.2 s``. Drawn
only when stderr is a terminal and the user did not pass ``--quiet``; stdout (a report, or
the JSON of ``--json -``) never holds it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from cgprof.scratch import Detail, prefixed

#: Progress messages one analysis sends (load: strings, kernels, API calls, copies, NVTX,
#: cache; metrics: API calls, steps, gaps, replays, summary): the bar's length per trace.
STAGES = 11

Say = Callable[[str], None]


def progress_bar(quiet: bool, traces: int = 1) -> Say | None:
    """The bar's ``say(message)`` for ``traces`` analyses (STAGES each), or None when
    ``quiet`` or stderr is not a terminal (nothing is drawn)."""
    if quiet or not sys.stderr.isatty():
        return None
    stages = STAGES * max(traces, 1)
    state: dict[str, float] = {"n": 0, "t0": time.monotonic()}

    def say(msg: str) -> None:
        # a Detail (cgprof.scratch) is within the stage shown: the count stays
        step = 0 if isinstance(msg, Detail) else 1
        state["n"] = n = min(int(state["n"]) + step, stages)
        done = n * 20 // stages
        sys.stderr.write(f"\r\x1b[2Kcgprof: {msg} ... [{'#' * done}{'-' * (20 - done)}] "
                         f"{n}/{stages} {time.monotonic() - state['t0']:.1f} s")
        sys.stderr.flush()

    return say


def labelled(say: Say | None, label: str) -> Say | None:
    """``say`` with each message prefixed ``label: `` (which trace it is about)."""
    return prefixed(say, f"{label}: ")


def clear(say: Say | None) -> None:
    """Wipe the bar's line (before a report or an error line is written)."""
    if say is not None:
        sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()
