"""The reading layer: the only code that opens a trace file, and what it hands up.

A trace (an nsys SQLite export, nsys's parquetdir/arrowdir, cgprof's cached columnar copy) is
read through one interface, :class:`cgprof.io.sources.Source` (columns into Arrow), and
built into a :class:`cgprof.io.trace.Trace` of pandas frames by the loader
(:func:`cgprof.io.loader.load`, ``load_part``, ``load_rows``). The modules, each one subject:

* ``loader``   opens, reads, checks and caches a trace; ``frames`` builds its frames from the
  Arrow columns; ``trace`` is the :class:`~cgprof.io.trace.Trace` type; ``validate`` refuses
  a trace whose tables contradict each other;
* ``sources`` (the interface), ``sqlite``, ``dirsource``: the inputs; ``duck``: DuckDB over
  SQLite; ``forked``: a small export read ahead by a forked process; ``spill``: an export's
  tables written once for a read in parts; ``filters``: the row filters applied within a scan;
  ``arrow``: Arrow helpers the readers share;
* ``cache``, ``framestore``: the columnar cache and how a frame is stored in it;
  ``prefetch``, ``early``: a trace's reads started before the analysis is imported;
* ``estimate``: what a whole analysis will hold, read off the file; ``memory``, ``threads``:
  the memory and threads the layer takes from the settings, and gives back.

Imports point one way: this package imports :mod:`cgprof.settings`, :mod:`cgprof.errors`,
the base modules below it (:mod:`cgprof.schema`, :mod:`cgprof.scratch`,
:mod:`cgprof.version`) and itself, never the plan, the metrics or anything above them
(``scripts/check_layers.py``). It runs no nsys either: an ``.nsys-rep`` report is exported to
SQLite by :data:`report_export`, which the package that runs nsys sets (``cgprof/__init__.py``
sets it to :func:`cgprof.nsys.exported`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from contextlib import AbstractContextManager
    from pathlib import Path

#: ``report_export(report)``: a context manager that yields a temporary SQLite export of the
#: ``.nsys-rep`` file ``report`` and removes it afterwards (None: no exporter set, a report
#: cannot be read).
report_export: Callable[[Path], AbstractContextManager[Path]] | None = None
