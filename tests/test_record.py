"""`cgprof record` against a fake nsys (tests/fake_nsys/): every path, real subprocesses.

The fake is installed in the Nsight Compute layout the GPU machine has
(`host/target-linux-x64/nsys`, importer in `host/linux-desktop-glibc_2_11_3-x64/`), logs
each call's argv, really runs the profiled script, and writes a small real SQLite export.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cgprof.cli import main
from cgprof.errors import RecordError
from cgprof.nsys import (
    EXPORT_TABLES,
    NSYS_GLOBS,
    build_export_argv,
    export_tables_pattern,
    find_nsys,
    find_qdstrm_importer,
)
from cgprof.record import (
    build_profile_argv,
    default_output_name,
    output_base,
    resolve_command,
)

FAKES = Path(__file__).parent / "fake_nsys"
PY = sys.executable
DEFAULTS = ["--trace=cuda,nvtx", "--cuda-graph-trace=node", "--sample=none", "--cpuctxsw=none"]
TABLES = "--tables=" + export_tables_pattern()

TRAIN_PY = """\
import sys
print("training", sys.argv[1:], flush=True)
if "--crash" in sys.argv:
    raise RuntimeError("boom")
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
"""


def install(target: Path, source: Path) -> Path:
    """Write an executable sh wrapper at ``target`` that runs ``source`` with this Python."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f'#!/bin/sh\nexec "{PY}" "{source}" "$@"\n')
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return target


