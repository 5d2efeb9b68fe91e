"""A small SQLite export is read ahead by a forked process (cgprof.io.forked): the same
Arrow tables, the same analysis, the same errors as the reads in threads, and nothing left
behind. The fork happens only in a process of one thread (the CLI at its start), so each
check runs in a process of its own, as the CLI does."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading

import pytest
from conftest import REPO

from cgprof.io.forked import fork_reads_ok
from cgprof.io.sqlite import open_sqlite_early

TRACES = REPO / "traces"
NAMES = ["mlp_train_eager", "mlp_train_graph", "mlp_train_graph_graphtrace",
         "ddp_mlp_train_eager", "compile_train_step", "resnet18_train_eager"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the forked reader runs on Linux only")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("CGPROF_READER", None)
    env.update(extra)
    return env


_SAME_TABLES = r"""
import json, sys
from pathlib import Path
from cgprof.io.sqlite import open_sqlite_early
from cgprof.settings import Settings, using
path = Path(sys.argv[1])
forked = open_sqlite_early(path)
forked.read_ahead_early()  # first: a process of one thread
assert forked._forked is not None, "not forked"
jobs = {t: cols for t, (cols, _) in forked._ahead.items()}
with using(Settings.from_env().replace(reader="thread")):
    plain = open_sqlite_early(path)
    same = {}
    for table, cols in jobs.items():
        a, b = forked.read(table, cols), plain.read(table, cols)
        same[table] = [a.num_rows, a.schema.equals(b.schema, check_metadata=True), a.equals(b),
                       [c.num_chunks for c in a.columns] == [c.num_chunks for c in b.columns]]
    folder = forked._forked.folder
    forked.close()
    plain.close()
print(json.dumps({"tables": same, "folder_left": folder.exists()}))
"""


@pytest.mark.parametrize(("name", "threads"), [(n, None) for n in NAMES] + [
    # from SORTED_SCAN_THREADS threads both copy the tables sorted by rowid
    # (SqliteSource._select)
    ("resnet18_train_eager", "4"), ("ddp_mlp_train_eager", "8")])
def test_forked_reads_are_the_tables_the_threads_read(name, threads):
    """The forked child copies each table into DuckDB and turns the copy into Arrow
    (ForkedReads._child); the threads scan the file into Arrow: the same tables."""
    env = _env(**({"CGPROF_THREADS": threads} if threads else {}))
    res = subprocess.run([sys.executable, "-c", _SAME_TABLES, str(TRACES / f"{name}.sqlite")],
                         capture_output=True, text=True, env=env, timeout=240)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    tables = got["tables"]
    # the activity tables, the strings and the small tables the load reads
    assert {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds",
            "TARGET_INFO_GPU"} <= set(tables)
    for table, (_rows, schema, equal, chunks) in tables.items():
        assert schema and equal and chunks, table
    assert tables["CUPTI_ACTIVITY_KIND_KERNEL"][0] > 0
    assert not got["folder_left"]


@pytest.mark.parametrize("name", ["mlp_train_graph", "ddp_mlp_train_eager",
                                  "compile_train_step"])
def test_the_cli_gives_the_same_bytes_either_way(tmp_path, name):
    outs = []
    temp = tmp_path / "tmp"
    temp.mkdir()
    for mode in ("fork", "thread"):
        (tmp_path / mode).mkdir()
        out = tmp_path / mode / "a.json"
        env = _env(CGPROF_CACHE=str(tmp_path / f"cache-{mode}"), TMPDIR=str(temp),
                   **({"CGPROF_READER": "thread"} if mode == "thread" else {}))
        res = subprocess.run([sys.executable, "-m", "cgprof", "analyze",
                              str(TRACES / f"{name}.sqlite"), "--json", "a.json"],
                             capture_output=True, text=True, env=env, timeout=240,
                             cwd=tmp_path / mode)
        assert res.returncode == 0, res.stderr
        outs.append((out.read_bytes(), res.stdout))
    assert outs[0] == outs[1]
    assert list(temp.iterdir()) == []  # the reader's folder removed


def test_a_reader_not_waited_for_is_stopped_and_leaves_nothing():
    code = r"""
