"""``cgprof record --untraced`` on a real GPU under real nsys (skips without both)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cgprof_in_process
from test_mark_steps import _nsys

pytestmark = pytest.mark.timeout(600)

DECODE = ["--layers", "2", "--steps", "40"]


def test_a_recorded_decode_loop_is_timed_untraced_eager_and_graphed(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or _nsys() is None:
        pytest.skip("needs a CUDA GPU and nsys")
    script = str(REPO / "scripts" / "examples" / "decode_loop.py")
    for mode, basis in (("eager", "NVTX range token"), ("graph", "NVTX range token")):
        out = tmp_path / mode
        res = subprocess.run([sys.executable, "-m", "cgprof", "record", "--untraced", "-o",
                              str(out), script, *DECODE, "--mode", mode],
                             capture_output=True, text=True, timeout=500)
        assert res.returncode == 0, res.stderr[-2000:]
        doc = json.loads(cgprof_in_process(["analyze", f"{out}.sqlite", "--json", "-"],
                                           cache=False).stdout)
        u = doc["untraced"]
        assert u["available"], u
        assert u["basis"] == basis and u["steps"] >= 30 and u["host_paced"]
        assert u["inflation"] > 0.9 and u["hook_share"] < 0.02
    d = json.loads(cgprof_in_process(["diff", f"{tmp_path / 'eager'}.sqlite",
                                      f"{tmp_path / 'graph'}.sqlite", "--json", "-"],
                                     cache=False).stdout)
    assert d["untraced_speedup"] > 1 and d["lines"][0].endswith(
        "(mean, untraced runs of the analysis windows)")
