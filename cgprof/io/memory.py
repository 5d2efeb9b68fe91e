"""The memory the reading layer may hold, and the memory it gives back.

:func:`memory_limit` is the engine's cap (:attr:`cgprof.settings.Settings.memory_limit`: what
DuckDB is told); :func:`release_memory` hands the OS back what Arrow's pool and the C heap keep
once buffers are freed, between the stages of a load and an analysis
(:func:`release_arrow_pool`: Arrow's pool only); :func:`glibc` is the C library that takes
``malloc_trim`` and ``mallopt``. Nothing here reads a trace.
"""

from __future__ import annotations

from typing import Any

from cgprof.settings import current


def memory_limit() -> str:
    """The engine's memory cap (:attr:`cgprof.settings.Settings.memory_limit`)."""
    return current().memory_limit


_LIBC: list[Any] = []


def glibc() -> Any:
    """The C library as a ``ctypes.CDLL`` on Linux (loaded once), else None: for
    ``malloc_trim`` (:func:`release_memory`) and ``mallopt``
    (:func:`cgprof.commands.heavy_imports`); callers check that the function is there (musl
    has neither)."""
    if not _LIBC:
        import sys

        lib = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                lib = ctypes.CDLL("libc.so.6")
            except OSError:
                lib = None
        _LIBC.append(lib)
    return _LIBC[0]


#: Below this many activity rows (kernels + CUDA API calls) :func:`release_memory` keeps what
#: was freed: the next stage reuses those pages instead of faulting fresh ones in (1M-kernel
#: trace, cached: 85k -> 56k page faults, peak RSS 521 -> 549 MB, docs/engine.md).
RELEASE_MIN_ROWS = 4_000_000


def release_arrow_pool() -> None:
    """Give the OS back the pages Arrow's memory pool keeps after its buffers are freed (the
    columns of a loaded trace are numpy views of Arrow buffers: dropping one frees nothing
    until then); unlike :func:`release_memory`, the C heap is left as it is."""
    import sys

    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()


def release_memory(rows: int | None = None) -> None:
    """Give the OS back the memory freed since the last call: what Arrow's pool holds but no
    longer uses (:func:`release_arrow_pool`) and, with glibc, the free chunks of the C heap
    (``malloc_trim``: freed medium-sized arrays otherwise stay in the process).
    Called between the stages of a load and an analysis so that the peak RSS of a 10M-row
    trace is what is alive, not what was. A few ms; a no-op where neither applies, and when
    ``rows`` (the trace's activity rows) is below :data:`RELEASE_MIN_ROWS`."""
    if rows is not None and rows < RELEASE_MIN_ROWS:
        return
    release_arrow_pool()
    trim = getattr(glibc(), "malloc_trim", None)
    if trim is not None:
        trim(0)