import os, sys
from pathlib import Path
from cgprof.io.sqlite import open_sqlite_early
src = open_sqlite_early(Path(sys.argv[1]))
src.read_ahead_early()
reads = src._forked
src.close()  # before any table is taken: the child is stopped, not waited for
try:
    os.waitpid(reads.pid, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True
print(reaped, reads.folder.exists(), reads.status is not None)
"""
    res = subprocess.run([sys.executable, "-c", code, str(TRACES / "resnet18_train_eager.sqlite")],
                         capture_output=True, text=True, env=_env(), timeout=240)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False", "True"]


def _damaged_copy(tmp_path):
    """A copy of a shipped export with text in one kernel's ``start`` (a cell no nsys writes)."""
    p = tmp_path / "t.sqlite"
    shutil.copyfile(TRACES / "mlp_train_graph.sqlite", p)
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE rowid = 7")
    con.commit()
    con.close()
    return p


def test_a_damaged_file_reads_again_in_the_parent_and_says_so(tmp_path):
    """The child fails on the bad cell; the parent reads the table itself and names it, the
    line the reads in threads give."""
    p = _damaged_copy(tmp_path)
    got = []
    for extra in ({}, {"CGPROF_READER": "thread"}):
        res = subprocess.run([sys.executable, "-m", "cgprof", "analyze", str(p), "--json", "-"],
                             capture_output=True, text=True, timeout=240,
                             env=_env(CGPROF_NO_CACHE="1", **extra))
        got.append((res.returncode, res.stdout, res.stderr))
    assert got[0] == got[1]
    rc, out, err = got[0]
    assert rc == 1 and out == ""
    assert err == (f"Error: {p}: CUPTI_ACTIVITY_KIND_KERNEL.start holds 'x' where nsys writes "
                   "an integer; is the file damaged or cut down? Re-export it with "
                   "`nsys export --type sqlite`\n")


def test_when_it_forks():
    code = r"""
import sys
from pathlib import Path
from cgprof.io import forked
from cgprof.io.sqlite import open_sqlite_early
from cgprof.settings import Settings, using
path = Path(sys.argv[1])
def ok():
    src = open_sqlite_early(path)
    try:
        return forked.fork_reads_ok(src)
    finally:
        src.close()
print(ok())
with using(Settings.from_env().replace(reader="thread")): print(ok())
with using(Settings.from_env().replace(engine="sqlite3")): print(ok())
forked.FORK_READ_MAX_BYTES = 1000; print(ok())
"""
    res = subprocess.run([sys.executable, "-c", code, str(TRACES / "mlp_train_eager.sqlite")],
                         capture_output=True, text=True, env=_env(), timeout=240)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False", "False", "False"]


def test_a_process_with_threads_does_not_fork():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        src = open_sqlite_early(TRACES / "mlp_train_eager.sqlite")
        assert src is not None
        assert not fork_reads_ok(src)
        src.read_ahead_early()
        assert src._forked is None and src._ahead  # read ahead in threads instead
        src.close()
    finally:
        stop.set()
        t.join()


def _sha(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _blank_the_middle(path) -> None:
    """Zero the export's pages between its first and last 64 KiB, keeping its size and mtime:
    its cache key (cgprof.io.cache.key) stays, and a read of its tables would fail."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(1 << 16)
        fh.write(b"\0" * (st.st_size - 2 * (1 << 16)))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("name", ["mlp_train_graph", "ddp_mlp_train_eager",
                                  "resnet18_train_eager"])
def test_a_first_run_keeps_the_forked_readers_files_as_the_cache_entry(tmp_path, name):
    """With the cache on, the forked reader writes its tables into the entry's temporary
    folder and the first run commits it (Arrow files, no frames): no writer thread. The next
    run reads only that entry, and every run gives the bytes a run without the cache gives."""
    trace = tmp_path / f"{name}.sqlite"
    shutil.copyfile(TRACES / f"{name}.sqlite", trace)
    digest = _sha(trace)
    cache = tmp_path / "cache"

    def run(**extra: str) -> tuple[bytes, str]:
        res = subprocess.run([sys.executable, "-m", "cgprof", "analyze", str(trace),
                              "--json", "a.json", "--force"], capture_output=True, text=True,
                             timeout=240, cwd=tmp_path,
                             env=_env(CGPROF_CACHE=str(cache), **extra))
        assert res.returncode == 0, res.stderr
        return (tmp_path / "a.json").read_bytes(), res.stdout

    plain = run(CGPROF_NO_CACHE="1")
    assert not cache.exists()
    first = run()
    assert _sha(trace) == digest  # the input only read
    entries = [p for p in cache.iterdir()]
    assert len(entries) == 1 and not entries[0].name.startswith(".tmp-")
    manifest = json.loads((entries[0] / "manifest.json").read_text())
    assert manifest["suffix"] == ".arrow" and manifest["frames"] == {}
    src = open_sqlite_early(trace)
    try:
        wanted = {f"{table}.arrow" for table, _ in src.load_reads(info=True)}
    finally:
        src.close()
    assert {p.name for p in entries[0].iterdir()} == wanted | {"manifest.json"}
    _blank_the_middle(trace)  # the same key; its tables unreadable
    second = run()
    assert first == plain and second == plain
    assert [p.name for p in cache.iterdir()] == [entries[0].name]
    assert sorted(p.name for p in entries[0].iterdir()) == sorted(wanted | {"manifest.json"})
    info = subprocess.run([sys.executable, "-m", "cgprof", "cache", "info", "--json"],
                          capture_output=True, text=True, timeout=240,
                          env=_env(CGPROF_CACHE=str(cache)))
    rows = json.loads(info.stdout)["entries"]
    assert [(r.get("arrow"), r.get("columns_only")) for r in rows] == [(True, None)]


def test_a_failed_forked_read_leaves_no_entry_and_no_temporary_folder(tmp_path):
    p = _damaged_copy(tmp_path)
    cache = tmp_path / "cache"
    res = subprocess.run([sys.executable, "-m", "cgprof", "analyze", str(p), "--json", "-"],
                         capture_output=True, text=True, timeout=240,
                         env=_env(CGPROF_CACHE=str(cache)))
    assert res.returncode == 1 and res.stdout == ""
    assert "CUPTI_ACTIVITY_KIND_KERNEL.start holds 'x'" in res.stderr
    assert list(cache.iterdir()) == []  # made for the entry, left empty


def test_a_reader_writing_an_entry_that_no_load_takes_leaves_nothing(tmp_path):
    """A trace prefetched (its entry being written) and then not loaded: the child stopped,
    the temporary folder removed, no entry."""
    code = r"""
import sys
from pathlib import Path
from cgprof.io import cache as C
from cgprof.io.early import take_early
from cgprof.io.prefetch import prefetch
path = Path(sys.argv[1])
prefetch(path)
src = take_early(path)
assert src._forked is not None and src._forked.into is not None, "no entry being written"
folder = src._forked.folder
src.close()
print(folder.exists(), sorted(p.name for p in C.cache_dir().iterdir()))
"""
    cache = tmp_path / "cache"
    res = subprocess.run([sys.executable, "-c", code, str(TRACES / "mlp_train_eager.sqlite")],
                         capture_output=True, text=True, timeout=240,
                         env=_env(CGPROF_CACHE=str(cache)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "[]"]


def test_check_reads_a_small_export_through_the_forked_reader(tmp_path):
    """`cgprof check` prefetches its trace as `analyze` does: the forked reader's files become
    the cache entry, its own process imports no duckdb, and the figures are those of a run
    without the cache."""
    trace = TRACES / "resnet18_train_eager.sqlite"
    cache, temp = tmp_path / "cache", tmp_path / "tmp"
    temp.mkdir()
    outs = []
    for extra in ({"CGPROF_NO_CACHE": "1"}, {}, {}):
        res = subprocess.run([sys.executable, "-X", "importtime", "-m", "cgprof", "check",
                              str(trace), "--max", "gpu_idle_pct=99", "--json", "c.json",
                              "--force"], capture_output=True, text=True, timeout=240,
                             cwd=tmp_path,
                             env=_env(CGPROF_CACHE=str(cache), TMPDIR=str(temp), **extra))
        assert res.returncode == 0, res.stderr[-2000:]
        assert not any(line.rstrip().endswith("| duckdb") for line in res.stderr.splitlines())
        outs.append((tmp_path / "c.json").read_bytes())
    assert outs[0] == outs[1] == outs[2]
    entries = list(cache.iterdir())
    assert len(entries) == 1
    assert json.loads((entries[0] / "manifest.json").read_text())["suffix"] == ".arrow"
    assert list(temp.iterdir()) == []
