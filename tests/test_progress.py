"""The progress line appears on a terminal's stderr only, and never with --quiet."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest


def _run_with_tty_stderr(args: list[str]) -> tuple[int, str, bytes]:
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "cgprof", *args], stdout=subprocess.PIPE,
                              stderr=slave, timeout=120)
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
