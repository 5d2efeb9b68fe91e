"""Imported once by the forkserver that starts :mod:`cgprof.parallel`'s worker processes.

Every worker forks from a server that has already imported the analysis (pandas, numpy,
cgprof.metrics), so a worker starts in milliseconds and imports nothing per file; each file
is analysed under the settings it is sent with (:func:`cgprof.parallel.analyze_file`).
"""

import cgprof.io.loader  # noqa: F401
import cgprof.metrics  # noqa: F401
import cgprof.ranks  # noqa: F401
