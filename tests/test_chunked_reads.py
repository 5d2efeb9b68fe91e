"""The rows a chunked analysis reads (cgprof.io.loader.load_rows, cgprof.io.spill.TableSpill): an
SQLite export spilled once to Parquet and read back a row group at a time gives the rows a
filtered scan of the file gives, in the same order and with the same dtypes and NULLs; a
read of some columns only (RowRange(columns=...)) gives those columns as the whole read
does; DuckDB spills beyond the cap into a temporary folder of its own, not the user's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import cgprof_in_process

from cgprof import schema as S
from cgprof.io import arrow as A
from cgprof.io import cache as C
from cgprof.io import loader as T
from cgprof.io.filters import RowRange
from cgprof.io.trace import DERIVED, Trace
from cgprof.metrics.summaries import kernel_summary

REPO = Path(__file__).resolve().parents[1]
#: eager (NULL graph node ids), graphed (ids in some row groups, not others), a graph-level
#: trace (graph replays), DDP (two processes, NCCL kernels)
TRACES = [REPO / "traces" / n for n in (
    "mlp_train_eager.sqlite", "mlp_train_graph.sqlite", "mlp_train_graph_graphtrace.sqlite",
    "ddp_mlp_train_graph.sqlite")]
FRAMES = ("kernels", "runtime", "memcpy", "memset", "sync", "graph_trace", "nvtx")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")


def _frames(trace: Trace) -> dict[str, pd.DataFrame]:
    return {name: (trace.stored(name) if name in DERIVED else getattr(trace, name))
            for name in FRAMES}


def _same(got: Trace, want: Trace) -> None:
    a, b = _frames(got), _frames(want)
    for name in FRAMES:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)


def _ranges(path: Path) -> list[RowRange]:
    """Whole tables, API calls by start, GPU rows by correlation id and by start, some
    tables only, and an empty range."""
    whole = T.load(path, cache=False)
    calls = whole.stored("runtime")
    start = calls["start_ns"].to_numpy()
    corr = calls["corr_id"].to_numpy()
    lo, mid, hi = (int(np.quantile(start, q)) for q in (0.2, 0.5, 0.9))
    c_lo, c_hi = int(np.quantile(corr, 0.3)), int(np.quantile(corr, 0.6))
    return [RowRange(), RowRange(tables=RowRange.ACTIVITY),
            RowRange(start=(lo, mid), corr=(c_lo, c_hi)),
            RowRange(start=(mid, hi + 1)), RowRange(gpu_start=(lo, hi)),
            RowRange(tables=[S.KERNEL, S.GRAPH_TRACE]),
            RowRange(start=(hi, lo))]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_spilled_rows_are_the_filtered_scans_rows(path: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # small row groups: the API calls of these traces are read from several
    monkeypatch.setattr(A, "SPILL_ROW_GROUP", 1000)
    spill = T.spill_tables(path, tmp_path / "spill")
    assert spill is not None
    groups = pq.ParquetFile(tmp_path / "spill" / f"{S.RUNTIME}.parquet")
    assert groups.metadata.num_row_groups > 1  # (DuckDB: at least 2048 rows a group)
    for rows in _ranges(path):
        _same(T.load_rows(path, rows, spill=spill), T.load_rows(path, rows))


def test_pieces_gathered_keep_their_values_nulls_and_types() -> None:
    """cgprof.io.arrow._gather: pieces (tables, record batches, several chunks) of integer
    columns with and without NULLs, of narrow integers and of text, as one array each."""
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("code", pa.int8()),
                        ("text", pa.string()), ("flag", pa.bool_())])
    rows = [
        {"a": [1, None, 3], "b": [1, 2, 3], "code": [0, 1, -1], "text": ["x", None, "y"],
         "flag": [True, False, True]},
        {"a": [None, None], "b": [4, 5], "code": [2, 2], "text": ["z", "z"],
         "flag": [False, False]},
        {"a": [], "b": [], "code": [], "text": [], "flag": []},
        {"a": [2**62, -7], "b": [-(2**63), 2**63 - 1], "code": [127, -128],
         "text": [None, ""], "flag": [True, True]},
    ]
    tables = [pa.table(r, schema=schema) for r in rows]
    pieces = [tables[0], tables[1].to_batches()[0] if tables[1].num_rows else tables[1],
              tables[2], pa.concat_tables([tables[3].slice(0, 1), tables[3].slice(1)])]
    got = A._gather(iter(pieces), schema, 20)
    want = pa.concat_tables(tables).combine_chunks()
    assert got.schema == schema and got.equals(want)
    for c in got.column_names:
        assert got.column(c).num_chunks == 1
    plain = got.column("b").chunk(0)  # no NULL: a numpy view of the one buffer, no mask
    assert plain.null_count == 0 and plain.to_numpy().base is not None
    empty = A._gather(iter([]), schema, 0)
    assert empty.num_rows == 0 and empty.schema == schema


@pytest.mark.parametrize("path", TRACES[:3], ids=lambda p: p.name)
@pytest.mark.parametrize("spilled", [False, True], ids=["file", "spill"])
def test_a_read_of_some_columns_gives_them_as_the_whole_read(
        path: Path, spilled: bool, tmp_path: Path) -> None:
    from cgprof.metrics.chunked import _SUMMARY

    spill = T.spill_tables(path, tmp_path / "spill") if spilled else None
    whole = T.load(path, cache=False)
    part = T.load_rows(path, RowRange(tables=[S.KERNEL, S.GRAPH_TRACE],
                                        columns={S.KERNEL: _SUMMARY}), spill=spill)
    got, want = part.stored("kernels"), whole.stored("kernels")
    kept = ["start_ns", "end_ns", "corr_id", "name", "short_name", "graph_node_id"]
    pd.testing.assert_frame_equal(got[kept], want[kept], check_exact=True)
    # the columns left out read as a table without them does: 0
    assert not got["device_id"].any() and not got["stream_id"].any()
    assert (want["device_id"] >= 0).all() and want["stream_id"].any()
    pd.testing.assert_frame_equal(kernel_summary(part), kernel_summary(whole),
                                  check_exact=True)
    assert part.meta.graph_trace_mode == whole.meta.graph_trace_mode
    assert part.stored("runtime").empty and len(part.graph_trace) == len(whole.graph_trace)


def test_duckdb_spills_into_its_own_temporary_folder(tmp_path: Path) -> None:
    """A sort beyond DuckDB's memory limit writes into cgprof's temporary folder, removed
    when the source closes; nothing is written in the current folder (DuckDB's default for
    a database in memory is ``.tmp`` there), nor on stdout (DuckDB's progress bar, drawn
    for a query past 2 s)."""
    work = tmp_path / "cwd"
    work.mkdir()
    code = """
