"""A run that is stopped or killed leaves nothing behind (cgprof.scratch): SIGTERM and SIGHUP
unwind a real `cgprof analyze` the way Ctrl-C does, and what a SIGKILL-ed one left (the
forked reader's tables, a cache entry being written, an output before its rename) is
removed by the next run, once its process is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cgprof import scratch

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the forked reader and the signals are Linux's")


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    """A synthetic export (100k kernels + 100k calls, ~12 MB): small enough for the forked
    reader, big enough that a run lasts a second or so here."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import synth_trace
    finally:
        sys.path.pop(0)
    path = tmp_path_factory.mktemp("synth") / "synth.sqlite"
    synth_trace.generate(path, n_kernels=100_000, n_runtime=100_000, n_steps=1_000)
    return path


def _env(tmp_path: Path, cache: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CGPROF_")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp_path / "tmp")
    env["CGPROF_CACHE"] = str(tmp_path / "cache")
    if not cache:
        env["CGPROF_NO_CACHE"] = "1"
    return env


def _scratch(tmp_path: Path) -> list[Path]:
    """What a run has made in the temporary folder and the cache folder that is not an
    entry: the forked reader's folder, a pending entry."""
    found = list((tmp_path / "tmp").iterdir())
    if (tmp_path / "cache").is_dir():
        found += [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]
    return found


def _start_and_catch(trace: Path, out: Path, env: dict[str, str], tmp_path: Path,
                     deadline_s: float = 60.0) -> tuple[subprocess.Popen, list[Path]]:
    """Start `cgprof analyze TRACE --json OUT`; return once its scratch exists (the process,
    what was seen), or when it ended first (what was seen: nothing)."""
    proc = subprocess.Popen([sys.executable, "-m", "cgprof", "analyze", str(trace), "--json",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=tmp_path)
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s and proc.poll() is None:
        # (cgprof's: the interpreter's own probe of the temporary folder comes and goes)
        seen = [p for p in _scratch(tmp_path) if p.name.startswith(("cgprof-", "."))]
        if seen:
            return proc, seen
        time.sleep(0.001)
    return proc, []


def _caught(trace: Path, out: Path, env: dict[str, str], tmp_path: Path
            ) -> tuple[subprocess.Popen, list[Path]]:
    """:func:`_start_and_catch` until a run is caught with its scratch (a run may end
    before its scratch is seen: tried again, 5 times at most)."""
    for _ in range(5):
        proc, seen = _start_and_catch(trace, out, env, tmp_path)
        if seen:
            return proc, seen
        proc.communicate(timeout=120)
        out.unlink(missing_ok=True)
    pytest.fail("no run was seen with its scratch in 5 tries")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_stops_analyze_cleanly(synth, tmp_path, cache, sig):
    """Sent while the forked reader's tables (or the cache entry it writes) exist, SIGTERM or
    SIGHUP ends `cgprof analyze` with the shell's status for it and one line on stderr, no
    output file, and neither the reader's folder nor a pending entry left."""
    env = _env(tmp_path, cache)
    out = tmp_path / "out.json"
    signum = getattr(signal, sig)
    proc, seen = _caught(synth, out, env, tmp_path)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr.decode()
    assert stderr.decode() == f"cgprof: stopped by {sig}\n"
    assert stdout == b""
    assert not out.exists()
    assert _scratch(tmp_path) == [], [p.name for p in seen]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
def test_what_a_killed_run_left_is_swept_by_the_next(synth, tmp_path, cache):
    """SIGKILL leaves the scratch (nothing can unwind); once it has not changed for
    STALE_AFTER_S the next run removes it, analyses the trace, and leaves nothing itself.
    An output's temporary file that a killed run left beside it goes too."""
    env = _env(tmp_path, cache)
    out = tmp_path / "out.json"
    proc, seen = _caught(synth, out, env, tmp_path)
    proc.kill()
    proc.communicate(timeout=120)
    left = _scratch(tmp_path)
    assert left and all(f"{scratch._host()}.{proc.pid}-" in p.name for p in left)
    # what a killed write of out.json leaves beside it (its name as cgprof.report.output
    # makes it: the killed process's host and pid)
    half = tmp_path / f".out.json.{scratch._host()}.{proc.pid}-abcd1234.tmp"
    half.write_text('{"half": ')
    old = time.time() - scratch.STALE_AFTER_S - 60
    for p in [*left, half]:
        os.utime(p, (old, old))
    done = subprocess.run([sys.executable, "-m", "cgprof", "analyze", str(synth), "--json",
                           str(out)], capture_output=True, env=env, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr.decode()
    assert out.is_file() and not half.exists()
    assert _scratch(tmp_path) == []
    if cache:  # the entry the next run wrote, committed
        assert [p.name for p in (tmp_path / "cache").iterdir() if len(p.name) == 32]


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


@pytest.mark.timeout(60)
def test_sweep_removes_only_a_gone_process_s_old_scratch(tmp_path):
    """Removed: this host's, of a process that is gone, unchanged for STALE_AFTER_S. Kept: a
    live process's (this one's), a gone one's that changed lately, another host's, a name
    of another prefix or of no pid; and each (folder, prefix) is swept once a process."""
    host, dead = scratch._host(), _dead_pid()
    old = time.time() - scratch.STALE_AFTER_S - 60

    def made(name: str, stale: bool = True, folder: bool = True) -> Path:
        p = tmp_path / name
        if folder:
            p.mkdir()
            (p / "t.arrow").write_bytes(b"x" * 100)
        else:
            p.write_text("x")
        if stale:
            os.utime(p, (old, old))
        return p

    gone = [made(f"cgprof-reads-{host}.{dead}-aaaa"),
            made(f"cgprof-reads-{host}.{dead}-bbbb", folder=False)]
    kept = [made(f"cgprof-reads-{host}.{os.getpid()}-cccc"),
            made(f"cgprof-reads-{host}.{dead}-dddd", stale=False),
            made(f"cgprof-reads-{host}x.{dead}-eeee"),
            made(f"cgprof-reads-other-host.{dead}-ffff"),
            made(f"cgprof-duckdb-{host}.{dead}-1"),
            made(f"cgprof-reads-{dead}-gggg"),  # the names of before: no host
            made("cgprof-reads-x")]
    assert sorted(scratch._sweep(tmp_path, "cgprof-reads-", time.time())) == sorted(gone)
    assert not any(p.exists() for p in gone)
    assert all(p.exists() for p in kept)
    later = made(f"cgprof-reads-{host}.{dead}-hhhh")
    scratch._SWEPT.discard((str(tmp_path), "cgprof-reads-"))
    assert scratch.sweep(tmp_path, "cgprof-reads-") == [later]
    again = made(f"cgprof-reads-{host}.{dead}-iiii")
    assert scratch.sweep(tmp_path, "cgprof-reads-") == []  # once a process
    assert again.exists()
    assert scratch._sweep(tmp_path / "missing", "cgprof-reads-", time.time()) == []


@pytest.mark.timeout(60)
def test_scratch_names_say_who_made_them(tmp_path):
    """A folder, a file and a spill name carry ``<host>.<pid>-`` after their prefix, which
    is what the sweep reads back."""
    who = f"{scratch._host()}.{os.getpid()}-"
    d = scratch.folder(".tmp-", tmp_path, "0123-")
    fd, f = scratch.file(".out.json.", ".tmp", tmp_path)
    os.close(fd)
    assert d.is_dir() and d.name.startswith(f".tmp-{who}0123-")
    assert Path(f).name.startswith(f".out.json.{who}") and f.endswith(".tmp")
    assert scratch.name("cgprof-duckdb-", 7).name == f"cgprof-duckdb-{who}7"


_CHECKPOINT = """
import os, signal, sys, threading, time
import duckdb
from cgprof import scratch
scratch.stop_on_signals()
con = duckdb.connect()
con.execute("SET threads = 1")
con.execute("SET enable_progress_bar = false")
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
t0 = time.monotonic()
n = con.execute("SELECT count(*) FROM range(1000000000) t(x) WHERE x % 7 = 3").fetchone()[0]
print("query", n, time.monotonic() - t0 > 0.3, scratch.stop_status(), flush=True)
try:
    scratch.checkpoint(lambda m: print("not reached", flush=True))("stage")
except SystemExit as exc:
    print("exit", exc.code, flush=True)
    raise
"""


@pytest.mark.timeout(120)
def test_a_stop_is_noted_and_raised_at_the_next_checkpoint(tmp_path):
    """The handler notes SIGTERM and returns (an exception raised wherever a signal lands
    can hang an import's module lock, or become a DuckDB query's own error): a DuckDB query
    the signal lands in runs to its end, and the next checkpoint raises SystemExit(143)
    before its stage's progress."""
    proc = subprocess.run([sys.executable, "-c", _CHECKPOINT], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 143, proc.stderr
    # the count, a query that outlasted the signal's 0.2 s, the stop noted meanwhile
    assert proc.stdout.splitlines() == [f"query {len(range(3, 1_000_000_000, 7))} True 143",
                                        "exit 143"]
    assert proc.stderr == "cgprof: stopped by SIGTERM\n"


_LEFT = """
import os, sys
from pathlib import Path
from cgprof import scratch
where = Path(sys.argv[1])
d = scratch.folder(".tmp-", where, "key-")
(d / "t.parquet").write_bytes(b"x")
fd, f = scratch.file(".out.json.", ".tmp", where)
os.close(fd)
kept = scratch.folder(".tmp-", where, "kept-")
os.rename(kept, where / "0123456789abcdef0123456789abcdef")  # committed: renamed away
print(len(os.listdir(where)), flush=True)
"""


@pytest.mark.timeout(60)
def test_scratch_still_there_at_exit_is_removed(tmp_path):
    """Scratch a process made and neither removed nor renamed into place is removed at its
    exit (remove_left); what was renamed into place stays."""
    proc = subprocess.run([sys.executable, "-c", _LEFT, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3"]
    assert [p.name for p in tmp_path.iterdir()] == ["0123456789abcdef0123456789abcdef"]


_IN_DUCKDB = """
import os, signal, sys, threading
from cgprof.io import duck
real = duck._duckdb_sqlite

def attach(*args, **kwargs):
    con = real(*args, **kwargs)
    if os.environ.get("CGPROF_TEST_MAIN") == str(os.getpid()):  # the command's own attach
        # SIGTERM while DuckDB runs a query on this thread (it checks for signals meanwhile)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        con.execute("SELECT count(*) FROM range(300000000) t(x) WHERE x % 7 = 3").fetchall()
        sys.stderr.write("the query ended\\n")
    return con

duck._duckdb_sqlite = attach
os.environ["CGPROF_TEST_MAIN"] = str(os.getpid())
sys.argv = ["cgprof", *sys.argv[1:]]
from cgprof.cli import main
main()
"""


@pytest.mark.timeout(120)
def test_a_stop_that_lands_in_duckdb_stops_at_the_next_checkpoint(synth, tmp_path):
    """A signal that lands while DuckDB runs a query on the main thread (here: right after
    the command attaches the export). When the handler raised, DuckDB turned that into its
    own error (RuntimeError 'Query interrupted'), which the attach's fallback took for a
    file the scanner cannot read: the run went on through sqlite3 and ended with status 0.
    Now the query ends, and the run stops at its next checkpoint: status 143, no JSON on
    stdout, no scratch."""
    env = _env(tmp_path, cache=False)
    env["CGPROF_READER"] = "thread"  # the reads in threads: the attach is the main thread's
    proc = subprocess.run([sys.executable, "-c", _IN_DUCKDB, "analyze", str(synth), "--json",
                           "-"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.splitlines() == ["cgprof: stopped by SIGTERM", "the query ended"]
    assert proc.stdout == ""  # (the run that went on printed its JSON)
    assert _scratch(tmp_path) == []


_WHICH = """
import sys
from cgprof import scratch
real = scratch.stop_on_signals

def noted():
    print("takes the signals", flush=True)
    real()

scratch.stop_on_signals = noted
sys.argv = ["cgprof", *sys.argv[1:]]
from cgprof.cli import main
main()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv, takes", [(["cache", "info"], True), (["run", "--help"], False),
                                         (["record", "--help"], False), (["--help"], False)])
def test_which_commands_take_the_signals(tmp_path, argv, takes):
    """The analysing commands of a process's own command line stop at a checkpoint on
    SIGTERM and SIGHUP; `run` and `record` (which forwards them to nsys) keep the
    default, and so does a caller of the CLI in its own process (click's test runner)."""
    env = _env(tmp_path, cache=True)
    proc = subprocess.run([sys.executable, "-c", _WHICH, *argv], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("takes the signals" in proc.stdout.splitlines()) is takes


@pytest.mark.timeout(60)
def test_a_caller_in_its_own_process_keeps_its_handlers(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from cgprof.cli import main

    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    assert CliRunner().invoke(main, ["cache", "info"]).exit_code == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before
