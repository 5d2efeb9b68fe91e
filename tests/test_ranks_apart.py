"""Multi-rank traces read rank by rank: each rank's rows read alone (the pid filter in the
scan), so that a trace whose whole analysis exceeds the memory cap is analysed within it.

The rank-by-rank result must be the whole trace's, byte for byte: on the shipped DDP traces
(real exports), on built traces whose ranks use different kernel names, from SQLite (DuckDB
and the sqlite3 fallback), parquetdir and arrowdir folders (written here from the DDP export
in small batches, so that the filter crosses batch edges), and on nsys's own parquetdir.

A command is sent rank by rank the way a user's run is, by a memory cap every whole analysis
is over (``--memory-limit 100MB``: cgprof.io.estimate.WHOLE_BYTES_BASE is 200 MB), where it says
so on stderr; where the cap cannot send it (an arrowdir, whose rows are not known up front)
or it says nothing (``check``, a folder's files), by the settings' ``ranks_apart``
(cgprof.settings), in a process of its own (:data:`_UNDER_SETTINGS`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import cgprof_in_process, load_script
from nsysdb import K, N, R, make_nsys_db

from cgprof.io.estimate import activity_rows, apart_wanted, whole_analysis_bytes
from cgprof.io.filters import PidFilter
from cgprof.io.loader import load, load_part, process_heads
from cgprof.io.sources import connect_readonly, probe_sqlite
from cgprof.io.sqlite import SqliteSource
from cgprof.plan import CHUNKS, RANK_BY_RANK, WHOLE, plan_input
from cgprof.ranks import apart_heads, rank_heads, sub_trace
from cgprof.settings import Settings, using

REPO = Path(__file__).resolve().parents[1]
DDP = [REPO / "traces" / "ddp_mlp_train_eager.sqlite",
       REPO / "traces" / "ddp_mlp_train_graph.sqlite"]
FRAMES = ["kernels", "runtime", "memcpy", "memset", "sync", "graph_trace", "nvtx", "threads",
          "gpus"]
LK = "cudaLaunchKernel_v7000"

#: A memory cap every whole analysis is expected to exceed (cgprof.io.estimate.WHOLE_BYTES_BASE
#: is 200 MB): a multi-rank trace with known rows is then read rank by rank.
CAPPED = ("--memory-limit", "100MB")

#: ``cgprof ARGS`` (sys.argv[2:]) in a process of its own under the environment's settings
#: with ``ranks_apart`` set: sys.argv[1] "1" reads a multi-rank trace rank by rank whatever
#: its size, "0" never.
_UNDER_SETTINGS = r"""
import sys
from cgprof.cli import main
from cgprof.settings import Settings, using
with using(Settings.from_env().replace(ranks_apart=sys.argv[1] == "1")):
    main(sys.argv[2:], prog_name="cgprof")
"""


def _run(args: list[str], apart: str | None, how: str, env: dict[str, str] | None = None,
         cwd: Path | None = None, process: bool = False) -> subprocess.CompletedProcess:
    """``cgprof ARGS`` (in this process: conftest.cgprof_in_process; with ``process``, in a
    process of its own). apart: "1" rank by rank, "0" whole (both under the default memory
    cap), None as ``env`` says. how: "cap", rank by rank under :data:`CAPPED` (whole: no
    flag); "settings", under ``ranks_apart`` (``_UNDER_SETTINGS``)."""
    if not process:
        changes: dict[str, str | None] = {"CGPROF_MEMORY_LIMIT": None} if apart is not None \
            else {}
        changes.update(env or {})
        if apart is not None and how == "settings":
            return cgprof_in_process(args, changes, cwd=cwd or REPO, ranks_apart=apart == "1")
        return cgprof_in_process([*args, *(CAPPED if apart == "1" else ())], changes,
                                 cwd=cwd or REPO)
    e = dict(os.environ)
    if apart is not None:
        e.pop("CGPROF_MEMORY_LIMIT", None)
    e.update(env or {})
    if apart is not None and how == "settings":
        argv = [sys.executable, "-c", _UNDER_SETTINGS, apart, *args]
    else:
        argv = [sys.executable, "-m", "cgprof", *args, *(CAPPED if apart == "1" else ())]
    return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=240, cwd=cwd)


def _cli(*args: str, apart: str | None, env: dict[str, str] | None = None,
         cwd: Path | None = None, how: str = "cap") -> subprocess.CompletedProcess:
    return _run(["analyze", *args, "--quiet"], apart, how, env, cwd)


def _is_cap_note(line: str) -> bool:
    """A note of a run over the memory cap the user set: the trace read rank by rank
    (engine_opts.note_apart), the run's peak above the cap (engine_opts._note_over_cap)."""
    return line.startswith("cgprof: note: ") and (
        ": read rank by rank (" in line or " at its peak, above --memory-limit " in line)


