"""The columnar engine, its Parquet cache and the inputs it reads (SQLite, parquetdir, arrowdir,
.nsys-rep): same figures from every path, never stale, never writing into the input."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import REPO

import cgprof
from cgprof import schema as S_
from cgprof import settings
from cgprof.cli import main
from cgprof.io import cache, framestore
from cgprof.io import early as E
from cgprof.io import frames as F
from cgprof.io import loader as T
from cgprof.io.duck import SORTED_SCAN_THREADS
from cgprof.io.prefetch import prefetch
from cgprof.io.sources import Source, is_trace_dir
from cgprof.io.sqlite import SqliteSource
from cgprof.io.threads import threads
from cgprof.io.trace import Trace
from cgprof.report import json_report

TRACES = REPO / "traces"
COLUMNAR = TRACES / "columnar"
FAKES = Path(__file__).parent / "fake_nsys"
TABLES = ("kernels", "runtime", "memcpy", "memset", "sync", "graph_trace", "nvtx", "gpus",
          "threads")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("CGPROF_CACHE", str(d))
    monkeypatch.delenv("CGPROF_NO_CACHE", raising=False)
    return d


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _same_trace(a: Trace, b: Trace) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert (a.meta.nsys_version, a.meta.schema_version, a.meta.graph_trace_mode,
            a.meta.graph_trace_mode_source) == (
        b.meta.nsys_version, b.meta.schema_version, b.meta.graph_trace_mode,
        b.meta.graph_trace_mode_source)


def _no_sqlite(monkeypatch):
    """Make any attempt to open an SQLite source fail loudly (proves the cache was used)."""

    def refuse(path):
        raise AssertionError(f"SQLite opened: {path}")

    monkeypatch.setattr(T, "open_source", refuse)


def test_first_analysis_writes_the_cache_and_the_second_reads_only_it(cache_dir, tmp_path,
                                                                    monkeypatch):
    src = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_train_graph.sqlite", src)
    before = _md5(src)
    plain = T.load(src, cache=False)
    assert not cache_dir.exists()
    first = T.load(src)
    entries = cache.entries()
    assert len(entries) == 1 and entries[0]["source"] == str(src.resolve())
    entry = cache_dir / entries[0]["key"]
    assert (entry / "CUPTI_ACTIVITY_KIND_KERNEL.frame.parquet").is_file()
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]
    _no_sqlite(monkeypatch)
    second = T.load(src)
    _same_trace(plain, first)
    _same_trace(plain, second)
    assert second.meta.tables == plain.meta.tables
    assert second.path == src
    assert _md5(src) == before


@pytest.mark.parametrize("name", sorted(p.name for p in TRACES.glob("*.sqlite")))
def test_every_shipped_trace_analyses_the_same_from_the_cache(name, cache_dir, monkeypatch):
    path = TRACES / name
    plain = json_report.render([cgprof.analyze(T.load(path, cache=False))])
    cgprof.analyze(path)  # writes the entry
    _no_sqlite(monkeypatch)
    assert json_report.render([cgprof.analyze(path)]) == plain


def test_a_changed_trace_is_never_served_stale(cache_dir, tmp_path):
    p = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_infer_eager.sqlite", p)
    eager = T.load(p)
    # Another trace under the same name.
    shutil.copyfile(TRACES / "mlp_infer_graph.sqlite", p)
    got = T.load(p)
    _same_trace(got, T.load(TRACES / "mlp_infer_graph.sqlite", cache=False))
    assert len(got.kernels) != len(eager.kernels)
    assert len(cache.entries()) == 2


def test_same_size_and_mtime_but_other_last_page_is_a_new_key(tmp_path):
    p = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_infer_eager.sqlite", p)
    st = p.stat()
    k1 = cache.key(p)
    data = bytearray(p.read_bytes())
    data[-10] ^= 0xFF
    p.write_bytes(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    assert cache.key(p) != k1
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert len({k1, cache.key(p)}) == 2


def test_a_corrupt_entry_is_discarded_not_fatal(cache_dir, tmp_path):
    p = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_infer_graph.sqlite", p)
    plain = T.load(p, cache=False)
    T.load(p)
    entry = cache_dir / cache.entries()[0]["key"]
    (entry / "CUPTI_ACTIVITY_KIND_KERNEL.frame.parquet").write_bytes(b"PAR1 not really")
    _same_trace(T.load(p), plain)  # re-read from SQLite, entry rewritten
    _same_trace(T.load(p), plain)  # and the rewritten entry is good
    (entry / cache.MANIFEST).write_text("{not json")
    _same_trace(T.load(p), plain)


def test_no_cache_writes_nothing(cache_dir, tmp_path):
    res = CliRunner().invoke(main, ["analyze", str(TRACES / "mlp_infer_eager.sqlite"),
                                    "--no-cache", "--json", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["trace"]["kernels"] > 0
    assert not cache_dir.exists()
    assert os.environ.get("CGPROF_NO_CACHE") is None  # the setting lasted one command


def test_cache_info_and_clear(cache_dir):
    runner = CliRunner()
    res = runner.invoke(main, ["cache", "info", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["entries"] == []
    for name in ("mlp_infer_eager.sqlite", "mlp_infer_graph.sqlite"):
        assert runner.invoke(main, ["analyze", str(TRACES / name), "-q"]).exit_code == 0
    info = json.loads(runner.invoke(main, ["cache", "info", "--json"]).output)
    assert info["path"] == str(cache_dir)
    assert sorted(Path(e["source"]).name for e in info["entries"]) == [
        "mlp_infer_eager.sqlite", "mlp_infer_graph.sqlite"]
    assert info["bytes"] == sum(e["bytes"] for e in info["entries"]) > 0
    text = runner.invoke(main, ["cache", "info"]).output
    assert text.startswith(f"cache: {cache_dir}\n2 trace(s), ")
    res = runner.invoke(main, ["cache", "clear"])
    assert res.output == f"removed 2 cached trace(s) from {cache_dir}\n"
    assert cache.entries() == []


def test_memory_limit_is_checked(cache_dir):
    res = CliRunner().invoke(main, ["analyze", str(TRACES / "mlp_infer_eager.sqlite"),
                                    "--memory-limit", "lots"])
    assert res.exit_code == 2
    assert "memory limit 'lots': expected a size such as 1GB or 512MiB" in res.output
    assert settings.parse_size("1GB") == 10**9 and settings.parse_size("512MiB") == 512 * 2**20


def test_a_run_above_the_memory_limit_says_so_on_stderr(cache_dir, tmp_path):
    """The cap does not bound all a run holds: a run that held more says so in one stderr line,
    and stdout stays pure JSON; a run under its cap, or with none set, says nothing."""
    path = str(TRACES / "mlp_infer_eager.sqlite")
    env = {**os.environ, "CGPROF_CACHE": str(cache_dir)}
    env.pop("CGPROF_MEMORY_LIMIT", None)

    def run(*extra: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cgprof", "analyze", path, "--json", "-",
                               *extra], capture_output=True, text=True, timeout=120,
                              env={**env, **more})

    over = run("--memory-limit", "10MB")
    assert over.returncode == 0, over.stderr
    json.loads(over.stdout)
    note = [line for line in over.stderr.splitlines() if "held" in line]
    assert len(note) == 1 and "above --memory-limit 10MB" in note[0]
    assert "caps the SQLite read" in note[0]
    # (a one-process trace over the cap is read a chunk of steps at a time: said once too)
    chunks = [line for line in over.stderr.splitlines() if "at a time (" in line]
    assert len(chunks) == 1 and "(1 chunk)" in chunks[0]
    by_env = run(CGPROF_MEMORY_LIMIT="10MB")
    assert "above CGPROF_MEMORY_LIMIT 10MB" in by_env.stderr
    for quiet in (run("--memory-limit", "100GB"), run()):
        assert quiet.returncode == 0 and "note:" not in quiet.stderr
        json.loads(quiet.stdout)


@pytest.mark.parametrize("value", ["0", "x"])
def test_bad_thread_count_is_one_line(value, monkeypatch):
    monkeypatch.setenv("CGPROF_THREADS", value)
    with pytest.raises(cgprof.errors.TraceError, match="CGPROF_THREADS"):
        threads()


@pytest.mark.parametrize("name", ["resnet18_train_eager.sqlite", "mlp_train_graph.sqlite",
                                  "mlp_train_graph_graphtrace.sqlite", "compile_train_step.sqlite"])
def test_the_thread_count_gives_the_same_figures(name, cache_dir, monkeypatch):
    """1 thread (a plain scan), 4 (SQLite read ORDER BY rowid, turned into Arrow by every
    thread): the same tables, each column one chunk, and the same analysis."""
    path = TRACES / name
    docs, tables = [], []
    for n in ("1", str(SORTED_SCAN_THREADS)):
        monkeypatch.setenv("CGPROF_THREADS", n)
        assert threads() == int(n)
        src = T.open_source(path)
        try:
            tbl = src.read(S_.KERNEL, ["start", "end", "correlationId", "graphNodeId"])
        finally:
            src.close()
        assert all(c.num_chunks == 1 for c in tbl.columns)
        tables.append(tbl)
        docs.append(json_report.render([cgprof.analyze(T.load(path, cache=False))]))
    assert tables[0].equals(tables[1])
    assert docs[0] == docs[1]


def test_sqlite3_fallback_reads_the_same(monkeypatch):
    path = TRACES / "mlp_train_graph_graphtrace.sqlite"
    duck = T.load(path, cache=False)
    monkeypatch.setenv("CGPROF_ENGINE", "sqlite3")
    _same_trace(T.load(path, cache=False), duck)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cgprof", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)


@pytest.mark.parametrize("blocked", ["duckdb", "duckdb_extension_sqlite_scanner"])
def test_missing_engine_is_said_once(tmp_path, blocked):
    """An install without DuckDB (or its SQLite scanner) still analyses SQLite, through
    sqlite3, with the same JSON, and says once on stderr why it is slower; a run with the
    engine, or one that asks for sqlite3 (CGPROF_ENGINE), says nothing."""
    shim = tmp_path / "shim" / blocked
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(f"raise ImportError('{blocked} blocked by the test')\n")
    path = TRACES / "mlp_train_eager.sqlite"
    args = ["analyze", str(path), "--json", "-", "--no-cache"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    env.pop("CGPROF_ENGINE", None)
    plain = _cli(args, env)
    missing = _cli(args, {**env, "PYTHONPATH": f"{tmp_path / 'shim'}{os.pathsep}"
                                              f"{env['PYTHONPATH']}"})
    asked = _cli(args, {**env, "CGPROF_ENGINE": "sqlite3"})
    for run in (plain, missing, asked):
        assert run.returncode == 0, run.stderr
    assert json.loads(missing.stdout) == json.loads(plain.stdout)
    assert missing.stdout == asked.stdout
    notes = [line for line in missing.stderr.splitlines() if "through sqlite3" in line]
    assert len(notes) == 1, missing.stderr
    assert f"{blocked} blocked by the test" in notes[0]
    assert notes[0].startswith("cgprof: note: ")
    assert "through sqlite3" not in plain.stderr + asked.stderr


# --------------------------------------------------------------------------------------
# nsys's own columnar exports


@pytest.mark.parametrize("kind", ["parquetdir", "arrowdir"])
def test_nsys_columnar_export_equals_its_sqlite(kind, cache_dir):
    dirs = sorted(COLUMNAR.glob(f"*.{kind}"))
    assert dirs
    for d in dirs:
        assert is_trace_dir(d)
        sqlite = COLUMNAR / f"{d.stem}.sqlite"
        a, b = T.load(d), T.load(sqlite, cache=False)
        _same_trace(a, b)
        doc_a = json.loads(json_report.render([cgprof.analyze(a)]).replace(str(d), "X"))
        doc_b = json.loads(json_report.render([cgprof.analyze(b)]).replace(str(sqlite), "X"))
        # nsys's columnar export holds DIAGNOSTIC_EVENT (the recording's span); the SQLite
        # beside it was exported with the tables cgprof read before it read that one
        assert doc_a["completeness"].pop("recording") is not None
        assert doc_b["completeness"].pop("recording") is None
        assert doc_a == doc_b
    assert not cache_dir.exists()  # nsys's columnar exports are read as they are


def test_trace_dir_detection(tmp_path):
    plain = tmp_path / "runs"
    plain.mkdir()
    assert not is_trace_dir(plain)
    assert is_trace_dir(COLUMNAR / "mlp_infer_eager.parquetdir")
    assert not is_trace_dir(TRACES / "mlp_infer_eager.sqlite")
    # A folder that holds nsys's tables is one trace whatever its name.
    renamed = tmp_path / "export"
    shutil.copytree(COLUMNAR / "mlp_infer_graph.parquetdir", renamed)
    assert is_trace_dir(renamed)
    assert len(T.load(renamed).kernels) == len(T.load(COLUMNAR / "mlp_infer_graph.sqlite",
                                                       cache=False).kernels)
    empty = tmp_path / "x.parquetdir"
    empty.mkdir()
    res = CliRunner().invoke(main, ["analyze", str(empty)])
    assert res.exit_code == 1
    assert res.output == f"Error: {empty}: holds no nsys tables (parquetdir export expected)\n"


@pytest.mark.parametrize(("table", "update"), [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "streamId = 'seven' WHERE rowid = 3"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId = 'x' WHERE rowid = 5"),  # read ahead too
])
def test_text_in_a_number_column_is_one_line(table, update, tmp_path):
    src = tmp_path / "t.sqlite"
    shutil.copyfile(TRACES / "mlp_infer_eager.sqlite", src)
    import sqlite3

    con = sqlite3.connect(src)
    con.execute(f"UPDATE {table} SET {update}")
    con.commit()
    con.close()
    for extra in ([], ["--no-cache"]):
        res = CliRunner().invoke(main, ["analyze", str(src), *extra])
        assert res.exit_code == 1
        assert res.output.count("\n") == 1 and "Traceback" not in res.output
        assert res.output.startswith(f"Error: {src}: ")
        assert table in res.output


# --------------------------------------------------------------------------------------
# .nsys-rep through the nsys cgprof finds


def _install_fake_nsys(folder: Path) -> Path:
    folder.mkdir(parents=True)
    nsys = folder / "nsys"
    nsys.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_nsys.py"}" "$@"\n')
    nsys.chmod(0o755)
    return nsys


def test_nsys_rep_is_exported_with_the_nsys_found(tmp_path, cache_dir, monkeypatch):
    nsys = _install_fake_nsys(tmp_path / "bin")
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("CGPROF_NSYS", str(nsys))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    rep = tmp_path / "run.nsys-rep"
    rep.write_text("a report")
    before = _md5(rep)
    res = CliRunner().invoke(main, ["analyze", str(rep)])
    # The fake export holds a StringIds table and no events: read, then refused as empty.
    assert res.exit_code == 1
    assert res.output == (f"Error: {rep}: contains no CUDA or NVTX events; was it recorded "
                          f"with `nsys profile --trace=cuda,nvtx` (or `cgprof record`)?\n")
    calls = [json.loads(line)["argv"] for line in log.read_text().splitlines()]
    assert len(calls) == 1 and calls[0][0] == "export" and calls[0][-1] == str(rep)
    assert "--type=sqlite" in calls[0]
    assert _md5(rep) == before
    assert not list(tmp_path.glob("*.sqlite"))  # the export lived in a temporary folder


def test_nsys_names_the_nsys_that_exports_a_report(tmp_path, monkeypatch):
    """--nsys wins over CGPROF_NSYS; a --nsys that is no nsys is one line naming it."""
    fake = _install_fake_nsys(tmp_path / "bin")
    monkeypatch.setenv("CGPROF_NSYS", str(tmp_path / "no-nsys-here"))
    monkeypatch.setenv("FAKE_NSYS_EXPORT", "fail")
    rep = tmp_path / "run.nsys-rep"
    rep.write_text("a report")
    res = CliRunner().invoke(main, ["analyze", str(rep), "--nsys", str(fake)])
    assert res.exit_code == 1
    assert f"failed (Error: export failed: simulated crash) with {fake} " in res.output
    res = CliRunner().invoke(main, ["analyze", str(rep), "--nsys", str(tmp_path)])
    assert res.exit_code == 1
    assert res.output == f"Error: {rep}: --nsys {tmp_path}: no nsys executable there\n"
    assert rep.read_text() == "a report"


def test_nsys_rep_export_failure_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CGPROF_NSYS", str(_install_fake_nsys(tmp_path / "bin")))
    monkeypatch.setenv("FAKE_NSYS_EXPORT", "fail")
    rep = tmp_path / "run.nsys-rep"
    rep.write_text("a report")
    res = CliRunner().invoke(main, ["analyze", str(rep)])
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {rep}: `nsys export --type sqlite` failed (Error: export failed: simulated "
        f"crash) with {tmp_path / 'bin' / 'nsys'} (NVIDIA Nsight Systems version 2099.1.1 "
        f"(fake)): export it with the nsys that recorded it (`nsys export --type sqlite -o "
        f"{tmp_path / 'run.sqlite'} {rep}`) or point cgprof at that nsys with "
        f"--nsys PATH or CGPROF_NSYS=PATH\n")


#: What an nsys older than the report says when it cannot read it.
TOO_NEW = 'Can\'t parse message of type "QuadDAnalysis.Data.Session"'


def _export_newer(tmp_path: Path, report: bytes) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m cgprof analyze run.nsys-rep`` (a real subprocess) with a fake nsys whose
    export fails as an older nsys does on a newer report; the report holds ``report``."""
    nsys = _install_fake_nsys(tmp_path / "bin")
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(report)
    env = {**os.environ, "CGPROF_NSYS": str(nsys), "FAKE_NSYS_EXPORT": "newer",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "cgprof", "analyze", str(rep)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    return proc, rep


def _failed_line(rep: Path, nsys: Path) -> str:
    return (f"Error: {rep}: `nsys export --type sqlite` failed ({TOO_NEW}) with {nsys} "
            f"(NVIDIA Nsight Systems version 2099.1.1 (fake))")


#: The start of a report that names its nsys (a made-up container: binary around text).
def _noise(n: int) -> bytes:
    """``n`` fixed pseudo-random bytes with no "20" in them (so no year-like number)."""
    import random

    return random.Random(37).randbytes(n).replace(b"20", b"xx")


NAMED = (b"\x00\x01QDSTRM\x00\x8a\x02" + _noise(3000)
         + b"\x12\x1cNVIDIA Nsight Systems version 2099.3.1.77-253236389321v0\x1a"
         + bytes(range(256)) * 8)


def test_a_report_from_a_newer_nsys_fails_in_one_line_naming_both_versions(tmp_path):
    proc, rep = _export_newer(tmp_path, NAMED)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{_failed_line(rep, tmp_path / 'bin' / 'nsys')}; the report names nsys "
        f"2099.3.1.77-253236389321v0: export it with that nsys (`nsys export --type sqlite "
        f"-o {tmp_path / 'run.sqlite'} {rep}`) or point cgprof at it with --nsys PATH or "
        f"CGPROF_NSYS=PATH"]
    assert "Traceback" not in proc.stderr
    assert rep.read_bytes() == NAMED  # the input is unchanged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "run.nsys-rep"]


