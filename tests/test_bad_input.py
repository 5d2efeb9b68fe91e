"""Bad input gets one clear line naming the file, a non-zero exit, and the input is untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from nsysdb import (
    G,
    R,
    make_nsys_db,
    write_changed_copy,
    write_empty_file,
    write_not_sqlite,
    write_plain_sqlite,
    write_truncated_copy,
)

import cgprof
import cgprof.errors
from cgprof.cli import main
from cgprof.errors import TraceError


def _analyze(path: Path) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["analyze", str(path)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def _digest(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


def _one_error_line(out: str) -> str:
    assert out.endswith("\n") and out.count("\n") == 1, out
    assert "Traceback" not in out
    assert out.startswith("Error: ")
    return out[len("Error: "):-1]


def test_missing_file(tmp_path):
    code, out = _analyze(tmp_path / "nope.sqlite")
    assert code == 1
    assert _one_error_line(out) == f"{tmp_path / 'nope.sqlite'}: no such file"


def test_directory(tmp_path):
    code, out = _analyze(tmp_path)
    assert code == 1
    assert _one_error_line(out) == (
        f"{tmp_path}: is a directory with no nsys exports (*.sqlite, *.nsys-rep, *.parquetdir)")


def test_not_sqlite(tmp_path):
    p = write_not_sqlite(tmp_path / "x.sqlite")
    before = _digest(p)
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out) == (
        f"{p}: is not an SQLite file; cgprof reads `nsys export --type sqlite` output")
    assert _digest(p) == before


def test_truncated_sqlite(tmp_path, traces_dir):
    p = write_truncated_copy(traces_dir / "mlp_train_graph.sqlite", tmp_path / "cut.sqlite")
    before = _digest(p)
    code, out = _analyze(p)
    assert code == 1
    line = _one_error_line(out)
    assert line.startswith(f"{p}: cannot read SQLite (")
    assert line.endswith("); is the file truncated or corrupt?")
    assert _digest(p) == before


def test_corrupt_page_in_the_middle(tmp_path, traces_dir):
    # Garbage over the pages that hold the tables, header and schema intact.
    p = tmp_path / "corrupt.sqlite"
    shutil.copyfile(traces_dir / "mlp_train_graph.sqlite", p)
    p.chmod(0o644)
    data = bytearray(p.read_bytes())
    for off in range(8192, len(data), 4096):
        data[off:off + 64] = b"\xff" * 64
    p.write_bytes(bytes(data))
    code, out = _analyze(p)
    assert code == 1
    assert "is the file truncated or corrupt?" in _one_error_line(out)


def test_sqlite_without_nsys_tables(tmp_path):
    p = write_plain_sqlite(tmp_path / "plain.sqlite")
    before = _digest(p)
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out) == (
        f"{p}: is SQLite but not an Nsight Systems export (notes); make one with "
        "`nsys export --type sqlite` or `cgprof record`")
    assert _digest(p) == before


def test_nsys_rep_without_nsys(tmp_path, monkeypatch):
    """An .nsys-rep is exported with the nsys cgprof finds; with none, one line says so."""
    from cgprof import nsys

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CGPROF_NSYS", raising=False)
    monkeypatch.setattr(nsys, "NSYS_GLOBS", ())
    p = tmp_path / "run.nsys-rep"
    p.write_bytes(b"\x00" * 100)
    before = _digest(p)
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out) == (
        f"{p}: is an Nsight Systems report and no nsys was found to export it (looked in "
        f"--nsys, $CGPROF_NSYS, PATH); pass --nsys PATH, set CGPROF_NSYS=PATH or export it "
        f"yourself with "
        f"`nsys export --type sqlite -o {tmp_path / 'run.sqlite'} {p}`")
    assert _digest(p) == before


def test_qdstrm_given_instead_of_sqlite(tmp_path):
    p = tmp_path / "run.qdstrm"
    p.write_bytes(b"\x00" * 100)
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out).startswith(
        f"{p}: is a raw Nsight Systems stream, not SQLite; import it with `QdstrmImporter -i")


def test_zero_byte_file(tmp_path):
    p = write_empty_file(tmp_path / "empty.sqlite")
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out) == f"{p}: is empty (0 bytes), not an nsys SQLite export"


def test_export_with_no_events(tmp_path):
    p = make_nsys_db(tmp_path / "noevents.sqlite", empty=["CUPTI_ACTIVITY_KIND_KERNEL"])
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out) == (
        f"{p}: contains no CUDA or NVTX events; was it recorded with "
        "`nsys profile --trace=cuda,nvtx` (or `cgprof record`)?")


def test_library_raises_trace_error(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        cgprof.load(tmp_path / "missing.sqlite")


def test_real_trace_is_opened_read_only(tmp_path, traces_dir):
    p = tmp_path / "ro.sqlite"
    shutil.copyfile(traces_dir / "mlp_train_graph.sqlite", p)
    p.chmod(0o444)
    before = _digest(p)
    cgprof.analyze(p)
    assert _digest(p) == before
    # No journal or WAL files appear beside it.
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ro.sqlite"]


def test_one_bad_file_among_several_fails_cleanly(tmp_path, traces_dir):
    res = CliRunner().invoke(main, ["analyze", str(traces_dir / "mlp_train_graph.sqlite"),
                                    str(tmp_path / "missing.sqlite")])
    assert res.exit_code == 1
    assert res.output.splitlines()[-1] == f"Error: {tmp_path / 'missing.sqlite'}: no such file"


def test_json_output_not_overwritten_without_force(tmp_path, traces_dir):
    out = tmp_path / "r.json"
    out.write_text("keep me")
    res = CliRunner().invoke(main, ["analyze", str(traces_dir / "mlp_train_graph.sqlite"),
                                    "--json", str(out)])
    assert res.exit_code == 1
    assert res.output == f"Error: {out} exists; will not overwrite without --force\n"
    assert out.read_text() == "keep me"
    res = CliRunner().invoke(main, ["analyze", str(traces_dir / "mlp_train_graph.sqlite"),
                                    "--json", str(out), "--force"])
    assert res.exit_code == 0
    assert out.read_text().startswith("{")


def test_runtime_only_trace_is_fine(tmp_path):
    p = make_nsys_db(tmp_path / "rt.sqlite", runtime=[R(100, 200, "cudaMalloc_v3020")])
    r = cgprof.analyze(p)
    assert r.info["kernels"] == 0
    assert r.steps.source == "whole-trace"


# --- damaged or cut-down exports: one line, never a traceback or a meaningless result -----------

TAIL = "; is the file damaged or cut down? Re-export it with `nsys export --type sqlite`"


def _cli_error(path: Path, *extra: str) -> str:
    before = _digest(path)
    res = CliRunner().invoke(main, ["analyze", str(path), *extra])
    assert res.exit_code == 1
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.stdout == ""  # nothing that looks like a result
    assert _digest(path) == before
    return _one_error_line(res.output)


def test_no_string_ids(tmp_path, traces_dir):
    p = write_changed_copy(traces_dir / "mlp_train_graph.sqlite", tmp_path / "t.sqlite",
                      "DROP TABLE StringIds")
    assert _cli_error(p) == (
        f"{p}: missing table StringIds, which holds the names used by "
        "CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS" + TAIL)


def test_kernel_table_missing_is_reported_incomplete_not_refused(tmp_path, traces_dir):
    # Was refused in one line; before that it analysed as "GPU busy 0% ... compactness
    # 1.000". Now the host side is shown and the trace is said to be incomplete, first.
    p = write_changed_copy(traces_dir / "mlp_train_graph.sqlite", tmp_path / "t.sqlite",
                      "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    res = CliRunner().invoke(main, ["analyze", str(p)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[1].startswith("INCOMPLETE TRACE: GPU records are missing")
    assert lines[2] == ("  missing: 894 of 894 kernel launch calls (cudaLaunchKernel...) have "
                        "no kernel rows at all")
    assert "graph_launch     20" in res.stdout  # the host side


def test_graph_granularity_trace_with_only_replay_rows_is_valid(make_db):
    # Every kernel ran inside a replay: the launches were made during stream capture (they
    # launch nothing), the replays are GRAPH_TRACE rows, and there is no kernel table at all.
    rs = [R(100, 110, "cudaStreamBeginCapture_v10000", corr=1),
          R(120, 130, "cudaLaunchKernel_v7000", corr=2),
          R(140, 150, "cudaLaunchKernel_v7000", corr=3),
          R(160, 170, "cudaStreamEndCapture_v10000", corr=4),
          R(200, 300, "cudaGraphInstantiate_v12000", corr=5),
          R(1000, 1010, "cudaGraphLaunch_v10000", corr=6),
          R(2000, 2010, "cudaGraphLaunch_v10000", corr=7)]
    gs = [G(1020, 1500, corr=6), G(2020, 2500, corr=7)]
    p = make_db(runtime=rs, graph_trace=gs, graph_trace_mode="graph")
    r = cgprof.analyze(p)
    assert (r.info["kernels"], r.info["graph_trace_rows"]) == (0, 2)
    assert len(r.replays.replays) == 2
    res = CliRunner().invoke(main, ["analyze", str(p), "--json", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trace"]["graph_trace_rows"] == 2


def test_runtime_table_missing(tmp_path, traces_dir):
    # Used to say "if graphed ~104.8x": no launch calls, yet a launch verdict.
    p = write_changed_copy(traces_dir / "mlp_train_eager.sqlite", tmp_path / "t.sqlite",
                      "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    assert _cli_error(p) == (
        f"{p}: GPU activity (7402 rows of CUPTI_ACTIVITY_KIND_KERNEL, 115 rows of "
        "CUPTI_ACTIVITY_KIND_MEMCPY, 25 rows of CUPTI_ACTIVITY_KIND_MEMSET) but no table "
        "CUPTI_ACTIVITY_KIND_RUNTIME of the CUDA API calls that launched it, so launch "
        "overhead cannot be judged" + TAIL)


@pytest.mark.parametrize("table, column", [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId"),
    ("NVTX_EVENTS", "rangeId"),
])
def test_text_in_a_number_column(tmp_path, traces_dir, table, column):
    # Used to end in `ValueError: invalid literal for int() with base 10: 'x'`.
    p = write_changed_copy(traces_dir / "mlp_train_graph.sqlite", tmp_path / "t.sqlite",
                      f"UPDATE {table} SET {column} = 'x' WHERE rowid = 7")
    assert _cli_error(p) == f"{p}: {table}.{column} holds 'x' where nsys writes an integer" + TAIL


@pytest.mark.parametrize("table, change, rows, total, who", [
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid = NULL", 2, 165, "process 0"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", 'globalPid = -abs("globalPid") - 1000', 2, 7406, None),
])
def test_gpu_rows_of_a_process_without_api_calls(tmp_path, traces_dir, table, change, rows,
                                                 total, who):
    """A damaged globalPid must not become a rank of its own (the fuzzer found a traceback
    there): GPU work belongs to a process that launched it."""
    p = write_changed_copy(traces_dir / "mlp_train_graph.sqlite", tmp_path / "t.sqlite",
                      f"UPDATE {table} SET {change} WHERE rowid IN (3, 4)")
    err = _cli_error(p)
    head = f"{p}: {rows} of {total} rows of {table} belong to "
    assert err.startswith(head) and err.endswith(
        ", which made no CUDA API call, so nothing launched them" + TAIL), err
    if who:
        assert err[len(head):].startswith(who + ",")


def test_null_in_a_required_column(tmp_path, traces_dir):
    # nsys declares start/end NOT NULL; a copy of the table without the constraint can hold one.
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    p = write_changed_copy(traces_dir / "mlp_train_graph.sqlite", tmp_path / "t.sqlite",
                      f"CREATE TABLE loose AS SELECT * FROM {t}", f"DROP TABLE {t}",
                      f"ALTER TABLE loose RENAME TO {t}",
                      f"UPDATE {t} SET end = NULL WHERE rowid <= 3")
    assert _cli_error(p) == f"{p}: {t}.end is NULL in 3 rows" + TAIL


def test_duplicated_rows_are_counted_like_nsys_stats(tmp_path, traces_dir):
    # Tolerated (docs/bad_input.md): every row counts, as in `nsys stats`; busy time is a union
    # of intervals, so exact duplicates leave it unchanged.
    src = traces_dir / "mlp_infer_eager.sqlite"
    p = write_changed_copy(src, tmp_path / "t.sqlite",
                      "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM "
                      "CUPTI_ACTIVITY_KIND_KERNEL")
    a, b = cgprof.analyze(src), cgprof.analyze(p)
    assert b.info["kernels"] == 2 * a.info["kernels"]
    assert list(b.kernel_summary["instances"]) == [2 * n for n in a.kernel_summary["instances"]]
    assert list(b.gaps.devices["busy_ns"]) == list(a.gaps.devices["busy_ns"])


# --- outputs that cannot be written: refused before the analysis, one line ---------------------


@pytest.mark.parametrize("cmd", [
    ["analyze", "{t}", "--html", "/sys/r.html"],
    ["analyze", "{t}", "--json", "/sys/r.html"],
    ["diff", "{t}", "{t}", "-o", "/sys/r.html"],
    ["diff", "{t}", "{t}", "--json", "/sys/r.html"],
])
def test_output_into_a_read_only_folder(traces_dir, cmd):
    # /sys refuses new files even to root (a chmod 555 folder would not stop root).
    t = str(traces_dir / "mlp_infer_graph.sqlite")
    res = CliRunner().invoke(main, [a.format(t=t) for a in cmd])
    assert res.exit_code == 1
    assert res.output == "Error: /sys/r.html: cannot write into folder /sys (Permission denied)\n"


def test_write_failure_after_the_analysis_is_one_line(traces_dir):
    # /dev/full accepts the open and fails the write (ENOSPC): the report was printed, the
    # file was not written, and the failure is one line, not an OSError traceback.
    t = str(traces_dir / "mlp_infer_graph.sqlite")
    res = CliRunner().invoke(main, ["analyze", t, "--json", "/dev/full"])
    assert res.exit_code == 1
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.stderr == (
        "Error: /dev/full: cannot write (No space left on device); nothing was written\n")


def test_no_half_written_file_left(tmp_path, traces_dir, monkeypatch):
    from cgprof.report import output

    def fail(fh_path, text):
        raise OSError(28, "No space left on device")

    out = tmp_path / "r.json"
    monkeypatch.setattr(output, "_write", fail)
    with pytest.raises(cgprof.errors.CgprofError, match="nothing was written$"):
        output.write_atomic(out, "{}", force=False)
    assert list(tmp_path.iterdir()) == []


def test_json_stdout_stays_json_with_html(tmp_path, traces_dir):
    # Status lines go to stderr when stdout carries the JSON (a real subprocess: two streams).
    import subprocess
    import sys

    page = tmp_path / "r.html"
    for cmd in (["analyze", str(traces_dir / "mlp_infer_graph.sqlite")],
                ["diff", str(traces_dir / "mlp_infer_eager.sqlite"),
                 str(traces_dir / "mlp_infer_graph.sqlite"), "--force"]):
        flag = "--html" if cmd[0] == "analyze" else "-o"
        proc = subprocess.run([sys.executable, "-m", "cgprof", *cmd, "--json", "-", flag,
                               str(page)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        json.loads(proc.stdout)
        assert proc.stderr == f"wrote {page}\n"
        assert page.read_text().startswith("<!DOCTYPE html>")
