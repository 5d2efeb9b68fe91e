"""The reading layer: the only code that opens a trace file, and what it hands up.

Everything that reads a trace (an nsys SQLite export, nsys's parquetdir/arrowdir, cgprof's
cached columnar copy) lives in this package, one subject per module. Imports point one way:
it imports :mod:`cgprof.settings`, :mod:`cgprof.errors`, the base modules below it
(:mod:`cgprof.schema`, :mod:`cgprof.scratch`, :mod:`cgprof.version`) and itself, never the
plan, the metrics or anything above them (``scripts/check_layers.py`` holds it to that).
"""
