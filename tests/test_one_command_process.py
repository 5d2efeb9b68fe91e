"""A one-command `cgprof analyze` process: prefetch inside the fast-import block, and its quick
exit (no interpreter teardown) that keeps every output, exit status and atexit function."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "traces" / "mlp_train_eager.sqlite"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def _cgprof(args: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cgprof", *args], capture_output=True,
                          text=True, env=_env(**extra), cwd=REPO, timeout=300)


def test_prefetch_runs_inside_heavy_imports(monkeypatch, tmp_path):
    """The prefetch imports pyarrow, hence numpy: it must run with the collector paused and
    OpenBLAS set to one thread (heavy_imports), not before them."""
    import cgprof.commands
    import cgprof.io.prefetch
    from cgprof.cli import main

    inside = [False]
    calls: list[bool] = []
    real = cgprof.commands.heavy_imports

    @contextlib.contextmanager
    def recording():
        inside[0] = True
        try:
            with real():
                yield
        finally:
            inside[0] = False

    real_prefetch = cgprof.io.prefetch.prefetch

    def prefetch(path):
        calls.append(inside[0])
        return real_prefetch(path)

    monkeypatch.setattr(cgprof.commands, "heavy_imports", recording)
    monkeypatch.setattr(cgprof.io.prefetch, "prefetch", prefetch)
    res = CliRunner().invoke(main, ["analyze", str(TRACE), "--json", str(tmp_path / "a.json"),
                                    "--quiet"])
    assert res.exit_code == 0, res.output
    assert calls == [True]


def test_one_command_process_writes_everything_before_its_quick_exit(tmp_path):
    """stdout buffered (no PYTHONUNBUFFERED), the process ends by os._exit: the text report,
    the `wrote` line and the JSON document are all there, as under click's test runner, and
    an empty cache is filled by the writer thread before the process ends."""
    from cgprof.cli import main

    cache = tmp_path / "cache"
    out = tmp_path / "a.json"
    proc = _cgprof(["analyze", str(TRACE), "--json", str(out), "--quiet"],
                   CGPROF_CACHE=str(cache))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    ref = tmp_path / "ref.json"
    res = CliRunner().invoke(main, ["analyze", str(TRACE), "--json", str(ref), "--quiet"])
    assert res.exit_code == 0, res.output
    assert proc.stdout == res.output.replace(str(ref), str(out))
    assert proc.stdout.endswith(f"wrote {out}\n")
    assert out.read_bytes() == ref.read_bytes()
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "manifest.json").is_file()
    again = _cgprof(["analyze", str(TRACE), "--json", "-"], CGPROF_CACHE=str(cache))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(out.read_text())


def test_quick_exit_keeps_the_exit_status_and_error_line(tmp_path):
    """An error (exit 1, one line on stderr) and a failed check (exit 1) end as before."""
    missing = _cgprof(["analyze", str(tmp_path / "nope.sqlite"), "--quiet"])
    assert missing.returncode == 1
    assert missing.stderr.startswith("Error: ") and missing.stderr.count("\n") == 1
    failed = _cgprof(["check", str(TRACE), "--max", "launch_calls_per_step=0"])
    assert failed.returncode == 1, failed.stderr


def test_quick_exit_runs_atexit_functions(tmp_path):
    """atexit functions registered during the command still run (before os._exit)."""
    marker = tmp_path / "marker"
    code = (
        "import atexit, sys\n"
        "import cgprof.report.output as O\n"
        "real = O.check_writable\n"
        "def check_writable(p, force):\n"
        f"    atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
        "    return real(p, force)\n"
        "O.check_writable = check_writable\n"
        "from cgprof.cli import main\n"
        f"sys.argv = ['cgprof', 'analyze', {str(TRACE)!r}, '--json', "
        f"{str(tmp_path / 'a.json')!r}, '--quiet']\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "ran"


def test_exit_now_returns_outside_a_frozen_process():
    """Under the test runner nothing was frozen: exit_now leaves the process alone."""
    from cgprof import commands

    assert commands._FROZEN == [False]
    commands.exit_now(0)  # returns
