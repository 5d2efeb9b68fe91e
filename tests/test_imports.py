"""What a `cgprof analyze --json` process imports, and the one-command import mode."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "traces" / "mlp_train_eager.sqlite"


def _imported(args: list[str], env: dict[str, str]) -> set[str]:
    """The modules a ``python -m cgprof ARGS`` process imports (``-X importtime``'s list)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "cgprof", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {m.group(1) for m in re.finditer(r"^import time:.*\|\s*([\w.]+)\s*$", proc.stderr,
                                            re.M)}


def test_cached_analyze_json_imports_only_what_it_uses(tmp_path):
    """A cached `cgprof analyze --json` reads its entry (Arrow files a small export's forked
    reader wrote on Linux, else Parquet): no DuckDB, no plotting, no torch, no rank
    machinery for a one-process trace; the first run reads SQLite through DuckDB, in a
    forked process on Linux (a small export: the CLI's own process never imports it), else
    in threads of its own."""
    env = {**os.environ, "CGPROF_CACHE": str(tmp_path / "cache")}
    env.pop("CGPROF_READER", None)
    args = ["analyze", str(TRACE), "--json", str(tmp_path / "a.json"), "--quiet", "--force"]
    first = _imported(args, env)
    assert "pandas" in first
    assert ("duckdb" in first) == (not sys.platform.startswith("linux"))
    threads = _imported(args, {**env, "CGPROF_READER": "thread",
                               "CGPROF_CACHE": str(tmp_path / "cache-threads")})
    assert "duckdb" in threads
    # the entry the forked reader wrote is Arrow files (Linux), the threads' is Parquet
    cached = _imported(args, env)
    linux = sys.platform.startswith("linux")
    assert "pandas" in cached and "pyarrow.ipc" in cached
    assert ("pyarrow.parquet" in cached) == (not linux)
    cached_parquet = _imported(args, {**env, "CGPROF_CACHE": str(tmp_path / "cache-threads")})
    assert "pandas" in cached_parquet and "pyarrow.parquet" in cached_parquet
    unwanted = {"duckdb", "torch", "plotly", "jinja2", "dask", "cgprof.ranks",
                "cgprof.parallel", "cgprof.report.html", "cgprof.report.figures",
                "cgprof.diff"}
    assert sorted(unwanted & cached) == [] and sorted(unwanted & cached_parquet) == []


def test_heavy_imports_change_nothing_outside_a_one_command_process():
    """Under the test runner (ONE_SHOT False) nothing is frozen and the environment stays."""
    from cgprof import commands

    assert commands.ONE_SHOT is False
    frozen = gc.get_freeze_count()
    with commands.heavy_imports():
        import json  # noqa: F401
    assert gc.get_freeze_count() == frozen and gc.isenabled()


def test_one_command_process_freezes_imports_and_keeps_the_environment():
    """`python -m cgprof` sets ONE_SHOT; the imports are frozen, the collector runs again,
    and OPENBLAS_NUM_THREADS (set while numpy loads) is gone afterwards."""
    code = (
        "import gc, os, sys\n"
        "import cgprof.commands as C\n"
        "C.ONE_SHOT = True\n"
        "with C.heavy_imports():\n"
        "    assert os.environ.get('OPENBLAS_NUM_THREADS') == '1'\n"
        "    import numpy\n"
        "print(gc.get_freeze_count() > 1000, gc.isenabled(),\n"
        "      'OPENBLAS_NUM_THREADS' in os.environ)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "False"]


def test_a_one_command_analyze_starts_openblas_on_one_thread(tmp_path):
    """The prefetch (pyarrow, hence numpy) runs inside heavy_imports: numpy's OpenBLAS must
    not start a thread per core first (16 spinning threads on a GPU host: 3.5 s of CPU for a
    1.7 s cached analysis). Read back from the loaded OpenBLAS at exit, first and cached."""
    import pytest

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: OpenBLAS starts one thread anyway")
    code = (
        "import atexit, ctypes, re, sys\n"
        "def report():\n"
        "    libs = sorted(set(re.findall(r'\\S*openblas\\S*\\.so\\S*',"
        " open('/proc/self/maps').read())))\n"
        "    get = [getattr(ctypes.CDLL(p), n) for p in libs for n in"
        " ('scipy_openblas_get_num_threads64_', 'openblas_get_num_threads')"
        " if hasattr(ctypes.CDLL(p), n)]\n"
        "    sys.stderr.write(f'BLAS_THREADS={get[0]() if get else None}\\n')\n"
        "atexit.register(report)\n"
        f"sys.argv = ['cgprof', 'analyze', {str(TRACE)!r}, '--json', {str(tmp_path / 'a.json')!r},"
        " '--quiet', '--force']\n"
        "from cgprof.cli import main\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(PYTHONPATH=str(REPO), CGPROF_CACHE=str(tmp_path / "cache"))
    for _ in ("first", "cached"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        found = re.search(r"BLAS_THREADS=(\w+)", proc.stderr)
        if found is None or found.group(1) == "None":
            pytest.skip("this numpy's BLAS does not say its thread count")
        assert found.group(1) == "1"


_MALLINFO = (
    "import ctypes, sys\n"
    "import cgprof.commands as C\n"
    "class MI(ctypes.Structure):\n"
    "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks',"
    " 'hblkhd', 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
    "libc = ctypes.CDLL('libc.so.6')\n"
    "libc.mallinfo2.restype = MI\n"
    "def mapped(size):\n"
    "    before = libc.mallinfo2().hblks\n"
    "    block = bytearray(size)\n"
    "    n = libc.mallinfo2().hblks - before\n"
    "    del block\n"
    "    return n\n"
    "C.ONE_SHOT = sys.argv[1] == 'one-shot'\n"
    "with C.heavy_imports():\n"
    "    pass\n"
    "print(mapped(16 << 20), mapped(64 << 20))\n"
)


def test_a_one_command_process_keeps_medium_blocks_in_the_heap():
    """In a one-command process glibc serves blocks up to 32 MiB from its heap (reused from
    stage to stage, no fresh page faults); above that, and in other processes, as before."""
    import ctypes

    import pytest

    try:
        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip("not glibc >= 2.33")
    out = {}
    for mode in ("one-shot", "library"):
        proc = subprocess.run([sys.executable, "-c", _MALLINFO, mode], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        out[mode] = proc.stdout.split()
    assert out["library"] == ["1", "1"]  # glibc's default: a first 16 MiB block is mapped
    assert out["one-shot"] == ["0", "1"]