def _stderr(res: subprocess.CompletedProcess, apart: str | None, how: str = "cap",
            said: bool = True) -> str:
    """``res.stderr`` less the cap's notes (:func:`_is_cap_note`). A run sent rank by rank
    by the cap (apart "1", how "cap") must say it read a trace rank by rank, unless ``said``
    is False (it stopped before reading: a usage error); any other run, no such note."""
    lines = res.stderr.splitlines(keepends=True)
    notes = [ln for ln in lines if _is_cap_note(ln)]
    if apart == "1" and how == "cap" and said:
        assert any(": read rank by rank (" in ln for ln in notes), res.stderr
    elif apart != "1" or how != "cap":
        assert not notes, res.stderr
    return "".join(ln for ln in lines if not _is_cap_note(ln))


def _same_outputs(trace: Path, *extra: str, env: dict[str, str] | None = None,
                  how: str = "cap") -> str:
    """The JSON document and the text report, whole (apart=0) and rank by rank (apart=1):
    the same bytes, the same stderr (less the cap's notes: :func:`_stderr`) and exit code.
    Returns the JSON."""
    out = {}
    for mode in ("0", "1", "1 cached"):
        j = _cli(str(trace), "--json", "-", *extra, apart=mode[0], env=env, how=how)
        t = _cli(str(trace), *extra, apart=mode[0], env=env, how=how)
        out[mode] = (j.returncode, j.stdout, _stderr(j, mode[0], how, j.returncode == 0),
                     t.returncode, t.stdout, _stderr(t, mode[0], how, t.returncode == 0))
    assert out["0"][0] == 0, out["0"][2]
    for i, what in enumerate(["rc", "json", "json stderr", "text rc", "text", "text stderr"]):
        for mode in ("1", "1 cached"):
            assert out["0"][i] == out[mode][i], f"{trace} {extra}: {what} differs ({mode})"
    return out["1"][1]


def _frames_equal(a, b) -> None:
    for name in FRAMES:
        x = getattr(a, name).reset_index(drop=True)
        y = getattr(b, name).reset_index(drop=True)
        assert list(x.columns) == list(y.columns), name
        assert len(x) == len(y), name
        for c in x.columns:
            xs, ys = x[c], y[c]
            if isinstance(xs.dtype, pd.CategoricalDtype):
                xs = xs.astype(object)
            if isinstance(ys.dtype, pd.CategoricalDtype):
                ys = ys.astype(object)
            pd.testing.assert_series_equal(xs, ys, check_dtype=False, obj=f"{name}.{c}")


# ---------------------------------------------------------------------------------------
# traces built here: ranks that differ


def _rank_rows(pid: int, device: int, kernel: str, steps: int, marker: int | None):
    k, r, n = [], [], []
    for i in range(steps):
        base = 10_000 * i + 1_000 + 37 * pid
        n.append(N(base, base + 6_000, "step", domain="cgprof", pid=pid, payload=i))
        r.append(R(base + 100, base + 200, LK, corr=10 * i + 1, pid=pid))
        k.append(K(base + 300, base + 1_300, "gemm", corr=10 * i + 1, pid=pid, device=device))
        r.append(R(base + 300, base + 400, LK, corr=10 * i + 2, pid=pid))
        k.append(K(base + 1_500 + 50 * i, base + 4_000, kernel, corr=10 * i + 2, pid=pid,
                   device=device))
    if marker is not None:
        n.append(N(500, 500, f"rank {marker}/3", domain="cgprof", pid=pid, payload=marker))
    return k, r, n


