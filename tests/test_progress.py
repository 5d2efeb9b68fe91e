"""The progress line appears on a terminal's stderr only, and never with --quiet."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

#: ``cgprof ARGS`` (sys.argv[2:]) under the environment's settings with ``chunk_steps``
#: sys.argv[1]: steps per chunk of an analysis over the memory cap.
_UNDER_SETTINGS = r"""
import sys
from cgprof.cli import main
from cgprof.settings import Settings, using
with using(Settings.from_env().replace(chunk_steps=int(sys.argv[1]))):
    main(sys.argv[2:], prog_name="cgprof")
"""


def _run_with_tty_stderr(args: list[str],
                         chunk_steps: int | None = None) -> tuple[int, str, bytes]:
    """``cgprof ARGS`` in a process of its own whose stderr is a terminal (a pty): its exit
    code, stdout and what the terminal got. chunk_steps: run under settings with that many
    steps per chunk (:data:`_UNDER_SETTINGS`)."""
    argv = ([sys.executable, "-m", "cgprof", *args] if chunk_steps is None else
            [sys.executable, "-c", _UNDER_SETTINGS, str(chunk_steps), *args])
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=slave, timeout=120)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return proc.returncode, proc.stdout.decode(), b"".join(chunks)


@pytest.fixture
def trace(traces_dir):
    return str(traces_dir / "mlp_train_graph.sqlite")


def test_progress_on_a_terminal(trace):
    code, out, err = _run_with_tty_stderr(["analyze", trace])
    assert code == 0
    assert b"cgprof: reading kernels ..." in err
    assert b"cgprof: measuring GPU gaps ..." in err
    assert "cgprof:" not in out.split("\n")[0]
    assert out.startswith("== ")


def test_quiet_on_a_terminal(trace):
    code, out, err = _run_with_tty_stderr(["analyze", trace, "--quiet"])
    assert code == 0
    assert err == b""


def test_no_progress_when_stderr_is_not_a_terminal(trace):
    proc = subprocess.run([sys.executable, "-m", "cgprof", "analyze", trace],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0
    assert proc.stderr == b""


@pytest.fixture
def eager(traces_dir):
    return str(traces_dir / "mlp_train_eager.sqlite")


def test_diff_progress_names_each_trace(eager, trace):
    code, out, err = _run_with_tty_stderr(["diff", eager, trace, "--json", "-"])
    assert code == 0
    assert b"cgprof: mlp_train_eager.sqlite: reading kernels ..." in err
    assert b"cgprof: mlp_train_graph.sqlite: measuring GPU gaps ..." in err
    # the baseline's stages come first, and the bar counts both traces' stages
    assert err.index(b"mlp_train_eager.sqlite: reading") < err.index(
        b"mlp_train_graph.sqlite: reading")
    assert b"/22 " in err
    assert err.endswith(b"\r\x1b[2K")  # wiped before the report
    json.loads(out)  # stdout: the JSON alone


def test_diff_quiet_and_not_a_terminal(eager, trace):
    code, _, err = _run_with_tty_stderr(["diff", eager, trace, "--quiet"])
    assert code == 0 and err == b""
    proc = subprocess.run([sys.executable, "-m", "cgprof", "diff", eager, trace],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == b""


def test_diff_error_line_starts_clean(eager, tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    code, out, err = _run_with_tty_stderr(["diff", eager, str(bad)])
    assert code != 0 and out == ""
    last = err.split(b"\r\x1b[2K")[-1].decode()
    assert last.startswith("Error: ") and str(bad) in last and "Traceback" not in last


def test_a_note_starts_on_a_line_of_its_own(trace, tmp_path, monkeypatch):
    """A note said while the bar is drawn (here: the trace is read in chunks under a tiny
    cap, 3 steps a chunk) wipes the bar's line first, so that it reads as a line of its own.
    (A process of its own: the bar is drawn only on a terminal's stderr.)"""
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    code, out, err = _run_with_tty_stderr(["diff", trace, trace, "--memory-limit", "100MB"],
                                          chunk_steps=3)
    assert code == 0, err
    text = err.decode()
    assert "read a chunk of steps at a time" in text
    for line in text.replace("\r\n", "\n").split("\n"):
        if "cgprof: note:" in line:
            # what precedes the note on its line was wiped (no bar text left before it)
            assert line.split("cgprof: note:")[0].split("\r\x1b[2K")[-1] == "", line
    # each chunk and slice is said, within its stage: the bar's count does not move
    draws = [d for d in text.split("\r\x1b[2K") if d.startswith("cgprof: ")]
    chunks = [d for d in draws if ": measuring the steps: chunk " in d]
    slices = [d for d in draws if ": measuring GPU gaps: slice " in d]
    assert len(chunks) >= 3 and "chunk 1 of " in chunks[0] and len(slices) >= 3
    for said in (chunks, slices):
        counts = {d.split("] ")[1].split(" ")[0] for d in said}
        assert len(counts) == 1, counts  # e.g. {"4/11"}


def test_check_progress_names_the_trace_and_the_baseline(eager, trace):
    code, out, err = _run_with_tty_stderr(["check", trace, "--baseline", eager,
                                           "--max", "launch_calls_per_step=1000", "--json", "-"])
    assert code in (0, 1), err  # (a regression rule may fail: exit 1 is a verdict)
    assert b"cgprof: mlp_train_graph.sqlite: reading kernels ..." in err
    assert b"cgprof: mlp_train_eager.sqlite: measuring GPU gaps ..." in err
    assert b"/22 " in err and err.endswith(b"\r\x1b[2K")
    json.loads(out)  # stdout: the JSON alone
    code, out, err = _run_with_tty_stderr(["check", trace, "--max",
                                           "launch_calls_per_step=1000", "--quiet"])
    assert code == 0 and err == b"" and "launch_calls_per_step" in out
