"""cgprof's version and the schema versions of the documents it writes.

Each document carries its ``schema_version``; a reader refuses one it does not know (a
baseline of another version: :func:`cgprof.check.load_run`). A version changes when a
document's keys or meanings change (docs/reports.md).
"""

__version__ = "0.1.0"

#: ``cgprof analyze --json`` and ``cgprof check --save-baseline`` documents.
JSON_SCHEMA_VERSION = 2
#: ``cgprof diff --json`` documents (one-process and multi-rank).
DIFF_SCHEMA_VERSION = 2