@pytest.mark.parametrize("report", [
    pytest.param(_noise(1 << 16), id="no-version"),
    # the same words past the part that is searched: not read, so not claimed
    pytest.param(bytes(4 << 20) + NAMED, id="version-too-deep"),
    # a year-like number that is not after the words "Nsight Systems" nor nsys's full form
    pytest.param(b"\x00cuda 2024.1.1 driver 2023.4.4.1\x00" * 4, id="other-numbers"),
])
def test_a_report_whose_version_cannot_be_read_says_none(tmp_path, report):
    proc, rep = _export_newer(tmp_path, report)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{_failed_line(rep, tmp_path / 'bin' / 'nsys')}: export it with the nsys that "
        f"recorded it (`nsys export --type sqlite -o {tmp_path / 'run.sqlite'} {rep}`) or "
        f"point cgprof at that nsys with --nsys PATH or CGPROF_NSYS=PATH"]
    assert "Traceback" not in proc.stderr
    assert rep.read_bytes() == report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "run.nsys-rep"]


def test_a_report_of_the_same_version_gives_no_version_advice(tmp_path):
    same = b"\x00\x07nsight-systems/2099.1.1/target-linux-x64\x00"
    proc, rep = _export_newer(tmp_path, same)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{_failed_line(rep, tmp_path / 'bin' / 'nsys')}; the report names the same nsys "
        f"version (2099.1.1)"]
    assert rep.read_bytes() == same


