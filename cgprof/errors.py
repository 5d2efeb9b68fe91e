"""One exception root for everything cgprof reports to a user.

Every message is a single line a user can act on: it names the file (when there is one)
and says what is wrong and, where possible, what to do about it. The CLI turns these into
`click.ClickException` (exit code 1, no traceback).
"""

from __future__ import annotations


class CgprofError(Exception):
    """Root of all errors cgprof raises on purpose."""


class TraceError(CgprofError):
    """An input trace cannot be read: missing, not SQLite, corrupt, not an nsys export."""


class AnalysisError(CgprofError):
    """The trace was read but the requested analysis cannot be done (e.g. unknown --step)."""


class OutputExistsError(CgprofError):
    """An output file exists and --force was not given."""

    def __init__(self, path: object) -> None:
        super().__init__(f"{path} exists; will not overwrite without --force")
        self.path = path


class RecordError(CgprofError):
    """`cgprof record` failed: nsys not found, import or export failed."""


class RunnerError(CgprofError):
    """A built-in workload cannot run as asked (unknown model, graphs on CPU, ...)."""