import os, sys, tempfile
from pathlib import Path
os.environ["CGPROF_MEMORY_LIMIT"] = "64MB"
from cgprof.io.sqlite import open_sqlite_early
src = open_sqlite_early(Path(sys.argv[1]))
con = src._duckdb()
assert con is not None
temp = con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
assert Path(temp) == src.duck_temp and Path(temp).parent == Path(tempfile.gettempdir()), temp
other = open_sqlite_early(Path(sys.argv[1]))
other._duckdb()
assert other.duck_temp != src.duck_temp  # each connection its own: one closing spares others
con.execute("SET memory_limit = '100MB'")  # a sort of ~0.3 GB: it must spill
con.execute("SET threads = 2")  # (on 16 cores DuckDB's 8 threads' buffers alone passed it)
n = con.execute("SELECT count(*) FROM (SELECT i, md5(i::VARCHAR) AS h FROM range(4000000) "
                "t(i) ORDER BY h)").fetchone()[0]
spilled = src.duck_temp.is_dir()
src.close()
other.close()
print(n, spilled, src.duck_temp.exists())
"""
    pytest.importorskip("duckdb")  # (without it cgprof reads SQLite through sqlite3)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, "-c", code, str(TRACES[0])], cwd=work, text=True,
                         capture_output=True, timeout=240, env={**os.environ, "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4000000", "True", "False"], out.stdout[:300]
    assert list(work.iterdir()) == []


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``cgprof analyze ARGS --quiet`` with ``env`` (in this process)."""
    return cgprof_in_process(["analyze", *args, "--quiet"], env)


def _capped(*args: str, env: dict[str, str], chunk_steps: int) -> subprocess.CompletedProcess:
    """``cgprof analyze ARGS --memory-limit 100MB --quiet`` run here as :func:`_cli` runs it
    with ``env``, under settings with ``chunk_steps`` steps per chunk."""
    return cgprof_in_process(["analyze", *args, "--memory-limit", "100MB", "--quiet"], env,
                             chunk_steps=chunk_steps)