def test_analyze_import_stays_light():
    code = ("import sys, cgprof.cli, cgprof.io.loader, cgprof.metrics; "
            "print(sorted(m for m in ('torch', 'duckdb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stderr


def test_json_tables_written_in_pieces_are_the_same_bytes():
    from cgprof.report.json_report import _Table

    df = pd.DataFrame({"gap_ns": [5, 7, 9, 11, 13, 17, 19], "kind": pd.Categorical(
        ["a", "b", None, "a", "b", "a", "<é>"]), "pct": [0.1, None, 2.5, 1e-9, 3.0, 4.0, 5.5]})
    t = _Table(df)
    whole = df[sorted(df.columns)].assign(kind=df["kind"].astype(object)).to_json(
        orient="records", double_precision=15, force_ascii=False)
    for rows in (1, 3, 7, 100):
        assert "".join(t.chunks(rows=rows)) == whole
    assert list(t.chunks(rows=3))[0] == "["
    assert "".join(_Table(df.iloc[:0]).chunks(rows=3)) == "[]"


def test_an_unwritable_cache_costs_only_speed(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("CGPROF_CACHE", str(blocker / "cache"))
    res = CliRunner().invoke(main, ["analyze", str(TRACES / "mlp_infer_eager.sqlite"),
                                    "--json", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["trace"]["kernels"] > 0
    assert blocker.read_text() == "a file where the cache folder would be"


def test_a_second_store_of_the_same_trace_keeps_one_entry(cache_dir):
    path = TRACES / "mlp_infer_graph.sqlite"
    T.load(path)
    src = T.open_source(path)
    try:
        trace = T._load_tables(src, path, lambda _m: None)
        again = cache.store(path, src, trace)  # another run got there first: rename refused
    finally:
        src.close()
    assert again == cache_dir / cache.key(path)
    assert [p.name for p in cache_dir.iterdir()] == [cache.key(path)]


def test_warm_writes_the_copy_the_first_analysis_reads(cache_dir, tmp_path, monkeypatch):
    p = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_infer_eager.sqlite", p)
    entry = T.warm(p)
    assert entry == cache_dir / cache.key(p) and (entry / cache.MANIFEST).is_file()
    _no_sqlite(monkeypatch)
    assert len(T.load(p).kernels) == 2025


def test_record_columnar_warns_when_the_export_cannot_be_read(tmp_path, cache_dir, monkeypatch):
    nsys = _install_fake_nsys(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{nsys.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CGPROF_NSYS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    res = CliRunner().invoke(main, ["record", "--columnar", "train.py"])
    assert res.exit_code == 0, res.output
    assert f"cgprof: wrote {Path('train.sqlite')} and {Path('train.nsys-rep')}" in res.output
    # The fake export has no events: the recording stands, the copy is skipped with a warning.
    assert (f"cgprof: warning: no columnar copy: {Path('train.sqlite')}: contains no CUDA or "
            f"NVTX events") in res.output


def test_frames_are_stored_exactly():
    import numpy as np

    df = pd.DataFrame({
        "start_ns": np.array([3, 1, 2], dtype=np.int64),
        "flag": np.array([True, False, True]),
        "maybe": pd.array([5, None, -7], dtype="Int64"),
        "none": pd.array([None, None, None], dtype="Int64"),
        "name": pd.Categorical(["b", None, "a"], categories=["b", "a", "unused"]),
        "text": pd.Series(["x", None, "é<>"], dtype=object),
        "style": pd.Series(["", "range", ""], dtype="str"),
        "nan": pd.Series(["x", float("nan"), "y"], dtype=object),
    })
    back = framestore.arrow_to_frame(*framestore.frame_to_arrow(df))
    pd.testing.assert_frame_equal(back, df)
    assert list(back.dtypes) == list(df.dtypes)
    assert back["name"].cat.categories.equals(df["name"].cat.categories)
    assert back["text"][1] is None
    empty = df.iloc[:0].assign(name=pd.Series([], dtype=object)).reset_index(drop=True)
    pd.testing.assert_frame_equal(
        framestore.arrow_to_frame(*framestore.frame_to_arrow(empty)), empty)
    assert isinstance(back["nan"][1], float)
    for bad in (df.assign(text=[1.5, None, "x"]), df.iloc[1:],
                df.assign(text=pd.Series([None, float("nan"), "x"], dtype=object)),
                df.assign(style=pd.Series(["a", None, "b"], dtype="str"))):
        with pytest.raises(framestore.FrameLayoutError):
            framestore.frame_to_arrow(bad)


def test_rebuilt_columns_are_left_out_only_when_they_come_out_the_same(tmp_path):
    import numpy as np

    df = pd.DataFrame({"start_ns": np.array([1, 5], dtype=np.int64),
                       "end_ns": np.array([4, 9], dtype=np.int64),
                       "dur_ns": np.array([3, 4], dtype=np.int64),
                       "odd": np.array([7, 7], dtype=np.int64)})

    def rebuild(d):
        return {"end_ns": d["start_ns"].to_numpy() + d["dur_ns"].to_numpy(),
                "odd": np.array([7, 8], dtype=np.int64)}  # wrong for row 1: stored instead

    pending = cache.Pending(tmp_path / "t.sqlite", tmp_path)
    pending.write_frame("T", df, rebuild)
    layout = pending.frames["T"]
    assert dict(map(tuple, layout)) == {"start_ns": "int64", "end_ns": "rebuilt",
                                        "dur_ns": "int64", "odd": "int64"}
    src = cache.CachedSource(tmp_path, {}, tmp_path / "t.sqlite", pending.frames)
    pd.testing.assert_frame_equal(src.frame("T", rebuild), df)
    with pytest.raises(framestore.FrameLayoutError):
        src.frame("T")  # a column to rebuild and nothing to rebuild it with


def test_background_write_stores_the_same_entry_and_is_done_when_the_block_ends(
        cache_dir, tmp_path, monkeypatch):
    src = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_train_eager.sqlite", src)
    plain = T.load(src, cache=False)
    with cache.background_writes():
        assert cache.in_background()
        first = T.load(src)
    assert not cache.in_background()
    assert not cache._writers  # joined when the block ended
    assert len(cache.entries()) == 1
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]
    _no_sqlite(monkeypatch)
    _same_trace(plain, first)
    _same_trace(plain, T.load(src))


def test_a_background_load_leaves_its_small_tables_to_the_writer_thread(cache_dir, tmp_path,
                                                                        monkeypatch):
    """A first load inside background_writes writes nothing itself: the small tables it
    reads (strings, metadata, GPUs, threads) are kept for the writer thread, which writes
    them with the frames; the entry is the one a load that writes as it reads leaves."""
    src = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_train_graph.sqlite", src)
    seen = {}
    real = cache.write_later

    def spy(pending, trace, rebuild, tables):
        import threading

        seen["files"] = sorted(p.name for p in pending.tmp.iterdir())
        seen["kept"] = sorted(pending._kept)
        seen["thread"] = threading.current_thread().name
        real(pending, trace, rebuild, tables)

    monkeypatch.setattr(cache, "write_later", spy)
    with cache.background_writes():
        T.load(src)
    assert seen["files"] == [] and seen["thread"] == "MainThread"
    assert {S_.STRING_IDS, S_.META_EXPORT, "TARGET_INFO_GPU"} <= set(seen["kept"])
    (bg,) = [cache_dir / e["key"] for e in cache.entries()]
    files = sorted(p.name for p in bg.iterdir())
    assert {f"{t}.parquet" for t in seen["kept"]} <= set(files)

    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "other"))
    T.load(src)  # the library's load: writes each table as it reads it
    (fg,) = [tmp_path / "other" / e["key"] for e in cache.entries()]
    assert sorted(p.name for p in fg.iterdir()) == files
    for name in files:
        if name != cache.MANIFEST:
            assert _md5(bg / name) == _md5(fg / name), name
    a, b = (json.loads((d / cache.MANIFEST).read_text()) for d in (bg, fg))
    a.pop("created"), b.pop("created")
    assert a == b


@pytest.mark.parametrize("background", [True, False])
def test_a_failing_write_leaves_no_entry_and_no_temporary(cache_dir, monkeypatch, background):
    """In the background (the CLI) or now (cgprof.load): the load goes on, the entry is
    aborted (the write now once raised out of cgprof.load and left its .tmp- folder)."""
    def broken(self, trace, rebuild=None):
        raise OSError("disk full")

    monkeypatch.setattr(cache.Pending, "write_trace", broken)
    with cache.background_writes() if background else contextlib.nullcontext():
        trace = T.load(TRACES / "mlp_infer_eager.sqlite")
    assert len(trace.kernels) > 0
    assert cache.entries() == []
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]


def test_cli_analyze_leaves_a_committed_entry_when_it_returns(cache_dir, tmp_path,
                                                              monkeypatch):
    threads = []
    real = cache.write_later

    def spy(*args):
        real(*args)
        threads.append(cache._writers[-1])

    monkeypatch.setattr(cache, "write_later", spy)
    out = tmp_path / "a.json"
    res = CliRunner().invoke(main, ["analyze", str(TRACES / "mlp_infer_graph.sqlite"),
                                    "--json", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert len(cache.entries()) == 1 and not cache._writers
    assert len(threads) == 1 and not threads[0].is_alive()  # written by a thread, joined
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]


def test_a_table_read_ahead_is_the_table_read_when_asked():
    path = TRACES / "mlp_train_eager.sqlite"
    cols = F._present(T.open_source(path), "CUPTI_ACTIVITY_KIND_RUNTIME", F._RUNTIME)
    plain_src = T.open_source(path)
    try:
        plain = plain_src.read("CUPTI_ACTIVITY_KIND_RUNTIME", cols)
    finally:
        plain_src.close()
    src = T.open_source(path)
    try:
        src.read_ahead("CUPTI_ACTIVITY_KIND_RUNTIME", cols)
        assert "CUPTI_ACTIVITY_KIND_RUNTIME" in src._ahead
        src.read("CUPTI_ACTIVITY_KIND_KERNEL", ["start", "end"])  # beside the read ahead
        got = src.read("CUPTI_ACTIVITY_KIND_RUNTIME", cols)
        assert not src._ahead
    finally:
        src.close()
    assert got.equals(plain) and got.column(0).num_chunks == 1


@pytest.mark.parametrize("name", ["mlp_train_graph_graphtrace.sqlite",
                                  "resnet18_train_eager.sqlite", "mlp_serve_graph.sqlite"])
def test_the_loader_takes_every_table_read_ahead(name, monkeypatch):
    """Every table of schema.READ_COLUMNS is read ahead in a thread with the columns the loader
    asks for: the loader reads none of them itself, reads each once, and leaves none behind."""
    from cgprof import schema as S

    asked: list[tuple[str, list[str]]] = []
    plain: list[str] = []
    real_read, real_plain = Source.read, SqliteSource._read

    def read(self, table, columns):
        asked.append((table, list(columns)))
        return real_read(self, table, columns)

    def plain_read(self, table, columns):
        plain.append(table)
        return real_plain(self, table, columns)

    monkeypatch.setattr(Source, "read", read)
    monkeypatch.setattr(SqliteSource, "_read", plain_read)
    left: list[str] = []
    real_close = SqliteSource.close

    def close(self):
        left.extend(self._ahead)
        real_close(self)

    monkeypatch.setattr(SqliteSource, "close", close)
    T.load(TRACES / name, cache=False)
    ahead = [t for t, _ in asked if t in S.READ_COLUMNS]
    assert ahead and len(ahead) == len(set(ahead))
    assert S.KERNEL in ahead and S.RUNTIME in ahead and S.NVTX in ahead
    assert not set(plain) & set(S.READ_COLUMNS), plain
    assert left == []


@pytest.mark.parametrize("cached", [False, True])
def test_a_prefetched_trace_loads_the_same_and_is_taken_once(cached, cache_dir, tmp_path,
                                                             monkeypatch):
    src = tmp_path / "run.sqlite"
    shutil.copyfile(TRACES / "mlp_train_graph.sqlite", src)
    plain = T.load(src, cache=False)
    if cached:
        T.load(src)  # writes the entry
        _no_sqlite(monkeypatch)
    prefetch(src)
    early = E._early[str(src.resolve())]
    assert isinstance(early, cache.CachedSource if cached else SqliteSource)
    from cgprof import schema as S

    if cached:  # every file of the entry the load reads: the stored frames first
        assert list(early._ahead)[:2] == [f"{S.KERNEL}.frame", f"{S.RUNTIME}.frame"]
        assert {f"{t}.frame" for t in early.frames} <= set(early._ahead)
        assert len(early._ahead) >= 10
    else:  # every table the loader reads, each in its thread
        assert set(early._ahead) == {t for t in S.READ_COLUMNS if t in early.tables}
        assert len(early._ahead) >= 5
    import threading

    here = []  # files the load itself reads: none when the prefetch asked for each as it does
    real = early._read
    monkeypatch.setattr(early, "_read", lambda *a: here.append(
        a[0] if threading.current_thread() is threading.main_thread() else None) or real(*a))
    got = T.load(src)
    assert not E._early and not early._ahead  # taken by the load, reads consumed
    if cached:
        assert [f for f in here if f] == []
    _same_trace(plain, got)


@pytest.mark.parametrize("content", [b"", b"not sqlite at all", None])
def test_prefetch_of_bad_input_is_silent_and_the_load_says_what_is_wrong(content, tmp_path,
                                                                         cache_dir):
    path = tmp_path / "bad.sqlite"
    if content is not None:
        path.write_bytes(content)
    prefetch(path)
    assert not E._early
    res = CliRunner().invoke(main, ["analyze", str(path)])
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert res.output.startswith(f"Error: {path}: ")


def test_a_prefetched_source_no_load_took_is_closed(cache_dir):
    prefetch(TRACES / "mlp_infer_eager.sqlite")
    (early,) = E._early.values()
    reads = [r for _, r in early._ahead.values()]
    E.drop_early()
    assert not E._early and not early._ahead
    assert reads and not any(r.alive() for r in reads)


def test_cli_analyze_prefetches_its_trace(cache_dir, tmp_path, monkeypatch):
    taken = []
    real = E.take_early

    def spy(path, kind=None):
        src = real(path, kind)
        taken.append(src)
        return src

    monkeypatch.setattr(E, "take_early", spy)
    path = TRACES / "mlp_infer_graph.sqlite"
    want = json_report.render([cgprof.analyze(T.load(path, cache=False))])
    for _ in range(2):  # SQLite, then the cache entry
        taken.clear()
        out = tmp_path / "a.json"
        res = CliRunner().invoke(main, ["analyze", str(path), "--json", str(out), "--quiet",
                                        "--force"])
        assert res.exit_code == 0, res.output
        assert [s for s in taken if s is not None]
        assert json.loads(out.read_text()) == json.loads(want)
    assert not E._early
