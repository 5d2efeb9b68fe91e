"""cgprof's columnar cache: a Parquet copy of the columns cgprof reads from each trace.

The first analysis of a trace reads it (SQLite through DuckDB) and writes what it read as one
``TABLE.parquet`` per nsys table, plus ``manifest.json``, into an entry folder of the cache
(``$CGPROF_CACHE``, else the platform's user cache folder). Later analyses of the same file
read the Parquet files and never open SQLite.

The six activity tables (kernels, CUDA API calls, copies, memsets, syncs, graph replays) are
stored as the :class:`~cgprof.io.trace.Trace` frames the first run built from them (sorted,
names resolved to categorical codes, ``pid`` split; the kernels and API calls as a loaded
Trace holds them, without the columns it derives on demand and with its few-valued columns
as codes: cgprof.io.trace.DERIVED, COMPACT), as ``TABLE.frame.parquet``: a cached load reads
them back as they are (:mod:`cgprof.io.framestore`) and redoes none of that work, except for
the columns that follow cheaply from others (the copies' ``end_ns``, the runtime's ``pid``
and version-stripped names), which are made again rather than stored. The other tables
(strings, NVTX, metadata) are stored as the nsys columns read; NVTX also as its frame when
every value of it can be stored exactly.

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
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cgprof import schema as S
from cgprof import scratch
from cgprof.io import early as E
from cgprof.io.dirsource import DirSource
from cgprof.io.framestore import (
    FrameLayoutError,
    _same_column,
    frame_to_arrow,
    has_categories,
    read_frame,
)
from cgprof.settings import current, in_context

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.io.sources import Source
    from cgprof.io.sqlite import SqliteSource


#: Bump when the layout or the columns stored change: old entries are then ignored
#: (and their key changes too, see :func:`key`). 2: the activity tables as Trace frames.
#: 3: one-value columns (trace.constant_view) stored as their value in the layout.
#: 4: the kernel and API-call frames as a loaded Trace holds them (Trace.shed): without
#: ``dur_ns``/``tid`` (``end_ns`` stored, not rebuilt), few-valued columns as
#: ``category-int64`` codes.
#: 5: a small export's entry may be the Arrow files its forked reader wrote (manifest
#: ``"suffix": ".arrow"``, no frames).
#: 6: the export's DIAGNOSTIC_EVENT among the small tables (an entry without it would read
#: as a trace that recorded no drop).
FORMAT_VERSION = 6
PAGE_BYTES = 1 << 16
MANIFEST = "manifest.json"
#: The prefix of a folder being written in the cache folder (an entry before its commit, a
#: run's spill): never served, removed by `cgprof cache clear`, and by a later run once the
#: process that made it is gone (cgprof.scratch)
PENDING = ".tmp-"
PARQUET, ARROW = ".parquet", ".arrow"


def enabled() -> bool:
    """Whether the active settings use the cache (``--no-cache``, ``CGPROF_NO_CACHE``)."""
    return current().cache


def cache_dir() -> Path:
    """The active settings' cache folder (``$CGPROF_CACHE``, else the platform's user cache
    folder + ``/cgprof``)."""
    return current().cache_folder


def key(path: Path) -> str:
    """Cache key of one trace file: format, the cgprof version (its entries hold frames that
    version's code derived: names, pids, order), size, mtime, first and last pages."""
    from cgprof.version import __version__

    st = path.stat()
    h = hashlib.sha256()
    h.update(f"cgprof-cache-{FORMAT_VERSION}:{__version__}:{st.st_size}:"
             f"{st.st_mtime_ns}:".encode())
    digest_ends(h, path, st.st_size, PAGE_BYTES)
    return h.hexdigest()[:32]


def digest_ends(h: Any, path: Path, size: int, page_bytes: int) -> None:
    """Feed ``h`` (a hashlib object) the first and the last ``page_bytes`` of ``path``, a
    file of ``size`` bytes (never its whole content, which may be GBs)."""
    with path.open("rb") as fh:
        h.update(fh.read(page_bytes))
        if size > page_bytes:
            fh.seek(max(page_bytes, size - page_bytes))
            h.update(fh.read(page_bytes))


def entry_dir(path: Path, part: str | None = None) -> Path:
    """The entry folder of ``path``'s whole trace, or of one ``part`` of it (a multi-rank
    trace read rank by rank stores each rank's trace as an entry of its own, ``part``
    ``"pid N"``, and the ranks' ids as part ``"ranks"``: cgprof.ranks)."""
    k = key(path)
    if part is not None:
        k = hashlib.sha256(f"{k}:part:{part}".encode()).hexdigest()[:32]
    return cache_dir() / k


def _manifest(entry: Path) -> dict[str, Any] | None:
    """The entry's manifest when it is of this format, else None (a stale one discarded)."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        discard(entry)
        return None
    return manifest


def lookup(path: Path, part: str | None = None) -> CachedSource | None:
    """The cache entry of ``path`` (or of its ``part``, see :func:`entry_dir`) as a source,
    or None (no entry, unreadable, other format)."""
    if part is None:
        early = E.take_early(path, CachedSource)
        if early is not None:
            return early  # type: ignore[return-value]
    try:
        entry = entry_dir(path, part)
    except OSError:
        return None
    manifest = _manifest(entry)
    if manifest is None:
        return None
    tables, frames = manifest.get("tables"), manifest.get("frames")
    suffix = manifest.get("suffix", PARQUET)
    if not isinstance(tables, dict) or not isinstance(frames, dict) or (
            suffix not in (PARQUET, ARROW)):
        discard(entry)
        return None
    return CachedSource(entry, tables, path, frames, suffix)


class CachedSource(DirSource):
    """A cache entry; ``path`` stays the trace's own path for messages. ``suffix``: its
    tables' files, Parquet or (a small export's forked reader wrote them) Arrow."""

    def __init__(self, entry: Path, tables: dict[str, list[str]], trace_path: Path,
                 frames: dict[str, Any] | None = None, suffix: str = PARQUET) -> None:
        super().__init__(entry, "cache", tables)
        self.suffix = suffix
        self.entry = entry
        self.trace_path = trace_path
        self.frames = frames or {}

    def wants_frames(self) -> bool:
        """Whether a whole load should store the frames it builds in this entry: one of nsys
        columns only that a run within the memory cap wrote (Parquet). An entry of Arrow
        files is a small trace's, whose frames are built in about the time reading stored
        ones saves (docs/engine.md)."""
        return not self.frames and self.suffix == PARQUET

    def _ahead_job(self, table: str, columns: list[str]) -> Any:
        if table in self.frames:  # its stored frame is read instead of its nsys columns
            return None
        return super()._ahead_job(table, columns)

    def frame(self, table: str, rebuild: Any = None) -> Any:
        """The Trace frame stored for nsys table ``table``, or None when none is; ``rebuild``
        makes the columns left out of it (see :meth:`Pending.write_frame`)."""
        layout = self.frames.get(table)
        return None if layout is None else read_frame(self, table, layout, rebuild)


#: nsys tables whose Trace frame is stored (instead of the nsys columns it was built from).
FRAME_TABLES = (S.KERNEL, S.RUNTIME, S.MEMCPY, S.MEMSET, S.SYNC, S.GRAPH_TRACE)
#: nsys tables whose frame is stored when it can be, besides their nsys columns (strings).
OPTIONAL_FRAME_TABLES = (S.NVTX,)


def discard(entry: Path) -> None:
    """Remove a broken or stale entry; never fatal."""
    shutil.rmtree(entry, ignore_errors=True)


class Pending:
    """A cache entry being written: each table as it is read (:meth:`write`, a Source's
    ``spool``), then :meth:`commit` (manifest, rename into place) or :meth:`abort`.

    A cache that cannot be written (read-only folder, full disk) costs only speed: a failed
    write makes :meth:`commit` return None and the analysis goes on without it.
    """

    def __init__(self, path: Path, tmp: Path, part: str | None = None) -> None:
        self.path, self.tmp, self.failed, self.part = path, tmp, False, part
        self.frames: dict[str, list[list[Any]]] = {}
        #: an entry of nsys columns only that the frames written here go into (add_frames)
        self.into: Path | None = None
        #: True: :meth:`write` keeps the tables for the writer thread (:func:`write_later`),
        #: which writes them with the frames, rather than writing each as the load reads it
        self.defer = False
        self._kept: dict[str, Any] = {}

    def write(self, table: str, tbl: Any) -> None:
        """Store the nsys columns read from ``table`` (the tables without a stored frame):
        now, or with :attr:`defer` by the thread that writes the frames
        (:func:`write_later`). A first load's small tables (strings, metadata, GPUs,
        threads) were written as it read them, and its first write imported the Parquet
        writer: ResNet-18's metadata took 15 ms there on the H200 host, 4-5 ms deferred."""
        if self.failed or table in FRAME_TABLES:
            return
        if self.defer:
            self._kept[table] = tbl
            return
        self._write(table, tbl)

    def write_kept(self) -> None:
        """Write the tables :meth:`write` kept (:attr:`defer`)."""
        while self._kept and not self.failed:
            table, tbl = self._kept.popitem()
            self._write(table, tbl)

    def _write(self, table: str, tbl: Any, **options: Any) -> None:
        import pyarrow.parquet as pq

        try:
            pq.write_table(tbl, self.tmp / f"{table}.parquet", use_dictionary=False,
                           **({"compression": "lz4"} | options))
        except Exception:
            self.failed = True

    def write_frame(self, table: str, df: Any, rebuild: Any = None) -> None:
        """Store the Trace frame built from nsys table ``table``.

        ``rebuild(frame) -> {column: values}`` makes some columns from others (``end_ns``
        from ``start_ns`` + ``dur_ns``, ...): those are left out of the file (1M API calls:
        5 of 11 columns, ~55 ms less to write, ~15 ms less to read) when what it makes from
        the frame's own columns is exactly the column; a cached load calls it again."""
        if self.failed:
            return
        rebuilt: list[str] = []
        if rebuild is not None and len(df):
            made = rebuild(df)  # (cgprof.io.frames' makes each column when looked up)
            rebuilt = [c for c in made if c in df.columns and _same_column(df[c], made[c])]
        try:
            tbl, layout, cats = frame_to_arrow(df, rebuilt)
        except FrameLayoutError:
            self.failed = True
            return
        # Delta-coded integers: sorted times, rising ids and small codes take a few bits a
        # row (1M kernels: 7 MB, not 64), and decode faster than LZ4 over plain values.
        delta = {c: "DELTA_BINARY_PACKED" for c, kind in layout
                 if kind in ("int64", "Int64") or kind.startswith("category")}
        self._write(f"{table}.frame", tbl, compression="none", column_encoding=delta)
        if has_categories(layout):
            self._write(f"{table}.categories", cats)
        self.frames[table] = layout

    def write_trace(self, trace: Any, rebuild: Any = None) -> None:
        """Store the frames of the tables in :data:`FRAME_TABLES` (each one is needed) and
        of those in :data:`OPTIONAL_FRAME_TABLES` that can be stored exactly.
        ``rebuild(table, frame)``: see :meth:`write_frame`. ``trace``: a Trace, or its
        :func:`trace_frames` taken when the caller chose (the frames as loaded), a dict this
        empties as it goes: each frame is given up once written, so one the analysis
        replaced meanwhile (analyze lends the kernels' columns to the GPU ops) is freed
        then, not when all are written."""
        frames = trace if isinstance(trace, dict) else trace_frames(trace)
        for table in list(frames):
            df = frames.pop(table)
            if table in OPTIONAL_FRAME_TABLES:
                try:
                    frame_to_arrow(df)
                except FrameLayoutError:
                    continue
            self.write_frame(table, df, None if rebuild is None else (
                lambda d, t=table: rebuild(t, d)))
            del df

    def commit(self, tables: dict[str, list[str]]) -> Path | None:
        if self.failed or not set(FRAME_TABLES) <= set(self.frames):
            self.abort()
            return None
        if self.into is not None:
            return _adopt(self.into, self.tmp, self.frames)
        return _finish(self.path, self.tmp, tables, self.frames, self.part)

    def commit_columns(self, tables: dict[str, list[str]]) -> Path | None:
        """Commit an entry of nsys columns only, no frame (cgprof.io.loader.spill_tables'
        spooled into it: a run that read the trace a chunk at a time, within the memory
        cap, never held the whole frames to store)."""
        if self.failed:
            self.abort()
            return None
        return _finish(self.path, self.tmp, tables, {}, self.part)

    def abort(self) -> None:
        discard(self.tmp)