@pytest.fixture
def three(tmp_path: Path) -> Path:
    """Three ranks (markers say pid 300 is rank 0) that run different kernels, and a
    launcher process with API calls and an NVTX range but no GPU work."""
    kernels, runtime, nvtx = [], [], []
    for pid, device, kernel, marker in [(100, 0, "relu_only_on_100", 2),
                                        (200, 1, "softmax_only_on_200", 1),
                                        (300, 2, "relu_only_on_100", 0)]:
        k, r, n = _rank_rows(pid, device, kernel, 6 + pid // 100, marker)
        kernels += k
        runtime += r
        nvtx += n
    runtime.append(R(100, 300, "cudaGetDeviceCount_v3020", pid=50))
    nvtx.append(N(50, 900, "launch", pid=50))
    return make_nsys_db(tmp_path / "three.sqlite", kernels=kernels, runtime=runtime,
                        nvtx=nvtx, gpus=[(0, "GPU A"), (1, "GPU B"), (2, "GPU C")],
                        graph_trace_mode="node")


def _columnar(sqlite_path: Path, out: Path, kind: str, rows_per_batch: int) -> Path:
    """Every table of an SQLite export as nsys's parquetdir/arrowdir lays it out (one file
    per table, same column names), written in batches of ``rows_per_batch`` rows."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    out.mkdir()
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    try:
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            cur = con.execute(f'SELECT * FROM "{table}"')
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
            data = list(zip(*rows, strict=True)) if rows else [() for _ in cols]
            arrays = []
            for values in data:
                try:
                    arrays.append(pa.array(list(values)))
                except (pa.ArrowException, OverflowError):
                    arrays.append(pa.array([None if v is None else str(v) for v in values]))
            tbl = pa.Table.from_arrays(arrays, names=cols)
            if kind == "parquetdir":
                pq.write_table(tbl, out / f"{table}.parquet", row_group_size=rows_per_batch)
            else:
                with ipc.new_stream(str(out / f"{table}.arrow"), tbl.schema) as w:
                    w.write_table(tbl, max_chunksize=rows_per_batch)
    finally:
        con.close()
    return out


# ---------------------------------------------------------------------------------------
# the filter and the parts


def test_pid_filter_keeps_and_leaves_out_the_asked_processes():
    import pyarrow as pa

    ids = [S << 24 | 7 for S in (100, 200, 300, 100)] + [None]  # NULL: process 0's
    f = PidFilter([100, 300])
    assert f.mask(pa.array(ids)).tolist() == [True, False, True, True, False]
    assert PidFilter([100, 300], keep=False).mask(pa.array(ids)).tolist() == [
        False, True, False, False, True]
    assert PidFilter([0]).mask(pa.array(ids)).tolist() == [False] * 4 + [True]
    assert f.column("CUPTI_ACTIVITY_KIND_KERNEL", ["start", "globalPid"]) == "globalPid"
    assert f.column("CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "globalTid"]) == "globalTid"
    assert f.column("StringIds", ["id", "value"]) is None
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (globalPid INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in ids])
    for flt, want in [(f, 3), (PidFilter([100, 300], keep=False), 2),
                      (PidFilter([0]), 1)]:
        n = con.execute(f"SELECT count(*) FROM t WHERE {flt.sql('globalPid')}").fetchone()[0]
        assert n == want


@pytest.mark.parametrize("trace", DDP, ids=lambda p: p.stem)
def test_a_part_is_the_sub_trace_the_whole_trace_gives(trace):
    whole = load(trace, cache=False)
    heads = rank_heads(whole)
    assert len(heads) == 2
    assert rank_heads(process_heads(trace)) == heads
    for h in heads:
        _frames_equal(sub_trace(whole, h.pid), load_part(trace, [h.pid]))


def test_parts_of_ranks_with_different_kernels(three):
    whole = load(three, cache=False)
    heads = rank_heads(whole)
    assert [(h.rank_id, h.pid, h.source) for h in heads] == [
        (0, 300, "marker"), (1, 200, "marker"), (2, 100, "marker")]
    assert rank_heads(process_heads(three)) == heads
    for h in heads:
        part = load_part(three, [h.pid])
        _frames_equal(sub_trace(whole, h.pid), part)
        assert set(part.gpus["device_id"]) == set(h.device_ids)
    others = load_part(three, [h.pid for h in heads], keep=False)
    assert set(others.runtime["pid"]) == {50} and set(others.nvtx["pid"]) == {50}
    assert others.kernels.empty


def test_a_part_of_nsys_own_parquetdir_is_its_one_process():
    folder = REPO / "traces" / "columnar" / "mlp_infer_eager.parquetdir"
    whole = load(folder)
    (pid,) = {int(p) for p in whole.kernels["pid"]}
    part = load_part(folder, [pid])
    _frames_equal(sub_trace(whole, pid), part)
    assert len(part.kernels) == len(whole.kernels) and len(part.threads) < len(whole.threads)
    assert load_part(folder, [pid + 1]).kernels.empty


# ---------------------------------------------------------------------------------------
# whole analysis == rank by rank


@pytest.mark.parametrize("trace", DDP, ids=lambda p: p.stem)
def test_ddp_traces_analyse_the_same_rank_by_rank(trace):
    doc = _same_outputs(trace)
    assert '"per_rank"' in doc
    _same_outputs(trace, "--rank", "1")
    _same_outputs(trace, "--skip", "3", "--min-gap-us", "2", "--all-gaps")


def test_built_ranks_analyse_the_same_rank_by_rank(three):
    doc = _same_outputs(three)
    assert "softmax_only_on_200" in doc and '"other_processes"' in doc
    _same_outputs(three, "--rank", "2")


def test_the_sqlite3_fallback_reads_the_same_parts(three):
    _same_outputs(three, env={"CGPROF_ENGINE": "sqlite3"})


@pytest.mark.parametrize("kind", ["parquetdir", "arrowdir"])
def test_columnar_folders_analyse_the_same_rank_by_rank(kind, tmp_path):
    folder = _columnar(DDP[1], tmp_path / f"ddp.{kind}", kind, rows_per_batch=333)
    whole = load(folder)
    for h in rank_heads(whole):
        _frames_equal(sub_trace(whole, h.pid), load_part(folder, [h.pid]))
    # an arrowdir's rows are not known up front: no cap sends it rank by rank, the settings do
    _same_outputs(folder, how="cap" if kind == "parquetdir" else "settings")


def test_the_html_of_one_rank_is_the_same(tmp_path):
    pages = []
    for mode in ("0", "1"):
        out = tmp_path / f"r{mode}.html"
        res = _cli(str(DDP[1]), "--html", str(out), "--rank", "1", apart=mode)
        assert res.returncode == 0, res.stderr
        _stderr(res, mode)
        pages.append(out.read_bytes())
    assert pages[0] == pages[1]


# ---------------------------------------------------------------------------------------
# when a trace is read rank by rank


def test_read_apart_only_above_the_memory_cap(monkeypatch, three):
    rows = activity_rows(three)
    assert rows == 2 * (7 + 8 + 9) * 2 + 1  # kernels + API calls: 2 each per step
    monkeypatch.setenv("CGPROF_MEMORY_LIMIT", "4GB")
    assert not apart_wanted(three) and apart_heads(three) is None
    assert plan_input(three).shape == WHOLE
    need = whole_analysis_bytes(rows)
    monkeypatch.setenv("CGPROF_MEMORY_LIMIT", f"{need - 1}B")
    assert apart_wanted(three)
    assert [h.pid for h in apart_heads(three)] == [300, 200, 100]
    plan = plan_input(three)
    assert plan.shape == RANK_BY_RANK and plan.over_cap and plan.rank_ids == [0, 1, 2]
    with using(Settings.from_env().replace(ranks_apart=False)):
        assert not apart_wanted(three)
        assert plan_input(three).shape == WHOLE
    monkeypatch.setenv("CGPROF_MEMORY_LIMIT", "4GB")
    with using(Settings.from_env().replace(ranks_apart=True)):
        assert apart_wanted(three)
        assert plan_input(three).shape == RANK_BY_RANK


def test_a_one_process_trace_is_not_read_rank_by_rank():
    trace = REPO / "traces" / "mlp_train_eager.sqlite"
    with using(Settings.from_env().replace(ranks_apart=True)):
        assert apart_wanted(trace)
        assert apart_heads(trace) is None  # one rank: nothing to read apart
        assert plan_input(trace).heads == ()
        assert plan_input(trace).shape == WHOLE  # within the cap: read whole
    with using(Settings.from_env().replace(ranks_apart=True, memory_limit="100MB")):
        assert plan_input(trace, chunks=False).shape == WHOLE
        assert plan_input(trace).shape == CHUNKS  # over it: a chunk of steps at a time


def test_rows_are_not_known_for_a_report_or_a_folder_of_traces(tmp_path):
    rep = tmp_path / "x.nsys-rep"
    rep.write_bytes(b"not read")
    assert activity_rows(rep) is None
    assert activity_rows(tmp_path) is None
    assert activity_rows(REPO / "traces" / "columnar" / "mlp_infer_eager.parquetdir") > 0


def test_over_the_cap_the_cli_reads_rank_by_rank_and_caches_each_rank(three, tmp_path,
                                                                      monkeypatch):
    cache = tmp_path / "cache"
    need = whole_analysis_bytes(activity_rows(three))
    # a cap below the estimate (DuckDB's own cap is a floor it still reads these files in)
    env = {"CGPROF_CACHE": str(cache), "CGPROF_MEMORY_LIMIT": f"{need - 1}B"}
    res = _cli(str(three), "--json", "-", apart=None, env=env)
    assert res.returncode == 0, res.stderr
    assert "read rank by rank (3 ranks, one at a time)" in res.stderr
    whole = _cli(str(three), "--json", "-", "--no-cache", apart="0")
    assert res.stdout == whole.stdout
    from cgprof.io import cache as C

    monkeypatch.setenv("CGPROF_CACHE", str(cache))
    parts = sorted(str(e.get("part")) for e in C.entries())
    assert parts == ["others", "pid 100", "pid 200", "pid 300", "ranks"]  # no whole entry
    again = _cli(str(three), "--json", "-", apart=None, env=env)
    assert again.stdout == whole.stdout and "read rank by rank" in again.stderr
    plain = _cli(str(three), "--json", "-", "--no-cache", apart=None, env=env)
    assert plain.stdout == whole.stdout


def test_a_second_run_reads_the_ranks_from_the_cache_only(three, tmp_path, monkeypatch):
    import cgprof.io.loader as T
    from cgprof.io import cache as C
    from cgprof.ranks import analyze_ranks, analyze_ranks_apart
    from cgprof.report.json_report import render_chunks

    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CGPROF_NO_CACHE", raising=False)

    def doc(result) -> str:
        return "".join(render_chunks([result]))

    with using(Settings.from_env().replace(ranks_apart=True)):
        whole = doc(analyze_ranks(load(three, cache=False), keep=False, gap_limit=1000))
        heads = apart_heads(three)
        assert doc(analyze_ranks_apart(three, heads, keep=False, gap_limit=1000)) == whole
        assert len(C.entries()) == 5

        def refuse(path):
            raise AssertionError(f"SQLite opened: {path}")

        monkeypatch.setattr(T, "open_source", refuse)
        assert apart_heads(three) == heads  # the noted ranks
        assert doc(analyze_ranks_apart(three, heads, keep=False, gap_limit=1000)) == whole
        assert doc(analyze_ranks_apart(three, heads, keep=1, gap_limit=1000)) == whole
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")
    with using(Settings.from_env().replace(ranks_apart=True)):
        with pytest.raises(AssertionError, match="SQLite opened"):
            analyze_ranks_apart(three, heads, keep=False, gap_limit=1000)


def test_the_input_is_not_written(three):
    import hashlib

    before = hashlib.md5(three.read_bytes()).hexdigest()
    mtime = three.stat().st_mtime_ns
    res = _cli(str(three), apart="1")
    assert res.returncode == 0, res.stderr
    _stderr(res, "1")
    assert hashlib.md5(three.read_bytes()).hexdigest() == before
    assert three.stat().st_mtime_ns == mtime


def test_each_rank_is_read_with_its_own_rows_only(three, monkeypatch):
    """The parts' scans keep the rank's rows: no read returns another process's row."""
    seen: list[tuple[str, set[int]]] = []
    real = SqliteSource._scan

    def spy(con, table, columns, rows, where=""):
        tbl = real(con, table, columns, rows, where)
        col = PidFilter([]).column(table, columns)
        if col is not None and tbl.num_rows:
            ids = np.asarray(tbl.column(col).to_numpy(zero_copy_only=False), dtype=np.int64)
            seen.append((table, {int(p) for p in (ids >> 24) & 0xFFFFFF}))
        return tbl

    monkeypatch.setattr(SqliteSource, "_scan", staticmethod(spy))
    part = load_part(three, [200])
    assert len(part.kernels) == 2 * 8
    assert seen and all(pids == {200} for _, pids in seen)


def test_the_other_processes_part_reads_only_their_tables(three, tmp_path):
    from cgprof import schema as S

    pids = [100, 200, 300]
    only = (S.RUNTIME, S.NVTX, S.THREAD_NAMES)
    folder = _columnar(three, tmp_path / "three.parquetdir", "parquetdir", rows_per_batch=7)
    for path in (three, folder):
        every = load_part(path, pids, keep=False)
        some = load_part(path, pids, keep=False, tables=only)
        _frames_equal(every, some)  # the GPU tables hold none of their rows anyway
        assert set(some.runtime["pid"]) == {50}
    f = PidFilter(pids, keep=False, tables=only)
    assert f.none_of(S.KERNEL) and not f.none_of(S.RUNTIME)
    conn = connect_readonly(three)
    src = SqliteSource(three, conn, probe_sqlite(conn))
    src.pid_filter = f
    assert src._where(S.KERNEL, ["globalPid"]) == "FALSE"
    assert src.read(S.KERNEL, ["start", "globalPid"]).num_rows == 0
    src.close()


# ---------------------------------------------------------------------------------------
# the other commands that read a multi-rank trace: diff, check, folders of traces


def _cmd(args: list[str], apart: str, tmp: Path, process: bool = False
         ) -> tuple[int, str, str]:
    """(exit code, stdout, stderr less the cap's notes) of ``cgprof ARGS``: `diff` under the
    cap (it says it read a trace rank by rank); `check`, which does not say so, and a
    folder's files, which a cap would also send to one worker (parallel.memory_jobs), under
    the settings' ranks_apart."""
    how = "cap" if args[0] == "diff" else "settings"
    res = _run(args, apart, how, cwd=tmp, process=process)
    return res.returncode, res.stdout, _stderr(res, apart, how)


@pytest.mark.parametrize("args", [
    ["diff", str(DDP[0]), str(DDP[1]), "--json", "-"],
    ["diff", str(DDP[0]), str(DDP[1]), "--rank", "1"],
    ["check", str(DDP[1]), "--max", "launch_calls_per_step=2", "--min",
     "graph_kernel_share=0.5"],
    ["check", str(DDP[1]), "--rank", "1", "--max", "launch_calls_per_step=0"],
], ids=["diff-json", "diff-rank", "check", "check-rank-fails"])
def test_diff_and_check_read_rank_by_rank_the_same(args, tmp_path):
    whole, apart = _cmd(args, "0", tmp_path), _cmd(args, "1", tmp_path)
    assert whole == apart
    assert whole[0] == (1 if args[-1].endswith("=0") else 0), whole[2]
    assert _cmd(args, "1", tmp_path) == whole  # the ranks read from their cache entries


def test_diff_html_of_a_rank_is_the_same(tmp_path):
    pages = []
    for mode in ("0", "1"):
        out = tmp_path / f"d{mode}.html"
        rc, _, err = _cmd(["diff", str(DDP[0]), str(DDP[1]), "--rank", "0", "-o", str(out)],
                          mode, tmp_path)
        assert rc == 0, err
        pages.append(out.read_bytes())
    assert pages[0] == pages[1]


def test_a_folder_of_multi_rank_traces_reads_each_rank_by_rank(tmp_path):
    import shutil

    folder = tmp_path / "run"
    folder.mkdir()
    for i, src in enumerate(DDP):
        shutil.copyfile(src, folder / f"node{i}.sqlite")
    for jobs in ("1", "2"):  # (--jobs 2 starts workers: in processes of their own)
        args = ["analyze", str(folder), "--json", "-", "--jobs", jobs, "--quiet"]
        whole, apart = (_cmd(args, "0", tmp_path, process=jobs == "2"),
                        _cmd(args, "1", tmp_path, process=jobs == "2"))
        assert whole[0] == 0, whole[2]
        assert whole == apart


def test_workers_are_fewer_when_together_they_would_exceed_the_cap(monkeypatch, three):
    from cgprof.parallel import memory_jobs

    need = whole_analysis_bytes(activity_rows(three))
    monkeypatch.setenv("CGPROF_MEMORY_LIMIT", "4GB")
    assert memory_jobs([three, three], 8) == 8
    monkeypatch.setenv("CGPROF_MEMORY_LIMIT", f"{3 * need}B")
    assert memory_jobs([three, three], 8) == 3
    monkeypatch.setenv("CGPROF_MEMORY_LIMIT", f"{need - 1}B")  # read rank by rank: one
    assert memory_jobs([three], 8) == 1
    assert memory_jobs([three.parent / "nothing.sqlite"], 8) == 8  # rows not known


# ---------------------------------------------------------------------------------------
# one scan of the file for every rank: the process tables written apart (cgprof.io.spill.Spill)


def test_spilled_rows_are_the_rows_a_filtered_scan_reads(three, tmp_path):
    from cgprof import schema as S
    from cgprof.io.loader import spill_processes

    spill = spill_processes(three, tmp_path / "spill")
    assert spill is not None and S.KERNEL in spill.columns and S.NVTX in spill.columns
    conn = connect_readonly(three)
    src = SqliteSource(three, conn, probe_sqlite(conn))
    try:
        for table, cols in spill.columns.items():
            for pid in (50, 100, 200, 300, 999):
                src.pid_filter = PidFilter([pid])
                scanned = src._read(table, cols)
                src.spill = spill
                assert src._spilled(table, cols) is not None
                read = src._read(table, cols)
                src.spill = None
                assert read.column_names == scanned.column_names
                assert read.to_pylist() == scanned.to_pylist(), (table, pid)
        src.pid_filter = PidFilter([100], keep=False)  # not one process: not spilled
        src.spill = spill
        assert src._spilled(S.KERNEL, spill.columns[S.KERNEL]) is None
    finally:
        src.close()


def test_a_rank_by_rank_run_scans_the_file_once(three, tmp_path, monkeypatch):
    from cgprof import schema as S
    from cgprof.ranks import analyze_ranks, analyze_ranks_apart
    from cgprof.report.json_report import render_chunks

    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CGPROF_NO_CACHE", raising=False)
    scans: list[tuple[str, str]] = []
    real = SqliteSource._scan

    def spy(con, table, columns, rows, where=""):
        scans.append((table, where))
        return real(con, table, columns, rows, where)

    monkeypatch.setattr(SqliteSource, "_scan", staticmethod(spy))
    with using(Settings.from_env().replace(ranks_apart=True)):
        heads = apart_heads(three)
        scans.clear()
        doc = "".join(render_chunks([analyze_ranks_apart(three, heads, keep=False,
                                                         gap_limit=1000)]))
        big = [t for t, w in scans if t in (S.KERNEL, S.RUNTIME, S.NVTX) and "FALSE" not in w]
        assert big == [S.RUNTIME, S.NVTX]  # the other processes' read; the ranks: the spill
        assert not list((tmp_path / "cache").glob(".tmp-*"))  # removed
        whole = "".join(render_chunks([analyze_ranks(load(three, cache=False), keep=False,
                                                     gap_limit=1000)]))
    assert doc == whole


# ---------------------------------------------------------------------------------------
# damaged multi-rank traces: refused (or analysed) rank by rank as they are whole


def _fuzzer():
    return load_script("fuzz_traces")


FUZZ_COPIES = 30


@pytest.mark.parametrize("index", range(FUZZ_COPIES))
def test_a_damaged_copy_is_judged_the_same_rank_by_rank(index, tmp_path, monkeypatch):
    """Copy ``index`` of the eager DDP trace, damaged as ``scripts/fuzz_traces.py --seed 4``
    damages it: both ways it is analysed to the same JSON, or refused in one line naming the
    file (the counts in a refusal may be the rank's, not the file's)."""
    import random

    F = _fuzzer()
    rng = random.Random(f"4:{index}")
    copy = tmp_path / "copy.sqlite"
    detail = F.damage(DDP[0], copy, F.KINDS[index % len(F.KINDS)], rng)
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")
    out = {}
    for mode in ("0", "1"):
        with using(Settings.from_env().replace(ranks_apart=mode == "1")):
            code, stdout, stderr = F.run_cli(copy, False)  # (in this process: CliRunner)
        result, problem = F.judge(copy, code, stdout, stderr)
        assert problem is None, f"{detail} (apart={mode}): {problem}"
        out[mode] = (code, stdout if code == 0 else None)
    assert out["0"] == out["1"], detail


def test_the_damage_kinds_are_all_tried():
    F = _fuzzer()
    assert {F.KINDS[i % len(F.KINDS)] for i in range(FUZZ_COPIES)} == set(F.KINDS)


@pytest.mark.parametrize("table,column", [("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
                                          ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
                                          ("CUPTI_ACTIVITY_KIND_MEMCPY", "deviceId")])
def test_a_null_process_or_device_reads_as_the_loader_reads_it(table, column, tmp_path):
    """A NULL global id is process 0's and a copy's NULL device is device 0, as the loader
    reads a NULL in those columns: rank by rank, GPU rows of process 0 (which made no call)
    are refused as whole, not left out; a copy on device 0 is analysed the same."""
    import shutil

    copy = tmp_path / "t.sqlite"
    shutil.copyfile(DDP[0], copy)
    con = sqlite3.connect(copy)
    _fuzzer()._update(con, table, column, [3], "NULL")  # (the table loosened where NOT NULL)
    con.commit()
    con.close()
    whole = _cli(str(copy), "--json", "-", "--no-cache", apart="0")
    apart = _cli(str(copy), "--json", "-", "--no-cache", apart="1")
    assert whole.returncode == apart.returncode
    assert whole.stdout == apart.stdout
    errors = {"0": _stderr(whole, "0"), "1": _stderr(apart, "1")}
    if column == "globalPid":
        assert whole.returncode == 1
        for err in errors.values():
            assert err.startswith(f"Error: {copy}: ") and err.count("\n") == 1
            assert "belong to process 0, which made no CUDA API call" in err


def test_diff_says_it_read_a_trace_rank_by_rank(three, tmp_path):
    import shutil

    other = tmp_path / "other.sqlite"
    shutil.copyfile(three, other)
    need = whole_analysis_bytes(activity_rows(three))
    env = {**os.environ, "CGPROF_CACHE": str(tmp_path / "c"),
           "CGPROF_MEMORY_LIMIT": f"{need - 1}B"}
    res = subprocess.run([sys.executable, "-m", "cgprof", "diff", str(three), str(other),
                          "--json", "-"], capture_output=True, text=True, env=env,
                         timeout=240)
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if "read rank by rank" in line]
    assert len(notes) == 2
    assert str(three) in notes[0] and str(other) in notes[1]
    json.loads(res.stdout)
