"""cgprof record's step marker (cgprof/bootstrap/sitecustomize.py) in a real Python process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cgprof.record import BOOTSTRAP, program_env

pytestmark = pytest.mark.timeout(120)

PROGRAM = """
import sys
import torch
from torch.optim import optimizer as O
hooks = [h for h in O._global_optimizer_post_hooks.values()
         if getattr(h, "cgprof_mark", None) == "cgprof.record: step"]
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
print(len(hooks), "own" if "own_site" in sys.modules else "-")
"""


def _run(env: dict[str, str]) -> str:
    res = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, timeout=100)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_the_marker_hooks_the_optimizer_and_keeps_the_programs_own_sitecustomize(
        tmp_path: Path) -> None:
    pytest.importorskip("torch")
    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import sys\nsys.modules['own_site'] = sys\n")
    base = {**os.environ, "PYTHONPATH": str(own)}
    assert _run(program_env(base, mark_steps=True)) == "1 own"  # optimizer steps still run
    assert _run(program_env(base, mark_steps=False)) == "0 own"
    assert program_env(base, True)["PYTHONPATH"] == f"{BOOTSTRAP}{os.pathsep}{own}"


def test_the_marker_imports_nothing_until_the_program_does() -> None:
    code = "import sys; print('torch' in sys.modules, 'sitecustomize' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=program_env({**os.environ, "PYTHONPATH": ""}, True), timeout=60)
    assert res.stdout.split() == ["False", "True"], res.stderr


def _nsys() -> str | None:
    from cgprof.errors import CgprofError
    from cgprof.nsys import find_nsys

    try:
        return str(find_nsys(None, os.environ))
    except CgprofError:
        return None


@pytest.mark.timeout(600)
def test_a_recorded_loop_is_cut_at_its_optimizer_steps(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or _nsys() is None:
        pytest.skip("needs a CUDA GPU and nsys")
    from conftest import REPO, cgprof_in_process

    script = str(REPO / "scripts" / "examples" / "plain_loop.py")
    for mode, source, steps in (("eager", "marked", 22), ("graph", "launches", 20)):
        out = tmp_path / mode
        res = subprocess.run([sys.executable, "-m", "cgprof", "record", "-o", str(out), script,
                              "--task", "train", "--mode", mode], capture_output=True,
                             text=True, timeout=500)
        assert res.returncode == 0, res.stderr[-2000:]
        doc = cgprof_in_process(["analyze", f"{out}.sqlite", "--json", "-"], cache=False)
        import json

        st = json.loads(doc.stdout)["steps"]
        # 23 iterations: one range from each optimizer step's end to the next's (22); a
        # graphed loop replays its captured optimizer step, so its replays are the steps
        assert st["source"] == source
        assert sum(s["in_window"] for s in st["steps"]) == steps