def _entry(cache: Path) -> tuple[dict, Path]:
    """The one entry of ``cache``: its manifest and folder."""
    entries = [p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(entries) == 1, entries
    return json.loads((entries[0] / "manifest.json").read_text()), entries[0]


def test_a_capped_first_run_leaves_a_columnar_copy_a_whole_run_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first run read a chunk at a time writes the trace's nsys columns as its cache
    entry (no frames: it never held them); later runs read it instead of SQLite, and the
    first whole run stores the frames it built in it. Every run prints the same JSON."""
    path = REPO / "traces" / "mlp_train_graph.sqlite"
    trace = str(path)
    cache = tmp_path / "cache"
    env = {"CGPROF_CACHE": str(cache), "CGPROF_NO_CACHE": "0"}
    want = _cli(trace, "--json", "-", "--no-cache", env=env)
    assert want.returncode == 0, want.stderr

    def capped() -> str:  # (3 steps a chunk)
        r = _capped(trace, "--json", "-", env=env, chunk_steps=3)
        assert r.returncode == 0 and "at a time (" in r.stderr, r.stderr
        return r.stdout

    assert capped() == want.stdout
    manifest, entry = _entry(cache)
    assert manifest["frames"] == {} and manifest["source"] == str(path.resolve())
    assert (entry / f"{S.KERNEL}.parquet").is_file()
    assert not list(cache.glob(".tmp-*"))  # the spill became the entry, nothing left over
    assert capped() == want.stdout  # read from the entry
    assert _entry(cache)[0] == manifest
    info = cgprof_in_process(["cache", "info", "--json"], env)
    assert [e.get("columns_only") for e in json.loads(info.stdout)["entries"]] == [True]
    whole = _cli(trace, "--json", "-", env=env)
    assert whole.returncode == 0 and whole.stdout == want.stdout, whole.stderr
    after, entry = _entry(cache)
    assert set(after["frames"]) >= set(C.FRAME_TABLES)
    assert after["tables"] == manifest["tables"]
    assert not (entry / f"{S.KERNEL}.parquet").exists()  # its frame replaces it
    assert (entry / f"{S.NVTX}.parquet").is_file()
    assert not list(cache.glob(".tmp-*"))
    for again in (_cli(trace, "--json", "-", env=env).stdout, capped()):
        assert again == want.stdout
    assert _entry(cache)[0]["frames"] == after["frames"]
    info = cgprof_in_process(["cache", "info", "--json"], env)
    assert "columns_only" not in json.loads(info.stdout)["entries"][0]
    # the library's load of such an entry: the frames a load from SQLite builds
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "api"))
    monkeypatch.setenv("CGPROF_NO_CACHE", "0")
    r = _capped(trace, "--json", "-", env={**env, "CGPROF_CACHE": str(tmp_path / "api")},
                chunk_steps=3)
    assert r.returncode == 0 and _entry(tmp_path / "api")[0]["frames"] == {}
    _same(T.load(path), T.load(path, cache=False))
    assert set(_entry(tmp_path / "api")[0]["frames"]) >= set(C.FRAME_TABLES)
    _same(T.load(path), T.load(path, cache=False))


def test_a_capped_run_that_fails_or_reads_whole_leaves_no_columns_entry(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {"CGPROF_CACHE": str(cache), "CGPROF_NO_CACHE": "0"}
    bad = _capped(str(REPO / "traces" / "mlp_train_graph.sqlite"), "--json", "-", "--skip",
                  "100000", env=env, chunk_steps=3)
    assert bad.returncode != 0 and bad.stdout == ""
    assert [ln for ln in bad.stderr.splitlines() if ln.strip()][-1].startswith("Error")
    assert not cache.exists() or not [p for p in cache.iterdir()]  # no entry, no temporary
    # steps that overlap (torch.compile's scored choice): read whole, its entry has frames
    whole = _capped(str(REPO / "traces" / "compile_train_step.sqlite"), "--json", "-",
                    env=env, chunk_steps=3)
    assert whole.returncode == 0 and "at a time (" not in whole.stderr, whole.stderr
    assert set(_entry(cache)[0]["frames"]) >= set(C.FRAME_TABLES)
    assert not list(cache.glob(".tmp-*"))


def test_a_capped_run_with_a_cache_it_cannot_write_still_reads_in_chunks(tmp_path: Path) -> None:
    """A cache folder that cannot be made (its path is a file): the spill goes to the
    system's temporary folder, the analysis is the same, and the file is left as it was."""
    trace = str(REPO / "traces" / "mlp_train_eager.sqlite")
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"x")
    env = {"CGPROF_CACHE": str(blocker), "CGPROF_NO_CACHE": "0"}
    want = _cli(trace, "--json", "-", "--no-cache", env=env)
    got = _capped(trace, "--json", "-", env=env, chunk_steps=4)
    assert got.returncode == 0 and "at a time (" in got.stderr, got.stderr
    assert got.stdout == want.stdout
    assert blocker.read_bytes() == b"x"
