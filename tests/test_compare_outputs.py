"""scripts/compare_outputs.py: HEAD against HEAD is all the same; a tree with one renderer
string changed is caught, on that case only.

The current side is HEAD's own ``cgprof/`` (``git archive``, given by the script's hidden
``--side-b``), not the working tree: uncommitted edits that change an output must not fail
these tests. The whole matrix of the two smallest traces (40 cases) takes minutes on 2 cores,
so the first test runs one case of each kind (text, chunked JSON on stdout, HTML, check with
rules and with a saved baseline, the public API, diff, a folder of ranks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "compare_outputs.py"
E, G = "in/mlp_infer_eager.sqlite", "in/mlp_infer_graph.sqlite"
SUBSET = [
    f"analyze {G}",
    f"analyze {E} --json - --memory-limit 100MB",
    f"analyze {G} --html out.html",
    f"check {G} --json out.json *=0.5",
    f"check {E} --save-baseline base.json && check {G} --baseline base.json",
    f"api cgprof.analyze('{G}')",
    f"diff {E} {G} --json out.json",
    "analyze in/ranks --json out.json --jobs 2",
]


def head_tree(where: Path) -> Path:
    """HEAD's cgprof/ under ``where``."""
    tar = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", "cgprof"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=tar, check=True)
    return where


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "HEAD", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=280)


@pytest.mark.timeout(300)
def test_head_against_head_is_the_same(tmp_path):
    res = compare("--traces", "mlp_infer_*", "--jobs", "2", "--side-b", str(head_tree(tmp_path)),
                  "--cases", *SUBSET)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(SUBSET)} same, 0 different" in res.stdout, res.stdout
    assert "PATH LEAK" not in res.stdout


@pytest.mark.timeout(300)
def test_a_changed_renderer_string_differs(tmp_path):
    text = head_tree(tmp_path) / "cgprof" / "report" / "text.py"
    src = text.read_text()
    assert 'out.append("Verdict")' in src, "the string this test changes moved: pick another"
    text.write_text(src.replace('out.append("Verdict")', 'out.append("Verdict (changed)")'))
    res = compare("--traces", "mlp_infer_eager.sqlite", "--side-b", str(tmp_path),
                  "--cases", f"analyze {E}", f"analyze {E} --json -")
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"DIFFERENT  analyze {E}\n" in res.stdout, res.stdout
    assert f"same       analyze {E} --json -\n" in res.stdout, res.stdout
    assert "-Verdict\n" in res.stdout and "+Verdict (changed)\n" in res.stdout, res.stdout
    assert "1 same, 1 different" in res.stdout
