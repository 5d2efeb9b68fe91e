"""cgprof's columnar cache: a Parquet copy of the columns cgprof reads from each trace.

The first analysis of a trace reads it (SQLite through DuckDB) and writes what it read as one
``TABLE.parquet`` per nsys table, plus ``manifest.json``, into an entry folder of the cache
(``$CGPROF_CACHE``, else the platform's user cache folder). Later analyses of the same file
read the Parquet files and never open SQLite.

Entries are keyed by the trace's size, its mtime and a SHA-256 of its first and last
:data:`PAGE_BYTES` bytes (never a hash of the whole file, which may be GBs), so a changed
trace gets a new key and is never served stale. Entries are written to a temporary folder
and renamed into place (atomic: a crashed run leaves no half entry under the real name); an
entry that cannot be read is discarded and the trace is read again. The input is only read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cgprof import engine as E
from cgprof.errors import CgprofError, TraceError

#: Bump when the layout or the columns stored change: old entries are then ignored.
FORMAT_VERSION = 1
PAGE_BYTES = 1 << 16
MANIFEST = "manifest.json"


def enabled() -> bool:
    """The cache is on unless ``CGPROF_NO_CACHE`` is set to something other than 0/empty."""
    return os.environ.get("CGPROF_NO_CACHE", "").strip() in ("", "0")


def cache_dir() -> Path:
    """``$CGPROF_CACHE``, else the platform's user cache folder + ``/cgprof``."""
    env = os.environ.get("CGPROF_CACHE", "").strip()
    if env:
        return Path(env).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "cgprof"
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "cgprof" / "Cache"
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "cgprof"


def key(path: Path) -> str:
    """Cache key of one trace file: format, size, mtime, first and last pages."""
    st = path.stat()
    h = hashlib.sha256()
    h.update(f"cgprof-cache-{FORMAT_VERSION}:{st.st_size}:{st.st_mtime_ns}:".encode())
    with path.open("rb") as fh:
        h.update(fh.read(PAGE_BYTES))
        if st.st_size > PAGE_BYTES:
            fh.seek(max(PAGE_BYTES, st.st_size - PAGE_BYTES))
            h.update(fh.read(PAGE_BYTES))
    return h.hexdigest()[:32]


def entry_dir(path: Path) -> Path:
    return cache_dir() / key(path)


def lookup(path: Path) -> CachedSource | None:
    """The cache entry of ``path`` as a source, or None (no entry, unreadable, other format)."""
    try:
        entry = entry_dir(path)
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        discard(entry)
        return None
    tables = manifest.get("tables")
    if not isinstance(tables, dict):
        discard(entry)
        return None
    return CachedSource(entry, tables, path)


class CachedSource(E.DirSource):
    """A cache entry; ``path`` stays the trace's own path for messages."""

    def __init__(self, entry: Path, tables: dict[str, list[str]], trace_path: Path) -> None:
        super().__init__(entry, "cache", tables)
        self.entry = entry
        self.trace_path = trace_path


def discard(entry: Path) -> None:
    """Remove a broken or stale entry; never fatal."""
    shutil.rmtree(entry, ignore_errors=True)


class Pending:
    """A cache entry being written: each table as it is read (:meth:`write`, a Source's
    ``spool``), then :meth:`commit` (manifest, rename into place) or :meth:`abort`.

    A cache that cannot be written (read-only folder, full disk) costs only speed: a failed
    write makes :meth:`commit` return None and the analysis goes on without it.
    """

    def __init__(self, path: Path, tmp: Path) -> None:
        self.path, self.tmp, self.failed = path, tmp, False

    def write(self, table: str, tbl: Any) -> None:
        if self.failed:
            return
        import pyarrow.parquet as pq

        try:
            pq.write_table(tbl, self.tmp / f"{table}.parquet", compression="lz4",
                           use_dictionary=False)
        except Exception:
            self.failed = True

    def commit(self, tables: dict[str, list[str]]) -> Path | None:
        if self.failed:
            self.abort()
            return None
        return _finish(self.path, self.tmp, tables)

    def abort(self) -> None:
        discard(self.tmp)