class Fake:
    """The fake nsys install, its call log and the working folder of one test."""

    def __init__(self, root: Path) -> None:
        self.host = root / "ncu" / "host"
        self.nsys = install(self.host / "target-linux-x64" / "nsys", FAKES / "fake_nsys.py")
        self.importer = install(self.host / "linux-desktop-glibc_2_11_3-x64" / "QdstrmImporter",
                                FAKES / "fake_qdstrm_importer.py")
        self.log = root / "calls.jsonl"
        self.work = root / "work"
        self.work.mkdir()
        (self.work / "train.py").write_text(TRAIN_PY)

    def calls(self) -> list[dict[str, list[str]]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def argvs(self, verb: str) -> list[list[str]]:
        """Logged nsys argv lists (without the program name) for ``verb``."""
        return [c["argv"] for c in self.calls() if "argv" in c and c["argv"][:1] == [verb]]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    f = Fake(tmp_path)
    monkeypatch.chdir(f.work)
    monkeypatch.setenv("PATH", f"{f.nsys.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_LOG", str(f.log))
    for var in ("CGPROF_NSYS", "CGPROF_QDSTRM_IMPORTER", "FAKE_NSYS_PROFILE",
                "FAKE_NSYS_EXPORT", "FAKE_NSYS_HAS_TABLES", "FAKE_IMPORTER"):
        monkeypatch.delenv(var, raising=False)
    return f


def record(*args: str):
    return CliRunner().invoke(main, ["record", *args], catch_exceptions=False)


def tables(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master"))
    finally:
        con.close()


def exported_with(path: Path) -> tuple[str | None, dict]:
    """The --tables value the fake export saw, and the report it read."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables_value, report = con.execute("SELECT tables, report FROM FAKE_EXPORT").fetchone()
    finally:
        con.close()
    return tables_value, json.loads(report)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "train.py")


# --------------------------------------------------------------------------------------
# Pure pieces


def test_profile_argv_defaults():
    argv = build_profile_argv("/x/nsys", [PY, "train.py"], "train")
    assert argv == ["/x/nsys", "profile", *DEFAULTS, "--output=train", PY, "train.py"]


@pytest.mark.parametrize(
    "user, dropped",
    [
        (["--trace=cuda"], "--trace=cuda,nvtx"),
        (["--trace", "cuda,osrt"], "--trace=cuda,nvtx"),
        (["-t", "cuda"], "--trace=cuda,nvtx"),
        (["--cuda-graph-trace=graph"], "--cuda-graph-trace=node"),
        (["--cuda-graph-trace", "graph"], "--cuda-graph-trace=node"),
        (["-s", "cpu"], "--sample=none"),
        (["--sample=process-tree"], "--sample=none"),
        (["--cpuctxsw=process-tree"], "--cpuctxsw=none"),
        (["-o", "mine"], "--output=train"),
        (["--output=mine"], "--output=train"),
    ],
)
def test_profile_argv_keeps_the_users_flag(user, dropped):
    argv = build_profile_argv("nsys", ["prog"], "train", None, user)
    expected = [a for a in [*DEFAULTS, "--output=train"] if a != dropped]
    assert argv == ["nsys", "profile", *expected, *user, "prog"]


def test_profile_argv_graph_trace_and_force():
    argv = build_profile_argv("nsys", ["prog"], "out", "graph", ["--duration=5"], force=True)
    assert argv == ["nsys", "profile", "--trace=cuda,nvtx", "--cuda-graph-trace=graph",
                    "--sample=none", "--cpuctxsw=none", "--output=out",
                    "--force-overwrite=true", "--duration=5", "prog"]
    argv = build_profile_argv("nsys", ["prog"], "out", None, ["-f", "true"], force=True)
    assert "--force-overwrite=true" not in argv


def test_profile_argv_graph_trace_conflict():
    with pytest.raises(RecordError) as err:
        build_profile_argv("nsys", ["prog"], "out", "graph", ["--cuda-graph-trace=node"])
    assert str(err.value) == (
        "--graph-trace graph conflicts with --nsys-arg --cuda-graph-trace=node"
    )
    # The same value twice is not a conflict, and is not added twice.
    argv = build_profile_argv("nsys", ["prog"], "out", "node", ["--cuda-graph-trace=node"])
    assert argv.count("--cuda-graph-trace=node") == 1


def test_export_argv():
    assert build_export_argv("nsys", "a.nsys-rep", ".a.tmp.sqlite") == [
        "nsys", "export", "--type=sqlite", "--output=.a.tmp.sqlite", "--force-overwrite=true",
        "a.nsys-rep"]
    argv = build_export_argv("nsys", "a.nsys-rep", "o.sqlite", ["StringIds", "ENUM_"])
    assert argv[-2:] == ["--tables=StringIds,ENUM_", "a.nsys-rep"]
    assert "StringIds" in EXPORT_TABLES and "NVTX_EVENTS" in EXPORT_TABLES


def test_resolve_command_and_names():
    assert resolve_command(["train.py", "--lr", "3"]) == [PY, "train.py", "--lr", "3"]
    assert resolve_command(["python3", "-m", "pkg"]) == ["python3", "-m", "pkg"]
    assert default_output_name([PY, "dir/train.py", "--x"]) == "train"
    assert default_output_name(["python3", "-m", "pkg.trainer"]) == "trainer"
    assert default_output_name(["torchrun", "--nproc-per-node", "2", "t.py"]) == "t"
    assert default_output_name(["/usr/bin/myprog", "a"]) == "myprog"
    assert output_base("runs/x.sqlite") == Path("runs/x")
    assert output_base("runs/x.v2.nsys-rep") == Path("runs/x.v2")
    assert output_base("x.v2") == Path("x.v2")


def test_find_nsys_order(tmp_path: Path):
    def make(folder: str) -> Path:
        return install(tmp_path / folder / "nsys", FAKES / "fake_nsys.py")

    explicit, from_env, on_path = make("explicit"), make("env"), make("path")
    old, new = make("glob/2024.6.1/bin"), make("glob/2025.3.1/bin")
    globs = (str(tmp_path / "glob" / "*" / "bin"),)
    env = {"CGPROF_NSYS": str(from_env), "PATH": str(on_path.parent)}
    assert find_nsys(explicit, env, globs) == explicit
    assert find_nsys(explicit.parent, env, globs) == explicit  # a folder holding nsys
    assert find_nsys(None, env, globs) == from_env
    assert find_nsys(None, {"PATH": str(on_path.parent)}, globs) == on_path
    assert find_nsys(None, {"PATH": ""}, globs) == new != old


def test_find_nsys_not_found_lists_every_place(tmp_path: Path):
    globs = (str(tmp_path / "none" / "*" / "bin"), "/usr/local/cuda*/nothing-here")
    with pytest.raises(RecordError) as err:
        find_nsys(None, {"PATH": str(tmp_path)}, globs)
    assert str(err.value) == (
        "nsys (Nsight Systems) not found; looked in: --nsys, $CGPROF_NSYS, PATH, "
        f"{tmp_path}/none/*/bin, /usr/local/cuda*/nothing-here. Install Nsight Systems or "
        "point cgprof at it with --nsys PATH or CGPROF_NSYS=PATH"
    )


def test_find_nsys_bad_explicit_or_env(tmp_path: Path):
    with pytest.raises(RecordError) as err:
        find_nsys(tmp_path / "nope", {})
    assert str(err.value) == f"--nsys {tmp_path}/nope: no nsys executable there"
    with pytest.raises(RecordError) as err:
        find_nsys(None, {"CGPROF_NSYS": "/nowhere/nsys"})
    assert str(err.value) == "CGPROF_NSYS=/nowhere/nsys: no nsys executable there"


def test_find_importer_beside_nsys_and_from_env(fake: Fake, tmp_path: Path):
    assert find_qdstrm_importer(fake.nsys, {}) == fake.importer
    other = install(tmp_path / "elsewhere" / "QdstrmImporter", FAKES / "fake_qdstrm_importer.py")
    assert find_qdstrm_importer(fake.nsys, {"CGPROF_QDSTRM_IMPORTER": str(other)}) == other
    lonely = install(tmp_path / "lonely" / "bin" / "nsys", FAKES / "fake_nsys.py")
    assert find_qdstrm_importer(lonely, {}) is None


# --------------------------------------------------------------------------------------
# The command, end to end


def test_defaults_outputs_and_next_command(fake: Fake):
    result = record("train.py", "--lr", "3")
    assert result.exit_code == 0, result.output
    assert fake.argvs("profile") == [
        ["profile", *DEFAULTS, "--output=train", PY, "train.py", "--lr", "3"]]
    assert fake.argvs("export") == [
        ["export", "--help"],
        ["export", "--type=sqlite", f"--output={_tmp_export_name(fake)}",
         "--force-overwrite=true", TABLES, "train.nsys-rep"]]
    assert leftovers(fake.work) == ["train.nsys-rep", "train.sqlite"]
    assert tables(fake.work / "train.sqlite") == [
        "CUPTI_ACTIVITY_KIND_RUNTIME", "FAKE_EXPORT", "StringIds"]
    tables_value, report = exported_with(fake.work / "train.sqlite")
    assert tables_value == export_tables_pattern()
    assert report == {"command": [PY, "train.py", "--lr", "3"], "exit_code": 0}
    assert result.stdout == (
        "cgprof: wrote train.sqlite and train.nsys-rep\n"
        "next: cgprof analyze train.sqlite\n"
    )
    lines = result.stderr.splitlines()
    assert lines[0] == "cgprof: " + " ".join(
        [str(fake.nsys), "profile", *DEFAULTS, "--output=train", PY, "train.py", "--lr", "3"])
    assert lines[1] == "cgprof: exporting train.sqlite (tables cgprof reads) ..."
    assert re.fullmatch(
        r"cgprof: exporting train\.sqlite \(tables cgprof reads\) \.\.\. done in \d+\.\d s",
        lines[2])
    assert len(lines) == 3


def _tmp_export_name(fake: Fake) -> str:
    """The temporary export name cgprof chose (random), read back from the log."""
    (argv,) = [a for a in fake.argvs("export") if "--help" not in a]
    name = argv[2].removeprefix("--output=")
    assert re.fullmatch(r".*/?\.train\.sqlite\.[^/]+\.sqlite", name), name
    return name


def test_user_flags_pass_through_and_win(fake: Fake):
    result = record("--nsys-arg=--trace=cuda", "--nsys-arg=--duration=5",
                    "--nsys-arg", "-s", "--nsys-arg", "cpu", "train.py")
    assert result.exit_code == 0, result.output
    assert fake.argvs("profile") == [[
        "profile", "--cuda-graph-trace=node", "--cpuctxsw=none", "--output=train",
        "--trace=cuda", "--duration=5", "-s", "cpu", PY, "train.py"]]


def test_graph_trace_option(fake: Fake):
    assert record("--graph-trace", "graph", "train.py").exit_code == 0
    assert "--cuda-graph-trace=graph" in fake.argvs("profile")[0]
    result = record("--force", "--graph-trace", "graph",
                    "--nsys-arg=--cuda-graph-trace=node", "train.py")
    assert result.exit_code == 1
    assert result.output == (
        "Error: --graph-trace graph conflicts with --nsys-arg --cuda-graph-trace=node\n")


def test_output_name_and_subfolder(fake: Fake):
    result = record("-o", "runs/eager.sqlite", "train.py")
    assert result.exit_code == 0, result.output
    assert "--output=runs/eager" in fake.argvs("profile")[0]
    assert leftovers(fake.work / "runs") == ["eager.nsys-rep", "eager.sqlite"]
    assert result.stdout.endswith("next: cgprof analyze runs/eager.sqlite\n")


@pytest.mark.parametrize("output, reason", [
    ("/sys/cgprof-run", "folder /sys (Permission denied)"),  # EACCES even for root
    ("/proc/cgprof-nope/run", "folder /proc/cgprof-nope (No such file or directory)"),
])
def test_output_folder_not_writable_refused_before_running(fake: Fake, output, reason):
    result = record("-o", output, "train.py")
    assert result.exit_code == 1
    assert result.output == f"Error: {output}: cannot write the trace into {reason}\n"
    assert fake.argvs("profile") == []  # nsys never ran: no hours of training lost


def test_output_name_from_nsys_arg(fake: Fake):
    result = record("--nsys-arg=-o", "--nsys-arg=mine", "train.py")
    assert result.exit_code == 0, result.output
    assert fake.argvs("profile")[0][:7] == ["profile", *DEFAULTS, "-o", "mine"]
    assert leftovers(fake.work) == ["mine.nsys-rep", "mine.sqlite"]


def test_command_after_double_dash(fake: Fake):
    (fake.work / "pkg").mkdir()
    (fake.work / "pkg" / "__init__.py").write_text("")
    (fake.work / "pkg" / "job.py").write_text("print('job ran')\n")
    result = record("--", PY, "-m", "pkg.job")
    assert result.exit_code == 0, result.output
    assert fake.argvs("profile")[0][-4:] == ["--output=job", PY, "-m", "pkg.job"]
    assert (fake.work / "job.sqlite").exists()


def test_qdstrm_only_is_imported(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NSYS_PROFILE", "qdstrm")
    result = record("train.py")
    assert result.exit_code == 0, result.output
    importer_calls = [c["importer"] for c in fake.calls() if "importer" in c]
    assert importer_calls == [["-i", "train.qdstrm"]]
    # The raw stream is removed once imported, as nsys does after its own import.
    assert leftovers(fake.work) == ["train.nsys-rep", "train.sqlite"]
    assert exported_with(fake.work / "train.sqlite")[1]["command"] == [PY, "train.py"]
    lines = result.stderr.splitlines()
    assert lines[1] == "cgprof: importing train.qdstrm ..."
    assert re.fullmatch(r"cgprof: importing train\.qdstrm \.\.\. done in \d+\.\d s", lines[2])


def test_qdstrm_importer_from_env(fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake.importer.unlink()
    other = install(tmp_path / "other" / "QdstrmImporter", FAKES / "fake_qdstrm_importer.py")
    monkeypatch.setenv("FAKE_NSYS_PROFILE", "qdstrm")
    monkeypatch.setenv("CGPROF_QDSTRM_IMPORTER", str(other))
    result = record("train.py")
    assert result.exit_code == 0, result.output
    assert (fake.work / "train.sqlite").exists()


def test_importer_missing_library(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NSYS_PROFILE", "qdstrm")
    monkeypatch.setenv("FAKE_IMPORTER", "libdw")
    result = record("train.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "Error: QdstrmImporter cannot start: shared library libdw.so.1 is missing. "
        "Install it (libdw1 on Debian/Ubuntu, elfutils-libs on RHEL/Fedora) or add its "
        "folder to LD_LIBRARY_PATH, then run: QdstrmImporter -i train.qdstrm && "
        "nsys export --type=sqlite train.nsys-rep"
    )
    assert result.stderr.splitlines()[-2] == "cgprof: importing train.qdstrm ... failed"
    assert leftovers(fake.work) == ["train.qdstrm"]  # kept for a manual import


def test_importer_other_failure(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NSYS_PROFILE", "qdstrm")
    monkeypatch.setenv("FAKE_IMPORTER", "fail")
    result = record("train.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "Error: QdstrmImporter failed on train.qdstrm (exit code 2): "
        "Importing... | Error: the QDSTRM file is corrupt"
    )


def test_importer_not_found(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    fake.importer.unlink()
    monkeypatch.setenv("FAKE_NSYS_PROFILE", "qdstrm")
    result = record("train.py")
    assert result.exit_code == 1
    folder = fake.nsys.parent
    assert result.stderr.splitlines()[-1] == (
        "Error: nsys wrote only train.qdstrm and QdstrmImporter was not found (looked in: "
        f"$CGPROF_QDSTRM_IMPORTER, {folder}/QdstrmImporter, {folder.parent}/*/QdstrmImporter); "
        "set CGPROF_QDSTRM_IMPORTER to its path, or run: QdstrmImporter -i train.qdstrm && "
        "nsys export --type=sqlite train.nsys-rep"
    )


def test_profile_writes_nothing(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NSYS_PROFILE", "none")
    result = record("train.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "Error: nsys profile exited with code 1 and wrote no report (train.nsys-rep); "
        "see nsys's messages above"
    )


def test_export_failure_leaves_no_sqlite(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT", "fail")
    result = record("train.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "Error: nsys export failed on train.nsys-rep (exit code 1): "
        "Processing events... | Error: export failed: simulated crash"
    )
    assert leftovers(fake.work) == ["train.nsys-rep"]  # no .sqlite, no temporary file


def test_export_that_is_not_sqlite(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT", "garbage")
    result = record("--all-tables", "train.py")
    assert result.exit_code == 1
    message = result.stderr.splitlines()[-1]
    assert re.fullmatch(
        r"Error: nsys export wrote .*/\.train\.sqlite\.[^/]+\.sqlite but it cannot be opened: "
        r"file is not a database", message), message
    assert leftovers(fake.work) == ["train.nsys-rep"]


def test_all_tables_and_no_tables_support(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    assert record("--all-tables", "train.py").exit_code == 0
    assert exported_with(fake.work / "train.sqlite")[0] is None
    assert ["export", "--help"] not in fake.argvs("export")  # no need to ask

    monkeypatch.setenv("FAKE_NSYS_HAS_TABLES", "0")
    result = record("--force", "train.py")
    assert result.exit_code == 0, result.output
    assert exported_with(fake.work / "train.sqlite")[0] is None
    assert "cgprof: exporting train.sqlite (all tables) ..." in result.stderr.splitlines()


def test_unusable_limited_export_falls_back_to_full(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT", "empty-if-tables")
    result = record("train.py")
    assert result.exit_code == 0, result.output
    assert exported_with(fake.work / "train.sqlite")[0] is None
    assert ("cgprof: warning: nsys export --tables gave an unusable file; "
            "exporting all tables instead") in result.stderr.splitlines()
    assert leftovers(fake.work) == ["train.nsys-rep", "train.sqlite"]


def test_exit_code_passes_through_and_trace_is_exported(fake: Fake):
    result = record("train.py", "--exit", "3")
    assert result.exit_code == 3
    assert exported_with(fake.work / "train.sqlite")[1]["exit_code"] == 3
    assert ("cgprof: warning: the command exited with code 3; its partial trace is still "
            "exported to train.sqlite") in result.stderr.splitlines()
    assert result.stdout.endswith("next: cgprof analyze train.sqlite\n")


def test_crashing_script_still_exports(fake: Fake):
    result = record("train.py", "--crash")
    assert result.exit_code == 1
    assert (fake.work / "train.sqlite").exists()
    assert ("cgprof: warning: the command exited with code 1; its partial trace is still "
            "exported to train.sqlite") in result.stderr.splitlines()


@pytest.mark.parametrize("existing", ["train.sqlite", "train.nsys-rep", "train.qdstrm"])
def test_refuses_existing_output_before_running(fake: Fake, existing: str):
    (fake.work / existing).write_text("precious")
    result = record("train.py")
    assert result.exit_code == 1
    assert result.output == f"Error: {existing} exists; will not overwrite without --force\n"
    assert fake.calls() == []  # nsys never ran
    assert (fake.work / existing).read_text() == "precious"


def test_force_overwrites(fake: Fake):
    (fake.work / "train.sqlite").write_text("old")
    (fake.work / "train.nsys-rep").write_text("old")
    (fake.work / "train.qdstrm").write_text("old")
    result = record("--force", "train.py")
    assert result.exit_code == 0, result.output
    assert "--force-overwrite=true" in fake.argvs("profile")[0]
    assert leftovers(fake.work) == ["train.nsys-rep", "train.sqlite"]
    assert exported_with(fake.work / "train.sqlite")[1]["exit_code"] == 0


def test_force_with_qdstrm_only_does_not_reuse_old_report(fake: Fake,
                                                          monkeypatch: pytest.MonkeyPatch):
    (fake.work / "train.nsys-rep").write_text('{"command": ["old"], "exit_code": 0}')
    monkeypatch.setenv("FAKE_NSYS_PROFILE", "qdstrm")
    result = record("--force", "train.py")
    assert result.exit_code == 0, result.output
    assert exported_with(fake.work / "train.sqlite")[1]["command"] == [PY, "train.py"]


def test_nsys_not_found(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    if any(Path(p).is_file() for g in NSYS_GLOBS for p in _glob(g + "/nsys")):
        pytest.skip("a real nsys is installed in one of the usual places")
    monkeypatch.setenv("PATH", os.path.dirname(PY))
    result = record("train.py")
    assert result.exit_code == 1
    assert result.output == (
        "Error: nsys (Nsight Systems) not found; looked in: --nsys, $CGPROF_NSYS, PATH, "
        "/opt/nvidia/nsight-systems/*/bin, /usr/local/cuda*/bin, "
        "/opt/nvidia/nsight-compute/*/host/target-linux-x64. Install Nsight Systems or "
        "point cgprof at it with --nsys PATH or CGPROF_NSYS=PATH\n"
    )


def _glob(pattern: str) -> list[str]:
    import glob

    return glob.glob(pattern)


def test_nsys_option_and_env(fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", os.path.dirname(PY))
    result = record("--nsys", str(fake.nsys), "train.py")
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("CGPROF_NSYS", str(fake.nsys))
    assert record("--force", "train.py").exit_code == 0
    assert len(fake.argvs("profile")) == 2


def test_usage_errors(fake: Fake):
    result = record("missing.py")
    assert (result.exit_code, result.output) == (1, "Error: missing.py: no such script\n")
    result = record("--", "no-such-program-xyz", "a")
    assert (result.exit_code, result.output) == (
        1, "Error: no-such-program-xyz: command not found\n")
    result = record("--duration=5", "train.py")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: unknown option --duration=5; pass nsys flags with --nsys-arg, "
        "and put -- before a command")
    assert fake.calls() == []


def test_ctrl_c_stops_the_script_and_still_exports(fake: Fake):
    """SIGINT to cgprof reaches the script through nsys's group; the export still runs."""
    started = fake.work / "started"
    (fake.work / "slow.py").write_text(
        "import pathlib, sys, time\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        [PY, "-m", "cgprof", "record", "slow.py"],
        cwd=fake.work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 15
    while not started.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err  # the script itself was stopped
    assert "cgprof: stopping the command; the trace so far will be exported" in err
    assert ("cgprof: warning: interrupted; exporting what was captured before the stop to "
            "slow.sqlite") in err.splitlines()
    assert out.endswith(
        "cgprof: wrote slow.sqlite and slow.nsys-rep\nnext: cgprof analyze slow.sqlite\n")
    assert exported_with(fake.work / "slow.sqlite")[1]["exit_code"] == 130
