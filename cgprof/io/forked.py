"""The forked reader: a small SQLite export's tables read by a child process, into Arrow files.

Where the interpreter's start and imports are much of a run, a small export
(:data:`FORK_READ_MAX_BYTES`) is read ahead by a forked process through DuckDB
(:meth:`cgprof.io.sqlite.SqliteSource.read_ahead_early`) while the caller imports the
analysis: the child writes each table as an Arrow IPC stream file (into a new cache entry's
folder when the cache is on) and the parent memory-maps them when the load asks
(:class:`_ForkedRead`). When the child fails, the parent reads the tables itself.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cgprof.io import duck as D
from cgprof.io.arrow import _DEFAULT_BATCH, _open_ipc
from cgprof.io.threads import InThread
from cgprof.settings import current

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.sqlite import SqliteSource


#: The largest SQLite export whose reads ahead run in a forked process
#: (:meth:`SqliteSource.read_ahead_early`): where the interpreter's start and imports are
#: much of a run. A larger one is read ahead in threads of the process itself (its tables
#: would otherwise pass through a file, and its analysis takes seconds anyway).
FORK_READ_MAX_BYTES = 64 * 2**20


def fork_reads_ok(src: SqliteSource) -> bool:
    """Whether ``src`` may be read ahead in a forked process: Linux, a process of one thread
    (a fork copies the calling thread only: a lock another one held would stay held in the
    child; the CLI prefetches before it starts any), a file of at most
    :data:`FORK_READ_MAX_BYTES`, the whole file (no row filter, no spill), DuckDB
    installed, and the settings' reader is not ``thread`` nor their engine ``sqlite3``."""
    import importlib.util

    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return False
    except OSError:
        return False
    if current().reader == "thread" or src._duck_failed:
        return False
    if src.pid_filter is not None or src.spill is not None or src._duck is not None:
        return False
    try:
        if src.path.stat().st_size > FORK_READ_MAX_BYTES:
            return False
    except OSError:
        return False
    return importlib.util.find_spec("duckdb") is not None