#: Entries being written by a thread (:func:`write_later`), and whether a load may do so.
_writers: list[threading.Thread] = []
_background = [False]


@contextlib.contextmanager
def background_writes() -> Any:
    """Within this block, the first load of a trace writes its cache entry from a thread
    while the analysis goes on (the CLI: 10M kernels, ~2.7 s of Parquet writing off the
    critical path; Arrow writes without the GIL). Leaving the block waits until every entry
    is written and committed.

    Only for callers that keep the loaded Trace to themselves until the block ends: the
    thread reads the Trace's frames, so they must not change meanwhile (cgprof's metrics
    never change them; a user of :func:`cgprof.load` might, so that writes synchronously).
    """
    before = _background[0]
    _background[0] = True
    try:
        yield
    finally:
        _background[0] = before
        finish_writes()


def writing_in_background(func: Any) -> Any:
    """Decorator: ``func`` runs inside :func:`background_writes` (the CLI's commands), and
    the sources it :func:`cgprof.io.prefetch.prefetch`-ed but did not load are closed when it
    returns."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with background_writes():
                return func(*args, **kwargs)
        finally:
            E.drop_early()  # a source :func:`prefetch` opened that no load took

    return wrapper


def in_background() -> bool:
    """True inside :func:`background_writes`."""
    return _background[0]


def write_later(pending: Pending, trace: Any, rebuild: Any,
                tables: dict[str, list[str]]) -> None:
    """Write ``trace``'s frames (and the tables ``pending`` kept) into ``pending`` and
    commit it, in a thread (not a daemon: the interpreter waits for it before exiting, so
    an entry is never left half-written by a normal exit; a killed process leaves only a
    ``.tmp-`` folder, never served)."""
    frames = trace_frames(trace)  # now: the analysis may replace a frame meanwhile

    def run() -> None:
        try:
            pending.write_kept()
            pending.write_trace(frames, rebuild)
            pending.commit(tables)
        except BaseException:  # a failed write costs only speed, never the analysis
            pending.abort()

    thread = threading.Thread(target=in_context(run), name="cgprof-cache-writer")
    _writers.append(thread)
    thread.start()


def add_frames(entry: Path, path: Path, trace: Any, rebuild: Any) -> None:
    """Store ``trace``'s frames (of the trace at ``path``) in ``entry``, an entry of nsys
    columns only (cgprof.io.loader.spill_tables', written by a run within the memory cap), and
    list them in its manifest: then it is the entry a whole first load writes. From a
    thread within :func:`background_writes`, as a first load's entry is written; a failure
    costs only speed."""
    pending = begin(path)
    if pending is None:
        return
    pending.into = entry
    write_frames(pending, trace, rebuild, {})


def write_frames(pending: Pending, trace: Any, rebuild: Any, tables: dict[str, list[str]],
                 say: Any = None) -> None:
    """Write ``trace``'s frames into ``pending`` and commit it: from a thread within
    :func:`background_writes` (:func:`write_later`), else now (``say``: told so). A failed
    write costs only speed: the entry is aborted, never the analysis."""
    if in_background():
        write_later(pending, trace, rebuild, tables)
        return
    if say is not None:
        say("writing the columnar cache")
    try:
        pending.write_trace(trace, rebuild)
        pending.commit(tables)
    except Exception:
        pending.abort()


def _adopt(entry: Path, tmp: Path, frames: dict[str, list[list[Any]]]) -> Path | None:
    """Move the frame files written in ``tmp`` into ``entry`` (an entry of nsys columns
    only), list them in its manifest (replaced whole, so that a reader sees the old one or
    the new one), then remove the activity tables' nsys columns the frames replace."""
    try:
        manifest = _manifest(entry)
        if manifest is None or manifest.get("frames"):  # gone, or another run did it
            return None
        for f in tmp.iterdir():
            os.replace(f, entry / f.name)
        manifest["frames"] = frames
        staged = entry / f"{MANIFEST}.tmp"
        staged.write_text(json.dumps(manifest))
        os.replace(staged, entry / MANIFEST)
        for table in FRAME_TABLES:
            (entry / f"{table}.parquet").unlink(missing_ok=True)
        return entry
    except Exception:
        return None
    finally:
        discard(tmp)


def finish_writes() -> None:
    """Wait for the entries :func:`write_later` is writing."""
    while _writers:
        _writers.pop().join()


def begin(path: Path, part: str | None = None) -> Pending | None:
    """A new entry for ``path`` (or its ``part``, see :func:`entry_dir`) in a temporary
    folder of the cache; None if none can be made."""
    try:
        entry = entry_dir(path, part)
        root = entry.parent
        root.mkdir(parents=True, exist_ok=True)
        return Pending(path, scratch.folder(PENDING, root, f"{entry.name}-"), part)
    except OSError:
        return None


def store_note(path: Path, part: str, note: dict[str, Any]) -> Path | None:
    """An entry of ``path`` that holds only ``note`` (JSON) in its manifest, as part
    ``part``: what a later run needs besides the tables (the ranks' ids). None when it
    cannot be written."""
    pending = begin(path, part)
    if pending is None:
        return None
    return _finish(path, pending.tmp, {}, {}, part, note)


def read_note(path: Path, part: str) -> dict[str, Any] | None:
    """The ``note`` :func:`store_note` stored for ``path``'s ``part``, or None."""
    try:
        manifest = _manifest(entry_dir(path, part))
    except OSError:
        return None
    note = None if manifest is None else manifest.get("note")
    return note if isinstance(note, dict) else None


def trace_frames(trace: Any) -> dict[str, Any]:
    """nsys table -> the Trace frame built from it, for the tables whose frame is stored
    (the kernels' and API calls' as the trace holds them, Trace.stored: without the columns
    it derives, few-valued ones as categoricals of int64 values, kind ``category-int64``)."""
    return {S.KERNEL: trace.stored("kernels"), S.RUNTIME: trace.stored("runtime"),
            S.MEMCPY: trace.memcpy,
            S.MEMSET: trace.memset, S.SYNC: trace.sync, S.GRAPH_TRACE: trace.graph_trace,
            S.NVTX: trace.nvtx}


def store(path: Path, src: Source, trace: Any) -> Path | None:
    """Write what ``src`` read (its ``reads``) and ``trace``'s frames as a new cache entry for
    ``path``; None if it cannot be written (then the analysis goes on without it)."""
    pending = begin(path)
    if pending is None:
        return None
    for table, tbl in src.reads.items():
        pending.write(table, tbl)
    pending.write_trace(trace)
    return pending.commit(src.tables)


def commit_forked(path: Path, src: SqliteSource) -> Path | None:
    """Commit the folder ``src``'s forked reader wrote every table the load read into
    (:func:`cgprof.io.prefetch.prefetch`) as ``path``'s entry, of Arrow files; None when there
    is none (its reader failed or was not forked: the folder is removed with ``src``)."""
    folder = src.forked_entry()
    if folder is None:
        return None
    return _finish(path, folder, src.tables, {}, suffix=ARROW)


def _finish(path: Path, tmp: Path, tables: dict[str, list[str]],
            frames: dict[str, list[list[Any]]], part: str | None = None,
            note: dict[str, Any] | None = None, suffix: str = PARQUET) -> Path | None:
    """Manifest, then rename ``tmp`` into place as ``path``'s entry (of ``part``)."""
    try:
        entry = entry_dir(path, part)
        st = path.stat()
        manifest = {"format": FORMAT_VERSION, "source": str(path.resolve()),
                    "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "tables": tables, "frames": frames,
                    **({"suffix": suffix} if suffix != PARQUET else {}),
                    **({"part": part} if part is not None else {}),
                    **({"note": note} if note is not None else {})}
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


def entries() -> list[dict[str, Any]]:
    """Every entry in the cache: key, source, size on disk (bytes), created; ``part`` for
    a rank's entry, ``columns_only`` for an entry without frames (Pending.commit_columns)."""
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
        # an entry of nsys columns only (a run within the memory cap wrote it; the next
        # whole load adds its frames), or of a small export's Arrow files (it keeps them)
        arrow = manifest.get("suffix") == ARROW
        columns_only = (manifest.get("frames") == {} and bool(manifest.get("tables"))
                        and not arrow)
        out.append({"key": entry.name, "source": manifest.get("source"),
                    "created": manifest.get("created"), "bytes": size,
                    **({"part": manifest["part"]} if "part" in manifest else {}),
                    **({"columns_only": True} if columns_only else {}),
                    **({"arrow": True} if arrow else {})})
    return out


def clear() -> int:
    """Remove every entry (and leftover temporary folders); returns how many entries went."""
    root = cache_dir()
    if not root.is_dir():
        return 0
    n = 0
    for entry in root.iterdir():
        if entry.is_dir() and (len(entry.name) == 32 or entry.name.startswith(PENDING)):
            n += not entry.name.startswith(PENDING)
            shutil.rmtree(entry, ignore_errors=True)
    return n


@contextlib.contextmanager
def temp_folder(label: str) -> Iterator[Path]:
    """A temporary folder in the cache folder (in the system's temporary folder when the
    cache is off or cannot be made), removed at the end: where a run writes a trace's
    tables apart once for its ranks or chunks to read (cgprof.io.spill.Spill, TableSpill)."""
    folder: Path | None = None
    if enabled():
        with contextlib.suppress(OSError):  # (a cache that cannot be written: the system's)
            cache_dir().mkdir(parents=True, exist_ok=True)
            folder = scratch.folder(PENDING, cache_dir(), label)
    if folder is None:
        folder = scratch.folder("cgprof-tmp-", None, label)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
