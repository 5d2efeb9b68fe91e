"""One module per `cgprof` sub-command; each is a thin click skin over one library call.

`cgprof/cli.py` owns the group and the error mapping; commands live here so that each one's
options sit next to the single call they wrap (memray's `commands/` layout). None of these
modules imports torch at import time.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: True when this process runs one ``cgprof`` command and exits (the console script,
#: ``python -m cgprof``: :meth:`cgprof.cli.LazyGroup.__call__` sets it); False under click's
#: test runner and in library use, where :func:`heavy_imports` changes nothing.
ONE_SHOT = False
#: True once :func:`heavy_imports` froze the imports of this one-command process: it may then
#: end without the interpreter's teardown (:func:`exit_now`).
_FROZEN = [False]


@contextmanager
def heavy_imports() -> Iterator[None]:
    """Import a command's libraries (pandas, numpy, pyarrow, cgprof's metrics) the fast way,
    in a one-command process (:data:`ONE_SHOT`):

    * with the cyclic garbage collector paused, then frozen (``gc.freeze``): importing pandas
      makes ~120k objects that live until the process ends; the collector scans them again
      and again while they load, and once more while the interpreter exits (~0.1 s
      together, a sixth of a cached small-trace analysis). Frozen, they are never scanned
      again; the analysis's own objects are collected as before. Not in other processes:
      there freezing would keep that moment's garbage alive for good.
    * with numpy's OpenBLAS started on one thread (``OPENBLAS_NUM_THREADS=1`` while numpy
      loads, unless the user set it; child processes do not inherit it): by default it
      starts a thread per core at import (~0.05 s on 2 cores, more on a big GPU host), and
      cgprof makes no BLAS call big enough to use them (one 2-column least-squares fit).
    * with glibc's malloc set to keep freed memory for reuse (:func:`_keep_freed_memory`).
    """
    if not ONE_SHOT or not gc.isenabled():
        yield
        return
    blas = "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ
    _keep_freed_memory()
    if blas:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    gc.disable()
    try:
        yield
    finally:
        if blas:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        gc.freeze()
        gc.enable()
        _FROZEN[0] = True


#: glibc ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks up to glibc's own largest automatic mmap threshold come from the heap...
_MMAP_THRESHOLD = 32 << 20
#: ... and the heap keeps up to this much freed memory at its top.
_TRIM_THRESHOLD = 1 << 30


def _keep_freed_memory() -> None:
    """Have glibc's malloc keep the memory the analysis frees, for its next stage to reuse.

    By default glibc starts by mapping every block above 128 KiB on its own, unmapped when
    freed, and hands the heap's free top back above 128 KiB; the analysis allocates and frees
    column-sized temporaries stage after stage, so each one faults fresh zeroed pages in. With
    blocks up to 32 MiB (what glibc's threshold grows to by itself, later) from the heap and
    1 GiB of freed heap kept, they are reused: a cached 1M-kernel analysis took 60k -> 40k
    page faults on the H200 host and ~0.07 s less (12 interleaved runs, mean 1.37 -> 1.30 s,
    measured with the threshold at 1 GiB; 32 MiB gives the same page faults on the 2-core
    machine, 70k -> 50-53k), at ~30 MB more peak RSS; blocks above 32 MiB (a 10M-row trace's
    columns) are mapped as before, and its load still trims between tables
    (:func:`cgprof.io.memory.release_memory`). Only in a one-command process, which gives all
    its memory back at exit a moment later; glibc only (a no-op elsewhere)."""
    from cgprof.io.memory import glibc

    mallopt = getattr(glibc(), "mallopt", None)
    if mallopt is None:  # not Linux, or not glibc (musl has no mallopt)
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


def exit_now(code: int) -> None:
    """End this one-command process now with exit status ``code``, as the interpreter would
    but without its teardown: wait for the threads that are not daemons, run the ``atexit``
    functions, flush stdout and stderr, then ``os._exit``.

    The teardown frees every module and object one by one (pandas, pyarrow, the analysis:
    ~20 ms of a ~0.6 s small-trace analysis) only for the OS to take the memory back. Only
    once :func:`heavy_imports` froze the imports (a one-command process); otherwise, or when
    stdout cannot be flushed (a closed pipe: the interpreter reports that as it always
    does), it returns and the caller exits as usual."""
    if not _FROZEN[0]:
        return
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        return
    os._exit(code)