class ForkedReads:
    """Tables of an SQLite export read by one forked process through DuckDB (each in a thread
    of its own there, as :meth:`SqliteSource.read_ahead` would, copied into DuckDB first while
    pyarrow is imported: :meth:`_child`), each handed back as an Arrow IPC stream file in a
    temporary folder and memory-mapped by :meth:`table`.

    The child only reads: the parent's sqlite3 connection is not used there (each table's
    batch size is taken before the fork), its standard streams go to /dev/null, and it leaves
    with ``os._exit``. When it fails (a damaged file, no scanner), every table is read again
    by the parent when asked, which says what is wrong."""

    def __init__(self, src: SqliteSource, jobs: list[tuple[str, list[str]]],
                 into: Path | None = None) -> None:
        from cgprof import scratch

        self.jobs = jobs
        rows = [src._batch_rows(table) for table, _ in jobs]
        #: ``into``: an empty folder that becomes the trace's cache entry (the files are
        #: then LZ4-compressed: ResNet-18's 18.7 MB of columns take 5.1 MB), else a
        #: temporary folder of the system's
        self.folder = into or scratch.folder("cgprof-reads-")
        self.into = into
        self.handed = False  # the folder given to the caller (:meth:`hand_over`)
        self.status: int | None = None
        try:
            pid = os.fork()
        except BaseException:  # no fork (OSError), or Ctrl-C's KeyboardInterrupt during it
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        if pid:
            self.pid = pid
            return
        code = 1
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            code = self._child(src.path, rows)
        except BaseException:  # noqa: BLE001 - the child never returns into the caller
            code = 1
        finally:
            os._exit(code)

    def _child(self, path: Path, rows: list[int | None]) -> int:
        con = D._duckdb_sqlite(path, D.duckdb_temp())
        # Each table is first copied into a table of DuckDB's own, in memory, by threads
        # that do not hold the GIL while they run, and this thread imports pyarrow (numpy
        # with it) meanwhile: that import no longer comes before the reads. The copy is
        # then turned into Arrow in its order (a scan of DuckDB's own table keeps its
        # insertion order, in parallel). H200 host, ResNet-18's 11 tables, the child alone:
        # 364-412 ms -> 264-276 ms.
        staged = [InThread(self._stage, con, i, table, columns, rows[i],
                           name=f"cgprof-stage-{table}")
                  for i, (table, columns) in enumerate(self.jobs)]
        import pyarrow as pa

        for stage in staged:
            stage.result()
        options = pa.ipc.IpcWriteOptions(compression="lz4" if self.into else None)

        def one(i: int, table: str) -> None:
            cur = con.cursor()
            try:
                tbl = cur.execute(f"SELECT * FROM {_staged(i)}").to_arrow_table(
                    batch_size=rows[i] or _DEFAULT_BATCH)
                cur.execute(f"DROP TABLE {_staged(i)}")
            finally:
                cur.close()
            with pa.OSFile(str(self.file(i)), "wb") as sink, \
                    pa.ipc.new_stream(sink, tbl.schema, options=options) as writer:
                writer.write_table(tbl)  # a stream, as nsys's arrowdir (what _open_ipc reads)

        reads = [InThread(one, i, table, name=f"cgprof-read-{table}")
                 for i, (table, _) in enumerate(self.jobs)]
        for read in reads:
            read.result()
        con.close()
        return 0

    @staticmethod
    def _stage(con: Any, i: int, table: str, columns: list[str], rows: int | None) -> None:
        """Copy ``columns`` of ``table`` into DuckDB's own table :func:`_staged` ``(i)``, in
        rowid order (sorted where :meth:`SqliteSource._scan` sorts: there a sort turns the
        scan into Arrow faster, here it is what lets the copy run in parallel; H200 host,
        500k kernels + 500k calls, the child alone: 401-430 ms scanning straight into Arrow,
        505-560 ms through an unsorted copy, 310-373 ms through a sorted one)."""
        cur = con.cursor()
        try:
            query = D.scan_sql(table, columns, rows)
            cur.execute(f"CREATE TABLE {_staged(i)} AS {query}")
        finally:
            cur.close()

    def wait(self) -> bool:
        """Wait for the child; whether it read every table."""
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.status = -1
        return self.status == 0

    def file(self, i: int) -> Path:
        """The file of the ``i``-th job's table: ``TABLE.arrow``, as a cache entry of Arrow
        files names it (cgprof.io.cache)."""
        return self.folder / f"{self.jobs[i][0]}.arrow"

    def table(self, i: int) -> Any:
        """The ``i``-th job's table (memory-mapped), or None when the child failed."""
        if not self.wait():
            return None
        import pyarrow as pa

        try:
            with _open_ipc(self.file(i)) as reader:
                return reader.read_all()
        except (OSError, pa.ArrowException):
            return None

    def hand_over(self) -> Path | None:
        """The folder ``into`` when the child read every table into it, now the caller's
        (:meth:`close` no longer removes it); else None."""
        if self.into is None or not self.wait() or self.handed:
            return None
        if not all(self.file(i).is_file() for i in range(len(self.jobs))):
            return None
        self.handed = True
        return self.into

    def close(self) -> None:
        """Stop the child if it is still reading; remove the folder unless it was handed
        over (a table already taken keeps its mapping)."""
        import shutil
        import signal

        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait()
        if not self.handed:
            shutil.rmtree(self.folder, ignore_errors=True)


def _staged(i: int) -> str:
    """The name of the DuckDB table a :class:`ForkedReads` child copies its ``i``-th job's
    table into."""
    return f"cgprof_staged_{i}"


class _ForkedRead:
    """One table of a :class:`ForkedReads`, with :class:`InThread`'s interface (its result
    None when the child failed: :meth:`cgprof.io.sources.Source.read` then reads it)."""

    def __init__(self, reads: ForkedReads, i: int) -> None:
        self.reads, self.i = reads, i

    def alive(self) -> bool:
        return self.reads.status is None

    def wait(self) -> None:
        self.reads.wait()

    def result(self) -> Any:
        return self.reads.table(self.i)
