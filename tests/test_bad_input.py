"""Bad input gets one clear line naming the file, a non-zero exit, and the input is untouched."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from nsysdb import (
    R,
    make_nsys_db,
    write_empty_file,
    write_not_sqlite,
    write_plain_sqlite,
    write_truncated_copy,
)

import cgprof
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
        f"{tmp_path}: is a directory with no nsys SQLite exports (*.sqlite)")


def test_not_sqlite(tmp_path):
    p = write_not_sqlite(tmp_path / "x.sqlite")
    before = _digest(p)
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out) == (
        f"{p}: is not an SQLite file; cgprof reads `nsys export --type sqlite` output")
    assert _digest(p) == before


def test_truncated_sqlite(tmp_path, samples_dir):
    p = write_truncated_copy(samples_dir / "mlp8_node.sqlite", tmp_path / "cut.sqlite")
    before = _digest(p)
    code, out = _analyze(p)
    assert code == 1
    line = _one_error_line(out)
    assert line.startswith(f"{p}: cannot read SQLite (")
    assert line.endswith("); is the file truncated or corrupt?")
    assert _digest(p) == before


def test_corrupt_page_in_the_middle(tmp_path, samples_dir):
    # Garbage over the pages that hold the tables, header and schema intact.
    p = tmp_path / "corrupt.sqlite"
    shutil.copyfile(samples_dir / "mlp8_node.sqlite", p)
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


def test_nsys_rep_given_instead_of_sqlite(tmp_path):
    p = tmp_path / "run.nsys-rep"
    p.write_bytes(b"\x00" * 100)
    code, out = _analyze(p)
    assert code == 1
    assert _one_error_line(out) == (
        f"{p}: is an Nsight Systems report, not SQLite; export it first with "
        f"`nsys export --type sqlite -o {tmp_path / 'run.sqlite'} {p}`")


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


def test_real_trace_is_opened_read_only(tmp_path, samples_dir):
    p = tmp_path / "ro.sqlite"
    shutil.copyfile(samples_dir / "mlp8_node.sqlite", p)
    p.chmod(0o444)
    before = _digest(p)
    cgprof.analyze(p)
    assert _digest(p) == before
    # No journal or WAL files appear beside it.
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ro.sqlite"]


def test_one_bad_file_among_several_fails_cleanly(tmp_path, samples_dir):
    res = CliRunner().invoke(main, ["analyze", str(samples_dir / "mlp8_node.sqlite"),
                                    str(tmp_path / "missing.sqlite")])
    assert res.exit_code == 1
    assert res.output.splitlines()[-1] == f"Error: {tmp_path / 'missing.sqlite'}: no such file"


def test_json_output_not_overwritten_without_force(tmp_path, samples_dir):
    out = tmp_path / "r.json"
    out.write_text("keep me")
    res = CliRunner().invoke(main, ["analyze", str(samples_dir / "mlp8_node.sqlite"),
                                    "--json", str(out)])
    assert res.exit_code == 1
    assert res.output == f"Error: {out} exists; will not overwrite without --force\n"
    assert out.read_text() == "keep me"
    res = CliRunner().invoke(main, ["analyze", str(samples_dir / "mlp8_node.sqlite"),
                                    "--json", str(out), "--force"])
    assert res.exit_code == 0
    assert out.read_text().startswith("{")


def test_runtime_only_trace_is_fine(tmp_path):
    p = make_nsys_db(tmp_path / "rt.sqlite", runtime=[R(100, 200, "cudaMalloc_v3020")])
    r = cgprof.analyze(p)
    assert r.info["kernels"] == 0
    assert r.steps.source == "whole-trace"
