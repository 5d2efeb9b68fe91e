"""Imported once by the forkserver that starts :mod:`cgprof.parallel`'s worker processes.

Every worker forks from a server that has already imported the analysis (pandas, numpy,
cgprof.metrics), so a worker starts in milliseconds and imports nothing per file; its trace
engine is held to one thread (``CGPROF_THREADS=1``): the parallelism comes from the files.
"""

import os

os.environ["CGPROF_THREADS"] = "1"

import cgprof.metrics  # noqa: E402,F401
import cgprof.ranks  # noqa: E402,F401
import cgprof.trace  # noqa: E402,F401