def begin(path: Path) -> Pending | None:
    """A new entry for ``path`` in a temporary folder of the cache; None if none can be made."""
    try:
        entry = entry_dir(path)
        root = entry.parent
        root.mkdir(parents=True, exist_ok=True)
        return Pending(path, Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=root)))
    except OSError:
        return None


def store(path: Path, src: E.Source) -> Path | None:
    """Write what ``src`` read (its ``reads``) as a new cache entry for ``path``; None if it
    cannot be written (then the analysis goes on without it)."""
    pending = begin(path)
    if pending is None:
        return None
    for table, tbl in src.reads.items():
        pending.write(table, tbl)
    return pending.commit(src.tables)


def _finish(path: Path, tmp: Path, tables: dict[str, list[str]]) -> Path | None:
    """Manifest, then rename ``tmp`` into place as ``path``'s entry."""
    try:
        entry = entry_dir(path)
        st = path.stat()
        manifest = {"format": FORMAT_VERSION, "source": str(path.resolve()),
                    "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "tables": tables}
        (tmp / MANIFEST).write_text(json.dumps(manifest))
        try:
            os.rename(tmp, entry)
        except OSError:  # another run stored the same entry first
            discard(tmp)
            return entry if entry.exists() else None
        return entry
    except Exception:
        discard(tmp)
        return None


def warm(path: Path) -> Path:
    """Read ``path`` once so that its columnar copy is in the cache; returns the entry.

    What ``cgprof record --columnar`` does after the export: the first ``cgprof analyze``
    then skips SQLite. Raises :class:`TraceError` when the trace cannot be read, or when the
    cache cannot be written.
    """
    from cgprof.trace import load

    load(path, cache=True)
    entry = entry_dir(path)
    if not (entry / MANIFEST).is_file():
        raise TraceError(f"{path}: cannot write its columnar copy into {cache_dir()}")
    return entry


def export_report(report: Path, into: Path) -> Path:
    """Export an ``.nsys-rep`` to SQLite in folder ``into`` with the nsys cgprof finds."""
    from cgprof import record

    try:
        nsys = record.find_nsys(globs=record.NSYS_GLOBS)
    except CgprofError:
        looked = ", ".join(["$CGPROF_NSYS", "PATH", *record.NSYS_GLOBS])
        raise TraceError(
            f"{report}: is an Nsight Systems report and no nsys was found to export it "
            f"(looked in {looked}); set "
            f"CGPROF_NSYS=PATH or export it yourself with "
            f"`nsys export --type sqlite -o {report.with_suffix('.sqlite')} {report}`"
        ) from None
    out = into / (report.stem + ".sqlite")
    argv = record.build_export_argv(nsys, report, out)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TraceError(f"{report}: cannot run {nsys} ({exc.strerror})") from None
    if proc.returncode != 0 or not out.is_file():
        lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"exit code {proc.returncode}"
        raise TraceError(f"{report}: `nsys export --type sqlite` failed ({why})")
    return out


@contextlib.contextmanager
def exported(report: Path) -> Any:
    """A temporary SQLite export of ``report``, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="cgprof-export-"))
    try:
        yield export_report(report, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def entries() -> list[dict[str, Any]]:
    """Every entry in the cache: key, source, size on disk (bytes), created."""
    root = cache_dir()
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    for entry in sorted(root.iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        size = sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
        try:
            manifest = json.loads((entry / MANIFEST).read_text())
        except (OSError, ValueError):
            manifest = {}
        out.append({"key": entry.name, "source": manifest.get("source"),
                    "created": manifest.get("created"), "bytes": size})
    return out


def clear() -> int:
    """Remove every entry (and leftover temporary folders); returns how many entries went."""
    root = cache_dir()
    if not root.is_dir():
        return 0
    n = 0
    for entry in root.iterdir():
        if entry.is_dir() and (len(entry.name) == 32 or entry.name.startswith(".tmp-")):
            n += not entry.name.startswith(".tmp-")
            shutil.rmtree(entry, ignore_errors=True)
    return n
